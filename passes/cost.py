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
  The FLOPs need only the per-token widths ``Hq·d`` and ``Hq·dv``, so any layout whose tokens
  and widths the shapes tell apart is costed: ``[..., Sq, d]`` (scaled_dot_product_attention's
  own, any rank from 2: ``[Sq, Hq·d]`` is one sequence of flattened heads), ``[B, Sq, Hq, d]``
  (a ``bsnd`` layout argument or op name); for ops that own a paged cache ``[B, S, Hq, d]``,
  ``[B, S, Hq·d]`` and ``[T, Hq·d]`` (AutoDeploy's flattened heads) and ``[T, Hq, d]``, the
  sequences coming from the batch's ``seq_len`` metadata where the shape does not give them.
- moe (fused experts, T tokens, top-k of E): FLOPs ``2·T·k·(N₁·H + H·I)``; bytes: the inputs,
  the weights of the experts the tokens reach — ``E·(1 − (1 − k/E)^T)`` on average under uniform
  routing — and the per-assignment intermediates ``T·k·(2·N₁ + 2·I + H)`` elements.
- rope: 3 FLOPs per element; a cos/sin cache table counts only the rows of the tokens' positions.
- router: 8 FLOPs per logit. norm 4, softmax 5, silu 4, gelu 8, elementwise 1 (copies such as
  ``cat`` 0) FLOPs per output element; bytes ``Σ|inputs| + |out|``.
- kv_cache: ``2·|new|`` (read the new rows, write them into the cache).
- collective (all-reduce): ring ``2·(p−1)/p·|x|`` over the interconnect + latency (``tp``).

Attention ops that own a paged cache (AutoDeploy's ``*_attention_*_with_cache``,
``*_mla_with_cache``) take the key count from ``kv_len``. Metadata ops (``*_prepare_metadata``)
cost a pass over their inputs and outputs. An op whose shapes its closed form cannot read (a rank
or a layout it does not know, an ambiguous one, fewer operands than it needs) gets an unknown cost
— ``bound='unknown'``, ``known=False``, no FLOPs or bytes counted, only its launch — with one
warning that names it, rather than an error or a guessed number. Results: ``meta['cost']`` (an OpCost)
on each op, ``meta['cost']`` (totals) on the graph; ``ctx.analyses['hardware']``.
A ``ctx.inputs['hardware']`` Hardware (a calibrated host, say) overrides ``hw``.

Limits, so that no count overflows or turns to inf: a tensor of more than 2**63 bytes, an op of
more than 2**63 FLOPs or bytes, an op or layer time past 2**62 ns is an error at the op (hardware
files are held to finite rates of at least :data:`MIN_RATE` and fixed times up to
:data:`MAX_LAUNCH_US`). A value whose shape is missing or symbolic is an error where a closed
form needs it (``specialize-shapes``, below, gives symbols values first); a graph with no shapes
at all (torch.fx's own print) is an error that says so.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, ClassVar, Iterable, Mapping, cast

from layerc.grammar.decoder_layer import MAX_TENSOR_BYTES
from layerc.ir.diagnostics import LayercError
from layerc.ir.graph import OP, Graph, Module, Node, Value, Weight
from layerc.ir.targets import op_name
from layerc.ir.types import Dim, OpaqueType, TensorType, TupleType, Type, element_bytes
from layerc.passes.base import Context, ModulePass, node_op_name

MODES = ("roofline", "no-overlap")

# -- hardware: passes/hardware.py (re-exported: the cost model's callers name them here) ---------------------
from layerc.passes.hardware import Hardware, MAX_LAUNCH_US, MIN_RATE, Steps, device_preset, efficiency, hardware_presets, load_hardware, _precision  # noqa: E402,F401

# -- op kinds -----------------------------------------------------------------------------------
_KIND_PATTERNS = (
    ("alias", r"^(view|_unsafe_view|reshape|t|transpose|permute|expand|unsqueeze|squeeze|getitem|split|split_with_sizes"
              r"|chunk|slice|select|detach|alias|unflatten|flatten|as_strided|\w*_passthrough)$"),
    ("collective", r"all_reduce|allreduce|all_gather|allgather|reduce_scatter|all_to_all"),
    ("kv_cache", r"kv_cache_update|cache_update|kv_cache_write"),
    ("metadata", r"prepare_metadata"),  # flashinfer_attention_prepare_metadata: indices for the attention op
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


#: Result types of ops that compute a host-side number (a size, a symbolic int): no kernel runs.
_HOST_SCALARS = frozenset({"SymInt", "SymFloat", "SymBool", "int", "float", "bool"})


def op_kind(node: Node) -> str | None:
    """The cost kind of an op by its target (``alias`` too for an op whose result is a host-side
    number such as ``sym_size``'s SymInt), None when no pattern knows it."""
    if isinstance(node.type, OpaqueType) and node.type.pytype in _HOST_SCALARS:
        return "alias"
    name = op_name(node.target or "")
    if name == "to" and node.inputs and _dtype(node.inputs[0]) == _dtype(node):
        return "alias"
    for kind, rx in _KIND_RX:
        if rx.search(name):
            return kind
    return None


#: a closed form's count: (FLOPs, bytes, the dtype of a matrix op's operands or None)
Counts = tuple[int, int, str | None]
#: the closed form of an op kind
Formula = Callable[["CostModel", Node], Counts]


@dataclass(frozen=True)
class OpCost:
    kind: str
    flops: int
    bytes: int
    time_ns: float  #: what the schedule uses (0 for aliases)
    compute_ns: float = 0.0
    memory_ns: float = 0.0
    overhead_ns: float = 0.0
    bound: str = "-"  #: the larger roofline term: ``compute`` or ``memory`` (``-`` for aliases, ``unknown``)
    known: bool = True  #: False: shapes the closed form cannot read; FLOPs and bytes are not counted

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
#: The most bytes one tensor may have (as the decoder-layer builder holds it to), and the most FLOPs
#: or bytes one op may count: 64-bit byte offsets and counters (a device addresses no more; the
#: JSON and Perfetto outputs count in int64).
MAX_COUNT = MAX_TENSOR_BYTES
#: The longest op or layer time in ns: the schedule and the timeline count in int64 ns, and the
#: trace IR bounds times at +-2**62 ns (146 years) likewise.
MAX_NS = 2**62


def _tensor(v: object) -> TensorType | None:
    t = getattr(v, "type", None)
    return t if isinstance(t, TensorType) and t.shape is not None and all(isinstance(d, int) for d in t.shape) else None


def _dtype(v: object) -> str | None:
    t = getattr(v, "type", None)
    return t.dtype if isinstance(t, TensorType) else None


def nbytes(v: object) -> int:
    """Bytes of a tensor value (0 for anything else, and for sizes with symbols that have no
    value); a multi-output value is its elements' sum."""
    t = getattr(v, "type", None)
    if isinstance(t, TupleType):
        return sum(_type_bytes(e) for e in t.elements)
    return _type_bytes(t)


def _type_bytes(t: object) -> int:
    if not isinstance(t, TensorType) or t.numel is None:
        return 0
    return t.numel * (element_bytes(t.dtype) or 0)


def numel(v: object) -> int:
    t = _tensor(v)
    return cast(int, t.numel) if t is not None else 0  # ``_tensor``: every dim is an int


def _concrete(t: TensorType) -> tuple[int, ...]:
    """The shape of a tensor type ``_tensor`` gave: there, every dim is an int."""
    return cast("tuple[int, ...]", t.shape)


def shape(v: object, rank: int | tuple[int, ...] | None = None, min_rank: int = 0) -> tuple[int, ...]:
    """The concrete shape of ``v``: a LayercError when it has none (no shape in the input, a
    symbol with no value) or not the rank a closed form needs (``op_cost`` places it at the op)."""
    t = _tensor(v)
    name = f"'%{v.name}'" if isinstance(v, Value) else "an operand"
    if t is None:
        vt = getattr(v, "type", None)
        if isinstance(vt, TensorType) and vt.shape is not None:
            symbols = sorted({s for d in vt.shape if not isinstance(d, int) for s in d.symbols})
            raise LayercError(f"{name} has size {vt.shape_text()}: the cost pass needs a value for "
                              f"{', '.join(symbols) or 'its symbolic size'} (simulate: --sym NAME=N)")
        raise LayercError(f"{name} has no shape in the input: the cost pass needs real shapes")
    ranks = (rank,) if isinstance(rank, int) else rank
    if (ranks is not None and len(_concrete(t)) not in ranks) or len(_concrete(t)) < min_rank:
        want = " or ".join(map(str, ranks)) if ranks is not None else f"at least {min_rank}"
        raise Unclear(f"{name} has shape {t.shape_text()}: the closed form needs rank {want}")
    return _concrete(t)


class Unclear(LayercError):
    """Shapes an op's closed form cannot read (a rank or layout it does not know, too few
    operands): the op's cost is unknown, with a warning, not an error and not a guess."""


def _tensor_inputs(node: Node) -> list[Value]:
    """The node's inputs typed as tensors, in order (with or without concrete shapes)."""
    return [v for v in node.inputs if isinstance(v.type, TensorType)]


def _operands(node: Node, count: int) -> list[Value]:
    """The first ``count`` tensor inputs a closed form reads; ``Unclear`` (an unknown cost) when it has fewer."""
    ins = _tensor_inputs(node)
    if len(ins) < count:
        raise Unclear(f"{len(ins)} tensor input{'s' if len(ins) != 1 else ''} with a known type; its cost needs {count}")
    return ins[:count]


def _positional_tensors(node: Node) -> list[Value | None]:
    """Top-level positional arguments that are tensors or None, in order (``v`` may be None)."""
    return [a for a in node.args if a is None or (isinstance(a, Value) and isinstance(a.type, TensorType))]


def _rows(v: object) -> int:
    """The rows of ``v`` as a matrix: every dim but the last multiplied (tokens, for activations)."""
    rows = 1
    for d in shape(v, min_rank=1)[:-1]:
        rows *= d
    return rows


def _check_sizes(node: Node) -> None:
    """Every tensor the op reads or writes within :data:`MAX_COUNT` bytes (a dump's dims are
    64-bit each, their products are not)."""
    for v in (*node.inputs, node):
        if nbytes(v) > MAX_COUNT:
            t = v.type
            text = t.shape_text() if isinstance(t, TensorType) else "a tuple"
            raise LayercError(f"'%{v.name}' ({text}) has more than 2**63 bytes: no device addresses that much",
                              loc=getattr(v, "loc", None) or node.loc)


# -- symbolic sizes --------------------------------------------------------------------------------
_SYMBOL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Functions sympy prints in torch's symbolic sizes, with their integer meaning.
_SIZE_FUNCTIONS: dict[str, Callable[..., Fraction | int]] = {
    "Max": max, "Min": min, "max": max, "min": min, "Abs": abs,
    "floor": math.floor, "ceiling": math.ceil, "FloorToInt": math.floor, "CeilToInt": math.ceil,
    "FloorDiv": lambda a, b: a // b, "CeilDiv": lambda a, b: -(-a // b), "Mod": lambda a, b: a % b,
    "PythonMod": lambda a, b: a % b,
}
#: Intermediate values of a size expression stay within this many bits (a size is at most 63).
_SIZE_BITS = 256


def parse_symbol_values(items: Iterable[str]) -> dict[str, int]:
    """``NAME=N`` texts (a symbol and its whole value, 0 to 2**63-1) as a dict; ValueError otherwise."""
    values: dict[str, int] = {}
    for item in items:
        name, eq, text = str(item).partition("=")
        name = name.strip()
        try:
            n = int(text) if eq else -1
        except ValueError:
            n = -1
        if not _SYMBOL_NAME.fullmatch(name) or not 0 <= n <= MAX_COUNT:
            shown = item if len(item) <= 40 else item[:37] + "..."
            raise ValueError(f"a symbol value is NAME=N with N a whole number from 0 to 2**63-1, not '{shown}'")
        values[name] = n
    return values


class _NoValue(Exception):
    """A size expression that has no integer value under the given symbols."""


def evaluate_dim(expr: str, values: Mapping[str, int]) -> int | None:
    """The size a symbolic dim's text has (as sympy prints it: ``s70*s72``, ``s72 + 1``, ``2*s77``,
    ``Max(1, s0)``, ``(s0 + 63)//64``) under ``values``; None when a symbol has no value, the text is
    no such expression, or the result is no size (negative, past 2**63-1, not whole)."""
    if len(expr) > 1000:
        return None
    try:
        tree = ast.parse(expr, mode="eval")
        value = _evaluate(tree.body, values)
    except (SyntaxError, ValueError, TypeError, ZeroDivisionError, RecursionError, MemoryError, OverflowError, _NoValue):
        return None
    if value.denominator != 1 or not 0 <= value <= MAX_COUNT:
        return None
    return int(value)


def _evaluate(node: ast.AST, values: Mapping[str, int]) -> Fraction:
    """One node of a size expression, exactly (divisions as fractions), within :data:`_SIZE_BITS`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        out = Fraction(node.value)
    elif isinstance(node, ast.Name):
        if node.id not in values:
            raise _NoValue(node.id)
        out = Fraction(values[node.id])
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        x = _evaluate(node.operand, values)
        out = -x if isinstance(node.op, ast.USub) else x
    elif isinstance(node, ast.BinOp):
        out = _binary(node.op, _evaluate(node.left, values), _evaluate(node.right, values))
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _SIZE_FUNCTIONS and not node.keywords:
        out = Fraction(_SIZE_FUNCTIONS[node.func.id](*(_evaluate(a, values) for a in node.args)))
    else:
        raise _NoValue(ast.dump(node)[:40])
    if max(abs(out.numerator).bit_length(), out.denominator.bit_length()) > _SIZE_BITS:
        raise _NoValue("too large")
    return out


def _binary(op: ast.operator, a: Fraction, b: Fraction) -> Fraction:
    if isinstance(op, ast.Add):
        return a + b
    if isinstance(op, ast.Sub):
        return a - b
    if isinstance(op, ast.Mult):
        return a * b
    if isinstance(op, ast.Div):
        return a / b
    if isinstance(op, ast.FloorDiv):
        return Fraction(a // b)
    if isinstance(op, ast.Mod):
        return a % b
    if isinstance(op, ast.Pow) and b.denominator == 1 and 0 <= b <= _SIZE_BITS and abs(a.numerator).bit_length() * b <= _SIZE_BITS:
        return a ** int(b)
    raise _NoValue("operator")


def token_dims(graph: Graph) -> tuple[Dim, ...]:
    """The token dims of a layer graph, ``(batch, tokens per sequence)`` or ``(tokens,)``: the
    leading dims of a ``[B, S, H]`` view of the stream the graph's weight GEMMs read — a layer
    input (placeholder) or a GEMM activation of rank 3 whose last dim is such a GEMM's ``H`` — else
    of the first weight GEMM's activation (flattened tokens); () when no GEMM reads a weight."""
    acts: list[Value] = []
    for n in graph.nodes:
        if n.kind == OP and op_kind(n) == "gemm":
            ins = _tensor_inputs(n)
            act = [v for v in ins if not isinstance(v, Weight) and cast(TensorType, v.type).shape]  # tensor inputs
            if act and any(isinstance(v, Weight) for v in ins):
                acts.append(act[0])
    if not acts:
        return ()
    hidden = {_known_shape(a)[-1] for a in acts}
    for v in (*graph.placeholders, *acts):
        t = v.type
        if isinstance(t, TensorType) and t.shape is not None and len(t.shape) == 3 and t.shape[-1] in hidden:
            return tuple(t.shape[:2])
    return tuple(_known_shape(acts[0])[:-1])


def _known_shape(v: Value) -> tuple[Dim, ...]:
    """The shape of a tensor value that has one (``token_dims`` keeps only those)."""
    return cast("tuple[Dim, ...]", cast(TensorType, v.type).shape)


@dataclass(frozen=True)
class SpecializeShapes(ModulePass[Module]):
    """Symbolic sizes as integers, from values given for their symbols (``s72=8``), so that the
    cost pass sees real shapes: every dim of every value's type whose expression has a value under
    them. A dim with a symbol that has none stays symbolic and the pass names the symbol in a
    warning; the cost pass stops at it where a closed form needs that size."""

    name: ClassVar[str] = "specialize-shapes"

    values: tuple[str, ...] = ()  #: ``NAME=N`` each

    def __post_init__(self) -> None:
        parse_symbol_values(self.values)  # a ValueError: the pipeline's option error

    def apply(self, ctx: Context, module: Module) -> None:
        values = parse_symbol_values(self.values)
        seen: set[str] = set()
        unbound: set[str] = set()
        memo: dict[str, int | None] = {}

        def dim(d: Dim) -> Dim:
            if isinstance(d, int):
                return d
            seen.update(d.symbols)
            if d.expr not in memo:
                memo[d.expr] = evaluate_dim(d.expr, values)
            if memo[d.expr] is None:
                unbound.update(s for s in d.symbols if s not in values)
                return d
            return cast(int, memo[d.expr])  # a value: checked above

        def specialize(t: Type) -> Type:
            if isinstance(t, TensorType) and t.shape is not None and not all(isinstance(d, int) for d in t.shape):
                return TensorType(tuple(dim(d) for d in t.shape), t.dtype)
            if isinstance(t, TupleType):
                return TupleType(tuple(specialize(e) for e in t.elements), t.container)
            return t

        for graph in module.graphs:
            for v in (*graph.weights.values(), *graph.nodes):
                v.type = specialize(v.type)
        if unbound:
            names = ", ".join(sorted(unbound))
            ctx.warn(f"specialize-shapes: no value for {names}: sizes with {'it' if len(unbound) == 1 else 'them'} stay "
                     f"symbolic (count 0 bytes where an op only reads them; an error where an op's cost needs them); "
                     f"give values as NAME=N (simulate: --sym)")
        unused = sorted(set(values) - seen)
        if unused:
            ctx.warn(f"specialize-shapes: no size uses {', '.join(unused)}")


# -- the pass -------------------------------------------------------------------------------------
#: The largest tensor-parallel group: the devices of one scale-up domain that all-reduce every
#: layer (today's largest are hundreds of GPUs).
MAX_TP = 65536


@dataclass(frozen=True)
class CostModel(ModulePass[Module]):
    """Per-op FLOPs, bytes and roofline time with launch overhead on a hardware preset."""

    name: ClassVar[str] = "cost"

    hw: str = "h100"
    launch_overhead_us: float = -1.0  #: < 0: the preset's
    kv_len: int = 0  #: keys per sequence for attention ops that own a paged cache
    tp: int = 1  #: tensor-parallel size, for collectives
    mode: str = "roofline"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not '{self.mode}'")
        if not 1 <= self.tp <= MAX_TP or not 0 <= self.kv_len <= MAX_COUNT:
            raise ValueError(f"tp must be from 1 to {MAX_TP} and kv-len from 0 to 2**63-1")
        if not (math.isfinite(self.launch_overhead_us) and self.launch_overhead_us <= MAX_LAUNCH_US):
            raise ValueError(f"launch-overhead-us must be a finite number up to {MAX_LAUNCH_US:g} "
                             f"(< 0: the hardware's own), not {self.launch_overhead_us}")

    def hardware(self, ctx: Context) -> Hardware:
        hw = ctx.inputs.get("hardware") or load_hardware(self.hw)
        return hw.with_launch_overhead(self.launch_overhead_us) if self.launch_overhead_us >= 0 else hw

    def apply(self, ctx: Context, module: Module) -> None:
        hw = self.hardware(ctx)
        ctx.analyses["hardware"] = hw
        try:
            self._cost_graphs(ctx, module, hw)
        except LayercError as e:  # about the input's sizes on this hardware: name the input, else the hardware's file
            if e.path is None:
                e.path = module.source or hw.source
            raise

    def _cost_graphs(self, ctx: Context, module: Module, hw: Hardware) -> None:
        unknown: set[str] = set()
        unclear: list[str] = []
        for graph in module.graphs:
            _require_shapes(graph)
            totals = {"flops": 0, "bytes": 0, "time_ns": 0.0, "kernels": 0, "unknown": 0}
            for node in graph.nodes:
                if node.kind != OP:
                    continue
                c = self.op_cost(node, hw, unknown, unclear)
                node.meta["cost"] = c
                if c.is_kernel:
                    totals["flops"] += c.flops
                    totals["bytes"] += c.bytes
                    totals["time_ns"] += c.time_ns
                    totals["kernels"] += 1
                    totals["unknown"] += not c.known
            _check_totals(graph, totals, hw)
            graph.meta["cost"] = totals
        if unknown:
            ctx.warn(f"cost: no closed form for {', '.join(sorted(unknown))}: charged as one pass over their "
                     f"inputs and outputs")
        if unclear:
            more = f" (and {len(unclear) - 3} more)" if len(unclear) > 3 else ""
            ctx.warn(f"cost: unknown for {len(unclear)} op{'s' if len(unclear) != 1 else ''}, whose shapes the closed "
                     f"form cannot read: {'; '.join(unclear[:3])}{more}; each counts only its launch, no FLOPs or bytes")
        if self.tp == 1 and any(n.meta.get("cost") and n.meta["cost"].kind == "collective" for g in module.graphs for n in g.nodes):
            ctx.warn("cost: the graph has collectives but tp=1: they cost only their launch (set tp)")

    # -- one op ------------------------------------------------------------------------------
    def op_cost(self, node: Node, hw: Hardware, unknown: set[str] | None = None, unclear: list[str] | None = None) -> OpCost:
        """The op's cost; one whose shapes its closed form cannot read is an unknown cost, its
        reason added to ``unclear``."""
        kind = op_kind(node)
        if kind is None:
            if unknown is not None:
                unknown.add(op_name(node.target or "?"))
            kind = "elementwise"
        if kind == "alias":
            return OpCost("alias", 0, 0, 0.0)
        _check_sizes(node)
        try:
            flops, moved, dtype = _FORMULAS[kind](self, node)
        except Unclear as e:
            if unclear is not None:
                where = f"{node.loc.line}:{node.loc.column}: " if node.loc is not None else ""
                unclear.append(f"{where}'%{node.name}' ({op_name(node.target or '?')}): {e.message}")
            overhead = hw.launch_overhead_us * 1e3
            return OpCost(kind, 0, 0, overhead, 0.0, 0.0, overhead, "unknown", known=False)
        except LayercError as e:  # an operand's shape: say whose cost needs it, at the op
            if e.loc is None:
                e.loc = node.loc
                if not e.message.startswith(f"'%{node.name}'"):
                    e.message = f"the cost of '%{node.name}' ({op_name(node.target or '?')}): {e.message}"
            raise
        flops, moved = _count(node, "FLOPs", flops), _count(node, "bytes", moved)
        if kind == "collective":
            return _within_time(node, hw, self._collective(node, hw, flops, moved))
        if kind in MATRIX_KINDS:
            # a matrix op's closed form gives its dtype
            peak = hw.matrix_peak(cast(str, dtype)) * efficiency(hw.matrix_efficiency, flops / 1e9)
        else:
            peak = hw.vector_tflops * 1e12 * efficiency(hw.vector_efficiency, flops / 1e9)
        compute = flops / peak * 1e9 if flops else 0.0
        memory = moved / (hw.hbm_gbps * 1e9 * efficiency(hw.memory_efficiency, moved / 1e6)) * 1e9 if moved else 0.0
        overhead = hw.launch_overhead_us * 1e3
        busy = max(compute, memory) if self.mode == "roofline" else compute + memory
        bound = "compute" if compute > memory else "memory"
        return _within_time(node, hw, OpCost(kind, flops, moved, busy + overhead, compute, memory, overhead, bound))

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
    def _gemm(self, node: Node) -> Counts:
        ins = _tensor_inputs(node)
        k = shape(_operands(node, 1)[0], min_rank=1)[-1]
        out = math.prod(shape(node)) if isinstance(node.type, TensorType) else _out_numel(node)
        flops = 2 * out * k
        if node_op_name(node) in ("linear", "addmm") and len(ins) > 2:
            flops += out  # bias
        return flops, _io(node), _lowest(ins[:2])

    def _attention(self, node: Node) -> Counts:
        name = node_op_name(node)
        if "mla" in name and "with_cache" in name:
            return self._mla_with_cache(node)
        if "with_cache" in name:
            return self._paged_attention(node)
        q, k, v = (_positional_tensors(node) + [None, None, None])[:3]
        if q is None or k is None:
            raise Unclear("attention's cost needs its query and key tensors")
        qs, ks = shape(q, min_rank=2), shape(k, min_rank=2)
        out = shape(node, min_rank=2) if isinstance(node.type, TensorType) else None
        if out is None:
            raise Unclear("attention's cost needs its result as one tensor")
        if _layout(node) == "bsnd":  # [B, Sq, Hq, d], keys [B, L, Hkv, d]
            if len(qs) != 4 or len(ks) != 4 or len(out) != 4:
                raise Unclear(f"a bsnd layout needs 4-D q, k and result, not {_dims(qs)}, {_dims(ks)}, {_dims(out)}")
            batch, sq, d, kv_len = qs[0] * qs[2], qs[1], qs[3], ks[1]
        else:  # scaled_dot_product_attention's [..., Sq, d] over keys [..., L, d]: any rank from 2
            batch, sq, d, kv_len = math.prod(qs[:-2]), qs[-2], qs[-1], ks[-2]
            if math.prod(ks[:-2]) == 0 or batch % math.prod(ks[:-2]):
                raise Unclear(f"keys {_dims(ks)} do not pair with queries {_dims(qs)} (the leading dims of q "
                              "must be a multiple of k's)")
        if out[:-1] != qs[:-1]:
            raise Unclear(f"result {_dims(out)} is not one row per query of {_dims(qs)}")
        dv = out[-1]
        causal = next((a for a in node.args[3:] if isinstance(a, bool)), True)
        flops = 2 * batch * _pairs(sq, kv_len, causal) * (d + dv)
        moved = sum(nbytes(x) for x in (q, k, v) if x is not None) + nbytes(node)
        return flops, moved, _dtype(q)

    def _paged_attention(self, node: Node) -> Counts:
        """``q, k, v`` the new rows, the cache and the batch's metadata among the other inputs.
        Only tokens and per-token widths matter (``Hq·d``, ``Hkv·d``...), so the layouts are read as
        tokens × width: ``[B, S, H, d]``; ``[B, S, H·d]`` and ``[T, H·d]`` (heads flattened, as
        AutoDeploy's flattened ops take them); ``[T, H, d]``, told from ``[B, S, H·d]`` by the
        cache's head size. B sequences of S tokens each, or T tokens split into the sequences the
        ``seq_len`` metadata counts."""
        q, k, v = _operands(node, 3)
        qs, ks, vs = shape(q, min_rank=2), shape(k, min_rank=2), shape(v, min_rank=2)
        out = shape(node, min_rank=2) if isinstance(node.type, TensorType) else None
        if out is None:
            raise Unclear("attention's cost needs its result as one tensor")
        if len(qs) > 4:
            raise Unclear(f"q has shape {_dims(qs)}: the closed form reads rank 2, 3 or 4")
        lead = 2 if len(qs) == 4 else 1 if len(qs) == 2 else self._lead3(node, qs)
        tokens = math.prod(qs[:lead])
        b: int | None  # the sequences (None: no metadata says)
        if lead == 2:
            b, s = qs[0], qs[1]
        else:  # T tokens: the batch's metadata says how many sequences
            b = _sequences(node)
            if b is None:
                raise Unclear(f"q {_dims(qs)} holds {tokens} tokens, and no seq_len metadata says how many "
                              "sequences they are")
            if b <= 0 or tokens % b:
                raise Unclear(f"{tokens} tokens do not split into the {b} sequences the seq_len metadata counts")
            s = tokens // b
        if tokens == 0:  # an empty batch: nothing computed, nothing read from the cache
            return 0, nbytes(q) + nbytes(k) + nbytes(v) + nbytes(node), _dtype(q)
        widths = []
        for x, xs in (("q", qs), ("k", ks), ("v", vs), ("result", out)):
            if (len(xs) == len(qs) and xs[:lead] != qs[:lead]) or math.prod(xs) % tokens:
                raise Unclear(f"{x} {_dims(xs)} does not have the {tokens} token rows of q {_dims(qs)}")
            widths.append(math.prod(xs) // tokens)
        q_w, k_w, v_w, out_w = widths
        kv_len = self._kv_len(node, s)
        e = element_bytes(_dtype(k) or "torch.bfloat16") or 2
        flops = 2 * b * _pairs(s, kv_len, True) * (q_w + out_w)
        moved = nbytes(q) + nbytes(k) + nbytes(v) + nbytes(node) + b * (kv_len + s) * (k_w + v_w) * e
        return flops, moved, _dtype(q)

    @staticmethod
    def _lead3(node: Node, qs: tuple[int, ...]) -> int:
        """How many leading dims of a 3-D q count tokens: 1 for ``[T, H, d]``, 2 for ``[B, S, H·d]``,
        told apart by the head size of the cache (its last dim)."""
        d = _cache_head_dim(node)
        if d is None:
            raise Unclear(f"q {_dims(qs)} may be [T, H, d] or [B, S, H·d], and no cache among the inputs gives the "
                          "head size that tells them apart")
        if qs[-1] == d:
            return 1
        if d and qs[-1] % d == 0:
            return 2
        raise Unclear(f"q {_dims(qs)}: its last dim is neither the cache's head size {d} nor a multiple of it")

    def _mla_with_cache(self, node: Node) -> Counts:
        """``q_nope [B,S,H,P], q_pe [B,S,H,R], ckv [B,S,C], kpe [B,S,1,R], kv_b weight [H(P+V), C]``."""
        q_nope, q_pe, ckv, kpe, kv_b = _operands(node, 5)
        b, s, h, p = shape(q_nope, rank=4)
        r, c, v = shape(q_pe, min_rank=1)[-1], shape(ckv, min_rank=1)[-1], shape(node, min_rank=1)[-1]
        kv_len = self._kv_len(node, s)
        e = element_bytes(_dtype(ckv) or "torch.bfloat16") or 2
        flops = 2 * b * s * h * p * c + 2 * b * h * _pairs(s, kv_len, True) * (2 * c + r) + 2 * b * s * h * c * v
        moved = sum(nbytes(x) for x in (q_nope, q_pe, ckv, kpe, kv_b)) + nbytes(node) + b * (kv_len + s) * (c + r) * e
        return flops, moved, _dtype(q_nope)

    def _metadata(self, node: Node) -> Counts:
        """Index arithmetic for the attention ops (page tables, positions): no FLOPs worth counting,
        one pass over its inputs and results."""
        return 0, _io(node), None

    def _kv_len(self, node: Node, new: int) -> int:
        if self.kv_len <= 0:
            raise LayercError(f"'{node.name}' reads a paged KV cache whose length the graph does not say: "
                              f"give kv-len (simulate: --seq-len)", loc=node.loc)
        return self.kv_len + new

    def _moe(self, node: Node) -> Counts:
        x, ids, weights, w13, w2 = _operands(node, 5)
        t, hidden = _rows(x), shape(x, min_rank=1)[-1]
        k = shape(ids, min_rank=1)[-1]
        e, n1 = shape(w13, min_rank=2)[:2]
        inter = shape(w2, min_rank=1)[-1]
        flops = 2 * t * k * (n1 * hidden + hidden * inter)
        active = expected_active_experts(e, k, t)
        per_expert = (nbytes(w13) + nbytes(w2)) / e if e else 0.0
        act = element_bytes(_dtype(x) or "torch.bfloat16") or 2
        moved = (nbytes(x) + nbytes(ids) + nbytes(weights) + nbytes(node) + active * per_expert
                 + t * k * (2 * n1 + 2 * inter + hidden) * act)
        return flops, _whole(node, moved), _lowest([x, w13])

    def _fused_mlp(self, node: Node) -> Counts:
        """``x [.., H], w_gate_up [2I, H], w_down [H, I]`` (a SwiGLU MLP in one op)."""
        x, w13, w2 = _operands(node, 3)
        m, hidden = _rows(x), shape(x, min_rank=1)[-1]
        n1, inter = shape(w13, min_rank=1)[0], shape(w2, min_rank=1)[-1]
        act = element_bytes(_dtype(x) or "torch.bfloat16") or 2
        flops = 2 * m * n1 * hidden + 2 * m * inter * hidden + FLOPS_PER_ELEMENT["silu"] * m * inter
        return flops, _io(node) + m * (2 * n1 + 2 * inter) * act, _lowest([x, w13])

    def _rope(self, node: Node) -> Counts:
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
                moved += tokens * shape(v)[-1] * (element_bytes(cast(str, _dtype(v))) or 4)  # a tensor: it has a dtype
            else:
                moved += nbytes(v)
        return FLOPS_PER_ELEMENT["rope"] * out, moved, None

    def _router(self, node: Node) -> Counts:
        """Top-k routing: a fixed FLOP count per router logit (score function, group and top-k
        selection), one pass over the logits, bias and results."""
        logits = _operands(node, 1)[0]
        return FLOPS_PER_ELEMENT["router"] * numel(logits), _io(node), None

    def _kv_cache(self, node: Node) -> Counts:
        new = [a for a in (node.args[1] if len(node.args) > 1 and isinstance(node.args[1], (list, tuple)) else node.inputs[1:])
               if isinstance(a, Value)]
        return 0, 2 * sum(nbytes(a) for a in new), None

    def _act(self, node: Node) -> Counts:
        name = node_op_name(node)
        per = next((v for k, v in FLOPS_PER_ELEMENT.items() if k in name and k in ("silu", "gelu", "relu", "sigmoid", "tanh")), 4)
        if "and_mul" in name:
            per += 1
        return per * _out_numel(node), _io(node), None

    def _elementwise(self, node: Node) -> Counts:
        per = 0 if node_op_name(node) in _COPIES else 1
        return per * _out_numel(node), _io(node), None

    def _collective_io(self, node: Node) -> Counts:
        ins = _tensor_inputs(node)
        flops = numel(ins[0]) if ins else 0  # the reduction's adds
        if "norm" in node_op_name(node):
            flops += FLOPS_PER_ELEMENT["norm"] * numel(ins[0])
        return flops, _io(node), None


# -- limits -----------------------------------------------------------------------------------------
def _require_shapes(graph: Graph) -> None:
    """A graph whose values carry no shapes at all (torch.fx's own print) cannot be costed: say so
    once, at the graph, rather than at its first op."""
    values = [*graph.weights.values(), *graph.nodes]
    if values and not any(isinstance(v.type, TensorType) and v.type.shape is not None
                          or isinstance(v.type, TupleType) for v in values):
        raise LayercError(f"graph '{graph.name}' has no tensor shapes (a torch.fx print carries none), and the cost "
                          f"pass needs them: give a dump that prints them (AutoDeploy's NNN_<stage>_<transform>.txt)",
                          loc=graph.loc)


def _whole(node: Node, x: float) -> int:
    """A count computed in floats (the expected experts' bytes) as an int, within :data:`MAX_COUNT`."""
    if not math.isfinite(x) or x > MAX_COUNT:
        raise LayercError(f"'%{node.name}' ({op_name(node.target or '?')}) counts {magnitude(x)} bytes: more than 2**63",
                          loc=node.loc)
    return int(x)


def _count(node: Node, what: str, n: float) -> int:
    """An op's FLOPs or bytes, within :data:`MAX_COUNT` (64-bit counters)."""
    n = _whole(node, n) if isinstance(n, float) else n
    if n > MAX_COUNT:
        raise LayercError(f"'%{node.name}' ({op_name(node.target or '?')}) would count {magnitude(n)} {what}: "
                          f"more than the 2**63 a 64-bit counter holds", loc=node.loc)
    return n


def _within_time(node: Node, hw: Hardware, c: OpCost) -> OpCost:
    if not (math.isfinite(c.time_ns) and c.time_ns < MAX_NS):
        raise LayercError(f"'%{node.name}' ({op_name(node.target or '?')}) would take {magnitude(c.time_ns)} ns on "
                          f"{hw.name}: beyond the 2**62 ns (146 years) a schedule counts in", loc=node.loc)
    return c


def _check_totals(graph: Graph, totals: dict[str, Any], hw: Hardware) -> None:
    """The layer's sums within the same limits as one op's (the schedule adds op times up)."""
    if totals["flops"] > MAX_COUNT or totals["bytes"] > MAX_COUNT or not totals["time_ns"] < MAX_NS:
        raise LayercError(f"graph '{graph.name}' counts {magnitude(totals['flops'])} FLOPs, {magnitude(totals['bytes'])} "
                          f"bytes and {magnitude(totals['time_ns'])} ns on {hw.name}: beyond the 64-bit counts the "
                          f"simulation works in", loc=graph.loc)


def magnitude(x: float) -> str:
    """A count for a message: ``1.2e+21``, or ``2**6645`` when it is too large for a float."""
    if isinstance(x, int) and x.bit_length() > 1000:
        return f"~2**{x.bit_length() - 1}"
    return f"{x:.3g}"


def _vector(kind: str) -> Formula:
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


def _lowest(values: Iterable[object]) -> str:
    """The narrowest dtype among GEMM operands: fp8 weights run at the fp8 peak."""
    dtypes = [cast(str, _dtype(v)) for v in values if _dtype(v)]
    return min(dtypes, key=lambda d: element_bytes(d) or 8) if dtypes else "torch.bfloat16"


def _dims(shape_: tuple[int, ...]) -> str:
    return "x".join(map(str, shape_)) if shape_ else "scalar"


def _layout(node: Node) -> str:
    """``bsnd`` when an argument or the op's name says the tensors are ``[B, S, H, d]``, else
    ``bnsd`` (scaled_dot_product_attention's)."""
    for a in (*node.args, *node.kwargs.values()):
        if isinstance(a, str) and a.lower() in ("bsnd", "bnsd"):
            return a.lower()
    return "bsnd" if "bsnd" in op_name(node.target or "") else "bnsd"


#: Metadata inputs that count the sequences of a batch (AutoDeploy's names): one entry a sequence,
#: or one more (cumulative offsets).
_SEQ_LEN = re.compile(r"(?:^|_)(seq_len|seq_lens|seqlens|seq_len_with_cache|last_page_len)(?:_host)?$")
_CU_SEQ_LEN = re.compile(r"(?:^|_)(cu_seqlen|cu_seqlens|cu_seq_len|seq_start)(?:_host)?$")


def _sequences(node: Node) -> int | None:
    """The sequences of the batch, from a 1-D integer ``seq_len``-like input (or cumulative
    ``cu_seqlen`` offsets, one more); None when no input says."""
    for v in _tensor_inputs(node):
        t = _tensor(v)
        if t is None or len(_concrete(t)) != 1 or not (t.dtype or "").startswith("torch.int"):
            continue
        if _SEQ_LEN.search(v.name):
            return _concrete(t)[0]
    for v in _tensor_inputs(node):
        t = _tensor(v)
        if t is not None and len(_concrete(t)) == 1 and (t.dtype or "").startswith("torch.int") and _CU_SEQ_LEN.search(v.name):
            return _concrete(t)[0] - 1
    return None


def _cache_head_dim(node: Node) -> int | None:
    """The head size of the paged cache among the inputs (its last dim: ``[pages, 2, page, Hkv, d]``,
    ``[pages, page, Hkv, d]``), the first input past q, k, v of rank 4 or more."""
    for v in _tensor_inputs(node)[3:]:
        t = _tensor(v)
        if t is not None and len(_concrete(t)) >= 4 and not (t.dtype or "").startswith("torch.int"):
            return _concrete(t)[-1]
    return None


def _pairs(sq: int, kv_len: int, causal: bool) -> int:
    """Query-key pairs a flash kernel computes; causal queries sit at the last ``sq`` positions
    (with more queries than keys, the first ones see none)."""
    if not causal or sq == 1:
        return sq * kv_len
    if sq > kv_len:
        return kv_len * (kv_len + 1) // 2
    return sq * (kv_len - sq) + sq * (sq + 1) // 2


def expected_active_experts(experts: int, top_k: int, tokens: int) -> float:
    """Distinct experts ``tokens`` reach with ``top_k`` each, on average under uniform routing."""
    if experts <= 0:
        return 0.0
    return experts * (1.0 - (1.0 - min(top_k, experts) / experts) ** tokens)


_FORMULAS: dict[str, Formula] = {
    "gemm": CostModel._gemm,
    "attention": CostModel._attention,
    "moe": CostModel._moe,
    "fused_mlp": CostModel._fused_mlp,
    "kv_cache": CostModel._kv_cache,
    "metadata": CostModel._metadata,
    "norm": _vector("norm"),
    "rope": CostModel._rope,
    "softmax": _vector("softmax"),
    "router": CostModel._router,
    "act": CostModel._act,
    "elementwise": CostModel._elementwise,
    "collective": CostModel._collective_io,
}

__all__ = ["CostModel", "SpecializeShapes", "evaluate_dim", "parse_symbol_values", "token_dims",
           "MAX_COUNT", "MAX_NS", "MAX_TP", "MAX_LAUNCH_US", "MIN_RATE", "OpCost", "Hardware", "load_hardware",
           "hardware_presets", "efficiency", "op_kind", "expected_active_experts", "nbytes", "MODES"]
