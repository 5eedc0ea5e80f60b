"""The facts one attempt produces, in the real agent's order and with its event ids.

:class:`AttemptFacts` builds events only (no I/O, no clock): the live simulator
(:mod:`.fleet`) emits them over time, and :mod:`.histories` emits a whole
attempt at once for load generation. Both therefore follow the agent's
contract: AttemptAccepted, ComputeHeld, ImageResolved, ContainerStarted,
heartbeats (seq from 0, no gaps), log chunks (seq from 0, ``first_line`` from 1),
ProcessExited, OutputStored, final meter ticks (summing exactly to the held
time, via the agent's own :mod:`services.agent.meter`), ComputeReleased.
Every fact is built by the agent's own builder (:func:`services.agent.facts.agent_fact`), so
a simulated attempt carries the ids the real agent would give it and re-emitting is
idempotent.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, TypeVar

from schemas.events import (
    AttemptAccepted,
    AttemptHeartbeat,
    AttemptScheduled,
    ComputeHeld,
    ComputeReleased,
    ContainerStarted,
    Event,
    ImageResolved,
    LogChunk,
    MeterTick,
    OutputStored,
    ProcessExited,
    ReleaseReason,
)
from services.agent import meter
from services.agent.facts import agent_fact

E = TypeVar("E", bound=Event)


class Outcome(StrEnum):
    """How a simulated attempt ends (the failure mix)."""

    SUCCESS = "success"
    USER_ERROR = "user_error"
    """exit 1 with a ModuleNotFoundError traceback -> missing_module (user)."""
    OOM = "oom"
    """exit 1 with a CUDA out-of-memory line -> gpu_out_of_memory (user)."""
    NODE_LOST = "node_lost"
    """the node stops heartbeating and never reports again -> node_lost (platform), retried."""


ERROR_LINES: dict[Outcome, list[str]] = {
    Outcome.USER_ERROR: [
        "Traceback (most recent call last):",
        '  File "/app/train.py", line 3, in <module>',
        "    import torchvision",
        "ModuleNotFoundError: No module named 'torchvision'",
    ],
    Outcome.OOM: [
        "Traceback (most recent call last):",
        '  File "/app/train.py", line 41, in <module>',
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB "
        "(GPU 0; 79.15 GiB total capacity; 77.01 GiB already allocated)",
    ],
}


@dataclass
class AttemptFacts:
    """Event builder for one attempt of one simulated node."""

    scheduled: AttemptScheduled
    node_id: str
    tick_s: float = 1.0
    held_at: datetime | None = None
    heartbeat_seq: int = 0
    next_tick: int = 0
    log_seq: dict[str, int] = field(default_factory=dict)
    log_line: dict[str, int] = field(default_factory=dict)

    def fact(self, cls: type[E], at: datetime, **fields: Any) -> E:
        """One fact of this attempt, as the agent on ``node_id`` would build it."""
        return agent_fact(cls, self.scheduled, self.node_id, at, **fields)

    def start(self, at: datetime) -> list[Event]:
        """Accepted, held (the meter starts), image resolved, container started."""
        s = self.scheduled
        self.held_at = at
        return [
            self.fact(AttemptAccepted, at, node_id=self.node_id),
            self.fact(
                ComputeHeld,
                at,
                node_id=self.node_id,
                gpu_count=s.gpu_count,
                gpu_model=s.gpu_model,
                gpu_indices=s.gpu_indices,
            ),
            self.fact(ImageResolved, at, image=s.runnable.image, image_id="sha256:sim"),
            self.fact(
                ContainerStarted,
                at,
                container_id=f"sim-{s.job_id[:12]}-{s.attempt}",
                node_id=self.node_id,
            ),
        ]

    def heartbeat(self, at: datetime) -> AttemptHeartbeat:
        """The attempt's next heartbeat, numbered as the agent numbers them."""
        seq = self.heartbeat_seq
        self.heartbeat_seq += 1
        return self.fact(AttemptHeartbeat, at, node_id=self.node_id, seq=seq)

    def log(self, at: datetime, lines: list[str], stream: str = "stdout") -> LogChunk:
        """The stream's next log chunk, numbered and line-counted as the agent does."""
        seq = self.log_seq.get(stream, 0)
        first = self.log_line.get(stream, 1)
        self.log_seq[stream] = seq + 1
        self.log_line[stream] = first + len(lines)
        return self.fact(
            LogChunk,
            at,
            stream=stream,
            seq=seq,
            first_line=first,
            line_count=len(lines),
            data="".join(line + "\n" for line in lines),
        )

    def due_ticks(self, now: datetime) -> list[MeterTick]:
        """Full meter ticks that ended by ``now`` and were not emitted yet."""
        assert self.held_at is not None
        ticks = meter.due_ticks(
            self.held_at, now, self.tick_s, self.scheduled.gpu_count, self.next_tick
        )
        return self._ticks(ticks)

    def _ticks(self, ticks: list[meter.Tick]) -> list[MeterTick]:
        s = self.scheduled
        if ticks:
            self.next_tick = ticks[-1].index + 1
        return [meter.tick_fact(t, s, self.node_id, s.gpu_model, t.interval_start) for t in ticks]

    def finish(self, at: datetime, outcome: Outcome) -> list[Event]:
        """The end of a process that exited: error log, exit, outputs, final ticks, release."""
        assert self.held_at is not None
        lines = ERROR_LINES.get(outcome, [])
        events: list[Event] = []
        if lines:
            events.append(self.log(at, lines, "stderr"))
        events.append(
            self.fact(
                ProcessExited,
                at,
                exit_code=0 if outcome == Outcome.SUCCESS else 1,
                runtime_s=(at - self.held_at).total_seconds(),
                last_log_lines=lines[-20:],
            )
        )
        if outcome == Outcome.SUCCESS and any(o.path for o in self.scheduled.runnable.outputs):
            for out in self.scheduled.runnable.outputs:
                digest = hashlib.sha256(f"{self.scheduled.job_id}/{out.path}".encode())
                events.append(
                    self.fact(
                        OutputStored,
                        at,
                        path=out.path,
                        uri=f"file:///sim/{self.scheduled.job_id}/{self.scheduled.attempt}/{out.path}",
                        sha256=digest.hexdigest(),
                        bytes=1,
                    )
                )
        return events + self.release(at, "exited")

    def release(self, at: datetime, reason: ReleaseReason) -> list[Event]:
        """Final meter ticks (the last one partial and final), then ComputeReleased."""
        assert self.held_at is not None
        s = self.scheduled
        ticks = meter.final_ticks(self.held_at, at, self.tick_s, s.gpu_count, self.next_tick)
        released = self.fact(ComputeReleased, at, node_id=self.node_id, reason=reason)
        return [*self._ticks(ticks), released]
