"""gridledger benchmarks: ``gridledger bench [NAME] [--quick]`` (see bench/README.md)."""
