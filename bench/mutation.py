"""Mutation check of the pure core: break one rule at a time, see whether a test notices.

    python -m bench.mutation              # every mutation; exit 1 if any survives
    python -m bench.mutation --list       # the mutations, without running anything
    python -m bench.mutation ID [ID ...]  # some of them

Each mutation in :data:`MUTATIONS` is data: a file under ``projections/`` (or
``schemas/``), a snippet that must occur in it exactly once, its replacement and
the rule it breaks. For each one, the repository's pure packages and tests are
copied to a scratch folder, the snippet is replaced there (the working tree is
never touched), and the pure test subset (:data:`TESTS`, no broker, Postgres or
Docker needed) runs against the copy. A mutation no test fails on is a
*survivor*: a rule nothing pins. A snippet that no longer occurs is reported as
stale, so the list cannot silently rot when the code changes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COPIED = ("projections", "schemas", "services", "infra", "tests", "pyproject.toml", "README.md")
"""What the tests read (tests/conftest.py imports infra and services.settings; the class
table test reads the README)."""
TESTS = ("tests/projections", "tests/golden", "tests/processors/test_dispatch.py")
"""The pure test subset every mutation is run against."""


@dataclass(frozen=True)
class Mutation:
    """One deliberate bug in the code: a test must fail when it is applied."""

    id: str
    path: str
    find: str
    replace: str
    breaks: str


# fmt: off
MUTATIONS: tuple[Mutation, ...] = (
    # ---- the five billing rules of the lifecycle
    Mutation("ticks-by-event-id", "projections/accounting.py",
             "metered = math.fsum(t.gpu_seconds for t in counted.values())",
             "metered = math.fsum(t.gpu_seconds for t in ticks if t.attempt == n)",
             "meter ticks count once per (attempt, tick index), not once per event id"),
    Mutation("shutdown-exit-0-is-success", "projections/history.py",
             'released.reason not in ("cancelled", "agent_shutdown")',
             'released.reason not in ("cancelled",)',
             "an attempt stopped by an agent shutdown is never a success, whatever its exit"),
    Mutation("negative-held-time", "projections/accounting.py",
             "held_us = max(0, (until - held.occurred_at) // _US) if until else 0",
             "held_us = (until - held.occurred_at) // _US if until else 0",
             "held time never goes negative when the agent clock steps back"),
    Mutation("late-release-grows-credit", "projections/accounting.py",
             "if isinstance(e, AttemptLost) and not real:",
             "if isinstance(e, AttemptLost) and not _first(history, ComputeReleased, n):",
             "a lost attempt the job did not keep is counted to its last heartbeat"),
    Mutation("classifier-on-ended-jobs", "projections/decisions.py",
             "if view is None or view.status in TERMINAL_STATUSES:\n        return []  # a late",
             "if view is None:\n        return []  # a late",
             "the classifier never runs on a job that ended"),
    Mutation("after-end-attempt-billed", "projections/accounting.py",
             "    if after_end:\n",
             "    if False:\n",
             "an attempt placed after the job ended is never billed"),
    # ---- lifecycle
    Mutation("second-terminal-wins", "projections/job_state.py",
             '    if _terminal(view):\n        return _anomaly(view, event, f"second terminal',
             '    if False:\n        return _anomaly(view, event, f"second terminal',
             "the first terminal event wins"),
    Mutation("late-fact-moves-job", "projections/job_state.py",
             "if late is not None and late.lost_at is not None:",
             "if False:",
             "a fact of an attempt declared lost never moves the job"),
    Mutation("late-success-ignored", "projections/decisions.py",
             "return [*out, *_ending(history, JobSucceeded.derived(event, DECIDER), n, why)]",
             "return []",
             "a late clean success of a lost attempt ends the job succeeded"),
    Mutation("late-failure-ignored", "projections/decisions.py",
             "        return _late_failure(history, event, view, policy)",
             "        return []",
             "a late failure before its retry is placed decides the job on the real facts"),
    Mutation("reverdict-credited-as-lost", "projections/accounting.py",
             "    if _reverdicted(history, n):",
             "    if False:",
             "an attempt decided on its late facts is accounted on them"),
    Mutation("late-success-not-kept-billed", "projections/accounting.py",
             "(late_verdict(history, n) is None or _won_late(history, n))",
             "True",
             "a late clean success the job did not keep is not billed"),
    Mutation("superseded-billed", "projections/accounting.py",
             'return "superseded", "platform", ""',
             'return "superseded", "user", ""',
             "an attempt superseded by another one's result is the platform's, credited"),
    Mutation("others-run-on", "projections/decisions.py",
             "for scheduled in of_type(history, AttemptScheduled):\n        n = scheduled.attempt",
             "for scheduled in of_type(history, AttemptScheduled)[:0]:\n        n = 0",
             "attempts still running when the job ends are stopped"),
    Mutation("lost-to-loss-time", "projections/accounting.py",
             'end, source = e.last_heartbeat_at or e.occurred_at, "lost"',
             'end, source = e.occurred_at, "lost"',
             "a lost attempt counts until its last heartbeat, not the AttemptLost time"),
    Mutation("meter-past-counted-end", "projections/accounting.py",
             "counted = {i: t for i, t in by_index.items() if _in_window(t, released_at)}",
             "counted = dict(by_index)",
             "the meter is reconciled over the window the lifecycle counted"),
    Mutation("uncounted-ticks-dropped", "projections/accounting.py",
             "uncounted_gpu_seconds=math.fsum(by_index[i].gpu_seconds for i in uncounted),",
             "uncounted_gpu_seconds=0.0,",
             "ticks after the counted window are reported apart, not silently dropped"),
    Mutation("platform-billed", "projections/accounting.py",
             '        return attribution == "user"',
             "        return True",
             "platform and capacity failures are credited"),
    # ---- envelopes
    Mutation("derived-id-ignores-suffix", "schemas/events.py",
             "event_id=derived_event_id(cause.event_id, by, suffix),",
             "event_id=derived_event_id(cause.event_id, by),",
             "two events one processor derives from one cause get two ids"),
    Mutation("derived-keeps-cause-time", "schemas/events.py",
             '"occurred_at": cause.occurred_at,',
             '"occurred_at": cause.occurred_at.replace(second=0),',
             "a derived event occurs when its cause did, unless told otherwise"),
    # ---- retry decisions and the class table
    Mutation("unknown-retried-forever", "projections/classes.py",
             '"nothing matched (e.g. a SIGKILL nobody explains)", limit=1,',
             '"nothing matched (e.g. a SIGKILL nobody explains)", limit=None,',
             "unknown failures are retried once"),
    Mutation("provider-not-avoided", "projections/retry.py",
             'providers = [provider] if row.avoid == "provider" and provider else []',
             "providers: list[str] = []",
             "node_lost and dispatch_timeout retries prefer another provider"),
    Mutation("opt-in-ignored", "projections/retry.py",
             "opted_in = retry.retry_user_errors and row.opt_in",
             "opted_in = row.opt_in",
             "user errors are retried only when the job opts in"),
    Mutation("backoff-doubled", "projections/bounds.py",
             "retry.backoff_s * 2 ** (n - 1)",
             "retry.backoff_s * 2**n",
             "the first retry waits backoff_s"),
    Mutation("retry-no-capacity-as-first", "projections/failures.py",
             "rule.retry_attempt is None or (f.attempt > 1) == rule.retry_attempt",
             "rule.retry_attempt is None or rule.retry_attempt is False",
             "a retry without capacity says it was the retry"),
    Mutation("bound-without-backoff", "projections/bounds.py",
             "return attempts * attempt_bound_s(spec, t) + waits",
             "return attempts * attempt_bound_s(spec, t)",
             "the terminal bound includes the backoff between attempts"),
)
# fmt: on


def _copy(to: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis", "results")
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, to / name, ignore=ignore)
        else:
            shutil.copy2(src, to / name)


def _apply(root: Path, m: Mutation) -> str:
    """Apply ``m`` under ``root``; '' when done, else why it could not be."""
    path = root / m.path
    text = path.read_text()
    count = text.count(m.find)
    if count != 1:
        return f"stale: the snippet occurs {count} times in {m.path}"
    path.write_text(text.replace(m.find, m.replace))
    return ""


BASELINE = Mutation("baseline", "projections/__init__.py", "", "", "nothing: the unmutated copy")


def run_one(m: Mutation, timeout_s: float) -> tuple[str, str]:
    """('killed' | 'survived' | 'stale' | 'timeout', detail) for one mutation."""
    with tempfile.TemporaryDirectory(prefix=f"mutant-{m.id}-") as scratch:
        root = Path(scratch)
        _copy(root)
        problem = _apply(root, m) if m is not BASELINE else ""
        if problem:
            return "stale", problem
        env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *TESTS]
        try:
            done = subprocess.run(
                cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout_s
            )
        except subprocess.TimeoutExpired:
            return "timeout", f"no verdict within {timeout_s:.0f} s"
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("FAILED ")]
        if done.returncode == 0:
            return "survived", "every test passed"
        if done.returncode == 1 and lines:
            return "killed", lines[0].removeprefix("FAILED ")
        tail = (done.stdout + done.stderr).strip().splitlines()[-1:]
        return "killed", f"pytest exit {done.returncode}: {' '.join(tail)}"


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.mutation``: apply each mutation, run its tests, report the ones no test
    caught."""
    parser = argparse.ArgumentParser(prog="python -m bench.mutation", description=__doc__)
    parser.add_argument("ids", nargs="*", help="mutation ids (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per mutation")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTATIONS if not args.ids or m.id in args.ids]
    unknown = sorted(set(args.ids) - {m.id for m in MUTATIONS})
    if unknown:
        parser.error(f"unknown mutation ids {unknown}; see --list")
    if args.list:
        for m in chosen:
            print(f"{m.id:32} {m.path:28} {m.breaks}")
        return 0
    # A test failing without any mutation would "kill" every mutant: check the copy first.
    verdict, detail = run_one(BASELINE, args.timeout)
    if verdict != "survived":
        print(f"the unmutated copy does not pass its tests ({verdict}: {detail}); fix that first")
        return 2
    survivors: list[Mutation] = []
    broken: list[Mutation] = []
    for m in chosen:
        started = time.monotonic()
        verdict, detail = run_one(m, args.timeout)
        took = time.monotonic() - started
        print(f"{verdict:9} {m.id:32} {took:5.0f} s  {detail}", flush=True)
        if verdict == "survived":
            survivors.append(m)
        elif verdict in ("stale", "timeout"):
            broken.append(m)
    print()
    print(
        f"{len(chosen)} mutations: {len(chosen) - len(survivors) - len(broken)} killed, "
        f"{len(survivors)} survived, {len(broken)} stale or timed out"
    )
    for m in survivors:
        print(f"  survivor {m.id}: nothing pins '{m.breaks}' ({m.path})")
    return 1 if survivors or broken else 0


if __name__ == "__main__":
    raise SystemExit(main())
