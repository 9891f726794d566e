"""Draw one decoder layer (the ad-layer-visualizer layer JSON) as a Graphviz diagram.

Input is the layer document of the ``ad-layer-visualizer`` workflow (``{"layer", "source_file",
"nodes", "edges", "external_inputs", "trace_summary"?}``) as a Python dict. ``to_dot`` builds a
``pydot.Dot``; ``dot_text`` is its DOT text; ``render`` runs Graphviz ``dot`` on that text.

What is drawn (render_layer.py's picture, without its quirks):

* one box per node, coloured by the kind of op (attention, collectives, norms, linears, RoPE,
  activations, MoE, SSM/conv/GDN, views, adds), with an HTML-like label: friendly op name (and
  the short weight name of a linear), the node id, weight shapes ``W[7168×2048]``, the output
  ``O[8×7168]`` and one ``⚡ kernel (12.3µs)`` line per trace kernel;
* clusters per group (Self-Attention / FFN / Mamba / GDN), dashed sub-clusters per ``sub_group``,
  dotted "Aux Stream" clusters per ``aux_stream`` region, and a dashed "Inputs" cluster;
* norm (and ``other``) nodes join the cluster that every consumer of theirs is in, decided
  from edges alone, never from node-id substrings; sub-groups are drawn as given (no voting).

All DOT text comes from pydot; label text is XML-escaped here because pydot passes HTML-like
labels (``<...>``) through untouched.
"""

from __future__ import annotations

import hashlib
import html
import re
from collections import defaultdict
from typing import Any, Iterable

import pydot

from layerc.ir.diagnostics import LayercError
from layerc.ir.targets import op_name

__all__ = ["to_dot", "dot_text", "render", "friendly", "short_weight", "pretty_shape"]

FONT = "Helvetica"
#: dpi of PNG output: crisp at 100% zoom without making a 150-node layer enormous.
PNG_DPI = 120
#: a layer's PNG is at most this many pixels on its long side (a larger drawing is scaled down;
#: the SVG keeps full size, and the kernel labels are short, so a 200-node layer stays legible)
PNG_MAX_PX = 4000
RENDER_TIMEOUT_S = 120

# -- op styles ----------------------------------------------------------------------------------
# Colours as render_layer.py: lightcoral attention/MLA, lavender comm/getitem/aux markers,
# lightyellow norms/fused kernels, lightgreen linears, lightsalmon RoPE, wheat activations and
# SwiGLU, lightpink MoE/router, sky blue / cyan SSM, conv and GDN, white views, lightgray add.
ATTN, COMM, NORM, LINEAR = "lightcoral", "lavender", "lightyellow", "lightgreen"
ROPE, ACT, MOE = "lightsalmon", "wheat", "lightpink"
SSM, CONV, GDN, SSM_META = "lightskyblue", "lightcyan", "#81d4fa", "#b3e5fc"
VIEW, ADD, INPUT = "white", "lightgray", "lightblue"

#: Exact op names (``op_name(target)``) → (friendly name, fill colour, kind).
_EXACT: dict[str, tuple[str, str, str]] = {
    # attention
    "flashinfer_mla_with_cache": ("MLA Attention", ATTN, "attention"),
    "flashinfer_trtllm_mla_with_cache": ("MLA Attention", ATTN, "attention"),
    "trtllm_mla_with_cache": ("MLA Attention", ATTN, "attention"),
    "trtllm_mla_fused_rope_with_cache": ("MLA Attention (+RoPE)", ATTN, "attention"),
    "torch_cached_mla_with_cache": ("MLA Attention", ATTN, "attention"),
    "torch_mla": ("MLA Attention", ATTN, "attention"),
    "flashinfer_attention_mha_with_cache": ("Attention", ATTN, "attention"),
    "triton_paged_mha_with_cache": ("Attention", ATTN, "attention"),
    "triton_attention_flattened_mha_with_cache": ("Attention", ATTN, "attention"),
    "trtllm_attention_mha_with_cache": ("Attention", ATTN, "attention"),
    "torch_cached_attention_with_cache": ("Attention", ATTN, "attention"),
    "torch_attention": ("Attention", ATTN, "attention"),
    "torch_attention_sdpa": ("SDPA", ATTN, "attention"),
    "scaled_dot_product_attention": ("SDPA", ATTN, "attention"),
    # collectives, metadata, tuple plumbing, multi-stream markers
    "trtllm_dist_all_reduce": ("AllReduce", COMM, "comm"),
    "torch_dist_all_reduce": ("AllReduce", COMM, "comm"),
    "trtllm_dist_all_gather": ("AllGather", COMM, "comm"),
    "torch_dist_all_gather": ("AllGather", COMM, "comm"),
    "symm_mem_all_gather": ("AllGather (symm mem)", COMM, "comm"),
    "flashinfer_mla_prepare_metadata": ("Prepare MLA Metadata", COMM, "comm"),
    "flashinfer_attention_prepare_metadata": ("Prepare Attn Metadata", COMM, "comm"),
    "split_with_sizes": ("Split", COMM, "getitem"),
    "split": ("Split", COMM, "getitem"),
    "getitem": ("GetItem", COMM, "getitem"),
    "begin_aux_stream_passthrough": ("Begin Aux Stream", COMM, "aux"),
    "end_aux_stream_passthrough": ("End Aux Stream", COMM, "aux"),
    "wait_aux_stream_passthrough": ("Wait Aux Stream", COMM, "aux"),
    "record_event_passthrough": ("Record Event", COMM, "aux"),
    "record_event": ("Record Event", COMM, "aux"),
    "wait_event": ("Wait Event", COMM, "aux"),
    # norms and fused kernels
    "flashinfer_rms_norm": ("RMSNorm", NORM, "norm"),
    "torch_rmsnorm": ("RMSNorm", NORM, "norm"),
    "triton_rms_norm": ("RMSNorm", NORM, "norm"),
    "flashinfer_fused_add_rms_norm": ("Fused Add + RMSNorm", NORM, "norm"),
    "flashinfer_fused_add_rms_norm_inplace": ("Fused Add + RMSNorm", NORM, "norm"),
    "trtllm_fused_allreduce_residual_rmsnorm": ("AllReduce + Residual + RMSNorm", NORM, "norm"),
    "triton_rmsnorm_gated": ("Gated RMSNorm", NORM, "norm"),
    "torch_rmsnorm_gated": ("Gated RMSNorm", NORM, "norm"),
    "layer_norm": ("LayerNorm", NORM, "norm"),
    "cat": ("Concat", NORM, "other"),
    # linears
    "torch_linear_simple": ("Linear", LINEAR, "linear"),
    "linear": ("Linear", LINEAR, "linear"),
    "finegrained_fp8_linear": ("FP8 Linear", LINEAR, "linear"),
    "trtllm_finegrained_fp8_linear": ("FP8 Linear", LINEAR, "linear"),
    "torch_fake_quant_finegrained_fp8_linear": ("FP8 Linear", LINEAR, "linear"),
    "torch_quant_fp8_linear": ("FP8 Linear", LINEAR, "linear"),
    "torch_quant_nvfp4_linear": ("NVFP4 Linear", LINEAR, "linear"),
    "mm": ("MatMul", LINEAR, "linear"),
    "matmul": ("MatMul", LINEAR, "linear"),
    "bmm": ("Batched MatMul", LINEAR, "linear"),
    # RoPE
    "triton_rope_on_interleaved_qk_inputs": ("RoPE (interleaved QK)", ROPE, "rope"),
    "torch_rope_with_qk_interleaving": ("RoPE (interleaved QK)", ROPE, "rope"),
    "torch_rope_with_explicit_cos_sin": ("RoPE", ROPE, "rope"),
    "torch_rope_with_complex_freqs": ("RoPE", ROPE, "rope"),
    "flashinfer_rope": ("RoPE", ROPE, "rope"),
    "triton_rope_with_input_pos": ("RoPE", ROPE, "rope"),
    # activations / SwiGLU
    "fused_swiglu_mlp": ("Fused SwiGLU MLP", ACT, "mlp"),
    "fused_finegrained_fp8_swiglu_mlp": ("Fused FP8 SwiGLU MLP", ACT, "mlp"),
    "fused_nvfp4_swiglu_mlp": ("Fused NVFP4 SwiGLU MLP", ACT, "mlp"),
    "torch_swiglu_mlp": ("SwiGLU MLP", ACT, "mlp"),
    "silu": ("SiLU", ACT, "act"),
    "gelu": ("GELU", ACT, "act"),
    "relu": ("ReLU", ACT, "act"),
    # MoE and routing
    "trtllm_moe_fused": ("Fused MoE", MOE, "moe"),
    "triton_moe_fused": ("Fused MoE", MOE, "moe"),
    "torch_moe": ("MoE", MOE, "moe"),
    "quant_finegrained_fp8_moe_fused": ("Fused FP8 MoE", MOE, "moe"),
    "trtllm_quant_fp8_moe_fused": ("Fused FP8 MoE", MOE, "moe"),
    "trtllm_quant_nvfp4_moe_fused": ("Fused NVFP4 MoE", MOE, "moe"),
    "triton_mxfp4_moe": ("Fused MXFP4 MoE", MOE, "moe"),
    "noaux_tc_op": ("Top-K Routing", MOE, "router"),
    "dsv3_router_gemm_op": ("Router GEMM", MOE, "router"),
    "triton_fused_topk_softmax": ("Top-K Softmax Routing", MOE, "router"),
    "topk": ("Top-K", MOE, "router"),
    # SSM / conv / GDN
    "triton_cached_ssm": ("SSM Scan", SSM, "ssm"),
    "torch_cached_ssm": ("SSM Scan", SSM, "ssm"),
    "flashinfer_cached_ssm": ("SSM Scan", SSM, "ssm"),
    "cuda_cached_causal_conv1d": ("Causal Conv1d", CONV, "ssm"),
    "triton_cached_causal_conv1d": ("Causal Conv1d", CONV, "ssm"),
    "torch_cached_causal_conv1d": ("Causal Conv1d", CONV, "ssm"),
    "fla_cached_gated_delta_rule": ("Gated Delta Rule", GDN, "ssm"),
    "fla_cached_delta_rule": ("Delta Rule", GDN, "ssm"),
    "mamba_ssm_prepare_metadata": ("Prepare SSM Metadata", SSM_META, "ssm"),
    # cheap elementwise and layout ops
    "view": ("View", VIEW, "view"),
    "reshape": ("Reshape", VIEW, "view"),
    "_unsafe_view": ("View", VIEW, "view"),
    "t": ("Transpose", VIEW, "view"),
    "transpose": ("Transpose", VIEW, "view"),
    "permute": ("Permute", VIEW, "view"),
    "contiguous": ("Contiguous", VIEW, "view"),
    "to": ("Cast", VIEW, "view"),
    "_to_copy": ("Cast", VIEW, "view"),
    "sym_size": ("Sym Size", VIEW, "view"),
    "mul": ("Mul", VIEW, "elementwise"),
    "sub": ("Sub", VIEW, "elementwise"),
    "div": ("Div", VIEW, "elementwise"),
    "floordiv": ("FloorDiv", VIEW, "elementwise"),
    "floor_divide": ("FloorDiv", VIEW, "elementwise"),
    "eq": ("Eq", VIEW, "elementwise"),
    "add": ("Add", ADD, "add"),
    "sigmoid": ("Sigmoid", ACT, "act"),
    "softplus": ("Softplus", ACT, "act"),
    "softmax": ("Softmax", ACT, "act"),
    "exp": ("Exp", VIEW, "elementwise"),
    "neg": ("Neg", VIEW, "elementwise"),
    "pow": ("Pow", VIEW, "elementwise"),
    "clamp": ("Clamp", VIEW, "elementwise"),
    "index": ("Index", VIEW, "view"),
    "slice": ("Slice", VIEW, "view"),
    "select": ("Select", VIEW, "view"),
    "unsqueeze": ("Unsqueeze", VIEW, "view"),
    "squeeze": ("Squeeze", VIEW, "view"),
    "expand": ("Expand", VIEW, "view"),
    "embedding": ("Embedding", VIEW, "other"),
}

#: Substring rules for op names not listed above, tried in order.
_CONTAINS: tuple[tuple[str, tuple[str, str, str]], ...] = (
    ("mlir_fused", ("Fused Kernel", NORM, "norm")),
    ("allreduce_residual_rmsnorm", ("AllReduce + Residual + RMSNorm", NORM, "norm")),
    ("rmsnorm", ("RMSNorm", NORM, "norm")),
    ("rms_norm", ("RMSNorm", NORM, "norm")),
    ("mla", ("MLA Attention", ATTN, "attention")),
    ("mha_with_cache", ("Attention", ATTN, "attention")),
    ("attention", ("Attention", ATTN, "attention")),
    ("sdpa", ("SDPA", ATTN, "attention")),
    ("rope", ("RoPE", ROPE, "rope")),
    ("all_reduce", ("AllReduce", COMM, "comm")),
    ("allreduce", ("AllReduce", COMM, "comm")),
    ("all_gather", ("AllGather", COMM, "comm")),
    ("aux_stream", ("Aux Stream", COMM, "aux")),
    ("prepare_metadata", ("Prepare Metadata", COMM, "comm")),
    ("swiglu", ("SwiGLU MLP", ACT, "mlp")),
    ("moe", ("MoE", MOE, "moe")),
    ("router", ("Router", MOE, "router")),
    ("topk", ("Top-K", MOE, "router")),
    ("delta_rule", ("Delta Rule", GDN, "ssm")),
    ("ssm", ("SSM", SSM, "ssm")),
    ("conv1d", ("Causal Conv1d", CONV, "ssm")),
    ("linear", ("Linear", LINEAR, "linear")),
)


def style(op: str) -> tuple[str, str, str]:
    """(friendly name, fill colour, kind) of a full op target."""
    name = op_name(op) if op else "?"
    hit = _EXACT.get(name)
    if hit:
        return hit
    for key, hit in _CONTAINS:
        if key in name:
            return hit
    return name, VIEW, "other"


def friendly(op: str) -> str:
    """``auto_deploy.flashinfer_mla_with_cache.default`` → ``MLA Attention``; unknown ops keep their name."""
    return style(op)[0]


# -- text helpers -------------------------------------------------------------------------------
_WEIGHT_PREFIX = re.compile(r"^(?:model_layers_\d+_|backbone_layers_\d+_|layers_\d+_|model_)")
_WEIGHT_SUFFIX = re.compile(r"_(?:weight|bias)$")
_DTYPES = {
    "torch.bfloat16": "bf16", "torch.float16": "f16", "torch.float32": "f32", "torch.float64": "f64",
    "torch.int8": "i8", "torch.int16": "i16", "torch.int32": "i32", "torch.int64": "i64", "torch.uint8": "u8",
    "torch.bool": "bool", "torch.float8_e4m3fn": "fp8e4m3", "torch.float8_e5m2": "fp8e5m2",
}


def short_weight(name: str) -> str:
    """``model_layers_5_self_attn_q_a_proj_weight`` → ``self_attn_q_a_proj``."""
    return _WEIGHT_SUFFIX.sub("", _WEIGHT_PREFIX.sub("", name or "")) or (name or "")


def pretty_shape(shape) -> str:
    """``8x1x7168`` → ``8×1×7168``; ``(8x8, 8x8)`` → ``(8×8, 8×8)``; lists are joined."""
    if shape is None:
        return "?"
    if isinstance(shape, (list, tuple)):
        shape = "x".join(str(d) for d in shape)
    # An ``x`` between two dims: digits, symbols (s72) or closing brackets on the left.
    return re.sub(r"(?<=[\w\)\]])x(?=[\w\(\[])", "×", str(shape))


def short_dtype(dtype) -> str:
    if not dtype:
        return ""
    return re.sub(r"torch\.\w+", lambda m: _DTYPES.get(m.group(0), m.group(0)[len("torch."):]), str(dtype))


def _esc(text) -> str:
    """Text for an HTML-like label: ``<built-in function getitem>`` must not become markup."""
    return html.escape(str(text), quote=True)


def _plain(text: str) -> str:
    """A quoted-string attribute value (tooltips): a value shaped ``<...>`` would pass through
    pydot unquoted as an HTML string, so such values get a leading space; backslashes are doubled
    so Graphviz's escString reads them literally."""
    text = str(text).replace("\\", "\\\\")
    return " " + text if text.startswith("<") and text.endswith(">") else text


def _fmt_us(us) -> str:
    try:
        v = float(us)
    except (TypeError, ValueError):
        return "?µs"
    return f"{v:.1f}µs" if v < 1000 else f"{v / 1000:.2f}ms"


# -- DOT identifiers ----------------------------------------------------------------------------
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_KEYWORDS = frozenset({"graph", "digraph", "subgraph", "node", "edge", "strict"})


class _Ids:
    """Doc ids → DOT node ids. FX names pass through; anything else (ports ``a:b``, keywords,
    spaces, quotes) becomes a unique identifier, the original kept in the tooltip."""

    def __init__(self) -> None:
        self.map: dict[str, str] = {}
        self.used: set[str] = set()

    def add(self, doc_id: str) -> str:
        doc_id = str(doc_id)
        if doc_id in self.map:
            return self.map[doc_id]
        dot_id = doc_id
        if not _IDENT.match(dot_id) or dot_id.lower() in _KEYWORDS or dot_id in self.used:
            base = "n_" + (re.sub(r"\W+", "_", doc_id).strip("_") or "node")
            dot_id, k = base, 1
            while dot_id in self.used:
                k += 1
                dot_id = f"{base}_{k}"
        self.used.add(dot_id)
        self.map[doc_id] = dot_id
        return dot_id


# -- clusters -----------------------------------------------------------------------------------
#: group → (cluster key, fill colour). moe and mlp share the FFN cluster; attention and mla share one.
_GROUP_CLUSTER = {
    "attention": "attn", "mla": "attn", "moe": "ffn", "mlp": "ffn", "mamba": "mamba", "gdn": "gdn",
}
_CLUSTER_FILL = {"attn": "#f5f0f0", "ffn": "#fff3f0", "mamba": "#e8f4fd", "gdn": "#e1f5fe"}
_CLUSTER_PEN = {"attn": "#b07070", "ffn": "#c08080", "mamba": "#5b8db8", "gdn": "#4a90b8"}
_SUB_TITLES = {
    "q_branch": "Q Branch", "kv_branch": "KV Branch", "rope": "RoPE", "moe_router": "MoE Router",
    "moe_experts": "Routed Experts", "shared_experts": "Shared Experts",
}


def _cluster_title(key: str, groups: set[str]) -> str:
    if key == "attn":
        return "Self-Attention (MLA)" if "mla" in groups else "Self-Attention"
    if key == "ffn":
        if "moe" in groups:
            return "FFN (MoE + Shared Experts)" if "mlp" in groups or "shared_experts" in groups else "FFN (MoE)"
        return "FFN (MLP)"
    return {"mamba": "Mamba Mixer (SSM)", "gdn": "Linear Attention (GDN)"}.get(key, key)


def _sub_title(sub: str) -> str:
    if sub in _SUB_TITLES:
        return _SUB_TITLES[sub]
    for prefix, head in (("mamba_", "Mamba"), ("gdn_", "GDN")):
        if sub.startswith(prefix):
            return f"{head}: {sub[len(prefix):].replace('_', ' ')}"
    return sub.replace("_", " ").title()


def _dedupe(pairs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    return list(dict.fromkeys(pairs))


def _validate(doc: dict) -> None:
    if not isinstance(doc, dict):
        raise LayercError("a layer document is a JSON object")
    for key in ("nodes", "edges", "external_inputs"):
        if not isinstance(doc.get(key, []), list):
            raise LayercError(f"layer document: '{key}' must be a list")
    seen: set[str] = set()
    for i, n in enumerate(doc.get("nodes", [])):
        if not isinstance(n, dict) or "id" not in n:
            raise LayercError(f"layer document: node #{i} has no 'id'")
        if n["id"] in seen:
            raise LayercError(f"layer document: duplicate node id '{n['id']}'")
        seen.add(n["id"])
    for i, x in enumerate(doc.get("external_inputs", [])):
        if not isinstance(x, dict) or "id" not in x:
            raise LayercError(f"layer document: external input #{i} has no 'id'")
        if x["id"] in seen:
            raise LayercError(f"layer document: duplicate id '{x['id']}' (external input)")
        seen.add(x["id"])
    for e in doc.get("edges", []):
        for end in ("from", "to"):
            if not isinstance(e, dict) or not isinstance(e.get(end), (str, int)) or e[end] not in seen:
                raise LayercError(f"layer document: edge {e!r} names an unknown node in '{end}'")


# -- the drawing --------------------------------------------------------------------------------
def _node_label(n: dict) -> str:
    name, _, kind = style(n.get("op", ""))
    weights = [w for w in n.get("weight_inputs") or [] if isinstance(w, dict)]
    rows: list[str] = []
    title = f"<B>{_esc(name)}</B>"
    if kind == "linear" and len(weights) >= 1:
        title += f" ({_esc(short_weight(weights[0].get('name', '')))})"
    rows.append(title)
    rows.append(f'<FONT POINT-SIZE="8" COLOR="#555555">{_esc(n["id"])}</FONT>')
    if kind == "linear" and weights:
        shown = [f"W[{_esc(pretty_shape(weights[0].get('shape')))}]"] + [
            f"+ bias[{_esc(pretty_shape(w.get('shape')))}]" if str(w.get("name", "")).endswith("_bias")
            else f"+ {_esc(short_weight(w.get('name', '')))} W[{_esc(pretty_shape(w.get('shape')))}]"
            for w in weights[1:3]
        ]
    else:
        shown = [
            f"{_esc(short_weight(w.get('name', '')))} W[{_esc(pretty_shape(w.get('shape')))}]" for w in weights[:3]
        ]
    if len(weights) > 3:
        shown.append(f"… +{len(weights) - 3} more weights")
    for line in shown:
        rows.append(f'<FONT POINT-SIZE="9">{line}</FONT>')
    shape = pretty_shape(n.get("shape"))
    if shape.startswith("(") and shape.endswith(")"):  # a tuple: O[8×8, 8×8], not O[(8×8, 8×8)]
        shape = shape[1:-1]
    out = f"O[{_esc(shape)}]"
    dt = short_dtype(n.get("dtype"))
    if dt:
        out += f" {_esc(dt)}"
    rows.append(f'<FONT POINT-SIZE="9">{out}</FONT>')
    for k in n.get("trace_kernels") or []:
        if isinstance(k, dict) and not k.get("cpu_only"):  # a host-only op ran no kernel
            line = f'⚡ {_esc(kernel_label(k))} ({_fmt_us(k.get("duration_us"))})'
            rows.append(f'<FONT POINT-SIZE="9" COLOR="blue">{line}</FONT>')
    return _table(rows)


#: the longest kernel label a node shows; the full name is in the JSON and the SVG tooltip
KERNEL_LABEL = 48


def kernel_label(k: dict) -> str:
    """A kernel's label in a picture: its family (the tables' short name) when that is short; a
    long name (an unclassified C++ template, a hipBLASLt ``Cijk_...`` solution) is cut to its
    head, with a few characters of the full name's hash so that two kernels cut alike stay apart.
    """
    name = str(k.get("kernel") or "?")
    if len(name) <= KERNEL_LABEL:
        return name
    digest = hashlib.blake2s(str(k.get("full_name") or name).encode(), digest_size=2).hexdigest()
    return f"{name[: KERNEL_LABEL - 6]}…{digest}"


def _kernels_tooltip(n: dict) -> str:
    """The full names of a node's kernels, one per line (what the labels shorten)."""
    names = [str(k.get("full_name") or k.get("kernel") or "?") for k in n.get("trace_kernels") or []
             if isinstance(k, dict) and not k.get("cpu_only")]
    return "".join(f"\nkernel {x}" for x in names)


def _table(rows: list[str]) -> str:
    cells = "".join(f"<TR><TD>{r}</TD></TR>" for r in rows)
    return f'<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="1">{cells}</TABLE>>'


def _graph_label(doc: dict, n_nodes: int, n_edges: int) -> str:
    layer = doc.get("layer")
    head = f"Layer {layer}" if layer is not None else "Layer"
    rows = [f'<FONT POINT-SIZE="16"><B>{_esc(head)}</B></FONT>']
    sub = []
    if doc.get("source_file"):
        sub.append(str(doc["source_file"]))
    sub.append(f"{n_nodes} nodes, {n_edges} edges")
    rows.append(f'<FONT POINT-SIZE="10">{_esc(" · ".join(sub))}</FONT>')
    ts = doc.get("trace_summary")
    if isinstance(ts, dict) and ts:
        bits = []
        if "total_duration_us" in ts:
            bits.append(f"⚡ total {_fmt_us(ts['total_duration_us'])}")
        if "kernel_count" in ts:
            bits.append(f"{ts['kernel_count']} kernel{'' if ts['kernel_count'] == 1 else 's'}")
        if "num_streams" in ts:
            bits.append(f"{ts['num_streams']} stream{'' if ts['num_streams'] == 1 else 's'}")
        if bits:
            rows.append(f'<FONT POINT-SIZE="10" COLOR="blue">{_esc(" · ".join(bits))}</FONT>')
    return _table(rows)


def _placement(doc: dict, preds: dict[str, list[str]], succs: dict[str, list[str]]) -> dict[str, tuple]:
    """Each node's cluster path: (group cluster, aux region?, sub-group?) keys, outermost first.

    Decided from edges only. A ``norm`` node joins the deepest cluster shared by everything it
    feeds (looking through other norm/``other`` nodes): a norm that feeds only attention is drawn
    in the attention cluster, one feeding attention and the residual path stays outside. An
    ``other`` (or group-less) node joins a cluster only when every neighbour of it in the layer,
    producers and consumers, is in that cluster, so a pass-through never drags a cluster's box
    up or down the page. Floating nodes enter an aux region only if they are in it."""
    nodes = {n["id"]: n for n in doc.get("nodes", [])}
    fixed: dict[str, tuple] = {}
    for nid, n in nodes.items():
        key = _GROUP_CLUSTER.get(n.get("group"))
        if key is None:
            continue
        path: list[str] = [f"grp:{key}"]
        if n.get("aux_stream"):
            path.append(f"aux:{n['aux_stream']}")
        if n.get("sub_group"):
            path.append(f"sub:{n['sub_group']}")
        fixed[nid] = tuple(path)

    def reach(nid: str) -> list[tuple]:
        """Cluster paths of the grouped nodes fed by nid, directly or through floating nodes."""
        out: list[tuple] = []
        seen, todo = {nid}, [nid]
        while todo:
            for m in succs.get(todo.pop(), []):
                if m in nodes and m not in seen:
                    seen.add(m)
                    if m in fixed:
                        out.append(fixed[m])
                    else:
                        todo.append(m)
        return out

    def common(paths: list[tuple], aux: str | None) -> tuple:
        if not paths:
            return ()
        prefix = list(paths[0])
        for p in paths[1:]:
            k = 0
            while k < min(len(prefix), len(p)) and prefix[k] == p[k]:
                k += 1
            del prefix[k:]
        for i, part in enumerate(prefix):
            if part.startswith("aux:") and part != f"aux:{aux}":
                del prefix[i:]
                break
        if aux and prefix and f"aux:{aux}" not in prefix:
            prefix[1:] = [f"aux:{aux}"]
        return tuple(prefix)

    result = dict(fixed)
    for nid, n in nodes.items():  # norms first: ``other`` nodes look at where norms went
        if nid not in fixed and n.get("group") == "norm":
            result[nid] = common(reach(nid), n.get("aux_stream"))
    for nid, n in nodes.items():  # in document (topological) order: producers are resolved
        if nid in result:
            continue
        nbrs = dict.fromkeys(m for m in (*preds.get(nid, []), *succs.get(nid, [])) if m != nid and m in result)
        result[nid] = common([result[m] for m in nbrs], n.get("aux_stream"))
    return result


#: Inputs feeding the very same nodes (batch metadata, caches) are packed this many to a row.
INPUT_ROW = 4


def _input_rows(
    inputs: pydot.Subgraph, ext: list[str], succs: dict[str, list[str]]
) -> tuple[dict[str, pydot.Subgraph], list[tuple[str, str]]]:
    """Pack the external inputs that feed the very same nodes into ``rank=same`` rows of
    ``INPUT_ROW``, stacked by invisible edges: ten metadata placeholders of one attention op
    otherwise sit on one rank and make the Inputs box as wide as the layer.
    Returns input id → its row subgraph, and the invisible (upper, lower) edges."""
    bundles: dict[tuple, list[str]] = defaultdict(list)
    for x in ext:
        bundles[tuple(sorted(set(succs.get(x, []))))].append(x)
    holder: dict[str, pydot.Subgraph] = {}
    stack: list[tuple[str, str]] = []
    for members in bundles.values():
        if len(members) <= INPUT_ROW:
            continue
        rows = [members[i : i + INPUT_ROW] for i in range(0, len(members), INPUT_ROW)]
        for row in rows:
            sg = pydot.Subgraph(f"inputs_row_{len(set(holder.values()))}", rank="same")
            inputs.add_subgraph(sg)
            holder.update(dict.fromkeys(row, sg))
        for upper, lower in zip(rows, rows[1:]):
            stack += zip(upper, lower)
    return holder, stack


def to_dot(doc: dict) -> pydot.Dot:
    """The layer document as a pydot graph (clusters, styled nodes, de-duplicated edges)."""
    _validate(doc)
    # ids as strings from here on (JSON ids are strings; a hand-made dict may use numbers)
    nodes = [{**n, "id": str(n["id"])} for n in doc.get("nodes", [])]
    externals = [{**x, "id": str(x["id"])} for x in doc.get("external_inputs", [])]
    doc = {**doc, "nodes": nodes, "external_inputs": externals}
    known = {n["id"] for n in nodes} | {x["id"] for x in externals}

    pairs = [(str(e["from"]), str(e["to"])) for e in doc.get("edges", [])]
    for n in nodes:  # ``inputs`` restate edges; take any a document forgot to list
        for src in n.get("inputs") or []:
            if str(src) in known:
                pairs.append((str(src), n["id"]))
    edges = _dedupe(pairs)
    preds: dict[str, list[str]] = defaultdict(list)
    succs: dict[str, list[str]] = defaultdict(list)
    for a, b in edges:
        succs[a].append(b)
        preds[b].append(a)

    layer = doc.get("layer")
    graph = pydot.Dot(
        f"Layer{layer}" if isinstance(layer, int) else "Layer",
        graph_type="digraph",
        rankdir="TB",
        newrank="true",
        compound="true",
        fontname=FONT,
        fontsize="12",
        nodesep="0.22",
        ranksep="0.32",
        splines="spline",
        outputorder="edgesfirst",
        labelloc="t",
        labeljust="c",
        label=_graph_label(doc, len(nodes), len(edges)),
        bgcolor="white",
        pad="0.2",
    )
    graph.set_node_defaults(
        shape="box", style="rounded,filled", fontname=FONT, fontsize="11", margin="0.08,0.03",
        penwidth="0.8", color="#444444", height="0.3",
    )
    graph.set_edge_defaults(fontname=FONT, fontsize="9", color="#555555", arrowsize="0.6", penwidth="0.9")

    ids = _Ids()
    for x in externals:
        ids.add(x["id"])
    for n in nodes:
        ids.add(n["id"])

    # -- clusters, outermost first, created in order of first use (deterministic output)
    paths = _placement(doc, preds, succs)
    groups_in: dict[str, set[str]] = defaultdict(set)
    for n in nodes:
        key = _GROUP_CLUSTER.get(n.get("group") or "")
        if key:
            groups_in[key].add(n["group"])
            if n.get("sub_group"):
                groups_in[key].add(n["sub_group"])
    aux_index: dict[str, int] = {}
    clusters: dict[tuple, pydot.Subgraph] = {}

    def cluster(path: tuple) -> pydot.Dot | pydot.Subgraph:
        if not path:
            return graph
        if path in clusters:
            return clusters[path]
        parent = cluster(path[:-1])
        kind, _, value = path[-1].partition(":")
        top = path[0].partition(":")[2]
        if kind == "grp":
            sg = pydot.Subgraph(
                f"cluster_{value}", label=f"<<B>{_esc(_cluster_title(value, groups_in[value]))}</B>>",
                style="rounded,filled", fillcolor=_CLUSTER_FILL.get(value, "#f4f4f4"),
                color=_CLUSTER_PEN.get(value, "#888888"), penwidth="1.4", fontname=FONT, fontsize="15",
                labeljust="l", margin="12",
            )
        elif kind == "aux":
            k = aux_index.setdefault(value, len(aux_index))
            sg = pydot.Subgraph(
                f"cluster_{top}_aux{k}", label="Aux Stream", tooltip=_plain(f"aux stream region of {value}"),
                style="dotted,rounded,filled", fillcolor="#f0f8ff", color="#4a6fa5", penwidth="1.4",
                fontname=FONT, fontsize="11", fontcolor="#4a6fa5", labeljust="r", margin="8",
            )
        else:
            safe = re.sub(r"\W+", "_", value)
            aux = next((p for p in path if p.startswith("aux:")), None)
            name = f"cluster_{top}_{safe}" + (f"_aux{aux_index[aux[4:]]}" if aux else "")
            sg = pydot.Subgraph(
                name, label=_plain(_sub_title(value)), style="dashed,rounded,filled", fillcolor="#ffffff",
                color="#999999", fontname=FONT, fontsize="11", fontcolor="#444444", labeljust="l", margin="8",
            )
        parent.add_subgraph(sg)
        clusters[path] = sg
        return sg

    # external inputs
    if externals:
        inputs = pydot.Subgraph(
            "cluster_inputs", label="<<B>Inputs</B>>", style="dashed,rounded", color="#6a8caf", fontname=FONT,
            fontsize="13", labeljust="l", margin="10",
        )
        graph.add_subgraph(inputs)
        holder, stack = _input_rows(inputs, [x["id"] for x in externals], succs)
        for x in externals:
            rows = [f"<B>{_esc(x.get('label') or x['id'])}</B>"]
            if x.get("label") and x["label"] != x["id"]:
                rows.append(f'<FONT POINT-SIZE="8" COLOR="#555555">{_esc(x["id"])}</FONT>')
            if x.get("shape") is not None:
                rows.append(f'<FONT POINT-SIZE="9">[{_esc(pretty_shape(x.get("shape")))}]</FONT>')
            holder.get(x["id"], inputs).add_node(pydot.Node(
                ids.map[x["id"]], label=_table(rows), fillcolor=INPUT, tooltip=_plain(str(x["id"])),
            ))
        for a, b in stack:
            inputs.add_edge(pydot.Edge(ids.map[a], ids.map[b], style="invis"))

    for n in nodes:
        name, fill, kind = style(n.get("op", ""))
        attrs: dict[str, Any] = {"label": _node_label(n), "fillcolor": fill,
                 "tooltip": _plain(f"{n['id']}\n{n.get('op', '')}{_kernels_tooltip(n)}")}
        if kind == "aux":
            attrs["style"] = "rounded,filled,dashed"
        if n.get("trace_kernels"):
            attrs["penwidth"] = "1.4"
            attrs["color"] = "blue"
        cluster(paths.get(n["id"], ())).add_node(pydot.Node(ids.map[n["id"]], **attrs))

    ext_ids = {x["id"] for x in externals}
    for a, b in edges:
        attrs = {}
        if a in ext_ids:
            attrs = {"color": "#8fa8c8", "style": "dashed"}
        graph.add_edge(pydot.Edge(ids.map[a], ids.map[b], **attrs))
    return graph


def dot_text(doc: dict) -> str:
    """DOT source of the layer diagram (pydot-built; byte-stable for a given document)."""
    return to_dot(doc).to_string()


def render(doc: dict, fmt: str = "png", *, dpi: int = PNG_DPI, timeout: float = RENDER_TIMEOUT_S) -> bytes:
    """Run Graphviz ``dot`` on the layer's DOT text; returns the PNG or SVG bytes."""
    from layerc.backends.graphviz import render_dot

    return render_dot(dot_text(doc), fmt, dpi=dpi, timeout=timeout, max_px=PNG_MAX_PX)


def module_dot(module) -> str:
    """The DOT of a module's one sliced layer."""
    from layerc.backends.layer_json import module_document

    return dot_text(module_document(module))


def module_png(module) -> bytes:
    from layerc.backends.layer_json import module_document

    return render(module_document(module), "png")


def module_svg(module) -> bytes:
    from layerc.backends.layer_json import module_document

    return render(module_document(module), "svg")


def main(argv: list[str] | None = None) -> int:
    """``python -m layerc.backends.layer_dot LAYER.json [-o BASE] [--format png,svg]``: writes
    ``BASE.dot`` and one file per format (render_layer.py's command, plus SVG)."""
    import argparse
    import json
    import sys
    from pathlib import Path

    p = argparse.ArgumentParser(prog="layer_dot", description="Draw a layer JSON document with Graphviz.")
    p.add_argument("layer_json")
    p.add_argument("-o", "--output", help="output base path (default: the JSON path without .json)")
    p.add_argument("--format", default="png,svg", help="comma-separated: png, svg, or none (default png,svg)")
    p.add_argument("--dpi", type=int, default=PNG_DPI)
    args = p.parse_args(argv)
    from layerc.backends.outputs import transaction, write_atomic
    from layerc.grammar.inputs import read_text

    try:
        with transaction():
            doc = json.loads(read_text(args.layer_json))
            base = Path(args.output) if args.output else Path(args.layer_json).with_suffix("")
            write_atomic(base.with_name(base.name + ".dot"), dot_text(doc))
            written = [base.with_name(base.name + ".dot")]
            for fmt in [f for f in args.format.split(",") if f and f != "none"]:
                out = base.with_name(f"{base.name}.{fmt}")
                write_atomic(out, render(doc, fmt, dpi=args.dpi))
                written.append(out)
    except (ValueError, LayercError) as exc:
        print(f"layer_dot: error: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
