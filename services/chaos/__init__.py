"""The chaos suite: a whole installation under real faults, and invariants over its ledger."""
