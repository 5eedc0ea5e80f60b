"""Job mix and failure mix of a simulation, parsed from ``success=70,oom=10,...``."""

from __future__ import annotations

import random
from dataclasses import dataclass

from services.simulator.facts import Outcome

DEFAULT_MIX = "success=70,user_error=10,oom=10,node_lost=10"


@dataclass(frozen=True)
class JobMix:
    """Weights per :class:`Outcome`, job duration range and GPUs per job."""

    weights: tuple[tuple[Outcome, float], ...]
    min_duration_s: float = 1.0
    max_duration_s: float = 3.0
    gpus: tuple[int, ...] = (1,)
    seed: int = 1

    @classmethod
    def parse(
        cls, text: str = DEFAULT_MIX, duration: str = "1-3", gpus: str = "1", seed: int = 1
    ) -> JobMix:
        """``"success=70,oom=30"``, ``"1-3"`` (seconds), ``"1,1,2"`` (GPUs per job, sampled)."""
        weights = []
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, _, value = part.partition("=")
            try:
                weights.append((Outcome(name.strip()), float(value or 1)))
            except ValueError:
                choices = ", ".join(o.value for o in Outcome)
                raise ValueError(
                    f"bad mix entry {part!r}: use NAME=WEIGHT with NAME in {choices}"
                ) from None
        low, _, high = duration.partition("-")
        return cls(
            tuple(weights),
            float(low),
            float(high or low),
            tuple(int(g) for g in gpus.split(",")),
            seed,
        )

    def outcome(self, job_id: str, attempt: int) -> Outcome:
        """First attempts follow the mix; retries succeed (so every job ends)."""
        if attempt > 1:
            return Outcome.SUCCESS
        rnd = random.Random(f"{self.seed}:{job_id}")
        names, weights = zip(*self.weights, strict=True)
        return rnd.choices(names, weights)[0]

    def duration_s(self, job_id: str, attempt: int) -> float:
        """How long the attempt runs: random, but the same for the same seed, job and attempt."""
        rnd = random.Random(f"{self.seed}:{job_id}:{attempt}:d")
        return rnd.uniform(self.min_duration_s, self.max_duration_s)

    def gpu_count(self, index: int) -> int:
        """The GPUs the ``index``-th job asks for, cycling through the mix's list."""
        return self.gpus[index % len(self.gpus)]
