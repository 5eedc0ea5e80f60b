"""Mutation testing of the pure core: mutmut generates the mutants, the pure tests must kill them.

    python -m bench.mutation run [MODULE ...]  # mutmut over the pure core (default: all of it)
    python -m bench.mutation report            # bench/results/mutation.{json,md} from that run
    python -m bench.mutation sample            # the report's fixed, seeded sample, re-run
    python -m bench.mutation rules [ID ...]    # the hand-written rules mutmut cannot generate

``run`` drives mutmut (``[tool.mutmut]`` in pyproject.toml: the modules, the pure test
subset) under ``nice -n 10`` with one worker (two under a low load), module by module in
:data:`ORDER`, running only the mutants without a verdict (resumable), in mutmut's working
folder ``mutants/`` (a link to ``$GRIDLEDGER_MUTANTS`` when set). ``report`` counts each module's
mutants (killed, survived, equivalent, timeouts, no tests) and writes the report;
:data:`EQUIVALENT` lists the survivors that change no behaviour, each with why. It exits 1
when a non-equivalent survivor is left or an equivalent entry no longer matches its mutant.
``sample`` re-applies the report's sample (:data:`SAMPLE_SIZE` mutants drawn with
:data:`SAMPLE_SEED`, each a snippet of the source and its mutated text) one at a time to a
scratch copy and runs the tests that cover it; it exits 1 when one survives or no longer
applies (tests/bench/test_mutation_sample.py runs it in the default test run).

:data:`MUTATIONS` are the hand-written rules kept because they are shapes mutmut 3 does not
generate: a branch or a statement removed, an expression replaced by a neighbouring one, a
row of a module-level table (mutmut mutates function bodies only), an event envelope
(``schemas/`` is not in mutmut's scope). Each is a file, a snippet that must occur in it
exactly once, its replacement and the rule it breaks; a snippet that no longer occurs is
reported as stale, so the list cannot silently rot.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
import traceback
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
COPIED = ("projections", "schemas", "services", "infra", "tests", "examples", "pyproject.toml",
          "README.md")  # fmt: skip
"""What the tests read (tests/conftest.py imports infra and services.settings; the class
table test reads the README, the price tests the example catalog)."""
TESTS = ("tests/projections", "tests/golden", "tests/processors/test_dispatch.py")
"""The pure test subset the hand-written rules are run against."""
REPORT_JSON = ROOT / "bench/results/mutation.json"
REPORT_MD = ROOT / "bench/results/mutation.md"
SAMPLE_SEED = 22
SAMPLE_SIZE = 4
MUTANTS = ROOT / "mutants"


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
    # mutmut skips decorated functions: the fold's singledispatch handlers are pinned here.
    Mutation("stale-verdict-after-end", "projections/job_state.py",
             '    if _terminal(view):\n        return _anomaly(view, event, f"classified after',
             '    if False:\n        return _anomaly(view, event, f"classified after',
             "a classification delivered after the job ended changes neither status nor failure"),
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


# fmt: off
EQUIVALENT: dict[str, tuple[str, str]] = {
    "projections.accounting.x__attempt__mutmut_1": (
        "after_end: bool = True,",
        "the default is never used: account(), the one caller, always passes after_end"),
    "projections.accounting.x__attempt__mutmut_71": (
        "top = max(by_index, default=-2)",
        "with no tick, range(top + 1) is empty for -1 and -2 alike: no missing tick either way"),
    "projections.accounting.x__attempt__mutmut_43": (
        "billable = policy.billable(outcome, attribution, None)",
        "an attempt's 'unknown' class always comes with attribution 'platform' (the class "
        "table's row, and _outcome's unclassified ending), which billable() credits anyway"),
    "services.scheduler.core.xǁSchedulerStateǁ_preflight__mutmut_20": (
        "entry.vram_gb = None",
        "the job is then 'unfitted', and the same decide() checks its fit again on the same "
        "fleet before placing: the same placement, one fit check more"),
    "services.scheduler.core.xǁSchedulerStateǁ_preflight__mutmut_34": (
        "removed: attempt=0,",
        "attempt=0 dropped: the JobQueued's cause, the JobSubmitted, has attempt 0, which "
        "derived() copies by default"),
    "projections.job_state.x__advance__mutmut_10": (
        "if event.attempt >= view.attempt:",
        "inside `if event.attempt != view.attempt`: the attempts are never equal there"),
    "services.scheduler.core.xǁSchedulerStateǁ_on_submitted__mutmut_4": (
        "if first is None or job_id not in self.owners:",
        "an id is in owners exactly when it is in jobs or in done, and observe() returns "
        "before this for a done one: both conditions say 'a new job id'"),
    "services.scheduler.core.xǁSchedulerStateǁ_on_submitted__mutmut_17": (
        'self.pending[job_id] = ""',
        "pending is an ordered set: its values are never read"),
    "services.scheduler.core.xǁSchedulerStateǁ_on_submitted__mutmut_30": (
        "log.warning(note)",
        "logging formats the message only when given arguments: a note holding '%' (a "
        "tenant's job id) is written as it is either way"),
    "services.scheduler.queue.xǁPlacementQueueǁrelease_due__mutmut_14": (
        'member.not_before = ""',
        "_Member.not_before is never read: the delayed heap holds its own copy"),
    "services.scheduler.queue.xǁPlacementQueueǁrelease_due__mutmut_16": (
        'self._unfitted[job_id] = ""',
        "_unfitted is an ordered set: its values are never read"),
    "services.scheduler.queue.xǁPlacementQueueǁadd__mutmut_4": (
        "self._counter += 2",
        "seq only orders the members and tells a live heap entry from a stale one: any "
        "increasing sequence does both"),
    "services.scheduler.queue.xǁPlacementQueueǁadd__mutmut_7": (
        "member = _Member(self._counter, None, not_before, request)",
        "_Member.deadline is never read: the deadline heap holds its own copy"),
    "services.scheduler.queue.xǁPlacementQueueǁadd__mutmut_8": (
        "member = _Member(self._counter, deadline, None, request)",
        "_Member.not_before is never read: the delayed heap holds its own copy"),
    "services.scheduler.queue.xǁPlacementQueueǁadd__mutmut_25": (
        'self._unfitted[job_id] = ""',
        "_unfitted is an ordered set: its values are never read"),
    "services.scheduler.placement.x__place_gpus__mutmut_9": (
        "counts = sorted(c for c in buckets if holds(gpus, need, None, model, c, best_vram))",
        "gpu_models is applied again, to the same model, in the per-node holds() of the loop"),
    "services.scheduler.placement.x__place_gpus__mutmut_34": (
        "if not holds(gpus, need, None, model, count, node.vram_gb(model)):",
        "gpu_models was applied to this model already, in the per-model holds() that chose "
        "the counts the loop walks"),
    "services.scheduler.placement.x__place_gpus__mutmut_64": (
        "if key[0] == 0 and key[2] == 0:",
        "key[2] is a free count >= 1, so this early exit never fires; it only skipped the "
        "rest of a bucket, whose nodes share the count and cannot beat a (0, 0, count) key"),
    "services.scheduler.placement.x__place_gpus__mutmut_76": (
        "if best is not None and best[0][0] == 0 and best[0][2] == 0:",
        "best[0][2] is a free count >= 1, so this early exit never fires; it only skipped "
        "buckets of larger counts, which cannot beat a (0, 0, count) key"),
    "projections.failures.x__matches__mutmut_3": (
        'rule.phase in ("XX*XX", f.phase),',
        "the only rule of phase '*' is fallback.unknown, the last of RULES, which "
        "classify_facts() takes anyway when no rule matched"),
    "projections.failures.x__matches__mutmut_39": (
        "rule.retry_attempt is None or (f.attempt >= 1) == rule.retry_attempt,",
        "the one retry_attempt rule reads a NoCapacity, whose attempt is 0 before the first "
        "attempt (derived from the JobQueued of attempt 0) and the retry's number (>= 2) "
        "after; no NoCapacity has attempt 1"),
}
# fmt: on
"""Survivors that change no behaviour: mutmut name -> (the mutated line, why it is
equivalent). The mutated line is checked against the mutant, so an entry whose mutant was
renumbered by a later change to its function is reported as stale instead of hiding a new
survivor."""


def _mutmut_config() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]


def pure_modules() -> list[str]:
    """The files mutmut mutates: ``source_paths`` of ``[tool.mutmut]``, folders expanded."""
    out: list[str] = []
    for entry in _mutmut_config()["source_paths"]:
        path = ROOT / entry
        files = sorted(path.glob("*.py")) if path.is_dir() else [path]
        out += [str(f.relative_to(ROOT)) for f in files if f.name != "__init__.py"]
    return out


def _pattern(module: str) -> str:
    """The name glob mutmut takes for the mutants of one module (``projections/fit.py`` or
    ``projections.fit``)."""
    if "*" in module or "__mutmut_" in module:
        return module  # a mutant's name, or a glob of them: projections.fit.x_holds__mutmut_*
    dotted = module.removesuffix(".py").replace("/", ".")
    return f"{dotted}.*"


ORDER = (
    "projections/fit.py", "projections/bounds.py", "projections/retry.py",
    "projections/failures.py", "projections/classes.py",
    "services/scheduler/core.py", "services/scheduler/fleet.py",
    "services/scheduler/placement.py", "services/scheduler/queue.py",
    "services/scheduler/snapshot.py", "services/sink/rows.py",
    "services/agent/meter.py", "services/processors/watchdog.py",
    "services/processors/dispatch.py", "services/notary/chain.py",
    "services/notary/findings.py", "projections/decisions.py", "projections/prices.py",
    "projections/usage.py", "projections/fence.py", "projections/job_state.py",
    "projections/fold.py", "projections/tally.py", "projections/history.py",
    "projections/evidence.py",
    "projections/accounting.py",
)  # fmt: skip
"""The order ``run`` takes the modules in (any module not named here comes after them):
the audited rules first, then the deciders outside projections/ (their mutants cost least:
few tests cover them), then the rest of projections/, the fold, the history queries, the
evidence and the accounting, which are still being reshaped, last."""


def workdir() -> Path:
    """The working folder of mutmut, ``mutants/``: a link to ``$GRIDLEDGER_MUTANTS`` when set, so
    that the verdicts live outside the checkout (a removed or cleaned checkout keeps them)."""
    where = os.environ.get("GRIDLEDGER_MUTANTS")
    if where:
        target = Path(where).resolve()
        target.mkdir(parents=True, exist_ok=True)
        if MUTANTS.is_symlink() and MUTANTS.resolve() != target:
            MUTANTS.unlink()
        if not MUTANTS.exists():
            MUTANTS.symlink_to(target, target_is_directory=True)
        if MUTANTS.resolve() != target:
            raise SystemExit(f"{MUTANTS} is a folder, not a link to {target}: move it there")
    return MUTANTS


def _rank(mutant: str) -> int:
    """The place of a mutant's module in :data:`ORDER`."""
    module = _module_of(mutant)
    return ORDER.index(module) if module in ORDER else len(ORDER)


def _mutmut(argv: list[str], modules: list[str] | None, again: frozenset[str]) -> None:
    """Run mutmut's command line in this process (it forks one child per mutant).

    mutmut 3.7 records which test covers a function from ``Item._nodeid``, which pytest 9
    no longer has; 3.8 reads ``nodeid`` but needs click >= 8.4.2, which faust-streaming
    0.15.3's pin (< 8.4) forbids. So 3.7, with the attribute it reads given back.

    With ``modules`` (and no mutant names in ``argv``), the mutants in ``again`` run first,
    whatever their verdict, then those modules' mutants without a verdict, module by module
    in :data:`ORDER` and, within one, those whose covering tests are quickest first: mutmut
    itself would run every module's quickest mutants first, so that an interrupted run
    leaves no module complete. A verdict is saved as soon as it is known, so an interrupted
    run is resumed by running it again.
    """
    import _pytest.nodes
    import mutmut.__main__ as mm
    from mutmut.__main__ import cli

    if not hasattr(_pytest.nodes.Node, "_nodeid"):
        nodeid = property(lambda self: self.nodeid)
        setattr(_pytest.nodes.Node, "_nodeid", nodeid)  # noqa: B010 (the name mutmut reads)
    if modules is not None:
        chosen = {m.removesuffix(".py").replace("/", ".") for m in modules}
        collect, estimate = mm.collect_source_file_mutation_data, mm.estimated_worst_case_time

        def pending(*, mutant_names: tuple[str, ...] | list[str]) -> Any:
            mutants, by_path = collect(mutant_names=mutant_names)
            left = [
                (m, name, None if name in again else verdict)  # None: mutmut runs it
                for m, name, verdict in mutants
                if name in again or (verdict is None and name.partition(".x")[0] in chosen)
            ]
            return left, by_path

        def in_order(mutant_name: str) -> float:  # only mutmut's run order reads it
            rank = -1 if mutant_name in again else _rank(mutant_name)
            return rank * 1e9 + estimate(mutant_name)

        mm.collect_source_file_mutation_data = pending
        mm.estimated_worst_case_time = in_order
    os.chdir(ROOT)
    cli.main(argv, standalone_mode=False)


def _module_of(mutant: str) -> str:
    """``projections/fit.py`` for ``projections.fit.x_holds__mutmut_3`` (or a glob of them)."""
    return mutant.partition(".x")[0].removesuffix(".*").replace(".", "/") + ".py"


def _runs() -> list[dict[str, Any]]:
    path = MUTANTS / "runs.json"
    return list(json.loads(path.read_text())) if path.exists() else []


def _note_run(modules: list[str]) -> None:
    """Append this run (the commit its sources come from, when, which modules) to
    ``mutants/runs.json``: the report says which commit each module's verdicts ran on."""
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no", *COPIED],
        cwd=ROOT, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    runs = _runs()
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    runs.append({"commit": head + ("+changes" if dirty else ""), "started": started,
                 "modules": modules})  # fmt: skip
    (MUTANTS / "runs.json").write_text(json.dumps(runs, indent=1) + "\n")


def workers() -> int:
    """One mutmut worker, two while the machine's load stays under 4 (it is shared)."""
    return 2 if os.getloadavg()[0] < 4 else 1


def run(modules: list[str], survivors: bool = False) -> int:
    """``run``: mutmut over the named modules (default: every pure module) in one mutmut run
    (each run first re-copies and re-checks the sources and runs the selected tests once
    unmutated, two to three minutes on two shared cores).

    Only mutants without a verdict run: a run stopped part way is resumed by running it
    again. mutmut keeps each verdict until the code of its function changes. With
    ``survivors``, every mutant that survived its last run runs again first (after new
    tests). Mutants named (or globbed) run again, and only they.
    """
    workdir()
    # Started in the background (nohup, &), Python would ignore SIGINT: let it and SIGTERM
    # stop the run the way Ctrl-C does, mutmut keeping every verdict.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    os.nice(10)
    os.environ["GRIDLEDGER_HYPOTHESIS_PROFILE"] = "mutation"
    os.environ["GRIDLEDGER_PROPERTY_EXAMPLES"] = "15"
    again = frozenset(
        n
        for verdicts in _results().values()
        for n, s in verdicts.items()
        if s == "survived" and n not in EQUIVALENT and survivors
    )
    paths = [m for m in modules if _pattern(m) != m] or pure_modules()
    names = [m for m in modules if _pattern(m) == m]
    _note_run(sorted({_module_of(n) for n in names} if names else set(paths)))
    started = time.monotonic()
    pid = os.fork()  # mutmut's state is global: its own process, so run() can be called again
    if pid == 0:
        code = 0
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # mutmut stops its children with it
        try:
            argv = ["run", "--max-children", str(workers()), *names]
            _mutmut(argv, None if names else paths, again)
        except BaseException:  # noqa: BLE001 (shown here: the child must not return into run())
            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush()
            os._exit(code)
    try:
        os.waitpid(pid, 0)
    except KeyboardInterrupt:  # stop mutmut too: it stops its children and keeps every verdict
        os.kill(pid, signal.SIGINT)
        os.waitpid(pid, 0)
    print(f"mutmut ran in {time.monotonic() - started:.0f} s")
    return 0


STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no_tests", 33: "no_tests",
          36: "timeout", 24: "timeout", -24: "timeout", 152: "timeout", 255: "timeout",
          34: "skipped", None: "not_checked"}  # fmt: skip
"""mutmut's exit codes (``status_by_exit_code`` in mutmut/__main__.py), in the report's words;
any other is 'suspicious'."""


def _meta(module: str) -> dict[str, Any]:
    meta = MUTANTS / f"{module}.meta"
    return json.loads(meta.read_text()) if meta.exists() else {}


def _results() -> dict[str, dict[str, str]]:
    """Module path -> mutant name -> status, from mutmut's ``mutants/*.meta``."""
    out: dict[str, dict[str, str]] = {}
    for module in pure_modules():
        codes = _meta(module).get("exit_code_by_key", {})
        out[module] = {name: STATUS.get(code, "suspicious") for name, code in codes.items()}
    return out


def _seconds(module: str) -> float:
    """The wall seconds mutmut took over the module's mutants that have a verdict."""
    meta = _meta(module)
    took = meta.get("durations_by_key", {})
    done = (n for n, code in meta.get("exit_code_by_key", {}).items() if code is not None)
    return round(sum(took.get(n, 0.0) for n in done), 1)


def _commits(module: str) -> list[str]:
    """The commits of the runs (``mutants/runs.json``) that ran the module's mutants."""
    return list(dict.fromkeys(r["commit"] for r in _runs() if module in r["modules"]))


def _functions(name: str, module: str) -> tuple[str, str]:
    """The original and the mutated text of the function a mutant changes."""
    import libcst as cst
    from mutmut.__main__ import (
        read_functions_from_index,
        read_mutant_function,
        read_mutants_module,
        read_original_function,
    )

    os.chdir(ROOT)
    functions = read_functions_from_index(name, module)
    if functions is None:
        tree = read_mutants_module(module)
        functions = (read_original_function(tree, name), read_mutant_function(tree, name))
    orig, mutant = (cst.Module([f]).code.strip("\n") for f in functions)
    return orig, mutant


def _snippet(name: str, module: str) -> dict[str, str]:
    """A mutant as data: a snippet that occurs once in the module and its mutated text.

    The changed lines, with as much context as makes them unique in the file (methods come
    back dedented from mutmut, so the class's indentation is put back).
    """
    import difflib

    orig, mutant = (text.splitlines() for text in _functions(name, module))
    source = (ROOT / module).read_text()
    ops = [op for op in difflib.SequenceMatcher(a=orig, b=mutant).get_opcodes() if op[0] != "equal"]
    i1, i2, j1, j2 = ops[0][1], ops[-1][2], ops[0][3], ops[-1][4]
    for context in range(len(orig)):
        a, b = max(i1 - context, 0), min(i2 + context, len(orig))
        before = orig[a:b]
        after = orig[a:i1] + mutant[j1:j2] + orig[i2:b]
        for indent in ("", "    ", "        "):
            find = "\n".join(indent + ln if ln else ln for ln in before) + "\n"
            if source.count(find) == 1:
                replace = "\n".join(indent + ln if ln else ln for ln in after) + "\n"
                changed = " / ".join(ln.strip() for ln in mutant[j1:j2])
                gone = " / ".join(ln.strip() for ln in orig[i1:i2])
                return {"find": find, "replace": replace, "mutated": changed or f"removed: {gone}"}
    raise ValueError(f"{name}: no unique snippet of {module} holds it")


def _tests_for(name: str) -> list[str]:
    """The tests that cover the mutant's function (mutmut's stats), fastest first."""
    stats = json.loads((MUTANTS / "mutmut-stats.json").read_text())
    function = name.partition("__mutmut_")[0]
    tests = stats["tests_by_mangled_function_name"].get(function, [])
    return sorted(tests, key=lambda t: stats["duration_by_test"].get(t, 0.0))


def report() -> int:
    """``report``: count the last run's verdicts per module and write the report."""
    results = _results()
    modules: dict[str, dict[str, int]] = {}
    survivors: list[dict[str, str]] = []
    equivalent: list[dict[str, str]] = []
    stale: list[str] = []
    seconds: dict[str, float] = {}
    commits: dict[str, list[str]] = {}
    for module, verdicts in results.items():
        counts = Counter(verdicts.values())
        for name, verdict in sorted(verdicts.items()):
            if verdict != "survived":
                if name in EQUIVALENT and verdict != "not_checked":
                    stale.append(f"{name} is listed as equivalent but was {verdict}")
                continue
            try:
                snippet = _snippet(name, module)
            except ValueError as gone:  # the source changed since: run the module again
                stale.append(str(gone))
                snippet = {"find": "", "replace": "", "mutated": "(source changed: run again)"}
            if name in EQUIVALENT:
                mutated, why = EQUIVALENT[name]
                if mutated != snippet["mutated"]:
                    stale.append(f"{name}: listed as '{mutated}', is '{snippet['mutated']}'")
                    survivors.append({"name": name, "module": module, **snippet})
                    continue
                counts["survived"] -= 1
                counts["equivalent"] += 1
                equivalent.append({"name": name, "module": module, "mutated": mutated, "why": why})
            else:
                survivors.append({"name": name, "module": module, **snippet})
        modules[module] = {
            "mutants": len(verdicts),
            **{k: counts[k] for k in ("killed", "survived", "equivalent", "timeout", "no_tests",
                                      "not_checked", "suspicious")},
        }  # fmt: skip
        if len(verdicts) > counts["not_checked"]:
            seconds[module] = _seconds(module)
            commits[module] = _commits(module)
    totals = {k: sum(m[k] for m in modules.values()) for k in next(iter(modules.values()))}
    tested = totals["killed"] + totals["survived"] + totals["timeout"]
    rate = totals["survived"] / tested if tested else 0.0
    killed = sorted(
        (name, module)
        for module, verdicts in results.items()
        for name, verdict in verdicts.items()
        if verdict == "killed"
    )
    random.Random(SAMPLE_SEED).shuffle(killed)
    sample: list[dict[str, Any]] = []
    for n, m in killed:  # the first SAMPLE_SIZE of a seeded shuffle that still apply
        if len(sample) == SAMPLE_SIZE:
            break
        try:
            sample.append({"name": n, "module": m, **_snippet(n, m), "tests": _tests_for(n)})
        except ValueError:
            continue
    import mutmut

    data = {
        "tool": f"mutmut {mutmut.__version__}",
        "command": "python -m bench.mutation run && python -m bench.mutation report",
        "tests": _mutmut_config()["pytest_add_cli_args_test_selection"],
        "modules": modules,
        "totals": totals,
        "seconds": seconds,
        "ran_on": commits,
        "survival_rate_non_equivalent": round(rate, 4),
        "survivors": survivors,
        "equivalent": equivalent,
        "sample_seed": SAMPLE_SEED,
        "sample": sample,
    }
    REPORT_JSON.write_text(json.dumps(data, indent=1) + "\n")
    REPORT_MD.write_text(_markdown(data))
    print(REPORT_MD.read_text())
    for problem in stale:
        print(f"stale: {problem}")
    return 1 if survivors or stale else 0


def _markdown(data: dict[str, Any]) -> str:
    keys = ("mutants", "killed", "survived", "equivalent", "timeout", "no_tests", "not_checked")
    lines = [
        f"# Mutation report ({data['tool']})",
        "",
        f"`{data['command']}`, against {', '.join(data['tests'])}.",
        "",
        "| module | " + " | ".join(keys) + " | seconds | ran on |",
        "|---" * (len(keys) + 3) + "|",
    ]
    seconds, ran_on = data["seconds"], data["ran_on"]
    rows = [*data["modules"].items(), ("**total**", data["totals"])]
    lines += [
        f"| {m} | " + " | ".join(str(c[k]) for k in keys)
        + f" | {seconds.get(m, '')} | {', '.join(ran_on.get(m, []))} |"
        for m, c in rows
    ]  # fmt: skip
    rate, total = data["survival_rate_non_equivalent"], data["totals"]
    run = total["mutants"] - total["not_checked"]
    took = sum(seconds.values())
    lines += [
        "",
        f"Mutants run: {run} of {total['mutants']} ({run / total['mutants']:.0%}) in "
        f"{took:.0f} s, the sum of their wall times ({run / max(took, 1) * 60:.0f} a "
        "minute); `not_checked` ones were not run for this report. `no_tests`: no test of the "
        "pure subset covers the function. `seconds`: the module's mutants' wall time; "
        "`ran on`: the commit(s) whose sources they ran on.",
        "",
        f"Non-equivalent survivors: {rate:.1%} of the non-equivalent mutants run (goal: at "
        "most 5 %).",
        "",
    ]
    lines += ["## Survivors", ""] + [
        f"- `{s['name']}`: `{s['mutated']}`" for s in data["survivors"]
    ] + ["", "## Equivalent mutants", ""] + [
        f"- `{e['name']}`: `{e['mutated']}`: {e['why']}" for e in data["equivalent"]
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Sampled:
    """One mutant of the report's sample: its snippet and the tests that cover it."""

    name: str
    module: str
    find: str
    replace: str
    mutated: str
    tests: list[str]


def sample(timeout_s: float) -> int:
    """``sample``: re-run the report's sampled mutants; 1 if one survives or is stale."""
    drawn = [Sampled(**s) for s in json.loads(REPORT_JSON.read_text())["sample"]]
    bad = 0
    for s in drawn:
        started = time.monotonic()
        m = Mutation(s.name, s.module, s.find, s.replace, s.mutated)
        verdict, detail = run_one(m, timeout_s, tests=tuple(s.tests))
        print(f"{verdict:9} {s.name:60} {time.monotonic() - started:4.0f} s  {detail}", flush=True)
        bad += verdict != "killed"
    print(f"{len(drawn)} sampled mutants: {len(drawn) - bad} killed, {bad} not")
    return 1 if bad else 0


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


def run_one(m: Mutation, timeout_s: float, tests: tuple[str, ...] = TESTS) -> tuple[str, str]:
    """('killed' | 'survived' | 'stale' | 'timeout', detail) for one mutation."""
    with tempfile.TemporaryDirectory(prefix="mutant-") as scratch:
        root = Path(scratch)
        _copy(root)
        problem = _apply(root, m) if m is not BASELINE else ""
        if problem:
            return "stale", problem
        env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
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


def rules(ids: list[str], timeout_s: float) -> int:
    """``rules``: apply each hand-written mutation, run the pure tests, list the survivors."""
    chosen = [m for m in MUTATIONS if not ids or m.id in ids]
    # A test failing without any mutation would "kill" every mutant: check the copy first.
    verdict, detail = run_one(BASELINE, timeout_s)
    if verdict != "survived":
        print(f"the unmutated copy does not pass its tests ({verdict}: {detail}); fix that first")
        return 2
    survivors: list[Mutation] = []
    broken: list[Mutation] = []
    for m in chosen:
        started = time.monotonic()
        verdict, detail = run_one(m, timeout_s)
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


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.mutation``: see the module's docstring."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.mutation",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="mutmut over the pure core (default: every module)")
    p_run.add_argument(
        "modules", nargs="*", help="e.g. projections/fit.py, or a glob of mutmut's mutant names"
    )
    p_run.add_argument("--survivors", action="store_true", help="every last survivor again, too")
    sub.add_parser("report", help="write bench/results/mutation.{json,md}")
    p_sample = sub.add_parser("sample", help="re-run the report's seeded sample")
    p_sample.add_argument("--timeout", type=float, default=120.0, help="seconds per mutant")
    p_rules = sub.add_parser("rules", help="the hand-written mutations")
    p_rules.add_argument("ids", nargs="*", help="mutation ids (default: all)")
    p_rules.add_argument("--list", action="store_true", help="list them and exit")
    p_rules.add_argument("--timeout", type=float, default=600.0, help="seconds per mutation")
    args = parser.parse_args(argv)
    if args.command == "run":
        unknown = sorted(m for m in set(args.modules) - set(pure_modules()) if _pattern(m) != m)
        if unknown:
            parser.error(f"not a pure module of [tool.mutmut]: {unknown}")
        return run(args.modules, args.survivors)
    if args.command == "report":
        return report()
    if args.command == "sample":
        return sample(args.timeout)
    unknown = sorted(set(args.ids) - {m.id for m in MUTATIONS})
    if unknown:
        parser.error(f"unknown mutation ids {unknown}; see rules --list")
    if args.list:
        for m in MUTATIONS:
            if not args.ids or m.id in args.ids:
                print(f"{m.id:32} {m.path:28} {m.breaks}")
        return 0
    return rules(args.ids, args.timeout)


if __name__ == "__main__":
    raise SystemExit(main())
