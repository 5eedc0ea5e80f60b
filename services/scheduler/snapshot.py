"""The scheduler's state as a snapshot: so a start reads it and the tail, not all history.

A start used to fold ``node-events`` and ``job-events`` from offset 0, so its time
and memory grew with the ledger. The leading scheduler now writes its state, with
the offset of every input partition it covers, to the compacted one-partition
``scheduler-state`` topic every ``scheduler_snapshot_s`` (:mod:`.service`); a start
reads the newest snapshot, then the tail from those offsets. What it holds:

- the open jobs (finished ones leave the state: only the ids of the latest
  ``done_kept`` finished jobs stay, and the owner and checkpoint of a job that
  stored one, for ``resume_from``), the queue in its order, the pending decisions;
- the fleet: every node's inventory, what it reported free, when it was last heard
  from, the reservations and the free-GPU index in its order (placement breaks ties
  by that order, so a restored scheduler places exactly as one that refolded);
- the leader fence (:mod:`projections.fence`): the epoch markers per partition.

A snapshot is a zlib-compressed JSON blob, cut into parts that fit a record
(``part/<seq>/<n>``), then a head (``head``: format, sequence, part count, digest),
written after its parts; parts of older snapshots are deleted (tombstones). A
snapshot that is missing, corrupt (a part missing, the digest wrong, anything that
does not parse), of another :data:`FORMAT` or ahead of the topics is ignored (one
log line) and the start refolds from offset 0, as before. ``replay --verify`` never
reads it.

Pure: encoding and decoding only; the service reads and writes the records.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import zlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from projections.fence import Fence
from schemas import codec
from schemas.errors import EventDecodeError
from schemas.events import Event, JobQueued, JobSubmitted, RetryScheduled
from schemas.types import CheckpointRef
from services.scheduler.core import FitCheck, JobEntry, SchedulerConfig, SchedulerState
from services.scheduler.fleet import Fleet
from services.scheduler.queue import PlacementQueue

FORMAT = 1
"""The layout of the blob; a snapshot of another format is ignored (refold from 0)."""

HEAD = b"head"

Positions = dict[tuple[str, int], int]
"""(topic suffix, partition) -> the next offset the snapshot has not folded."""


class SnapshotError(ValueError):
    """A snapshot that cannot be used; the message says why (it is logged once)."""


@dataclass
class Restored:
    """A decoded snapshot: the state, the fence and where the tail starts."""

    state: SchedulerState
    fence: Fence
    positions: Positions
    seq: int


# --------------------------------------------------------------------------- encode


def _when(at: datetime | None) -> str | None:
    return at.isoformat() if at is not None else None


def _event(event: Event | None, cache: dict[str, str]) -> str | None:
    """An event as base64 of its Avro record; cached by event id, since a job's events
    never change and the next snapshot encodes the same ones again."""
    if event is None:
        return None
    found = cache.get(event.event_id)
    if found is None:
        found = cache[event.event_id] = base64.b64encode(codec.encode(event)).decode()
    return found


def _job(entry: JobEntry, cache: dict[str, str]) -> dict[str, Any]:
    return {
        "tenant": entry.tenant,
        "submitted": _event(entry.submitted, cache),
        "phase": entry.phase,
        "attempt": entry.attempt,
        "queued": _event(entry.queued, cache),
        "not_before": _when(entry.not_before),
        "resume_from": entry.resume_from.model_dump(mode="json") if entry.resume_from else None,
        "avoid_nodes": sorted(entry.avoid_nodes),
        "avoid_providers": sorted(entry.avoid_providers),
        "vram_gb": entry.vram_gb,
        "retry": _event(entry.retry, cache),
        "failures": {str(a): c for a, c in entry.failures.items()},
        "cancelled": entry.cancelled,
        "scheduled": sorted(entry.scheduled_attempts),
        "accepted": sorted(entry.accepted_attempts),
        "ended": sorted(entry.ended_attempts),
    }


def encode(
    state: SchedulerState,
    fence: Fence,
    positions: Positions,
    cache: dict[str, str] | None = None,
) -> bytes:
    """The blob of ``state`` and ``fence`` as folded up to ``positions``. ``cache`` (event
    id -> encoded event) is kept by the caller between snapshots and pruned here to the
    events of the open jobs."""
    cache = {} if cache is None else cache
    jobs = {job_id: _job(entry, cache) for job_id, entry in state.jobs.items()}
    live = {
        e.event_id
        for entry in state.jobs.values()
        for e in (entry.submitted, entry.queued, entry.retry)
        if e is not None
    }
    for stale in cache.keys() - live:
        del cache[stale]
    body = {
        "format": FORMAT,
        "positions": [[topic, p, offset] for (topic, p), offset in sorted(positions.items())],
        "fence": fence.marks(),
        "fleet": state.fleet.rows(),
        "jobs": jobs,
        "done": list(state.done),
        "pending": list(state.pending),
        "checkpoints": {j: ref.model_dump(mode="json") for j, ref in state.checkpoints.items()},
        "owners": state.owners,
        "queue": state.queue.rows(),
    }
    return zlib.compress(json.dumps(body, separators=(",", ":")).encode(), 1)


def records(blob: bytes, seq: int, part_bytes: int) -> list[tuple[bytes, bytes]]:
    """(key, value) of every record of snapshot ``seq``: its parts, then its head."""
    chunks = [blob[i : i + part_bytes] for i in range(0, len(blob), part_bytes)] or [b""]
    head = {
        "format": FORMAT,
        "seq": seq,
        "parts": len(chunks),
        "sha256": hashlib.sha256(blob).hexdigest(),
    }
    out = [(part_key(seq, n), chunk) for n, chunk in enumerate(chunks)]
    return [*out, (HEAD, json.dumps(head).encode())]


def part_key(seq: int, n: int) -> bytes:
    """The key of part ``n`` of snapshot ``seq``."""
    return f"part/{seq}/{n}".encode()


# --------------------------------------------------------------------------- decode


def assemble(latest: dict[bytes, bytes]) -> tuple[int, bytes] | None:
    """(seq, blob) of the snapshot whose head is in ``latest`` (key -> latest value of
    the topic), None when there is none; :class:`SnapshotError` when it cannot be used."""
    raw = latest.get(HEAD)
    if raw is None:
        return None
    try:
        head = json.loads(raw)
        version, seq, parts, digest = head["format"], head["seq"], head["parts"], head["sha256"]
    except (ValueError, KeyError, TypeError) as exc:
        raise SnapshotError(f"its head does not parse ({exc})") from None
    if version != FORMAT:
        raise SnapshotError(f"it is of format {version!r}, this scheduler reads {FORMAT}")
    if not isinstance(seq, int) or not isinstance(parts, int):
        raise SnapshotError("its head names no sequence or part count")
    chunks = []
    for n in range(parts):
        chunk = latest.get(part_key(seq, n))
        if chunk is None:
            raise SnapshotError(f"part {n} of {parts} of snapshot {seq} is missing")
        chunks.append(chunk)
    blob = b"".join(chunks)
    if hashlib.sha256(blob).hexdigest() != digest:
        raise SnapshotError(f"snapshot {seq} does not match its digest")
    return seq, blob


def _at(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value is not None else None


def _decoded(value: str | None, cls: type[Event]) -> Any:
    if value is None:
        return None
    event = codec.decode_event(base64.b64decode(value), trusted=True)
    if not isinstance(event, cls):
        raise SnapshotError(f"a {cls.__name__} of the snapshot decodes as {event.type}")
    return event


def _restore_job(job_id: str, row: dict[str, Any]) -> JobEntry:
    submitted = _decoded(row["submitted"], JobSubmitted)
    resume = row["resume_from"]
    return JobEntry(
        job_id,
        row["tenant"],
        submitted.spec,
        submitted,
        phase=row["phase"],
        attempt=row["attempt"],
        queued=_decoded(row["queued"], JobQueued),
        not_before=_at(row["not_before"]),
        resume_from=CheckpointRef.model_validate(resume) if resume is not None else None,
        avoid_nodes=frozenset(row["avoid_nodes"]),
        avoid_providers=frozenset(row["avoid_providers"]),
        vram_gb=row["vram_gb"],
        retry=_decoded(row["retry"], RetryScheduled),
        failures={int(a): c for a, c in row["failures"].items()},
        cancelled=row["cancelled"],
        scheduled_attempts=set(row["scheduled"]),
        accepted_attempts=set(row["accepted"]),
        ended_attempts=set(row["ended"]),
    )


def decode(blob: bytes, seq: int, config: SchedulerConfig, fit_check: FitCheck) -> Restored:
    """The state, fence and positions of a blob; :class:`SnapshotError` when it cannot be
    used (its content is the platform's own, but a damaged one must not crash a start)."""
    try:
        return _restore(json.loads(zlib.decompress(blob)), seq, config, fit_check)
    except SnapshotError:
        raise
    except (ValueError, KeyError, TypeError, IndexError, zlib.error, binascii.Error) as exc:
        raise SnapshotError(
            f"snapshot {seq} does not parse ({type(exc).__name__}: {exc})"
        ) from None
    except EventDecodeError as exc:
        raise SnapshotError(f"an event of snapshot {seq} does not decode ({exc})") from None


def _restore(body: dict[str, Any], seq: int, config: SchedulerConfig, fit: FitCheck) -> Restored:
    if body["format"] != FORMAT:
        raise SnapshotError(f"its body is of format {body['format']!r}, not {FORMAT}")
    state = SchedulerState(config, fit)
    state.fleet = Fleet.from_rows(body["fleet"])
    state.jobs = {job_id: _restore_job(job_id, row) for job_id, row in body["jobs"].items()}
    state.done = dict.fromkeys(body["done"])
    state.pending = dict.fromkeys(body["pending"])
    state.checkpoints = {
        j: CheckpointRef.model_validate(ref) for j, ref in body["checkpoints"].items()
    }
    state.owners = dict(body["owners"])
    state.queue = PlacementQueue.from_rows(body["queue"], lambda j: state.request(state.jobs[j]))
    positions = {(topic, p): offset for topic, p, offset in body["positions"]}
    fence = Fence((p, o, e) for p, o, e in body["fence"])
    return Restored(state, fence, positions, seq)
