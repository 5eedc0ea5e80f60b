"""The export format and its offline replay, on records encoded by the real codec (no stack:
both halves are pure). A file is hostile input: each way of breaking one is named."""

from __future__ import annotations

import base64
import copy
import io
from datetime import UTC, datetime, timedelta
from typing import Any

import fastavro
from hypothesis import given, settings
from hypothesis import strategies as st

from projections.decisions import react_all
from schemas import codec
from schemas.events import ENVELOPE_FIELDS, Event, MeterTick, ProcessExited
from services.replay.export import JobRecord, as_of, document, job_export, merge
from services.replay.offline import differences, fold, replay_document
from tests.sink.scenario import run_facts

JOB = "job-0123456789ab"


def facts() -> list[Event]:
    """A job that fails with its decisions, as the processors would append them."""
    script = run_facts(JOB, exit_code=1, finish=False)
    history: list[Event] = list(script.job_events)
    while new := [d for d in react_all(history) if d not in history]:
        history += new
    return [*history, *script.meter_ticks]


def records(events: list[Event]) -> list[JobRecord]:
    """The events as a ledger would hold them: offsets in order, append times a second apart."""
    t0 = datetime(2026, 12, 1, 9, tzinfo=UTC)
    out = []
    for i, e in enumerate(events):
        suffix = "meter-ticks" if isinstance(e, MeterTick) else "job-events"
        at = t0 + timedelta(seconds=i)
        appended = at if suffix == "job-events" else None
        out.append(
            JobRecord(
                suffix,
                f"gl.{suffix}",
                3,
                i,
                int(at.timestamp() * 1000),
                appended,
                codec.encode(e),
                e,
            )
        )
    return out


EVENTS = facts()


def exported(events: list[Event] | None = None) -> dict[str, Any]:
    found = records(events or facts())
    history = [r.event for r in found if r.event and r.suffix == "job-events"]
    ticks = [r.event for r in found if isinstance(r.event, MeterTick)]
    live = fold(history, ticks)
    schemas: dict[str, dict[str, Any]] = {}
    view, record = live.view.model_dump(mode="json"), live.accounting.model_dump(mode="json")
    job = job_export(JOB, found, view, record, None, schemas)
    return document([job], schemas, datetime.now(UTC))


EXPORTED = exported(EVENTS)


def where(doc: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    report = replay_document(doc)
    assert not report.ok
    return {d.where: (d.exported, d.replayed) for j in report.jobs for d in j.differences}


def test_an_untouched_export_replays_equal() -> None:
    report = replay_document(exported())
    assert report.ok, report.lines()
    assert report.lines()[-1] == "EQUAL"
    (job,) = report.jobs
    assert (job.status, job.ticks) == ("failed", 3)


def test_a_re_encoded_change_is_found_by_the_refold() -> None:
    doc = exported()
    exits = [r for r in doc["jobs"][0]["records"] if r["type"] == "ProcessExited"]
    exits[0]["payload"]["exit_code"] = 0
    exits[0]["avro"] = base64.b64encode(
        codec.encode(ProcessExited.model_validate(exits[0]["payload"]))
    ).decode()
    found = where(doc)
    assert found["jobs[0].view.attempts[0].exit_code"] == (1, 0)
    # The recorded JobFailed still folds, but today's rules would not have written it.
    assert found["jobs[0].decisions[0].type"] == ("FailureClassified", "JobSucceeded")


def test_each_broken_part_of_a_file_is_named() -> None:
    doc = exported()
    recs = doc["jobs"][0]["records"]
    broken = copy.deepcopy(doc)
    broken["jobs"][0]["records"][0]["avro"] = "not base64!"
    broken["jobs"][0]["records"][1]["type"] = "NoSuchEvent"
    broken["jobs"][0]["records"][2]["payload"]["attempt"] = "one"
    broken["jobs"][0]["records"][3]["payload"]["job_id"] = "job-ffffffffffff"
    broken["jobs"][0]["live"]["accounting"]["billable_gpu_seconds"] = 0.0
    found = where(broken)
    assert "jobs[0].records[0].avro" in found
    assert found["jobs[0].records[1].type"][0] == "NoSuchEvent"
    assert "jobs[0].records[2].payload" in found
    assert "jobs[0].records[3].payload.job_id" in found
    assert found["jobs[0].accounting.billable_gpu_seconds"][0] == 0.0

    schema = copy.deepcopy(doc)
    fingerprint = recs[0]["fingerprint"]
    schema["schemas"][fingerprint]["schema"]["name"] = "Other"
    report = replay_document(schema)
    assert (
        not report.ok
        and f"schemas.{fingerprint}: the schema's fingerprint is" in (report.problems[0])
    )
    later = {**doc, "format_version": 2}
    assert "this gridledger reads 1" in replay_document(later).problems[0]
    assert "not a gridledger-history file" in replay_document([1, 2]).problems[0]
    assert "jobs[0].records" in where({**doc, "jobs": [{"job_id": JOB, "records": []}]})


def test_as_of_cuts_at_the_ledger_time_not_at_occurred_at() -> None:
    found = records(facts())
    exited = next(r for r in found if isinstance(r.event, ProcessExited))
    assert exited.appended_at is not None
    history, ticks = as_of(found, exited.appended_at - timedelta(milliseconds=1))
    assert fold(history, ticks).view.status == "running"
    assert not any(isinstance(e, ProcessExited) for e in history)
    history, ticks = as_of(found, exited.appended_at)
    assert history[-1] == exited.event
    assert as_of(found, datetime(2000, 1, 1, tzinfo=UTC)) == ([], [])


def test_merged_files_hold_each_schema_once_and_every_job() -> None:
    one, two = exported(), exported()
    both = merge([one, two])
    assert len(both["jobs"]) == 2 and both["schemas"] == one["schemas"]
    assert replay_document(both).ok
    assert merge([])["jobs"] == []


def test_differences_name_each_leaf_by_its_path() -> None:
    found = differences({"a": [1, {"b": 2}], "c": 3}, {"a": [1, {"b": 5}, 7]}, "x")
    assert [(d.where, d.exported, d.replayed) for d in found] == [
        ("x.a[1].b", 2, 5),
        ("x.a[2]", "(absent)", 7),
        ("x.c", 3, "(absent)"),
    ]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=20, deadline=None)
@given(garbage=JSON, part=st.sampled_from(["schemas", "jobs", "job", "records", "record", "live"]))
def test_any_json_in_any_place_is_a_finding_never_a_crash(garbage: Any, part: str) -> None:
    doc = copy.deepcopy(EXPORTED)
    job = doc["jobs"][0]
    if part in ("schemas", "jobs"):
        doc[part] = garbage
    elif part == "job":
        doc["jobs"] = [garbage]
    elif part == "records":
        job["records"] = garbage
    elif part == "record":
        job["records"][0] = garbage
    else:
        job["live"] = garbage
    report = replay_document(doc)
    assert report.lines()[-1] in ("EQUAL", "DIFFERENT")
    assert report.ok == (part == "jobs" and garbage == [])  # no jobs: nothing differs


def test_a_record_of_a_schema_this_release_does_not_store_decodes_with_the_files() -> None:
    """A newer release adds a field with a default: its file replays here, with its schema."""
    doc = copy.deepcopy(EXPORTED)
    record = next(r for r in doc["jobs"][0]["records"] if r["type"] == "ProcessExited")
    newer = copy.deepcopy(doc["schemas"][record["fingerprint"]])
    newer["version"] += 1
    newer["schema"]["fields"].append({"name": "later", "type": "string", "default": ""})
    fp = codec.fingerprint(newer["schema"])
    event = ProcessExited.model_validate(record["payload"])
    fields = event.model_dump()
    body = {"envelope": {k: fields.pop(k) for k in ENVELOPE_FIELDS}, **fields, "later": "x"}
    out = io.BytesIO()
    out.write(codec.MAGIC + fp.to_bytes(8, "little"))
    fastavro.schemaless_writer(out, fastavro.parse_schema(newer["schema"]), body)
    record["avro"] = base64.b64encode(out.getvalue()).decode()
    record["fingerprint"] = codec.fingerprint_hex(fp)
    doc["schemas"][codec.fingerprint_hex(fp)] = newer
    report = replay_document(doc)
    assert report.ok, report.lines()

    del doc["schemas"][codec.fingerprint_hex(fp)]  # without its schema it cannot be read
    assert "jobs[0].records" in " ".join(where(doc))
