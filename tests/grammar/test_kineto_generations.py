"""Every Kineto generation reads alike: the 2020-21 category names (``Kernel``, ``Memcpy``,
``Runtime``, ``Operator``), ROCm's runtime category and integer-microsecond timestamps give the
same kernels and layers as today's names; a trace with no GPU kernel says so."""

from __future__ import annotations

import gzip
import json

import pytest

from layerc.grammar.kineto import read_kineto
from layerc.backends.synth.kineto import generate as write_trace
from tests.layerc_cli import run_layerc

@pytest.fixture(scope="module")
def today(tmp_path_factory):
    path = tmp_path_factory.mktemp("kineto") / "llama.json.gz"
    write_trace(path, model="llama", layers=4, prefill=1, decode=2)
    return path


@pytest.mark.parametrize("generation", ["2021", "rocm-runtime"])
def test_an_earlier_generation_reads_as_today(today, tmp_path, generation):
    old = tmp_path / "old.json.gz"
    write_trace(old, model="llama", layers=4, prefill=1, decode=2, kineto=generation)
    cats = {e.get("cat") for e in json.loads(gzip.decompress(old.read_bytes()))["traceEvents"]}
    assert ("Kernel" in cats and "kernel" not in cats) if generation == "2021" else "hip_runtime" in cats
    a, b = read_kineto(today), read_kineto(old)
    assert len(b.kernels) == len(a.kernels) > 0 and len(b.launches) == len(a.launches)
    assert len(b.cpu_ops) == len(a.cpu_ops) and len(b.memops) == len(a.memops)
    assert not b.warnings
    docs = []
    for path in (today, old):
        rc, _, err = run_layerc("trace", path, "--json", tmp_path / f"{path.stem}.json")
        assert rc == 0, err
        docs.append(json.loads((tmp_path / f"{path.stem}.json").read_text()))
    facts = [(d["kernel_count"], d["num_layers"], d["layers_per_pass"], d["strategy"],
              {t: v["kernels"] for t, v in d["types"].items()}) for d in docs]  # times: µs, truncated
    assert facts[0] == facts[1] and docs[0]["num_layers"] == 12  # 3 passes of 4 layers


def test_a_trace_without_gpu_kernels_says_so(today, tmp_path):
    """CPU-only (or an unknown generation): a warning naming what was there, never a silent 0."""
    cpu_only = tmp_path / "cpu.json.gz"
    doc = json.loads(gzip.decompress(today.read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset")]
    cpu_only.write_bytes(gzip.compress(json.dumps(doc).encode()))
    trace = read_kineto(cpu_only)
    assert len(trace.kernels) == 0
    [warning] = trace.warnings
    assert warning.startswith("no GPU kernels in the trace") and "cpu_op (" in warning
    rc, _, err = run_layerc("trace", cpu_only, "--json", tmp_path / "t.json")
    assert f"{cpu_only}: warning: no GPU kernels in the trace" in err
