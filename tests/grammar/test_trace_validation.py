"""Rows no clock can have produced are left out of every figure, counted, and said in a warning
that names the file: never a utilization of -3,482,926,000 %."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest

from layerc.grammar.traces import read_trace
from layerc.backends.synth.kineto import generate


@pytest.fixture(scope="module")
def events(tmp_path_factory):
    path = tmp_path_factory.mktemp("valid") / "t.json.gz"
    generate(path, model="llama", layers=2, prefill=1, decode=1, seed=3)
    return json.loads(gzip.decompress(path.read_bytes()))


def _kernels(doc):
    return [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]


@pytest.mark.parametrize("field,value", [("dur", -5_000_000), ("ts", 1e300), ("ts", -1e300), ("dur", 1e19)])
def test_an_impossible_kernel_is_left_out_counted_and_warned(events, tmp_path, field, value):
    doc = json.loads(json.dumps(events))
    victims = _kernels(doc)[3:6]
    for e in victims:
        e[field] = value
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    trace = read_trace(bad)
    assert len(trace.kernels) == len(_kernels(events)) - len(victims)
    assert sum(sum(reasons.values()) for reasons in trace.meta["dropped"].values()) >= len(victims)
    assert (trace.kernels.end >= trace.kernels.start).all()
    r = subprocess.run([sys.executable, "-m", "layerc.tools.driver", "trace", str(bad), "--json", "-"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert sum(report["left_out"]["kernels"].values()) == len(victims)
    assert report["total_kernel_time_ns"] >= 0 and report["kernel_count"] == len(trace.kernels)
    warnings = [line for line in r.stderr.splitlines() if ": warning: " in line and "left out" in line]
    assert warnings and all(line.startswith(f"{bad}: warning: ") for line in warnings)


def test_a_valid_trace_leaves_nothing_out(events, tmp_path):
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps(events))
    trace = read_trace(ok)
    assert "dropped" not in trace.meta and len(trace.kernels) == len(_kernels(events))
