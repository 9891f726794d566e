"""Generate realistic AutoDeploy graph dumps with known layer ground truth.

No public full-size dump exists (the reference notes found only fragments), yet the slicer
must be tested on 61-layer DeepSeek-V3 graphs with fused MoE counters, multi-stream regions,
residual+norm fusions that straddle layers, and generic ops whose name suffixes say nothing
about their layer. This module builds such graphs with ``GraphBuilder`` (fx naming rules) and
prints them with ``backends.autodeploy.print_module``, the single owner of the text format.

Every node carries ``meta["true_layer"]`` (None for embeddings, shared metadata, the final
norm and the LM head); ``write`` stores it beside the dump as ``<stem>_truth.json``.

``constants`` adds to every decoder layer a few ops whose arguments print every constant class
torch.export and AutoDeploy print (``_constant_ops``): strings with commas, arrows, brackets and
quotes where the schema says ``str``, inf/-inf/nan, complex, Ellipsis, slices, nested containers,
dtypes, devices, layouts, memory formats and symbolic sizes.

Usage (wired as ``layerc gen-dump``): ``gen_dump ARCH OUTDIR [--layers N] [--tokens T]
[--symbolic] [--seed S] [--shuffle] [--piecewise] [--constants]``.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any, cast

from layerc.backends.autodeploy import print_module
from layerc.backends.outputs import output_dir, write_atomic
from layerc.backends.synth import eager as gen_eager
from layerc.ir.builder import GETITEM, GraphBuilder, Namespace, module, sanitize, target_base
from layerc.ir.constants import Device, DType, TorchAttr
from layerc.ir.graph import OP, OUTPUT, PLACEHOLDER, Graph, Module, Node, Value, Weight, map_values
from layerc.ir.types import UNKNOWN, Dim, OpaqueType, SymDim, TensorType, TupleType

BF16, F32, I32, I64, BOOL = "torch.bfloat16", "torch.float32", "torch.int32", "torch.int64", "torch.bool"

# -- targets, as str(node.target) prints them -----------------------------------------------------
LINEAR = "auto_deploy.torch_linear_simple.default"
RMS = "auto_deploy.flashinfer_rms_norm.default"
TORCH_RMS = "auto_deploy.torch_rmsnorm.default"
VIEW = "aten.view.default"
SPLIT = "aten.split_with_sizes.default"
ADD, MUL, SUB = "aten.add.Tensor", "aten.mul.Tensor", "aten.sub.Tensor"
FLOORDIV, EQ = "aten.floor_divide.default", "aten.eq.Scalar"
SILU, SIGMOID, EXP, NEG = "aten.silu.default", "aten.sigmoid.default", "aten.exp.default", "aten.neg.default"
TO, TO_PACKET = "aten.to.dtype", "aten.to"
EMBEDDING = "aten.embedding.default"
ALLREDUCE = "auto_deploy.trtllm_dist_all_reduce.default"
FUSED_AR_NORM = "dist.trtllm_fused_allreduce_residual_rmsnorm.default"
MOE_FUSED = "auto_deploy.trtllm_moe_fused"
SWIGLU = "auto_deploy.fused_swiglu_mlp"
BEGIN_AUX = "<function begin_aux_stream_passthrough at 0x7f2a1c0b3d90>"
END_AUX = "<function end_aux_stream_passthrough at 0x7f2a1c0b3e20>"
WAIT_AUX = "<function wait_aux_stream_passthrough at 0x7f2a1c0b3eb0>"

ARCHES = ("deepseek_v3", "deepseek_v3_prefusion", "llama", "qwen3_moe", "nemotron_h", "qwen3_next", "eager")
DEFAULT_LAYERS = {
    "deepseek_v3": 61, "deepseek_v3_prefusion": 61, "llama": 32, "qwen3_moe": 48, "nemotron_h": 52, "qwen3_next": 48,
    "eager": 4,
}
#: Nemotron-3-Nano's hybrid_override_pattern: M = Mamba2, E = MoE, * = attention.
NEMOTRON_PATTERN = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"

#: Ops whose fx names are pure counters: renaming them must never change a layer slice.
GENERIC = frozenset(
    "getitem view add mul sub floor_divide eq to t silu sigmoid exp neg relu pow split_with_sizes cat softplus".split()
)


def _mlir(tag: str) -> str:
    """An MLIR-fused kernel target: ``auto_deploy.mlir_fused_<sha256[:16]>`` of its pattern."""
    return "auto_deploy.mlir_fused_" + hashlib.sha256(tag.encode()).hexdigest()[:16]


def _tt(x: Node) -> TensorType:
    """A generated node's type: always a tensor's."""
    return cast(TensorType, x.type)


def _shape(x: Node) -> tuple[Dim, ...]:
    """A generated node's shape: always printed."""
    shape = _tt(x).shape
    assert shape is not None
    return shape


def _target(n: Node) -> str:
    """An op's target: every op has one."""
    assert n.target is not None
    return n.target


class _Gen:
    """Shared shapes, counters and helpers for one generated graph."""

    #: batch, sequence and token dims, the pages of the KV cache: ints, or SymDims when symbolic
    B: SymDim | int
    S: SymDim | int
    T: SymDim | int
    B1: SymDim | int
    pages: SymDim | int

    def __init__(self, graph_name: str | None, tokens: int, symbolic: bool, constants: bool = False):
        self.pattern: str | None = None  # Nemotron-H block pattern
        self.variant = 0  # the eager graph's structures
        self.constants = constants
        self.b = GraphBuilder(graph_name)
        self.symbolic = symbolic
        if symbolic:
            self.B, self.S, self.T = SymDim("s72"), SymDim("s70"), SymDim("s70*s72")
            self.B1, self.pages = SymDim("s72 + 1"), SymDim("s43")
        else:
            self.B, self.S, self.T = tokens, 1, tokens
            self.B1, self.pages = tokens + 1, tokens * 16
        self.sizes: list = [self.B, self.S]  # view arguments for the batch dims
        self.count: Counter = Counter()  # global counters in graph order (fused weights, caches)
        self.meta: dict[str, Node] = {}

    # -- plumbing --------------------------------------------------------------------------
    def at(self, layer: int | None) -> None:
        self.b.meta["true_layer"] = layer

    def next(self, key: str) -> int:
        n = self.count[key]
        self.count[key] += 1
        return n

    def ph(self, name: str, dtype: str, *dims) -> Node:
        return self.b.placeholder(name, TensorType(tuple(dims), dtype))

    def w(self, fqn: str, dtype: str, *dims) -> Weight:
        return self.b.weight(fqn, TensorType(tuple(dims), dtype))

    def op(self, target: str, args: tuple, type, name: str | None = None) -> Node:
        return self.b.op(target, args, type, name)

    def gi(self, node: Node) -> list[Node]:
        return self.b.getitems(node)

    def act(self, *dims, dtype: str = BF16) -> TensorType:
        """A [batch, seq, ...] activation."""
        return TensorType((self.B, self.S, *dims), dtype)

    def flat(self, *dims, dtype: str = BF16) -> TensorType:
        """A [tokens, ...] activation."""
        return TensorType((self.T, *dims), dtype)

    @staticmethod
    def tup(*types) -> TupleType:
        return TupleType(tuple(types))

    # -- common ops ------------------------------------------------------------------------
    def batch_inputs(self) -> tuple[Node, Node]:
        ids = self.ph("input_ids", I32, self.B, self.S)
        pos = self.ph("position_ids", I64, self.B, self.S)
        return ids, pos

    def enter_layer(self, h: Node) -> None:
        """What a decoder layer does first with its input ``h``. Symbolic batch dims enter the
        layer's views through its own ``aten.sym_size.int`` nodes (export traces ``bsz, q_len, _ =
        hidden_states.size()`` once per layer); with ``constants``, the constant ops follow."""
        if self.symbolic:
            sint = OpaqueType("SymInt")
            self.sizes = [self.op("aten.sym_size.int", (h, d), sint, name="sym_size_int") for d in (0, 1)]
        if self.constants:
            _constant_ops(self, h)

    def metadata(self, *extra: str) -> None:
        """The cached-attention batch metadata placeholders (AutoDeploy's SequenceInfo)."""
        B, B1 = self.B, self.B1
        spec = {
            "batch_info_host": (3,), "cu_seqlen_host": (B1,), "cu_num_pages": (B1,), "cu_num_pages_host": (B1,),
            "cache_loc": (self.pages,), "last_page_len": (B,), "last_page_len_host": (B,),
            "seq_len_with_cache_host": (B,), "cu_seqlen": (B1,), "seq_len_with_cache": (B,),
            "slot_idx": (B,), "use_initial_states": (B,),
        }
        for name in [*spec][:10] + list(extra):
            self.meta[name] = self.ph(name, BOOL if name == "use_initial_states" else I32, *spec[name])

    def m(self, *names: str) -> tuple:
        return tuple(self.meta[n] for n in names)

    def embed(self, ids: Node, vocab: int, hidden: int, fqn: str = "model.embed_tokens.weight") -> Node:
        return self.op(EMBEDDING, (self.w(fqn, BF16, vocab, hidden), ids), self.act(hidden))

    def linear(self, x: Node, fqn: str, out_f: int, in_f: int, dtype: str = BF16, wdtype: str = BF16) -> Node:
        w = self.w(fqn, wdtype, out_f, in_f)
        return self.op(LINEAR, (x, w, None), TensorType(_shape(x)[:-1] + (out_f,), dtype))

    def rms(self, x: Node, fqn: str, size: int, eps: float, target: str = RMS) -> Node:
        return self.op(target, (x, self.w(fqn, BF16, size), eps), x.type)

    def view(self, x: Node, *rest: int) -> Node:
        """``view(x, [B, S, *rest])``; the batch dims are sym_size nodes when symbolic."""
        return self.op(VIEW, (x, [*self.sizes, *rest]), TensorType((self.B, self.S, *rest), _tt(x).dtype))

    def flatten(self, x: Node) -> Node:
        n = _shape(x)[-1]
        return self.op(VIEW, (x, [-1, n]), TensorType((self.T, n), _tt(x).dtype))

    def split(self, x: Node, sizes: list[int], dim: int = -1) -> list[Node]:
        shape = _shape(x)
        d = dim % len(shape)
        parts = [TensorType(shape[:d] + (s,) + shape[d + 1 :], _tt(x).dtype) for s in sizes]
        return self.gi(self.op(SPLIT, (x, sizes, dim), self.tup(*parts)))

    def swiglu_linears(self, x: Node, prefix: str, inter: int, hidden: int) -> Node:
        """The unfused gated MLP: gate and up projections, silu, mul, down projection."""
        gate = self.linear(x, f"{prefix}.gate_proj.weight", inter, hidden)
        up = self.linear(x, f"{prefix}.up_proj.weight", inter, hidden)
        act = self.op(SILU, (gate,), gate.type)
        prod = self.op(MUL, (act, up), gate.type)
        return self.linear(prod, f"{prefix}.down_proj.weight", hidden, inter)

    def fused_swiglu(self, x: Node, prefix: str, inter: int, hidden: int) -> Node:
        """After GEMM fusion gate+up is one ``fused_weight_{k}`` (k a global counter, not the layer)."""
        gate_up = self.w(f"fused_weight_{self.next('fused_weight')}", BF16, 2 * inter, hidden)
        down = self.w(f"{prefix}.down_proj.weight", BF16, hidden, inter)
        return self.op(SWIGLU, (x, gate_up, down), x.type)

    def moe_fused(self, x: Node, idx: Node, wts: Node, n_exp: int, inter: int, hidden: int, gated: bool = True) -> Node:
        k = self.next("fused_moe")
        if gated:
            up = self.w(f"fused_moe_w3_w1_stacked_{k}", BF16, n_exp, 2 * inter, hidden)
        else:
            up = self.w(f"fused_moe_w1_stacked_{k}", BF16, n_exp, inter, hidden)
        down = self.w(f"fused_moe_w2_stacked_{k}", BF16, n_exp, hidden, inter)
        return self.op(MOE_FUSED, (x, idx, wts, up, down), x.type)

    def head(self, x: Node, norm_fqn: str, hidden: int, vocab: int, eps: float, lm_fqn: str = "lm_head.weight",
             target: str = RMS, residual: Node | None = None, fused: str | None = None) -> None:
        """Final norm and lm_head. With ``residual`` and ``fused``, the last residual add is fused
        into the final norm, as AutoDeploy's add+RMSNorm fusion does for every such pair."""
        self.at(None)
        if residual is not None:
            normed = _add_norm(self, residual, x, norm_fqn, hidden, eps, fused)[0]
        else:
            normed = self.rms(x, norm_fqn, hidden, eps, target)
        logits = self.linear(normed, lm_fqn, vocab, hidden)
        self.b.output(self.op(TO, (logits, DType("float32")), TensorType(_tt(logits).shape, F32)))


def _constant_ops(g: _Gen, h: Node) -> None:
    """Side ops on a layer's input that print every constant class: an einsum equation and
    assertion messages (unquoted strings with commas, arrows, parentheses and quotes; their op
    schemas say ``str``), -inf/inf/nan, a complex scale, Ellipsis and slices, a padding mode, a
    device, dtype and memory format, a spec dict with a layout (layouts and memory formats reach a
    dump as positional arguments or inside containers), and symbolic sizes where dims are
    symbolic. None of them feeds the layer: they show the text, not the math."""
    layer = g.b.meta.get("true_layer")
    t, shape = _tt(h), _shape(h)
    H = shape[-1]
    scores = g.op("aten.einsum.default", ("bsh,bsh->bs", [h, h]), TensorType(shape[:-1], F32))
    finite = g.op("aten.gt.Scalar", (h, float("-inf")), TensorType(shape, BOOL))
    g.op("aten.clamp.default", (scores, float("-inf"), float("inf")), scores.type)
    g.op("aten.where.ScalarOther", (finite, h, float("nan")), t)
    every = g.op("aten.all.default", (finite,), TensorType((), BOOL))
    where = f"model.layers[{layer}]"
    g.op("aten._assert_async.msg", (every, f"Expected all(h > -inf) in '{where}', got {{shape: (B, S, {H})}}"),
         OpaqueType("NoneType"))
    head = g.op(GETITEM, (h, (Ellipsis, slice(None, 64, None))), TensorType(shape[:-1] + (64,), t.dtype))
    padded = g.op("aten.pad.default", (head, [0, 1], "constant", 0.0), TensorType(shape[:-1] + (65,), t.dtype))
    g.op("aten.mul.Scalar", (padded, 0.5 + 0.5j), TensorType(_tt(padded).shape, "torch.complex64"))
    g.op("aten.to.device", (h, Device("cuda", 0), DType("bfloat16"), False, False, TorchAttr("contiguous_format")), t)
    spec = {"size": [g.B, g.S, 64], "dtype": DType("bfloat16"), "layout": TorchAttr("strided"),
            "device": Device("cuda", 0), "memory_format": TorchAttr("contiguous_format"), "pin_memory": None}
    g.op("auto_deploy.workspace_alloc.default", (h, spec), TensorType((g.B, g.S, 64), BF16))  # like h, as spec says
    if g.symbolic:
        ge = g.op("<built-in function ge>", (g.sizes[0], 1), OpaqueType("SymBool"))
        g.op("aten._assert_scalar.default", (ge, f"Runtime assertion failed for expression Ge({g.B}, 1) on node '{ge.name}'"),
             OpaqueType("NoneType"))
        g.op(VIEW, (h, [g.B, g.S, H]), t)  # sizes as constants, not sym_size nodes


# =============================================================================================
# DeepSeek-V3
# =============================================================================================
DSV3: dict[str, Any] = dict(hidden=7168, vocab=129280, heads=128, q_lora=1536, kv_lora=512, nope=128, rope=64, v_head=128,
            inter=18432, moe_inter=2048, experts=256, dense=3, eps=1e-06, scale=0.1352337788608801)


def _dsv3_attention(g: _Gen, i: int, h: Node, pos: Node, caches, prefusion: bool) -> Node:
    c = DSV3
    H, nh, qk = c["hidden"], c["heads"], c["nope"] + c["rope"]
    p = f"model.layers.{i}.self_attn"
    norm_target = TORCH_RMS if prefusion else RMS
    kv_in = h if prefusion else g.op(BEGIN_AUX, (h,), h.type)  # multi_stream_mla_attn: kv branch on aux
    kv = g.linear(kv_in, f"{p}.kv_a_proj_with_mqa.weight", c["kv_lora"] + c["rope"], H)
    ckv, kpe = g.split(kv, [c["kv_lora"], c["rope"]])
    ckv = g.rms(ckv, f"{p}.kv_a_layernorm.weight", c["kv_lora"], c["eps"], norm_target)
    kpe = g.view(kpe, 1, c["rope"])
    if not prefusion:
        ckv = g.op(END_AUX, (ckv,), ckv.type)
    q = g.linear(h, f"{p}.q_a_proj.weight", c["q_lora"], H)
    q = g.rms(q, f"{p}.q_a_layernorm.weight", c["q_lora"], c["eps"], norm_target)
    q = g.linear(q, f"{p}.q_b_proj.weight", nh * qk, c["q_lora"])
    q_nope, q_pe = g.split(g.view(q, nh, qk), [c["nope"], c["rope"]])
    kv_b = g.w(f"{p}.kv_b_proj.weight", BF16, nh * (c["nope"] + c["v_head"]), c["kv_lora"])
    rope_t = g.tup(q_pe.type, kpe.type)
    out_t = g.act(nh, c["v_head"])
    if prefusion:
        cos: Value = g.op("aten.index.Tensor", (g.w("model.rotary_emb.cos_cached", F32, 163840, c["rope"]), [pos]),
                   g.act(c["rope"], dtype=F32))
        sin: Value = g.op("aten.index.Tensor", (g.w("model.rotary_emb.sin_cached", F32, 163840, c["rope"]), [pos]),
                   g.act(c["rope"], dtype=F32))
        q_pe, kpe = g.gi(g.op("auto_deploy.torch_rope_with_qk_interleaving.default", (q_pe, kpe, cos, sin, 2), rope_t))
        attn = g.op("auto_deploy.torch_mla.default", (q_nope, q_pe, ckv, kpe, kv_b, True, c["scale"], "bsnd"), out_t)
    else:
        q_pe = g.op(WAIT_AUX, (q_pe,), q_pe.type)
        cos = g.w("model.rotary_emb.cos_cached", F32, 163840, c["rope"])
        sin = g.w("model.rotary_emb.sin_cached", F32, 163840, c["rope"])
        q_pe, kpe = g.gi(g.op("auto_deploy.triton_rope_on_interleaved_qk_inputs", (q_pe, kpe, cos, sin, pos), rope_t))
        meta = g.m("batch_info_host", "cu_seqlen_host", "cu_num_pages", "cu_num_pages_host", "cache_loc",
                   "last_page_len", "last_page_len_host", "seq_len_with_cache_host",
                   "flashinfer_batch_indices", "flashinfer_positions")
        attn = g.op("auto_deploy.flashinfer_mla_with_cache.default",
                    (q_nope, q_pe, ckv, kpe, kv_b, *meta, *caches, c["scale"]), out_t)
    return g.linear(g.view(attn, nh * c["v_head"]), f"{p}.o_proj.weight", H, nh * c["v_head"])


def _dsv3_moe(g: _Gen, i: int, h: Node, prefusion: bool) -> Node:
    """Routed + shared experts on a 3-D input; returns the (not yet all-reduced) output."""
    c = DSV3
    H, E, inter = c["hidden"], c["experts"], c["moe_inter"]
    p = f"model.layers.{i}.mlp"
    x = g.flatten(h)
    shared_in = x if prefusion else g.op(BEGIN_AUX, (x,), x.type)  # multi_stream_moe: shared experts on aux
    shared = g.swiglu_linears(shared_in, f"{p}.shared_experts", inter, H)
    if not prefusion:
        shared = g.op(END_AUX, (shared,), shared.type)
    gate_t = g.op("aten.t.default", (g.w(f"{p}.gate.weight", BF16, E, H),), TensorType((H, E), BF16))
    logits = g.op("trtllm.dsv3_router_gemm_op.default", (x, gate_t), g.flat(E, dtype=F32))
    bias = g.w(f"{p}.gate.e_score_correction_bias", F32, E)
    topk = g.op("trtllm.noaux_tc_op.default", (logits, bias, 8, 4, 8, 2.5),
                g.tup(g.flat(8, dtype=F32), g.flat(8, dtype=I32)))
    wts, idx = g.gi(topk)
    if prefusion:
        experts = [[g.w(f"{p}.experts.{e}.{proj}.weight", BF16, *shape) for e in range(E)]
                   for proj, shape in (("gate_proj", (inter, H)), ("down_proj", (H, inter)), ("up_proj", (inter, H)))]
        routed = g.op("auto_deploy.torch_moe.default", (x, idx, wts, *experts), x.type)
        return g.op(ADD, (routed, shared), x.type)
    # Expert-parallel sharding (rank 0 of 8) masks the routing: 32 local experts.
    group = g.op(FLOORDIV, (idx, E // 8), idx.type)
    local = g.op(EQ, (group, 0), TensorType(_tt(idx).shape, BOOL))
    idx = g.op(SUB, (idx, 0), idx.type)
    wts = g.op(MUL, (wts, local), wts.type)
    xt = g.op(TO_PACKET, (x, DType("bfloat16")), x.type)
    routed = g.op(WAIT_AUX, (g.moe_fused(xt, idx, wts, E, inter, H),), x.type)
    return g.op(ADD, (routed, shared), x.type)


def _deepseek_v3(g: _Gen, layers: int, prefusion: bool) -> None:
    c = DSV3
    H, eps = c["hidden"], c["eps"]
    g.at(None)
    ids, pos = g.batch_inputs()
    caches: dict[int, tuple] = {}
    if not prefusion:
        g.metadata()
        for i in range(layers):
            g.at(i)
            k = g.next("cache")
            caches[i] = (g.ph(f"r{k}_ckv_cache", BF16, 1024, 64, c["kv_lora"]),
                         g.ph(f"r{k}_kpe_cache", BF16, 1024, 64, c["rope"]))
        g.at(None)
        prep = g.op("auto_deploy.flashinfer_mla_prepare_metadata.default",
                    (pos, *g.m("batch_info_host", "cu_seqlen", "seq_len_with_cache")),
                    g.tup(g.flat(dtype=I32), g.flat(dtype=I32)))
        g.meta["flashinfer_batch_indices"], g.meta["flashinfer_positions"] = g.gi(prep)
    residual = g.embed(ids, c["vocab"], H)
    mlp_out = None
    h = None
    for i in range(layers + 1):
        p = f"model.layers.{i}" if i < layers else "model"
        norm_fqn = f"{p}.input_layernorm.weight" if i < layers else "model.norm.weight"
        g.at(i if i < layers else None)
        # -- input norm; after fusion it also all-reduces the previous MLP output and adds the
        # residual, so it reads this layer's norm weight while finishing the previous layer.
        if mlp_out is None:
            h = g.rms(residual, norm_fqn, H, eps, TORCH_RMS if prefusion else RMS)
        elif prefusion:
            residual = g.op(ADD, (residual, mlp_out), residual.type)
            h = g.rms(residual, norm_fqn, H, eps, TORCH_RMS)
        else:
            w = g.w(norm_fqn, BF16, H)
            assert h is not None  # the norm of the layer before
            fused = g.op(FUSED_AR_NORM, (mlp_out, residual, w, eps, "NCCL"), g.tup(h.type, h.type))
            if i == layers:  # the final norm: its residual output is dead
                h = g.op(GETITEM, (fused, 0), h.type)
                break
            h, residual = g.gi(fused)
        if i == layers:
            break
        g.enter_layer(h)
        o = _dsv3_attention(g, i, h, pos, caches.get(i), prefusion)
        # -- post-attention all-reduce, residual add and norm
        if prefusion:
            residual = g.op(ADD, (residual, o), residual.type)
            h = g.rms(residual, f"{p}.post_attention_layernorm.weight", H, eps, TORCH_RMS)
        else:
            o = g.op(ALLREDUCE, (o, "NCCL"), o.type)
            w = g.w(f"{p}.post_attention_layernorm.weight", BF16, H)
            h, residual = g.gi(g.op(_mlir("dsv3:add_rmsnorm"), (o, residual, w), g.tup(o.type, o.type)))
        # -- MLP (its all-reduce is fused into the next norm)
        if i >= c["dense"]:
            mlp_out = g.view(_dsv3_moe(g, i, h, prefusion), H)
        elif prefusion:
            mlp_out = g.swiglu_linears(h, f"{p}.mlp", c["inter"], H)
        else:
            mlp_out = g.fused_swiglu(h, f"{p}.mlp", c["inter"], H)
    g.at(None)
    assert h is not None  # the loop ran at least once
    logits = g.linear(h, "lm_head.weight", c["vocab"], H)
    g.b.output(g.op(TO, (logits, DType("float32")), TensorType(_tt(logits).shape, F32)))


# =============================================================================================
# Llama / Qwen3-MoE: GQA with fused QKV, rope, paged attention
# =============================================================================================
LLAMA: dict[str, Any] = dict(hidden=4096, vocab=128256, heads=32, kv_heads=8, head_dim=128, inter=14336, eps=1e-05)
QWEN3_MOE: dict[str, Any] = dict(hidden=2048, vocab=151936, heads=32, kv_heads=4, head_dim=128, experts=128, top_k=8,
                 moe_inter=768, eps=1e-06)


def _gqa_attention(g: _Gen, i: int, h: Node, pos: Node, cache: Node, c: dict, qk_norm: bool, paged: str) -> Node:
    H, nh, nkv, hd = c["hidden"], c["heads"], c["kv_heads"], c["head_dim"]
    p = f"model.layers.{i}.self_attn"
    qkv = g.linear(h, f"fused_weight_{g.next('fused_weight')}", (nh + 2 * nkv) * hd, H)  # q,k,v GEMM fusion
    q, k, v = g.split(qkv, [nh * hd, nkv * hd, nkv * hd])
    q, k, v = g.view(q, nh, hd), g.view(k, nkv, hd), g.view(v, nkv, hd)
    if qk_norm:
        q = g.rms(q, f"{p}.q_norm.weight", hd, c["eps"])
        k = g.rms(k, f"{p}.k_norm.weight", hd, c["eps"])
    cos_sin = g.w("_ad_rotary_cos_sin_0", F32, 131072, hd)
    q, k = g.gi(g.op("auto_deploy.flashinfer_rope.default", (q, k, pos, cos_sin, True), g.tup(q.type, k.type)))
    attn = _paged_attention(g, paged, q, k, v, cache, hd)
    return g.linear(g.view(attn, nh * hd), f"{p}.o_proj.weight", H, nh * hd)


def _paged_attention(g: _Gen, kind: str, q: Node, k: Node, v: Node, cache: Node, hd: int) -> Node:
    scale = hd ** -0.5
    if kind == "flashinfer":
        meta = g.m("batch_info_host", "cu_seqlen_host", "cu_num_pages", "cu_num_pages_host", "cache_loc",
                   "last_page_len", "last_page_len_host", "seq_len_with_cache_host",
                   "flashinfer_batch_indices", "flashinfer_positions")
        return g.op("auto_deploy.flashinfer_attention_mha_with_cache.default", (q, k, v, *meta, cache, scale), q.type)
    meta = g.m("batch_info_host", "cu_seqlen", "cu_num_pages", "cache_loc", "last_page_len", "seq_len_with_cache")
    return g.op("auto_deploy.triton_paged_mha_with_cache.default", (q, k, v, *meta, cache, scale), q.type)


def _prepare(g: _Gen, kind: str, pos: Node) -> None:
    """The once-per-graph metadata preparation op of a cached-attention backend."""
    g.at(None)
    target = {"flashinfer": "auto_deploy.flashinfer_attention_prepare_metadata.default",
              "triton": "auto_deploy.triton_paged_prepare_metadata.default"}[kind]
    prep = g.op(target, (pos, *g.m("batch_info_host", "cu_seqlen", "seq_len_with_cache")),
                g.tup(g.flat(dtype=I32), g.flat(dtype=I32)))
    g.meta["flashinfer_batch_indices"], g.meta["flashinfer_positions"] = g.gi(prep)


def _kv_cache(g: _Gen, i: int, kv_heads: int, head_dim: int) -> Node:
    g.at(i)
    return g.ph(f"r{g.next('cache')}_kv_cache", BF16, 1024, 2, 64, kv_heads, head_dim)


def _add_norm(g: _Gen, residual: Node, x: Node | None, fqn: str, size: int, eps: float, fused: str | None):
    """Residual add then RMSNorm: an ``mlir_fused`` kernel (returns both) or two ops."""
    if x is None:
        return g.rms(residual, fqn, size, eps), residual
    if fused:
        w = g.w(fqn, BF16, size)
        return tuple(g.gi(g.op(fused, (x, residual, w), g.tup(residual.type, residual.type))))
    # The unfused residual add closes the layer that made x (as in HF decoder layers); only the
    # norm after it opens the next one.
    here = g.b.meta.get("true_layer")
    g.at(x.meta.get("true_layer", here))
    residual = g.op(ADD, (residual, x), residual.type)
    g.at(here)
    return g.rms(residual, fqn, size, eps), residual


def _gqa_stack(g: _Gen, layers: int, c: dict, paged: str, qk_norm: bool, fused_norm: str | None, mlp) -> None:
    """A Llama-style decoder stack: norm, GQA attention, norm, ``mlp(i, h)`` per layer."""
    H = c["hidden"]
    g.at(None)
    ids, pos = g.batch_inputs()
    g.metadata()
    caches = [_kv_cache(g, i, c["kv_heads"], c["head_dim"]) for i in range(layers)]
    _prepare(g, paged, pos)
    residual, y = g.embed(ids, c["vocab"], H), None
    for i in range(layers):
        g.at(i)
        p = f"model.layers.{i}"
        h, residual = _add_norm(g, residual, y, f"{p}.input_layernorm.weight", H, c["eps"], fused_norm)
        g.enter_layer(h)
        o = _gqa_attention(g, i, h, pos, caches[i], c, qk_norm=qk_norm, paged=paged)
        h, residual = _add_norm(g, residual, o, f"{p}.post_attention_layernorm.weight", H, c["eps"], fused_norm)
        y = mlp(i, h)
    assert y is not None  # layers >= 1
    g.head(y, "model.norm.weight", H, c["vocab"], c["eps"], residual=residual, fused=fused_norm)


def _llama(g: _Gen, layers: int) -> None:
    c = LLAMA
    _gqa_stack(g, layers, c, "flashinfer", False, None, lambda i, h: g.fused_swiglu(h, f"model.layers.{i}.mlp", c["inter"], c["hidden"]))


def _topk_softmax_moe(g: _Gen, i: int, h: Node, c: dict) -> Node:
    """Softmax top-k routing (``triton_fused_topk_softmax``) into the fused MoE; returns [tokens, H]."""
    H, E = c["hidden"], c["experts"]
    x = g.flatten(h)
    logits = g.linear(x, f"model.layers.{i}.mlp.gate.weight", E, H)
    wts, idx = g.gi(g.op("auto_deploy.triton_fused_topk_softmax", (logits, c["top_k"], True),
                         g.tup(g.flat(c["top_k"], dtype=F32), g.flat(c["top_k"], dtype=I32))))
    return g.moe_fused(x, idx, wts, E, c["moe_inter"], H)


def _qwen3_moe(g: _Gen, layers: int) -> None:
    c = QWEN3_MOE
    _gqa_stack(g, layers, c, "triton", True, _mlir("qwen3_moe:add_rmsnorm"), lambda i, h: g.view(_topk_softmax_moe(g, i, h, c), c["hidden"]))


# =============================================================================================
# Nemotron-H (Mamba2 / attention / MoE hybrid) and Qwen3-Next (gated delta net / attention, MoE)
# =============================================================================================
NEMOTRON: dict[str, Any] = dict(hidden=2688, vocab=131072, m_heads=64, m_head_dim=64, d_state=128, n_groups=8, conv=4,
                heads=32, kv_heads=2, head_dim=128, experts=128, top_k=6, moe_inter=1856, shared_inter=3712,
                eps=1e-05)


def _mamba(g: _Gen, i: int, h: Node, caches: tuple, c: dict, p: str) -> Node:
    H, nh, hd, ds, ng = c["hidden"], c["m_heads"], c["m_head_dim"], c["d_state"], c["n_groups"]
    d_inner = nh * hd
    conv_dim = d_inner + 2 * ng * ds
    conv_cache, ssm_cache = caches
    zxbcdt = g.linear(h, f"{p}.in_proj.weight", d_inner + conv_dim + nh, H)
    z, xbc, dt = g.split(zxbcdt, [d_inner, conv_dim, nh])
    xbc = g.op("auto_deploy.cuda_cached_causal_conv1d.default",
               (xbc, g.w(f"{p}.conv1d.weight", BF16, conv_dim, 1, c["conv"]), g.w(f"{p}.conv1d.bias", BF16, conv_dim),
                *g.m("batch_info_host", "cu_seqlen", "slot_idx", "use_initial_states"), conv_cache, 1, c["conv"] - 1,
                1, 1, "zeros"), xbc.type)
    xbc = g.op(SILU, (xbc,), xbc.type)
    x, B, C = g.split(xbc, [d_inner, ng * ds, ng * ds])
    x, B, C = g.view(x, nh, hd), g.view(B, ng, ds), g.view(C, ng, ds)
    A = g.op(NEG, (g.op(EXP, (g.w(f"{p}.A_log", F32, nh),), TensorType((nh,), F32)),), TensorType((nh,), F32))
    y = g.op("auto_deploy.triton_cached_ssm.default",
             (x, A, B, C, g.w(f"{p}.D", F32, nh), dt, g.w(f"{p}.dt_bias", F32, nh),
              *g.m("batch_info_host", "cu_seqlen", "slot_idx", "use_initial_states"), ssm_cache, [0.0, float("inf")],
              128), x.type)
    y = g.op("auto_deploy.triton_rmsnorm_gated", (g.view(y, d_inner), z, g.w(f"{p}.norm.weight", BF16, d_inner),
                                                 c["eps"], d_inner // ng, False), z.type)
    return g.linear(y, f"{p}.out_proj.weight", H, d_inner)


def _nemotron_moe(g: _Gen, i: int, h: Node, c: dict, p: str) -> Node:
    """Sigmoid/bias routing (noaux_tc, one group), non-gated relu² experts, one shared expert."""
    H, E = c["hidden"], c["experts"]
    x = g.flatten(h)
    x32 = g.op(TO, (x, DType("float32")), g.flat(H, dtype=F32))
    logits = g.linear(x32, f"{p}.gate.weight", E, H, dtype=F32, wdtype=F32)
    wts, idx = g.gi(g.op("trtllm.noaux_tc_op.default", (logits, g.w(f"{p}.gate.e_score_correction_bias", F32, E),
                                                         1, 1, c["top_k"], 2.5),
                         g.tup(g.flat(c["top_k"], dtype=F32), g.flat(c["top_k"], dtype=I32))))
    routed = g.moe_fused(x, idx, wts, E, c["moe_inter"], H, gated=False)
    up = g.linear(x, f"{p}.shared_experts.up_proj.weight", c["shared_inter"], H)
    act = g.op("aten.pow.Tensor_Scalar", (g.op("aten.relu.default", (up,), up.type), 2), up.type)
    shared = g.linear(act, f"{p}.shared_experts.down_proj.weight", H, c["shared_inter"])
    return g.view(g.op(ADD, (routed, shared), routed.type), H)


def _nemotron_h(g: _Gen, layers: int) -> None:
    c = NEMOTRON
    H, eps = c["hidden"], c["eps"]
    pattern = g.pattern or NEMOTRON_PATTERN
    kinds = (pattern * (layers // len(pattern) + 1))[:layers]
    g.at(None)
    ids, pos = g.batch_inputs()
    g.metadata("slot_idx", "use_initial_states")
    state_caches: dict[int, tuple[Node, Node]] = {}  # Mamba2 layers' (conv, ssm)
    kv_caches: dict[int, Node] = {}  # attention layers'
    for i, kind in enumerate(kinds):
        g.at(i)
        if kind == "M":
            slot = g.next("cache")
            conv_dim = c["m_heads"] * c["m_head_dim"] + 2 * c["n_groups"] * c["d_state"]
            state_caches[i] = (g.ph(f"r{slot}_conv_state_cache", BF16, 64, conv_dim, c["conv"] - 1),
                               g.ph(f"r{slot}_ssm_state_cache", BF16, 64, c["m_heads"], c["m_head_dim"], c["d_state"]))
        elif kind == "*":
            kv_caches[i] = _kv_cache(g, i, c["kv_heads"], c["head_dim"])
    _prepare(g, "flashinfer", pos)
    residual = g.embed(ids, c["vocab"], H, "backbone.embeddings.weight")
    y = None
    for i, kind in enumerate(kinds):
        g.at(i)
        p = f"backbone.layers.{i}"
        h, residual = _add_norm(g, residual, y, f"{p}.norm.weight", H, eps, None)
        g.enter_layer(h)
        if kind == "M":
            y = _mamba(g, i, h, state_caches[i], c, f"{p}.mixer")
        elif kind == "E":
            y = _nemotron_moe(g, i, h, c, f"{p}.mixer")
        else:
            nh, nkv, hd = c["heads"], c["kv_heads"], c["head_dim"]
            q = g.view(g.linear(h, f"{p}.mixer.q_proj.weight", nh * hd, H), nh, hd)
            k = g.view(g.linear(h, f"{p}.mixer.k_proj.weight", nkv * hd, H), nkv, hd)
            v = g.view(g.linear(h, f"{p}.mixer.v_proj.weight", nkv * hd, H), nkv, hd)
            attn = _paged_attention(g, "flashinfer", q, k, v, kv_caches[i], hd)
            y = g.linear(g.view(attn, nh * hd), f"{p}.mixer.o_proj.weight", H, nh * hd)
    final = g.op(ADD, (residual, y), residual.type) if y is not None else residual
    g.head(final, "backbone.norm_f.weight", H, c["vocab"], eps)


QWEN3_NEXT: dict[str, Any] = dict(hidden=2048, vocab=151936, heads=16, kv_heads=2, head_dim=256, k_heads=16, v_heads=32,
                  k_dim=128, v_dim=128, conv=4, experts=512, top_k=10, moe_inter=512, shared_inter=512, eps=1e-06)


def _gdn(g: _Gen, i: int, h: Node, caches: tuple, c: dict, p: str) -> Node:
    H, nk, nv, dk, dv = c["hidden"], c["k_heads"], c["v_heads"], c["k_dim"], c["v_dim"]
    conv_cache, state_cache = caches
    qkvz = g.linear(h, f"{p}.in_proj_qkvz.weight", 2 * nk * dk + 2 * nv * dv, H)
    ba = g.linear(h, f"{p}.in_proj_ba.weight", 2 * nv, H)
    q, k, v, z = g.split(qkvz, [nk * dk, nk * dk, nv * dv, nv * dv])
    b, a = g.split(ba, [nv, nv])
    conv_dim = 2 * nk * dk + nv * dv
    mixed = g.op("aten.cat.default", ([q, k, v], -1), g.act(conv_dim))
    mixed = g.op("auto_deploy.cuda_cached_causal_conv1d.default",
                 (mixed, g.w(f"{p}.conv1d.weight", BF16, conv_dim, 1, c["conv"]), None,
                  *g.m("batch_info_host", "cu_seqlen", "slot_idx", "use_initial_states"), conv_cache, 1, c["conv"] - 1,
                  1, 1, "zeros"), mixed.type)
    mixed = g.op(SILU, (mixed,), mixed.type)
    q, k, v = g.split(mixed, [nk * dk, nk * dk, nv * dv])
    q, k, v = g.view(q, nk, dk), g.view(k, nk, dk), g.view(v, nv, dv)
    beta = g.op(SIGMOID, (b,), b.type)
    sp = g.op("aten.softplus.default", (g.op(ADD, (a, g.w(f"{p}.dt_bias", BF16, nv)), a.type),), a.type)
    A = g.op(NEG, (g.op(EXP, (g.w(f"{p}.A_log", F32, nv),), TensorType((nv,), F32)),), TensorType((nv,), F32))
    gate = g.op(MUL, (A, sp), g.act(nv, dtype=F32))
    core = g.op("auto_deploy.fla_cached_gated_delta_rule.default",
                (q, k, v, gate, beta, *g.m("batch_info_host", "cu_seqlen", "slot_idx", "use_initial_states"),
                 state_cache, dk ** -0.5), v.type)
    normed = g.op("auto_deploy.triton_rmsnorm_gated", (core, g.view(z, nv, dv), g.w(f"{p}.norm.weight", BF16, dv),
                                                      c["eps"], dv, False), v.type)
    return g.linear(g.view(normed, nv * dv), f"{p}.out_proj.weight", H, nv * dv)


def _gated_attention(g: _Gen, i: int, h: Node, pos: Node, cache: Node, c: dict, p: str) -> Node:
    """Qwen3-Next full attention: q_proj yields query and output gate, q/k norm, partial rope."""
    H, nh, nkv, hd = c["hidden"], c["heads"], c["kv_heads"], c["head_dim"]
    q, gate = g.split(g.view(g.linear(h, f"{p}.q_proj.weight", 2 * nh * hd, H), nh, 2 * hd), [hd, hd])
    k = g.view(g.linear(h, f"{p}.k_proj.weight", nkv * hd, H), nkv, hd)
    v = g.view(g.linear(h, f"{p}.v_proj.weight", nkv * hd, H), nkv, hd)
    q = g.rms(q, f"{p}.q_norm.weight", hd, c["eps"])
    k = g.rms(k, f"{p}.k_norm.weight", hd, c["eps"])
    cos_sin = g.w("_ad_rotary_cos_sin_0", F32, 262144, hd // 4)
    q, k = g.gi(g.op("auto_deploy.flashinfer_rope.default", (q, k, pos, cos_sin, True), g.tup(q.type, k.type)))
    attn = _paged_attention(g, "flashinfer", q, k, v, cache, hd)
    attn = g.op(MUL, (attn, g.op(SIGMOID, (gate,), gate.type)), attn.type)
    return g.linear(g.view(attn, nh * hd), f"{p}.o_proj.weight", H, nh * hd)


def _qwen3_next(g: _Gen, layers: int) -> None:
    c = QWEN3_NEXT
    H, eps = c["hidden"], c["eps"]
    full = [(i + 1) % 4 == 0 for i in range(layers)]
    g.at(None)
    ids, pos = g.batch_inputs()
    g.metadata("slot_idx", "use_initial_states")
    kv_caches: dict[int, Node] = {}  # full-attention layers'
    state_caches: dict[int, tuple[Node, Node]] = {}  # delta-net layers' (conv, recurrent)
    for i in range(layers):
        if full[i]:
            kv_caches[i] = _kv_cache(g, i, c["kv_heads"], c["head_dim"])
        else:
            g.at(i)
            k = g.next("cache")
            state_caches[i] = (g.ph(f"r{k}_conv_state_cache", BF16, 64, 2 * c["k_heads"] * c["k_dim"] + c["v_heads"] * c["v_dim"],
                                    c["conv"] - 1),
                               g.ph(f"r{k}_recurrent_state_cache", F32, 64, c["v_heads"], c["k_dim"], c["v_dim"]))
    _prepare(g, "flashinfer", pos)
    residual, y = g.embed(ids, c["vocab"], H), None
    fused_norm = _mlir("qwen3_next:add_rmsnorm")
    for i in range(layers):
        g.at(i)
        p = f"model.layers.{i}"
        h, residual = _add_norm(g, residual, y, f"{p}.input_layernorm.weight", H, eps, fused_norm)
        g.enter_layer(h)
        if full[i]:
            o = _gated_attention(g, i, h, pos, kv_caches[i], c, f"{p}.self_attn")
        else:
            o = _gdn(g, i, h, state_caches[i], c, f"{p}.linear_attn")
        h, residual = _add_norm(g, residual, o, f"{p}.post_attention_layernorm.weight", H, eps, fused_norm)
        routed = _topk_softmax_moe(g, i, h, c)
        x = routed.args[0]
        shared = g.swiglu_linears(x, f"{p}.mlp.shared_expert", c["shared_inter"], H)
        sgate = g.op(SIGMOID, (g.linear(x, f"{p}.mlp.shared_expert_gate.weight", 1, H),), g.flat(1))
        shared = g.op(MUL, (sgate, shared), shared.type)
        y = g.view(g.op(ADD, (routed, shared), routed.type), H)
    assert y is not None  # layers >= 1
    g.head(y, "model.norm.weight", H, c["vocab"], eps, residual=residual, fused=fused_norm)


# =============================================================================================
# Piecewise CUDA graph sections
# =============================================================================================
#: Ops that AutoDeploy's piecewise split (``compile/piecewise_utils.py``) runs eagerly, outside
#: CUDA graphs: cached attention, SSM, causal conv and delta-rule ops, metadata preparation and
#: the logits gather. Matched on the op name between namespace and overload.
DYNAMIC_OPS = frozenset(
    """flashinfer_attention_mha_with_cache triton_attention_flattened_mha_with_cache triton_paged_mha_with_cache
    torch_cached_attention_with_cache trtllm_attention_mha_with_cache flashinfer_mla_with_cache
    flashinfer_trtllm_mla_with_cache torch_cached_mla_with_cache trtllm_mla_with_cache trtllm_mla_fused_rope_with_cache
    triton_cached_ssm torch_cached_ssm flashinfer_cached_ssm triton_cached_causal_conv1d cuda_cached_causal_conv1d
    fla_cached_delta_rule fla_cached_gated_delta_rule flashinfer_attention_prepare_metadata
    flashinfer_mla_prepare_metadata triton_paged_prepare_metadata trtllm_mla_prepare_metadata
    mamba_ssm_prepare_metadata trtllm_attention_prepare_metadata gather_tokens""".split()
)
SPLIT_GM = "piecewise.split_gm"


def is_dynamic(target: str) -> bool:
    ns, _, rest = target.partition(".")
    return ns == "auto_deploy" and rest.split(".", 1)[0] in DYNAMIC_OPS


def fx_name(target: str) -> str:
    """The name fx gives a node created without one, as ``split_module`` creates its copies.

    ``Graph._target_to_str`` snake-cases the target's ``__name__``, which keeps the overload of
    an OpOverload (``aten.add.Tensor`` → ``add_tensor``, ``auto_deploy.torch_linear_simple.default``
    → ``torch_linear_simple_default``); a packet is its op (``auto_deploy.trtllm_moe_fused`` →
    ``trtllm_moe_fused``, ``aten.to`` → ``to``); functions use their name.
    """
    if target.startswith("<") or "." not in target:
        return target_base(target)
    return sanitize(target.split(".", 1)[1])


def partition_ids(graph: Graph) -> dict[Value, int]:
    """AutoDeploy's piece of every op, in graph order: each dynamic op gets a partition of its own
    and the static ops between two dynamic ops share one. Ids count up by one at each boundary,
    so an empty static run leaves a gap (no ``submod_0`` when the graph starts with a dynamic op)."""
    pid: dict[Value, int] = {}  # keyed by value: readers look up whatever they read
    k = 0
    for node in graph.ops:
        if is_dynamic(_target(node)):
            pid[node] = k = k + 1
            k += 1
        else:
            pid[node] = k
    return pid


class _Piece:
    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.inputs: dict[Value, Node] = {}  # value read from outside → its first reader here
        self.outputs: dict[Value, None] = {}  # values read outside, in the order of first such use


def split_sections(graph: Graph) -> list[Graph]:
    """``piecewise.split_gm`` and its ``submod_N`` children, as ``torch.fx.passes.split_module``
    (``keep_original_order=True``, AutoDeploy's call) builds them from ``graph``.

    As split_module does: a piece's inputs are the values it reads from elsewhere, in order of
    first use, each a placeholder named after the value, weights included (a parameter is passed
    in, not fetched with ``get_attr``); its op nodes are copies *renamed* in the piece's own fx
    namespace (``add_tensor``, ``getitem_1``: split_module does not keep node names); it returns
    the values that later pieces or the output read, a tuple when several. The split graph holds
    the original placeholders, one ``call_module`` per piece, a ``getitem`` per returned value of
    a multi-value piece, and the output; those nodes carry no metadata, so they print ``? : N/A``.

    Copies keep the original's meta (``true_layer``) plus ``meta["source"]``, the name of the node
    in ``graph`` they copy. A weight placeholder takes the layer of its first reader in the piece;
    a ``call_module`` takes its piece's layer when all its ops share one, else None.
    """
    pid = partition_ids(graph)
    pieces: dict[int, _Piece] = {}
    for node in graph.ops:
        pieces.setdefault(pid[node], _Piece()).nodes.append(node)

    def cross(value: Value, user: Node | None) -> None:
        defined, used = pid.get(value), None if user is None else pid[user]
        if defined != used:
            if defined is not None:
                pieces[defined].outputs.setdefault(value)
            if used is not None:
                assert user is not None  # only a reader has a piece
                pieces[used].inputs.setdefault(value, user)

    for node in graph.nodes:
        if node.kind != PLACEHOLDER:
            for v in node.inputs:
                cross(v, node if node.kind == OP else None)

    subs = [_piece_graph(f"{SPLIT_GM}.submod_{k}", piece) for k, piece in pieces.items()]

    base, names = Graph(SPLIT_GM), Namespace()
    env: dict[Value, Value] = {}
    for ph in graph.placeholders:
        env[ph] = _copy(base, names, ph, ph.name, ())
    for k, piece in pieces.items():
        for v in piece.inputs:
            if isinstance(v, Weight) and v not in env:
                names.create_name(v.name)  # the get_attr node: no line, but it takes the name
                env[v] = base.weight(v.name, v.type)
        name = names.create_name(f"submod_{k}")
        call = base.append(Node(OP, name, name, tuple(env[v] for v in piece.inputs)))
        layers = {n.meta.get("true_layer") for n in piece.nodes}
        call.meta["true_layer"] = layers.pop() if len(layers) == 1 else None
        if len(piece.outputs) == 1:
            env[next(iter(piece.outputs))] = call
        elif piece.outputs:
            for i, v in enumerate(piece.outputs):
                env[v] = _copy(base, names, v, "getitem", (call, i), GETITEM, UNKNOWN)
    out = graph.output
    assert out is not None  # a generated graph ends with its output
    base.append(Node(OUTPUT, names.create_name("output"), args=map_values(out.args, env.__getitem__)))
    return [base, *subs]


def _piece_graph(name: str, piece: _Piece) -> Graph:
    sub, names = Graph(name), Namespace()
    env: dict[Value, Value] = {}
    for v, reader in piece.inputs.items():
        env[v] = ph = _copy(sub, names, v, v.name, ())
        if isinstance(v, Weight):
            ph.meta["true_layer"] = reader.meta.get("true_layer")
    for node in piece.nodes:
        env[node] = _copy(sub, names, node, fx_name(_target(node)), map_values(node.args, env.__getitem__), node.target)
    outs = tuple(env[v] for v in piece.outputs)
    sub.append(Node(OUTPUT, names.create_name("output"), args=(outs[0] if len(outs) == 1 else outs,)))
    return sub


def _copy(graph: Graph, names: Namespace, src: Value, name: str, args: tuple, target: str | None = None,
          type=None) -> Node:
    """A placeholder (no target) or op standing for ``src``, named in ``names`` from ``name``."""
    node = Node(PLACEHOLDER if target is None else OP, names.create_name(name), target, args,
                type=src.type if type is None else type)
    node.meta.update(src.meta)
    node.meta["source"] = src.name
    return graph.append(node)


# =============================================================================================
# Driver
# =============================================================================================
#: arch → (builder, transform, stage, file counter, section name)
_ARCH = {
    "deepseek_v3": (lambda g, n: _deepseek_v3(g, n, False), "compile_model", "compile", 85, "monolithic.model"),
    "deepseek_v3_prefusion": (lambda g, n: _deepseek_v3(g, n, True), "match_moe_pattern", "pattern_matcher", 12,
                              "(root)"),
    "llama": (_llama, "compile_model", "compile", 81, "monolithic.model"),
    "qwen3_moe": (_qwen3_moe, "compile_model", "compile", 83, "monolithic.model"),
    "nemotron_h": (_nemotron_h, "compile_model", "compile", 84, "monolithic.model"),
    "qwen3_next": (_qwen3_next, "compile_model", "compile", 84, "monolithic.model"),
    "eager": (lambda g, n: gen_eager.build(g, n, g.variant), "export_to_gm", "export", 1, "(root)"),
}


def generate(arch: str, layers: int | None = None, tokens: int = 8, symbolic: bool = False, seed: int | None = None,
             shuffle: bool = False, piecewise: bool = False, pattern: str | None = None,
             constants: bool = False, variant: int = 0) -> Module:
    """Build the dump of ``arch`` as a Module; nodes carry ``meta["true_layer"]``.

    ``seed`` permutes the name suffixes of generic ops (``view_3`` ↔ ``view_17``) so that no
    consumer can lean on them; ``shuffle`` also reorders independent nodes inside each layer
    (a different valid topological order). ``piecewise`` adds the sections of a compile with
    piecewise CUDA graphs: ``piecewise.split_gm`` and its ``submod_N`` pieces, split from
    ``monolithic.model`` at the dynamic ops (``split_sections``). ``pattern`` sets the block of
    each Nemotron-H layer (M Mamba2, E MoE, * attention), repeated to ``layers``. ``constants``
    adds every layer's constant ops (``_constant_ops``). ``variant`` picks the structures of an
    ``eager`` graph (:mod:`layerc.backends.synth.eager`).
    """
    if arch not in _ARCH:
        raise ValueError(f"unknown arch '{arch}' (choose from {', '.join(ARCHES)})")
    build, transform, stage, counter, section = _ARCH[arch]
    layers = DEFAULT_LAYERS[arch] if layers is None else layers
    if layers < 1 or tokens < 1:
        raise ValueError("layers and tokens must be positive")
    if piecewise and section != "monolithic.model":
        raise ValueError(f"'{arch}' is a {stage}-stage dump: piecewise sections exist only after compile_model")
    if pattern is not None and (arch != "nemotron_h" or not pattern or set(pattern) - set("ME*")):
        raise ValueError("pattern applies to nemotron_h: a string of M (Mamba2), E (MoE) and * (attention)")
    g = _Gen(section, tokens, symbolic, constants)
    g.pattern, g.variant = pattern, variant
    build(g, layers)
    graph = g.b.graph
    if seed is not None or shuffle:
        graph = randomized(graph, 0 if seed is None else seed, shuffle)
    return module(transform, stage, [graph, *(split_sections(graph) if piecewise else ())], counter)


def truth(mod: Module) -> dict[str, int | None]:
    """``{node name: true layer}`` of the main graph, in graph order."""
    return {n.name: n.meta.get("true_layer") for n in mod.main_graph().nodes}


def randomized(graph: Graph, seed: int, shuffle: bool) -> Graph:
    """A copy of ``graph`` with generic names permuted and, if ``shuffle``, layers reordered
    (each node's ``meta`` copied, so a test can tell which node each copy is)."""
    rng = random.Random(seed)
    order = list(graph.nodes)
    if shuffle:
        order = []
        run: list[Node] = []
        for node in graph.nodes:
            if run and (node.kind != OP or run[0].kind != OP
                        or node.meta.get("true_layer") != run[0].meta.get("true_layer")):
                order += _random_topo(run, rng)
                run = []
            run.append(node)
        order += _random_topo(run, rng)
    names = {n: n.name for n in order}
    groups: dict[str, list[Node]] = {}
    for n in order:
        if n.kind == OP and target_base(_target(n)) in GENERIC and n.name.startswith(target_base(_target(n))):
            groups.setdefault(target_base(_target(n)), []).append(n)
    for nodes in groups.values():
        shuffled = [names[n] for n in nodes]
        rng.shuffle(shuffled)
        names.update(zip(nodes, shuffled))
    out = Graph(graph.name)
    new: dict = {w: out.weight(w.name, w.type) for w in graph.weights.values()}
    for n in order:
        copy = Node(n.kind, names[n], n.target, map_values(n.args, new.__getitem__), type=n.type)
        copy.meta.update(n.meta)
        new[n] = out.append(copy)
    return out


def _random_topo(run: list[Node], rng: random.Random) -> list[Node]:
    """A random topological order of ``run`` (dependencies outside it are already placed)."""
    inside = set(run)
    pending = {n: sum(1 for v in n.inputs if v in inside) for n in run}
    ready = [n for n in run if pending[n] == 0]
    out: list[Node] = []
    while ready:
        n = ready.pop(rng.randrange(len(ready)))
        out.append(n)
        for user in n.users:
            if user in pending:
                pending[user] -= 1
                if pending[user] == 0:
                    ready.append(user)
    assert len(out) == len(run), "cycle in a generated graph"
    return out


def dump_name(mod: Module) -> str:
    return f"{mod.counter:03d}_{mod.stage}_{mod.transform}.txt"


def write(arch: str, outdir: str | Path, layers: int | None = None, tokens: int = 8, symbolic: bool = False,
          seed: int | None = None, shuffle: bool = False, with_truth: bool = True, piecewise: bool = False,
          constants: bool = False, variant: int = 0) -> Path:
    """Write ``NNN_<stage>_<transform>.txt`` (and ``..._truth.json``, for ``monolithic.model``) into
    ``outdir``; returns the dump path."""
    mod = generate(arch, layers, tokens, symbolic, seed, shuffle, piecewise, constants=constants, variant=variant)
    path = output_dir(outdir) / dump_name(mod)
    write_atomic(path, print_module(mod))
    if with_truth:
        write_atomic(path.with_name(path.stem + "_truth.json"), json.dumps(truth(mod), indent=1) + "\n")
    return path
