"""``cost``: FLOPs, bytes and time of every op of a layer graph, from its real shapes.

Each op gets a kind from its target (``gemm``, ``attention``, ``moe``, ``norm``, ``rope``,
``softmax``, ``act``, ``elementwise``, ``kv_cache``, ``router``, ``collective``, ``fused_mlp``,
or ``alias`` for views, which launch nothing), FLOPs and bytes moved by the closed forms below,
and a time by the roofline with launch overhead (GenZ/Calculon style)::

    t = max(FLOPs / (peak · η_c(FLOPs)), bytes / (bandwidth · η_m(bytes))) + launch_overhead

``peak`` is the matrix (tensor-core) peak of the op's operand dtype for GEMMs, attention and
experts, the vector peak otherwise; ``η`` are the size-dependent step efficiencies of
``passes/data/hardware.toml``. ``mode=no-overlap`` adds the two terms instead of taking the max.

Closed forms (``|x|`` = bytes of tensor ``x``; every input read once, the result written once):

- gemm ``y = x·Wᵀ`` or ``a @ b``: FLOPs ``2·numel(y)·K`` (+ ``numel(y)`` with a bias); bytes
  ``Σ|inputs| + |y|``. Grouped-query score and value matmuls read each key once.
- attention, q ``[B,Hq,Sq,d]`` over L keys: FLOPs ``2·B·Hq·pairs·(d + dv)``, ``pairs = Sq·L``,
  or ``Sq·(L−Sq) + Sq·(Sq+1)/2`` when causal; bytes ``|q| + |k| + |v| + |out|`` (flash: the
  scores never reach memory). MLA's latent cache is ``|k|`` only (values are its first dv channels).
- moe (fused experts, T tokens, top-k of E): FLOPs ``2·T·k·(N₁·H + H·I)``; bytes: the inputs,
  the weights of the experts the tokens reach — ``E·(1 − (1 − k/E)^T)`` on average under uniform
  routing — and the per-assignment intermediates ``T·k·(2·N₁ + 2·I + H)`` elements.
- rope: 3 FLOPs per element; a cos/sin cache table counts only the rows of the tokens' positions.
- router: 8 FLOPs per logit. norm 4, softmax 5, silu 4, gelu 8, elementwise 1 (copies such as
  ``cat`` 0) FLOPs per output element; bytes ``Σ|inputs| + |out|``.
- kv_cache: ``2·|new|`` (read the new rows, write them into the cache).
- collective (all-reduce): ring ``2·(p−1)/p·|x|`` over the interconnect + latency (``tp``).

Attention ops that own a paged cache (AutoDeploy's ``*_attention_*_with_cache``,
``*_mla_with_cache``) take the key count from ``kv_len``. Results: ``meta['cost']`` (an OpCost)
on each op, ``meta['cost']`` (totals) on the graph; ``ctx.analyses['hardware']``.
A ``ctx.inputs['hardware']`` Hardware (a calibrated host, say) overrides ``hw``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import ClassVar

from layerc.grammar.config_files import ConfigFile, read_toml_config
from layerc.ir.diagnostics import LayercError
from layerc.ir.graph import OP, Module, Node, Value
from layerc.ir.targets import op_name
from layerc.ir.types import TensorType, TupleType, element_bytes
from layerc.passes.base import Context, ModulePass

MODES = ("roofline", "no-overlap")

# -- hardware -----------------------------------------------------------------------------------
Steps = tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class Hardware:
    key: str
    name: str
    matrix_tflops: dict[str, float]
    vector_tflops: float
    hbm_gbps: float
    interconnect_gbps: float = 0.0
    launch_overhead_us: float = 2.0
    collective_latency_us: float = 10.0
    matrix_efficiency: Steps = ((0.0, 1.0),)
    vector_efficiency: Steps = ((0.0, 1.0),)
    memory_efficiency: Steps = ((0.0, 1.0),)

    def matrix_peak(self, dtype: str) -> float:
        """FLOP/s of the tensor cores for ``dtype`` (a torch name or ``float8``)."""
        key = _precision(dtype)
        tflops = self.matrix_tflops.get(key)
        if tflops is None:
            have = ", ".join(sorted(self.matrix_tflops))
            raise LayercError(f"{self.name} has no {key} matrix peak (it has: {have})")
        return tflops * 1e12

    def with_launch_overhead(self, us: float) -> "Hardware":
        from dataclasses import replace

        return replace(self, launch_overhead_us=us)


def _precision(dtype: str) -> str:
    d = dtype.removeprefix("torch.")
    if d.startswith("float8"):
        return "float8"
    return {"half": "float16", "float": "float32"}.get(d, d)


def efficiency(steps: Steps, size: float) -> float:
    """The eta of the largest threshold <= ``size`` (the first step below every threshold)."""
    eta = steps[0][1]
    for threshold, value in steps:
        if size >= threshold:
            eta = value
    return eta


_HW_KEYS = {"name", "matrix_tflops", "vector_tflops", "hbm_gbps", "interconnect_gbps", "launch_overhead_us",
            "collective_latency_us", "matrix_efficiency", "vector_efficiency", "memory_efficiency"}


@lru_cache(maxsize=1)
def _builtin_file() -> ConfigFile:
    item = resources.files("layerc.passes").joinpath("data/hardware.toml")
    return read_toml_config(Path(str(item)), item.read_text(encoding="utf-8"))


def hardware_presets() -> tuple[str, ...]:
    return tuple(k for k in _builtin_file().doc if k != "defaults")


def load_hardware(spec: str) -> Hardware:
    """A preset (``h100``) or a TOML file with one table in the presets' format (``[defaults]``
    of the built-in file apply, and the file's own ``[defaults]`` if it has one)."""
    builtin = _builtin_file()
    if spec.lower() in builtin.doc and spec.lower() != "defaults":
        return _hardware(builtin, spec.lower(), builtin.doc.get("defaults", {}))
    if not spec.endswith(".toml"):
        raise LayercError(f"unknown hardware '{spec}' (presets: {', '.join(hardware_presets())}; or a .toml file)")
    f = read_toml_config(spec)
    tables = [k for k, v in f.doc.items() if isinstance(v, dict) and k != "defaults"]
    if len(tables) != 1:
        raise f.error(f"a hardware file needs exactly one table such as [my_gpu], not {len(tables)}")
    defaults = {**builtin.doc.get("defaults", {}), **f.doc.get("defaults", {})}
    return _hardware(f, tables[0], defaults)


def _hardware(f: ConfigFile, key: str, defaults: dict) -> Hardware:
    table = f.doc[key]
    doc = {**defaults, **table}

    def bad(msg: str, k: str) -> LayercError:
        return f.error(msg, k, key if k in table else "defaults")

    unknown = set(table) - _HW_KEYS
    if unknown:
        k = sorted(unknown)[0]
        raise bad(f"unknown key '{k}' (keys: {', '.join(sorted(_HW_KEYS))})", k)

    def positive(k: str, required: bool = True) -> float:
        v = doc.get(k)
        if v is None and not required:
            return 0.0
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or (required and v == 0):
            raise bad(f"'{k}' must be a positive number, not {v!r}", k) if v is not None else f.error(
                f"[{key}] has no '{k}'", None)
        return float(v)

    peaks = doc.get("matrix_tflops")
    if not isinstance(peaks, dict) or not peaks or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in peaks.values()):
        raise bad("'matrix_tflops' must be a table of positive peaks per dtype, e.g. { bfloat16 = 989.4 }", "matrix_tflops")
    return Hardware(
        key=key,
        name=str(doc.get("name", key)),
        matrix_tflops={_precision(k): float(v) for k, v in peaks.items()},
        vector_tflops=positive("vector_tflops"),
        hbm_gbps=positive("hbm_gbps"),
        interconnect_gbps=positive("interconnect_gbps", required=False),
        launch_overhead_us=positive("launch_overhead_us", required=False),
        collective_latency_us=positive("collective_latency_us", required=False),
        matrix_efficiency=_steps(doc, "matrix_efficiency", bad),
        vector_efficiency=_steps(doc, "vector_efficiency", bad),
        memory_efficiency=_steps(doc, "memory_efficiency", bad),
    )


def _steps(doc: dict, k: str, bad) -> Steps:
    v = doc.get(k, [[0, 1.0]])
    ok = isinstance(v, list) and v and all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in p)
        and p[0] >= 0 and 0 < p[1] <= 1 for p in v)
    if not ok or [p[0] for p in v] != sorted(p[0] for p in v):
        raise bad(f"'{k}' must be ascending [threshold, efficiency] pairs with 0 < efficiency <= 1", k)
    return tuple((float(a), float(b)) for a, b in v)


# -- op kinds -----------------------------------------------------------------------------------
_KIND_PATTERNS = (
    ("alias", r"^(view|_unsafe_view|reshape|t|transpose|permute|expand|unsqueeze|squeeze|getitem|split|split_with_sizes"
              r"|chunk|slice|select|detach|alias|unflatten|flatten|as_strided|\w*_passthrough)$"),
    ("collective", r"all_reduce|allreduce|all_gather|allgather|reduce_scatter|all_to_all"),
    ("kv_cache", r"kv_cache_update|cache_update|kv_cache_write"),
    ("attention", r"attention|(^|_)mha|sdpa|scaled_dot_product|flash_attn|mla_with_cache"),
    ("moe", r"moe(?!_gate)|experts"),
    ("router", r"topk_router|noaux_tc|topk_softmax|router(?!_gemm)|fused_topk|^topk$"),
    ("fused_mlp", r"swiglu_mlp|fused_mlp"),
    ("gemm", r"linear|gemm|^mm$|matmul|bmm|addmm|baddbmm"),
    ("norm", r"rms_?norm|layer_?norm"),
    ("rope", r"rope|rotary"),
    ("softmax", r"softmax"),
    ("act", r"silu|gelu|relu|sigmoid|tanh|swish|act_and_mul"),
    ("elementwise", r"^(add|sub|mul|div|neg|cat|clone|copy|_to_copy|to|contiguous|pow|rsqrt|exp|eq|ne|lt|gt|floor_divide"
                    r"|where|masked_fill|fill|zeros|zeros_like|index_copy|index_put|scatter|gather|sum|mean|amax|max|min"
                    r"|bitwise_and|bitwise_or|logical_not|abs|sqrt|square)_?$"),
)
_KIND_RX = tuple((kind, re.compile(rx)) for kind, rx in _KIND_PATTERNS)
MATRIX_KINDS = frozenset({"gemm", "attention", "moe", "fused_mlp"})
#: FLOPs per output element of vector ops.
FLOPS_PER_ELEMENT = {"norm": 4, "rope": 3, "softmax": 5, "router": 8, "elementwise": 1, "silu": 4, "gelu": 8, "relu": 1,
                     "sigmoid": 4, "tanh": 4, "kv_cache": 0, "copy": 0}
_COPIES = {"cat", "clone", "copy", "_to_copy", "to", "contiguous", "zeros", "zeros_like", "fill", "index_copy"}


def op_kind(node: Node) -> str | None:
    """The cost kind of an op by its target, None when no pattern knows it."""
    name = op_name(node.target or "")
    if name == "to" and node.inputs and _dtype(node.inputs[0]) == _dtype(node):
        return "alias"
    for kind, rx in _KIND_RX:
        if rx.search(name):
            return kind
    return None


@dataclass(frozen=True)
class OpCost:
    kind: str
    flops: int
    bytes: int
    time_ns: float  #: what the schedule uses (0 for aliases)
    compute_ns: float = 0.0
    memory_ns: float = 0.0
    overhead_ns: float = 0.0
    bound: str = "-"  #: the larger roofline term: ``compute`` or ``memory`` (``-`` for aliases)

    @property
    def is_kernel(self) -> bool:
        return self.kind != "alias"

    @property
    def launch_share(self) -> float:
        """How much of the op's time is launch overhead (small decode ops: most of it)."""
        return self.overhead_ns / self.time_ns if self.time_ns else 0.0

    @property
    def intensity(self) -> float:
        """FLOPs per byte."""
        return self.flops / self.bytes if self.bytes else 0.0


# -- shapes ---------------------------------------------------------------------------------------
def _tensor(v) -> TensorType | None:
    t = getattr(v, "type", None)
    return t if isinstance(t, TensorType) and t.shape is not None and all(isinstance(d, int) for d in t.shape) else None


def _dtype(v) -> str | None:
    t = getattr(v, "type", None)
    return t.dtype if isinstance(t, TensorType) else None


def nbytes(v) -> int:
    """Bytes of a tensor value (0 for anything else); a multi-output value is its elements' sum."""
    t = getattr(v, "type", None)
    if isinstance(t, TupleType):
        return sum(_type_bytes(e) for e in t.elements)
    return _type_bytes(t)


def _type_bytes(t) -> int:
    if not isinstance(t, TensorType) or t.numel is None:
        return 0
    return t.numel * (element_bytes(t.dtype) or 0)


def numel(v) -> int:
    t = _tensor(v)
    return t.numel if t is not None else 0


def shape(v) -> tuple[int, ...]:
    t = _tensor(v)
    if t is None:
        raise LayercError(f"'{getattr(v, 'name', v)}' has no concrete shape: the cost pass needs real shapes")
    return t.shape  # type: ignore[return-value]


def _tensor_inputs(node: Node) -> list[Value]:
    return [v for v in node.inputs if _tensor(v) is not None]


def _positional_tensors(node: Node) -> list:
    """Top-level positional arguments that are tensors or None, in order (``v`` may be None)."""
    return [a for a in node.args if a is None or (isinstance(a, Value) and _tensor(a) is not None)]


# -- the pass -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CostModel(ModulePass):
    """Per-op FLOPs, bytes and roofline time with launch overhead on a hardware preset."""

    name: ClassVar[str] = "cost"

    hw: str = "h100"
    launch_overhead_us: float = -1.0  #: < 0: the preset's
    kv_len: int = 0  #: keys per sequence for attention ops that own a paged cache
    tp: int = 1  #: tensor-parallel size, for collectives
    mode: str = "roofline"

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not '{self.mode}'")
        if self.tp < 1 or self.kv_len < 0:
            raise ValueError("tp must be >= 1 and kv-len >= 0")

    def hardware(self, ctx: Context) -> Hardware:
        hw = ctx.inputs.get("hardware") or load_hardware(self.hw)
        return hw.with_launch_overhead(self.launch_overhead_us) if self.launch_overhead_us >= 0 else hw

    def apply(self, ctx: Context, module: Module) -> None:
        hw = self.hardware(ctx)
        ctx.analyses["hardware"] = hw
        unknown: set[str] = set()
        for graph in module.graphs:
            totals = {"flops": 0, "bytes": 0, "time_ns": 0.0, "kernels": 0}
            for node in graph.nodes:
                if node.kind != OP:
                    continue
                c = self.op_cost(node, hw, unknown)
                node.meta["cost"] = c
                if c.is_kernel:
                    totals["flops"] += c.flops
                    totals["bytes"] += c.bytes
                    totals["time_ns"] += c.time_ns
                    totals["kernels"] += 1
            graph.meta["cost"] = totals
        if unknown:
            ctx.warn(f"cost: no closed form for {', '.join(sorted(unknown))}: charged as one pass over their "
                     f"inputs and outputs")
        if self.tp == 1 and any(n.meta.get("cost") and n.meta["cost"].kind == "collective" for g in module.graphs for n in g.nodes):
            ctx.warn("cost: the graph has collectives but tp=1: they cost only their launch (set tp)")

    # -- one op ------------------------------------------------------------------------------
    def op_cost(self, node: Node, hw: Hardware, unknown: set | None = None) -> OpCost:
        kind = op_kind(node)
        if kind is None:
            if unknown is not None:
                unknown.add(op_name(node.target or "?"))
            kind = "elementwise"
        if kind == "alias":
            return OpCost("alias", 0, 0, 0.0)
        flops, moved, dtype = _FORMULAS[kind](self, node)
        if kind == "collective":
            return self._collective(node, hw, flops, moved)
        if kind in MATRIX_KINDS:
            peak = hw.matrix_peak(dtype) * efficiency(hw.matrix_efficiency, flops / 1e9)
        else:
            peak = hw.vector_tflops * 1e12 * efficiency(hw.vector_efficiency, flops / 1e9)
        compute = flops / peak * 1e9 if flops else 0.0
        memory = moved / (hw.hbm_gbps * 1e9 * efficiency(hw.memory_efficiency, moved / 1e6)) * 1e9 if moved else 0.0
        overhead = hw.launch_overhead_us * 1e3
        busy = max(compute, memory) if self.mode == "roofline" else compute + memory
        bound = "compute" if compute > memory else "memory"
        return OpCost(kind, int(flops), int(moved), busy + overhead, compute, memory, overhead, bound)

    def _collective(self, node: Node, hw: Hardware, flops: int, moved: int) -> OpCost:
        overhead = hw.launch_overhead_us * 1e3
        p = self.tp
        x = nbytes(_tensor_inputs(node)[0]) if _tensor_inputs(node) else 0
        if p == 1 or not hw.interconnect_gbps:
            return OpCost("collective", flops, moved, overhead, 0.0, 0.0, overhead, "communication")
        link = 2 * (p - 1) / p * x / (hw.interconnect_gbps * 1e9) * 1e9 + hw.collective_latency_us * 1e3
        memory = moved / (hw.hbm_gbps * 1e9 * efficiency(hw.memory_efficiency, moved / 1e6)) * 1e9
        busy = max(link, memory)
        return OpCost("collective", flops, moved, busy + overhead, 0.0, busy, overhead, "communication")

    # -- closed forms: (FLOPs, bytes, matrix dtype) ------------------------------------------
    def _gemm(self, node: Node):
        ins = _tensor_inputs(node)
        k = shape(ins[0])[-1]
        flops = 2 * numel(node) * k
        if op_name(node.target) in ("linear", "addmm") and len(ins) > 2:
            flops += numel(node)  # bias
        return flops, _io(node), _lowest(ins[:2])

    def _attention(self, node: Node):
        name = op_name(node.target)
        if "mla" in name and "with_cache" in name:
            return self._mla_with_cache(node)
        if "with_cache" in name:
            return self._paged_attention(node)
        q, k, v = (_positional_tensors(node) + [None, None, None])[:3]
        b, hq, sq, d = shape(q)
        kv_len = shape(k)[-2]
        dv = shape(node)[-1]
        causal = next((a for a in node.args[3:] if isinstance(a, bool)), True)
        flops = 2 * b * hq * _pairs(sq, kv_len, causal) * (d + dv)
        moved = sum(nbytes(x) for x in (q, k, v) if x is not None) + nbytes(node)
        return flops, moved, _dtype(q)

    def _paged_attention(self, node: Node):
        """``q, k, v`` new rows ``[B, S, H, d]`` (or ``[T, H, d]``), the cache among the other inputs."""
        q, k, v = _tensor_inputs(node)[:3]
        qs, ks = shape(q), shape(k)
        hq, d, hkv = qs[-2], qs[-1], ks[-2]
        b, s = (qs[0], qs[1]) if len(qs) == 4 else (1, qs[0])
        dv = shape(node)[-1]
        kv_len = self._kv_len(node, s)
        e = element_bytes(_dtype(k) or "torch.bfloat16") or 2
        flops = 2 * b * hq * _pairs(s, kv_len, True) * (d + dv)
        moved = nbytes(q) + nbytes(k) + nbytes(v) + nbytes(node) + b * hkv * (kv_len * (d + dv) + s * (d + dv)) * e
        return flops, moved, _dtype(q)

    def _mla_with_cache(self, node: Node):
        """``q_nope [B,S,H,P], q_pe [B,S,H,R], ckv [B,S,C], kpe [B,S,1,R], kv_b weight [H(P+V), C]``."""
        q_nope, q_pe, ckv, kpe, kv_b = _tensor_inputs(node)[:5]
        b, s, h, p = shape(q_nope)
        r, c, v = shape(q_pe)[-1], shape(ckv)[-1], shape(node)[-1]
        kv_len = self._kv_len(node, s)
        e = element_bytes(_dtype(ckv) or "torch.bfloat16") or 2
        flops = 2 * b * s * h * p * c + 2 * b * h * _pairs(s, kv_len, True) * (2 * c + r) + 2 * b * s * h * c * v
        moved = sum(nbytes(x) for x in (q_nope, q_pe, ckv, kpe, kv_b)) + nbytes(node) + b * (kv_len + s) * (c + r) * e
        return flops, moved, _dtype(q_nope)

    def _kv_len(self, node: Node, new: int) -> int:
        if self.kv_len <= 0:
            raise LayercError(f"'{node.name}' reads a paged KV cache whose length the graph does not say: "
                              f"give kv-len (simulate: --seq-len)", loc=node.loc)
        return self.kv_len + new

    def _moe(self, node: Node):
        x, ids, weights, w13, w2 = _tensor_inputs(node)[:5]
        t, hidden = numel(x) // shape(x)[-1], shape(x)[-1]
        k = shape(ids)[-1]
        e, n1 = shape(w13)[0], shape(w13)[1]
        inter = shape(w2)[-1]
        flops = 2 * t * k * (n1 * hidden + hidden * inter)
        active = expected_active_experts(e, k, t)
        per_expert = (nbytes(w13) + nbytes(w2)) / e
        act = element_bytes(_dtype(x) or "torch.bfloat16") or 2
        moved = (nbytes(x) + nbytes(ids) + nbytes(weights) + nbytes(node) + active * per_expert
                 + t * k * (2 * n1 + 2 * inter + hidden) * act)
        return flops, int(moved), _lowest([x, w13])

    def _fused_mlp(self, node: Node):
        """``x [.., H], w_gate_up [2I, H], w_down [H, I]`` (a SwiGLU MLP in one op)."""
        x, w13, w2 = _tensor_inputs(node)[:3]
        m, hidden = numel(x) // shape(x)[-1], shape(x)[-1]
        n1, inter = shape(w13)[0], shape(w2)[-1]
        act = element_bytes(_dtype(x) or "torch.bfloat16") or 2
        flops = 2 * m * n1 * hidden + 2 * m * inter * hidden + FLOPS_PER_ELEMENT["silu"] * m * inter
        return flops, _io(node) + m * (2 * n1 + 2 * inter) * act, _lowest([x, w13])

    def _rope(self, node: Node):
        """Rotating the tensors: cos/sin given per token count as they are; a whole cos/sin cache
        table (AutoDeploy's rope ops read ``[max_positions, d]`` with position ids) counts only the
        rows of the tokens' positions."""
        ins = _tensor_inputs(node)
        out = _out_numel(node)
        positions = [v for v in ins if (_dtype(v) or "").startswith("torch.int")]
        tokens = max((numel(v) for v in positions), default=0)
        moved = nbytes(node)
        for v in ins:
            if tokens and numel(v) > out and len(shape(v)) == 2:
                moved += tokens * shape(v)[-1] * (element_bytes(_dtype(v)) or 4)
            else:
                moved += nbytes(v)
        return FLOPS_PER_ELEMENT["rope"] * out, moved, None

    def _router(self, node: Node):
        """Top-k routing: a fixed FLOP count per router logit (score function, group and top-k
        selection), one pass over the logits, bias and results."""
        logits = _tensor_inputs(node)[0]
        return FLOPS_PER_ELEMENT["router"] * numel(logits), _io(node), None

    def _kv_cache(self, node: Node):
        new = [a for a in (node.args[1] if len(node.args) > 1 and isinstance(node.args[1], (list, tuple)) else node.inputs[1:])
               if isinstance(a, Value)]
        return 0, 2 * sum(nbytes(a) for a in new), None

    def _act(self, node: Node):
        name = op_name(node.target)
        per = next((v for k, v in FLOPS_PER_ELEMENT.items() if k in name and k in ("silu", "gelu", "relu", "sigmoid", "tanh")), 4)
        if "and_mul" in name:
            per += 1
        return per * _out_numel(node), _io(node), None

    def _elementwise(self, node: Node):
        per = 0 if op_name(node.target) in _COPIES else 1
        return per * _out_numel(node), _io(node), None

    def _collective_io(self, node: Node):
        ins = _tensor_inputs(node)
        flops = numel(ins[0]) if ins else 0  # the reduction's adds
        if "norm" in op_name(node.target):
            flops += FLOPS_PER_ELEMENT["norm"] * numel(ins[0])
        return flops, _io(node), None


def _vector(kind: str):
    """The closed form of a vector op: a fixed FLOP count per output element, one pass of memory."""
    per_element = FLOPS_PER_ELEMENT[kind]
    return lambda self, node: (per_element * _out_numel(node), _io(node), None)


def _out_numel(node: Node) -> int:
    t = node.type
    if isinstance(t, TupleType):
        return sum(e.numel or 0 for e in t.elements if isinstance(e, TensorType))
    return numel(node)


def _io(node: Node) -> int:
    """Bytes of the distinct tensor inputs plus the result."""
    return sum(nbytes(v) for v in _tensor_inputs(node)) + nbytes(node)


def _lowest(values) -> str:
    """The narrowest dtype among GEMM operands: fp8 weights run at the fp8 peak."""
    dtypes = [_dtype(v) for v in values if _dtype(v)]
    return min(dtypes, key=lambda d: element_bytes(d) or 8) if dtypes else "torch.bfloat16"


def _pairs(sq: int, kv_len: int, causal: bool) -> int:
    """Query-key pairs a flash kernel computes; causal queries sit at the last ``sq`` positions."""
    if not causal or sq == 1:
        return sq * kv_len
    return sq * (kv_len - sq) + sq * (sq + 1) // 2


def expected_active_experts(experts: int, top_k: int, tokens: int) -> float:
    """Distinct experts ``tokens`` reach with ``top_k`` each, on average under uniform routing."""
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


_FORMULAS = {
    "gemm": CostModel._gemm,
    "attention": CostModel._attention,
    "moe": CostModel._moe,
    "fused_mlp": CostModel._fused_mlp,
    "kv_cache": CostModel._kv_cache,
    "norm": _vector("norm"),
    "rope": CostModel._rope,
    "softmax": _vector("softmax"),
    "router": CostModel._router,
    "act": CostModel._act,
    "elementwise": CostModel._elementwise,
    "collective": CostModel._collective_io,
}

__all__ = ["CostModel", "OpCost", "Hardware", "load_hardware", "hardware_presets", "efficiency", "op_kind",
           "expected_active_experts", "nbytes", "MODES"]
