"""The graph diff on dumps whose differences are known.

- One graph against a copy with every generic name permuted and every layer's ops reordered: each
  op matched with its own copy (``meta['born']`` tells), and no change, on every generated arch.
- Planted changes on two renamed, reordered copies (an add+norm pair fused in every layer, a view
  removed from one layer, an all-reduce added to another, or one random adjacent pair fused): the
  diff reports exactly those, at their layers, and nothing else.
- Two real transform stages of DeepSeek-V3 (before and after AutoDeploy's fusions): the fusions
  the generator applies are found as such.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from layerc.backends.synth.dump import generate, randomized
from layerc.ir.graph import OP, Graph, Node
from layerc.ir.targets import op_name
from layerc.passes.base import Context
from layerc.passes.graph_diff import PLUMBING, _expressions, diff_graphs, layer_span, op_key, to_dict
from layerc.passes.pipeline import PassManager
from layerc.passes.select_graph import SelectGraph
from layerc.passes.slicing import SliceLayers
from layerc.passes.tag_weights import TagWeights

ARCHES = ("llama", "qwen3_moe", "nemotron_h", "qwen3_next", "deepseek_v3", "deepseek_v3_prefusion", "eager")


def _sliced(graph: Graph) -> Graph:
    module = generate("llama", 1)
    module.graphs = [graph]
    PassManager([SelectGraph(), TagWeights(), SliceLayers()]).run(Context(), module)
    return module.main_graph()


def _copies(arch: str, layers: int, seed: int) -> tuple[Graph, Graph]:
    """Two copies of one generated graph, each with its generic names permuted and its layers'
    ops reordered by its own seed; ``meta['born']`` is each op's place in the original."""
    graph = generate(arch, layers).main_graph()
    for i, n in enumerate(graph.nodes):
        n.meta["born"] = i
    return randomized(graph, seed, True), randomized(graph, seed + 1000, True)


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("seed", [0, 1])
def test_a_renamed_reordered_copy_matches_op_for_op(arch, seed):
    a, b = (_sliced(g) for g in _copies(arch, 4, seed))
    d = diff_graphs(a, b)
    assert d.changes == [] and d.inputs_added == d.inputs_removed == []
    assert d.matched == d.nodes_a == d.nodes_b
    # each op with its own copy, or with a copy of the same expression (two arange(8) are one value)
    code = {**_expressions(a), **_expressions(b)}
    wrong = [(x.name, y.name) for x, y in d.matching.ab.items() if x.meta["born"] != y.meta["born"] and code[x] != code[y]]
    assert wrong == []


# -- planted changes --------------------------------------------------------------------------------
def _ops(graph: Graph, name: str, layer: int | None = None) -> list[Node]:
    return [n for n in graph.nodes if n.kind == OP and op_name(n.target or "") == name
            and (layer is None or n.meta.get("true_layer") == layer)]


def _fresh(graph: Graph, base: str) -> str:
    k = 0
    while f"{base}_{k}" in graph:
        k += 1
    return f"{base}_{k}"


def _op(graph: Graph, before: Node, target: str, args: tuple, like: Node) -> Node:
    node = Node(OP, _fresh(graph, op_name(target)), target, args, type=like.type)
    node.meta["true_layer"] = like.meta.get("true_layer")
    return graph.insert_before(before, node)


def fuse_add_norm(graph: Graph) -> None:
    """Each layer's residual add after attention and the post-attention RMSNorm of its sum → one
    fused_add_rms_norm, whose items are the normed value and the new residual."""
    for norm in _ops(graph, "flashinfer_rms_norm"):
        add = norm.args[0]
        if "post_attention" not in norm.args[1].name:
            continue
        if not (isinstance(add, Node) and add.kind == OP and op_name(add.target or "") == "add"):
            continue
        x, residual = add.args[1], add.args[0]
        fused = _op(graph, add, "auto_deploy.flashinfer_fused_add_rms_norm.default", (x, residual, norm.args[1], norm.args[2]), norm)
        normed = _op(graph, add, "<built-in function getitem>", (fused, 0), norm)
        summed = _op(graph, add, "<built-in function getitem>", (fused, 1), add)
        norm.replace_all_uses_with(normed)
        graph.erase(norm)
        add.replace_all_uses_with(summed)
        graph.erase(add)


def remove_view(graph: Graph, layer: int) -> None:
    """The view between layer ``layer``'s attention and its o_proj, folded away."""
    view = next(n for n in _ops(graph, "view", layer) if any(op_name(u.target or "") == "torch_linear_simple" for u in n.users)
                and op_name(n.args[0].target or "").endswith("with_cache"))
    view.replace_all_uses_with(view.args[0])
    graph.erase(view)


def add_allreduce(graph: Graph, layer: int) -> None:
    """An all-reduce of layer ``layer``'s MLP output, before its residual add."""
    mlp = _ops(graph, "fused_swiglu_mlp", layer)[0]
    users = list(mlp.users)
    reduced = _op(graph, users[0], "auto_deploy.trtllm_dist_all_reduce.default", (mlp, "NCCL"), mlp)
    for u in users:
        u.args = tuple(reduced if v is mlp else v for v in u.args)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_planted_changes_are_reported_exactly(seed):
    layers = 8
    a, b = _copies("llama", layers, seed)
    fuse_add_norm(b)
    remove_view(b, 2)
    add_allreduce(b, 5)
    b.verify()
    d = diff_graphs(_sliced(a), _sliced(b))
    found = {(c.kind, c.before, c.after, layer_span(c.layers, d.layers_a)) for c in d.changes}
    assert found == {
        ("fused", ("add", "flashinfer_rms_norm"), ("flashinfer_fused_add_rms_norm", "getitem", "getitem"), "every layer (8)"),
        ("removed", ("view",), (), "layer 2"),
        ("added", (), ("trtllm_dist_all_reduce",), "layer 5"),
    }
    assert [c.kind for c in d.changes][0] == "fused"  # the change of every layer first
    assert all(not c.outside for c in d.changes)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arch=st.sampled_from(("llama", "qwen3_moe", "nemotron_h", "qwen3_next", "deepseek_v3")), seed=st.integers(0, 10_000),
       pick=st.randoms(use_true_random=False))
def test_one_random_adjacent_pair_fused_is_one_fused_change(arch, seed, pick: random.Random):
    """Any op with one user in its layer, both computing something, fused into one new op: the
    diff names that pair, that layer, and nothing else."""
    a, b = _copies(arch, 3, seed)
    plumbing = PLUMBING | {"split_with_sizes", "to"}
    pairs = [(n, next(iter(n.users))) for n in b.nodes
             if n.kind == OP and len(n.users) == 1 and n.meta.get("true_layer") is not None
             and op_name(n.target or "") not in plumbing
             and (u := next(iter(n.users))).kind == OP and u.meta.get("true_layer") == n.meta["true_layer"]
             and op_name(u.target or "") not in plumbing]
    first, second = pick.choice(pairs)
    outside = tuple(v for v in (*first.args, *second.args) if v is not first)
    fused = _op(b, second, "custom.fused_pair.default", outside, second)
    second.replace_all_uses_with(fused)
    b.erase(second)
    b.erase(first)
    b.verify()
    d = diff_graphs(_sliced(a), _sliced(b))
    names = tuple(sorted(op_name(n.target or "") for n in (first, second)))
    assert [(c.kind, c.before, c.after, c.layers) for c in d.changes] == [
        ("fused", names, ("fused_pair",), [first.meta["true_layer"]])]


@pytest.mark.parametrize("arch", ["llama", "qwen3_moe", "deepseek_v3"])
def test_every_linear_quantized_is_one_replacement(arch):
    """Each linear becomes an FP8 linear that also reads its scales (new weights): matched through
    the weight it kept, so each is a replacement in place and nothing around it changes."""
    a, b = _copies(arch, 3, 7)
    linears = _ops(b, "torch_linear_simple")
    for lin in linears:
        scale = b.weight(lin.args[1].name + "_scale")
        quant = _op(b, lin, "auto_deploy.torch_quant_fp8_linear.default", (lin.args[0], lin.args[1], None, scale), lin)
        lin.replace_all_uses_with(quant)
        b.erase(lin)
    d = diff_graphs(_sliced(a), _sliced(b))
    assert [(c.kind, c.before, c.after) for c in d.changes] == [("replaced", ("torch_linear_simple",), ("torch_quant_fp8_linear",))]
    assert len(d.changes[0].regions) == len(linears) and d.matched == d.nodes_a


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arch=st.sampled_from(("llama", "qwen3_moe", "nemotron_h", "qwen3_next", "deepseek_v3", "eager")),
       seed=st.integers(0, 10_000), pick=st.randoms(use_true_random=False), add=st.booleans())
def test_one_random_op_added_or_removed_is_that_change(arch, seed, pick: random.Random, add: bool):
    """An op added after any op of a layer (a scale of its result), or any one-input op of a layer
    removed (its users read its input): the diff has that one change, of that op, placed where the
    slicer placed it (an op on a layer's boundary may go to either side)."""
    a, b = _copies(arch, 3, seed)
    if add:
        x = pick.choice([n for n in b.nodes if n.kind == OP and n.meta.get("true_layer") is not None and n.users
                         and not n.is_multi_output])
        users = list(x.users)
        new = _op(b, users[0], "aten.mul.Scalar", (x, 0.5), x)
        for u in users:
            u.args = tuple(new if v is x else v for v in u.args)
    else:
        x = pick.choice([n for n in b.nodes if n.kind == OP and n.meta.get("true_layer") is not None and n.users
                         and len(n.inputs) == 1 and isinstance(n.inputs[0], Node) and n.inputs[0].kind == OP])
        x.replace_all_uses_with(x.inputs[0])
        b.erase(x)
    b.verify()
    d = diff_graphs(_sliced(a), _sliced(b))
    (change,) = d.changes
    (region,) = change.regions
    if add:
        assert (change.kind, region.a, region.b) == ("added", [], [new])
        assert region.where == new.meta["region"]
    else:
        assert (change.kind, [n.meta["born"] for n in region.a], region.b) == ("removed", [x.meta["born"]], [])
        assert region.where == region.a[0].meta["region"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arch=st.sampled_from(("llama", "qwen3_moe", "nemotron_h", "qwen3_next", "deepseek_v3", "eager")),
       seed=st.integers(0, 10_000), pick=st.randoms(use_true_random=False), swap=st.booleans())
def test_an_op_kept_with_other_inputs_or_constants_is_that_change(arch, seed, pick: random.Random, swap: bool):
    """An op that keeps its kind but reads its two inputs the other way round (``rewired``), or
    one of its numeric constants plus one (``constants``): that one change, at that op; matching
    the nodes right is not enough, what a kept node reads must be compared too."""
    a, b = _copies(arch, 3, seed)
    ops = [n for n in b.nodes if n.kind == OP and n.meta.get("true_layer") is not None and n.users]
    if swap:
        ops = [n for n in ops if len([v for v in n.args if isinstance(v, Node)]) >= 2
               and len({id(v) for v in n.args if isinstance(v, Node)}) >= 2]
    else:
        ops = [n for n in ops if any(isinstance(v, (int, float)) and not isinstance(v, bool) for v in n.args)]
    x = pick.choice(ops)
    args = list(x.args)
    if swap:
        i, j = [k for k, v in enumerate(args) if isinstance(v, Node)][:2]
        if args[i] is args[j]:
            return
        args[i], args[j] = args[j], args[i]
    else:
        i = next(k for k, v in enumerate(args) if isinstance(v, (int, float)) and not isinstance(v, bool))
        args[i] = args[i] + 1
    x.args = tuple(args)
    d = diff_graphs(_sliced(a), _sliced(b))
    (change,) = d.changes
    (region,) = change.regions
    assert change.kind == ("rewired" if swap else "constants") and region.b == [x] and region.a[0].meta["born"] == x.meta["born"]
    assert region.detail


# -- two real stages --------------------------------------------------------------------------------
def test_deepseek_v3_before_and_after_fusion():
    layers = 5  # 3 dense layers, then MoE
    a = _sliced(generate("deepseek_v3_prefusion", layers, seed=1).main_graph())
    b = _sliced(generate("deepseek_v3", layers, seed=2, shuffle=True).main_graph())
    d = diff_graphs(a, b)
    by = {(c.kind, c.before, c.after): c for c in d.changes}
    swiglu = by[("fused", ("add", "mul", "silu", "torch_linear_simple", "torch_linear_simple", "torch_linear_simple"),
                 ("fused_swiglu_mlp",))]
    assert swiglu.layers == [0, 1, 2]  # the dense layers' MLPs, each fused into one op
    assert by[("replaced", ("torch_rmsnorm",), ("flashinfer_rms_norm",))].layers == list(range(layers))
    removed_moe = [c for c in d.changes if "torch_moe" in c.before]
    added_moe = [c for c in d.changes if "trtllm_moe_fused" in c.after]
    assert [c.layers for c in removed_moe] == [c.layers for c in added_moe] == [[3, 4]]
    assert any("flashinfer_mla_with_cache" in c.after and "torch_mla" in c.before for c in d.changes)
    # an op matched through its weights shares them with its counterpart (all of them where it
    # kept its op; the down projection fused with gate and up kept one of its three)
    for x, y in d.matching.ab.items():
        if x.kind == OP and x.weights and y.weights:
            wx, wy = {w.name for w in x.weights}, {w.name for w in y.weights}
            assert wx == wy if op_key(x) == op_key(y) else wx & wy
    doc = to_dict(d)
    assert doc["ops"]["matched"] == d.matched and len(doc["changes"]) == len(d.changes)
    assert d.inputs_added and not d.inputs_removed  # the KV caches and the attention metadata
