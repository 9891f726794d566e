"""``layerc.backends.layer_dot``: the layer diagram (DOT via pydot, PNG/SVG via Graphviz).

Layer documents come from the dump generator's ground truth (``meta["true_layer"]``) and a
deliberately SIMPLE grouping heuristic below (``layer_doc``); the real ``infer-groups`` pass is
written elsewhere and can replace ``_assign_groups`` later.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import xml.etree.ElementTree as ET
from collections import Counter

import pydot
import pytest

from tests.conftest import TESTS
from layerc.backends import layer_dot
from layerc.ir.diagnostics import LayercError
from layerc.ir.graph import OP, PLACEHOLDER, Node
from layerc.ir.targets import op_name
from layerc.ir.types import TupleType
from layerc.backends.synth.dump import generate

GOLDEN = TESTS / "golden" / "layer_dot"
HAVE_DOT = shutil.which("dot") is not None
needs_dot = pytest.mark.skipif(not HAVE_DOT, reason="Graphviz 'dot' is not installed")


# =============================================================================================
# Test data: a layer document (seed 000's JSON schema) from a generated dump
# =============================================================================================
def _shape(t) -> str:
    if isinstance(t, TupleType):
        return "(" + ", ".join(e.shape_text() for e in t.elements) + ")"
    return t.shape_text()


def _dtype(t) -> str:
    if isinstance(t, TupleType):
        return "(" + ", ".join(e.dtype_text() for e in t.elements) + ")"
    return t.dtype_text()


def _weight_group(names: list[str]) -> tuple[str, str | None] | None:
    """(group, sub_group) from the weights an op reads; None when they say nothing."""
    for w in names:
        if re.search(r"input_layernorm|post_attention_layernorm|layers_\d+_norm_weight$", w):
            return "norm", None
        if "shared_expert" in w:
            return "mlp", "shared_experts"
        if w.startswith("fused_moe_"):
            return "moe", "moe_experts"
        if re.search(r"(mlp|mixer)_gate_(weight|e_score_correction_bias)$", w):
            return "moe", "moe_router"
        if "self_attn" in w or re.search(r"mixer_[qkvo]_proj", w):
            if re.search(r"q_a_proj|q_b_proj|q_a_layernorm", w):
                return "attention", "q_branch"
            if re.search(r"kv_a_proj|kv_a_layernorm", w):
                return "attention", "kv_branch"
            return "attention", None
        if "linear_attn" in w:
            return "gdn", None
        if "_mixer_" in w:
            return "mamba", None
        if re.search(r"layers_\d+_mlp_", w):
            return "mlp", None
    return None


def _op_group(name: str) -> tuple[str, str | None] | None:
    if "rope" in name:
        return "attention", "rope"
    if "mla" in name or "mha_with_cache" in name:
        return "attention", None
    if name in ("noaux_tc_op", "dsv3_router_gemm_op", "triton_fused_topk_softmax"):
        return "moe", "moe_router"
    if "moe" in name:
        return "moe", "moe_experts"
    if "swiglu" in name:
        return "mlp", None
    if "delta_rule" in name:
        return "gdn", None
    if "ssm" in name:
        return "mamba", None
    return None


def _vote(pairs: list[tuple[str, str | None]]) -> tuple[str, str | None] | None:
    pairs = [p for p in pairs if p and p[0] not in ("norm", "other")]
    if not pairs:
        return None
    group = Counter(p[0] for p in pairs).most_common(1)[0][0]
    subs = {p[1] for p in pairs}
    return group, (subs.pop() if len(subs) == 1 else None)


def _assign_groups(ops: list[Node]) -> dict[Node, tuple[str, str | None]]:
    """Weights, then op names, then neighbours (producers forward, consumers backward)."""
    inside = set(ops)
    got: dict[Node, tuple[str, str | None]] = {}
    for n in ops:
        hit = _weight_group([w.name for w in n.weights]) or _op_group(op_name(n.target))
        if hit:
            got[n] = hit
    for n in ops:
        if n not in got:
            hit = _vote([got.get(v) for v in n.inputs if v in inside])
            if hit:
                got[n] = hit
    for n in reversed(ops):
        if n not in got:
            hit = _vote([got.get(u) for u in n.users if u in inside])
            if hit:
                got[n] = hit
    if any(op_name(n.target).find("mla") >= 0 for n in ops):
        got = {n: ("mla" if g == "attention" else g, s) for n, (g, s) in got.items()}
    return {n: got.get(n, ("other", None)) for n in ops}


def _aux_regions(ops: list[Node]) -> dict[Node, str]:
    """Nodes on paths from each ``begin_aux_stream`` node to the ``end_aux_stream`` it reaches."""
    inside = set(ops)
    out: dict[Node, str] = {}
    for begin in ops:
        if op_name(begin.target) != "begin_aux_stream_passthrough":
            continue
        fwd, ends, todo = {begin}, [], [begin]
        while todo:
            for u in todo.pop().users:
                if u in inside and u not in fwd and op_name(u.target) != "begin_aux_stream_passthrough":
                    fwd.add(u)
                    if op_name(u.target) == "end_aux_stream_passthrough":
                        ends.append(u)
                    else:
                        todo.append(u)
        back, todo = set(ends), list(ends)
        while todo:
            for v in todo.pop().inputs:
                if v in fwd and v not in back:
                    back.add(v)
                    todo.append(v)
        for n in back:
            out.setdefault(n, begin.name)
    return out


#: Fake trace kernels (seed 000's mapping table), durations in µs.
_KERNELS = {
    "flashinfer_mla_with_cache": [("fmhaSm100fKernel_QkvE4m3OBfloat16HQk576", 50.1)],
    "torch_linear_simple": [("nvjet_gemm_tst_64x8_64x16", 6.2), ("splitKreduce_kernel", 1.4)],
    "flashinfer_rms_norm": [("rms_norm_reduce_fusion", 2.1)],
    "trtllm_moe_fused": [("bmm_E4m3_E4m3E4m3_Fp32_t128x8x128", 21.7), ("moe_activation_deepseek", 3.3),
                         ("bmm_Bfloat16_E4m3E4m3_Fp32_t128x8x128", 18.9), ("moe_finalize", 4.0)],
    "noaux_tc_op": [("deepseek_v3_topk", 3.6)],
    "trtllm_dist_all_reduce": [("nccl_allreduce_symk", 11.8)],
    "triton_rope_on_interleaved_qk_inputs": [("mla_rope_assign_qkv", 2.7)],
    "trtllm_fused_allreduce_residual_rmsnorm": [("allreduce_fusion_kernel_oneshot_lamport", 9.5)],
}


def layer_doc(arch: str = "deepseek_v3", layer: int = 5, layers: int = 6, kernels: bool = False,
              span: int = 1) -> dict:
    """The layer document of ``layer`` (or of ``span`` consecutive layers ending there) of a
    generated ``arch`` dump, built from the generator's ``true_layer``."""
    graph = generate(arch, layers=layers).main_graph()
    want = set(range(layer - span + 1, layer + 1))
    ops = [n for n in graph.nodes if n.kind == OP and n.meta.get("true_layer") in want]
    inside = set(ops)
    groups, aux = _assign_groups(ops), _aux_regions(ops)
    nodes, edges, externals = [], [], {}
    for n in ops:
        inputs = [v for v in n.inputs if isinstance(v, Node)]
        node = {
            "id": n.name, "op": n.target, "shape": _shape(n.type), "dtype": _dtype(n.type),
            "group": groups[n][0],
            **({"sub_group": groups[n][1]} if groups[n][1] else {}),
            "inputs": [v.name for v in inputs],
            "weight_inputs": [{"name": w.name, "shape": w.type.shape_text(), "dtype": w.type.dtype_text()}
                              for w in n.weights],
        }
        if n in aux:
            node["aux_stream"] = aux[n]
        if kernels and op_name(n.target) in _KERNELS:
            node["trace_kernels"] = [{"kernel": k, "duration_us": d} for k, d in _KERNELS[op_name(n.target)]]
        nodes.append(node)
        for v in inputs:
            edges.append({"from": v.name, "to": n.name})
            if v not in inside and v.name not in externals:
                src = v.meta.get("true_layer")
                if v.kind == PLACEHOLDER:
                    label = v.name
                elif src is None:
                    label = "Shared metadata"
                else:
                    label = f"Layer {src} output"
                externals[v.name] = {"id": v.name, "label": label, "shape": _shape(v.type)}
    doc = {"layer": layer, "source_file": "085_compile_compile_model.txt", "nodes": nodes, "edges": edges,
           "external_inputs": list(externals.values())}
    if kernels:
        ks = [k for n in nodes for k in n.get("trace_kernels", [])]
        doc["trace_summary"] = {"total_duration_us": round(sum(k["duration_us"] for k in ks), 1),
                                "kernel_count": len(ks), "num_streams": 2}
    return json.loads(json.dumps(doc))  # plain JSON data, as read from the file


# =============================================================================================
# A small hand-written document (golden DOT)
# =============================================================================================
def small_doc() -> dict:
    return {
        "layer": 5,
        "source_file": "085_compile_compile_model.txt",
        "nodes": [
            {"id": "rms_norm_5", "op": "auto_deploy.flashinfer_rms_norm.default", "shape": "8x7168",
             "dtype": "torch.bfloat16", "group": "norm", "inputs": ["residual_4"],
             "weight_inputs": [{"name": "model_layers_5_input_layernorm_weight", "shape": "7168",
                                "dtype": "torch.bfloat16"}],
             "trace_kernels": [{"kernel": "rms_norm_reduce_fusion", "duration_us": 2.06}]},
            {"id": "begin_aux_stream_passthrough_5", "op": "<function begin_aux_stream_passthrough at 0x7f2a1c0b3d90>",
             "shape": "8x7168", "dtype": "torch.bfloat16", "group": "mla", "sub_group": "kv_branch",
             "inputs": ["rms_norm_5"], "weight_inputs": [], "aux_stream": "begin_aux_stream_passthrough_5"},
            {"id": "linear_kv", "op": "auto_deploy.torch_linear_simple.default", "shape": "8x576",
             "dtype": "torch.bfloat16", "group": "mla", "sub_group": "kv_branch",
             "inputs": ["begin_aux_stream_passthrough_5"], "aux_stream": "begin_aux_stream_passthrough_5",
             "weight_inputs": [{"name": "model_layers_5_self_attn_kv_a_proj_with_mqa_weight", "shape": "576x7168",
                                "dtype": "torch.bfloat16"}]},
            {"id": "linear_q", "op": "auto_deploy.torch_linear_simple.default", "shape": "8x24576",
             "dtype": "torch.bfloat16", "group": "mla", "sub_group": "q_branch", "inputs": ["rms_norm_5"],
             "weight_inputs": [{"name": "model_layers_5_self_attn_q_b_proj_weight", "shape": "24576x1536",
                                "dtype": "torch.bfloat16"}],
             "trace_kernels": [{"kernel": "nvjet_gemm", "duration_us": 12.34}]},
            {"id": "mla_5", "op": "auto_deploy.flashinfer_mla_with_cache.default", "shape": "8x128x128",
             "dtype": "torch.bfloat16", "group": "mla", "inputs": ["linear_q", "linear_kv", "cache_5"],
             "weight_inputs": []},
            {"id": "getitem_7", "op": "<built-in function getitem>", "shape": "8x128x128", "dtype": "torch.bfloat16",
             "group": "other", "inputs": ["mla_5"], "weight_inputs": []},
            {"id": "router_5", "op": "trtllm.noaux_tc_op.default", "shape": "(8x8, 8x8)",
             "dtype": "(torch.float32, torch.int32)", "group": "moe", "sub_group": "moe_router",
             "inputs": ["getitem_7"],
             "weight_inputs": [{"name": "model_layers_5_mlp_gate_e_score_correction_bias", "shape": "256",
                                "dtype": "torch.float32"}]},
            {"id": "add_5", "op": "aten.add.Tensor", "shape": "8x7168", "dtype": "torch.bfloat16", "group": "moe",
             "inputs": ["router_5", "residual_4"], "weight_inputs": []},
        ],
        "edges": [
            {"from": "residual_4", "to": "rms_norm_5"},
            {"from": "rms_norm_5", "to": "begin_aux_stream_passthrough_5"},
            {"from": "begin_aux_stream_passthrough_5", "to": "linear_kv"},
            {"from": "rms_norm_5", "to": "linear_q"},
            {"from": "linear_q", "to": "mla_5"},
            {"from": "linear_kv", "to": "mla_5"},
            {"from": "linear_kv", "to": "mla_5"},  # a duplicate: drawn once
            {"from": "cache_5", "to": "mla_5"},
            {"from": "mla_5", "to": "getitem_7"},
            {"from": "getitem_7", "to": "router_5"},
            {"from": "router_5", "to": "add_5"},
            {"from": "residual_4", "to": "add_5"},
        ],
        "external_inputs": [
            {"id": "residual_4", "label": "Layer 4 residual output", "shape": "8x7168"},
            {"id": "cache_5", "label": "KV cache <r5> & \"ckv\"", "shape": "1024x64x512"},
        ],
        "trace_summary": {"total_duration_us": 14.4, "kernel_count": 2, "num_streams": 1},
    }


def _all_nodes(g) -> dict[str, pydot.Node]:
    """Every node statement (not the ``node [...]`` defaults), subgraphs included."""
    out = {n.get_name(): n for n in g.get_nodes() if n.get_name() not in ("node", "edge", "graph")}
    for sg in g.get_subgraphs():
        out.update(_all_nodes(sg))
    return out


def _all_edges(g) -> list[tuple[str, str]]:
    """Every visible edge (the Inputs grid is stacked with invisible ones)."""
    out = [(e.get_source(), e.get_destination()) for e in g.get_edges() if e.get("style") != "invis"]
    for sg in g.get_subgraphs():
        out += _all_edges(sg)
    return out


def _clusters(g, parent: str | None = None) -> dict[str, tuple[str | None, pydot.Subgraph]]:
    out = {}
    for sg in g.get_subgraphs():
        out[sg.get_name()] = (parent, sg)
        out.update(_clusters(sg, sg.get_name()))
    return out


def _where(g) -> dict[str, str | None]:
    """node name → name of the innermost cluster holding it (None at top level)."""
    out = {n.get_name(): None for n in g.get_nodes()}
    for name, (parent, sg) in _clusters(g).items():
        for n in sg.get_nodes():  # a rank=same row is not a cluster: its nodes are in the parent
            out[n.get_name()] = name if name.startswith("cluster") else parent
    return out


# =============================================================================================
# Tests
# =============================================================================================
def test_small_doc_matches_golden():
    text = layer_dot.dot_text(small_doc())
    path = GOLDEN / "small.dot"
    if os.environ.get("LAYERC_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8")


def test_small_doc_structure():
    g = layer_dot.to_dot(small_doc())
    assert g.get_type() == "digraph"
    for key, want in (("rankdir", "TB"), ("newrank", "true"), ("compound", "true"), ("fontname", "Helvetica")):
        assert g.get(key) == want
    where = _where(g)
    # the norm feeds only attention nodes: it is drawn inside the attention cluster
    assert where["rms_norm_5"] == "cluster_attn"
    assert where["linear_q"] == "cluster_attn_q_branch"
    assert where["linear_kv"] == "cluster_attn_kv_branch_aux0"
    clusters = _clusters(g)
    assert clusters["cluster_attn_kv_branch_aux0"][0] == "cluster_attn_aux0"
    assert clusters["cluster_attn_aux0"][0] == "cluster_attn"
    assert where["router_5"] == "cluster_ffn_moe_router"
    assert where["getitem_7"] is None  # "other" between attention and FFN: outside both
    assert where["add_5"] == "cluster_ffn"
    assert where["residual_4"] == where["cache_5"] == "cluster_inputs"
    # duplicate edges are drawn once
    assert _all_edges(g).count(("linear_kv", "mla_5")) == 1


#: pydot's DOT parser (pyparsing 3.3) warns about its own deprecated calls.
parses_dot = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@parses_dot
def test_html_special_text_is_escaped():
    text = layer_dot.dot_text(small_doc())
    # op targets appear only inside quoted tooltips, never as raw HTML in a label
    assert text.count("<built-in function getitem>") == 1
    assert text.count("<function begin_aux_stream_passthrough") == 1
    assert "&lt;r5&gt; &amp; &quot;ckv&quot;" in text  # external input label
    # tooltips that look like HTML (``<built-in function getitem>``) are quoted strings, not HTML
    assert re.search(r'tooltip="getitem_7\\n<built-in function getitem>"', text)
    doc = small_doc()
    doc["nodes"][5]["op"] = "<weird & op \"x\">"
    doc["nodes"][5]["trace_kernels"] = [{"kernel": "k<T>&", "duration_us": 1}]
    text = layer_dot.dot_text(doc)
    assert "&lt;weird &amp; op &quot;x&quot;&gt;" in text and "k&lt;T&gt;&amp;" in text
    parsed = pydot.graph_from_dot_data(text)
    assert parsed and "getitem_7" in _all_nodes(parsed[0])


def test_odd_ids_get_safe_dot_names():
    doc = small_doc()
    doc["external_inputs"][1]["id"] = "node"  # a DOT keyword
    doc["edges"][7]["from"] = "node"
    doc["nodes"][4]["inputs"][2] = "node"
    doc["nodes"][0]["id"] = "a:b c"  # a port separator and a space
    for e in doc["edges"]:
        for k in ("from", "to"):
            if e[k] == "rms_norm_5":
                e[k] = "a:b c"
    nodes = _all_nodes(layer_dot.to_dot(doc))
    assert "n_node" in nodes and "n_a_b_c" in nodes
    assert len(nodes) == len(doc["nodes"]) + len(doc["external_inputs"])


def test_bad_documents_raise():
    doc = small_doc()
    doc["edges"].append({"from": "nowhere", "to": "add_5"})
    with pytest.raises(LayercError, match="unknown node"):
        layer_dot.to_dot(doc)
    doc = small_doc()
    doc["nodes"].append(dict(doc["nodes"][0]))
    with pytest.raises(LayercError, match="duplicate"):
        layer_dot.to_dot(doc)


def test_labels():
    assert layer_dot.short_weight("model_layers_5_self_attn_q_a_proj_weight") == "self_attn_q_a_proj"
    assert layer_dot.short_weight("backbone_layers_12_mixer_conv1d_bias") == "mixer_conv1d"
    assert layer_dot.short_weight("layers_3_mlp_gate_weight") == "mlp_gate"
    assert layer_dot.short_weight("model_norm_weight") == "norm"
    assert layer_dot.pretty_shape("7168x2048") == "7168×2048"
    assert layer_dot.pretty_shape("(8x8, 8x8)") == "(8×8, 8×8)"
    assert layer_dot.pretty_shape("s70*s72x7168") == "s70*s72×7168"
    assert layer_dot.friendly("<built-in function getitem>") == "GetItem"
    assert layer_dot.friendly("auto_deploy.mlir_fused_19c9086ffd4685b8") == "Fused Kernel"
    assert layer_dot.friendly("aten.frobnicate.default") == "frobnicate"
    text = layer_dot.dot_text(small_doc())
    assert "<B>Linear</B> (self_attn_q_b_proj)" in text and "W[24576×1536]" in text
    assert "O[8×24576] bf16" in text and "O[8×8, 8×8] (f32, i32)" in text


@pytest.fixture(scope="module")
def dsv3_doc() -> dict:
    return layer_doc("deepseek_v3", 5, kernels=True)


@parses_dot
def test_every_node_and_edge_is_drawn(dsv3_doc):
    text = layer_dot.dot_text(dsv3_doc)
    g = pydot.graph_from_dot_data(text)[0]  # the text parses back
    nodes = _all_nodes(g)
    ids = [n["id"] for n in dsv3_doc["nodes"]] + [x["id"] for x in dsv3_doc["external_inputs"]]
    assert set(ids) <= set(nodes)
    edges = _all_edges(g)
    want = {(e["from"], e["to"]) for e in dsv3_doc["edges"]}
    assert set(edges) == want and len(edges) == len(want)


def test_clusters_per_group_and_inputs(dsv3_doc):
    g = layer_dot.to_dot(dsv3_doc)
    clusters = _clusters(g)
    titles = {name: sg.get("label") for name, (_, sg) in clusters.items()}
    assert "Self-Attention (MLA)" in titles["cluster_attn"]
    assert "FFN (MoE + Shared Experts)" in titles["cluster_ffn"]
    for sub in ("q_branch", "rope", "moe_router", "moe_experts"):
        assert any(name.endswith(sub) or f"_{sub}_aux" in name for name in clusters), sub
    assert sum(1 for (_, sg) in clusters.values() if sg.get("label") == "Aux Stream") == 2
    where = _where(g)
    for x in dsv3_doc["external_inputs"]:
        assert where[x["id"]] == "cluster_inputs"
    by_group = {n["id"]: n["group"] for n in dsv3_doc["nodes"]}
    for nid, grp in by_group.items():
        top = where[nid]
        if grp == "mla":
            assert top and top.startswith("cluster_attn"), nid
        elif grp in ("moe", "mlp"):
            assert top and top.startswith("cluster_ffn"), nid


def test_kernel_lines(dsv3_doc):
    text = layer_dot.dot_text(dsv3_doc)
    assert "⚡ fmhaSm100fKernel_QkvE4m3OBfloat16HQk576 (50.1µs)" in text
    n_kernels = sum(len(n.get("trace_kernels", [])) for n in dsv3_doc["nodes"])
    assert text.count("⚡") == n_kernels + 1  # + the trace summary in the title
    plain = layer_dot.dot_text(layer_doc("deepseek_v3", 5, kernels=False))
    assert "⚡" not in plain


@pytest.mark.parametrize("arch,layer,cluster", [
    ("llama", 5, "cluster_attn"), ("qwen3_moe", 5, "cluster_ffn"), ("nemotron_h", 4, "cluster_mamba"),
    ("nemotron_h", 3, "cluster_ffn"), ("qwen3_next", 4, "cluster_gdn"), ("qwen3_next", 3, "cluster_attn"),
])
def test_other_architectures(arch, layer, cluster):
    doc = layer_doc(arch, layer, layers=6)
    g = layer_dot.to_dot(doc)
    assert cluster in _clusters(g)
    assert len(_all_nodes(g)) == len(doc["nodes"]) + len(doc["external_inputs"])
    assert set(_all_edges(g)) == {(e["from"], e["to"]) for e in doc["edges"]}


@needs_dot
def test_render_png_and_svg(dsv3_doc):
    png = layer_dot.render(dsv3_doc, "png")
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and png[12:16] == b"IHDR"
    svg = layer_dot.render(dsv3_doc, "svg")
    root = ET.fromstring(svg)
    assert root.tag.endswith("svg")
    assert "MLA Attention" in svg.decode() and "Aux Stream" in svg.decode()


@needs_dot
def test_render_errors(monkeypatch):
    with pytest.raises(LayercError, match="unsupported"):
        layer_dot.render(small_doc(), "pdf")
    monkeypatch.setattr(layer_dot, "dot_text", lambda doc: "digraph { a -> }")
    with pytest.raises(LayercError, match="failed"):
        layer_dot.render(small_doc(), "svg")


@needs_dot
def test_main_writes_dot_and_svg(tmp_path, capsys):
    src = tmp_path / "085_layer5.json"
    src.write_text(json.dumps(small_doc()), encoding="utf-8")
    assert layer_dot.main([str(src), "--format", "svg"]) == 0
    assert (tmp_path / "085_layer5.dot").read_text(encoding="utf-8") == layer_dot.dot_text(small_doc())
    assert ET.fromstring((tmp_path / "085_layer5.svg").read_bytes()).tag.endswith("svg")
    assert layer_dot.main([str(tmp_path / "missing.json")]) == 1
    assert "error" in capsys.readouterr().err


def test_render_without_dot(monkeypatch):
    from layerc.backends import graphviz

    monkeypatch.setattr(graphviz.shutil, "which", lambda name: None)
    with pytest.raises(LayercError, match="Graphviz 'dot' is not installed"):
        layer_dot.render(small_doc(), "png")
