"""The pure core stays pure (no broker, database, Docker or GPU client, no clock, no dice),
and imports point one way: core <- runtime <- tooling, with no two packages importing
each other."""

from __future__ import annotations

import ast
import functools
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


# Pure deciders that live beside their adapters in services/. Each must pass the same
# rules as projections/: no infrastructure client in its import graph, no clock, no dice.
# services/agent/logs.py is not listed: it times flushes with time.monotonic by default
# and guards its buffers with a threading.Condition.
PURE_SERVICE_MODULES = (
    "services/scheduler/core.py",
    "services/scheduler/fleet.py",
    "services/scheduler/placement.py",
    "services/scheduler/queue.py",
    "services/scheduler/snapshot.py",
    "services/processors/watchdog.py",
    "services/processors/dispatch.py",
    "services/sink/rows.py",
    "services/agent/meter.py",
    "services/notary/chain.py",
    "services/notary/findings.py",
)


def test_core_imports_no_infrastructure_client() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, check=True
    )
    loaded = json.loads(out.stdout)
    leaked = [m for m in loaded if m.split(".")[0] in FORBIDDEN_MODULES]
    assert leaked == [], f"projections/schemas pulled in {leaked}"


def _module_path(name: str) -> Path | None:
    """The project file a dotted module name resolves to, or None for third-party ones."""
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _import_graph_leaks(start: Path) -> list[str]:
    """Forbidden modules reachable from ``start`` through the project's own imports.

    Static, not a live import: importing ``services.scheduler.core`` runs
    ``services/scheduler/__init__.py``, which re-exports the Kafka-backed service; the
    decider's own code does not depend on it, and that is what the rule is about. A
    package named in an import is followed through its ``__init__``.
    """
    leaks: list[str] = []
    seen: set[Path] = set()
    todo = [start]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            else:
                continue
            for name in names:
                if name.split(".")[0] in FORBIDDEN_MODULES:
                    leaks.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {name}")
                elif (target := _module_path(name)) is not None:
                    todo.append(target)
    return leaks


def test_pure_service_modules_import_no_infrastructure_client() -> None:
    leaks = [leak for module in PURE_SERVICE_MODULES for leak in _import_graph_leaks(ROOT / module)]
    assert leaks == [], f"pure deciders in services/ reach infrastructure clients: {leaks}"


def test_pure_service_modules_read_no_clock_and_no_randomness() -> None:
    problems = [v for module in PURE_SERVICE_MODULES for v in _violations(ROOT / module)]
    assert problems == []


def test_the_graph_walk_catches_an_indirect_import(tmp_path: Path) -> None:
    # A listed module that imports a project module which imports aiokafka must fail.
    assert _import_graph_leaks(ROOT / "services/processors/watchdog.py") == []
    leaks = _import_graph_leaks(ROOT / "services/processors/app.py")
    assert leaks, "services/processors/app.py builds a Kafka app; the walk must see that"
    shim = tmp_path / "shim.py"
    shim.write_text("from services.ledger.client import LedgerRecord\n")
    assert any("aiokafka" in leak for leak in _import_graph_leaks(shim))


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


# The Kafka client is the ledger's business (services/ledger): every live consumer reads
# through its one subscription, the processors' faust app included. faust (and mode, the
# service library it is built on) is the processors' framework and stays in
# services/processors/. Everything else in services/ takes a ledger and asks it. The
# client distribution (client/, outside services/) is the exception by design: the
# subscriber other teams' services install alone; tests/client/test_clean_venv.py checks
# that it pulls in nothing of the server.
KAFKA_CLIENTS = ("aiokafka", "faust", "kafka")
ALLOWED = {"aiokafka": "services/ledger/", "kafka": "services/ledger/"}
ALLOWED |= dict.fromkeys(("faust", "mode"), "services/processors/")


def _kafka_imports(path: Path, roots: tuple[str, ...] = KAFKA_CLIENTS) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [
            f"{path.name}:{node.lineno} imports {name}"
            for name in names
            if name.split(".")[0] in roots
        ]
    return found


def test_only_the_ledger_imports_the_kafka_client_and_only_the_processors_faust() -> None:
    files = sorted((ROOT / "services").glob("**/*.py"))
    assert files
    outside = [
        f"{path.parent.relative_to(ROOT)}/{found}"
        for root, allowed in ALLOWED.items()
        for path in files
        if not str(path.relative_to(ROOT)).startswith(allowed)
        for found in _kafka_imports(path, (root,))
    ]
    assert outside == [], (
        "only services/ledger may import the Kafka client (take a ledger: "
        "services.ledger.LedgerPort, its subscribe for a live consumer), and only "
        f"services/processors/ faust: {outside}"
    )
    assert _kafka_imports(ROOT / "services/processors/app.py", ("faust",)), "the app is faust's"


def test_the_kafka_scan_sees_every_form_of_import(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import aiokafka\nfrom aiokafka.errors import KafkaError\nimport faust.types\n"
        "from services.ledger import TopicPartition\n"
    )
    found = _kafka_imports(probe)
    assert [f.rsplit(" ", 1)[1] for f in found] == ["aiokafka", "aiokafka.errors", "faust.types"]
    assert _kafka_imports(ROOT / "services/ledger/client.py"), "the ledger itself imports it"


# ----------------------------------------------------------------------------- the wall
# The layers, lowest first: a module may import its own layer and the layers below it,
# never one above. The pure core knows nothing of the services; the runtime (every
# service, the ledger, ops) knows nothing of the tooling that starts, loads, breaks or
# measures it. A package of services/ is in the runtime unless it is listed as tooling.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("core", ("schemas", "projections")),
    ("runtime", ("services",)),
    (
        "tooling",
        (
            "infra",
            "bench",
            "services.cli",
            "services.demo",
            "services.chaos",
            "services.simulator",
        ),
    ),
)
PROJECT_PACKAGES = ("schemas", "projections", "services", "infra", "bench")


def _layer(module: str) -> int:
    """The rank of ``module``'s layer: the most specific listed prefix decides."""
    best, rank = "", -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(best):
                best, rank = prefix, index
    assert rank >= 0, f"{module} is in no layer: add it to LAYERS"
    return rank


def _package(module: str) -> str:
    """The unit cycles are judged between: a top-level package, or one of services/."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "services" and len(parts) > 1 else parts[0]


def _is_module(root: Path, name: str) -> bool:
    base = root.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


@functools.cache
def _project_imports(root: Path) -> list[tuple[str, str, str]]:
    """``(importer, imported, where)`` for every import of a project module in ``root``
    (parsed once per root: both rules read it)."""
    found = []
    for top in PROJECT_PACKAGES:
        for path in sorted((root / top).rglob("*.py")):
            relative = path.relative_to(root).with_suffix("")
            parts = list(relative.parts[:-1] if relative.name == "__init__" else relative.parts)
            module = ".".join(parts)
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    if node.level:  # relative: from the importer's package
                        base = parts if relative.name == "__init__" else parts[:-1]
                        base = base[: len(base) - node.level + 1]
                        names = [".".join([*base, *([node.module] if node.module else [])])]
                    else:
                        names = [node.module or ""]
                    # ``from services import s3client`` imports the module services.s3client.
                    names = [
                        f"{names[0]}.{a.name}"
                        if _is_module(root, f"{names[0]}.{a.name}")
                        else names[0]
                        for a in node.names
                    ]
                else:
                    continue
                for name in names:
                    if name.split(".")[0] in PROJECT_PACKAGES:
                        where = f"{path.relative_to(root)}:{node.lineno} imports {name}"
                        found.append((module, name, where))
    return found


def _upward(root: Path) -> list[str]:
    return [where for a, b, where in _project_imports(root) if _layer(b) > _layer(a)]


def _cycles(root: Path) -> list[list[str]]:
    """Groups of packages that reach each other through imports (Tarjan's components)."""
    graph: dict[str, set[str]] = {}
    for a, b, _ in _project_imports(root):
        if _package(a) != _package(b):
            graph.setdefault(_package(a), set()).add(_package(b))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while (top := stack.pop()) != node:
                group.append(top)
            if group:
                cycles.append(sorted([node, *group]))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_no_import_points_up_the_layers() -> None:
    upward = _upward(ROOT)
    assert upward == [], (
        "the runtime imports nothing of the tooling, the core nothing of the services; "
        f"move what is needed down (docs/architecture.md, 'Layout'): {upward}"
    )


def test_no_two_packages_import_each_other() -> None:
    assert _cycles(ROOT) == []


def test_the_wall_sees_an_upward_import_and_a_cycle(tmp_path: Path) -> None:
    for name, text in {
        "schemas/a.py": "",
        "services/ledger/x.py": "from services.ops import y\n",
        "services/ops/y.py": "from services.ledger import x\nfrom infra import tool\n",
        "infra/tool.py": "from schemas import a\n",
        "services/cli/z.py": "from . import w\nfrom ..ops import y\n",
        "services/cli/w.py": "from services import demo\n",
        "services/demo/__init__.py": "",
        "services/cli/__init__.py": "",
        "services/ops/v.py": "from services import cli\n",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert sorted(_upward(tmp_path)) == [
        "services/ops/v.py:1 imports services.cli",
        "services/ops/y.py:2 imports infra.tool",
    ]
    assert _cycles(tmp_path) == [["services.cli", "services.ledger", "services.ops"]]
    imported = {b for a, b, _ in _project_imports(tmp_path) if a == "services.cli.z"}
    assert imported == {"services.cli.w", "services.ops.y"}
    assert ("services.cli.w", "services.demo", "services/cli/w.py:1 imports services.demo") in (
        _project_imports(tmp_path)
    )
