"""Eager decoder graphs, as ``torch.export`` prints a transformers model: aten ops, one module call
after another, masks and rotary tables computed once before the layers.

Where a layer begins and ends is decided by structures that vary across architectures, and each
variant here draws one of each from a seeded generator (``features``):

- the norm: RMSNorm with or without the casts around it, Gemma's ``1 + weight``, LayerNorm, or
  one without weights (``bare``);
- pre-norm or post-norm sublayers (post-norm: the layer ends with a norm, no final norm, an alias
  hands the last layer's output to the head);
- what follows the embedding: nothing, a scale, a dropout, a position embedding and a dropout,
  or the model's own weight-less norm (nanochat's, the same every layer opens with);
- layer kinds: attention with a full or a sliding-window mask, or a state-space mixer that reads
  neither (a hybrid); a mask one layer alone reads is still the model's;
- rotary tables computed once, reshaped inside each attention layer, or cast by each layer from
  the cast the layer before it made (``chained``, as DeepSeek-V2 and Llama-4 hand them on);
- a dense MLP or a routed MoE whose weight-less tail (routing weights times expert outputs, the
  sum) closes the layer;
- nodes without users (``_assert_tensor_metadata``) in the model and in every layer;
- a layer-closing scale: a per-layer scalar weight after the residual add, or a constant
  multiplier on the sublayer's output before it;
- the residual cast a layer makes of its input before its norm;
- a side state a layer hands the next one beside the residual stream;
- a looped stack: the same layers (the same weights) run again on their own output, the model
  mixing the input back in between passes (Dory's, HRM's injection);
- a reshape after each layer's closing add (OPT's), or one of the model's after the stack (GPT's);
- states the model returns beside the logits, taken from each layer's input (XLNet's memories).

Every op carries ``meta['true_layer']``: None outside the layers, as ``nn_module_stack`` says.
"""

from __future__ import annotations

import random
from typing import Any

from layerc.ir.constants import DType
from layerc.ir.graph import Node
from layerc.ir.types import Dim, OpaqueType, TensorType, Type

BF16, F32, I64, BOOL = "torch.bfloat16", "torch.float32", "torch.int64", "torch.bool"
HIDDEN, HEADS, HEAD_DIM, INTER, VOCAB, EXPERTS = 64, 4, 16, 128, 256, 4
NONE = OpaqueType("NoneType")


def _shape(t: Type) -> tuple[Dim, ...]:
    """A generated value's shape: its type is always a tensor's, printed with a shape."""
    assert isinstance(t, TensorType) and t.shape is not None
    return t.shape

CHOICES: dict[str, tuple] = {
    "norm": ("rms_cast", "rms", "gemma_rms", "layer_norm", "bare"),
    "post_norm": (False, True),
    "embed_tail": ("none", "scale", "dropout", "positions", "norm"),
    "mixers": ("attention", "hybrid", "sliding"),
    "rope": (False, True, "chained"),
    "mlp": ("dense", "moe"),
    "side_effects": (False, True),
    "closing_scale": ("none", "weight", "constant"),
    "residual_cast": (False, True),
    "side_state": (False, True),
    "loops": (1, 1, 2),
    "reshape": ("none", "layer", "stack"),
    "returns_states": (False, True),
    "mix_between_passes": (False, True),
}


def features(variant: int) -> dict[str, Any]:
    """The structures of ``variant`` (0: the plainest Llama-like stack)."""
    if variant == 0:
        return {k: v[0] for k, v in CHOICES.items()}
    rng = random.Random(variant)
    f = {k: rng.choice(v) for k, v in CHOICES.items()}
    if f["post_norm"] and f["norm"] == "bare":  # a post-norm stack's norms have weights (BERT, OPT)
        f["norm"] = "layer_norm"
    if f["loops"] > 1:  # a looped stack's ends are not aligned with its neighbours (slice_cuts)
        f["reshape"] = "none"
        f["embed_tail"] = "none" if f["embed_tail"] == "norm" else f["embed_tail"]
    if f["mixers"] == "hybrid":
        # Whose a reshape after the stack's last residual add is (the layer's, as OPT's; the
        # model's, as GPT's) is known from an earlier layer of its kind. A hybrid's last layer
        # may be the only one of its kind, and then the two are the same graph.
        f["reshape"] = "none"
    return f


def layer_kinds(f: dict[str, Any], layers: int, variant: int) -> list[str]:
    """Per layer: ``full`` or ``sliding`` attention, or ``ssm``."""
    rng = random.Random(variant * 7919 + layers)
    if f["mixers"] == "attention":
        return ["full"] * layers
    if f["mixers"] == "sliding":  # Gemma-2-like alternation: a mask each kind of layer reads
        return ["sliding" if i % 2 == 0 else "full" for i in range(layers)]
    return [rng.choice(("full", "ssm", "ssm")) for _ in range(layers)]


def build(g, layers: int, variant: int = 0) -> None:
    """The graph of ``variant`` with ``layers`` decoder layers into ``g`` (a gen_dump ``_Gen``)."""
    f = features(variant)
    if f["embed_tail"] == "norm" and (f["norm"] != "bare" or f["post_norm"]):
        # the model's weight-less norm is told from a layer's opening by the layers opening with
        # the same norm (nanochat); before a layer that opens with its weighted norm's own op it
        # is the layer's opening for all the graph shows
        f = dict(f, embed_tail="none")
    if layers < 2:  # what only a second layer shows (how layers open and close) stays out
        f = dict(f, reshape="none", embed_tail="none" if f["embed_tail"] == "norm" else f["embed_tail"],
                 loops=1)  # one layer run twice feeds itself: its passes show no boundary
    kinds = layer_kinds(f, layers, variant)
    B, S = (g.B, g.S) if g.symbolic else (1, 8)
    act = TensorType((B, S, HIDDEN), BF16)
    g.at(None)
    ids = g.ph("input_ids", I64, 1, S)
    if f["side_effects"]:
        g.op("aten._assert_tensor_metadata.default", (ids, None, None, DType("int64")), NONE)
    h = g.op("aten.embedding.default", (g.w("model.embed_tokens.weight", BF16, VOCAB, HIDDEN), ids), act)
    if f["embed_tail"] == "scale":
        h = g.op("aten.mul.Tensor", (h, HIDDEN ** 0.5), act)
    elif f["embed_tail"] == "dropout":
        h = g.op("aten.dropout.default", (h, 0.0, False), act)
    elif f["embed_tail"] == "norm":
        h = _norm(g, "bare", h, "model.embed_norm", act)
    elif f["embed_tail"] == "positions":
        positions = g.op("aten.arange.default", (S,), TensorType((S,), I64))
        wpe = g.op("aten.embedding.default", (g.w("model.embed_positions.weight", BF16, 64, HIDDEN), positions), act)
        h = g.op("aten.dropout.default", (g.op("aten.add.Tensor", (h, wpe), act), 0.0, False), act)
    masks: dict[str, Node] = {kind: _mask(g, kind, S) for kind in ("full", "sliding") if kind in kinds}
    rope = list(_rotary(g, S)) if f["rope"] and any(k != "ssm" for k in kinds) else None
    side, states, embedded = None, [], h
    for loop in range(f["loops"]):
        if loop and f["mix_between_passes"]:  # the model's: a weight-less norm of the pass's output, plus the input
            g.at(None)
            h = g.op("aten.add.Tensor", (_norm(g, "bare", h, "", act), embedded), act)
        for i, kind in enumerate(kinds):
            if f["returns_states"]:  # the model's, computed as each layer begins
                g.at(None)
                states.append(g.op("aten.detach.default", (g.op("aten.slice.Tensor", (h, 1, -4, S), act),), act))
            g.at(i)
            h, side = _layer(g, f, i, kind, h, masks.get(kind), rope, side, act)
    g.at(None)
    if f["reshape"] == "stack":
        h = g.op("aten.view.default", (h, [B, S, HIDDEN]), act)
    if f["post_norm"]:
        h = g.op("aten.alias.default", (h,), act)
    else:
        h = _norm(g, f["norm"], h, "model.norm", act)
    logits = g.op("aten.linear.default", (h, g.w("lm_head.weight", BF16, VOCAB, HIDDEN)), TensorType((B, S, VOCAB), BF16))
    g.b.output((logits, *states) if states else logits)  # one argument, as fx prints it: the results


def _mask(g, kind: str, S: int) -> Node:
    """A causal mask (``sliding``: also within a window) from constants, as a static export computes it."""
    rows = g.op("aten.unsqueeze.default", (g.op("aten.arange.default", (S,), TensorType((S,), I64)), 1), TensorType((S, 1), I64))
    cols = g.op("aten.unsqueeze.default", (g.op("aten.arange.default", (S,), TensorType((S,), I64)), 0), TensorType((1, S), I64))
    allowed = g.op("aten.le.Tensor", (cols, rows), TensorType((S, S), BOOL))
    if kind == "sliding":
        near = g.op("aten.gt.Tensor", (cols, g.op("aten.sub.Tensor", (rows, 4), rows.type)), TensorType((S, S), BOOL))
        allowed = g.op("aten.__and__.Tensor", (allowed, near), allowed.type)
    zeros = g.op("aten.zeros.default", ([],), TensorType((), F32))
    return g.op("aten.where.ScalarOther", (allowed, zeros, float("-inf")), TensorType((S, S), F32))


def _rotary(g, S: int) -> tuple[Node, Node]:
    inv_freq = g.w("model.rotary_emb.inv_freq", F32, HEAD_DIM // 2)
    freqs_in = g.op("aten.unsqueeze.default", (inv_freq, 1), TensorType((HEAD_DIM // 2, 1), F32))
    pos = g.op("aten.unsqueeze.default", (g.op("aten.arange.default", (S,), TensorType((S,), I64)), 0), TensorType((1, S), I64))
    freqs = g.op("aten.mul.Tensor", (freqs_in, g.op("aten.to.dtype", (pos, DType("float32")), TensorType((1, S), F32))),
                 TensorType((HEAD_DIM // 2, S), F32))
    emb = g.op("aten.cat.default", ([freqs, freqs], 0), TensorType((HEAD_DIM, S), F32))
    cos = g.op("aten.to.dtype", (g.op("aten.cos.default", (emb,), emb.type), DType("bfloat16")), TensorType((HEAD_DIM, S), BF16))
    sin = g.op("aten.to.dtype", (g.op("aten.sin.default", (emb,), emb.type), DType("bfloat16")), TensorType((HEAD_DIM, S), BF16))
    return cos, sin


def _norm(g, kind: str, x: Node, prefix: str, act: TensorType) -> Node:
    if kind == "layer_norm":
        return g.op("aten.layer_norm.default", (x, [HIDDEN], g.w(f"{prefix}.weight", BF16, HIDDEN), g.w(f"{prefix}.bias", BF16, HIDDEN), 1e-5), act)
    wide = TensorType(act.shape, F32)
    if kind in ("rms_cast", "gemma_rms", "bare"):
        x = g.op("aten.to.dtype", (x, DType("float32")), wide)
    var = g.op("aten.mean.dim", (g.op("aten.pow.Tensor_Scalar", (x, 2), wide), [-1], True), TensorType(_shape(act)[:-1] + (1,), F32))
    scale = g.op("aten.rsqrt.default", (g.op("aten.add.Tensor", (var, 1e-6), var.type),), var.type)
    y = g.op("aten.mul.Tensor", (x, scale), wide)
    if kind == "bare":  # no weight: cast back, as nanochat's F.rms_norm does
        return g.op("aten.to.dtype", (y, DType("bfloat16")), act)
    w: Any = g.w(f"{prefix}.weight", BF16, HIDDEN)
    if kind == "gemma_rms":
        w = g.op("aten.add.Tensor", (w, 1.0), TensorType((HIDDEN,), BF16))  # reads only the weight
    if kind in ("rms_cast", "gemma_rms"):
        y = g.op("aten.to.dtype", (y, DType("bfloat16")), act)
    return g.op("aten.mul.Tensor", (w, y), act)


def _linear(g, x: Node, fqn: str, out_f: int, in_f: int) -> Node:
    return g.op("aten.linear.default", (x, g.w(fqn, BF16, out_f, in_f)), TensorType(_shape(x.type)[:-1] + (out_f,), BF16))


def _layer(g, f: dict, i: int, kind: str, h: Node, mask: Node | None, rope, side: Node | None, act: TensorType):
    p = f"model.layers.{i}"
    residual = g.op("aten.to.dtype", (h, DType("float32")), TensorType(act.shape, F32)) if f["residual_cast"] else h
    x = h if f["post_norm"] else _norm(g, f["norm"], h, f"{p}.input_layernorm", act)
    mixed = _ssm(g, x, p) if kind == "ssm" else _attention(g, x, p, mask, rope, f["rope"] == "chained")
    if f["side_effects"]:  # a check on a value the layer made: no users, the layer's own
        g.op("aten._assert_tensor_metadata.default", (mixed, None, None, DType("bfloat16")), NONE)
    g.enter_layer(mixed)  # with constants: ops that print every constant class, on a value of the layer's
    if side is not None:
        mixed = g.op("aten.add.Tensor", (mixed, side), act)
    if f["side_state"]:  # from the middle of the layer, as ZAYA's router hands on its states
        side = g.op("aten.clone.default", (g.op("aten.slice.Tensor", (mixed, 2, 0, HIDDEN), act),), act)
    h = g.op("aten.add.Tensor", (residual, mixed), act)
    if f["post_norm"]:
        h = _norm(g, f["norm"], h, f"{p}.post_attention_layernorm", act)
        x = h
    else:
        x = _norm(g, f["norm"], h, f"{p}.post_attention_layernorm", act)
    out = _moe(g, x, p) if f["mlp"] == "moe" else _mlp(g, x, p)
    if f["closing_scale"] == "constant":  # Granite's and MiniCPM's residual multiplier
        out = g.op("aten.mul.Tensor", (out, 0.5), act)
    h = g.op("aten.add.Tensor", (h, out), act)
    if f["reshape"] == "layer":
        h = g.op("aten.view.default", (h, list(_shape(act))), act)
    if f["post_norm"]:
        h = _norm(g, f["norm"], h, f"{p}.output_layernorm", act)
    if f["closing_scale"] == "weight":  # Gemma-4's per-layer scalar, after the residual add
        h = g.op("aten.mul.Tensor", (h, g.w(f"{p}.layer_scalar", BF16, 1)), act)
    return h, side


def _attention(g, x: Node, p: str, mask: Node | None, rope: list | None, chained: bool = False) -> Node:
    B, S = _shape(x.type)[:2]
    heads = TensorType((B, HEADS, S, HEAD_DIM), BF16)

    def project(name: str) -> Node:
        y = _linear(g, x, f"{p}.self_attn.{name}_proj.weight", HIDDEN, HIDDEN)
        y = g.op("aten.view.default", (y, [B, S, HEADS, HEAD_DIM]), TensorType((B, S, HEADS, HEAD_DIM), BF16))
        return g.op("aten.transpose.int", (y, 1, 2), heads)

    q, k, v = project("q"), project("k"), project("v")
    if rope is not None:  # the layer's own view of the model's tables
        if chained:  # cast again from the cast the last attention layer made, and handed on
            rope[:] = [g.op("aten.to.dtype", (t, DType("bfloat16")), t.type) for t in rope]
        cos = g.op("aten.unsqueeze.default", (rope[0], 0), TensorType((1,) + rope[0].type.shape, BF16))
        sin = g.op("aten.unsqueeze.default", (rope[1], 0), TensorType((1,) + rope[1].type.shape, BF16))
        q = g.op("aten.add.Tensor", (g.op("aten.mul.Tensor", (q, cos), heads), g.op("aten.mul.Tensor", (q, sin), heads)), heads)
        k = g.op("aten.add.Tensor", (g.op("aten.mul.Tensor", (k, cos), heads), g.op("aten.mul.Tensor", (k, sin), heads)), heads)
    scores = g.op("aten.matmul.default", (q, g.op("aten.transpose.int", (k, 2, 3), heads)), TensorType((B, HEADS, S, S), BF16))
    if mask is not None:
        scores = g.op("aten.add.Tensor", (scores, mask), scores.type)
    probs = g.op("aten.softmax.int", (scores, -1), scores.type)
    o = g.op("aten.transpose.int", (g.op("aten.matmul.default", (probs, v), heads), 1, 2), TensorType((B, S, HEADS, HEAD_DIM), BF16))
    o = g.op("aten.reshape.default", (o, [B, S, HIDDEN]), x.type)
    return _linear(g, o, f"{p}.self_attn.o_proj.weight", HIDDEN, HIDDEN)


def _ssm(g, x: Node, p: str) -> Node:
    """A state-space mixer's shape: in projection, a gated elementwise scan stand-in, out projection."""
    y = _linear(g, x, f"{p}.mixer.in_proj.weight", 2 * HIDDEN, HIDDEN)
    a, b = g.gi(g.op("aten.split.Tensor", (y, HIDDEN, -1), g.tup(x.type, x.type)))
    scan = g.op("aten.cumsum.default", (g.op("aten.mul.Tensor", (a, g.w(f"{p}.mixer.A", BF16, HIDDEN)), x.type), 1), x.type)
    gated = g.op("aten.mul.Tensor", (scan, g.op("aten.silu.default", (b,), x.type)), x.type)
    return _linear(g, gated, f"{p}.mixer.out_proj.weight", HIDDEN, HIDDEN)


def _mlp(g, x: Node, p: str) -> Node:
    gate = _linear(g, x, f"{p}.mlp.gate_proj.weight", INTER, HIDDEN)
    up = _linear(g, x, f"{p}.mlp.up_proj.weight", INTER, HIDDEN)
    prod = g.op("aten.mul.Tensor", (g.op("aten.silu.default", (gate,), gate.type), up), gate.type)
    return _linear(g, prod, f"{p}.mlp.down_proj.weight", HIDDEN, INTER)


def _moe(g, x: Node, p: str) -> Node:
    """Router, top-2 of the experts, each expert's MLP, then the weight-less tail."""
    B, S = _shape(x.type)[:2]
    logits = _linear(g, x, f"{p}.mlp.gate.weight", EXPERTS, HIDDEN)
    probs = g.op("aten.softmax.int", (logits, -1), TensorType(_shape(logits.type), F32))
    top = TensorType((B, S, 2), F32)
    weights, index = g.gi(g.op("aten.topk.default", (probs, 2), g.tup(top, TensorType((B, S, 2), I64))))
    weights = g.op("aten.to.dtype", (weights, DType("bfloat16")), TensorType((B, S, 2), BF16))
    total: Node | None = None
    for e in range(2):
        y = _mlp(g, x, f"{p}.mlp.experts.{e}")
        share = g.op("aten.select.int", (weights, -1, e), TensorType((B, S), BF16))
        picked = g.op("aten.eq.Scalar", (g.op("aten.select.int", (index, -1, e), TensorType((B, S), I64)), e), TensorType((B, S), BOOL))
        scaled = g.op("aten.mul.Tensor", (y, g.op("aten.unsqueeze.default", (g.op("aten.mul.Tensor", (share, picked), share.type), -1),
                                                  TensorType((B, S, 1), BF16))), x.type)
        total = scaled if total is None else g.op("aten.add.Tensor", (total, scaled), x.type)
    assert total is not None  # two experts
    return total
