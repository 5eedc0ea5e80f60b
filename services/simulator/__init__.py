"""A simulated GPU fleet speaking the agent protocol through the Ledger (benchmarks, tests)."""

from services.simulator.facts import AttemptFacts, Outcome
from services.simulator.fleet import SimFleet
from services.simulator.mix import JobMix

__all__ = ["AttemptFacts", "JobMix", "Outcome", "SimFleet"]
