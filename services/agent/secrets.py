"""Fetching an attempt's secrets from the API at dispatch (services/api/handlers/secrets.py).

The agent authenticates as its node (``X-Gridledger-Node`` and the node's agent token),
asks for one attempt by job id and number, and gets the values by environment
variable; which names, for which tenant, the API reads from the job's own record. The
values live only in memory until they are handed to Docker as the container's
environment: never spooled, journaled or logged.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import aiohttp

from services.agent.errors import ContainerStartError
from services.agent.settings import AgentSettings
from services.backoff import Backoff
from services.secretstore import SecretsKeyError, load_key
from services.settings import Settings

log = logging.getLogger(__name__)

RETRIED_STATUSES = frozenset({409, 429, 500, 502, 503, 504})
"""Answers worth asking again: the sink has not recorded the attempt yet, or the API or its
Postgres is away for a moment."""


@dataclass(frozen=True)
class SecretsClient:
    """The resolve call of one node."""

    settings: Settings
    agent: AgentSettings

    @property
    def url(self) -> str:
        """The API's resolve route."""
        base = self.settings.api_url or f"http://{self.settings.api_host}:{self.settings.api_port}"
        return base.rstrip("/") + "/v1/agent/secrets"

    def token(self) -> str:
        """The node's credential: the setting, else derived from this host's key file."""
        if self.agent.token:
            return self.agent.token
        try:
            return load_key(self.settings).agent_token(self.agent.node_id)
        except SecretsKeyError as exc:
            raise unavailable(
                "this node has no agent credential: set GRIDLEDGER_AGENT_TOKEN to the output "
                f"of `gridledger secret agent-token {self.agent.node_id}` ({exc})"
            ) from exc

    async def resolve(self, job_id: str, attempt: int) -> dict[str, str]:
        """The attempt's secrets by variable; ContainerStartError ``secret_missing`` (the
        tenant has not set one) or ``secrets_unavailable`` (no answer in time)."""
        headers = {
            "Authorization": f"Bearer {self.token()}",
            "X-Gridledger-Node": self.agent.node_id,
        }
        body = {"job_id": job_id, "attempt": attempt}
        backoff = Backoff(0.2, 2.0)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.agent.secrets_timeout_s
        last, tries = "no answer", 0
        timeout = aiohttp.ClientTimeout(total=15)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                try:
                    # Never along a redirect: the node's credential would go with it.
                    post = session.post(self.url, json=body, headers=headers, allow_redirects=False)
                    async with post as reply:
                        if reply.status == 200:
                            return _values(await reply.json())
                        last = f"HTTP {reply.status}: {(await reply.text())[:300]}"
                        if reply.status not in RETRIED_STATUSES:
                            raise unavailable(f"the API refused the node's request ({last})")
                except (aiohttp.ClientError, TimeoutError) as exc:
                    last = f"{type(exc).__name__}: {exc}"
                if loop.time() >= deadline:
                    raise unavailable(
                        f"no answer from the API at {self.url} within "
                        f"{self.agent.secrets_timeout_s:.0f} s ({last})"
                    )
                log.info("secrets of %s/%s not fetched yet (%s); retrying", job_id, attempt, last)
                await asyncio.sleep(backoff.delay(tries))
                tries += 1


def _values(answer: dict[str, object]) -> dict[str, str]:
    missing = answer.get("missing") or []
    if isinstance(missing, list) and missing:
        named = ", ".join(f"{m['secret']} (for {m['variable']})" for m in missing)
        raise ContainerStartError("secret_missing", named)
    values = answer.get("values") or {}
    assert isinstance(values, dict)
    return {str(k): str(v) for k, v in values.items()}


def unavailable(message: str) -> ContainerStartError:
    """The platform-side failure of fetching secrets (retried on another node)."""
    return ContainerStartError("secrets_unavailable", message)
