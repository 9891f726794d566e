"""Layer slicing and grouping: invariants on generated decoder stacks (random mixes of blocks,
random names, random topological orders), and the layer document's schema."""

from __future__ import annotations

import re
from dataclasses import replace
from collections import Counter

import jsonschema
from hypothesis import given, settings
from hypothesis import strategies as st

from layerc.backends.layer_json import layer_document, schema
from layerc.ir.graph import OP
from layerc.ir.targets import op_name
from layerc.passes.pipeline import run_passes
from layerc.passes.base import Context
from layerc.passes.groups import InferGroups
from layerc.passes.slicing import extract_layer
from layerc.backends.synth.dump import generate
from layerc.testing import DumpSpec, dump_specs, sliced_dump, slicing_violations

def _sliced(spec: DumpSpec, **extra):
    return sliced_dump(replace(spec, **extra).build())


def _partition(graph) -> dict[int, set]:
    slices: dict[int, set] = {}
    for n in graph.nodes:
        if n.kind == OP and n.meta["layer"] is not None:
            slices.setdefault(n.meta["layer"], set()).add(n)
    return slices


@settings(max_examples=40)
@given(dump_specs())
def test_slicing_invariants(spec):
    g = _sliced(spec)
    assert slicing_violations(g) == []  # disjoint, weights, seeds, roles, and the generator's truth
    # The layer documents: valid, and every edge ends at a node or an external input.
    for layer in _partition(g):
        lg = extract_layer(g, layer)
        InferGroups().apply(Context(), _one(lg))
        doc = layer_document(lg, "dump.txt")
        jsonschema.validate(doc, schema())
        ids = {x["id"] for x in doc["nodes"]} | {x["id"] for x in doc["external_inputs"]}
        assert all(e["from"] in ids and e["to"] in ids for e in doc["edges"])
        lg.verify()


def test_the_invariants_catch_a_wrong_slicing():
    g = _sliced(DumpSpec("llama", 3))
    victim = next(n for n in g.nodes if n.kind == OP and n.meta["layer_role"] == "seed" and n.meta["layer"] == 1)
    victim.meta["layer"] = 2
    found = slicing_violations(g)
    assert any(victim.name in v and "reads a weight of layer(s) [1]" in v for v in found)
    assert any(victim.name in v and "its true layer is 1" in v for v in found)


def _one(graph):
    from layerc.ir.graph import Module

    return Module(graphs=[graph])


@settings(max_examples=15)
@given(dump_specs(), st.integers(1, 1000))
def test_slicing_ignores_names_and_order(spec, seed):
    spec = replace(spec, seed=None, shuffle=False)
    plain = _sliced(spec)
    mixed = _sliced(spec, seed=seed, shuffle=True)

    def summary(g):
        return Counter((n.meta["layer"], n.target, n.type) for n in g.nodes if n.kind == OP)

    assert summary(plain) == summary(mixed)


def _wl_hash(graph, rounds: int = 4) -> Counter:
    """Weisfeiler–Lehman labels of a layer graph: equal multisets for isomorphic layers."""
    def strip(text: str) -> str:
        return re.sub(r"\d+", "#", text)

    label = {}
    for n in graph.nodes:
        label[n] = f"in:{n.type}" if n.kind == "placeholder" else f"{n.kind}:{op_name(n.target or '')}:{n.type}"
    for w in graph.weights.values():
        label[w] = "w:" + strip(w.name) + str(w.type)
    for _ in range(rounds):
        new = {}
        for v in label:
            ins = sorted(label[x] for x in getattr(v, "inputs", ()))
            outs = sorted(label[u] for u in v.users if u in label)
            new[v] = str(hash((label[v], tuple(ins), tuple(outs))))
        label = new
    return Counter(label.values())


# (arch, first layer of the homogeneous run). In a fused stack the first layer differs: its input
# norm has no residual add to fuse, so the comparison starts at layer 1, as the issue says.
HOMOGENEOUS = [("llama", 0), ("qwen3_moe", 1), ("deepseek_v3", 4)]


@settings(max_examples=10)
@given(st.sampled_from(HOMOGENEOUS), st.integers(2, 5), st.integers(0, 1000))
def test_homogeneous_stack_slices_are_isomorphic(arch_first, extra, seed):
    arch, first = arch_first
    g = _sliced(DumpSpec(arch, max(first, 1) + extra), seed=seed, shuffle=True)
    reference = _wl_hash(extract_layer(g, max(first, 1)))
    for layer in range(first, max(first, 1) + extra):
        assert _wl_hash(extract_layer(g, layer)) == reference, layer


def test_deepseek_layer_groups():
    m = generate("deepseek_v3", layers=6)
    from layerc.passes.slicing import SliceLayer

    run_passes([SliceLayer(layer=5)], m)
    InferGroups().apply(Context(), m)
    doc = layer_document(m.graphs[0], "085_compile_compile_model.txt")
    by_op = {}
    for n in doc["nodes"]:
        by_op.setdefault(op_name(n["op"]), set()).add((n["group"], n.get("sub_group")))
    assert by_op["flashinfer_mla_with_cache"] == {("mla", None)}
    assert by_op["triton_rope_on_interleaved_qk_inputs"] == {("mla", "rope")}
    assert by_op["noaux_tc_op"] == {("moe", "moe_router")}
    assert by_op["dsv3_router_gemm_op"] == {("moe", "moe_router")}
    assert by_op["trtllm_moe_fused"] == {("moe", "moe_experts")}
    assert {"floor_divide", "eq", "sub"} <= {k for k, v in by_op.items() if ("moe", "moe_router") in v}
    assert by_op["silu"] == {("mlp", "shared_experts")}
    assert ("norm", None) in by_op["trtllm_fused_allreduce_residual_rmsnorm"]
    q = {n["id"] for n in doc["nodes"] if n.get("sub_group") == "q_branch"}
    kv = {n["id"] for n in doc["nodes"] if n.get("sub_group") == "kv_branch"}
    weights = {w["name"] for n in doc["nodes"] if n["id"] in q for w in n["weight_inputs"]}
    assert any("q_a_proj" in w for w in weights) and any("q_b_proj" in w for w in weights)
    weights = {w["name"] for n in doc["nodes"] if n["id"] in kv for w in n["weight_inputs"]}
    assert any("kv_a_proj_with_mqa" in w for w in weights)
    aux = Counter(n.get("aux_stream") for n in doc["nodes"] if n.get("aux_stream"))
    assert len(aux) == 2  # the kv branch and the shared experts run on the aux stream
    labels = {e["label"] for e in doc["external_inputs"]}
    assert {"Layer 4 residual output", "KV cache", "batch metadata"} <= labels
    assert doc["layer"] == 5 and doc["source_file"] == "085_compile_compile_model.txt"
