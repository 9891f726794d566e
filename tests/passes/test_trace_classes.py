"""Layers per pass on every class of trace real engines emit, against the generators' truth:
module trees (HF, vLLM's gpt-oss), full-graph, piecewise, mixed and eager steps, two-stack
models, CUDA and ROCm names, TP1 and TP8; training steps; an HPC code with no layers. Each with
module events and with them stripped (kernels only), by auto and by motif."""

from __future__ import annotations

import gzip
import json
import re
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from layerc.grammar.traces import read_trace
from layerc.ir.trace import Annotations, Modules
from layerc.passes.trace_layers import detect_layers
from layerc.backends.synth import kineto as gen_trace, kineto_workloads as gen_trace_workloads
from tests.layerc_cli import run_layerc
from tests.passes.test_trace_layers import HYBRID, _same_passes, agreement, truth_columns

CLASSES = [
    # model, vendor, tp, graphs, modules, layers (a tp written "8f": all-reduces fused with the norm after them)
    ("llama", "cuda", "8f", "full", "none", 5),
    ("deepseek_v3", "cuda", "8f", "piecewise", "tree", 5),
    ("gpt_oss", "cuda", "8f", "none", "tree", 6),
    ("qwen3", "cuda", "4f", "full_and_piecewise", "layers", 4),
    ("llama", "cuda", 1, "full", "tree", 5),
    ("llama", "rocm", 8, "piecewise", "none", 4),
    ("llama", "cuda", 1, "none", "tree", 4),
    ("qwen3", "rocm", 1, "full_and_piecewise", "tree", 5),
    ("qwen3", "cuda", 8, "none", "layers", 4),
    ("deepseek_v3", "cuda", 8, "piecewise", "none", 5),
    ("deepseek_v3", "rocm", 1, "none", "tree", 5),
    ("grok2", "cuda", 8, "full", "tree", 4),
    ("gpt_oss", "cuda", 8, "none", "tree", 6),
    ("gpt_oss", "rocm", 1, "piecewise", "none", 6),
    ("gpt_oss", "cuda", 1, "full", "tree", 6),
    ("vlm", "cuda", 1, "full", "tree", 5),
    ("vlm", "rocm", 4, "none", "tree", 4),
    ("vlm", "cuda", 1, "piecewise", "none", 5),
    ("qwen3_next", "cuda", 1, "full", "none", 8),
    ("qwen3_next", "rocm", 8, "piecewise", "tree", 8),
    ("qwen3_next", "cuda", 8, "none", "layers", 12),
]


@pytest.fixture(scope="module", params=CLASSES, ids=lambda c: "-".join(map(str, c)))
def generated(request, tmp_path_factory):
    model, vendor, tp, graphs, modules, layers = request.param
    path = tmp_path_factory.mktemp("cls") / "t.json.gz"
    fused = isinstance(tp, str)
    truth = gen_trace.generate(path, model=model, vendor=vendor, tp=int(str(tp).rstrip("f")), layers=layers, prefill=2, decode=2,
                               seed=5, modules=modules, graphs=graphs, fused_allreduce=fused)
    return request.param, truth, path


def _counts(r) -> list[int]:
    """Layers per pass: a pass of no layers (a step's eager inputs or sampling around its graphs, left apart) counts too."""
    return r.layers_per_pass


@pytest.mark.parametrize("strip", [False, True], ids=["modules", "kernels-only"])
@pytest.mark.parametrize("strategy", ["auto", "motif"])
def test_exact_layers_per_pass(generated, strategy, strip):
    (model, *_), truth, path = generated
    trace = read_trace(path)
    if strip:
        trace.modules = Modules.empty()
    r = detect_layers(trace, strategy)
    if strategy == "motif" and model in HYBRID and _counts(r) != [p["layers"] for p in truth["passes"]]:
        assert any("in none" in w for w in r.warnings)  # the motif alone on a hybrid stack: it says what it missed
        return
    assert _counts(r) == [p["layers"] for p in truth["passes"]]
    assert not r.warnings


@pytest.mark.parametrize("strip", [False, True], ids=["modules", "kernels-only"])
def test_every_kernel_in_its_layer(generated, strip):
    """Not only the counts: each kernel of a layer is in the right one (the index within its pass),
    fused all-reduces and piecewise pieces included."""
    (model, *_), truth, path = generated
    trace = read_trace(path)
    if strip:
        trace.modules = Modules.empty()
    layer, pass_, _ = truth_columns(trace, truth)
    for strategy in ("auto",) if model in HYBRID else ("auto", "motif"):
        r = detect_layers(trace, strategy)
        assert agreement(r.layer, layer) >= 0.99
        assert _same_passes(r, pass_, layer)  # every kernel: a step's eager inputs and sampling around its graphs too


def test_module_spans_decide_the_layers_of_eager_passes(generated):
    (model, _, _, _, modules, _), truth, path = generated
    r = detect_layers(read_trace(path), "auto")
    eager = [p for p in truth["passes"] if not p["graph_correlations"]]
    if modules == "none" or not eager:
        assert "ground-truth" not in r.strategy or modules != "none"
        return
    assert r.strategy.startswith("ground-truth")
    classes = [s["class"] for s in r.stacks if s["class"]]
    expected = [s["class"] for s in truth["stacks"]] if modules == "tree" else [truth["layer_class"]] + [
        s["class"] for s in truth["stacks"][1:]]
    assert sorted(classes) == sorted(expected)  # gpt-oss: TransformerBlock, never the MLPBlock inside it


def test_two_stacks_are_reported_apart(generated):
    (model, *_), truth, path = generated
    if model != "vlm":
        pytest.skip("one stack")
    for strip in (False, True):
        trace = read_trace(path)
        if strip:
            trace.modules = Modules.empty()
        r = detect_layers(trace, "motif" if strip else "auto")
        prefill = [q for q, n in enumerate(r.layers_per_pass) if n == sum(truth["passes"][0]["stacks"])]
        q = prefill[0]
        per_stack = sorted(len(np.unique(r.layer[(r.pass_of == q) & (r.stack == s)])) for s in np.unique(r.stack[(r.pass_of == q) & (r.stack >= 0)]))
        assert per_stack == sorted(truth["passes"][0]["stacks"])


def test_piecewise_pieces_join_into_one_pass(tmp_path):
    path = tmp_path / "p.json.gz"
    truth = gen_trace.generate(path, model="llama", layers=6, prefill=1, decode=3, graphs="piecewise")
    assert all(len(p["graph_correlations"]) == 7 for p in truth["passes"])  # a piece per layer, and one more
    r = detect_layers(read_trace(path), "auto")
    assert _counts(r) == [6, 6, 6, 6]


@pytest.mark.parametrize("edge", ["first", "last"])
@pytest.mark.parametrize("graphs", ["full", "piecewise"])
@given(model=st.sampled_from(sorted(gen_trace.MODELS)), seed=st.integers(0, 2**16), keep=st.integers(1, 3))
@settings(max_examples=12, deadline=None)
def test_a_step_the_profile_cut_keeps_its_side_apart(tmp_path_factory, graphs, edge, model, seed, keep):
    """The profile begins with the last ``keep`` kernels of a step (its sampling), or ends with the
    first ``keep`` of one (its inputs, a graph's first kernel): they are a pass of their own (cut),
    not the next step's head or the last one's tail, however long the host made the GPU wait
    between steps, and whichever strategy found the layers (the layer-start norms, which cut the
    eager kernels before a step at their longest wait, for a Qwen3-Next of 4); every other kernel
    is in its step."""
    path = tmp_path_factory.mktemp("cut") / "cut.json.gz"  # a fresh folder per example (one may be tried twice)
    truth = gen_trace.generate(path, model=model, layers=4, prefill=0, decode=4, graphs=graphs, seed=seed)
    trace = read_trace(path)
    layer, pass_, _ = truth_columns(trace, truth)
    cut = np.ones(len(pass_), bool)
    if edge == "first":
        cut[np.flatnonzero(pass_ == 0)[:-keep]] = False
    else:
        cut[np.flatnonzero(pass_ == pass_.max())[keep:]] = False
    trace.kernels = trace.kernels.take(cut)
    r = detect_layers(trace, "auto")
    layer, pass_ = layer[cut], pass_[cut]
    assert r.layers_per_pass == ([0, 4, 4, 4] if edge == "first" else [4, 4, 4, 0])
    assert _same_passes(r, pass_, layer) and agreement(r.layer, layer) == 1.0


@pytest.mark.parametrize("modules", ["none", "tree"])
def test_training_iterations_are_steps_not_layers(tmp_path, modules):
    path = tmp_path / "train.json.gz"
    truth = gen_trace_workloads.generate(path, workload="training", layers=4, steps=3, modules=modules)
    for strategy in ("auto", "motif"):
        r = detect_layers(read_trace(path), strategy)
        assert _counts(r) == [4] * 6  # a forward and a backward pass per step, four layers each
        steps = [r.steps[q] for q, n in enumerate(r.layers_per_pass) if n]
        assert steps == [0, 0, 1, 1, 2, 2]
    assert truth["totals"]["layers"] == 24
    unstepped = read_trace(path)  # a loop profiled without a schedule records no ProfilerStep
    unstepped.annotations = Annotations.empty()
    for strategy in ("auto", "motif"):
        assert _counts(detect_layers(unstepped, strategy)) == [4] * 6  # the autograd thread's backward passes too


def test_hpc_code_has_no_layers(tmp_path):
    path = tmp_path / "hpc.json.gz"
    gen_trace_workloads.generate(path, workload="hpc", steps=30)
    for strategy in ("auto", "motif", "boundary"):
        r = detect_layers(read_trace(path), strategy)
        assert r.strategy == "none" and not (r.layer >= 0).any() and r.confidence == 0
        assert any("no layer structure found" in w for w in r.warnings)
    out = tmp_path / "hpc.json"
    rc, _, err = run_layerc("trace", path, "--json", out)
    assert rc == 0 and "warning: no layer structure found" in err
    doc = json.loads(out.read_text())
    assert doc["num_layers"] == 0 and doc["strategy"] == "none" and doc["stacks"] == [] and doc["warnings"]


def test_same_class_in_two_stacks(tmp_path):
    """T5 runs one block class in its encoder and its decoder: the blocks are layers (their
    T5Stack parents contain them), and the two stacks are told apart by their parents."""
    path = tmp_path / "vlm.json.gz"
    gen_trace.generate(path, model="vlm", layers=4, prefill=1, decode=1, modules="tree", graphs="full")
    doc = json.loads(gzip.decompress(path.read_bytes()))
    rename = {"Qwen2VLVisionBlock": ("T5Block", 0), "Qwen2DecoderLayer": ("T5Block", 100),
              "Qwen2VisionTransformer": ("T5Stack", 0), "Qwen2Model": ("T5Stack", 1)}
    for e in doc["traceEvents"]:
        name = e.get("name", "")
        if e.get("cat") == "python_function":
            cls, n = name.removeprefix("nn.Module: ").rsplit("_", 1)
            if cls in rename:
                new, shift = rename[cls]
                e["name"] = f"nn.Module: {new}_{int(n) + shift if new == 'T5Block' else shift}"
    renamed = tmp_path / "t5.json.gz"
    renamed.write_bytes(gzip.compress(json.dumps(doc).encode()))
    r = detect_layers(read_trace(renamed), "auto")
    spans = [(s["class"], s["parent"], s["layers"]) for s in r.stacks if s["class"]]
    assert spans == [("T5Block", "T5Stack_0", 24), ("T5Block", "T5Stack_1", 4)]
    assert r.layers_per_pass[0] == 28


def test_modules_that_launch_no_layer_are_never_a_stack(tmp_path):
    """Two embeddings (token and position), numbered 0 and 1 like a stack, launch no GEMM: no layers."""
    path = tmp_path / "emb.json.gz"
    gen_trace.generate(path, model="llama", layers=4, prefill=1, decode=1, modules="tree")
    doc = json.loads(gzip.decompress(path.read_bytes()))
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op" and e["name"] == "aten::embedding"]
    for n, e in enumerate(ops * 2):
        doc["traceEvents"].append({**e, "cat": "python_function", "name": f"nn.Module: Embedding_{n % 2}",
                                   "ts": e["ts"] - 0.01 * (n + 1), "dur": e["dur"] + 0.02 * (n + 1), "args": {}})
    out = tmp_path / "emb2.json.gz"
    out.write_bytes(gzip.compress(json.dumps(doc).encode()))
    r = detect_layers(read_trace(out), "auto")
    assert [s["class"] for s in r.stacks if s["class"]] == ["LlamaDecoderLayer"]
    assert _counts(r) == [4, 4]


@pytest.mark.parametrize("strategy", ["auto", "motif", "boundary"])
def test_one_detection_everywhere(tmp_path, strategy):
    """``trace --perfetto`` and ``perfetto`` write the same timeline with the same strategy, with
    layers drawn for eager passes too; ``replay`` splits a replay into the layers ``trace`` finds."""
    path = tmp_path / "t.json.gz"
    gen_trace.generate(path, model="qwen3", layers=5, prefill=1, decode=2, modules="layers", seed=2)
    a, b, doc = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "t.json"
    assert run_layerc("trace", path, "--strategy", strategy, "--perfetto", a, "--json", doc)[0] == 0
    assert run_layerc("perfetto", path, "--strategy", strategy, "-o", b)[0] == 0
    assert a.read_bytes() == b.read_bytes()
    report = json.loads(doc.read_text())
    events = json.loads(b.read_text())["traceEvents"]
    layer_spans = [e for e in events if str(e.get("name", "")).startswith("layer ") and e.get("ph") == "X"]
    assert len(layer_spans) == report["num_layers"] == 15  # the eager prefill pass's five included
    rc, out, _ = run_layerc("replay", path, "--strategy", strategy)
    assert rc == 0 and json.loads(out)["num_layers_detected"] == 5


def test_long_kernel_names_are_shortened_in_pictures():
    from layerc.backends.layer_dot import KERNEL_LABEL, _kernels_tooltip, kernel_label

    cijk = "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT{}_MI16x16x1_SN_LDSB1_AFC1_AFEM1"
    a, b = ({"kernel": cijk.format(t), "full_name": cijk.format(t)} for t in ("256x192x64", "64x32x256"))
    la, lb = kernel_label(a), kernel_label(b)
    assert len(la) <= KERNEL_LABEL and len(lb) <= KERNEL_LABEL and la != lb  # cut alike, told apart
    assert kernel_label({"kernel": "moe_matmul_ogs"}) == "moe_matmul_ogs"
    assert cijk.format("256x192x64") in _kernels_tooltip({"trace_kernels": [a]})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(model=st.sampled_from(sorted(gen_trace.MODELS)), vendor=st.sampled_from(gen_trace.VENDORS),
       tp=st.sampled_from([1, 2, 8]), fused=st.booleans(), graphs=st.sampled_from(gen_trace.GRAPHS),
       modules=st.sampled_from(gen_trace.MODULES), layers=st.integers(3, 9), prefill=st.integers(0, 2),
       decode=st.integers(0, 3), seed=st.integers(0, 10_000), strip=st.booleans(), strategy=st.sampled_from(["auto", "motif"]),
       kineto=st.sampled_from(gen_trace.GENERATIONS))
def test_any_mix_of_the_classes(tmp_path, model, vendor, tp, fused, graphs, modules, layers, prefill, decode, seed, strip, strategy,
                                kineto):
    """Any model, stack, TP, fusion, graph mode, module spans and Kineto generation: the exact
    layers of every pass."""
    assume(prefill + decode > 0)
    path = Path(tempfile.mkdtemp(dir=tmp_path)) / "t.json.gz"  # a fresh file per example
    truth = gen_trace.generate(path, model=model, vendor=vendor, tp=tp, layers=layers, prefill=prefill, decode=decode, seed=seed,
                               modules=modules, graphs=graphs, fused_allreduce=fused, kineto=kineto)
    trace = read_trace(path)
    if strip:
        trace.modules = Modules.empty()
    r = detect_layers(trace, strategy)
    if model in HYBRID and "motif" in r.strategy:  # the motif (alone, with fused all-reduces, beside spans): exact, or it says what it missed
        assert _counts(r) == [p["layers"] for p in truth["passes"]] or any("in none" in w for w in r.warnings)
        return
    assert _counts(r) == [p["layers"] for p in truth["passes"]]


@pytest.mark.parametrize("layers", [2, 3, 4, 5])
@pytest.mark.parametrize("graphs", ["none", "full", "piecewise"])
@pytest.mark.parametrize("prefill,decode", [(1, 1), (0, 2), (2, 0), (1, 3)])
def test_a_shallow_hybrid_stack_whatever_it_ends_with(tmp_path, layers, graphs, prefill, decode):
    """Qwen3-Next of 2 to 5 layers: linear-attention layers, the fourth a full-attention one. Of 4,
    the stack ends with its only attention layer, which no repeat brackets: its attention and
    experts, outside every layer of a forward pass that has layers (a graph replay's tail too, a
    whole layer long), say the motif missed a layer, and the layer-start norms find every one. Of
    2 or 3, eager prefill and decode run back to back with other linear-attention kernels
    (chunked, recurrent): the host's wait between them makes them two forward passes of the same
    layers, however few kernels they share."""
    path = tmp_path / "h.json.gz"
    truth = gen_trace.generate(path, model="qwen3_next", layers=layers, prefill=prefill, decode=decode, graphs=graphs, seed=0)
    trace = read_trace(path)
    layer, pass_, _ = truth_columns(trace, truth)
    r = detect_layers(trace, "auto")
    assert r.layers_per_pass == [p["layers"] for p in truth["passes"]]
    assert _same_passes(r, pass_, layer) and agreement(r.layer, layer) == 1.0


@settings(max_examples=40, deadline=None)
@given(layers=st.integers(2, 3), decode=st.integers(1, 4), tp=st.sampled_from([1, 2, 8]), vendor=st.sampled_from(gen_trace.VENDORS),
       seed=st.integers(0, 10_000))
def test_an_eager_prefill_then_decode_steps_are_passes_of_their_own(tmp_path_factory, layers, decode, tp, vendor, seed):
    """A shallow hybrid stack run eagerly, a prefill then decode steps: the prefill's layers (its
    linear attention chunked, the decode's recurrent) are the same layers again, a forward pass
    of their own, whether the host's wait after the prefill is the longest of the profile or
    half as long as those between the decode steps. (They were once taken for another stack in
    the first decode's pass: [6, 3] for [3, 3, 3], whatever the seed, with two decode steps.)"""
    path = tmp_path_factory.mktemp("eager") / "h.json.gz"
    truth = gen_trace.generate(path, model="qwen3_next", vendor=vendor, tp=tp, layers=layers, prefill=1, decode=decode, graphs="none",
                               modules="none", seed=seed)
    r = detect_layers(read_trace(path), "auto")
    assert r.layers_per_pass == [p["layers"] for p in truth["passes"]], r.warnings


@pytest.mark.parametrize("graphs", ["none", "full", "piecewise"])
@pytest.mark.parametrize("model", sorted(set(gen_trace.MODELS) - {"vlm"}))  # (a vision tower is no layer-start norm's)
def test_the_norms_place_the_last_layer_whole(tmp_path, model, graphs):
    """Without all-reduces (one GPU), the layer-start norms end a pass's last layer at the final
    norm, not at its last GEMM: what follows that GEMM (a gated output's multiply, the shared
    experts' gate) is the layer's, on every kernel."""
    path = tmp_path / "n.json.gz"
    truth = gen_trace.generate(path, model=model, layers=8, prefill=1, decode=2, graphs=graphs, tp=1, seed=1)
    trace = read_trace(path)
    layer, pass_, _ = truth_columns(trace, truth)
    r = detect_layers(trace, "boundary")
    assert r.layers_per_pass == [p["layers"] for p in truth["passes"]]
    assert _same_passes(r, pass_, layer) and agreement(r.layer, layer) == 1.0


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("vendor", ["cuda", "rocm"])
@pytest.mark.parametrize("tp", [1, 8])
@pytest.mark.parametrize("model", sorted(set(gen_trace.MODELS) - {"vlm"}))
def test_the_norms_cut_eager_passes_at_shorter_waits(tmp_path, model, tp, vendor, seed):
    """Eager prefill and decode steps back to back, by the layer-start norms alone: where the
    longest waits leave two forward passes in one run (more layers than the others hold), the
    runs are cut again at shorter waits until they agree, as the motif's are."""
    path = tmp_path / "e.json.gz"
    truth = gen_trace.generate(path, model=model, layers=6 if model != "qwen3_next" else 8, prefill=1, decode=2, graphs="none",
                               tp=tp, vendor=vendor, seed=seed)
    trace = read_trace(path)
    layer, pass_, _ = truth_columns(trace, truth)
    r = detect_layers(trace, "boundary")
    assert _same_passes(r, pass_, layer) and agreement(r.layer, layer) == 1.0


def test_a_hybrid_stack_with_fused_all_reduces_says_what_it_missed(tmp_path):
    """Known limit: with each all-reduce fused into the norm after it, no layer-start norm follows
    an all-reduce, so the boundary strategy finds nothing, and the motif places one kind of a
    hybrid stack's layers. The answer must say so."""
    path = tmp_path / "t.json.gz"
    truth = gen_trace.generate(path, model="qwen3_next", vendor="cuda", tp=8, fused_allreduce=True, layers=8, prefill=1, decode=2)
    r = detect_layers(read_trace(path))
    assert _counts(r) != [p["layers"] for p in truth["passes"]] and any("in none" in w for w in r.warnings)


@pytest.mark.parametrize("name", ["hta_legacy_flows_a100.json.gz", "hta_simple_add_a100.json.gz", "hta_minitoy_mi250.json.gz",
                                  "hta_triton_a100.json.gz"])
def test_real_traces_without_layers_get_none(shared, name):
    """HTA's training sample (a DLRM-like model: its iterations and MLP blocks repeat) and its
    toy runs: no layer is invented, and the steps are counted where the profiler recorded them."""
    path = shared / "data" / "traces" / "torch" / name
    if not path.exists():
        pytest.skip("shared data missing")
    trace = read_trace(path)
    for strategy in ("auto", "motif", "boundary"):
        r = detect_layers(trace, strategy)
        assert r.strategy == "none" and not (r.layer >= 0).any(), strategy
    if name.startswith("hta_legacy"):
        assert len({s for s in r.steps if s >= 0}) == 6  # ProfilerStep#1009..1014
        assert len(r.layers_per_pass) >= 12  # each step's forward (main thread) and backward (autograd's) apart


def test_a_large_layer_picture_fits_4000_pixels(tmp_path):
    """Four DeepSeek layers drawn as one picture (183 nodes, the kernels' long hipBLASLt names
    bound to them): labels are cut to the family and a hash, the PNG's long side is at most
    4000 px, and the SVG keeps every full name in its tooltips."""
    import io

    from PIL import Image

    from layerc.backends import layer_dot
    from layerc.backends.graphviz import available
    from tests.backends.test_layer_dot import layer_doc

    if not available():
        pytest.skip("no Graphviz")
    doc = layer_doc("deepseek_v3", 5, kernels=True, span=4)
    cijk = "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT{}x{}x64_MI16x16x1_SN_LDSB1_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0"
    for n, k in enumerate(k for node in doc["nodes"] for k in node.get("trace_kernels") or []):
        k["kernel"] = k["full_name"] = cijk.format(64 * (n % 7 + 1), 32 * (n % 5 + 1))
    assert len(doc["nodes"]) >= 180
    png = Image.open(io.BytesIO(layer_dot.render(doc, "png")))
    assert max(png.size) <= layer_dot.PNG_MAX_PX
    svg = layer_dot.render(doc, "svg").decode()
    assert cijk.format(64, 32) in svg  # the full name, in a tooltip
    labels = re.findall(r"⚡ (\S+) \(", layer_dot.dot_text(doc))
    assert labels and all(len(x) <= layer_dot.KERNEL_LABEL for x in labels)


@pytest.mark.parametrize("graphs", ["none", "full", "piecewise"])
def test_boundary_alone_says_when_a_layer_holds_a_vision_tower(tmp_path, graphs):
    """The layer-start norms alone find the language model's layers of a VLM and fold its vision
    tower into the first: that layer holds the tower's attention, many times a layer's, and the
    result says so (and trusts itself less) instead of reporting the layers as found."""
    path = tmp_path / "vlm.json.gz"
    truth = gen_trace.generate(path, model="vlm", tp=2, layers=6, prefill=1, decode=1, graphs=graphs, modules="none", seed=3903)
    r = detect_layers(read_trace(path), "boundary")
    assert r.layers_per_pass != [p["layers"] for p in truth["passes"]]
    assert r.evidence["layers_holding_several"] >= 1 and any("several layers" in w for w in r.warnings)
    auto = detect_layers(read_trace(path), "auto")
    assert auto.layers_per_pass == [p["layers"] for p in truth["passes"]] and auto.evidence["layers_holding_several"] == 0


@settings(max_examples=30, deadline=None)
@given(model=st.sampled_from(sorted(gen_trace.MODELS)), graphs=st.sampled_from(gen_trace.GRAPHS), tp=st.sampled_from([1, 8]),
       layers=st.integers(3, 8), seed=st.integers(0, 10_000))
def test_a_right_answer_is_never_said_to_crowd_its_layers(tmp_path_factory, model, graphs, tp, layers, seed):
    """Where the layers are right, no layer holds several layers' attention or experts: the
    warning is never a false alarm on any generated model (MLA's, hybrid and MoE layers)."""
    path = tmp_path_factory.mktemp("crowd") / "t.json.gz"
    truth = gen_trace.generate(path, model=model, graphs=graphs, tp=tp, layers=layers, prefill=1, decode=2, seed=seed)
    r = detect_layers(read_trace(path), "auto")
    if r.layers_per_pass == [p["layers"] for p in truth["passes"]]:
        assert r.evidence["layers_holding_several"] == 0, r.warnings
