"""A typed trace's facts as Arrow tables, one row per kernel, layer, stage, kernel type and pass:
for dataframes (``kernels_df()``), Parquet (``trace --parquet``) and SQL. They hold the numbers
``trace --json`` reports, from the same selection (``--stage``): a table's sums are the JSON's
totals. Names are dictionary columns over the names a table uses (a kernel name is stored once);
an absent id (-1 in the IR: no layer, no stream) is a null. Every table carries the ``rank`` of
the process that wrote the trace, where the trace says (``distributedInfo``), else 0."""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from layerc.ir.trace import Trace, unique_inverse
from layerc.passes.kernel_tables import TYPES
from layerc.passes.layer_facts import STAGES, pass_stages
from layerc.passes.roofline import LAYER_COSTS, layer_costs

if TYPE_CHECKING:
    import pandas
    import pyarrow as pa

    from layerc.passes.trace_passes import TraceModule

#: the tables, in the order they are written
TABLES = ("kernels", "layers", "stages", "types", "passes")
_STAGE_NAMES = ("unknown", *STAGES)  # stage code + 1 → name


@dataclass(frozen=True, eq=False)
class Selection:
    """The kernels and layers a report shows: all, or one stage's (``trace --stage``)."""

    stage: str
    keep: np.ndarray  #: per kernel
    rows: np.ndarray  #: per layer of the module's table

    @classmethod
    def of(cls, module: TraceModule, stage: str = "all") -> Selection:
        from layerc.ir.diagnostics import LayercError

        table, kernel_stage = module.table, module.stage
        if table is None or kernel_stage is None:
            raise LayercError("the trace's layers are not typed: run type-layers (or a pipeline ending in it) first",
                              module.trace.source)
        if stage == "all":
            return cls(stage, np.ones(len(kernel_stage), bool), np.ones(len(table), bool))
        if stage not in STAGES:
            raise ValueError(f"stage must be all, {' or '.join(STAGES)}, not {stage!r}")
        code = STAGES.index(stage)
        return cls(stage, kernel_stage == code, table.stage == code)


def rank_of(trace: Trace) -> int:
    """The trace's rank in its job: Kineto's ``distributedInfo.rank`` where it is a whole number
    of 0 or more, else 0 (one process, or a trace that does not say)."""
    info = trace.meta.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    return rank if isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0 else 0


def trace_tables(module: TraceModule, stage: str = "all", rank: int | None = None) -> dict[str, pa.Table]:
    """Every table of :data:`TABLES` for a module after ``type-layers``."""
    import pyarrow as pa

    sel = Selection.of(module, stage)
    rank = rank_of(module.trace) if rank is None else rank
    made = {"kernels": _kernels, "layers": _layers, "stages": _stages, "types": _types, "passes": _passes}
    out = {}
    for name in TABLES:
        columns = made[name](module, sel)
        n = len(next(iter(columns.values())))
        out[name] = pa.table({"rank": pa.array(np.full(n, rank, np.int32)), **columns})
    return out


# -- columns -----------------------------------------------------------------------------------
def _ids(values: np.ndarray) -> pa.Array:
    """Whole numbers, null where the IR says none (below 0)."""
    import pyarrow as pa

    return pa.array(values, mask=values < 0)


def _names(ids: np.ndarray, strings: list[str]) -> pa.Array:
    """A string column from string ids, as a dictionary of the strings it uses (null for -1)."""
    import pyarrow as pa

    have = ids >= 0
    used, index = unique_inverse(ids[have]) if have.any() else (np.empty(0, np.int64), np.empty(0, np.int64))
    codes = np.zeros(len(ids), np.int32)
    codes[have] = index
    text = pa.array([strings[i] for i in used.tolist()], pa.string())
    return pa.DictionaryArray.from_arrays(pa.array(codes, mask=~have), text)


def _labels(codes: np.ndarray, labels: tuple[str, ...], offset: int = 0) -> pa.Array:
    """A dictionary column of a small code (a stage, a kernel type) and its names."""
    import pyarrow as pa

    return pa.DictionaryArray.from_arrays(pa.array((codes.astype(np.int64) + offset).astype(np.int32)), pa.array(labels, pa.string()))


def _kernels(module: TraceModule, sel: Selection) -> dict[str, Any]:
    t, cls, layers = module.trace, module.classification, module.layers
    assert cls is not None and layers is not None and module.stage is not None  # Selection.of checked
    k, rows = t.kernels, np.flatnonzero(sel.keep)
    strings = t.strings.values
    stack = layers.stack[rows] if layers.stack is not None else np.zeros(len(rows), np.int64)
    return {
        "kernel": rows, "pass": _ids(layers.pass_of[rows]), "layer": _ids(layers.layer[rows]), "stack": _ids(stack),
        "stage": _labels(module.stage[rows], _STAGE_NAMES, 1), "type": _labels(cls.type[rows], TYPES),
        "short_name": _names(cls.short[rows], strings), "name": _names(k.name[rows], strings),
        "start_ns": k.start[rows], "end_ns": k.end[rows], "duration_ns": (k.end - k.start)[rows],
        "device": _ids(k.device[rows]), "stream": _ids(k.stream[rows]), "correlation": _ids(k.correlation[rows]),
        "graph_replay": t.replayed()[rows],
        "grid_x": _ids(k.grid_x[rows]), "grid_y": _ids(k.grid_y[rows]), "grid_z": _ids(k.grid_z[rows]),
        "block_x": _ids(k.block_x[rows]), "block_y": _ids(k.block_y[rows]), "block_z": _ids(k.block_z[rows]),
        **_kernel_costs(module, rows),
    }


def _kernel_costs(module: TraceModule, rows: np.ndarray) -> dict[str, Any]:
    """FLOPs, bytes and the roofline's time of each kernel (measure-roofline; null: unknown)."""
    import pyarrow as pa

    r = module.roofline
    if r is None:
        return {}
    return {name: pa.array(values[rows], mask=np.isnan(values[rows]))
            for name, values in (("flops", r.flops), ("bytes", r.bytes), ("roofline_ns", r.bound_ns))}


def layer_columns(trace: Trace, layers: Any, table: Any, cls: Any, roofline: Any, rows: np.ndarray) -> dict[str, Any]:
    """The facts of each layer row ``rows`` as columns, the one place ``trace --json``'s layers
    and the Arrow layers table read them from: pass, partial, layer, stack, type (text), stage
    (code), kernel_count, duration_ns, start_ns, end_ns, first_kernel and last_kernel (short-name
    ids) and, where the roofline pass ran, :data:`LAYER_COSTS` (object columns, None unknown)."""
    q = table.pass_index[rows]
    out: dict[str, Any] = {
        "pass": q, "partial": np.asarray(layers.partial, bool)[q] if len(layers.partial) else np.zeros(len(rows), bool),
        "layer": table.index[rows],
        "stack": layers.stack[table.first[rows]] if layers.stack is not None else np.zeros(len(rows), np.int64),
        "type": [table.type[r] for r in rows.tolist()], "stage": table.stage[rows], "kernel_count": table.kernel_count[rows],
        "duration_ns": table.duration[rows], "start_ns": table.start[rows], "end_ns": table.end[rows],
        "first_kernel": cls.short[table.first[rows]], "last_kernel": cls.short[table.last[rows]],
    }
    if roofline is not None:
        out.update((name, values[rows]) for name, values in layer_costs(roofline, trace, table).items())
    return out


def _layers(module: TraceModule, sel: Selection) -> dict[str, Any]:
    import pyarrow as pa

    assert module.table is not None and module.layers is not None and module.classification is not None
    c = layer_columns(module.trace, module.layers, module.table, module.classification, module.roofline, np.flatnonzero(sel.rows))
    strings = module.trace.strings.values
    return {
        "pass": c["pass"], "layer": c["layer"], "stack": _ids(c["stack"]), "partial": c["partial"],
        "type": pa.array(c["type"], pa.string()).dictionary_encode(), "stage": _labels(c["stage"], _STAGE_NAMES, 1),
        "kernel_count": c["kernel_count"], "duration_ns": c["duration_ns"], "start_ns": c["start_ns"], "end_ns": c["end_ns"],
        "first_kernel": _names(c["first_kernel"], strings), "last_kernel": _names(c["last_kernel"], strings),
        **{name: pa.array(c[name].tolist(), pa.int64() if name in ("flops", "bytes") else pa.float64())
           for name in LAYER_COSTS if name in c},
    }


def _sums(codes: np.ndarray, sel: Selection, dur: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per code 0..n-1 (codes below 0 left out): the selected kernels and their time; which have any."""
    mine = sel.keep & (codes >= 0)
    count = np.bincount(codes[mine], minlength=n)
    time = np.bincount(codes[mine], weights=dur[mine], minlength=n).astype(np.int64)
    return count, time, count > 0


def _stages(module: TraceModule, sel: Selection) -> dict[str, Any]:
    assert module.stage is not None
    dur = module.trace.kernels.duration.astype(np.float64)
    count, time, have = _sums(module.stage.astype(np.int64) + 1, sel, dur, len(_STAGE_NAMES))
    codes = np.flatnonzero(have)
    return {"stage": _labels(codes - 1, _STAGE_NAMES, 1), "kernels": count[codes], "time_ns": time[codes]}


def _types(module: TraceModule, sel: Selection) -> dict[str, Any]:
    assert module.classification is not None
    dur = module.trace.kernels.duration.astype(np.float64)
    count, time, have = _sums(module.classification.type.astype(np.int64), sel, dur, len(TYPES))
    codes = np.flatnonzero(have)
    return {"type": _labels(codes, TYPES), "kernels": count[codes], "time_ns": time[codes]}


def _passes(module: TraceModule, sel: Selection) -> dict[str, Any]:
    layers, k = module.layers, module.trace.kernels
    assert layers is not None and module.table is not None
    n = len(layers.layers_per_pass)
    count, time, have = _sums(layers.pass_of, sel, k.duration.astype(np.float64), n)
    mine = sel.keep & (layers.pass_of >= 0)
    start = np.full(n, np.iinfo(np.int64).max, np.int64)
    end = np.full(n, np.iinfo(np.int64).min, np.int64)
    np.minimum.at(start, layers.pass_of[mine], k.start[mine])
    np.maximum.at(end, layers.pass_of[mine], k.end[mine])
    shown = np.bincount(module.table.pass_index[sel.rows], minlength=n)  # the selected layers of each pass
    q = np.flatnonzero(have)
    steps = np.asarray(layers.steps, np.int64) if len(layers.steps) == n else np.full(n, -1, np.int64)
    partial = np.asarray(layers.partial, bool) if len(layers.partial) == n else np.zeros(n, bool)
    return {
        "pass": q, "stage": _labels(pass_stages(module.table, n)[q], _STAGE_NAMES, 1), "layers": shown[q],
        "partial": partial[q], "step": _ids(steps[q]), "kernels": count[q], "time_ns": time[q],
        "start_ns": start[q], "end_ns": end[q],
    }


# -- a trace that answers in dataframes -------------------------------------------------------------
@dataclass(eq=False, repr=False)
class AnalyzedTrace(Trace):
    """A trace (the IR, as read) whose facts come as pandas DataFrames: ``kernels_df()``,
    ``layers_df()``, ``stages_df()``, ``types_df()``, ``passes_df()``. The trace passes run on
    first use (``strategy``: how layers are found, as ``trace --strategy``)."""

    strategy: str = "auto"

    @classmethod
    def of(cls, trace: Trace, strategy: str = "auto") -> AnalyzedTrace:
        """The same trace (its columns shared, not copied)."""
        return cls(**{f.name: getattr(trace, f.name) for f in fields(Trace)}, strategy=strategy)

    @cached_property
    def module(self) -> TraceModule:
        """The trace after classify-kernels, detect-layers and type-layers."""
        from layerc.passes.base import Context
        from layerc.passes.pipeline import PassManager
        from layerc.passes.trace_passes import TraceModule, trace_pipeline

        module = TraceModule(self)
        PassManager(trace_pipeline(strategy=self.strategy)).run(Context(), module)
        return module

    def tables(self, stage: str = "all") -> dict[str, pa.Table]:
        """The Arrow tables of :data:`TABLES`."""
        return trace_tables(self.module, stage)

    def _frame(self, name: str, stage: str) -> pandas.DataFrame:
        try:
            import pandas  # noqa: F401  (pyarrow's to_pandas needs it)
        except ImportError:
            from layerc.ir.diagnostics import LayercError

            raise LayercError("DataFrames need pandas: pip install 'layerc[frames]'") from None
        return trace_tables(self.module, stage)[name].to_pandas()

    def kernels_df(self, stage: str = "all") -> pandas.DataFrame:
        """One row per kernel: its pass, layer, stage, type, names, times, stream and launch."""
        return self._frame("kernels", stage)

    def layers_df(self, stage: str = "all") -> pandas.DataFrame:
        """One row per layer (each pass's): type, stage, kernels, time, span, first and last kernel."""
        return self._frame("layers", stage)

    def stages_df(self, stage: str = "all") -> pandas.DataFrame:
        return self._frame("stages", stage)

    def types_df(self, stage: str = "all") -> pandas.DataFrame:
        return self._frame("types", stage)

    def passes_df(self, stage: str = "all") -> pandas.DataFrame:
        return self._frame("passes", stage)


def read_analyzed(path: str | Path, strategy: str = "auto") -> AnalyzedTrace:
    """``layerc.read_trace``: a trace file read into the IR, its dataframes a call away."""
    from layerc.grammar.traces import read_trace

    return AnalyzedTrace.of(read_trace(path), strategy)
