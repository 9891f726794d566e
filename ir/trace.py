"""The trace IR: what ran, as columns.

A profile has hundreds of thousands to millions of kernels, so a kernel is a row index into
numpy columns, never an object; a selection is a boolean mask or an index array. Strings (kernel
names, API names, op names) are interned once in ``Trace.strings``; columns hold their ids.

Tables: ``kernels`` (GPU kernels), ``launches`` (host runtime/driver API calls), ``cpu_ops``
(framework ops, with Input Dims when recorded), ``annotations`` (NVTX ranges, user annotations
and their GPU projections), ``memops`` (memcpy/memset), ``modules`` (``nn.Module`` spans from
``python_function`` events). Kernels link to launches by correlation id, launches to CPU ops by
External id. Times are int64 nanoseconds; absent integers are -1. A column of one value in every
row (a one-GPU trace's device, a field the profiler does not record) is held once and is
read-only (``constant``): make a new column rather than write into one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterator, Self, TypeVar, cast

import numpy as np

NONE = -1


class Strings:
    """Interned strings: ``ids[s]`` and ``values[i]``; id -1 means no string."""

    __slots__ = ("values", "ids")

    def __init__(self, values: list[str] | None = None):
        self.values: list[str] = list(values or [])
        self.ids: dict[str, int] = {s: i for i, s in enumerate(self.values)}

    def intern(self, s: str | None) -> int:
        if s is None:
            return NONE
        i = self.ids.get(s)
        if i is None:
            i = self.ids[s] = len(self.values)
            self.values.append(s)
        return i

    def __getitem__(self, i: int) -> str | None:
        return None if i < 0 else self.values[i]

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """Strings for an id column (an object array; for display and small selections)."""
        table = np.array(self.values + [None], dtype=object)
        return table[np.where(ids < 0, len(self.values), ids)]

    def matching(self, pattern: str | re.Pattern[str]) -> np.ndarray:
        """Sorted ids of the strings the regex matches (search); test columns with ``np.isin``."""
        rx = re.compile(pattern) if isinstance(pattern, str) else pattern
        return np.array([i for i, s in enumerate(self.values) if rx.search(s)], dtype=np.int64)

    def __len__(self) -> int:
        return len(self.values)


# Tables and traces compare by identity (a comparison of columns is an array, not a truth value)
# and print their size: their dataclass makes only ``__init__`` (each method a dataclass makes is
# compiled as the module loads, and a small run pays it).
@dataclass(eq=False, repr=False)
class Table:
    """Equal-length numpy columns; subclasses name them (``COLUMNS``: name → dtype)."""

    COLUMNS: ClassVar[dict[str, str]] = {}

    def __post_init__(self) -> None:
        n = None
        for name, dtype in self.COLUMNS.items():  # (the fields, in order: a test holds them equal)
            col = getattr(self, name)
            if not isinstance(col, np.ndarray):
                col = np.asarray(col, dtype=dtype)
                setattr(self, name, col)
            if n is None:
                n = len(col)
            elif len(col) != n:
                raise ValueError(f"{type(self).__name__}.{name} has {len(col)} rows, not {n}")

    @classmethod
    def empty(cls) -> Self:
        return cls(**{name: np.empty(0, dtype) for name, dtype in cls.COLUMNS.items()})

    @classmethod
    def from_columns(cls, columns: dict[str, Any]) -> Self:
        """Missing columns are -1 (integers) in every row, held once (``constant``)."""
        n = len(next(iter(columns.values()))) if columns else 0
        out: dict[str, np.ndarray] = {}
        for name, dtype in cls.COLUMNS.items():
            col = columns.get(name)
            out[name] = constant(NONE, n, dtype) if col is None else np.asarray(col, dtype=dtype)
        return cls(**out)

    def compact(self) -> None:
        """Each column of one value in every row (a one-GPU trace's device, a profiler's absent
        field) held once, as ``constant`` does: such columns are a third of a Kineto kernel's
        bytes. Readers call this once."""
        for name in self.COLUMNS:
            col = getattr(self, name)
            if len(col) > 1 and not is_constant(col) and col[0] == col[-1] and not (col != col[0]).any():
                setattr(self, name, constant(col[0], len(col), col.dtype))

    def __len__(self) -> int:
        return len(getattr(self, next(iter(self.COLUMNS))))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self)} rows)"

    def take(self, index: np.ndarray | slice) -> Self:
        """The rows selected by a boolean mask, an index array or a slice, as a new table (a
        constant column stays one)."""
        cols = {name: getattr(self, name) for name in self.COLUMNS}
        n = _selected(index, len(self)) if any(is_constant(c) for c in cols.values()) else 0
        return type(self)(**{name: constant(c[0], n, c.dtype) if is_constant(c) and n else c[index] for name, c in cols.items()})

    def concat(self, other: Self) -> Self:
        cols = {}
        for name in self.COLUMNS:
            a, b = getattr(self, name), getattr(other, name)
            same = is_constant(a) and is_constant(b) and a[0] == b[0]
            cols[name] = constant(a[0], len(a) + len(b), a.dtype) if same else np.concatenate([a, b])
        return type(self)(**cols)

    @property
    def duration(self) -> np.ndarray:
        return cast(np.ndarray, self.end - self.start)  # type: ignore[attr-defined]


def constant(value: Any, n: int, dtype: Any) -> np.ndarray:
    """A column of ``n`` rows of one value, held once: read-only (a write raises, where it would
    write every row), no memory per row."""
    one = np.array(value, dtype)
    col = np.ndarray((n,), one.dtype, buffer=one, strides=(0,))  # (np.broadcast_to's checks cost microseconds)
    col.flags.writeable = False
    return col


def _selected(index: np.ndarray | slice, n: int) -> int:
    """How many of ``n`` rows a boolean mask, an index array or a slice selects."""
    if isinstance(index, slice):
        return len(range(*index.indices(n)))
    index = np.asarray(index)
    return int(np.count_nonzero(index)) if index.dtype == np.bool_ else len(index)


def is_constant(col: np.ndarray) -> bool:
    """Whether ``col`` is one value held once (``constant``)."""
    return col.ndim == 1 and len(col) > 1 and col.strides[0] == 0


_I64, _I32 = "int64", "int32"
_T = TypeVar("_T")


@dataclass(eq=False, repr=False)
class Kernels(Table):
    """GPU kernels: where and when each ran, its launch configuration, and its names."""

    COLUMNS: ClassVar[dict[str, str]] = {
        "start": _I64, "end": _I64, "device": _I32, "stream": _I64, "correlation": _I64,
        "graph_id": _I64, "graph_node_id": _I64, "grid_x": _I32, "grid_y": _I32, "grid_z": _I32,
        "block_x": _I32, "block_y": _I32, "block_z": _I32, "registers": _I32, "shared_static": _I32,
        "shared_dynamic": _I32, "name": _I32, "short": _I32, "external_id": _I64, "pid": _I64, "row": _I64,
    }
    start: np.ndarray
    end: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    correlation: np.ndarray
    graph_id: np.ndarray
    graph_node_id: np.ndarray
    grid_x: np.ndarray
    grid_y: np.ndarray
    grid_z: np.ndarray
    block_x: np.ndarray
    block_y: np.ndarray
    block_z: np.ndarray
    registers: np.ndarray
    shared_static: np.ndarray
    shared_dynamic: np.ndarray
    name: np.ndarray  #: the full (demangled) kernel name
    short: np.ndarray  #: the base function name
    external_id: np.ndarray
    pid: np.ndarray  #: the launching process where the source says (nsys), else -1
    row: np.ndarray  #: row or event index in the source file


LAUNCH_RUNTIME, LAUNCH_DRIVER = 0, 1


@dataclass(eq=False, repr=False)
class Launches(Table):
    """Host API calls (CUDA/HIP runtime and driver), names without their ``_v7000`` suffixes."""

    COLUMNS: ClassVar[dict[str, str]] = {
        "start": _I64, "end": _I64, "pid": _I64, "tid": _I64, "correlation": _I64,
        "external_id": _I64, "name": _I32, "kind": "int8", "row": _I64,
    }
    start: np.ndarray
    end: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    correlation: np.ndarray
    external_id: np.ndarray
    name: np.ndarray
    kind: np.ndarray
    row: np.ndarray


@dataclass(eq=False, repr=False)
class CpuOps(Table):
    """Host operators (aten ops, ``cpu_op`` events), with the shapes they recorded."""

    COLUMNS: ClassVar[dict[str, str]] = {
        "start": _I64, "end": _I64, "pid": _I64, "tid": _I64, "name": _I32, "external_id": _I64,
        "input_dims": _I32, "input_types": _I32, "concrete_inputs": _I32, "sequence": _I64, "row": _I64,
    }
    start: np.ndarray
    end: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    name: np.ndarray
    external_id: np.ndarray
    input_dims: np.ndarray  #: the ``Input Dims`` JSON text, interned
    input_types: np.ndarray  #: the ``Input type`` JSON text (``["c10::BFloat16", "Scalar"]``), interned
    concrete_inputs: np.ndarray  #: the ``Concrete Inputs`` JSON text (scalars' values: ``is_causal``), interned
    sequence: np.ndarray
    row: np.ndarray


ANNOTATION_NVTX, ANNOTATION_USER, ANNOTATION_GPU = 0, 1, 2


@dataclass(eq=False, repr=False)
class Annotations(Table):
    """NVTX ranges, ``record_function`` ranges, and their GPU projections (``gpu_user_annotation``,
    where ``pid``/``tid`` are the device and stream)."""

    COLUMNS: ClassVar[dict[str, str]] = {
        "start": _I64, "end": _I64, "pid": _I64, "tid": _I64, "name": _I32, "kind": "int8", "row": _I64,
    }
    start: np.ndarray
    end: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    name: np.ndarray
    kind: np.ndarray
    row: np.ndarray


MEMCPY, MEMSET = 0, 1


@dataclass(eq=False, repr=False)
class MemOps(Table):
    """GPU copies and fills (memcpy, memset), by device, stream and size."""

    COLUMNS: ClassVar[dict[str, str]] = {
        "start": _I64, "end": _I64, "device": _I32, "stream": _I64, "correlation": _I64, "bytes": _I64,
        "kind": "int8", "name": _I32, "graph_node_id": _I64, "row": _I64,
    }
    start: np.ndarray
    end: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    correlation: np.ndarray
    bytes: np.ndarray
    kind: np.ndarray
    name: np.ndarray  #: e.g. ``Memcpy HtoD (Pageable -> Device)``
    graph_node_id: np.ndarray
    row: np.ndarray


@dataclass(eq=False, repr=False)
class Modules(Table):
    """``nn.Module`` forward spans (``python_function`` events named ``nn.Module: X_N``)."""

    COLUMNS: ClassVar[dict[str, str]] = {"start": _I64, "end": _I64, "pid": _I64, "tid": _I64, "name": _I32, "row": _I64}
    start: np.ndarray
    end: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    name: np.ndarray
    row: np.ndarray


_GRAPH_LAUNCH = re.compile(r"^(cuda|hip)GraphLaunch|^cuGraphLaunch|^hipGraphLaunch")


@dataclass(eq=False, repr=False)
class Trace:
    """A profile in columns: its tables, one string table for their names, and what the
    reader learned of the capture."""

    source: str
    format: str  #: "nsys" or "kineto"
    strings: Strings
    kernels: Kernels
    launches: Launches = field(default_factory=Launches.empty)
    cpu_ops: CpuOps = field(default_factory=CpuOps.empty)
    annotations: Annotations = field(default_factory=Annotations.empty)
    memops: MemOps = field(default_factory=MemOps.empty)
    modules: Modules = field(default_factory=Modules.empty)
    #: device id → name; capture facts (``cuda_graph_mode``, ``schema_version``...); warnings.
    devices: dict[int, str] = field(default_factory=dict)
    #: device id → what it is where it is not a GPU (``"CPU"`` for a layer profiled on the host).
    device_kinds: dict[int, str] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        return f"Trace({self.source!r}, {self.format}, {len(self.kernels)} kernels)"

    # -- links -----------------------------------------------------------------------------
    def _made(self, name: str, make: Callable[[], _T]) -> _T:
        """``make()``, made once while the kernel and launch tables are the same (what the links
        derive from them is asked for by the passes, the segments and the report alike)."""
        memo = self.__dict__.get(name)
        if memo is not None and memo[0] is self.kernels and memo[1] is self.launches:
            return cast(_T, memo[2])
        out = make()
        self.__dict__[name] = (self.kernels, self.launches, out)
        return out

    def launch_keys(self) -> tuple[np.ndarray, np.ndarray]:
        """Per kernel and per host launch, what links the two: the correlation id, which is per
        process, so with the process where kernels know theirs and several processes ran (one
        per GPU: the same ids recur in each)."""
        return self._made("memo: launch keys", self._launch_keys)

    def _launch_keys(self) -> tuple[np.ndarray, np.ndarray]:
        k, l = self.kernels, self.launches
        one_process = len(k) and len(l) and int(k.pid.min()) == int(k.pid.max()) == int(l.pid.min()) == int(l.pid.max())
        if len(k) and (k.pid >= 0).all() and not one_process:
            return _process_key(k.pid, k.correlation), _process_key(l.pid, l.correlation)
        return k.correlation, l.correlation

    def kernel_launch(self) -> np.ndarray:
        """For every kernel, the index of the host call that launched it, or -1."""
        return link(*self.launch_keys())

    def kernel_host(self) -> tuple[np.ndarray, np.ndarray]:
        """For every kernel, the start and the thread of the host call that launched it (-1 where
        no launch is recorded): where a kernel sits in the host's program order."""
        launch = self.kernel_launch()
        have = launch >= 0
        when, tid = np.full(len(launch), NONE, np.int64), np.full(len(launch), NONE, np.int64)
        when[have], tid[have] = self.launches.start[launch[have]], self.launches.tid[launch[have]]
        return when, tid

    def launch_cpu_op(self) -> np.ndarray:
        """For every launch, the CPU op with the same External id, or -1."""
        return link(self.launches.external_id, self.cpu_ops.external_id)

    def graph_launch_mask(self) -> np.ndarray:
        """Launches that replay a CUDA/HIP graph."""
        ids = self.strings.matching(_GRAPH_LAUNCH)
        return isin(self.launches.name, ids)

    def replayed(self) -> np.ndarray:
        """Per kernel: whether a graph launch ran it (a CUDA/HIP graph replay). Read-only, and
        made once while the kernel and launch tables are the same (a trace's passes and report
        ask it half a dozen times: a search of every kernel's correlation id each)."""
        return self._made("memo: replayed", self._replayed)

    def _replayed(self) -> np.ndarray:
        kernel_key, launch_key = self.launch_keys()
        graph = launch_key[self.graph_launch_mask()]
        out = isin(kernel_key, graph[graph >= 0])
        out.flags.writeable = False
        return out

    def replays(self) -> dict[int, np.ndarray]:
        """Graph replays: launch key (``launch_keys``: the correlation id in a one-process trace)
        → indices of the kernels it ran, in start order."""
        k = self.kernels
        idx = np.nonzero(self.replayed())[0]
        key = self.launch_keys()[0][idx]
        order = group_then_start(key, k.start[idx])
        idx, corr = idx[order], key[order]
        cuts = np.nonzero(np.diff(corr))[0] + 1
        return {int(group_corr[0]): group for group, group_corr in zip(np.split(idx, cuts), np.split(corr, cuts))} if len(idx) else {}

    def drop_invalid(self) -> None:
        """Leave out the rows no clock can have produced (an end before the start, a time out of
        int64 range, a negative byte count), each kind counted in ``meta["dropped"]`` and said in
        one warning, so that no report is built on them. Readers call this once."""
        dropped: dict[str, dict[str, int]] = {}
        for table_name in _TABLE_NAMES:
            table = getattr(self, table_name)
            if not len(table):
                continue
            bad = np.zeros(len(table), bool)
            reasons = []
            for reason, mask in _invalid_rows(table):
                mask &= ~bad
                if mask.any():
                    reasons.append((reason, int(mask.sum()), int(table.row[np.argmax(mask)])))
                    bad |= mask
            if not reasons:
                continue
            setattr(self, table_name, table.take(~bad))
            dropped[table_name] = {reason: n for reason, n, _ in reasons}
            for reason, n, row in reasons:
                self.warnings.append(f"{n} {table_name} left out: {reason} (the first at event/row {row})")
        if dropped:
            self.meta["dropped"] = dropped

    def compact(self) -> None:
        """Every table's columns of one value held once (``Table.compact``)."""
        for table_name in _TABLE_NAMES:
            getattr(self, table_name).compact()

    def in_start_order(self) -> None:
        """Every table's rows in start order (a stable sort, ties in file order), the order the
        passes read them in. A profiler writes events in the order its buffers fill (Kineto:
        per activity buffer), not in time order; the file's order stays in ``row``. Readers call
        this once."""
        for table_name in _TABLE_NAMES:
            table = getattr(self, table_name)
            if not ascending(table.start):
                setattr(self, table_name, table.take(np.argsort(table.start, kind="stable")))

    def summary(self) -> dict[str, int]:
        return {
            "kernels": len(self.kernels), "launches": len(self.launches), "cpu_ops": len(self.cpu_ops),
            "annotations": len(self.annotations), "memops": len(self.memops), "modules": len(self.modules),
        }


#: Times beyond this (292 years in ns) overflow once two of them are added or subtracted.
TIME_LIMIT = 1 << 62


_TABLE_NAMES = ("kernels", "launches", "cpu_ops", "annotations", "memops", "modules")


def _invalid_rows(table: Table) -> Iterator[tuple[str, np.ndarray]]:
    start, end = table.start, table.end  # type: ignore[attr-defined]
    yield "a time out of range (an overflowing timestamp)", (np.abs(start) >= TIME_LIMIT) | (np.abs(end) >= TIME_LIMIT)
    yield "it ends before it starts (a negative duration)", end < start
    if isinstance(table, MemOps):
        yield "a negative byte count", table.bytes < NONE


def table_fits(span: int, count: int) -> bool:
    """Whether values spanning ``span`` are few enough apart to number through a table of that
    span (ids, keys of dense ids), rather than by a sort or a hash of the ``count`` values (ids
    read from a file may be anything)."""
    return span <= 4 * count + 4096


def ascending(values: np.ndarray) -> bool:
    """Whether a column never decreases (the IR's start order): neighbours compared, no diff
    column made."""
    return not (values[1:] < values[:-1]).any()


def ragged(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For rows of ``lengths`` laid end to end, per element: its row and its place in the row."""
    total = int(lengths.sum())
    return np.repeat(np.arange(len(lengths)), lengths), np.arange(total) - np.repeat(np.cumsum(lengths) - lengths, lengths)


def distinct(ids: np.ndarray) -> np.ndarray:
    """The sorted distinct non-negative values of an id column. (Ids are small dense integers, so
    a bincount beats a sort.)"""
    ids = ids[ids >= 0]
    if not len(ids):
        return np.empty(0, np.int64)
    if not table_fits(int(ids.max()), len(ids)):  # sparse ids (read from a file): no table sized by them
        return unique(ids).astype(np.int64)
    return np.flatnonzero(np.bincount(ids))


def unique(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values of an integer or bool column: ``np.unique(values)``, whose check
    for a masked array (asked for no indices) imports numpy.ma, 9 ms, a tenth of a small trace's
    whole run: a short column is sorted here instead (a long one is hashed by numpy, as before)."""
    v = np.asarray(values)
    if v.size > 1 << 16:
        return np.unique(v)
    v = np.sort(v, axis=None)
    if len(v) < 2:
        return v
    keep = np.empty(len(v), bool)
    keep[0] = True
    np.not_equal(v[1:], v[:-1], out=keep[1:])
    return v[keep]


def isin(values: np.ndarray, among: Any) -> np.ndarray:
    """``np.isin(values, among)`` for integer columns, without its import of numpy.ma (its sort
    path takes the distinct values of ``among`` through np.unique): for short columns, a search
    in those values instead (long ones are numpy's)."""
    v = np.asarray(values)
    if v.size > 1 << 16 or np.size(among) > 1 << 16:
        return np.isin(v, among)
    keys = unique(np.asarray(among).ravel())
    if not len(keys):
        return np.zeros(v.shape, bool)
    at = np.minimum(np.searchsorted(keys, v), len(keys) - 1)
    return cast(np.ndarray, keys[at] == v)


def group_order(group: np.ndarray) -> np.ndarray:
    """``np.argsort(group, kind="stable")``: ids below 2**16 (passes, streams, segments) as uint16,
    which numpy sorts by radix, in one pass."""
    narrow = len(group) and int(group.min()) >= 0 and int(group.max()) < 1 << 16
    return np.argsort(group.astype(np.uint16) if narrow else group, kind="stable")


def group_then_start(group: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Row order by ``group``, then by ``start`` (``np.lexsort((start, group))``): where the rows
    come in start order, the IR's, a stable sort by group alone (``group_order``)."""
    return group_order(group) if ascending(start) else np.lexsort((start, group))


def median(values: np.ndarray) -> float:
    """``np.median`` of a numeric column without NaNs (NaN when empty), without its import of
    numpy.ma (np.median checks for NaNs through it)."""
    v = np.asarray(values).ravel()
    n = len(v)
    if not n:
        return float("nan")
    k = n // 2
    part = np.partition(v, k if n % 2 else [k - 1, k])
    return float(part[k]) if n % 2 else (float(part[k - 1]) + float(part[k])) / 2


def first_rows(ids: np.ndarray, n: int, missing: int = -1) -> np.ndarray:
    """Per id below ``n``, the first row of ``ids`` that holds it (``missing`` where none): one
    scatter in reverse, where the last write wins, not a sort."""
    out = np.full(n, missing, np.int64)
    out[ids[::-1]] = np.arange(len(ids) - 1, -1, -1)
    return out


def last_rows(ids: np.ndarray, n: int) -> np.ndarray:
    """Per id below ``n``, the last row of ``ids`` that holds it (-1 where none): one scatter in
    order, where the last write wins."""
    out = np.full(n, -1, np.int64)
    out[ids] = np.arange(len(ids))
    return out


def unique_inverse(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` for an integer column, without its sort where
    the values span a range not much wider than their count (ids, keys of dense ids): a table
    of the values present, numbered by a running count."""
    values = np.asarray(values).reshape(-1)
    if not len(values):
        return values.copy(), np.empty(0, np.int64)
    lo, hi = int(values.min()), int(values.max())
    if not table_fits(hi - lo, len(values)) or values.dtype.kind != "i":  # sparse: the distinct values (hashed), then a search
        ids = unique(values)
        return ids, np.searchsorted(ids, values).astype(np.int64)
    shifted = values.astype(np.int64, copy=False)  # (in the column's own type, int8 or int16 would wrap)
    if lo:
        shifted = shifted - lo
    present = np.zeros(hi - lo + 1, bool)
    present[shifted] = True
    ids = np.flatnonzero(present)
    if hi - lo < _CACHED_TABLE:  # a table the caches hold: gathered straight into the int64 result
        rank: np.ndarray = np.cumsum(present, dtype=np.int64)
        rank -= 1
        return (ids + lo).astype(values.dtype), rank.take(shifted)
    rank = np.cumsum(present, dtype=np.int32 if hi - lo < 1 << 31 else np.int64)  # (half the table to gather from)
    rank -= 1
    return (ids + lo).astype(values.dtype), rank[shifted].astype(np.int64)


#: value ranges up to this make rank tables (8 bytes a value) small enough to gather from in cache
_CACHED_TABLE = 1 << 20


def _process_key(pid: np.ndarray, correlation: np.ndarray) -> np.ndarray:
    return np.where(correlation >= 0, (pid << 40) | (correlation & ((1 << 40) - 1)), -1)


def link(keys: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """For each key, the index of the first target with the same value (>= 0), else -1. Targets
    whose values span a range not much wider than their count (correlation ids) are looked up in
    a table of that range, else searched in their sorted values."""
    out = np.full(len(keys), NONE, dtype=np.int64)
    if not len(keys) or not len(targets):
        return out
    rows = np.flatnonzero(targets >= 0)
    if not len(rows):
        return out
    lo, hi = int(targets[rows].min()), int(targets[rows].max())
    if table_fits(hi - lo, len(rows)):
        first = np.full(hi - lo + 1, NONE, np.int64)
        first[targets[rows[::-1]] - lo] = rows[::-1]  # in reverse: the first row's write is the last
        inside = np.flatnonzero((keys >= lo) & (keys <= hi))
        out[inside] = first[keys[inside] - lo]
        return out
    order = np.argsort(targets, kind="stable")
    sorted_t = targets[order]
    pos = np.searchsorted(sorted_t, keys)
    pos = np.clip(pos, 0, len(sorted_t) - 1)
    found = (sorted_t[pos] == keys) & (keys >= 0)
    out[found] = order[pos[found]]
    return out
