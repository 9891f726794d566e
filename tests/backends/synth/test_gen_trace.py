"""The synthetic Kineto trace generator: what read_kineto reads back agrees with the ground truth."""

from __future__ import annotations

import gzip
import json
from collections import Counter

import numpy as np
import pytest

from layerc.grammar.kineto import read_kineto
from layerc.passes.kernel_tables import TYPES, kernel_table
from layerc.tools import gen_trace as gen_trace_cli
from layerc.backends.synth.kineto import MODELS, generate, truth_path

# (model, vendor, tp, layers): full depth for one case per model, shortened elsewhere to stay fast
CASES = [
    ("deepseek_v3", "cuda", 8, None),
    ("deepseek_v3", "rocm", 1, 6),
    ("deepseek_v3", "rocm", 8, 5),
    ("deepseek_v3", "cuda", 1, 4),
    ("grok2", "rocm", 8, None),
    ("grok2", "cuda", 1, 6),
    ("grok2", "cuda", 8, 4),
    ("llama", "cuda", 1, None),
    ("llama", "rocm", 4, 5),
    ("llama", "cuda", 4, 3),
    ("qwen3", "rocm", 4, None),
    ("qwen3", "cuda", 1, 5),
    ("qwen3", "rocm", 1, 3),
]


def _id(case):
    return "-".join(str(x) for x in case if x is not None)


@pytest.fixture(scope="module", params=CASES, ids=_id)
def generated(request, tmp_path_factory):
    model, vendor, tp, layers = request.param
    path = tmp_path_factory.mktemp("gen") / f"{model}_{vendor}_tp{tp}.json.gz"
    truth = generate(path, model=model, vendor=vendor, tp=tp, layers=layers, seed=7, ground_truth_spans=True)
    return request.param, truth, read_kineto(path)


def _sorted(trace):
    k = trace.kernels
    return np.lexsort((k.stream, k.start))


def test_kernel_counts_and_keys(generated):
    _, truth, trace = generated
    k = trace.kernels
    assert len(k) == truth["totals"]["kernels"] == len(truth["kernels"])
    order = _sorted(trace)
    assert [(int(k.correlation[i]), int(k.start[i])) for i in order] == [(t["correlation"], t["start"]) for t in truth["kernels"]]
    # a kernel is known by its launch, start and stream (two streams of one replay may start together)
    assert len({(t["correlation"], t["start"], t["stream"]) for t in truth["kernels"]}) == len(truth["kernels"])
    assert [trace.strings[int(k.name[i])] for i in order] == [t["name"] for t in truth["kernels"]]
    assert sum(p["kernels"] for p in truth["passes"]) == len(k)
    assert len(trace.memops) == truth["totals"]["memops"]


def test_replays_group_the_decode_kernels(generated):
    _, truth, trace = generated
    replays = trace.replays()
    decode = [p for p in truth["passes"] if p["stage"] == "decode"]
    assert len(replays) == len(decode) == truth["totals"]["decode_passes"]
    k = trace.kernels
    for p in decode:
        group = replays[p["graph_correlation"]]
        expected = sorted(t["start"] for t in truth["kernels"] if t["pass"] == p["index"] and t["correlation"] == p["graph_correlation"])
        assert sorted(int(s) for s in k.start[group]) == expected
        # the model is the graph: the inputs' preparation before it and the logits and sampling after it run eagerly
        ops = [t["op"] for t in truth["kernels"] if t["pass"] == p["index"] and t["correlation"] != p["graph_correlation"]]
        assert ops and "embed" not in ops and "argmax" in ops
    in_replays = np.concatenate(list(replays.values()))
    assert len(in_replays) == sum(t["correlation"] in replays for t in truth["kernels"])
    # eager kernels: one launch each, found by correlation
    eager = [t for t in truth["kernels"] if t["correlation"] not in replays]
    launch_corr = set(trace.launches.correlation.tolist())
    assert all(t["correlation"] in launch_corr for t in eager)
    assert len({t["correlation"] for t in eager}) == len(eager)


def test_layers_per_pass(generated):
    (model, vendor, tp, layers), truth, trace = generated
    depth = layers or MODELS[model].layers
    assert truth["totals"]["layers_per_pass"] == depth
    for p in truth["passes"]:
        rows = [t for t in truth["kernels"] if t["pass"] == p["index"]]
        seen = [t["layer"] for t in rows if t["layer"] is not None]
        assert sorted(set(seen)) == list(range(depth))
        # a layer's kernels are consecutive on the main stream; outside kernels only before / after
        main = [t["layer"] for t in rows if t["stream"] == rows[0]["stream"]]
        inner = [x for x in main if x is not None]
        assert inner == sorted(inner)
        first, last = main.index(0), len(main) - 1 - main[::-1].index(depth - 1)
        assert None not in main[first:last + 1]
        assert None in main[:first] and None in main[last + 1:]  # embedding before, lm_head after
        comm = sum(t["kernel_type"] == "COMMUNICATION" for t in rows if t["layer"] is not None)
        assert comm == (2 * depth if tp > 1 else 0)
        if model == "grok2":
            dual = sum("fused_dual_residual_rmsnorm_kernel" in t["name"] for t in rows)
            assert dual == 2 * depth == truth["totals"]["half_layers_per_pass"]
    types = {t["layer_type"] for t in truth["kernels"] if t["layer"] is not None}
    expected = {"deepseek_v3": {"MLA_FC", "MLA_MOE"} if depth > 3 else {"MLA_FC"}, "grok2": {"MHA_MOE"},
                "llama": {"MHA_FC"}, "qwen3": {"MHA_FC"}}[model]
    assert types == expected


def test_kernel_types_agree_with_tables(generated):
    _, truth, _ = generated
    table = kernel_table()
    for t in truth["kernels"]:
        assert t["kernel_type"] in TYPES
        found = table.lookup(t["name"])
        if found is not None:
            assert found.type == t["kernel_type"], (t["name"], found)
    assert {"ATTENTION", "LINEAR", "NORM", "MEMORY"} <= {t["kernel_type"] for t in truth["kernels"]}


def test_stage_markers_and_grids(generated):
    (model, vendor, tp, layers), truth, trace = generated
    names = {t["stage"]: set() for t in truth["kernels"]}
    for t in truth["kernels"]:
        names[t["stage"]].add(t["name"])
    assert names["prefill"] != names["decode"]
    k = trace.kernels
    order = _sorted(trace)
    grid = k.grid_x[order].astype(np.int64) * k.grid_y[order] * k.grid_z[order]
    stage = np.array([t["stage"] for t in truth["kernels"]])
    gemm = np.array([t["kernel_type"] == "LINEAR" for t in truth["kernels"]])
    assert grid[gemm & (stage == "prefill")].mean() > grid[gemm & (stage == "decode")].mean()
    if vendor == "rocm":
        assert any("qseqlen1" in n or "paged_attention" in n for n in names["decode"])
        assert any("Prefill" in n or "fmha_fwd" in n for n in names["prefill"])


def test_module_spans_cover_layers(generated):
    (model, vendor, tp, layers), truth, trace = generated
    depth = layers or MODELS[model].layers
    m = trace.modules
    spans = sorted((trace.strings[int(n)], int(s), int(e)) for n, s, e in zip(m.name, m.start, m.end))
    assert len(spans) == depth * truth["totals"]["prefill_passes"]
    assert all(name.startswith(f"nn.Module: {MODELS[model].cls}DecoderLayer_") for name, _, _ in spans)
    # each eager kernel's launch lies inside its own layer's span
    where = {int(c): int(s) for c, s in zip(trace.launches.correlation, trace.launches.start)}
    span = {int(name.rsplit("_", 1)[1]): (s, e) for name, s, e in spans}
    for t in truth["kernels"]:
        if t["stage"] == "prefill" and t["layer"] is not None:
            s, e = span[t["layer"]]
            assert s <= where[t["correlation"]] <= e


def test_truth_file_and_raw_format(tmp_path):
    out = tmp_path / "t.json.gz"
    truth = generate(out, model="llama", vendor="rocm", tp=4, prefill=2, decode=1, layers=2)
    assert json.loads(truth_path(out).read_text()) == json.loads(json.dumps(truth))
    doc = json.loads(gzip.decompress(out.read_bytes()))
    cats = Counter((e.get("cat"), e.get("ph")) for e in doc["traceEvents"])
    assert cats[("ac2g", "s")] == cats[("ac2g", "f")] > 0
    assert cats[("python_function", "X")] == 0  # no spans unless asked
    runtime = Counter(e["name"] for e in doc["traceEvents"] if e.get("cat") == "cuda_runtime")
    assert runtime["hipGraphLaunch"] == 1 and runtime["hipLaunchKernel"] > 0
    assert truth["totals"]["passes"] == 3 and [p["stage"] for p in truth["passes"]] == ["prefill", "prefill", "decode"]
    # deterministic per seed
    again = generate(tmp_path / "u.json", model="llama", vendor="rocm", tp=4, prefill=2, decode=1, layers=2)
    assert [t["name"] for t in again["kernels"]] == [t["name"] for t in truth["kernels"]]
    assert json.loads((tmp_path / "u.json").read_text())["traceEvents"]


def test_bad_arguments(tmp_path):
    for kwargs in ({"model": "gpt2"}, {"model": "llama", "vendor": "tpu"}, {"model": "llama", "tp": 3},
                   {"model": "llama", "layers": 0}, {"model": "llama", "prefill": 0, "decode": 0}):
        with pytest.raises(ValueError):
            generate(tmp_path / "x.json", **kwargs)
    for kwargs in ({"graphs": "some"}, {"modules": "all"}, {"kineto": "2019"}):
        with pytest.raises(ValueError):
            generate(tmp_path / "x.json", model="llama", **kwargs)
    from tests.layerc_cli import run_layerc

    for flags in (["--workload", "hpc", "--steps", "0"], ["--graphs", "some"], ["--workload", "gpu"]):
        rc, _, err = run_layerc("gen-trace", tmp_path / "y.json.gz", *flags)
        assert rc == 2 and "error: argument" in err and not (tmp_path / "y.json.gz").exists()


def test_cli(tmp_path, capsys):
    import argparse
    p = argparse.ArgumentParser()
    gen_trace_cli.configure_parser(p)
    out = tmp_path / "c.json.gz"
    assert gen_trace_cli.run(p.parse_args([str(out), "--model", "grok2", "--vendor", "cuda", "--tp", "8", "--layers", "2", "--spans"])) == 0
    assert "grok2 on cuda tp8" in capsys.readouterr().out
    assert len(read_kineto(out).modules) == 2
