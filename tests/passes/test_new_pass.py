"""The README's pass contract in action: a new pass is one new file (the README's example, put
in the passes package) that pipelines, ``--list-passes`` and the pass manager find with no
edit elsewhere; and the README's "Use from Python" block runs as written."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import layerc.passes as passes_package
from layerc.passes import registry
from tests.conftest import ROOT, SHARED
from tests.layerc_cli import run_layerc

README = (ROOT / "README.md").read_text(encoding="utf-8")


def _block(heading: str) -> str:
    """The first python code block after ``heading``."""
    section = README[README.index(heading):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.fixture
def new_pass_file(tmp_path, monkeypatch):
    """The README's example pass as a new module of the passes package (found on the
    package's path, as a file dropped in passes/ is)."""
    folder = tmp_path / "extra"
    folder.mkdir()
    (folder / "layer_op_counts.py").write_text(_block("### Add a pass"), encoding="utf-8")
    monkeypatch.setattr(passes_package, "__path__", [*passes_package.__path__, str(folder)])
    registry.discovered_passes.cache_clear()
    yield folder
    registry.discovered_passes.cache_clear()
    sys.modules.pop("layerc.passes.layer_op_counts", None)


@pytest.fixture(scope="module")
def dump(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("dump")
    rc, _, err = run_layerc("gen-dump", "llama", d, "--layers", "3")
    assert rc == 0, err
    return d


def test_a_new_pass_is_one_file(new_pass_file, dump):
    rc, out, err = run_layerc("opt", dump, "-p", "layer-op-counts{min-ops=1}", "--print-ir-after-all")
    assert rc == 0, err
    remarks = [line for line in err.splitlines() if ": remark: layer " in line]
    assert [r.split("remark: ")[1].split(":")[0] for r in remarks] == ["layer 0", "layer 1", "layer 2"]
    assert all(int(r.split(": ")[-1].split()[0]) > 10 for r in remarks)
    # what it requires ran first, and shows
    dumps = [line.split()[5] for line in err.splitlines() if "IR Dump After" in line]
    assert dumps == ["tag-weights", "slice-layers", "layer-op-counts{min-ops=1}"]
    rc, out, _ = run_layerc("opt", "--list-passes")
    assert "  layer-op-counts{min-ops=int}\n      Report the op count of every decoder layer" in out
    entry = out.split("  layer-op-counts{min-ops=int}\n")[1].split("\n  ", 2)
    assert entry[1] == "    requires: slice-layers"
    # on another IR it is named as a graph pass
    rc, _, err = run_layerc("opt", SHARED / "data/traces/torch/hf_bert-small_h100.json.gz", "-p", "layer-op-counts")
    assert rc == 1 and "pass 'layer-op-counts' runs on the graph IR" in err


def test_without_the_file_the_name_is_unknown(dump):
    rc, _, err = run_layerc("opt", dump, "-p", "layer-op-counts")
    assert rc == 1 and "unknown pass 'layer-op-counts'" in err


def test_use_from_python_runs_as_written(dump, capsys):
    code = _block("### Use from Python")
    namespace = {"DUMP": str(dump), "TRACE": str(SHARED / "data/traces/torch/hf_bert-small_h100.json.gz")}
    exec(compile(code, "README.md", "exec"), namespace)
    first, second = capsys.readouterr().out.splitlines()
    assert first.startswith("1 ") and first.endswith(" ops") and int(first.split()[1]) > 10
    assert second == "ground-truth [4]"
