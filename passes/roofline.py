"""Measured roofline per kernel: the FLOPs and bytes of the op that launched it, from the shapes
the profiler recorded (Kineto's ``Input Dims``, ``Input type`` and ``Concrete Inputs`` of the
innermost ``cpu_op``, which a kernel names by its ``External id``), against the GPU's peaks
(``data/hardware.toml``, the device told by its name).

Modelled: GEMMs (``mm``, ``addmm``, ``bmm``, ``baddbmm``, ``linear``, ``matmul``, ``_scaled_mm``:
2·M·N·K per product), attention (the SDPA ops and the flash / memory-efficient kernels' ops:
2·B·H·(Dqk + Dv) per query-key pair, causal masks counted pair by pair), norms and element-wise
ops (bytes read and written; one FLOP per element). An op that launches several kernels shares
its cost among them by their time. Anything else (an op not modelled, a kernel no op with shapes
launched, a varlen attention whose sequence lengths the shapes do not give) is unknown, never
guessed: NaN here, and the report says what share of the kernel time the model covers.

The bound of a kernel is the larger of its FLOPs at the matrix peak of its precision (FP32 GEMMs:
the TF32 peak where the kernel's name says tf32, else the vector FP32 peak, PyTorch's default)
and its bytes at the HBM bandwidth; ``roofline_fraction`` = that bound / the measured time.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import msgspec
import numpy as np

from layerc.ir.trace import Trace, distinct, link, unique_inverse

#: bytes per element of each ``Input type`` a tensor has; precision names as hardware.toml's
_ELEMENT: dict[str, tuple[int, str]] = {
    "float": (4, "float32"), "double": (8, "float64"), "c10::Half": (2, "float16"), "c10::BFloat16": (2, "bfloat16"),
    "c10::Float8_e4m3fn": (1, "float8"), "c10::Float8_e5m2": (1, "float8"), "c10::Float8_e4m3fnuz": (1, "float8"),
    "c10::Float8_e5m2fnuz": (1, "float8"), "long int": (8, "int64"), "int": (4, "int32"), "short int": (2, "int16"),
    "signed char": (1, "int8"), "unsigned char": (1, "uint8"), "bool": (1, "bool"),
    "c10::complex<float>": (8, "complex64"), "c10::complex<double>": (16, "complex128"),
}
COMPUTE, MEMORY = "compute", "memory"  #: what bounds an op's kind: the matrix peak, or HBM


# (the dataclasses of a trace's run make only ``__init__``: each method a dataclass makes is compiled
# as the module loads, and a small run pays it)
@dataclass(eq=False, repr=False)
class OpCost:
    """What one op moves and computes."""

    flops: float
    bytes: float
    precision: str  #: of its first tensor (``bfloat16``...), for the matrix peak
    bound: str  #: COMPUTE or MEMORY


class _Call:
    """An op's recorded inputs: per input its dims (None: not a tensor) and element type."""

    __slots__ = ("dims", "types", "concrete")

    def __init__(self, dims: list[Any], types: list[Any], concrete: list[Any]):
        self.dims, self.types, self.concrete = dims, types, concrete

    def tensor(self, i: int) -> tuple[int, ...] | None:
        if i >= len(self.dims) or not isinstance(self.dims[i], list) or not self.dims[i]:
            return None
        if i < len(self.types) and self.types[i] not in _ELEMENT:
            return None
        d = self.dims[i]
        return tuple(d) if all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in d) else None

    def size(self, i: int) -> int:
        """Bytes per element of input ``i`` (0 where unknown)."""
        return _ELEMENT.get(self.types[i], (0, ""))[0] if i < len(self.types) else 0

    def precision(self, i: int = 0) -> str:
        return _ELEMENT.get(self.types[i], (0, "unknown"))[1] if i < len(self.types) else "unknown"

    def flag(self, i: int) -> bool | None:
        """A concrete boolean or integer input (``is_causal``), None where not recorded."""
        v = self.concrete[i] if i < len(self.concrete) else ""
        return {"True": True, "False": False}.get(v) if isinstance(v, str) else None

    def number(self, i: int) -> int | None:
        v = self.concrete[i] if i < len(self.concrete) else ""
        return int(v) if isinstance(v, str) and v.lstrip("-").isdigit() else None

    def tensors(self) -> list[int]:
        return [i for i in range(len(self.dims)) if self.tensor(i) is not None]


def _elements(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


# -- GEMMs --------------------------------------------------------------------------------------
def _product(call: _Call, a: int, b: int, extra: tuple[int, ...] = ()) -> OpCost | None:
    """``a @ b`` with matmul's rules (1-D operands, broadcast batch dimensions)."""
    x, y = call.tensor(a), call.tensor(b)
    if x is None or y is None:
        return None
    xm = (1, *x) if len(x) == 1 else x
    yn = (*y, 1) if len(y) == 1 else y
    if xm[-1] != yn[-2]:
        return None
    try:
        batch = np.broadcast_shapes(xm[:-2], yn[:-2])
    except ValueError:
        return None
    m, k, n = xm[-2], xm[-1], yn[-1]
    out = _elements(tuple(batch)) * m * n
    size = call.size(a)
    moved = (_elements(x) + _elements(y) + out) * size + sum(_elements(call.tensor(i) or ()) * call.size(i) for i in extra)
    return OpCost(2.0 * _elements(tuple(batch)) * m * n * k, float(moved), call.precision(a), COMPUTE)


def _linear(call: _Call) -> OpCost | None:
    x, w = call.tensor(0), call.tensor(1)
    if x is None or w is None or len(w) != 2 or x[-1] != w[1]:
        return None
    rows, (n, k) = _elements(x[:-1]), w
    bias = _elements(call.tensor(2) or ()) * call.size(2) if call.tensor(2) else 0
    moved = (_elements(x) + n * k + rows * n) * call.size(0) + bias
    return OpCost(2.0 * rows * n * k, float(moved), call.precision(0), COMPUTE)


def _grouped(call: _Call, offs: int, out_size: int | None = None) -> OpCost | None:
    """``torch._grouped_mm`` (MoE experts: each group's rows times its own matrix): 2-D × 3-D
    (rows split among G matrices by ``offs``), 3-D × 2-D (columns split), 2-D × 2-D (the reduction
    split: one output per group) or 3-D × 3-D (G products). ``out_size``: bytes per output element
    (a scaled FP8 product writes BF16), default the inputs'."""
    x, y = call.tensor(0), call.tensor(1)
    if x is None or y is None or x[-1] != (y[-2] if len(y) == 3 else y[0]):
        return None
    if len(x) == 2 and len(y) == 3:  # (M, K) × (G, K, N): each row meets one matrix
        (m, k), n, outputs = x, y[2], x[0] * y[2]
    elif len(x) == 3 and len(y) == 2:  # (G, M, K) × (K, N): each column meets one group
        (m, k), n, outputs = x[1:], y[1], x[1] * y[1]
    elif len(x) == 2 and len(y) == 2:  # (M, K) × (K, N), K split into G: (G, M, N)
        groups = call.tensor(offs)
        if groups is None or len(groups) != 1:
            return None
        (m, k), n, outputs = x, y[1], groups[0] * x[0] * y[1]
    elif len(x) == 3 and len(y) == 3 and x[0] == y[0]:  # (G, M, K) × (G, K, N)
        (m, k), n, outputs = (x[0] * x[1], x[2]), y[2], x[0] * x[1] * y[2]
    else:
        return None
    size = call.size(0)
    moved = (_elements(x) + _elements(y)) * size + outputs * (out_size or size)
    return OpCost(2.0 * m * k * n, float(moved), call.precision(0), COMPUTE)


# -- attention ----------------------------------------------------------------------------------
def _pairs(sq: int, sk: int, causal: bool | None, bottom_right: bool = False) -> int | None:
    """Query-key pairs computed: all, or the causal mask's (top-left aligned, as PyTorch's
    ``is_causal``; bottom-right, as flash-attn's, where asked)."""
    if causal is None:
        return None
    if not causal:
        return sq * sk
    i = np.arange(sq, dtype=np.int64)
    seen = i + 1 + (sk - sq if bottom_right else 0)
    return int(np.clip(seen, 0, sk).sum())


def _attention(call: _Call, heads_first: bool, causal: bool | None, bottom_right: bool = False) -> OpCost | None:
    """q, k, v as inputs 0-2: [B, H, S, D] (``heads_first``) or [B, S, H, D]."""
    q, k, v = call.tensor(0), call.tensor(1), call.tensor(2)
    if q is None or k is None or v is None or not len(q) == len(k) == len(v) == 4:
        return None
    if heads_first:
        (b, h, sq, d), (_, _, sk, _), dv = q, k, v[3]
    else:
        (b, sq, h, d), (_, sk, _, _), dv = q, k, v[3]
    pairs = _pairs(sq, sk, causal, bottom_right)
    if pairs is None:
        return None
    size = call.size(0)
    moved = (_elements(q) + _elements(k) + _elements(v) + b * h * sq * dv) * size
    return OpCost(2.0 * b * h * pairs * (d + dv), float(moved), call.precision(0), COMPUTE)


def _efficient(call: _Call) -> OpCost | None:
    """``_efficient_attention_forward``: its ``custom_mask_type`` (9): 0 none, 1 causal from the
    top left, 2 from the bottom right; varlen (``cu_seqlens``, 4) is not modelled."""
    if call.tensor(4) is not None:
        return None
    mask = call.number(9)
    if mask not in (0, 1, 2):
        return None
    return _attention(call, heads_first=False, causal=mask > 0, bottom_right=mask == 2)


def _flash_forward(call: _Call) -> OpCost | None:
    """``_flash_attention_forward``: dense [B, S, H, D] only (varlen ``cum_seq_q``, 3, is not)."""
    if call.tensor(3) is not None:
        return None
    return _attention(call, heads_first=False, causal=call.flag(8))


# -- memory-bound ops ---------------------------------------------------------------------------
def _streamed(call: _Call, written: str) -> OpCost | None:
    """Bytes read (every tensor input) and written: ``same`` as the largest input (element-wise,
    norms), ``all`` as much as was read (cat, copy), ``none`` (reductions, in-place); one FLOP
    per element of the largest input."""
    tensors = call.tensors()
    if not tensors:
        return None
    read = sum(_elements(call.tensor(i) or ()) * call.size(i) for i in tensors)
    big = max(tensors, key=lambda i: _elements(call.tensor(i) or ()))
    largest = _elements(call.tensor(big) or ()) * call.size(big)
    out = {"same": largest, "all": read, "none": 0}[written]
    return OpCost(float(_elements(call.tensor(big) or ())), float(read + out), call.precision(big), MEMORY)


def _rows_of(call: _Call, table: int, index: int, dim: int | None) -> OpCost | None:
    """A lookup (``embedding``, ``index_select``): the rows ``index`` picks from ``table`` along
    ``dim``, read and written, and the index itself; the rest of the table is not touched."""
    t, i = call.tensor(table), call.tensor(index)
    if t is None or i is None or dim is None or not -len(t) <= dim < len(t):
        return None
    row = _elements(t) // max(t[dim], 1)
    out = _elements(i) * row
    return OpCost(float(out), float(2 * out * call.size(table) + _elements(i) * call.size(index)), call.precision(table), MEMORY)


_ELEMENTWISE = ("add", "sub", "mul", "div", "neg", "pow", "rsqrt", "sqrt", "exp", "log", "silu", "gelu", "relu", "sigmoid",
                "tanh", "where", "masked_fill", "clamp", "abs", "reciprocal", "cos", "sin", "_softmax", "softmax",
                "log_softmax", "_log_softmax", "layer_norm", "native_layer_norm", "rms_norm", "_fused_rms_norm",
                "group_norm", "native_group_norm", "dropout", "fill_", "zero_", "_to_copy", "clone", "cumsum", "eq", "ne",
                "lt", "gt", "le", "ge", "bitwise_not", "logical_not", "triu", "tril")
_REDUCTIONS = ("mean", "sum", "all", "any", "norm", "linalg_vector_norm", "amax", "amin")

#: op name → its cost from its recorded inputs
_MODELS: dict[str, Callable[[_Call], OpCost | None]] = {
    "aten::mm": lambda c: _product(c, 0, 1),
    "aten::addmm": lambda c: _product(c, 1, 2, extra=(0,)),
    "aten::bmm": lambda c: _product(c, 0, 1),
    "aten::baddbmm": lambda c: _product(c, 1, 2, extra=(0,)),
    "aten::matmul": lambda c: _product(c, 0, 1),
    "aten::_scaled_mm": lambda c: _product(c, 0, 1),
    "aten::_grouped_mm": lambda c: _grouped(c, 2),
    "aten::_scaled_grouped_mm": lambda c: _grouped(c, 4, out_size=2),
    "aten::linear": _linear,
    "aten::scaled_dot_product_attention": lambda c: _attention(c, True, c.flag(5)),
    "aten::_scaled_dot_product_flash_attention": lambda c: _attention(c, True, c.flag(4)),
    "aten::_scaled_dot_product_efficient_attention": lambda c: _attention(c, True, c.flag(6)),
    "aten::_scaled_dot_product_cudnn_attention": lambda c: _attention(c, True, c.flag(6)),
    "aten::_flash_attention_forward": _flash_forward,
    "aten::_efficient_attention_forward": _efficient,
    **{f"aten::{op}": (lambda c: _streamed(c, "same")) for op in _ELEMENTWISE},
    **{f"aten::{op}_": (lambda c: _streamed(c, "none")) for op in _ELEMENTWISE if not op.endswith("_")},
    **{f"aten::{op}": (lambda c: _streamed(c, "none")) for op in _REDUCTIONS},
    "aten::copy_": lambda c: _streamed(c, "none"),  # (dst, src): both are inputs, dst written
    "aten::cat": lambda c: _streamed(c, "all"),
    "aten::embedding": lambda c: _rows_of(c, 0, 1, 0),
    "aten::index_select": lambda c: _rows_of(c, 0, 2, c.number(1)),
}

_json = msgspec.json.Decoder()


def _decoded(text: str | None) -> list[Any]:
    if not text:
        return []
    try:
        v = _json.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return []
    return v if isinstance(v, list) else []


def op_cost(name: str, dims: str | None, types: str | None, concrete: str | None = None) -> OpCost | None:
    """The cost of one op from its recorded inputs (the JSON texts of Kineto's args), or None."""
    model = _MODELS.get(name)
    if model is None or not dims:
        return None
    call = _Call(_decoded(dims), _decoded(types), _decoded(concrete))
    if not call.types:  # (an old trace without Input type: the sizes are unknown)
        return None
    cost = model(call)
    return cost if cost is not None and math.isfinite(cost.flops) and math.isfinite(cost.bytes) else None


# -- per kernel ---------------------------------------------------------------------------------
@dataclass(eq=False, repr=False)
class Roofline:
    """Per kernel: FLOPs, bytes and the time they take at the GPU's peaks (NaN: unknown)."""

    flops: np.ndarray
    bytes: np.ndarray
    bound_ns: np.ndarray  #: the roofline's time: max(FLOPs / matrix peak, bytes / HBM), ns; NaN without peaks
    #: device id → the hardware.toml preset whose peaks apply (None: a device layerc has no peaks for)
    devices: dict[int, str | None] = field(default_factory=dict)
    #: the last layer table's costs (``layer_costs``): each output of a run reads them
    _per_layer: tuple[Any, dict[str, np.ndarray]] | None = field(default=None, init=False)

    def known(self) -> np.ndarray:
        return np.asarray(~np.isnan(self.flops))


def kernel_roofline(trace: Trace) -> Roofline:
    """Each kernel's share of the cost of the op that launched it, and its bound on its GPU."""
    k, ops = trace.kernels, trace.cpu_ops
    n = len(k)
    flops, moved, code = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    peak_matrix, peak_hbm = np.full(n, np.nan), np.full(n, np.nan)
    op = link(k.external_id, ops.external_id) if len(ops) else np.full(n, -1, np.int64)
    mine = op >= 0
    if mine.any():
        _fill(trace, op, mine, flops, moved, code)
    hardware, devices = _hardware_of(trace)
    for dev, hw in hardware.items():
        at = k.device == dev
        peak_hbm[at] = hw.hbm_gbps * 1e9
        peak_matrix[at] = _matrix_peaks(trace, hw, at, code[at])
    bound = np.fmax(flops / peak_matrix, moved / peak_hbm) * 1e9
    bound[np.isnan(flops) | np.isnan(peak_hbm)] = np.nan
    return Roofline(flops, moved, bound, devices)


_PRECISION_CODES = ("float32", "float16", "bfloat16", "float8", "float64")


def _fill(trace: Trace, op: np.ndarray, mine: np.ndarray, flops: np.ndarray, moved: np.ndarray,
          precision: np.ndarray) -> None:
    """The op costs, once per distinct (name, dims, types, concrete), shared among each op's
    kernels by their time. ``precision`` gets a code per kernel: its index in _PRECISION_CODES
    (NaN for a memory-bound op)."""
    k, ops, strings = trace.kernels, trace.cpu_ops, trace.strings
    rows = op[mine]
    key = np.stack([ops.name[rows], ops.input_dims[rows], ops.input_types[rows], ops.concrete_inputs[rows]], 1).astype(np.int64)
    combos, which = np.unique(key, axis=0, return_inverse=True)
    costs = [op_cost(strings[int(a)] or "", strings[int(b)], strings[int(c)], strings[int(d)]) for a, b, c, d in combos.tolist()]
    f = np.array([c.flops if c else np.nan for c in costs])[which.reshape(-1)]
    b = np.array([c.bytes if c else np.nan for c in costs])[which.reshape(-1)]
    code = np.array([_PRECISION_CODES.index(c.precision) if c and c.bound == COMPUTE and c.precision in _PRECISION_CODES
                     else np.nan for c in costs])[which.reshape(-1)]
    # an op's kernels share its cost by their time (one GEMM and its split-K reduction)
    dur = (k.end - k.start)[mine].astype(np.float64)
    ids, index = unique_inverse(rows)
    total = np.bincount(index, weights=dur, minlength=len(ids))
    count = np.bincount(index, minlength=len(ids))
    share = np.where(total[index] > 0, dur / np.where(total[index] > 0, total[index], 1), 1.0 / count[index])
    where = np.flatnonzero(mine)
    flops[where], moved[where], precision[where] = f * share, b * share, code


def _matrix_peaks(trace: Trace, hw: Any, at: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """FLOP/s of the kernels ``at`` (a device's) from their precision codes (``_fill``): the
    matrix peak of the precision; FP32 at the TF32 peak where the kernel's name says tf32, else
    at the vector peak; a memory-bound op (NaN code) at the vector peak."""
    out = np.full(len(codes), hw.vector_tflops * 1e12)
    for i, name in enumerate(_PRECISION_CODES):
        has = codes == i
        if not has.any():
            continue
        if name == "float32":
            tf32 = trace.strings.matching(re.compile("tf32", re.I))
            named = np.isin(trace.kernels.name[at][has], tf32)
            out[np.flatnonzero(has)[named]] = hw.matrix_tflops.get("float32", hw.vector_tflops) * 1e12
        elif name in hw.matrix_tflops:
            out[has] = hw.matrix_tflops[name] * 1e12
    return out


def _hardware_of(trace: Trace) -> tuple[dict[int, Any], dict[int, str | None]]:
    """Each kernel device's hardware preset, by the device's name (``deviceProperties``); a
    device id the trace does not describe (ROCm numbers kernels' devices apart from their
    properties) takes the name every described device has, where they all have one."""
    from layerc.passes.hardware import device_preset

    hardware, named = {}, {}
    names = set(trace.devices.values())
    only = names.pop() if len(names) == 1 else ""  # every device the trace describes is one model
    for dev in distinct(trace.kernels.device).tolist():
        hw = device_preset(trace.devices.get(dev, only))
        named[dev] = hw.key if hw is not None else None
        if hw is not None:
            hardware[dev] = hw
    return hardware, named


# -- sums ---------------------------------------------------------------------------------------
def _rate(x: float, t: float) -> float | None:
    return round(x / t, 3) if t > 0 else None


def totals(r: Roofline, dur: np.ndarray, mask: np.ndarray) -> dict[str, Any]:
    """The kernels ``mask`` whose cost is known: their count, time, FLOPs and bytes, achieved
    TFLOP/s and GB/s, the roofline's share of their time (``roofline_pct``: 100 is at a peak;
    None without peaks) and the share of ``mask``'s time whose cost is known."""
    known = mask & r.known()
    t = float(dur[known].sum())
    flops, moved = float(r.flops[known].sum()), float(r.bytes[known].sum())
    bounded = known & ~np.isnan(r.bound_ns)
    whole = float(dur[mask].sum())
    return {"kernels": int(known.sum()), "time_ns": int(t), "flops": round(flops), "bytes": round(moved),
            "tflops": _rate(flops, t * 1e3), "gbs": _rate(moved, t),
            "roofline_pct": _rate(100 * float(r.bound_ns[bounded].sum()), float(dur[bounded].sum())),
            "covered_pct": _rate(100 * t, whole)}


def per_row(r: Roofline, dur: np.ndarray, row: np.ndarray, rows: int) -> dict[str, np.ndarray]:
    """Per row (a layer; ``row``: each kernel's, -1 none): FLOPs, bytes, the roofline's time and
    the time of the kernels whose cost is known, and of all."""
    mine = row >= 0
    known = mine & r.known()
    bounded = known & ~np.isnan(r.bound_ns)

    def add(mask: np.ndarray, weights: np.ndarray) -> np.ndarray:
        return np.bincount(row[mask], weights=weights[mask], minlength=rows)

    return {"flops": add(known, r.flops), "bytes": add(known, r.bytes), "bound_ns": add(bounded, r.bound_ns),
            "bounded_ns": add(bounded, dur), "known_ns": add(known, dur), "time_ns": add(mine, dur)}


#: what each layer row gains: its FLOPs and bytes (None where none of its kernels' costs is
#: known), the roofline's share of the time of its kernels whose cost and peaks are known, and
#: the share of its time whose cost is known
LAYER_COSTS = ("flops", "bytes", "roofline_pct", "cost_covered_pct")


def layer_costs(r: Roofline, trace: Trace, table: Any) -> dict[str, np.ndarray]:
    """:data:`LAYER_COSTS` per row of a layer table (object columns: None where unknown),
    computed once per table (the JSON, the tables and the timeline of one run share them)."""
    if r._per_layer is not None and r._per_layer[0] is table:
        return r._per_layer[1]
    n, row = len(table), table.row_of
    dur = (trace.kernels.end - trace.kernels.start).astype(np.float64)
    s = per_row(r, dur, row, n)
    have, bounded = s["known_ns"] > 0, s["bounded_ns"] > 0
    out = np.empty((4, n), dtype=object)
    out[:] = None
    out[0, have] = np.rint(s["flops"][have]).astype(np.int64)
    out[1, have] = np.rint(s["bytes"][have]).astype(np.int64)
    out[2, bounded] = np.round(100 * s["bound_ns"][bounded] / s["bounded_ns"][bounded], 3)
    out[3] = np.round(100 * s["known_ns"] / np.where(s["time_ns"] > 0, s["time_ns"], 1), 3)
    costs = dict(zip(LAYER_COSTS, out))
    r._per_layer = (table, costs)
    return costs
