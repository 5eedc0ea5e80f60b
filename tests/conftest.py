"""Fixtures shared by every test package.

- ``settings``: the settings every service on this machine uses (``load_settings()``).
- ``topics``: a copy of them with a unique ``topic_prefix`` whose topics exist
  for the test and are deleted afterwards, so tests never see each other's events.

Tests marked ``integration`` need the local stack (``gridledger dev up``). When
it is down they are skipped on a developer machine and fail in CI (``CI=true``),
where a missing stack is a broken pipeline, not a reason to pass.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio
from hypothesis import Phase
from hypothesis import settings as hypothesis_settings

from infra.stack import probe
from services.ledger.topics import delete_topics, ensure_topics
from services.settings import Settings, load_settings
from tests.objectstore import PrivateStore

_stack_problems: list[str] | None = None

# The mutation run (python -m bench.mutation run) re-runs the property tests once per mutant:
# it asks for fewer examples (a mutant they then miss is reported as a survivor, never hidden),
# the same ones for every mutant (derandomized: a verdict is reproducible), and does not
# shrink a failing example (the failure alone kills the mutant).
hypothesis_settings.register_profile(
    "mutation",
    max_examples=15,
    derandomize=True,
    phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.target),
)
if os.environ.get("GRIDLEDGER_HYPOTHESIS_PROFILE"):
    hypothesis_settings.load_profile(os.environ["GRIDLEDGER_HYPOTHESIS_PROFILE"])


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def require_stack(settings: Settings) -> None:
    """Skip (or in CI fail) the current test when the local stack does not answer."""
    global _stack_problems
    if _stack_problems is None:
        _stack_problems = probe(settings)
    if not _stack_problems:
        return
    message = (
        "the local stack is down ("
        + "; ".join(_stack_problems)
        + f") for GRIDLEDGER_HOME={settings.home}; start it with `gridledger dev up`"
    )
    if in_ci():
        pytest.fail(f"CI=true and {message}", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def settings() -> Settings:
    """Settings of the local stack, as every service on this machine reads them."""
    return load_settings()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("integration") is not None:
        require_stack(load_settings())


@pytest_asyncio.fixture
async def topics(settings: Settings) -> AsyncIterator[Settings]:
    """Settings with a fresh ``t-<uuid8>.`` topic prefix; its topics exist during the test."""
    require_stack(settings)
    isolated = settings.model_copy(update={"topic_prefix": f"t-{uuid.uuid4().hex[:8]}."})
    await ensure_topics(isolated)
    try:
        yield isolated
    finally:
        await delete_topics(isolated)


@pytest.fixture(scope="session")
def object_store(settings: Settings) -> Iterator[PrivateStore]:
    """A private SeaweedFS S3 server for the session (agents and the API store and sign there)."""
    store = PrivateStore(settings)
    try:
        asyncio.run(store.start())
        yield store
    finally:
        store.stop()
