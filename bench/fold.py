"""The job fold and the view encoding on their own: CPU per event, spec against fast path.

    python -m bench.fold [EVENTS] [--env-kb KB]

No broker, no Postgres: the simulated histories of the pipeline, replay and sink loads
(``bench.load.histories``), folded the way each hot path folds them, timed on the
process's CPU clock (steadier than wall time on a shared machine), best of 3:

- ``evolve``: ``projections.job_state.evolve`` event by event (the specification; what
  the hot paths ran before ``projections.fold``); ``fold``: one ``JobState`` per job,
  changed in place. Both publish the job's view as the processors do: frozen after
  every ``--every`` events (a batch) and at the end.
- ``encode``: the published views as ``codec.encode(view)`` (``model_dump``) against
  ``codec.encode(Datum(state.datum()))`` (straight from the state).
- ``account``: the job's accounting record published as the processors publish it, after
  every ``--every`` events and at the end: ``account`` over the history so far (the
  specification) against one ``projections.tally.Tally`` per job, synced each time. The
  view is folded apart and passed to both, so only the accounting is timed.
- ``--env-kb``: every job's spec with an env of that many KB (built without the spec's
  bounds, as a record written before them), and the encoded bytes of its JobSubmitted,
  AttemptScheduled (on job-events and as the node's command) and final view: what the
  spec stored once saves (bench/README.md, "The spec, stored once").

Writes ``bench/results/fold.json`` (``--out`` elsewhere). Not part of ``gridledger bench``:
it measures one function pair, not a service.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import RESULTS
from bench.load import histories
from projections.accounting import account
from projections.fold import JobState, fold
from projections.job_state import evolve, project
from projections.tally import Tally
from schemas import codec
from schemas.events import AttemptScheduled, Event, JobSubmitted, MeterTick
from schemas.spec import JobSpec
from schemas.views import AccountingRecord, JobView
from services.simulator.histories import SPEC


def _cpu(run: Callable[[], object], repeat: int = 3) -> float:
    """Best CPU seconds of ``repeat`` runs."""
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        run()
        best = min(best, time.process_time() - start)
    return best


def _published(jobs: list[list[Event]], every: int, fast: bool) -> list[JobView]:
    """Each job folded by ``evolve`` or by the fast fold, its view published (frozen)
    after every ``every`` events and at its end; the final views."""
    out = []
    for history in jobs:
        view: JobView | None = None
        state: JobState | None = None
        for i, event in enumerate(history, 1):
            if fast:
                state = fold([event], state)
            else:
                view = evolve(view, event)
            if state is not None and (i % every == 0 or i == len(history)):
                view = state.freeze()
        if view is not None:
            out.append(view)
    return out


Published = list[tuple[list[Event], list[MeterTick], JobView]]
"""One job's publications: the job-events and ticks known by then, and the view."""


def _publications(jobs: list[list[Event]], every: int) -> list[Published]:
    """Each job's history cut after every ``every`` records and at its end, with the view
    of each cut (folded here, outside the timed part)."""
    out: list[Published] = []
    for history in jobs:
        cuts: Published = []
        state: JobState | None = None
        events: list[Event] = []
        ticks: list[MeterTick] = []
        for i, record in enumerate(history, 1):
            if isinstance(record, MeterTick):
                ticks.append(record)
            else:
                events.append(record)
                state = fold([record], state)
            if state is not None and (i % every == 0 or i == len(history)):
                cuts.append((list(events), list(ticks), state.freeze()))
        out.append(cuts)
    return out


def _accounted(jobs: list[Published], incremental: bool) -> list[AccountingRecord]:
    """Every publication's record, by ``account`` or by one tally per job."""
    out = []
    for cuts in jobs:
        tally: Tally | None = None
        for events, ticks, view in cuts:
            if not incremental:
                out.append(account(events, ticks, view=view))
                continue
            tally = tally or Tally(view.job_id)
            tally.sync(events)
            tally.add_new_ticks(ticks)
            out.append(tally.record(view))
    return out


def _states(jobs: list[list[Event]]) -> list[JobState]:
    return [s for h in jobs if (s := fold(h)) is not None]


def big_env_spec(env_kb: int) -> JobSpec:
    """The bench spec with ``env_kb`` KB of env in 16 variables, its bounds not applied."""
    size = env_kb * 1024 // 16
    env = {f"DATA_{i:02d}": "x" * size for i in range(16)}
    return SPEC.model_copy(update={"env": env})


def record_bytes(history: list[Event]) -> dict[str, int]:
    """Encoded bytes of one job's records that may carry its spec."""
    submitted = next(e for e in history if isinstance(e, JobSubmitted))
    scheduled = next(e for e in history if isinstance(e, AttemptScheduled))
    # The command a node gets: dispatch fills the spec in (it always had it before).
    command = scheduled.model_copy(update={"spec": submitted.spec})
    return {
        "job_submitted_bytes": len(codec.encode(submitted)),
        "attempt_scheduled_bytes": len(codec.encode(scheduled)),
        "node_command_bytes": len(codec.encode(command)),
        "view_bytes": len(codec.encode(project(history))),
    }


def measure(events: int, every: int, env_kb: int = 0) -> dict[str, Any]:
    """The figures of ``events`` simulated events (whole jobs)."""
    jobs = histories(events, spec=big_env_spec(env_kb)) if env_kb else histories(events)
    n = sum(len(h) for h in jobs)
    finals = _published(jobs, every, fast=False)
    if _published(jobs, every, fast=True) != finals:
        raise AssertionError("the fast fold differs from evolve on the bench histories")
    states = _states(jobs)
    evolve_s = _cpu(lambda: _published(jobs, every, fast=False))
    fold_s = _cpu(lambda: _published(jobs, every, fast=True))
    dump_s = _cpu(lambda: [codec.encode(v) for v in finals])
    datum_s = _cpu(
        lambda: [codec.encode(codec.Datum("JobView", s.job_id, s.datum())) for s in states]
    )
    same = all(
        codec.encode(v) == codec.encode(codec.Datum("JobView", s.job_id, s.datum()))
        for v, s in zip(finals, states, strict=True)
    )
    published = _publications(jobs, every)
    records = _accounted(published, incremental=False)
    if _accounted(published, incremental=True) != records:
        raise AssertionError("the tally differs from account on the bench histories")
    account_s = _cpu(lambda: _accounted(published, incremental=False))
    tally_s = _cpu(lambda: _accounted(published, incremental=True))
    return {
        "events": n,
        "jobs": len(jobs),
        "env_kb": env_kb,
        **record_bytes(jobs[0]),
        "views_published_every": every,
        "evolve_us_per_event": evolve_s / n * 1e6,
        "fold_us_per_event": fold_s / n * 1e6,
        "evolve_over_fold": evolve_s / fold_s,
        "encode_model_dump_us_per_view": dump_s / len(finals) * 1e6,
        "encode_datum_us_per_view": datum_s / len(states) * 1e6,
        "model_dump_over_datum": dump_s / datum_s,
        "same_bytes": same,
        "records_published": len(records),
        "account_us_per_record": account_s / len(records) * 1e6,
        "tally_us_per_record": tally_s / len(records) * 1e6,
        "account_over_tally": account_s / tally_s,
        "load_average": os.getloadavg()[0],
    }


def main() -> None:
    """``python -m bench.fold``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("events", nargs="?", type=int, default=50_000)
    parser.add_argument("--every", type=int, default=4, help="events between published views")
    parser.add_argument("--env-kb", type=int, default=0, help="KB of env in every job's spec")
    parser.add_argument("--out", type=Path, default=RESULTS / "fold.json")
    args = parser.parse_args()
    result = measure(args.events, args.every, args.env_kb)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for key, value in result.items():
        print(f"{key}: {value:.2f}" if isinstance(value, float) else f"{key}: {value}")


if __name__ == "__main__":
    main()
