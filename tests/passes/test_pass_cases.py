"""Each pass's text-in/text-out cases, FileCheck style: one ``cases/*.test`` file holds the
input, the command lines and the expected output (or diagnostics).

A case file is directives, a line ``----``, then the input::

    RUN: layerc opt %s -p 'slice-layer{layer=1}' --emit meta | filecheck %c
    INPUT: dump.txt
    CHECK: op %add = aten.add.Tensor {{.*}} layer=1
    ----
    <the input, written to %s>

``%s``: the input file (named by ``INPUT``), ``%c``: the case file (its ``CHECK`` lines, read by
LLVM FileCheck's Python port), ``%t``: a scratch folder. Every RUN line must exit 0 (a pipe
fails where any part fails); ``not CMD`` succeeds where CMD fails, for errors, as in lit.
``REQUIRES: transformers`` skips a case where it is not installed.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

from layerc.passes.registry import BUILTIN_PASSES

CASES = sorted((Path(__file__).parent / "cases").glob("*.test"))
BIN = Path(sys.executable).parent


def parse_case(path: Path) -> tuple[dict[str, list[str]], str]:
    head, sep, body = path.read_text(encoding="utf-8").partition("\n----\n")
    assert sep, f"{path.name}: no '----' line before the input"
    directives: dict[str, list[str]] = {}
    for line in head.splitlines():
        key, colon, value = line.partition(":")
        if colon and key.strip() in ("RUN", "INPUT", "REQUIRES"):
            directives.setdefault(key.strip(), []).append(value.strip())
    return directives, body


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_pass_case(case, tmp_path):
    directives, body = parse_case(case)
    for need in directives.get("REQUIRES", []):
        if find_spec(need) is None:
            pytest.skip(f"needs {need}")
    source = tmp_path / (directives.get("INPUT", ["input.txt"])[0])
    source.write_text(body, encoding="utf-8")
    tools = (f'layerc() {{ {shlex.quote(sys.executable)} -m layerc.tools.driver "$@"; }}\n'
             f'filecheck() {{ {shlex.quote(str(BIN / "filecheck"))} "$@"; }}\n'
             f'layerc_python() {{ {shlex.quote(sys.executable)} "$@"; }}\n'
             'not() { if "$@"; then return 1; fi; }\n')
    for run in directives["RUN"]:
        command = tools + (run.replace("%s", shlex.quote(str(source))).replace("%c", shlex.quote(str(case)))
                           .replace("%t", shlex.quote(str(tmp_path))))
        proc = subprocess.run(["bash", "-o", "pipefail", "-c", command], capture_output=True, text=True, cwd=tmp_path)
        assert proc.returncode == 0, f"{case.name}: {run}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"


def test_every_pass_has_a_case():
    covered = set()
    for case in CASES:
        for run in parse_case(case)[0]["RUN"]:
            for pipeline in re.findall(r"-p '([^']*)'", run):
                covered |= set(re.findall(r"(?:^|,)\s*([a-z][a-z0-9-]*)", re.sub(r"\{[^}]*\}", "", pipeline)))
    assert sorted(set(BUILTIN_PASSES) - covered) == []
