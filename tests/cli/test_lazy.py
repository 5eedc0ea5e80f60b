"""Commands load lazily: `gridledger --help`, `--version` and TAB completion import no
command module, and no command's module imports the agent, docker, boto3, faust,
asyncpg or the Kafka client before the command runs. Checked on which modules a real
process imported, never on time (the time is printed beside `python -c pass`)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

from services.cli.main import COMMANDS, command

HEAVY = ("services.agent.agent", "docker", "boto3", "botocore", "faust", "asyncpg", "aiokafka")
"""What no help, completion or command module import may load."""

ENTRY_POINT = (
    "import json, os, sys\n"
    "from services.cli.main import main\n"
    "try:\n"
    "    code = main()\n"
    "finally:\n"
    "    with open(os.environ['MODULES_TO'], 'w') as f:\n"
    "        json.dump(sorted(sys.modules), f)\n"
    "sys.exit(code)\n"
)
"""The console script's `main()`, writing the modules it imported on the way out."""


def run_cli(tmp_path: Path, *args: str, **env: str) -> tuple[str, set[str]]:
    """Run the CLI in a fresh interpreter; its stdout and every module it imported."""
    modules = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", ENTRY_POINT, *args],
        env={**os.environ, **env, "MODULES_TO": str(modules)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout, set(json.loads(modules.read_text()))


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


COMMAND_MODULES = tuple(sorted({module for module, _ in COMMANDS.values()}))


def test_help_and_version_import_no_command_module(tmp_path: Path) -> None:
    out, modules = run_cli(tmp_path, "--help")
    assert "submit" in out and "Exit codes:" in out
    for name, (_, line) in COMMANDS.items():
        assert (line is None) != (f"  {name} " in out), f"{name}: listed iff it has a help line"
    assert loaded(modules, COMMAND_MODULES + HEAVY) == []
    assert "pydantic" not in modules and "schemas.events" not in modules

    out, modules = run_cli(tmp_path, "--version")
    assert out == f"gridledger {version('gridledger')}\n"
    assert loaded(modules, COMMAND_MODULES + HEAVY) == []


def test_tab_completion_of_command_names_imports_no_command_module(tmp_path: Path) -> None:
    out, modules = run_cli(
        tmp_path, _GRIDLEDGER_COMPLETE="bash_complete", COMP_WORDS="gridledger s", COMP_CWORD="1"
    )
    assert out.split() == sorted(
        f"plain,{n}" for n, (_, line) in COMMANDS.items() if line and n.startswith("s")
    )
    assert loaded(modules, COMMAND_MODULES + HEAVY) == []

    # Completing one command's options loads that command's module only, and nothing heavy.
    out, modules = run_cli(
        tmp_path,
        _GRIDLEDGER_COMPLETE="bash_complete",
        COMP_WORDS="gridledger dev up --br",
        COMP_CWORD="3",
    )
    assert out.split() == ["plain,--brokers"]
    assert loaded(modules, COMMAND_MODULES) == ["services.cli.dev"]
    assert loaded(modules, HEAVY) == []


def test_no_command_module_imports_anything_heavy_at_import() -> None:
    """One interpreter imports each module in turn and lists what each added."""
    code = (
        "import importlib, json, sys\n"
        "added = {}\n"
        f"for name in {list(COMMAND_MODULES)!r}:\n"
        "    before = set(sys.modules)\n"
        "    importlib.import_module(name)\n"
        "    added[name] = sorted(set(sys.modules) - before)\n"
        "print(json.dumps(added))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    heavy = {m: loaded(set(new), HEAVY) for m, new in json.loads(done.stdout).items()}
    assert {m: h for m, h in heavy.items() if h} == {}


def test_every_row_names_a_command_of_its_module_and_every_command_has_a_row() -> None:
    for module_name in COMMAND_MODULES:
        defined = {c.name for c in importlib.import_module(module_name).COMMANDS}
        rows = {name for name, (module, _) in COMMANDS.items() if module == module_name}
        assert defined == rows, module_name
    for name, (_, line) in COMMANDS.items():
        loaded_command = command(name)
        assert loaded_command.short_help == line and loaded_command.hidden == (line is None)


def test_help_time_beside_python_pass(tmp_path: Path) -> None:
    """Prints the figures (best of 5); asserts nothing about time."""

    def best(argv: list[str]) -> float:
        times = []
        for _ in range(5):
            began = time.perf_counter()
            subprocess.run(argv, capture_output=True, check=True, timeout=120)
            times.append(time.perf_counter() - began)
        return min(times)

    bare = best([sys.executable, "-c", "pass"])
    entry = "import sys; from services.cli.main import main; sys.exit(main())"
    helped = best([sys.executable, "-c", entry, "--help"])
    print(f"python -c pass {bare * 1000:.0f} ms; gridledger --help {helped * 1000:.0f} ms")
