"""The diagnostic engine (``ir.diagnostics``): one ``Diagnostic`` for readers, passes and the
driver; ``--werror``; ``--diagnostics-format json``; ``--verify-diagnostics`` against
expected-diagnostic comments in the inputs, as MLIR's."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import orjson
import pytest

from layerc.ir.diagnostics import Diagnostic, DiagnosticEngine, LayercError, Location
from layerc.ir.expected_diagnostics import expected_diagnostics, verify_diagnostics
from tests.layerc_cli import run_layerc

MODEL = '''import torch
from torch import nn


class Block(nn.Module):
    def forward(self, x):
        y = self.mystery(x){comment}
        return torch.relu(y)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Block() for _ in range(2)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x
'''


def _package(tmp_path: Path, comment: str) -> Path:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "model.py").write_text(MODEL.replace("{comment}", comment))
    return pkg


def test_a_diagnostic_prints_as_a_compiler_does_with_its_notes():
    d = Diagnostic("warning", "two weights claim layer 3", "dump.txt", Location(2, 5), source_line="%a = op(%w)",
                   notes=[Diagnostic("note", "the other one is here", "dump.txt", Location(9, 1))])
    assert d.format() == ("dump.txt:2:5: warning: two weights claim layer 3\n%a = op(%w)\n    ^\n"
                          "dump.txt:9:1: note: the other one is here")
    assert d.to_json()["notes"][0] == {"severity": "note", "message": "the other one is here", "file": "dump.txt",
                                       "line": 9, "column": 1, "source_line": None, "notes": []}
    # an error raised is the same fact
    e = LayercError("bad", "f.txt", Location(1, 2), "ab")
    assert e.format() == e.diagnostic().format() == "f.txt:1:2: error: bad\nab\n ^"


def test_the_engine_turns_warnings_into_errors_with_werror():
    out = io.StringIO()
    engine = DiagnosticEngine(out, werror=True)
    engine.emit(Diagnostic("warning", "w"))
    engine.emit(Diagnostic("note", "n"))
    assert engine.errors == 1 and out.getvalue() == "layerc: error: w [-Werror]\nlayerc: note: n\n"


@pytest.mark.parametrize("comment,line", [("", 3), ("@+1", 3), ("@+2", 4), ("@-1", 1), ("@above", 1), ("@below", 3), ("@*", None)])
def test_expected_comments_name_their_line(comment, line):
    text = f"a\n# expected-warning{comment} {{{{some text}}}}\nc\n"
    (e,) = expected_diagnostics("f.py", text)
    assert e.severity == "warning" and e.text == "some text" and e.at == Location(2, 3)
    assert e.line == (2 if comment == "" else line)


def test_matching_reports_the_missing_and_the_unexpected():
    expected = expected_diagnostics("f.py", "x  # expected-warning {{cannot resolve}}\n# expected-error@* {{boom}}\n")
    produced = [Diagnostic("warning", "cannot resolve self.f", "f.py", Location(1, 1)),
                Diagnostic("warning", "stray", "f.py", Location(2, 1))]
    problems = verify_diagnostics(expected, produced)
    assert [p.message for p in problems] == ["expected error {{boom}} anywhere was not produced", "unexpected warning: stray"]
    assert problems[0].loc == Location(2, 3)


def test_verify_diagnostics_on_model_source(tmp_path):
    pkg = _package(tmp_path, "  # expected-warning {{cannot resolve self.mystery}}")
    rc, out, err = run_layerc("opt", pkg, "--entry", "Model", "-p", "trace-ops", "--verify-diagnostics")
    assert (rc, err) == (0, "")
    shutil.rmtree(pkg)
    pkg = _package(tmp_path, "  # expected-warning {{cannot resolve self.other}}")
    rc, out, err = run_layerc("opt", pkg, "--entry", "Model", "-p", "trace-ops", "--verify-diagnostics")
    assert rc == 1
    assert "model.py:7:32: error: expected warning {{cannot resolve self.other}} on line 7 was not produced" in err
    assert "model.py:7:13: error: unexpected warning: cannot resolve self.mystery" in err


def test_verify_diagnostics_on_a_memory_plan(tmp_path):
    rc, _, err = run_layerc("gen-mem", tmp_path / "ws", "--example", "random", "--kernels", "2", "--seed", "3")
    assert rc == 0, err
    rc, _, err = run_layerc("opt", tmp_path / "ws", "-p", "mem-liveness", "--diagnostics-format", "json")
    found = orjson.loads(err)["diagnostics"]
    assert rc == 1 and found
    # each finding, expected by a comment above its line, passes; one left out fails
    by_file: dict[str, list[dict]] = {}
    for d in found:
        by_file.setdefault(d["file"], []).append(d)
    for path, ds in by_file.items():
        lines = Path(path).read_text().splitlines()
        for d in sorted(ds, key=lambda d: -d["line"]):
            lines.insert(d["line"] - 1, f"// expected-{d['severity']}@+1 {{{{{d['message'][:40]}}}}}")
        Path(path).write_text("\n".join(lines) + "\n")
    rc, _, err = run_layerc("opt", tmp_path / "ws", "-p", "mem-liveness", "--verify-diagnostics")
    assert (rc, err) == (0, "")
    rc, _, err = run_layerc("opt", tmp_path / "ws", "-p", "mem-liveness,mem-check", "--verify-diagnostics")
    assert rc == 1 and "error: unexpected " in err  # mem-check's findings are not expected


def test_werror_makes_a_warning_fail_and_writes_nothing(tmp_path):
    pkg = _package(tmp_path, "")
    out = tmp_path / "tree.txt"
    rc, _, err = run_layerc("opt", pkg, "--entry", "Model", "-p", "trace-ops", "-o", out)
    assert rc == 0 and "warning: cannot resolve self.mystery" in err and out.exists()
    out.unlink()
    rc, _, err = run_layerc("opt", pkg, "--entry", "Model", "-p", "trace-ops", "-o", out, "--werror")
    assert rc == 1 and "error: cannot resolve self.mystery [-Werror]" in err and not out.exists()


def test_errors_as_json_from_any_command(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [ {"ph": "X", }')
    rc, _, err = run_layerc("trace", bad, "--diagnostics-format", "json")
    assert rc == 1
    (d,) = orjson.loads(err)["diagnostics"]
    assert d["severity"] == "error" and d["file"] == str(bad) and d["line"] == 1 and d["column"] > 1


def test_a_commands_warnings_go_through_the_engine(shared):
    sample = shared / "data" / "traces" / "torch" / "hf_bert-small_h100.json.gz"
    rc, _, err = run_layerc("trace", sample, "--num-layers", "5")
    assert rc == 0 and f"{sample}: warning: --num-layers 5, but 1 complete pass(es) have another count (pass 0: 4)" in err
    rc, _, err = run_layerc("trace", sample, "--num-layers", "5", "--diagnostics-format", "json")
    assert rc == 0
    (d,) = orjson.loads(err)["diagnostics"]
    assert (d["severity"], d["file"]) == ("warning", str(sample)) and d["message"].startswith("--num-layers 5, but 1 complete")
