"""No function of the pure core (projections/ and the pure deciders beside their adapters)
is longer than a screen: 80 lines, its docstring included.

A decider that grows past it is split along its seams (as ``evidence.gather`` is into the
values of the spec, the placement, the process, the outputs, the cancel and the trigger),
so that each rule can be read, and mutated, on its own.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.test_import_rule import PURE_SERVICE_MODULES

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 80


def _long_functions(source: str, limit: int) -> list[tuple[str, int]]:
    """(name, lines) of every function (nested ones and methods too) over ``limit`` lines."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None
            lines = node.end_lineno - node.lineno + 1
            if lines > limit:
                found.append((node.name, lines))
    return found


def test_no_function_of_the_pure_core_is_over_the_limit() -> None:
    files = [
        *sorted((ROOT / "projections").rglob("*.py")),
        *(ROOT / m for m in PURE_SERVICE_MODULES),
    ]
    assert len(files) > 20
    long = {
        f"{path.relative_to(ROOT)}:{name}": lines
        for path in files
        for name, lines in _long_functions(path.read_text(), LIMIT)
    }
    assert long == {}, f"split these along their seams (at most {LIMIT} lines each)"


def test_the_check_finds_a_long_function_and_passes_one_at_the_limit() -> None:
    def body(lines: int, indent: str) -> str:
        return "".join(f"{indent}x{i} = {i}\n" for i in range(lines))

    assert _long_functions(f"def f():\n{body(LIMIT, '    ')}", LIMIT) == [("f", LIMIT + 1)]
    method = f"class C:\n    async def g(self):\n{body(LIMIT - 1, '        ')}"
    assert _long_functions(method, LIMIT) == []
