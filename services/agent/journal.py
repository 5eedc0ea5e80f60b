"""Per-attempt state that survives an agent restart.

One JSON file per attempt under ``<home>/agent/<node_id>/attempts/``, replaced
atomically. It is written when the attempt is accepted (so the same attempt is
never run twice, even across restarts) and as the attempt moves on: which
lifecycle facts were emitted, when compute was held, the heartbeat and meter
counters, how far the logs were emitted, which checkpoints were stored.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, Field

from schemas.events import AttemptScheduled
from services.agent.logs import LogState

PHASES = ("accepted", "running", "done")


class JournalEntry(BaseModel):
    """The journal entry of one attempt."""

    scheduled: AttemptScheduled
    phase: str = "accepted"
    """accepted → running (container created) → done (ComputeReleased spooled)."""
    emitted: list[str] = Field(default_factory=list)
    """Lifecycle facts already spooled, by type (and name for checkpoints/outputs)."""
    held_at: datetime | None = None
    gpu_indices: list[int] = Field(default_factory=list)
    container_id: str = ""
    started_at: datetime | None = None
    heartbeat_seq: int = 0
    next_tick: int = 0
    logs: LogState = Field(default_factory=LogState)
    checkpoints: dict[str, list[int]] = Field(default_factory=dict)
    """Stored checkpoint name → [size, mtime_ns] when it was stored."""
    stored_bytes: int = 0
    """Bytes of every checkpoint and output the attempt stored (against max_output_job_bytes)."""
    cancel_requested: bool = False
    cancel_reason: str = ""

    @property
    def job_id(self) -> str:
        """The attempt's job."""
        return self.scheduled.job_id

    @property
    def attempt(self) -> int:
        """The attempt's number."""
        return self.scheduled.attempt

    @property
    def key(self) -> str:
        """The attempt's 'job_id/attempt' key."""
        return attempt_key(self.job_id, self.attempt)


def attempt_key(job_id: str, attempt: int) -> str:
    """The key an attempt is known by in the journal, the GPU table and the heartbeat."""
    return f"{job_id}/{attempt}"


def _file_name(job_id: str, attempt: int) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in job_id)
    return f"{safe}.{attempt}.json"


class Journal:
    """The attempt files of one node."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory / "attempts"
        self.directory.mkdir(parents=True, exist_ok=True)

    def path(self, job_id: str, attempt: int) -> Path:
        """The attempt's journal file."""
        return self.directory / _file_name(job_id, attempt)

    def exists(self, job_id: str, attempt: int) -> bool:
        """Whether the attempt was ever journalled here (a redelivered placement is not run
        twice)."""
        return self.path(job_id, attempt).exists()

    def save(self, record: JournalEntry, durable: bool = False) -> None:
        """Replace the attempt's file atomically; ``durable`` also fsyncs it."""
        path = self.path(record.job_id, record.attempt)
        tmp = path.with_suffix(".tmp")
        with tmp.open("w") as fh:
            fh.write(record.model_dump_json())
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)

    def load(self, job_id: str, attempt: int) -> JournalEntry | None:
        """The attempt's record, or None when it has none."""
        path = self.path(job_id, attempt)
        if not path.exists():
            return None
        return JournalEntry.model_validate_json(path.read_text())

    def unfinished(self) -> list[JournalEntry]:
        """Every journalled attempt not yet finished: what a restarted agent resumes."""
        records = []
        for path in sorted(self.directory.glob("*.json")):
            record = JournalEntry.model_validate_json(path.read_text())
            if record.phase != "done":
                records.append(record)
        return records
