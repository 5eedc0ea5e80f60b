"""The adversarial suite's fixture: one :class:`~tests.adversarial.stack.Hostile` installation
for the whole suite (every attack runs against the same services, as a real one would),
started on the shared broker, Postgres and Docker daemon with its own home,
topics, schema, API port and object store, and removed afterwards."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from services.ledger.topics import delete_topics, ensure_topics
from services.settings import load_settings
from services.sink.db import drop_schema
from tests.adversarial.stack import Hostile, hostile_settings
from tests.conftest import require_stack
from tests.objectstore import PrivateStore
from tests.system.conftest import workdir


@pytest.fixture(scope="package")
def hostile(object_store: PrivateStore) -> Iterator[Hostile]:
    """A started installation (services, two agents, two tenants) for the suite."""
    base = load_settings()
    require_stack(base)
    work = workdir()
    settings = hostile_settings(base, work, object_store)
    asyncio.run(ensure_topics(settings))
    installation = Hostile(settings, work, object_store)
    try:
        yield installation.start()
    finally:
        installation.stop()
        asyncio.run(delete_topics(settings))
        asyncio.run(drop_schema(settings, settings.pg_schema))
