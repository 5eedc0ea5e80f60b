"""``gridledger replay --file FILE``: refold an exported history without the cluster.

In the manner of Temporal's replayer: the file's events are decoded and folded with
the same pure code the processors, the sink and ``replay --verify`` use
(``projections.job_state.project``, the sink's ``account``, ``projections.decisions``
through :mod:`services.replay.decisions`), and the results are compared with the
views the file recorded at export time. Equal: exit 0. Otherwise each difference is
named by its path in the file (``jobs[0].view.attempts[0].exit_code``), with the
exported and the replayed value.

Nothing here reads Kafka or Postgres: the file is the only input. It is hostile input
like any other: every payload is validated (never decoded on the trusted path), and
each record's Avro bytes are decoded again and compared with its payload.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from projections import job_state
from projections.history import is_job_event
from schemas import codec
from schemas.errors import EventDecodeError
from schemas.events import EVENT_TYPES, Event, FailureClassified, MeterTick
from schemas.views import AccountingRecord, JobView
from services.replay.decisions import drift_of, implied, recorded
from services.sink.writer import account, default_policy

FORMAT = "gridledger-history"
FORMAT_VERSION = 1
"""Raised only when a reader of the old version could no longer read a file."""

CLASSIFICATION_FIELDS = ("attempt", "failure_class", "attribution", "retryable", "rule_id")
SHOWN = 50
"""Differences listed per job; the count says how many there are."""


@dataclass(frozen=True)
class Folded:
    """What a job's history folds to."""

    view: JobView
    accounting: AccountingRecord
    implied: list[Event]
    """The decisions the current rules derive from the history."""


def fold(history: Sequence[Event], ticks: Sequence[MeterTick]) -> Folded:
    """The view, accounting record and implied decisions of a non-empty history."""
    view = job_state.project(history)
    record = account(list(history), list(ticks), default_policy(), view=view)
    return Folded(view, record, implied(history))


def _decision_lines(events: Sequence[Event]) -> dict[str, list[dict[str, Any]]]:
    """The classification (each FailureClassified's verdict) and the decisions (id, type,
    attempt) of a list of derived events: what the file records and replay compares."""
    return {
        "classification": [
            e.model_dump(mode="json", include=set(CLASSIFICATION_FIELDS))
            for e in events
            if isinstance(e, FailureClassified)
        ],
        "decisions": [
            {"event_id": e.event_id, "type": e.type, "attempt": e.attempt} for e in events
        ],
    }


def live_decisions(history: Sequence[Event]) -> dict[str, list[dict[str, Any]]]:
    """The classification and decisions recorded in ``history`` (the export's)."""
    return _decision_lines(recorded(history))


@dataclass(frozen=True)
class Difference:
    """One place where the file and its replay disagree."""

    where: str
    exported: Any
    replayed: Any

    def line(self) -> str:
        """The difference in a sentence, naming the path in the file."""
        return f"{self.where}: exported {_short(self.exported)}, replayed {_short(self.replayed)}"


ABSENT = "(absent)"


def _short(value: Any) -> str:
    text = value if value is ABSENT else repr(value)
    return text if len(text) <= 100 else text[:97] + "..."


def differences(exported: Any, replayed: Any, where: str) -> list[Difference]:
    """Every leaf where two JSON values differ, by path (``a.b[2].c``)."""
    if isinstance(exported, dict) and isinstance(replayed, dict):
        out: list[Difference] = []
        for key in sorted(set(exported) | set(replayed), key=str):
            out += differences(
                exported.get(key, ABSENT), replayed.get(key, ABSENT), f"{where}.{key}"
            )
        return out
    if isinstance(exported, list) and isinstance(replayed, list):
        out = []
        for i in range(max(len(exported), len(replayed))):
            a = exported[i] if i < len(exported) else ABSENT
            b = replayed[i] if i < len(replayed) else ABSENT
            out += differences(a, b, f"{where}[{i}]")
        return out
    return [] if exported == replayed else [Difference(where, exported, replayed)]


@dataclass
class JobReplayed:
    """One job of the file, refolded."""

    job_id: str
    events: int = 0
    ticks: int = 0
    status: str = ""
    differences: list[Difference] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """The refold equals everything the file recorded for the job."""
        return not self.differences


@dataclass
class FileReplayed:
    """The replay of a whole file; ``ok`` decides the exit code."""

    problems: list[str] = field(default_factory=list)
    """What makes the file unreplayable as a whole (format, schemas)."""
    jobs: list[JobReplayed] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No problem with the file, and every job replays to its exported views."""
        return not self.problems and all(j.ok for j in self.jobs)

    def lines(self) -> list[str]:
        """The report for people: per job what was refolded, then each difference."""
        out = [f"FILE {p}" for p in self.problems]
        for j in self.jobs:
            head = f"{j.job_id}: {j.events} events, {j.ticks} meter ticks, replayed {j.status}"
            if j.ok:
                out.append(f"ok   {head}: equal to the exported views")
                continue
            out.append(f"DIFF {head}: {len(j.differences)} difference(s)")
            out += [f"  {d.line()}" for d in j.differences[:SHOWN]]
            if len(j.differences) > SHOWN:
                out.append(f"  ... and {len(j.differences) - SHOWN} more (-o json lists all)")
        out.append("EQUAL" if self.ok else "DIFFERENT")
        return out

    def to_json(self) -> dict[str, Any]:
        """The report as a document (``replay --file FILE -o json``)."""
        return {
            "ok": self.ok,
            "problems": self.problems,
            "jobs": [
                {
                    "job_id": j.job_id,
                    "ok": j.ok,
                    "events": j.events,
                    "meter_ticks": j.ticks,
                    "status": j.status,
                    "differences": [
                        {"where": d.where, "exported": d.exported, "replayed": d.replayed}
                        for d in j.differences
                    ],
                }
                for j in self.jobs
            ],
        }


def _dumped(model: type[BaseModel], value: Any) -> Any:
    """An exported view in the replay's own JSON form (so formats compare equal), or as it
    is when it is not one (then it differs field by field)."""
    try:
        return model.model_validate(value).model_dump(mode="json")
    except ValidationError:
        return value


def _stored(data: bytes, described: Any) -> Event:
    """The event a record's bytes hold: decoded with this build's stored schema of its
    fingerprint, else with the file's (a file of a newer release: its schemas only add
    fields with defaults, which the current model's schema resolves)."""
    schema = described.get("schema") if isinstance(described, dict) else None
    if codec.writer_of(data) is not None or not isinstance(schema, dict):
        return codec.decode_event(data)
    name, version = str(described.get("name")), int(described.get("version") or 0)
    return codec.decode_written(data, name, version, schema)


def _event(
    entry: dict[str, Any], where: str, out: JobReplayed, schemas: dict[str, Any]
) -> Event | None:
    """The record's event from its payload (validated), checked against its Avro bytes
    and the file's schemas."""
    name = entry.get("type")
    cls = EVENT_TYPES.get(name) if isinstance(name, str) else None
    if cls is None:
        out.differences.append(Difference(f"{where}.type", name, "(a known event type)"))
        return None
    try:
        event = cls.model_validate(entry.get("payload"))
    except ValidationError as exc:
        out.differences.append(Difference(f"{where}.payload", "(invalid)", str(exc)[:200]))
        return None
    try:
        data = base64.b64decode(entry.get("avro") or "", validate=True)
        stored = _stored(data, schemas.get(str(entry.get("fingerprint"))))
    except (binascii.Error, ValueError, TypeError, EventDecodeError) as exc:
        out.differences.append(Difference(f"{where}.avro", "(undecodable)", str(exc)[:200]))
        return event
    named = entry.get("fingerprint")
    if data[2:10].hex() != named or str(named) not in schemas:
        out.differences.append(
            Difference(f"{where}.fingerprint", named, f"{data[2:10].hex()} (in the schemas)")
        )
    if stored != event:
        # The payload must say what the record's bytes say.
        out.differences += differences(
            event.model_dump(mode="json"), stored.model_dump(mode="json"), f"{where}.payload"
        )
    return event


def replay_job(job: dict[str, Any], where: str, schemas: dict[str, Any]) -> JobReplayed:
    """Refold one job of the file and compare it with the views the file recorded."""
    out = JobReplayed(str(job.get("job_id", "")))
    history: list[Event] = []
    ticks: list[MeterTick] = []
    entries = job.get("records")
    for i, entry in enumerate(entries if isinstance(entries, list) else []):
        at = f"{where}.records[{i}]"
        if not isinstance(entry, dict):
            out.differences.append(Difference(at, entry, "(a record)"))
            continue
        if entry.get("error"):
            continue  # undecodable on the ledger: the folds skip it there too
        event = _event(entry, at, out, schemas)
        if event is None or entry.get("fenced") is True:
            continue  # a deposed leader's decision: checked, never folded (as on the ledger)
        if event.job_id != out.job_id:
            out.differences.append(Difference(f"{at}.payload.job_id", event.job_id, out.job_id))
        elif isinstance(event, MeterTick):
            ticks.append(event)
        elif is_job_event(event):
            history.append(event)
    out.events, out.ticks = len(history), len(ticks)
    found = job.get("live")
    live: dict[str, Any] = found if isinstance(found, dict) else {}
    if not history:
        out.differences.append(Difference(f"{where}.records", "(no job event)", "a history"))
        return out
    folded = fold(history, ticks)
    out.status = folded.view.status
    out.differences += differences(
        _dumped(JobView, live.get("view")), folded.view.model_dump(mode="json"), f"{where}.view"
    )
    out.differences += differences(
        _dumped(AccountingRecord, live.get("accounting")),
        folded.accounting.model_dump(mode="json"),
        f"{where}.accounting",
    )
    replayed = _decision_lines(folded.implied)
    for key in ("classification", "decisions"):
        out.differences += differences(live.get(key), replayed[key], f"{where}.{key}")
    for drift in drift_of(out.job_id, history):
        if drift.kind == "changed":  # missing/unexpected ones differ in `decisions` above
            at = f"{where}.decisions (attempt {drift.attempt} {drift.event_type})"
            out.differences.append(Difference(at, drift.detail, "the rules' decision"))
    return out


def replay_document(doc: Any) -> FileReplayed:
    """Replay every job of an exported file (:mod:`services.replay.export`)."""
    out = FileReplayed()
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        out.problems.append(
            f"not a {FORMAT} file: export one with `gridledger history JOB -o json`"
        )
        return out
    if doc.get("format_version") != FORMAT_VERSION:
        out.problems.append(
            f"format_version {doc.get('format_version')!r}: this gridledger reads "
            f"{FORMAT_VERSION}; replay the file with the gridledger that exported it"
        )
        return out
    schemas = doc.get("schemas")
    if not isinstance(schemas, dict):
        out.problems.append("schemas: not a mapping of fingerprints to schemas")
        schemas = {}
    for key, described in sorted(schemas.items()):
        try:
            actual = codec.fingerprint_hex(codec.fingerprint(described["schema"]))
        except (KeyError, TypeError, ValueError) as exc:
            out.problems.append(f"schemas.{key}: not an Avro schema ({exc})")
            continue
        if actual != key:
            out.problems.append(f"schemas.{key}: the schema's fingerprint is {actual}")
    jobs = doc.get("jobs")
    if not isinstance(jobs, list):
        out.problems.append("jobs: not a list of exported jobs")
        jobs = []
    for i, job in enumerate(jobs):
        out.jobs.append(replay_job(job if isinstance(job, dict) else {}, f"jobs[{i}]", schemas))
    return out
