"""`layerc layer`: the files a user gets, and what goes wrong loudly."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import jsonschema
import pytest

from layerc.backends.layer_json import schema
from layerc.backends.synth.dump import write

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz 'dot' is not installed")


def layerc(*args):
    return subprocess.run([sys.executable, "-m", "layerc.tools.driver", *args], capture_output=True, text=True)


@pytest.fixture(scope="module")
def dump_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("dsv3")
    write("deepseek_v3", d, layers=8)
    return d


@needs_dot
def test_layer_writes_all_formats_beside_the_dump(dump_dir):
    r = layerc("layer", str(dump_dir), "5")
    assert r.returncode == 0, r.stderr
    stem = dump_dir / "085_compile_compile_model_layer5"
    assert r.stdout.split() == [f"{stem}.{ext}" for ext in ("json", "dot", "png", "svg")]
    doc = json.loads(stem.with_suffix(".json").read_text())
    jsonschema.validate(doc, schema())
    assert doc["layer"] == 5 and doc["source_file"] == "085_compile_compile_model.txt"
    assert {n["group"] for n in doc["nodes"]} >= {"norm", "mla", "moe", "mlp"}
    assert stem.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"<svg" in stem.with_suffix(".svg").read_bytes()[:400]
    assert stem.with_suffix(".dot").read_text().startswith("digraph")


def test_layer_json_only_to_outdir(dump_dir, tmp_path):
    r = layerc("layer", str(dump_dir / "085_compile_compile_model.txt"), "3", "-o", str(tmp_path), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["085_compile_compile_model_layer3.json"]
    labels = {e["label"] for e in json.loads((tmp_path / "085_compile_compile_model_layer3.json").read_text())["external_inputs"]}
    assert {"Layer 2 residual output", "batch metadata", "KV cache", "model input"} <= labels


def test_layer_errors(dump_dir, tmp_path):
    r = layerc("layer", str(dump_dir), "99", "-o", str(tmp_path))
    assert r.returncode == 1 and "no layer 99" in r.stderr and "(layers: 0..7)" in r.stderr
    assert not list(tmp_path.iterdir())  # nothing written
    assert layerc("layer", str(dump_dir), "5", "--format", "pdf").returncode == 2
    assert layerc("layer", str(dump_dir)).returncode == 2
    # -o DIR is made with its parents, as in every command; a file there is an error
    r = layerc("layer", str(dump_dir), "5", "-o", str(tmp_path / "made" / "here"), "--format", "json")
    assert r.returncode == 0 and len(list((tmp_path / "made" / "here").iterdir())) == 1
    (tmp_path / "afile").write_text("x")
    r = layerc("layer", str(dump_dir), "5", "-o", str(tmp_path / "afile"), "--format", "json")
    assert r.returncode == 1 and r.stderr.startswith(f"{tmp_path / 'afile'}: error: a file, not a directory")
    # an error after the directory was made leaves no directory behind
    r = layerc("layer", str(dump_dir), "99", "-o", str(tmp_path / "never" / "made"))
    assert r.returncode == 1 and not (tmp_path / "never").exists()
