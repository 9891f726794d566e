"""`layerc trace TRACE`: the JSON, CSV, Perfetto and terminal outputs a user gets, checked against
real traces from ../shared and against generated traces whose answer is known (gen_trace truth),
and what goes wrong loudly (exit 1 and one ``error:`` line, exit 2 for a bad flag, no partial files).

The command runs in-process (``layerc.tools.driver.main``, output captured, a wide console so rich
tables do not wrap); a few error cases run as a subprocess, the way a user meets them.
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from layerc.backends.synth.kineto import generate
from tests.conftest import SHARED
from tests.layerc_cli import run_layerc

TORCH = "data/traces/torch"
DECODE = "sglang_qwen3-8b_decode_mi300x.json.gz"  # one graph replay, 36 MHA_FC decode layers
EXTEND = "sglang_qwen3-8b_extend_mi300x.json.gz"  # one eager prefill pass, nn.Module spans around 36 layers
HF = "hf_qwen1.5-0.5b_h100.json.gz"  # HF eager, nn.Module spans around 24 layers

#: generated traces: 1 prefill pass and 2 decode replays (gen_trace's defaults) of ``layers`` layers
GEN = {
    "grok2": dict(model="grok2", vendor="cuda", tp=8, layers=4, seed=1),
    "deepseek_v3": dict(model="deepseek_v3", vendor="cuda", tp=8, layers=4, seed=2),  # 3 dense + 1 MoE
    "llama": dict(model="llama", vendor="rocm", tp=4, layers=3, seed=3),
    # deeper DeepSeek stacks: dense and MoE layers of different lengths in one pass
    "deepseek_v3-5": dict(model="deepseek_v3", vendor="cuda", tp=8, layers=5, seed=2),
    "deepseek_v3-6": dict(model="deepseek_v3", vendor="cuda", tp=8, layers=6, seed=5),
    # nn.Module spans around the eager passes (none in the replays), as a profiler with modules records
    "llama-spans": dict(model="llama", vendor="cuda", tp=1, layers=8, seed=0, ground_truth_spans=True),
    "grok2-spans": dict(model="grok2", vendor="cuda", tp=8, layers=4, seed=1, ground_truth_spans=True),
    "deepseek_v3-spans": dict(model="deepseek_v3", vendor="rocm", tp=8, layers=5, seed=2, ground_truth_spans=True),
    "qwen3-2-prefills-spans": dict(model="qwen3", vendor="cuda", tp=4, layers=6, seed=3, prefill=2, decode=1, ground_truth_spans=True),
}
JSON_KEYS = {"kernel_count", "num_layers", "layers_per_pass", "partial_passes", "strategy", "confidence", "stages", "types",
             "unknown_stage_pct", "unclassified_pct", "orphans", "layers"}
LAYER_KEYS = {"pass", "partial", "index", "type", "stage", "kernel_count", "duration_ns", "first_kernel", "last_kernel"}
CSV_HEADER = ["pass", "layer", "type", "stage", "kernel_count", "duration_ns", "start_ns", "end_ns", "first_kernel", "last_kernel"]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


# -- running the command ---------------------------------------------------------------------------
def cli(*args) -> tuple[int, str, str]:
    """``layerc trace ARGS`` in-process: (exit status, stdout without colour codes, stderr)."""
    rc, out, err = run_layerc("trace", *args)
    return rc, ANSI.sub("", out), err


def layerc(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "layerc.tools.driver", *map(str, args)], capture_output=True, text=True)


def table(out: str, title: str) -> list[list[str]]:
    """Body rows of the table titled ``title`` in a report written to a pipe (plain text: a
    header line, then a row per line up to a blank one, cells two spaces or more apart)."""
    lines = out.splitlines()
    at = [n for n, line in enumerate(lines) if line.rstrip() == title]
    assert at, f"no table {title!r} in:\n{out}"
    rows = []
    for line in lines[at[0] + 2:]:
        if not line.strip():
            break
        if not line.startswith("…"):
            rows.append(re.split(r"\s{2,}", line.strip()))
    return rows


def assert_one_error_line(err: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and ": error: " in lines[0], err
    assert "Traceback" not in err and "internal error" not in err, err


def check_totals(doc: dict) -> None:
    """What every report must satisfy, whatever the trace."""
    assert JSON_KEYS <= doc.keys()
    for layer in doc["layers"]:
        assert LAYER_KEYS <= layer.keys()
        assert layer["kernel_count"] > 0 and layer["duration_ns"] > 0 and layer["first_kernel"] and layer["last_kernel"]
    assert doc["num_layers"] == len(doc["layers"])
    assert sum(x["kernel_count"] for x in doc["layers"]) + doc["orphans"]["kernels"] == doc["kernel_count"]
    assert sum(x["duration_ns"] for x in doc["layers"]) + doc["orphans"]["time_ns"] == doc["total_kernel_time_ns"]
    for key in ("stages", "types"):
        assert sum(v["kernels"] for v in doc[key].values()) == doc["kernel_count"], key
        assert sum(v["time_ns"] for v in doc[key].values()) == doc["total_kernel_time_ns"], key
    assert 0 <= doc["unknown_stage_pct"] <= 100 and 0 <= doc["unclassified_pct"] <= 100
    assert 0 <= doc["confidence"] <= 1
    # layers in pass order, then index order; a pass's indices are 0..n-1, a leading partial
    # pass's the last n of a complete pass's
    keys = [(x["pass"], x["index"]) for x in doc["layers"]]
    assert keys == sorted(keys)
    counts = Counter(x["pass"] for x in doc["layers"])
    full = max(counts.values(), default=0)
    for q, n in counts.items():
        first = full - n if q in doc["partial_passes"] and q == min(counts) else 0
        assert [x["index"] for x in doc["layers"] if x["pass"] == q] == list(range(first, first + n))


# -- fixtures --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def torch_dir(shared) -> Path:
    return shared / TORCH


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> dict[str, tuple[Path, dict]]:
    d = tmp_path_factory.mktemp("gen")
    return {name: (d / f"{name}.json.gz", generate(d / f"{name}.json.gz", **kw)) for name, kw in GEN.items()}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """``report(trace, *flags)``: the --json document (each distinct command run once)."""
    d = tmp_path_factory.mktemp("json")
    cache: dict[tuple, dict] = {}

    def get(trace, *flags) -> dict:
        key = (str(trace), *map(str, flags))
        if key not in cache:
            out = d / f"{len(cache)}.json"
            rc, _, err = cli(trace, *flags, "--json", out)
            assert rc == 0, err
            cache[key] = json.loads(out.read_text())
            check_totals(cache[key])
        return cache[key]

    return get


def truth_layers(truth: dict) -> list[tuple[int, int, str, str, int]]:
    """(pass, layer, layer_type, stage, kernels) per true layer, in pass then layer order."""
    count = Counter((k["pass"], k["layer"], k["layer_type"], k["stage"]) for k in truth["kernels"] if k["layer"] is not None)
    return [(*key, n) for key, n in sorted(count.items())]


# -- JSON on real traces ---------------------------------------------------------------------------
def test_decode_replay_json(torch_dir, report):
    doc = report(torch_dir / DECODE)
    assert doc["strategy"] == "motif" and doc["num_layers"] == 36
    assert sum(doc["layers_per_pass"]) == 36 and 36 in doc["layers_per_pass"]
    assert {(x["type"], x["stage"]) for x in doc["layers"]} == {("MHA_FC", "decode")}
    assert len({x["pass"] for x in doc["layers"]}) == 1  # the one replay
    assert doc["period"] == 15 and doc["confidence"] > 0.8
    assert doc["unclassified_pct"] == 0
    assert {x["first_kernel"] for x in doc["layers"]} == {"add_rmsnorm_quant"}  # the layer's input norm
    assert doc["stages"]["decode"]["kernels"] >= 0.95 * doc["kernel_count"]
    assert {"LINEAR", "ATTENTION", "NORM"} <= doc["types"].keys()


def test_extend_ground_truth_and_motif(torch_dir, report):
    doc = report(torch_dir / EXTEND)
    assert doc["strategy"] == "ground-truth" and doc["num_layers"] == 36 and doc["layers_per_pass"] == [36]
    assert {(x["type"], x["stage"]) for x in doc["layers"]} == {("MHA_FC", "prefill")}
    assert doc["stages"].keys() == {"prefill"} and doc["unknown_stage_pct"] == 0
    motif = report(torch_dir / EXTEND, "--strategy", "motif")
    assert motif["strategy"] == "motif" and motif["num_layers"] == 36
    assert {(x["type"], x["stage"]) for x in motif["layers"]} == {("MHA_FC", "prefill")}
    assert report(torch_dir / EXTEND, "--strategy", "ground-truth")["layers"] == doc["layers"]


def test_hf_ground_truth(torch_dir, report):
    """The spans hold one whole forward pass; the partial pass before it (launched before the
    profile began: no spans) gets the motif's layers."""
    doc = report(torch_dir / HF)
    assert doc["strategy"] == "ground-truth+motif" and doc["num_layers"] == 34 and doc["layers_per_pass"] == [10, 24]
    assert {(x["type"], x["stage"]) for x in doc["layers"]} == {("MHA_FC", "prefill")}
    only = report(torch_dir / HF, "--strategy", "ground-truth")
    assert only["strategy"] == "ground-truth" and only["layers_per_pass"] == [24]
    same = lambda layers, q: [{**x, "pass": None} for x in layers if x["pass"] == q]  # noqa: E731
    assert same(doc["layers"], 1) == same(only["layers"], 0) and len(only["layers"]) == 24


def test_hf_partial_pass_in_json(torch_dir, report):
    """The pass the profile began in is marked partial and its layers are the last 10 of 24."""
    doc = report(torch_dir / HF)
    assert doc["partial_passes"] == [0]
    assert [x["index"] for x in doc["layers"] if x["partial"]] == list(range(14, 24))
    assert [x["index"] for x in doc["layers"] if not x["partial"]] == list(range(24))


# -- JSON on generated traces, against their truth -------------------------------------------------
@pytest.mark.parametrize("name", list(GEN))
def test_generated_layers_match_truth(name, generated, report):
    path, truth = generated[name]
    doc = report(path)
    t = truth["totals"]
    assert doc["kernel_count"] == t["kernels"]
    assert doc["num_layers"] == t["passes"] * t["layers_per_pass"] == t["layers"]
    assert doc["layers_per_pass"] == [t["layers_per_pass"]] * t["passes"]
    want = truth_layers(truth)
    assert [(x["pass"], x["index"], x["type"], x["stage"]) for x in doc["layers"]] == [w[:4] for w in want]
    assert Counter(x["type"] for x in doc["layers"]) == Counter(w[2] for w in want)
    assert Counter(x["stage"] for x in doc["layers"]) == Counter(w[3] for w in want)
    # kernels per layer as the truth says; a replay's tail (final norm, lm_head, sampling) goes
    # with its last layer by design, so that one may hold more
    replays = {p["index"] for p in truth["passes"] if p["graph_correlation"] is not None}
    for x, w in zip(doc["layers"], want):
        tail = x["pass"] in replays and x["index"] == t["layers_per_pass"] - 1
        assert x["kernel_count"] >= w[4] if tail else x["kernel_count"] == w[4], (x, w)
    # per-kernel figures
    assert {s: v["kernels"] for s, v in doc["stages"].items()} == dict(Counter(k["stage"] for k in truth["kernels"]))
    assert {s: v["kernels"] for s, v in doc["types"].items()} == dict(Counter(k["kernel_type"] for k in truth["kernels"]))
    assert doc["unknown_stage_pct"] < 1 and doc["unclassified_pct"] == 0


@pytest.mark.parametrize("name", ["grok2", "llama", "deepseek_v3"])
def test_generated_boundary_strategy_matches_truth(name, generated, report):
    """Each strategy on its own, not only the one auto picks: ``--strategy boundary`` layers and types."""
    path, truth = generated[name]
    doc = report(path, "--strategy", "boundary")
    assert doc["strategy"] == "boundary"
    assert doc["layers_per_pass"] == [truth["totals"]["layers_per_pass"]] * truth["totals"]["passes"]
    assert [(x["pass"], x["index"], x["type"], x["stage"]) for x in doc["layers"]] == [w[:4] for w in truth_layers(truth)]


def test_spans_in_eager_passes_only(generated, report):
    """Spans decide the eager passes, motif the replays they do not reach: every pass has its
    layers, replays are decode, and the only kernels outside layers are the eager passes' inputs
    and sampling (before the fix the replays had no layers and no stage)."""
    path, truth = generated["llama-spans"]
    doc = report(path)
    assert doc["strategy"] == "ground-truth+motif" and doc["layers_per_pass"] == [8, 8, 8]
    assert [x["stage"] for x in doc["layers"]] == ["prefill"] * 8 + ["decode"] * 16
    # outside layers: what the truth leaves outside, but a replay's tail in its graph (the final
    # norm), which goes with its last layer; lm_head and sampling, launched eagerly after it, stay out
    replays = {p["index"]: p["graph_correlation"] for p in truth["passes"] if p["graph_correlation"] is not None}
    last = {q: max(k["start"] for k in truth["kernels"] if k["pass"] == q and k["layer"] is not None) for q in replays}
    outside = [k for k in truth["kernels"] if k["layer"] is None
               and not (k["pass"] in replays and k["start"] > last[k["pass"]] and k["correlation"] == replays[k["pass"]])]
    assert doc["orphans"]["kernels"] == len(outside) == 22
    assert report(path, "--strategy", "ground-truth")["layers_per_pass"] == [8, 0, 0]


# -- --stage ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("which", ["decode-trace", "grok2", "llama"])
def test_stage_filter_adds_up(which, torch_dir, generated, report):
    path = torch_dir / DECODE if which == "decode-trace" else generated[which][0]
    full = report(path)
    parts = {s: report(path, "--stage", s) for s in ("prefill", "decode")}
    unknown = full["stages"].get("unknown", {"kernels": 0, "time_ns": 0})
    assert sum(p["kernel_count"] for p in parts.values()) + unknown["kernels"] == full["kernel_count"]
    assert sum(p["total_kernel_time_ns"] for p in parts.values()) + unknown["time_ns"] == full["total_kernel_time_ns"]
    assert sum(p["num_layers"] for p in parts.values()) == full["num_layers"]
    for s, p in parts.items():
        assert p["stages"].keys() <= {s}
        assert p["kernel_count"] == full["stages"].get(s, {"kernels": 0})["kernels"]
        assert p["layers"] == [x for x in full["layers"] if x["stage"] == s]
        assert p["strategy"] == full["strategy"]
    for key in ("ATTENTION", "LINEAR"):
        assert sum(p["types"].get(key, {"kernels": 0})["kernels"] for p in parts.values()) <= full["types"][key]["kernels"]
    if which == "decode-trace":
        assert parts["prefill"]["kernel_count"] == 0 and parts["prefill"]["num_layers"] == 0
        assert parts["decode"]["num_layers"] == 36


# -- --split-half-layers ---------------------------------------------------------------------------
def test_split_half_layers_grok2(generated, report):
    path, truth = generated["grok2"]
    per_pass, passes = truth["totals"]["layers_per_pass"], truth["totals"]["passes"]
    merged = report(path, "--strategy", "boundary")
    split = report(path, "--strategy", "boundary", "--split-half-layers")
    motif = report(path, "--strategy", "motif")
    assert merged["strategy"] == split["strategy"] == "boundary" and motif["strategy"] == "motif"
    assert merged["num_layers"] == motif["num_layers"] == per_pass * passes
    assert {x["type"] for x in merged["layers"]} == {"MHA_MOE"}
    assert split["num_layers"] == 2 * merged["num_layers"] == truth["totals"]["half_layers_per_pass"] * passes
    assert split["layers_per_pass"] == [2 * per_pass] * passes
    assert [x["type"] for x in split["layers"]] == ["ATTN", "MOE"] * (per_pass * passes)
    assert [x["stage"] for x in split["layers"]] == [x["stage"] for x in merged["layers"] for _ in (0, 1)]
    assert split["kernel_count"] == merged["kernel_count"] and split["orphans"] == merged["orphans"]
    # without the flag the pairs are the merged layers
    assert [a["kernel_count"] + b["kernel_count"] for a, b in zip(split["layers"][::2], split["layers"][1::2])] == \
        [x["kernel_count"] for x in merged["layers"]]


@pytest.mark.parametrize("name", ["grok2", "grok2-spans", "llama", "deepseek_v3-spans"])
def test_split_half_layers_with_every_strategy(name, generated, report):
    """--split-half-layers is no longer the boundary strategy's alone: auto, motif and ground truth
    keep the same halves apart (it used to be ignored without --strategy boundary)."""
    path, truth = generated[name]
    passes, per_pass = truth["totals"]["passes"], truth["totals"]["layers_per_pass"]
    halves = report(path, "--strategy", "boundary", "--split-half-layers")
    assert halves["layers_per_pass"] == [2 * per_pass] * passes
    key = lambda doc: [(x["pass"], x["index"], x["type"], x["stage"], x["kernel_count"]) for x in doc["layers"]]  # noqa: E731
    strategies = ("auto", "motif", "ground-truth") if "spans" in name else ("auto", "motif")
    for strategy in strategies:
        whole, split = report(path, "--strategy", strategy), report(path, "--strategy", strategy, "--split-half-layers")
        assert split["strategy"] == whole["strategy"] and split["num_layers"] == 2 * whole["num_layers"]
        assert split["orphans"] == whole["orphans"]
        if strategy == "ground-truth":  # the eager prefill pass only
            assert key(split) == [x for x in key(halves) if x[0] == 0]
        else:
            assert key(split) == key(halves)


# -- CSV -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("stage", ["all", "decode"])
def test_csv_matches_json(stage, generated, tmp_path):
    path = generated["grok2"][0]
    rc, _, err = cli(path, "--stage", stage, "--json", tmp_path / "o.json", "--csv", tmp_path / "o.csv")
    assert rc == 0, err
    doc = json.loads((tmp_path / "o.json").read_text())
    with open(tmp_path / "o.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == CSV_HEADER
    assert len(rows) == 1 + doc["num_layers"]
    fields = ["pass", "index", "type", "stage", "kernel_count", "duration_ns", "start_ns", "end_ns", "first_kernel", "last_kernel"]
    assert rows[1:] == [[str(x[k]) for k in fields] for x in doc["layers"]]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.csv", "o.json"]  # no temporary files left


# -- Perfetto --------------------------------------------------------------------------------------
def test_perfetto_pftrace(generated, report, tmp_path):
    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    path = generated["grok2"][0]
    out = tmp_path / "t.pftrace"
    rc, _, err = cli(path, "--perfetto", out)
    assert rc == 0, err
    assert out.stat().st_size > 0
    names, begins = {}, []
    for p in pb.Trace.FromString(out.read_bytes()).packet:
        names.update((e.iid, e.name) for e in p.interned_data.event_names)
        if p.HasField("track_event") and p.track_event.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            te = p.track_event
            begins.append(names[te.name_iid] if te.HasField("name_iid") else te.name)
    doc = report(path)
    layers = [n for n in begins if n.startswith("layer ")]
    assert Counter(layers) == Counter(f"layer {x['index']} {x['type']}" for x in doc["layers"])
    assert sum(n.startswith("pass ") for n in begins) == len(doc["layers_per_pass"])
    assert len(begins) >= doc["kernel_count"] + doc["num_layers"]


def test_perfetto_chrome_json(generated, report, tmp_path):
    path = generated["grok2"][0]
    out = tmp_path / "t.json"
    rc, _, err = cli(path, "--perfetto", out)
    assert rc == 0, err
    events = json.loads(out.read_text())["traceEvents"]
    doc = report(path)
    spans = [e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("layer ")]
    assert [e["name"] for e in spans] == [f"layer {x['index']} {x['type']}" for x in doc["layers"]]
    assert [(e["args"]["pass"], e["args"]["layer"], e["args"]["stage"], e["args"]["kernels"]) for e in spans] == \
        [(x["pass"], x["index"], x["stage"], x["kernel_count"]) for x in doc["layers"]]
    assert sum(e.get("cat") == "kernel" for e in events) == doc["kernel_count"]
    assert [e["name"] for e in events if str(e.get("name", "")).startswith("pass ")] == \
        ["pass 0 (prefill)", "pass 1 (decode)", "pass 2 (decode)"]


# -- the terminal report ---------------------------------------------------------------------------
@pytest.mark.parametrize("which", ["decode-trace", "grok2"])
def test_terminal_tables(which, torch_dir, generated, report):
    """The terminal tables say what the JSON says."""
    path = torch_dir / DECODE if which == "decode-trace" else generated[which][0]
    rc, out, err = cli(path)
    assert rc == 0, err
    doc = report(path)
    first = out.splitlines()[0]
    assert f"{doc['kernel_count']:,} kernels" in first and f"{doc['num_layers']} layers by {doc['strategy']}" in first
    assert ("period" in first) == (doc["period"] is not None)
    for title, key in (("time by stage", "stages"), ("time by type", "types")):
        rows = table(out, title)
        assert {r[0]: int(r[1].replace(",", "")) for r in rows} == {k: v["kernels"] for k, v in doc[key].items()}
        assert rows[0][0] == max(doc[key], key=lambda k: doc[key][k]["time_ns"])  # by time, largest first
    passes = table(out, "layers per pass")  # alike passes one after the other share a row: "1-6 (6)"
    spans = [re.fullmatch(r"\d+-\d+ \((\d+)\)", r[0]) for r in passes]
    assert [int(r[4]) for r, span in zip(passes, spans) for _ in range(int(span[1]) if span else 1)] == doc["layers_per_pass"]
    kinds = table(out, "layers by kind")
    assert {(r[0], r[1]): int(r[2]) for r in kinds} == dict(Counter((x["stage"], x["type"]) for x in doc["layers"]))
    assert f"outside layers: {doc['orphans']['kernels']:,} kernels" in out
    assert f"unknown stage: {doc['unknown_stage_pct']:.2f}% of kernels" in out
    assert "top kernels" not in out
    if which == "decode-trace":
        assert "by motif" in first and "period 15 kernels" in first
        assert passes == [["0", "decode", "graphs + eager", "555", "36"]]  # the step's eager inputs and sampling are its own
        assert kinds[0][:4] == ["decode", "MHA_FC", "36", "15.1"]
    else:
        assert [r[:3] for r in passes] == [["0", "prefill", "eager"], ["1-2 (2)", "decode", "graphs + eager"]]


def test_terminal_num_layers(torch_dir):
    rc, out, _ = cli(torch_dir / DECODE, "--num-layers", "36")
    assert rc == 0
    replay = [r for r in table(out, "layers per pass") if r[2] == "graphs + eager"]
    assert replay == [["0", "decode", "graphs + eager", "555", "36", "ok"]]
    rc, out, _ = cli(torch_dir / DECODE, "--num-layers", "40")
    assert rc == 0
    rows = table(out, "layers per pass")
    assert [r for r in rows if r[2] == "graphs + eager"] == [["0", "decode", "graphs + eager", "555", "36", "40"]]
    assert all(r[-1] == "-" for r in rows if r[4] == "0")  # passes without layers are not judged
    assert "ok" not in [r[-1] for r in rows]


def test_terminal_debug_layers(torch_dir, generated):
    rc, out, err = cli(torch_dir / DECODE, "--debug-layers", "0")
    assert rc == 0, err
    rows = table(out, "layer 0 of pass 0: MHA_FC, decode")
    assert len(rows) == 15 and rows[0][:3] == ["0", "add_rmsnorm_quant", "NORM"]
    assert "paged_attention" in [r[1] for r in rows]
    # one table per stage (first pass of each); a layer that does not exist is a warning
    rc, out, err = cli(generated["grok2"][0], "--debug-layers", "1,99")
    assert rc == 0, err
    assert len(table(out, "layer 1 of pass 0: MHA_MOE, prefill")) == 17
    assert len(table(out, "layer 1 of pass 1: MHA_MOE, decode")) == 17
    assert "of pass 2" not in out
    assert "warning: no layer 99" in err


def test_terminal_verbose_top_kernels(torch_dir):
    rc, out, err = cli(torch_dir / DECODE, "-v", "--top-n", "3")
    assert rc == 0, err
    top = table(out, "top kernels")
    assert [r[0] for r in top] == ["hipblaslt_gemm", "paged_attention", "add_rmsnorm_quant"]
    assert top[0][1:3] == ["LINEAR", "145"]
    assert 1 <= len(table(out, "kernels outside layers")) <= 3


def test_terminal_show_layer_terminal(torch_dir):
    rc, out, err = cli(torch_dir / DECODE, "--show-layer-terminal")
    assert rc == 0, err
    rows = table(out, "layers")
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [("0", str(i), "MHA_FC", "decode") for i in range(36)]
    assert "layers by kind" not in out


# -- --kernel-tables -------------------------------------------------------------------------------
@pytest.mark.parametrize("dirname", ["tables", 'my tables, v2 {"x"}'], ids=["plain", "odd-name"])
def test_user_kernel_tables_reclassify(dirname, torch_dir, report, tmp_path):
    tables = tmp_path / dirname  # any directory name a user may have
    tables.mkdir()
    (tables / "mine.toml").write_text(
        "family = 'mine'\n\n"
        "[[kernel]]\nmatch = 'ArgMaxOps'\nshort = 'my_argmax'\ntype = 'OTHER'\n\n"
        "[[kernel]]\nmatch = 'direct_copy_kernel'\nshort = 'my_copy'\ntype = 'QUANTIZATION'\n"
    )
    base = report(torch_dir / DECODE)
    doc = report(torch_dir / DECODE, "--kernel-tables", tables)
    assert "OTHER" not in base["types"] and "QUANTIZATION" not in base["types"]
    other, quant = doc["types"]["OTHER"], doc["types"]["QUANTIZATION"]
    assert other["kernels"] == 1  # the one argmax, ELEMENTWISE before
    for was, moved in (("ELEMENTWISE", other), ("MEMORY", quant)):  # what moved left its old type
        assert doc["types"][was]["kernels"] == base["types"][was]["kernels"] - moved["kernels"]
        assert doc["types"][was]["time_ns"] == base["types"][was]["time_ns"] - moved["time_ns"]
    assert quant["kernels"] > 50  # the aten copies
    assert {k: v for k, v in doc["types"].items() if k not in ("OTHER", "QUANTIZATION", "ELEMENTWISE", "MEMORY")} == \
        {k: v for k, v in base["types"].items() if k not in ("ELEMENTWISE", "MEMORY")}
    assert doc["num_layers"] == base["num_layers"] and doc["unclassified_pct"] == 0
    # the rows named are the user's (their index is into the user's tables, then the built-in ones)
    assert doc["classified_by"]["my_copy"]["row"].startswith("mine.toml: entry 2")
    assert doc["classified_by"]["my_argmax"]["row"].startswith("mine.toml: entry 1")
    assert not any(str(v["row"]).startswith("mine.toml") for k, v in base["classified_by"].items())
    rc, out, _ = cli(torch_dir / DECODE, "--kernel-tables", tables, "-v")
    assert rc == 0 and "my_copy" in out and "my_argmax" in out


def test_bad_kernel_table(torch_dir, tmp_path):
    (tmp_path / "bad.toml").write_text("[[kernel]]\nmatch = 'x'\nshort = 'x'\ntype = 'NOPE'\n")
    rc, _, err = cli(torch_dir / DECODE, "--kernel-tables", tmp_path, "--json", tmp_path / "o.json")
    assert rc == 1 and "bad kernel table" in err
    assert_one_error_line(err)
    assert not (tmp_path / "o.json").exists()


# -- errors ----------------------------------------------------------------------------------------
def test_missing_trace_subprocess(tmp_path):
    r = layerc("trace", tmp_path / "nope.json.gz", "--json", tmp_path / "o.json")
    assert r.returncode == 1 and r.stdout == ""
    assert_one_error_line(r.stderr)
    assert "no such file" in r.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind", ["truncated-gzip", "truncated-json", "garbage", "empty"])
def test_bad_trace_files(kind, torch_dir, tmp_path):
    import gzip

    raw = (torch_dir / DECODE).read_bytes()
    bad = tmp_path / {"truncated-gzip": "t.json.gz", "truncated-json": "t.json", "garbage": "g.json", "empty": "e.json"}[kind]
    bad.write_bytes({"truncated-gzip": raw[: len(raw) // 3], "truncated-json": gzip.decompress(raw)[:20000],
                     "garbage": b"garbage{{\n", "empty": b""}[kind])
    rc, out, err = cli(bad, "--json", tmp_path / "o.json", "--csv", tmp_path / "o.csv", "--perfetto", tmp_path / "o.pftrace")
    assert rc == 1 and out == ""
    assert_one_error_line(err)
    assert [p.name for p in tmp_path.iterdir()] == [bad.name]  # no output, not even a partial one


def test_garbled_trace_subprocess(tmp_path):
    bad = tmp_path / "g.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": ')
    r = layerc("trace", bad)
    assert r.returncode == 1
    assert_one_error_line(r.stderr)


def test_ground_truth_without_spans(torch_dir, tmp_path):
    rc, out, err = cli(torch_dir / DECODE, "--strategy", "ground-truth", "--json", tmp_path / "o.json", "--csv", tmp_path / "o.csv")
    assert rc == 1 and out == ""
    assert_one_error_line(err)
    assert "no nn.Module or NVTX layer spans" in err
    assert list(tmp_path.iterdir()) == []


def test_bad_debug_layers_is_an_error_before_any_output(torch_dir, tmp_path):
    rc, out, err = cli(torch_dir / DECODE, "--debug-layers", "a,b", "--json", tmp_path / "o.json", "--csv", tmp_path / "o.csv")
    assert rc == 2  # a usage error, found before any work
    assert "usage:" in err and "error:" in err and "--debug-layers" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == [], "an invalid --debug-layers still wrote the outputs"
    assert out == "", "an invalid --debug-layers still printed the report"


@pytest.mark.parametrize("flags", [["--bogus"], ["--stage", "both"], ["--strategy", "nope"], ["--top-n", "x"],
                                   ["--num-layers", "many"], []], ids=lambda f: " ".join(f) or "no-trace")
def test_bad_flags_exit_2(flags, torch_dir, tmp_path):
    trace = [torch_dir / DECODE] if flags else []
    rc, out, err = cli(*trace, *flags, "--json", tmp_path / "o.json")
    assert rc == 2 and "usage:" in err and out == ""
    assert list(tmp_path.iterdir()) == []


def test_bad_flag_subprocess(torch_dir):
    r = layerc("trace", torch_dir / DECODE, "--no-such-flag")
    assert r.returncode == 2 and "unrecognized arguments: --no-such-flag" in r.stderr


def test_unwritable_output(torch_dir, tmp_path):
    rc, _, err = cli(torch_dir / DECODE, "--json", tmp_path / "missing" / "o.json")
    assert rc == 1
    assert_one_error_line(err)


def test_missing_kernel_tables_directory_is_an_error(torch_dir, tmp_path):
    rc, out, err = cli(torch_dir / DECODE, "--kernel-tables", tmp_path / "nowhere", "--json", tmp_path / "o.json")
    assert rc == 1 and "no directory" in err and "Traceback" not in err
    assert not (tmp_path / "o.json").exists()


@pytest.mark.parametrize("flags", [["--top-n", "-2"], ["--num-layers", "0"]])
def test_counts_below_one_are_usage_errors(flags, torch_dir, tmp_path):
    rc, out, err = cli(torch_dir / DECODE, *flags)
    assert rc == 2 and "usage:" in err


def test_the_report_is_rich_on_a_terminal_and_plain_on_a_pipe():
    """On a terminal the tables are rich's (boxes); on a pipe the same cells as plain text, with
    no rich import (a tenth of a small trace's run)."""
    import os
    import pty
    import threading

    trace = SHARED / "data" / "traces" / "torch" / "hf_bert-small_h100.json.gz"
    master, slave = pty.openpty()
    got: list[bytes] = []

    def drain() -> None:  # (a pty's buffer is small: read while it writes)
        while True:
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:
                return
            if not chunk:
                return
            got.append(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    try:
        rc = subprocess.run([sys.executable, "-m", "layerc.tools.driver", "trace", str(trace)], stdout=slave,
                            stderr=subprocess.PIPE, text=True, timeout=120, env={**os.environ, "COLUMNS": "140"})
    finally:
        os.close(slave)
        reader.join(timeout=10)
        os.close(master)
    shown = b"".join(got).decode()
    piped = layerc("trace", trace)
    assert rc.returncode == 0 == piped.returncode, rc.stderr
    assert "┏" in shown and "layers per pass" in shown
    assert "┏" not in piped.stdout and "│" not in piped.stdout
    assert table(piped.stdout, "layers per pass") == [["0", "prefill", "eager", "60", "4"]]
    words = lambda s: re.sub(r"[\u2500-\u257f]", " ", re.sub(r"\x1b\[[0-9;]*m", "", s)).split()  # noqa: E731
    assert words(shown) == words(piped.stdout)
