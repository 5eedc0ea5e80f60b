"""Settings of the node agent, from ``GRIDLEDGER_AGENT_*`` environment variables.

The shared :class:`services.settings.Settings` says where Kafka and the home
folder are; these say what this node is and how it runs attempts.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

MIB = 1024 * 1024

PullPolicy = Literal["never", "if_not_present"]
ShutdownPolicy = Literal["detach", "stop"]


class AgentSettings(BaseSettings):
    """What the node is and how it runs attempts. Every field has a working default."""

    model_config = SettingsConfigDict(env_prefix="GRIDLEDGER_AGENT_", extra="ignore", frozen=True)

    node_id: str = Field(default_factory=socket.gethostname, min_length=1, max_length=200)
    provider: str = ""
    """Provider label; empty: the declared inventory's, else 'local'."""
    region: str = ""
    inventory_file: Path | None = None
    """Declared inventory (JSON or YAML), used when NVML is unavailable."""
    heartbeat_interval_s: float = Field(2.0, gt=0)
    """AttemptHeartbeat period per running attempt."""
    node_heartbeat_interval_s: float = Field(5.0, gt=0)
    meter_interval_s: float = Field(5.0, gt=0)
    log_quota_bytes: int = Field(10 * MIB, ge=0)
    """Log bytes kept per attempt (stdout and stderr together); the rest is dropped and counted."""
    log_chunk_bytes: int = Field(64 * 1024, ge=1024, le=64 * 1024)
    log_flush_s: float = Field(0.1, gt=0)
    pull_policy: PullPolicy = "never"
    stop_grace_s: float = Field(10.0, ge=0)
    """Seconds between SIGTERM and SIGKILL when the agent stops a container."""
    checkpoint_poll_s: float = Field(1.0, gt=0)
    stats_interval_s: float = Field(2.0, gt=0)
    shutdown_policy: ShutdownPolicy = "detach"
    """detach: leave running containers for the next agent start to re-attach;
    stop: stop them and release their compute (reason agent_shutdown)."""
    publish_timeout_s: float = Field(10.0, gt=0)
    """A spool batch the broker has not acknowledged within this is retried."""
    agent_version: str = "0.1.0"
    token: str = Field("", repr=False)
    """This node's agent credential for the API (``gridledger secret agent-token NODE``);
    empty: derived from the secrets key file, when this host has it (the local stack)."""
    secrets_timeout_s: float = Field(60.0, gt=0)
    """How long the agent keeps trying to fetch an attempt's secrets from an API that is
    away or lags; then the attempt fails ``container_start_failed`` (platform, retried)."""

    def state_dir(self, home: Path) -> Path:
        """``<home>/agent/<node_id>``: the attempt journal of this node."""
        return home / "agent" / _safe(self.node_id)

    def spool_dir(self, home: Path) -> Path:
        """The node's spool folder, under the home."""
        return home / "spool" / _safe(self.node_id)

    def work_dir(self, home: Path) -> Path:
        """Output folders mounted into containers."""
        return home / "work" / _safe(self.node_id)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
