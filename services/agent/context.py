"""What every part of a running agent shares: settings, adapters, the spool, the clock."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from services.agent.artifacts import ArtifactStore
from services.agent.facts import agent_producer
from services.agent.inventory import Inventory
from services.agent.journal import Journal
from services.agent.runtime import DockerRuntime
from services.agent.secrets import SecretsClient
from services.agent.settings import AgentSettings
from services.agent.spool import Spool
from services.clock import utcnow
from services.settings import Settings

T = TypeVar("T")


@dataclass
class AgentContext:
    """What every part of the agent shares: settings, spool, runtime, store, GPUs and journal."""

    settings: Settings
    agent: AgentSettings
    spool: Spool
    journal: Journal
    runtime: DockerRuntime
    store: ArtifactStore
    inventory: Inventory
    executor: ThreadPoolExecutor
    secrets: SecretsClient
    clock: Callable[[], datetime] = field(default=utcnow)

    @property
    def node_id(self) -> str:
        """This agent's node id."""
        return self.agent.node_id

    @property
    def producer(self) -> str:
        """The ``producer`` of this agent's facts."""
        return agent_producer(self.agent.node_id)

    @property
    def work_dir(self) -> Path:
        """The agent's working folder (attempt outputs, downloaded checkpoints)."""
        return self.agent.work_dir(self.settings.home)

    async def blocking(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking call (docker, files) on the agent's thread pool."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)


class GpuPool:
    """Which of the node's GPUs are reserved by which attempt."""

    def __init__(self, indices: list[int]) -> None:
        self._all = sorted(indices)
        self._owner: dict[int, str] = {}

    def free(self) -> list[int]:
        """GPU indices no attempt holds."""
        return [i for i in self._all if i not in self._owner]

    def reserve(self, key: str, count: int, preferred: list[int]) -> list[int] | None:
        """Reserve ``count`` GPUs for ``key``: the scheduler's choice when free, else any free."""
        free = self.free()
        wanted = [i for i in preferred if i in free][:count]
        if len(wanted) < count:
            wanted += [i for i in free if i not in wanted][: count - len(wanted)]
        if len(wanted) < count:
            return None
        for index in wanted:
            self._owner[index] = key
        return wanted

    def restore(self, key: str, indices: list[int]) -> None:
        """Hold ``indices`` for ``key`` again, as the journal recorded them (after a restart)."""
        for index in indices:
            self._owner[index] = key

    def release(self, key: str) -> None:
        """Free every GPU ``key`` holds."""
        for index in [i for i, owner in self._owner.items() if owner == key]:
            del self._owner[index]
