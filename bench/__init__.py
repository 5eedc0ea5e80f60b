"""gridledger benchmarks: ``gridledger bench [NAME] [--quick]`` (see bench/README.md)."""

NAMES = ("scheduling", "simulation", "replay", "sink", "pipeline", "launch", "logs")
"""The benchmarks, in running order: the cheap, Kafka/Postgres-only ones first. The CLI
reads this tuple without importing any benchmark."""
