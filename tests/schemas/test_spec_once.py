"""The spec stored once: records written while AttemptScheduled and JobView carried the whole
spec still decode, and fold to the view the current records give (``wire/``: the bytes of
a recorded history as the ledger held them then)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from projections.fold import fold
from projections.job_state import current, project
from schemas import codec
from schemas.events import AttemptScheduled, Event, JobSubmitted
from schemas.spec import carried, spec_digest
from schemas.views import JobView

BEFORE = json.loads((Path(__file__).parent / "wire" / "before_spec_once.json").read_text())


def _old_events() -> list[Event]:
    return [codec.decode_event(base64.b64decode(b)) for b in BEFORE["events"]]


def _as_written_now(events: list[Event]) -> list[Event]:
    """The same history as today's scheduler writes it: AttemptScheduled without the spec."""
    spec = next(e for e in events if isinstance(e, JobSubmitted)).spec
    return [
        e.model_copy(update={"spec": None, **carried(spec)})
        if isinstance(e, AttemptScheduled)
        else e
        for e in events
    ]


def test_old_records_with_the_spec_still_decode() -> None:
    events = _old_events()
    scheduled = next(e for e in events if isinstance(e, AttemptScheduled))
    submitted = next(e for e in events if isinstance(e, JobSubmitted))
    assert scheduled.spec == submitted.spec  # v5: the whole spec, copied
    assert scheduled.spec_digest == "" and scheduled.image == ""
    assert scheduled.runnable == submitted.spec  # an old command still runs as it was
    old_view = codec.decode(base64.b64decode(BEFORE["view"]))
    assert isinstance(old_view, JobView) and old_view.spec == submitted.spec


def test_old_records_fold_to_the_view_of_todays_records() -> None:
    old = _old_events()
    now = _as_written_now(old)
    view = project(old)
    assert view == project(now)
    state = fold(old)
    assert state is not None and state.freeze() == view
    submitted = next(e for e in old if isinstance(e, JobSubmitted))
    assert view.spec is None
    assert view.spec_digest == spec_digest(submitted.spec)
    assert (view.image, view.resources, view.limits, view.retry, view.labels) == (
        submitted.spec.image,
        submitted.spec.resources,
        submitted.spec.limits,
        submitted.spec.retry,
        submitted.spec.labels,
    )
    # The view the old code published (with its spec), read back, is today's view.
    old_view = codec.decode(base64.b64decode(BEFORE["view"]))
    assert isinstance(old_view, JobView)
    assert current(old_view) == view
    resumed = fold([], type(state).of(old_view))
    assert resumed is not None and resumed.freeze() == view
    assert codec.encode(view) == codec.encode(codec.Datum("JobView", view.job_id, state.datum()))


def test_the_digest_ignores_defaults_and_key_order() -> None:
    spec = next(e for e in _old_events() if isinstance(e, JobSubmitted)).spec
    again = type(spec).model_validate(json.loads(spec.model_dump_json()))
    assert spec_digest(again) == spec_digest(spec)
    assert spec_digest(spec.model_copy(update={"name": "other"})) != spec_digest(spec)
    assert spec_digest(spec).startswith("sha256:") and len(spec_digest(spec)) == 71
