"""Run a decoder-layer graph (``grammar/decoder_layer.py``) with PyTorch, op by op, each op inside
``torch.profiler.record_function(label)`` so a profile times exactly the ops the simulation costs;
and build the transformers decoder layer of the same config, to take its (random) weights from
and to check that the graph computes what transformers computes.

torch and transformers are imported on use: this module imports without them.
"""

from __future__ import annotations

import contextlib
import importlib
import math
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Sequence, cast

from layerc.grammar.decoder_layer import LayerShape
from layerc.grammar.hf_config import ModelSpec
from layerc.ir.diagnostics import LayercError
from layerc.ir.graph import OP, OUTPUT, PLACEHOLDER, Graph, Node, Value, Weight, map_values
from layerc.ir.types import TensorType
from layerc.passes.base import node_op_name

if TYPE_CHECKING:
    from layerc.passes.cost import Hardware

#: a torch tensor (torch is an optional extra: its objects are not type-checked here)
Tensor = Any


def require_torch() -> Any:
    try:
        import torch
        import transformers  # noqa: F401  (checked here, used by the callers)
    except ImportError:  # pragma: no cover - depends on the environment
        raise LayercError("profile needs the [torch] extra: pip install 'layerc[torch]'") from None
    return torch


def torch_dtype(name: str) -> Any:
    torch = require_torch()
    return getattr(torch, name.removeprefix("torch."))


# -- the ops ------------------------------------------------------------------------------------
def _rope(x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool) -> Tensor:
    torch = require_torch()
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # [B, S, d] → [B, 1, S, d], broadcast over heads
    if interleaved:  # DeepSeek: rotate (x0, x1), (x2, x3)... pairs; cos/sin hold each angle twice
        half = cos.shape[-1] // 2
        c, s = cos[..., :half], sin[..., :half]
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def _kv_cache_update(cache: Tensor, parts: Sequence[Tensor], start: int) -> Tensor:
    torch = require_torch()
    new = parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)
    cache[:, :, start: start + new.shape[2]].copy_(new)
    return cache


def _causal_mask(sq: int, kv_len: int, device: Any) -> Tensor:
    """True where query i (the last ``sq`` positions) may see key j."""
    torch = require_torch()
    q = torch.arange(kv_len - sq, kv_len, device=device)[:, None]
    return torch.arange(kv_len, device=device)[None, :] <= q


def _attention(q: Tensor, k: Tensor, v: Tensor | None, scale: float, causal: bool, dv: int | None = None) -> Tensor:
    torch = require_torch()
    if v is None:
        v = k[..., :dv]
    sq, kv_len = q.shape[-2], k.shape[-2]
    # a prompt without a cache is SDPA's own causal case (flash kernels); queries after a cache need a mask
    mask = _causal_mask(sq, kv_len, q.device) if causal and 1 < sq < kv_len else None
    gqa = q.shape[1] != k.shape[1]
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=gqa,
                                                            is_causal=causal and 1 < sq == kv_len)


def _softmax(x: Tensor, scale: float, causal: bool, q_len: int) -> Tensor:
    torch = require_torch()
    scores = x.float() * scale
    if causal:
        kv_len = x.shape[-1]
        rows = x.shape[-2]
        allowed = _causal_mask(q_len, kv_len, x.device).repeat(rows // q_len, 1)  # rows: (group, query), query fastest
        scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1).to(x.dtype)


def _topk_router(logits: Tensor, bias: Tensor | None, kind: str, top_k: int, n_group: int, topk_group: int, normalize: bool,
                 scale: float) -> tuple[Tensor, Tensor]:
    """transformers' MixtralTopKRouter (softmax) and DeepseekV3TopkRouter (sigmoid, grouped)."""
    torch = require_torch()
    logits = logits.float()
    if kind == "softmax":
        probs = torch.softmax(logits, dim=-1)
        weights, ids = torch.topk(probs, top_k, dim=-1)
        return weights / weights.sum(dim=-1, keepdim=True), ids
    scores = logits.sigmoid()
    choice = scores + bias
    t, e = choice.shape
    group_scores = choice.view(t, n_group, e // n_group).topk(2, dim=-1)[0].sum(dim=-1)
    group_idx = torch.topk(group_scores, k=topk_group, dim=-1, sorted=False)[1]
    group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
    keep = group_mask.unsqueeze(-1).expand(t, n_group, e // n_group).reshape(t, e).bool()
    ids = torch.topk(choice.masked_fill(~keep, float("-inf")), k=top_k, dim=-1, sorted=False)[1]
    weights = scores.gather(1, ids)
    if normalize:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    return weights * scale, ids


def _moe_experts(x: Tensor, ids: Tensor, weights: Tensor, w_gate_up: Tensor, w_down: Tensor) -> Tensor:
    """transformers' eager experts loop: each expert the tokens reach runs on its tokens."""
    torch = require_torch()
    f = torch.nn.functional
    out = torch.zeros_like(x)
    for e in torch.unique(ids).tolist():
        token, slot = torch.where(ids == e)
        gate, up = f.linear(x[token], w_gate_up[e]).chunk(2, dim=-1)
        y = f.linear(f.silu(gate) * up, w_down[e]) * weights[token, slot, None]
        out.index_add_(0, token, y.to(out.dtype))
    return out


def _impl() -> dict[str, Callable[..., Any]]:
    torch = require_torch()
    f = torch.nn.functional
    return {
        "linear": lambda x, w, b=None: f.linear(x, w, b),
        "rms_norm": lambda x, shape, w, eps: f.rms_norm(x, shape, w, eps),
        "matmul": torch.matmul,
        "add": torch.add,
        "mul": torch.mul,
        "silu": f.silu,
        "relu": f.relu,
        "gelu": lambda x, approximate="none": f.gelu(x, approximate=approximate),
        "view": lambda x, shape: x.reshape(shape),
        "reshape": lambda x, shape: x.reshape(shape),
        "transpose": lambda x, a, b: x.transpose(a, b),
        "slice": lambda x, dim, start, end: x.narrow(dim, start, end - start),
        "expand": lambda x, shape: x.expand(shape),
        "cat": lambda xs, dim: torch.cat(xs, dim),
        "getitem": lambda x, i: x[i],
        "rope": _rope,
        "kv_cache_update": _kv_cache_update,
        "attention": _attention,
        "softmax": _softmax,
        "topk_router": _topk_router,
        "moe_experts": _moe_experts,
    }


class GraphRunner:
    """Executes a layer graph with tensors for its weights; ``run(inputs)`` returns the output."""

    def __init__(self, graph: Graph, weights: dict[str, Any]) -> None:
        self.graph = graph
        self.impl = _impl()
        missing = [w.name for w in graph.weights.values() if w.name not in weights]
        if missing:
            raise LayercError(f"no tensor for weight(s) {', '.join(missing[:5])}")
        self.weights = weights
        unknown = sorted({node_op_name(n) for n in graph.ops if node_op_name(n) not in self.impl})
        if unknown:
            raise LayercError(f"cannot run op(s) {', '.join(unknown)} with torch")

    def run(self, inputs: dict[str, Any], annotate: bool = False) -> Any:
        torch = require_torch()
        env: dict[Value, Any] = {w: self.weights[w.name] for w in self.graph.weights.values()}
        result = None
        for node in self.graph.nodes:
            if node.kind == PLACEHOLDER:
                env[node] = inputs[node.name]
            elif node.kind == OP:
                fn = self.impl[node_op_name(node)]
                args = map_values(node.args, lambda v: env[v])
                if node_op_name(node) == "attention" and args[2] is None:
                    # attention's result: a tensor of known shape
                    args = (*args, cast("tuple[int, ...]", cast(TensorType, node.type).shape)[-1])
                scope = torch.profiler.record_function(node.meta.get("label") or node.name) if annotate else contextlib.nullcontext()
                with scope:
                    env[node] = fn(*args)
            elif node.kind == OUTPUT:
                result = map_values(node.args[0], lambda v: env[v])
        return result


# -- the host as hardware --------------------------------------------------------------------------
def calibrate_host(dtype: str = "float32", seed: int = 0) -> Hardware:
    """A Hardware for this CPU, measured in a second: the matrix peak of a 1024³ matmul; the
    bandwidth an eager op gets — an out-of-place multiply of a 16 MB tensor, so the result's
    allocation and first touch count, as they do for every eager op; the vector rate of an
    in-cache multiply-add; and the per-op overhead a record_function range shows under the
    profiler (dispatch plus profiling)."""
    import statistics
    import time

    from layerc.passes.cost import Hardware

    torch = require_torch()
    dt = torch_dtype(dtype)
    gen = torch.Generator().manual_seed(seed)

    def best(fn: Callable[[], object], n: int) -> float:
        fn()
        times = []
        for _ in range(n):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return min(times)

    a = torch.randn((1024, 1024), generator=gen).to(dt)
    matrix = 2 * 1024 ** 3 / best(lambda: torch.matmul(a, a), 5)
    big = torch.randn(4 << 20, generator=gen)
    bandwidth = 2 * big.numel() * 4 / best(lambda: torch.mul(big, 1.0001), 5)
    small = torch.randn(1 << 18, generator=gen)
    vector = 2 * small.numel() / best(lambda: small.mul_(0.999).add_(1e-3), 20)
    x, y = torch.ones(1), torch.ones(1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(200):
            with torch.profiler.record_function("calibrate"):
                torch.add(x, y)
    spans = [e.time_range.elapsed_us() for e in prof.events() if e.name == "calibrate"]
    overhead = statistics.median(spans) if spans else 5.0
    precision = dtype.removeprefix("torch.")
    return Hardware(key="host", name=f"host CPU ({torch.get_num_threads()} thread{'s' if torch.get_num_threads() > 1 else ''}, calibrated)",
                    matrix_tflops={precision: matrix / 1e12}, vector_tflops=vector / 1e12, hbm_gbps=bandwidth / 1e9,
                    launch_overhead_us=overhead)


# -- transformers ---------------------------------------------------------------------------------
def transformers_layer(spec: ModelSpec, layer: int, dtype: str, device: str, seed: int = 0) -> tuple[Any, Any, Any]:
    """transformers' decoder layer ``layer`` of ``spec`` with random weights (seeded; norms near 1)
    and its rotary embedding, in eval mode on ``device``."""
    torch = require_torch()
    from transformers import AutoConfig

    fields = {k: v for k, v in (spec.config or {}).items() if k != "model_type"}
    fields["num_hidden_layers"] = max(spec.num_layers, layer + 1)
    config = AutoConfig.for_model(spec.model_type, **fields)
    config._attn_implementation = "eager"
    config._experts_implementation = "eager"
    mod = importlib.import_module(f"transformers.models.{spec.model_type}.modeling_{spec.model_type}")
    layer_cls = _find_class(mod, "DecoderLayer")
    rotary_cls = _find_class(mod, "RotaryEmbedding")
    gen = torch.Generator().manual_seed(seed)
    with torch.device("cpu"):
        block = layer_cls(config, layer)
        rotary = rotary_cls(config)
    with torch.no_grad():
        for name, p in block.named_parameters():
            if p.dim() == 1:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1]))
        for name, b in block.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.01 * torch.randn(b.shape, generator=gen))
    dt = torch_dtype(dtype)
    return block.to(device=device, dtype=dt).eval(), rotary.to(device), config


def _find_class(mod: ModuleType, suffix: str) -> type[Any]:
    found = [v for k, v in vars(mod).items() if k.endswith(suffix) and isinstance(v, type) and v.__module__ == mod.__name__]
    if not found:
        raise LayercError(f"{mod.__name__} has no *{suffix} class")
    return found[0]


def layer_weights(graph: Graph, block: Any) -> dict[str, Any]:
    """The graph's weights taken from the transformers layer, by parameter path."""
    state = block.state_dict()
    out: dict[str, Any] = {}
    for w in graph.weights.values():
        if w.target not in state:
            raise LayercError(f"the transformers layer has no '{w.target}' (for weight '{w.name}')")
        out[w.name] = state[w.target]
    return out


def layer_inputs(graph: Graph, spec: ModelSpec, shape: LayerShape, rotary: Any, dtype: str, device: str, seed: int = 1) -> dict[str, Any]:
    """Random hidden states, the rotary cos/sin of the new positions, and KV caches whose first
    ``past`` rows are random (what earlier steps would have written)."""
    torch = require_torch()
    gen = torch.Generator().manual_seed(seed)
    dt = torch_dtype(dtype)
    B, S = shape.batch, shape.new_tokens
    out: dict[str, Any] = {}
    hidden = torch.randn((B, S, spec.hidden), generator=gen).to(device=device, dtype=dt)
    out["hidden_states"] = hidden
    positions = torch.arange(shape.past, shape.past + S, device=device).expand(B, S)
    cos, sin = rotary(hidden, positions)
    out["cos"], out["sin"] = cos.to(dt), sin.to(dt)
    for ph in graph.placeholders:
        if ph.name.endswith("_cache"):
            cache = torch.zeros(cast(TensorType, ph.type).shape, dtype=dt, device=device)  # a cache: a tensor
            cache[:, :, : shape.past] = torch.randn(cache[:, :, : shape.past].shape, generator=gen).to(device=device, dtype=dt)
            out[ph.name] = cache
    return out


def transformers_output(block: Any, config: Any, spec: ModelSpec, shape: LayerShape, inputs: dict[str, Any], layer: int) -> Tensor:
    """The transformers layer's output on the same inputs (its cache filled with the same past)."""
    torch = require_torch()
    from transformers import DynamicCache

    cache = DynamicCache(config=config)
    past = shape.past
    if past:
        if spec.mla:
            latent = inputs["kv_latent_cache"][:, :, :past]
            cache.update(latent[..., : spec.mla.kv_lora_rank].clone(), latent[..., spec.mla.kv_lora_rank:].clone(), layer)
        else:
            cache.update(inputs["k_cache"][:, :, :past].clone(), inputs["v_cache"][:, :, :past].clone(), layer)
    S = shape.new_tokens
    hidden = inputs["hidden_states"]
    mask = None
    if S > 1:
        allowed = _causal_mask(S, shape.kv_len, hidden.device)
        mask = torch.zeros(allowed.shape, dtype=hidden.dtype, device=hidden.device).masked_fill(~allowed, float("-inf"))[None, None]
    positions = torch.arange(past, past + S, device=hidden.device).expand(shape.batch, S)
    with torch.no_grad():
        out = block(hidden, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True,
                    position_embeddings=(inputs["cos"], inputs["sin"]), cache_position=positions[0])
    return out[0] if isinstance(out, tuple) else out


__all__ = ["GraphRunner", "transformers_layer", "layer_weights", "layer_inputs", "transformers_output", "require_torch",
           "torch_dtype", "PLACEHOLDER", "Weight", "Node"]
