"""Verdicts come from what the platform heard, not from an agent's clock or pauses.

- an agent whose clock runs 120 s behind (libfaketime) keeps its attempts;
- an agent paused with SIGSTOP past the deadlines is declared lost; after
  SIGCONT its late facts are recorded and the job still ends exactly once.
"""

from __future__ import annotations

import shutil
import signal

import pytest

from tests.system.conftest import System, bound_s, sh

pytestmark = pytest.mark.integration


def test_an_agent_with_its_clock_120s_behind_keeps_its_attempts(system: System) -> None:
    if shutil.which("faketime") is None:
        pytest.skip("faketime is not installed (Debian package faketime; infra/setup.sh)")
    system.start_agent("behind", provider="acme", count=2, wrapper=["faketime", "-f", "-120s"])
    limits = {"queue_timeout_s": 120, "max_runtime_s": 120}
    # Longer than silence + lost deadlines together (4 + 6 s): judged by the agent's clock,
    # every heartbeat would be two minutes old and the attempts lost at once.
    specs = [sh(f"sleep 14; exit {code}", limits=limits) for code in (0, 1)]
    jobs = [system.submit(spec) for spec in specs]
    system.wait_terminal(jobs, 120)

    for job_id, spec, expected in zip(jobs, specs, ("succeeded", "failed"), strict=True):
        doc = system.job(job_id)
        types = [e["type"] for e in system.events(job_id)]
        assert doc["status"] == expected, (job_id, types)
        assert len(doc["attempts"]) == 1 and doc["attempts"][0]["node_id"] == "behind"
        assert "AttemptUnresponsive" not in types and "AttemptLost" not in types, types
        system.check_invariants(job_id, bound_s(spec, system.settings))


def test_a_paused_agent_is_declared_lost_and_its_late_facts_reconcile(system: System) -> None:
    system.start_agent("paused", provider="acme", count=2)
    spec = sh("echo started; sleep 15; echo finished", limits={"queue_timeout_s": 120},
              retry={"backoff_s": 1})  # fmt: skip
    job_id = system.submit(spec)
    system.wait_status([job_id], {"running"}, 90)
    system.signal_agent("paused", signal.SIGSTOP)
    try:
        system.wait_for(
            lambda: "AttemptLost" in [e["type"] for e in system.events(job_id)],
            60,
            "the paused agent's attempt to be declared lost",
        )
    finally:
        system.signal_agent("paused", signal.SIGCONT)
    system.wait_terminal([job_id], 150)

    events = system.events(job_id)
    types = [e["type"] for e in events]
    lost = next(e for e in events if e["type"] == "AttemptLost")
    assert lost["attempt"] == 1
    # The late facts of attempt 1 are on the ledger as they happened, not dropped.
    late = [e for e in events if e["attempt"] == 1 and e["type"] in ("ProcessExited",
            "ComputeReleased")]  # fmt: skip
    assert {e["type"] for e in late} == {"ProcessExited", "ComputeReleased"}, types
    doc = system.job(job_id)
    assert doc["status"] == "succeeded", (doc.get("failure"), types)
    record = system.check_invariants(job_id, bound_s(spec, system.settings))
    # One attempt's result won; the user pays for that one only, never for both.
    billed = [a["attempt"] for a in record["attempts"] if a["billable_gpu_seconds"] > 0]
    assert len(billed) == 1, record["attempts"]
