"""A simulated GPU fleet speaking the agent protocol through the Ledger (benchmarks, tests)."""
