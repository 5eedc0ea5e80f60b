"""The pure core stays pure: no broker, database, Docker or GPU client, no clock, no dice."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN_MODULES = ("aiokafka", "faust", "asyncpg", "docker", "pynvml")

PROBE = """
import importlib, json, pkgutil, sys
import projections, schemas
for package in (projections, schemas):
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        importlib.import_module(info.name)
print(json.dumps(sorted(sys.modules)))
"""


def test_core_imports_no_infrastructure_client() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, check=True
    )
    loaded = json.loads(out.stdout)
    leaked = [m for m in loaded if m.split(".")[0] in FORBIDDEN_MODULES]
    assert leaked == [], f"projections/schemas pulled in {leaked}"


# Calls that read the clock or a random source: time must come from events.
CLOCK_CALLS = {"now", "utcnow", "today", "time", "time_ns", "monotonic", "perf_counter"}
RANDOM_CALLS = {"uuid1", "uuid4", "urandom", "token_hex", "token_bytes", "randbytes"}
FORBIDDEN_IMPORTS = {"random", "secrets"}


def _violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names]
            module = node.module if isinstance(node, ast.ImportFrom) else None
            for name in [module or "", *names]:
                if name.split(".")[0] in FORBIDDEN_IMPORTS:
                    found.append(f"{path.name}:{node.lineno} imports {name}")
            if module == "time" or module == "uuid" and set(names) & RANDOM_CALLS:
                found.append(f"{path.name}:{node.lineno} imports from {module}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            attr = node.func.attr
            owner = node.func.value
            owner_name = owner.id if isinstance(owner, ast.Name) else ""
            if attr in {"now", "utcnow", "today"} or (owner_name == "time" and attr in CLOCK_CALLS):
                found.append(f"{path.name}:{node.lineno} reads the clock ({owner_name}.{attr})")
            if attr in RANDOM_CALLS or owner_name in FORBIDDEN_IMPORTS:
                found.append(f"{path.name}:{node.lineno} reads randomness ({owner_name}.{attr})")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in RANDOM_CALLS
        ):
            found.append(f"{path.name}:{node.lineno} reads randomness ({node.func.id})")
    return found


def test_projections_read_no_clock_and_no_randomness() -> None:
    files = sorted((ROOT / "projections").glob("**/*.py"))
    assert files
    problems = [v for path in files for v in _violations(path)]
    assert problems == []


def test_the_scan_catches_what_it_should(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import random\nimport time\nfrom datetime import datetime\nimport uuid\n"
        "a = datetime.now()\nb = time.time()\nc = uuid.uuid4()\nd = random.random()\n"
    )
    problems = _violations(bad)
    assert any("imports random" in p for p in problems)
    assert any("datetime.now" in p for p in problems)
    assert any("time.time" in p for p in problems)
    assert any("uuid.uuid4" in p for p in problems)
