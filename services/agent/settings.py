"""Settings of the node agent, from ``GRIDLEDGER_AGENT_*`` environment variables.

The shared :class:`services.settings.Settings` says where Kafka and the home
folder are; these say what this node is and how it runs attempts.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

MIB = 1024 * 1024
GIB = 1024 * MIB

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
    max_output_file_bytes: int = Field(16 * GIB, ge=0)
    """The largest output or checkpoint file stored; a larger one is refused (over_file_cap,
    the user's side) from its size alone, before a byte of it is read."""
    max_output_job_bytes: int = Field(64 * GIB, ge=0)
    """All files an attempt stores (checkpoints and outputs), at most; the file that would
    pass it is refused (over_job_cap)."""
    max_checkpoint_files: int = Field(1000, ge=1)
    """Checkpoint files an attempt may store (or have refused); at the next one the folder is
    refused (over_checkpoint_count, the user's side) and watched no more. Each stored
    checkpoint is an event in the job's history: this keeps one job from flooding the
    ledger, and its view within the record limit."""
    upload_timeout_s: float = Field(240.0, gt=0)
    """Reading one checkpoint, or all outputs of an attempt, ends by this deadline (an output
    not stored by then fails as store_failed). Keep it under the processors'
    watchdog_finishing_timeout_s (300 s), which bounds the whole finishing phase."""
    container_user: str = Field("65532:65532", pattern=r"^[1-9][0-9]*:[1-9][0-9]*$")
    """uid:gid the job's container runs as (never root); its output folder is created owned by
    it, mode 0750. An agent that is not root itself runs containers as its own uid:gid."""
    pids_limit: int = Field(4096, ge=16)
    """Processes and threads one container may have at once (a fork bomb stops there)."""

    def user(self) -> tuple[int, int]:
        """The (uid, gid) of job containers: :attr:`container_user`, or the agent's own ids when
        it is not root (it could not give the output folder to another uid)."""
        if os.geteuid() != 0:
            return os.geteuid(), os.getegid()
        uid, gid = self.container_user.split(":")
        return int(uid), int(gid)

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
