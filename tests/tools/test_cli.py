"""The `layerc` command as a user meets it: exit codes, messages, outputs, untouched inputs."""

from __future__ import annotations

from tests.conftest import DATA
import hashlib
import json
import subprocess
import sys

DUMP = DATA / "084_compile_compile_model.txt"


def layerc(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "layerc.tools.driver", *args], capture_output=True, text=True, cwd=cwd)


def test_opt_round_trip_to_file_and_stdout(tmp_path):
    before = hashlib.sha256(DUMP.read_bytes()).hexdigest()
    out = tmp_path / "o.txt"
    r = layerc("opt", str(DUMP), "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == DUMP.read_bytes() and r.stdout == ""
    r = layerc("opt", str(DUMP))
    assert r.stdout == DUMP.read_text()
    assert hashlib.sha256(DUMP.read_bytes()).hexdigest() == before  # never a changed input


def test_opt_pipeline_timing_and_ir_printing():
    r = layerc("opt", str(DUMP), "-p", "dce,strip-unused-weights", "--timing", "--print-ir-after-all", "--dump-pass-pipeline")
    assert r.returncode == 0, r.stderr
    assert "dce,strip-unused-weights" in r.stderr
    assert r.stderr.count("// -----// IR Dump After") == 2
    assert "Execution time report" in r.stderr and "Parser" in r.stderr and "Output" in r.stderr


def test_emit_json_and_fx(tmp_path):
    r = layerc("opt", str(DUMP), "--emit", "json")
    doc = json.loads(r.stdout)
    g = doc["graphs"][0]
    assert g["name"] == "monolithic.model" and g["nodes"][0]["type"]["shape"] == ["s72", "s70"]
    router = next(n for n in g["nodes"] if n["name"] == "triton_deepseek_v4_router_default")
    assert router["args"][0] == {"ref": "layers_0_attn_all_reduce"} and router["type"]["kind"] == "tuple"
    fx = tmp_path / "g.fx"
    r = layerc("opt", str(DUMP), "--emit", "fx", "-o", str(fx))
    assert r.returncode == 0, r.stderr
    assert fx.read_text().startswith("graph():\n    %layers_0_attn_wo_a_weight : [num_users=1] = get_attr")
    r = layerc("opt", str(fx), "--emit", "ad")  # fx → IR → AutoDeploy text: same graph
    assert r.returncode == 0, r.stderr
    assert "%layers_0_attn_all_reduce = auto_deploy.trtllm_dist_all_reduce.default(" in r.stdout


def test_list_passes():
    r = layerc("opt", "--list-passes")
    assert r.returncode == 0 and "dce" in r.stdout and "select-graph{section=str}" in r.stdout
    for header, name in (("graph IR (layerc opt, layer):", "bind-kernels"), ("trace IR (layerc trace):", "detect-layers"),
                         ("mem IR (layerc mem):", "mem-liveness"), ("optree IR (layerc optrace):", "trace-ops")):
        assert header in r.stdout and r.stdout.index(header) < r.stdout.index(f"  {name}")


def test_bad_input_is_located_with_caret_and_no_partial_output(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text(DUMP.read_text().replace("s72xs70x4096 : torch.bfloat16, NCCL)", "s72xs70x4096 : torch.bfloat16, NCCL", 1))
    out = tmp_path / "out.txt"
    r = layerc("opt", str(bad), "-o", str(out))
    assert r.returncode == 1
    first, src, caret = r.stderr.splitlines()[:3]
    assert first.startswith(f"{bad}:14:") and ": error: " in first
    assert caret.strip() == "^" and "Traceback" not in r.stderr
    assert not out.exists() and not list(tmp_path.glob(".out.txt*"))


def test_exit_codes():
    assert layerc("opt").returncode == 2
    assert layerc("opt", str(DUMP), "--emit", "nope").returncode == 2
    assert layerc("nope").returncode == 2
    r = layerc("opt", str(DUMP), "-p", "dce{bogus=1}")
    assert r.returncode == 1 and r.stderr.startswith("<pipeline>:1:1: error: dce: unknown option 'bogus'")
    r = layerc("opt", "/no/such/file")
    assert r.returncode == 1 and "no such file" in r.stderr
    r = layerc("opt", str(DUMP), "-o", "/no/such/dir/out.txt")
    assert r.returncode == 1 and "no directory" in r.stderr


def test_binary_garbage_is_a_located_error(tmp_path):
    bad = tmp_path / "garbage.txt"
    bad.write_bytes(b"# Transform: t\n# Stage: s\n\n%x : 8 : torch.f\xffloat32\n")
    r = layerc("opt", str(bad))
    assert r.returncode == 1 and r.stderr.startswith(f"{bad}:4:17: error: invalid UTF-8 byte 0xff")


def test_package_imports_from_outside_the_repository(tmp_path):
    r = subprocess.run([sys.executable, "-c", "import layerc.passes, layerc.ir, layerc.grammar, layerc.backends, layerc.tools; print('ok')"], capture_output=True, text=True, cwd=tmp_path)
    assert r.stdout.strip() == "ok", r.stderr
    r = subprocess.run([sys.executable, "-c", "import ir"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode != 0  # never a top-level module named ir


def test_an_output_directory_that_is_a_file_is_a_clear_error(tmp_path):
    """gen-dump, gen-mem and mem write into a directory: a file there is named, no traceback."""
    blocker = tmp_path / "afile"
    blocker.write_text("keep me")
    for args in (["gen-dump", "llama", str(blocker)], ["gen-mem", str(blocker)]):
        r = layerc(*args)
        assert r.returncode == 1 and r.stderr.strip() == f"{blocker}: error: a file, not a directory"
    assert blocker.read_text() == "keep me"



_HELP = """
import argparse, sys
from layerc.tools import driver
if sys.argv[1] == "argparse":
    driver._Formatter = argparse.HelpFormatter
driver.main(["trace", "--help"])
"""


def test_help_is_laid_out_as_argparse_lays_it_out():
    """The help formatter asks the terminal's width as ``shutil.get_terminal_size`` does
    (``COLUMNS``, else the terminal, else 80) without importing shutil: the same help, at any
    width, as argparse's own formatter gives."""
    import os

    for columns in ("50", "120", "", "zero", "-3"):
        env = {**os.environ, "COLUMNS": columns}
        ours, theirs = (subprocess.run([sys.executable, "-c", _HELP, which], capture_output=True, text=True, env=env, timeout=60)
                        for which in ("layerc", "argparse"))
        assert ours.returncode == theirs.returncode == 0, ours.stderr + theirs.stderr
        assert ours.stdout == theirs.stdout and len(ours.stdout.splitlines()) > 10
