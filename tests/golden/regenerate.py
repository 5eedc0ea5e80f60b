"""Regenerate the golden fixtures from the scenario builders (run from the repo root).

    python -m tests.golden.regenerate            # every scenario
    python -m tests.golden.regenerate cuda_oom   # some

Review the diff before committing: a changed fixture is a changed behaviour.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.golden.golden import HERE, dump
from tests.projections.scenarios import SCENARIOS


def main(names: list[str]) -> None:
    for name in names or sorted(SCENARIOS):
        build = SCENARIOS[name]
        h = build()
        path = HERE / f"{name}.json"
        dump(path, (build.__doc__ or name.replace("_", " ")).strip(), h.events, h.ticks)
        print("wrote", path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path)


if __name__ == "__main__":
    main(sys.argv[1:])
