"""Imports run one way: ``ir`` ← ``grammar`` ← ``passes`` ← ``backends`` ← ``tools`` (the design
card). A package may use its own modules and those to its left, never one to its right: neither
by an import (at the top or inside a function) nor by reading another package's data files."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ORDER = ("ir", "grammar", "passes", "backends", "tools")
_DATA = re.compile(r"""resources\.files\(\s*["']layerc\.(\w+)""")


def uses(path: Path) -> list[tuple[int, str]]:
    """(line, package) for every ``layerc.<package>`` a module imports or reads data from."""
    text = path.read_text(encoding="utf-8")
    out = []
    for node in ast.walk(ast.parse(text)):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        out += [(node.lineno, n.split(".")[1]) for n in names if n.startswith("layerc.") and n.count(".") >= 1]
    for m in _DATA.finditer(text):
        out.append((text.count("\n", 0, m.start()) + 1, m.group(1)))
    return out


@pytest.mark.parametrize("package", ORDER)
def test_imports_run_one_way(package):
    allowed = set(ORDER[: ORDER.index(package) + 1])
    wrong = [f"{path.relative_to(ROOT)}:{line}: uses layerc.{used}"
             for path in sorted((ROOT / package).rglob("*.py"))
             for line, used in uses(path) if used in ORDER and used not in allowed]
    assert wrong == []


def test_the_check_sees_a_wrong_way_import(tmp_path):
    """The check can fail: a pass importing a tool, or a grammar reading a pass's data, is seen."""
    bad = tmp_path / "m.py"
    bad.write_text("def f():\n    from layerc.tools.optrace import build_profiled_model\n"
                   "x = resources.files('layerc.passes').joinpath('data/models.toml')\n")
    assert uses(bad) == [(2, "tools"), (3, "passes")]
