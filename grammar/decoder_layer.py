"""One decoder layer of a ``ModelSpec`` as a graph of the IR, with every value's real shape.

``build_layer(spec, phase, seq_len, batch)`` gives a Module with one Graph whose ops are what a
transformers decoder layer computes, op by op: aten ops (``aten.linear.default``,
``aten.rms_norm.default``, ``aten.matmul.default``, ``aten.add.Tensor``...) and a few composite
ops in the ``layerc`` namespace that inference engines run as one kernel each:

``layerc.rope(x, cos, sin, interleaved)``
    rotary embedding of one tensor ``[B, heads, S, d]`` (cos/sin ``[B, S, d]``).
``layerc.kv_cache_update(cache, [new...], start)``
    writes the new keys (or values, or MLA latents: the parts concatenated on the last dim) at
    positions ``start..start+S`` of ``cache [B, kv_heads, L, d]``; its result is the whole cache.
``layerc.attention(q, k, v, scale, causal)``
    fused (flash) attention, ``q [B, Hq, Sq, d]``, ``k [B, Hkv, L, d]`` (grouped-query when
    ``Hkv < Hq``); ``v`` None means the values are the first ``dv`` channels of ``k`` (MLA's
    latent cache), ``dv`` being the result's last dim. Queries sit at the last ``Sq`` positions.
``layerc.softmax(x, scale, causal, q_len)``
    ``softmax(scale * x)`` over the last dim, with the causal mask for ``q_len`` queries at the
    end of the keys (rows are ``(group, query)`` pairs, query fastest).
``layerc.topk_router(logits, bias, kind, top_k, n_group, topk_group, normalize, scale)``
    → (weights ``[T, k]`` float32, expert ids ``[T, k]`` int64).
``layerc.moe_experts(x, ids, weights, w_gate_up [E, 2I, H], w_down [E, H, I])``
    the routed experts, fused (two grouped GEMMs and the activation), summed with the weights.

``phase="decode"``: one new token per sequence over a KV cache of ``seq_len`` tokens;
``phase="prefill"``: ``seq_len`` new tokens, no cache before them. ``attention="eager"`` spells
attention out as transformers' eager path does (scores matmul, softmax, values matmul; keys and
values grouped, never repeated); ``"fused"`` is one flash-attention op. MLA decodes in the absorbed
form (queries projected into the latent space, attention over the 576-wide latent cache, as
FlashMLA does) and prefills in the expanded form (``kv_b_proj`` then ordinary attention).

Nodes carry ``meta['label']`` (``q_proj``, ``rope_q``, ``attention``...: the names tables and
traces show) and ``meta['module']`` (the transformers submodule, when there is one); weights carry
their parameter path in ``target``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from layerc.grammar.hf_config import MAX_SIZE, ModelSpec
from layerc.ir.builder import GraphBuilder, module
from layerc.ir.diagnostics import LayercError
from layerc.ir.graph import Module, Node, Value
from layerc.ir.types import TensorType, TupleType, element_bytes

PHASES = ("decode", "prefill")
ATTENTION = ("fused", "eager")
#: ``--dtype`` values: the model's dtype, or fp8 weights (GEMMs at the fp8 peak; activations bf16).
WEIGHT_DTYPES = ("model", "bfloat16", "float16", "float32", "fp8")
FP8 = "torch.float8_e4m3fn"
#: The most bytes one tensor of the layer may have: byte offsets are 64-bit, no device addresses more.
MAX_TENSOR_BYTES = 2**63 - 1

LINEAR = "aten.linear.default"
RMS_NORM = "aten.rms_norm.default"
MATMUL = "aten.matmul.default"
ADD, MUL = "aten.add.Tensor", "aten.mul.Tensor"
VIEW, TRANSPOSE, RESHAPE = "aten.view.default", "aten.transpose.int", "aten.reshape.default"
SLICE, EXPAND, CAT = "aten.slice.Tensor", "aten.expand.default", "aten.cat.default"
GETITEM = "<built-in function getitem>"
ROPE, KV_UPDATE, ATTENTION_OP = "layerc.rope.default", "layerc.kv_cache_update.default", "layerc.attention.default"
SOFTMAX, ROUTER, EXPERTS = "layerc.softmax.default", "layerc.topk_router.default", "layerc.moe_experts.default"
ACT = {"silu": "aten.silu.default", "gelu": "aten.gelu.default", "gelu_pytorch_tanh": "aten.gelu.default", "relu": "aten.relu.default"}


@dataclass(frozen=True)
class LayerShape:
    phase: str
    seq_len: int
    batch: int

    @property
    def new_tokens(self) -> int:
        """Tokens per sequence this step computes."""
        return 1 if self.phase == "decode" else self.seq_len

    @property
    def past(self) -> int:
        return self.seq_len if self.phase == "decode" else 0

    @property
    def kv_len(self) -> int:
        return self.past + self.new_tokens


def build_layer(spec: ModelSpec, phase: str = "decode", seq_len: int = 256, batch: int = 1, layer: int | None = None,
                attention: str = "fused", dtype: str = "model") -> Module:
    """The decoder layer ``layer`` (default ``spec.default_layer()``) as a Module."""
    if phase not in PHASES:
        raise LayercError(f"phase must be one of {', '.join(PHASES)}, not {phase!r}")
    if attention not in ATTENTION:
        raise LayercError(f"attention must be one of {', '.join(ATTENTION)}, not {attention!r}")
    if dtype not in WEIGHT_DTYPES:
        raise LayercError(f"dtype must be one of {', '.join(WEIGHT_DTYPES)}, not {dtype!r}")
    if not (1 <= seq_len <= MAX_SIZE and 1 <= batch <= MAX_SIZE):
        raise LayercError(f"seq-len and batch must be from 1 to {MAX_SIZE} (got {seq_len} and {batch})")
    layer = spec.default_layer() if layer is None else layer
    if not 0 <= layer < spec.num_layers:
        raise LayercError(f"layer {layer} does not exist: {spec.name} has layers 0..{spec.num_layers - 1}")
    shape = LayerShape(phase, seq_len, batch)
    b = _Builder(spec, shape, attention, dtype, layer)
    out = b.build()
    b.g.output(out)
    graph = b.g.graph
    graph.meta.update({"model": spec.name, "model_type": spec.model_type, "phase": phase, "seq_len": seq_len,
                       "batch": batch, "layer": layer, "attention": attention, "kv_len": shape.kv_len,
                       "dtype": b.act_dtype, "weight_dtype": b.w_dtype,
                       "mlp": "moe" if spec.is_moe_layer(layer) else "dense"})
    mod = module("decoder_layer", phase, [graph])
    mod.meta.update(graph.meta)
    mod.source = spec.path  # errors of later passes name the config
    return mod


class _Builder:
    def __init__(self, spec: ModelSpec, shape: LayerShape, attention: str, dtype: str, layer: int):
        self.s, self.shape, self.attention, self.layer = spec, shape, attention, layer
        self.g = GraphBuilder(f"decoder_layer_{layer}")
        self.act_dtype = "torch.bfloat16" if dtype == "fp8" else spec.dtype if dtype == "model" else f"torch.{dtype}"
        self.w_dtype = FP8 if dtype == "fp8" else self.act_dtype
        self.B, self.S = shape.batch, shape.new_tokens

    # -- helpers ------------------------------------------------------------------------------
    def t(self, *dims: int, dtype: str | None = None) -> TensorType:
        t = TensorType(tuple(int(d) for d in dims), dtype or self.act_dtype)
        self.check_size(t)
        return t

    def check_size(self, t: TensorType) -> None:
        """No tensor of the layer past 2**63 bytes (64-bit byte offsets: no device addresses more),
        so that every count the cost pass makes from the shapes stays exact and bounded; the error
        points at the config key that gives the largest dim (the step's sizes, when no key does)."""
        numel, shape = cast(int, t.numel), cast("tuple[int, ...]", t.shape)  # t() gives concrete dims
        size = numel * (element_bytes(t.dtype) or 1)
        if size <= MAX_TENSOR_BYTES:
            return
        big = max(shape, default=0)
        key = next((k for k, v in (self.s.config or {}).items() if v == big and isinstance(v, int) and not isinstance(v, bool)), None)
        message = (f"the layer would have a {t.shape_text()} {t.dtype.removeprefix('torch.')} tensor (at seq-len "
                   f"{self.shape.seq_len}, batch {self.shape.batch}): more than the 2**63 bytes a device addresses")
        if key is not None:
            raise self.s.error(f"{message}; '{key}' is {big}", key)
        if self.s.path is not None:
            raise self.s.error(message)
        raise LayercError(message)

    def w(self, fqn: str, *dims: int, dtype: str | None = None) -> Value:
        weight = self.g.weight(fqn, self.t(*dims, dtype=dtype or self.w_dtype))
        weight.target = fqn
        return weight

    def op(self, label: str | None, target: str, args: tuple, type, module: str | None = None) -> Node:
        node = self.g.op(target, args, type, name=label)
        if label:
            node.meta["label"] = label
        if module:
            node.meta["module"] = module
        return node

    def dims(self, v: Value) -> tuple[int, ...]:
        """The dims of a value of the layer: each is a tensor that ``t()`` typed."""
        return cast("tuple[int, ...]", cast(TensorType, v.type).shape)

    def dtype(self, v: Value) -> str:
        return cast(TensorType, v.type).dtype

    def view(self, x: Value, *dims: int) -> Node:
        return self.op(None, VIEW, (x, list(dims)), self.t(*dims, dtype=self.dtype(x)))

    def reshape(self, x: Value, *dims: int) -> Node:
        return self.op(None, RESHAPE, (x, list(dims)), self.t(*dims, dtype=self.dtype(x)))

    def transpose(self, x: Value, a: int, b: int) -> Node:
        d = list(self.dims(x))
        d[a], d[b] = d[b], d[a]
        return self.op(None, TRANSPOSE, (x, a, b), self.t(*d, dtype=self.dtype(x)))

    def slice(self, x: Value, start: int, end: int) -> Node:
        d = list(self.dims(x))
        d[-1] = end - start
        return self.op(None, SLICE, (x, -1, start, end), self.t(*d, dtype=self.dtype(x)))

    def linear(self, label: str, x: Value, fqn: str, out: int, bias: bool = False, dtype: str | None = None) -> Node:
        d = self.dims(x)
        args: tuple = (x, self.w(f"{fqn}.weight", out, d[-1]))
        if bias:
            args += (self.w(f"{fqn}.bias", out, dtype=self.act_dtype),)
        return self.op(label, LINEAR, args, self.t(*d[:-1], out, dtype=dtype), fqn)

    def norm(self, label: str, x: Value, fqn: str) -> Node:
        d = self.dims(x)
        return self.op(label, RMS_NORM, (x, [d[-1]], self.w(f"{fqn}.weight", d[-1], dtype=self.act_dtype), self.s.eps),
                       self.t(*d), fqn)

    def rope(self, label: str, x: Value, interleaved: bool = False) -> Node:
        return self.op(label, ROPE, (x, self.cos, self.sin, interleaved), self.t(*self.dims(x)))

    def binary(self, label: str, target: str, a: Value, b: Value, module: str | None = None) -> Node:
        return self.op(label, target, (a, b), self.t(*self.dims(a)), module)

    # -- the layer ----------------------------------------------------------------------------
    def build(self) -> Node:
        s, B, S = self.s, self.B, self.S
        rope_dim = s.mla.qk_rope_head_dim if s.mla else s.head_dim
        h = self.g.placeholder("hidden_states", self.t(B, S, s.hidden))
        self.cos = self.g.placeholder("cos", self.t(B, S, rope_dim))
        self.sin = self.g.placeholder("sin", self.t(B, S, rope_dim))
        if s.mla:  # one latent cache row per token: the normalized kv latent, then the roped key part
            self.caches = {"kv": self.g.placeholder("kv_latent_cache", self.t(B, 1, self.shape.kv_len, s.mla.kv_lora_rank + rope_dim))}
        else:
            self.caches = {n: self.g.placeholder(f"{n}_cache", self.t(B, s.kv_heads, self.shape.kv_len, s.head_dim)) for n in "kv"}
        x = self.norm("input_layernorm", h, "input_layernorm")
        attn = self.mla(x) if s.mla else self.gqa(x)
        h = self.binary("residual_attn", ADD, h, attn)
        x = self.norm("post_attention_layernorm", h, "post_attention_layernorm")
        mlp = self.moe(x) if s.is_moe_layer(self.layer) else self.mlp(x, "mlp", s.intermediate, "")
        return self.binary("residual_mlp", ADD, h, mlp)

    def gqa(self, x: Node) -> Node:
        s, B, S = self.s, self.B, self.S
        D, Hq, Hkv = s.head_dim, s.heads, s.kv_heads
        qkv = []
        for name, heads in (("q", Hq), ("k", Hkv), ("v", Hkv)):
            y = self.linear(f"{name}_proj", x, f"self_attn.{name}_proj", heads * D, s.attention_bias)
            y = self.view(y, B, S, heads, D)
            if s.qk_norm and name != "v":
                y = self.norm(f"{name}_norm", y, f"self_attn.{name}_norm")
            qkv.append(self.transpose(y, 1, 2))
        q, k, v = qkv
        q = self.rope("rope_q", q)
        k = self.rope("rope_k", k)
        k_all = self.cache_write("k_cache_write", "k", [k])
        v_all = self.cache_write("v_cache_write", "v", [v])
        out = self.attend(q, k_all, v_all, D)
        out = self.reshape(self.transpose(out, 1, 2), B, S, Hq * D)
        return self.linear("o_proj", out, "self_attn.o_proj", s.hidden, s.o_proj_bias)

    def cache_write(self, label: str, name: str, parts: list[Node]) -> Node:
        cache = self.caches[name]
        return self.op(label, KV_UPDATE, (cache, parts, self.shape.past), self.t(*self.dims(cache)))

    def attend(self, q: Node, k: Node, v: Node | None, dv: int) -> Node:
        """Attention of ``q [B, Hq, S, d]`` over ``k [B, Hkv, L, d]``: ``[B, Hq, S, dv]``."""
        B, S, L = self.B, self.S, self.shape.kv_len
        Hq, Hkv = self.dims(q)[1], self.dims(k)[1]
        causal = True
        if self.attention == "fused":
            return self.op("attention", ATTENTION_OP, (q, k, v, self.s.softmax_scale, causal), self.t(B, Hq, S, dv))
        g = Hq // Hkv  # query heads per KV head: grouped as extra rows, keys and values read once
        qg = self.view(q, B, Hkv, g * S, self.dims(q)[-1])
        scores = self.op("attn_qk", MATMUL, (qg, self.transpose(k, -1, -2)), self.t(B, Hkv, g * S, L))
        probs = self.op("attn_softmax", SOFTMAX, (scores, self.s.softmax_scale, causal and S > 1, S), self.t(B, Hkv, g * S, L))
        values = v if v is not None else self.slice(k, 0, dv)
        out = self.op("attn_pv", MATMUL, (probs, values), self.t(B, Hkv, g * S, dv))
        return self.view(out, B, Hq, S, dv)

    def mla(self, x: Node) -> Node:
        s, m, B, S = self.s, self.s.mla, self.B, self.S
        assert m is not None  # called only for an MLA spec
        H, P, R, C, V = s.heads, m.qk_nope_head_dim, m.qk_rope_head_dim, m.kv_lora_rank, m.v_head_dim
        if m.q_lora_rank:
            q = self.linear("q_a_proj", x, "self_attn.q_a_proj", m.q_lora_rank, s.attention_bias)
            q = self.norm("q_a_layernorm", q, "self_attn.q_a_layernorm")
            q = self.linear("q_b_proj", q, "self_attn.q_b_proj", H * (P + R))
        else:
            q = self.linear("q_proj", x, "self_attn.q_proj", H * (P + R))
        q = self.transpose(self.view(q, B, S, H, P + R), 1, 2)
        q_nope, q_pe = self.slice(q, 0, P), self.slice(q, P, P + R)
        q_pe = self.rope("rope_q", q_pe, m.rope_interleave)
        kv = self.linear("kv_a_proj_with_mqa", x, "self_attn.kv_a_proj_with_mqa", C + R, s.attention_bias)
        c_kv = self.norm("kv_a_layernorm", self.slice(kv, 0, C), "self_attn.kv_a_layernorm")
        k_pe = self.rope("rope_k", self.view(self.slice(kv, C, C + R), B, 1, S, R), m.rope_interleave)
        latent = self.cache_write("kv_cache_write", "kv", [self.view(c_kv, B, 1, S, C), k_pe])
        if self.shape.phase == "decode":  # absorbed: attention over the latent cache
            w_kv_b = self.view(self.w("self_attn.kv_b_proj.weight", H * (P + V), C), H, P + V, C)
            q_lat = self.op("q_absorb", MATMUL, (q_nope, self.slice_dim1(w_kv_b, 0, P)), self.t(B, H, S, C), "self_attn.kv_b_proj")
            q_cat = self.op("q_cat", CAT, ([q_lat, q_pe], -1), self.t(B, H, S, C + R))
            o_lat = self.attend(q_cat, latent, None, C)
            w_uv = self.transpose(self.slice_dim1(w_kv_b, P, P + V), 1, 2)
            out = self.op("o_absorb", MATMUL, (o_lat, w_uv), self.t(B, H, S, V), "self_attn.kv_b_proj")
        else:  # expanded: per-head keys and values from the fresh latents
            kv_b = self.linear("kv_b_proj", c_kv, "self_attn.kv_b_proj", H * (P + V))
            kv_b = self.transpose(self.view(kv_b, B, S, H, P + V), 1, 2)
            k_nope, v = self.slice(kv_b, 0, P), self.slice(kv_b, P, P + V)
            k_pe_all = self.op(None, EXPAND, (k_pe, [B, H, S, R]), self.t(B, H, S, R))
            k = self.op("k_cat", CAT, ([k_nope, k_pe_all], -1), self.t(B, H, S, P + R))
            q = self.op("q_cat", CAT, ([q_nope, q_pe], -1), self.t(B, H, S, P + R))
            out = self.attend(q, k, v, V)
        out = self.reshape(self.transpose(out, 1, 2), B, S, H * V)
        return self.linear("o_proj", out, "self_attn.o_proj", s.hidden, s.o_proj_bias)

    def slice_dim1(self, x: Value, start: int, end: int) -> Node:
        d = list(self.dims(x))
        d[1] = end - start
        return self.op(None, SLICE, (x, 1, start, end), self.t(*d, dtype=self.dtype(x)))

    def mlp(self, x: Node, fqn: str, inter: int, prefix: str) -> Node:
        gate = self.linear(f"{prefix}gate_proj", x, f"{fqn}.gate_proj", inter, self.s.mlp_bias)
        up = self.linear(f"{prefix}up_proj", x, f"{fqn}.up_proj", inter, self.s.mlp_bias)
        act = self.op(f"{prefix}act", ACT[self.s.activation], self._act_args(gate), self.t(*self.dims(gate)), f"{fqn}.act_fn")
        y = self.binary(f"{prefix}act_mul", MUL, act, up)
        return self.linear(f"{prefix}down_proj", y, f"{fqn}.down_proj", self.s.hidden, self.s.mlp_bias)

    def _act_args(self, x: Node) -> tuple:
        return (x, "tanh") if self.s.activation == "gelu_pytorch_tanh" else (x,)

    def moe(self, x: Node) -> Node:
        s, e, B, S = self.s, self.s.moe, self.B, self.S
        assert e is not None  # called only for a MoE layer
        T, H, E, I = B * S, s.hidden, e.experts, e.expert_intermediate
        flat = self.view(x, T, H)
        logits_dtype = "torch.float32" if e.router == "sigmoid_group" else None
        logits = self.linear("router", flat, "mlp.gate", E, dtype=logits_dtype)
        if e.router == "sigmoid_group":
            bias = self.w("mlp.gate.e_score_correction_bias", E, dtype="torch.float32")
        else:
            bias = None
        routed_type = TupleType((self.t(T, e.top_k, dtype="torch.float32"), self.t(T, e.top_k, dtype="torch.int64")))
        routed = self.op("router_topk", ROUTER,
                         (logits, bias, e.router, e.top_k, e.n_group, e.topk_group, e.norm_topk_prob, e.routed_scaling_factor),
                         routed_type, "mlp.gate")
        weights = self.op(None, GETITEM, (routed, 0), routed_type.elements[0])
        ids = self.op(None, GETITEM, (routed, 1), routed_type.elements[1])
        experts = self.op("experts", EXPERTS, (flat, ids, weights, self.w("mlp.experts.gate_up_proj", E, 2 * I, H),
                                               self.w("mlp.experts.down_proj", E, H, I)), self.t(T, H), "mlp.experts")
        out = self.view(experts, B, S, H)
        if e.shared_intermediate:
            shared = self.mlp(x, "mlp.shared_experts", e.shared_intermediate, "shared_")
            out = self.binary("moe_add", ADD, out, shared)
        return out
