"""Kernel binding (``bind-kernels``): the alignments against brute force, generated (dump, replay)
pairs with per-kernel truth, real (exported graph, torch.profiler profile) pairs made on CPU, and
``layerc layer --trace``."""

from __future__ import annotations

import collections
import itertools
import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layerc.grammar.dumps import load
from layerc.grammar.traces import read_trace
from layerc.ir.diagnostics import LayercError
from layerc.ir.targets import op_name
from layerc.passes.pipeline import run_passes
from layerc.passes.base import Context
from layerc.passes.bind_kernels import BindKernels, bind_profile_ops, outermost_ops
from layerc.passes.binding import NO, align_many, align_one, signature_table
from layerc.passes.groups import InferGroups
from layerc.passes.pipeline import build_pipeline
from layerc.passes.select_graph import SelectGraph
from layerc.passes.slicing import SliceLayer
from layerc.passes.tag_weights import TagWeights
from layerc.passes.trace_layers import detect_layers
from layerc.backends.synth import dump as gen_dump
from layerc.backends.synth.kernels import generate


# -- the alignments, against every order-keeping assignment --------------------------------------
def _score_of(owner, scores, bonus, unbound, many: bool) -> float:
    total = 0.0
    for j, o in enumerate(owner):
        total += unbound[j] if o < 0 else scores[o][j]
    rows = [o for o in owner if o >= 0]
    if rows != sorted(rows) or any(s == NO for s in (scores[o][j] for j, o in enumerate(owner) if o >= 0)):
        return NO
    if not many and len(rows) != len(set(rows)):
        return NO
    return total + (sum(bonus[r] for r in set(rows)) if many else 0.0)


scores_st = st.integers(1, 3).flatmap(lambda rows: st.integers(1, 5).flatmap(lambda events: st.tuples(
    st.lists(st.lists(st.sampled_from([NO, 0.25, 1.0, 3.0]), min_size=events, max_size=events), min_size=rows, max_size=rows),
    st.lists(st.sampled_from([0.0, 2.0]), min_size=rows, max_size=rows),
    st.lists(st.sampled_from([0.0, -0.5]), min_size=events, max_size=events))))


@settings(max_examples=150, deadline=None)
@given(scores_st)
def test_align_many_is_optimal_and_keeps_order(case):
    scores, bonus, unbound = case
    rows, events = len(scores), len(scores[0])
    owner, total = align_many(rows, events, lambda i: np.array(scores[i]), np.array(bonus), np.array(unbound))
    got = _score_of(owner.tolist(), scores, bonus, unbound, many=True)
    best = max(_score_of(list(o), scores, bonus, unbound, many=True) for o in itertools.product(range(-1, rows), repeat=events))
    assert got > NO and got == pytest.approx(best) and total == pytest.approx(best)


@settings(max_examples=150, deadline=None)
@given(scores_st)
def test_align_one_is_optimal_and_one_to_one(case):
    scores, _, unbound = case
    rows, events = len(scores), len(scores[0])
    owner, total = align_one(rows, events, lambda i: np.array(scores[i]), np.array(unbound))
    got = _score_of(owner.tolist(), scores, [0] * rows, unbound, many=False)
    best = max(_score_of(list(o), scores, [0] * rows, unbound, many=False) for o in itertools.product(range(-1, rows), repeat=events))
    assert got > NO and got == pytest.approx(best) and total == pytest.approx(best)


# -- generated pairs ---------------------------------------------------------------------------------
def _bind_layer(dump, trace, layer: int):
    module = load(str(dump))
    ctx = Context(inputs={"trace": trace})
    run_passes([SelectGraph(), TagWeights(), SliceLayer(layer=layer), InferGroups(), BindKernels()], module, ctx)
    return module.graphs[0], ctx.analyses["binding"]


#: arch → (layers, streams its replays run on: two where the graph has aux-stream regions)
ARCHES = {"deepseek_v3": (6, 2), "llama": (4, 1), "nemotron_h": (8, 1)}


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    """arch → a generated dump directory."""
    out = {}
    for arch, (layers, _) in ARCHES.items():
        out[arch] = tmp_path_factory.mktemp(arch)
        gen_dump.write(arch, out[arch], layers=layers)
    return out


@pytest.fixture(scope="module")
def generated(dumps):
    """arch → (dump dir, trace, truth): a decode replay of a generated dump, kernel truth beside it."""
    out = {}
    for arch, d in dumps.items():
        truth = generate(d, d / "replay.json.gz", seed=1, replays=2)
        out[arch] = (d, read_trace(d / "replay.json.gz"), truth)
    return out


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("arch", list(ARCHES))
def test_generated_pairs_recover_the_truth(dumps, arch, seed, record_property):
    d = dumps[arch]
    path = d / f"replay_{seed}.json.gz"
    truth = generate(d, path, seed=seed, replays=2)
    trace = read_trace(path)
    first = [r for r in truth["kernels"] if r["replay"] == 0]
    assert sum(len(r["nodes"]) > 1 for r in first) > 0  # fused pointwise pairs
    assert len({r["stream"] for r in first}) == ARCHES[arch][1]
    right, total = _recovered(d, trace, truth)
    record_property(f"binding {arch} seed {seed}", f"{right}/{total} = {100 * right / total:.1f}%")
    assert total > 0 and right / total >= 0.95, f"{arch}: {right}/{total}"


def test_noise_is_drawn_per_kernel(dumps):
    """Fill, copy and unknown kernels follow a share ``noise`` of the kernels, different ones in
    each layer (not every occurrence of an op role)."""
    truth = generate(dumps["deepseek_v3"], dumps["deepseek_v3"] / "noisy.json.gz", seed=3, noise=0.3)
    rows = truth["kernels"]
    noise = [r for r in rows if not r["nodes"]]
    assert 0.2 <= len(noise) / (len(rows) - len(noise)) <= 0.4
    after = collections.defaultdict(set)  # layer → positions in the layer followed by noise
    for layer in truth["layers"]:
        mine = [r for r in rows if r["layer"] == layer]
        after[layer] = {i for i, r in enumerate(mine) if not r["nodes"]}
    assert len({frozenset(v) for v in after.values()}) > 1


def _recovered(d, trace, truth) -> tuple[int, int]:
    """Kernels of replay 0 bound to their true node, of those with a node, over every layer."""
    k = trace.kernels
    index = {(int(s), int(t)): i for i, (s, t) in enumerate(zip(k.start, k.stream))}
    rows = [r for r in truth["kernels"] if r["replay"] == 0]
    right = total = 0
    for layer in truth["layers"]:
        graph, result = _bind_layer(d, trace, layer)
        want = {index[(r["start"], r["stream"])]: set(r["nodes"]) for r in rows if r["layer"] == layer and r["nodes"]}
        total += len(want)
        right += sum(1 for j, nodes in want.items() if j in result.bound_index and result.bound_index[j].name in nodes)
        # every kernel of the layer is listed once: on a node, or as unbound
        listed = [e["index"] for v in result.events.values() for e in v] + [e["index"] for e in result.unbound_events]
        assert len(listed) == len(set(listed)) == result.summary["kernel_count"]
        assert result.summary["bound_kernels"] + result.summary["unbound_kernels"] == result.summary["kernel_count"]
        # order kept on each stream: nodes in graph order take kernels in time order
        position = {n.name: i for i, n in enumerate(graph.nodes)}
        for stream in set(k.stream[list(result.bound_index)].tolist()):
            mine = sorted((j for j in result.bound_index if k.stream[j] == stream), key=lambda j: k.start[j])
            assert [position[result.bound_index[j].name] for j in mine] == sorted(position[result.bound_index[j].name] for j in mine)
    return right, total


def test_nodes_carry_kernels_with_confidence(generated):
    d, trace, _ = generated["deepseek_v3"]
    graph, result = _bind_layer(d, trace, 4)
    moe = next(n for n in graph.nodes if op_name(n.target or "") == "trtllm_moe_fused")
    names = [e["kernel"] for e in moe.meta["trace_kernels"]]
    assert len(names) == 5 and all(0 < e["confidence"] <= 1 for e in moe.meta["trace_kernels"])
    assert all(e["evidence"] == "signature" for e in moe.meta["trace_kernels"])
    views = [n for n in graph.nodes if op_name(n.target or "") in ("view", "getitem")]
    assert views and not any(n.meta.get("trace_kernels") for n in views)
    assert result.summary["num_streams"] == 2


def test_confidence_follows_the_fit_and_a_foreign_trace_warns(generated, shared):
    """On its own replay a layer fits: confidences are high, lower where a neighbouring op could
    take the kernel too. A CNN toy trace bound to a DeepSeek layer warns and scales them down."""
    d, trace, _ = generated["deepseek_v3"]
    ctx = Context(inputs={"trace": trace})
    module = _sliced(d, 4)
    BindKernels().apply(ctx, module)
    own = [e["confidence"] for v in ctx.analyses["binding"].events.values() for e in v if e["evidence"] == "signature"]
    assert not ctx.warnings and min(own) >= 0.7 and len(set(own)) > 1
    toy = read_trace(shared / "data/traces/torch/hta_simple_add_a100.json.gz")
    ctx = Context(inputs={"trace": toy})
    module = _sliced(d, 4)
    BindKernels().apply(ctx, module)
    assert any("fits layer 4 poorly" in w for w in ctx.warnings)
    assert max(e["confidence"] for v in ctx.analyses["binding"].events.values() for e in v) < min(own)


def test_hybrid_model_falls_back_to_whole_graph_alignment(generated):
    d, trace, _ = generated["nemotron_h"]
    _, result = _bind_layer(d, trace, 3)
    assert result.summary["layer_from"].startswith("whole-graph alignment")


def test_bind_kernels_runs_from_pipeline_text(generated):
    d, trace, _ = generated["llama"]
    module = load(str(d))
    ctx = Context()
    text = f"select-graph,tag-weights,slice-layer{{layer=2}},infer-groups,bind-kernels{{trace={d / 'replay.json.gz'} phase=decode replay=1}}"
    run_passes(build_pipeline(text), module, ctx)
    summary = module.graphs[0].meta["trace_summary"]
    assert summary["replay"] == 1 and summary["bound_kernels"] > 0
    # the same strategies as trace, replay and perfetto (layer --trace --strategy)
    for strategy in ("motif", "boundary"):
        module, ctx = load(str(d)), Context()
        run_passes(build_pipeline(text.replace("replay=1}", f"replay=1 strategy={strategy}}}")), module, ctx)
        assert module.graphs[0].meta["trace_summary"]["strategy"] == detect_layers(trace, strategy).strategy
    with pytest.raises(LayercError, match="strategy must be one of"):
        BindKernels(strategy="nearest")


def test_bad_options_and_traces_are_clear_errors(generated, tmp_path):
    d, trace, _ = generated["llama"]
    with pytest.raises(LayercError, match="phase must be one of"):
        BindKernels(phase="warmup")
    with pytest.raises(LayercError, match="no layer 9"):
        _bind_layer(d, trace, 0) and BindKernels(layer=9).apply(Context(inputs={"trace": trace}), _sliced(d, 0))
    with pytest.raises(LayercError, match="needs a trace"):
        BindKernels().apply(Context(), _sliced(d, 0))
    bad = tmp_path / "bindings.toml"
    bad.write_text('[[op]]\nop = "("\nkernels = ["x"]\n')
    with pytest.raises(LayercError, match="bad regex"):
        signature_table(str(bad))


def _sliced(d, layer):
    module = load(str(d))
    run_passes([SelectGraph(), TagWeights(), SliceLayer(layer=layer), InferGroups()], module)
    return module


def test_signature_table_covers_the_generated_ops():
    table = signature_table()
    for arch in ("deepseek_v3", "llama", "nemotron_h", "qwen3_next", "qwen3_moe"):
        graph = gen_dump.generate(arch, layers=2).graphs[-1]
        unknown = {op_name(n.target) for n in graph.nodes if n.kind == "op" and not table.is_view(op_name(n.target))
                   and table.lookup(op_name(n.target)) is None}
        assert not unknown, f"{arch}: {unknown}"


# -- real pairs on CPU: a tiny HF model exported and profiled -------------------------------------
torch = pytest.importorskip("torch")


def _pair(arch, tmp_path):
    from layerc.backends.synth.hf_export import export_graph_module, node_modules, profile_model, write_dump

    model, gm = export_graph_module(arch, 2)
    with open(tmp_path / "dump.txt", "w") as f:
        write_dump(f, gm)
    profile_model(model, tmp_path / "profile.json")
    return load(str(tmp_path / "dump.txt")), read_trace(tmp_path / "profile.json"), node_modules(gm)


def _truth(trace, graph, modules) -> dict[int, str]:
    """Outermost aten op → its graph node, from the profile's own record_function module ranges:
    the k-th op of a name inside module M is the k-th node of that name M ran."""
    c, a = trace.cpu_ops, trace.annotations
    labels = trace.strings.lookup(a.name).astype(str)
    names = trace.strings.lookup(c.name).astype(str)
    top, _ = outermost_ops(trace)
    nodes = collections.defaultdict(list)
    for n in graph.nodes:
        if n.kind == "op" and n.name in modules:
            nodes[(modules[n.name], op_name(n.target))].append(n.name)
    seen, truth = collections.Counter(), {}
    for op in top.tolist():
        inside = [i for i in range(len(a)) if labels[i].startswith("module: ") and a.tid[i] == c.tid[op]
                  and a.start[i] <= c.start[op] and c.end[op] <= a.end[i]]
        module = labels[max(inside, key=lambda i: a.start[i])][len("module: "):] if inside else None
        key = (module, names[op].rsplit("::", 1)[-1])
        if seen[key] < len(nodes.get(key, ())):
            truth[op] = nodes[key][seen[key]]
        seen[key] += 1
    return truth


@pytest.mark.parametrize("arch", ["llama", "qwen3_moe", "deepseek_v3"])
def test_real_profile_binds_aten_ops_to_their_nodes(arch, tmp_path):
    module, trace, modules = _pair(arch, tmp_path)
    graph = module.graphs[0]
    result = bind_profile_ops(graph, trace, None)
    truth = _truth(trace, graph, modules)
    right = sum(1 for op, name in truth.items() if op in result.bound_index and result.bound_index[op].name == name)
    assert len(truth) >= 150 and right / len(truth) >= 0.95, f"{arch}: {right}/{len(truth)}"
    # a node's time is its outermost op's; nested ops are listed, never counted
    timed = [e for v in result.events.values() for e in v if not e.get("nested")]
    assert result.summary["kernel_count"] == len(timed) == len(result.bound_index)
    assert any(e.get("nested") for v in result.events.values() for e in v)


def test_profile_layer_binding_through_the_cli(tmp_path):
    from layerc.backends.synth.hf_export import export, profile_model, export_graph_module

    info = export("llama", 2, tmp_path)
    model, _ = export_graph_module("llama", 2)
    profile_model(model, tmp_path / "profile.json", annotate_modules=False)
    r = subprocess.run([sys.executable, "-m", "layerc.tools.driver", "layer", info["dump"], "1", "--trace",
                        str(tmp_path / "profile.json"), "--format", "json", "-o", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "001_export_export_to_gm_layer1.json").read_text())
    assert doc["trace_summary"]["match"] == "ops" and doc["trace_summary"]["bound_ops"] > 40
    bound = [n for n in doc["nodes"] if n.get("trace_kernels")]
    assert len(bound) >= 0.9 * len([n for n in doc["nodes"] if n["op"].startswith("aten.")])


@pytest.fixture(scope="module")
def qwen2_dump(tmp_path_factory):
    """A 24-layer qwen2 export, the model family of the HF Qwen1.5-0.5B H100 profile."""
    from layerc.backends.synth.hf_export import export_graph_module, write_dump

    _, gm = export_graph_module("qwen2", 24)
    path = tmp_path_factory.mktemp("qwen2") / "dump.txt"
    with open(path, "w") as f:
        write_dump(f, gm)
    return path


def _bind_hf_layer5(shared, dump, bind: BindKernels):
    """Layer 5 of the dump bound to the H100 profile: (trace, module, context)."""
    trace = read_trace(shared / "data/traces/torch/hf_qwen1.5-0.5b_h100.json.gz")
    module = load(str(dump))
    ctx = Context(inputs={"trace": trace})
    run_passes([SelectGraph(), TagWeights(), SliceLayer(layer=5), bind], module, ctx)
    return trace, module, ctx


def test_gpu_profile_lists_every_kernel_and_only_gpu_time(shared, qwen2_dump):
    """HF Qwen1.5-0.5B profiled eagerly on an H100: the kernels of an op no node took (the
    flash-attention kernel of aten::scaled_dot_product_attention) are unbound kernels; views,
    which launch nothing, stay out of the GPU totals; the trace's one stream counts once."""
    trace, module, ctx = _bind_hf_layer5(shared, qwen2_dump, BindKernels())
    result, s = ctx.analyses["binding"], module.graphs[0].meta["trace_summary"]
    bound = [e for v in result.events.values() for e in v if not e.get("cpu_only")]
    unbound = {e["kernel"] for e in result.unbound_events}
    assert "flash_fwd_kernel" in unbound | {e["kernel"] for e in bound}
    assert all("stream_id" in e for e in bound + result.unbound_events)  # kernels only, no CPU ops
    assert s["kernel_count"] == len(bound) + len(result.unbound_events) == s["bound_kernels"] + s["unbound_kernels"]
    assert s["total_duration_us"] == pytest.approx(sum(e["duration_us"] for e in bound + result.unbound_events), abs=0.01)
    assert any(e.get("cpu_only") for v in result.events.values() for e in v)  # views are listed, not counted
    assert s["num_streams"] == len(np.unique(trace.kernels.stream)) == 1
    _assert_true_layer(trace, result, 5)


def _assert_true_layer(trace, result, layer: int) -> None:
    """Every kernel the binding listed ran in ``layer`` of the profile's complete forward pass,
    as its nn.Module spans say (the partial pass before it has no spans)."""
    from layerc.passes.trace_layers import from_spans

    listed = [e["index"] for v in result.events.values() for e in v if "stream_id" in e] + [e["index"] for e in result.unbound_events]
    assert listed and set(from_spans(trace)[listed].tolist()) == {layer}


def test_gpu_profile_kernels_bind_the_complete_pass(shared, qwen2_dump):
    """Matched as kernels (detect-layers, no cpu ops), the default pass is the first complete one,
    not the tail of the pass the profile began in (whose layers are 14..23, not 0..9)."""
    trace, module, ctx = _bind_hf_layer5(shared, qwen2_dump, BindKernels(match="kernels"))
    assert module.graphs[0].meta["trace_summary"]["pass"] == 1
    _assert_true_layer(trace, ctx.analyses["binding"], 5)


def test_prefill_on_a_decode_only_trace_is_a_clear_error(generated, tmp_path):
    d, _, _ = generated["deepseek_v3"]
    r = subprocess.run([sys.executable, "-m", "layerc.tools.driver", "layer", str(d), "4", "--trace", str(d / "replay.json.gz"),
                        "--phase", "prefill", "-o", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 1 and "no eager (prefill) pass in" in r.stderr and "Traceback" not in r.stderr
    assert not list(tmp_path.iterdir())


# -- the command ----------------------------------------------------------------------------------------
def test_layer_command_binds_a_replay(generated, tmp_path):
    import jsonschema

    from layerc.backends.layer_json import schema

    d, _, _ = generated["deepseek_v3"]
    r = subprocess.run([sys.executable, "-m", "layerc.tools.driver", "layer", str(d), "4", "--trace", str(d / "replay.json.gz"),
                        "--format", "json,dot", "-o", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    doc = json.loads(next(tmp_path.glob("*_layer4.json")).read_text())
    jsonschema.validate(doc, schema())
    s = doc["trace_summary"]
    assert s["kernel_count"] == s["bound_kernels"] + s["unbound_kernels"] and s["num_streams"] == 2
    assert "⚡" in next(tmp_path.glob("*_layer4.dot")).read_text()


def test_layer_command_errors(generated, tmp_path):
    d, _, _ = generated["llama"]
    r = subprocess.run([sys.executable, "-m", "layerc.tools.driver", "layer", str(d), "1", "--trace", str(d / "missing.json"),
                        "-o", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 1 and "Traceback" not in r.stderr and "missing.json" in r.stderr
    assert not list(tmp_path.iterdir())
    r = subprocess.run([sys.executable, "-m", "layerc.tools.driver", "layer", str(d), "1", "--trace", str(d / "replay.json.gz"),
                        "--replay", "-1"], capture_output=True, text=True)
    assert r.returncode == 2
