"""The report of ``layerc trace``: the analysis its passes leave (``Analysis``), as terminal
tables, JSON, CSV and a Perfetto timeline. The command builds the pipeline; this module emits."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from layerc.ir.diagnostics import warn
from layerc.ir.trace import unique
from layerc.passes.roofline import LAYER_COSTS, layer_costs

if TYPE_CHECKING:
    from layerc.ir.trace import Trace
    from layerc.passes.kernel_tables import Classification
    from layerc.passes.layer_facts import LayerTable
    from layerc.passes.trace_layers import LayerResult


@dataclass(eq=False)
class Analysis:
    """Everything the outputs show, computed once."""

    trace: Trace
    cls: Classification
    layers: LayerResult
    table: LayerTable
    stage: np.ndarray  #: per kernel, after layer voting
    keep: np.ndarray  #: kernels selected by --stage
    rows: np.ndarray  #: layers selected by --stage
    pass_stage: np.ndarray  #: per pass, the stage most of its layers have
    roofline: Any = None  #: the kernels' costs (measure-roofline), None where it did not run

    @classmethod
    def of(cls, module, stage: str = "all") -> "Analysis":
        """The analysis of a module after ``type-layers``, its rows and kernels kept to ``stage``
        (``all``, ``prefill`` or ``decode``)."""
        from layerc.passes.layer_facts import pass_stages
        from layerc.passes.trace_tables import Selection

        sel = Selection.of(module, stage)
        return cls(module.trace, module.classification, module.layers, module.table, module.stage, sel.keep, sel.rows,
                   pass_stages(module.table, len(module.layers.layers_per_pass)), module.roofline)

    def pass_label(self, q: int, none: str) -> str:
        from layerc.passes.layer_facts import stage_name

        return stage_name(int(self.pass_stage[q])) if self.pass_stage[q] >= 0 else none

    def pct(self, mask: np.ndarray) -> float:
        """``mask``'s share of the selected kernels, in %."""
        return 100 * float((mask & self.keep).sum()) / max(int(self.keep.sum()), 1)


def mismatched_passes(a: Analysis, expected: int) -> list[int]:
    """The complete passes (not cut by the profile's ends) whose layer count is not ``expected``:
    a cross-check, never a correction."""
    return [q for q, n in enumerate(a.layers.layers_per_pass) if not a.layers.partial[q] and n != expected]


def _short(a: Analysis, i: int) -> str:
    return a.trace.strings[int(a.cls.short[i])] or "?"


def report(a: Analysis, args: argparse.Namespace) -> dict:
    """The JSON document: totals, the decision, and one entry per layer."""
    from layerc.passes.kernel_tables import TYPES
    from layerc.passes.layer_evidence import CONFIDENT
    from layerc.passes.layer_facts import stage_name

    k = a.trace.kernels
    dur = (k.end - k.start).astype(np.int64)
    keep = a.keep
    total = int(dur[keep].sum())
    by = lambda codes, names: {  # noqa: E731
        names(c): {"kernels": int(((codes == c) & keep).sum()), "time_ns": int(dur[(codes == c) & keep].sum())}
        for c in unique(codes[keep]).tolist()
    }
    orphans = keep & (a.layers.layer < 0)
    return {
        "trace": args.trace,
        "kernel_count": int(keep.sum()),
        "total_kernel_time_ns": total,
        "num_layers": int(a.rows.sum()),
        "layers_per_pass": _layers_per_pass(a),
        # --num-layers: what was expected, and the complete passes that found another count
        **({"expected_layers": {"num_layers": args.num_layers, "mismatched_passes": mismatched_passes(a, args.num_layers)}}
           if getattr(args, "num_layers", None) else {}),
        # passes cut by the profile's start or end: a leading one numbers its layers from the end
        "partial_passes": [q for q, cut in enumerate(a.layers.partial) if cut],
        "strategy": a.layers.strategy,
        "confidence": round(a.layers.confidence, 4),
        # below this the layers are reported with a warning; "none": no layer structure found
        "confident_above": CONFIDENT,
        "evidence": a.layers.evidence,
        "warnings": a.layers.warnings,
        "period": a.layers.period,
        # each stack of layers (a vision tower and a language model, an encoder and a decoder):
        # its module class and parent where module spans name them
        "stacks": a.layers.stacks,
        # per pass, its training step (ProfilerStep#N), -1 outside steps
        "steps": a.layers.steps,
        "stages": by(a.stage, stage_name),
        "types": by(a.cls.type, lambda c: TYPES[c]),
        "unknown_stage_pct": round(a.pct(a.stage < 0), 3),
        "unclassified_pct": round(a.pct(a.cls.entry < 0), 3),
        "classified_by": _classified_by(a, dur, getattr(args, "kernel_tables", None)),
        "orphans": {"kernels": int(orphans.sum()), "time_ns": int(dur[orphans].sum())},
        # rows no clock can have produced (an end before the start, an overflowing time), left out
        "left_out": a.trace.meta.get("dropped", {}),
        **({"roofline": _roofline(a, dur)} if a.roofline is not None else {}),
        "layers": _layer_rows(a),
    }


def _roofline(a: Analysis, dur: np.ndarray) -> dict:
    """FLOPs, bytes and the share of the roofline: in all and per kernel type (measure-roofline)."""
    from layerc.passes.kernel_tables import TYPES
    from layerc.passes.roofline import totals

    r, keep = a.roofline, a.keep
    devices = {str(d): {"name": a.trace.devices.get(d), "peaks": preset} for d, preset in r.devices.items()}
    types = {TYPES[c]: totals(r, dur, keep & (a.cls.type == c)) for c in unique(a.cls.type[keep]).tolist()}
    return {"devices": devices, "all": totals(r, dur, keep),
            "types": {name: t for name, t in types.items() if t["kernels"]}}


def _layer_rows(a: Analysis) -> list[dict]:
    """One entry per selected layer (``trace_tables.layer_columns``), each column turned to
    Python values once."""
    from layerc.passes.layer_facts import stage_names
    from layerc.passes.trace_tables import layer_columns

    c = layer_columns(a.trace, a.layers, a.table, a.cls, a.roofline, np.nonzero(a.rows)[0])
    names = {key: _texts(a, c[key]) for key in ("first_kernel", "last_kernel")}
    columns = {"pass": c["pass"].tolist(), "partial": c["partial"].tolist(), "index": c["layer"].tolist(),
               "stack": c["stack"].tolist(), "type": c["type"], "stage": stage_names(c["stage"]),
               **{key: c[key].tolist() for key in ("kernel_count", "duration_ns", "start_ns", "end_ns")}, **names,
               **{key: c[key].tolist() for key in LAYER_COSTS if key in c}}
    return [dict(zip(columns, values)) for values in zip(*columns.values())]


def _shorts(a: Analysis, kernels: np.ndarray) -> list[str]:
    """The short names of ``kernels`` ("?" where a kernel has none)."""
    return _texts(a, a.cls.short[kernels])


def _texts(a: Analysis, ids: np.ndarray) -> list[str]:
    """The strings of ``ids`` ("?" where there is none)."""
    strings = a.trace.strings
    return [strings[i] or "?" for i in ids.tolist()]


def _classified_by(a: Analysis, dur: np.ndarray, tables: str | None) -> dict:
    """Per kernel family (short name): its type, the table row that classified it (``file: entry
    N``) or ``null`` where no row matched (type OTHER), and its kernels and time."""
    from layerc.passes.kernel_tables import TYPES, kernel_table

    entries = (a.cls.table or kernel_table(tables)).entries  # the tables that classified the kernels
    keep = a.keep
    out: dict[str, dict] = {}
    shorts, first, inverse = np.unique(a.cls.short[keep], return_index=True, return_inverse=True)
    idx = np.nonzero(keep)[0]
    time = np.bincount(inverse.reshape(-1), weights=dur[keep].astype(float), minlength=len(shorts))
    count = np.bincount(inverse.reshape(-1), minlength=len(shorts))
    for j, s in enumerate(shorts.tolist()):
        i = int(idx[first[j]])
        entry = int(a.cls.entry[i])
        row = os.path.basename(entries[entry].source) if entry >= 0 else None  # "trtllm.toml: entry 7 (moe_bmm_mx)"
        out[a.trace.strings[s] or "?"] = {"type": TYPES[int(a.cls.type[i])], "row": row,
                                          "kernels": int(count[j]), "time_ns": int(time[j])}
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["time_ns"]))


def _stack_of(a: Analysis, kernel: int) -> int:
    """The stack (an index into ``stacks``) of the layer whose first kernel is ``kernel``."""
    stack = a.layers.stack
    return int(stack[kernel]) if stack is not None else 0


def _layers_per_pass(a: Analysis) -> list[int]:
    """Layers in each pass that has a layer of the chosen stage (every pass with --stage all)."""
    if a.rows.all():
        return a.layers.layers_per_pass
    return np.unique(a.table.pass_index[a.rows], return_counts=True)[1].tolist()


def write_csv(a: Analysis, path: str) -> None:
    from layerc.backends.outputs import write_atomic

    write_atomic(path, csv_text(a))


def csv_text(a: Analysis) -> str:
    """One row per layer: pass, layer, type, stage, kernels, time and the first and last kernel."""
    import csv
    import io

    from layerc.passes.layer_facts import stage_name

    t = a.table
    f = io.StringIO()
    w = csv.writer(f, lineterminator="\n")
    w.writerow(["pass", "layer", "type", "stage", "kernel_count", "duration_ns", "start_ns", "end_ns", "first_kernel", "last_kernel"])
    for r in np.nonzero(a.rows)[0].tolist():
        w.writerow([int(t.pass_index[r]), int(t.index[r]), t.type[r], stage_name(int(t.stage[r])), int(t.kernel_count[r]),
                    int(t.duration[r]), int(t.start[r]), int(t.end[r]), _short(a, int(t.first[r])), _short(a, int(t.last[r]))])
    return f.getvalue()


# -- the trace IR's file formats (backends.registry): a module after type-layers -------------------
def json_text(module, stage: str = "all", num_layers: int | None = None) -> str:
    """``layerc trace --json``'s document, from a module the trace passes have typed."""
    import orjson

    options = argparse.Namespace(trace=module.trace.source, num_layers=num_layers, stage=stage)
    return (orjson.dumps(report(Analysis.of(module, stage), options), option=orjson.OPT_INDENT_2) + b"\n").decode()


def csv_module_text(module, stage: str = "all") -> str:
    """``layerc trace --csv``'s table, from a module the trace passes have typed."""
    return csv_text(Analysis.of(module, stage))


def table_text(module, stage: str = "all", num_layers: int | None = None) -> str:
    """``layerc trace``'s tables as it prints them on a file or a pipe (plain text)."""
    import io

    from layerc.backends.plain_table import Console

    out = io.StringIO()
    options = argparse.Namespace(trace=module.trace.source, num_layers=num_layers, show_layer_terminal=False,
                                 verbose=False, top_n=0, debug_layers=())
    show(Analysis.of(module, stage), options, Console(out))
    return out.getvalue()


def write_module_perfetto(module, path: str, stage: str = "all") -> dict:
    """The Perfetto protobuf timeline of a module the trace passes have typed."""
    return write_perfetto(Analysis.of(module, stage), path, "pftrace")


def write_module_chrome_json(module, path: str, stage: str = "all") -> dict:
    """The same timeline as Chrome trace JSON."""
    return write_perfetto(Analysis.of(module, stage), path, "json")


def write_perfetto(a: Analysis, path: str, fmt: str) -> dict:
    """Passes, graph replays and layers as parent spans above the kernels (layers carry type and
    stage); ``fmt``: pftrace (protobuf) or json (Chrome JSON). Returns the writer's stats."""
    from layerc.backends.perfetto import Span, SpanTable, write_chrome_json, write_pftrace
    from layerc.passes.layer_facts import stage_name
    from layerc.passes.replays import graph_replays

    k, t, lay = a.trace.kernels, a.table, a.layers
    spans: list[Span | SpanTable] = []
    for graph, runs in graph_replays(a.trace).items():
        for n, idx in enumerate(runs):
            spans.append(Span(f"graph {graph} replay {n}", int(k.start[idx].min()), int(k.end[idx].max()), "graph replays",
                              int(k.device[idx[0]])))
    order = np.argsort(lay.pass_of, kind="stable")  # each pass's kernels together, in kernel order
    passes, at = np.unique(lay.pass_of[order], return_index=True)
    if len(order):
        bounds = zip(passes.tolist(), np.minimum.reduceat(k.start[order], at).tolist(), np.maximum.reduceat(k.end[order], at).tolist(),
                     k.device[order[at]].tolist())
        spans.extend(Span(f"pass {q} ({a.pass_label(q, 'no layers')})", start, end, "passes", device) for q, start, end, device in bounds)
    rows = np.nonzero(a.rows)[0]
    type_names, type_of = np.unique(np.array([t.type[r] for r in rows.tolist()], dtype=object).astype(str), return_inverse=True)
    index = t.index[rows].astype(np.int64)
    width = max(len(type_names), 1)
    named, name_of = np.unique(index * width + type_of, return_inverse=True)  # each (index, type) named once
    names = [f"layer {x // width} {type_names[x % width]}" for x in named.tolist()]
    stages, stage_of = np.unique(t.stage[rows], return_inverse=True)

    def column(values: np.ndarray) -> tuple[list, np.ndarray]:
        distinct, at = np.unique(values, return_inverse=True)
        return distinct.tolist(), at

    spans.append(SpanTable("layers", names, name_of, t.start[rows], t.end[rows], k.device[t.first[rows]], {
        "layer": column(index), "type": (type_names.tolist(), type_of), "stage": ([stage_name(x) for x in stages.tolist()], stage_of),
        "kernels": column(t.kernel_count[rows]), "pass": column(t.pass_index[rows])}))
    layer_of = np.where(a.keep, lay.layer, -1)
    if fmt == "json":
        stats = write_chrome_json(a.trace, path, spans=spans, layer_of=layer_of) or {}
    else:
        stats = write_pftrace(a.trace, path, spans=spans, layer_of=layer_of, counters=_roofline_counters(a, rows)) or {}
    return {**stats, "spans": sum(len(x.name) if isinstance(x, SpanTable) else 1 for x in spans)}


def _roofline_counters(a: Analysis, rows: np.ndarray) -> list:
    """Per device, counter tracks of each layer's achieved TFLOP/s and GB/s (its FLOPs and bytes
    over its kernels' time) and its roofline share, over the layer's span; layers without a known
    cost have none (measure-roofline)."""
    from layerc.backends.perfetto import Counter

    if a.roofline is None or not len(rows):
        return []
    t, k = a.table, a.trace.kernels
    cost = layer_costs(a.roofline, a.trace, t)
    flops = np.array([np.nan if v is None else float(v) for v in cost["flops"][rows].tolist()])
    moved = np.array([np.nan if v is None else float(v) for v in cost["bytes"][rows].tolist()])
    share = np.array([np.nan if v is None else float(v) for v in cost["roofline_pct"][rows].tolist()])
    busy = np.maximum(t.duration[rows].astype(np.float64), 1.0)
    device = k.device[t.first[rows]]
    out = []
    for d in unique(device).tolist():
        for name, unit, values in (("layer TFLOP/s", "TFLOP/s", flops / busy / 1e3), ("layer GB/s", "GB/s", moved / busy),
                                   ("layer % of roofline", "%", share)):
            has = (device == d) & ~np.isnan(values)
            if has.any():
                out.append(Counter(name, unit, int(d), t.start[rows][has], t.end[rows][has], values[has]))
    return out


def _console(con=None) -> tuple[Any, Any]:
    """``con`` (default: one on stdout: rich's on a terminal, plain text on a file or a pipe, which
    spares a small trace rich's import) and the Table class that goes with it."""
    from layerc.backends import plain_table

    if con is None:
        con = _rich_console() if sys.stdout.isatty() else plain_table.Console()
    if isinstance(con, plain_table.Console):
        return con, plain_table.Table
    from rich.table import Table

    return con, Table


def _rich_console():
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def show(a: Analysis, args: argparse.Namespace, con=None) -> None:
    """The report, on ``con`` (default: rich tables on a terminal, plain text elsewhere)."""
    from layerc.passes.kernel_tables import TYPES
    from layerc.passes.layer_facts import stage_name, stage_names

    con, Table = _console(con)
    k, t = a.trace.kernels, a.table
    dur = (k.end - k.start).astype(np.int64)
    keep = a.keep
    total = max(int(dur[keep].sum()), 1)
    lay = a.layers
    con.print(f"[bold]{args.trace}[/]: {int(keep.sum()):,} kernels, {total / 1e6:,.3f} ms of kernel time; "
              f"{int(a.rows.sum())} layers by [bold]{lay.strategy}[/] (confidence {lay.confidence:.2f}"
              + (f", period {lay.period} kernels" if lay.period else "") + ")")
    named = [s for s in lay.stacks if s["class"]]
    if len(lay.stacks) > 1 or named:
        con.print("stacks: " + "; ".join(
            f"{s['class'] or 'kernel motif'} x{s['layers']}" + (f" in {s['parent']}" if s.get("parent") else "") for s in lay.stacks))
    steps = sorted({q for q in lay.steps if q >= 0})
    if len(steps) > 1:
        con.print(f"training steps: {len(steps)} (ProfilerStep ranges); a pass never spans two")

    def share(mask: np.ndarray) -> tuple[str, str, str]:
        d = int(dur[mask].sum())
        return f"{int(mask.sum()):,}", f"{d / 1e3:,.1f}", f"{100 * d / total:.1f}%"

    for title, codes, name in (("stage", a.stage, stage_name), ("type", a.cls.type, lambda c: TYPES[c])):
        tab = Table(title=f"time by {title}", title_justify="left")
        for col in (title, "kernels", "time (µs)", "share"):
            tab.add_column(col, justify="left" if col == title else "right")
        values = unique(codes[keep]).tolist()
        for c in sorted(values, key=lambda c: -int(dur[(codes == c) & keep].sum())):
            tab.add_row(name(c), *share((codes == c) & keep))
        con.print(tab)

    passes = Table(title="layers per pass", title_justify="left")
    for col in ("pass", "stage", "kind", "kernels", "layers") + (("expected",) if args.num_layers else ()):
        passes.add_column(col, justify="right" if col in ("kernels", "layers", "expected") else "left")
    pass_rows, merged = _pass_rows(a, args.num_layers)
    _rows(passes, pass_rows, "passes", sum(merged[TABLE_ROWS:]))
    con.print(passes)

    rows = np.nonzero(a.rows)[0]
    if args.show_layer_terminal:
        tab = Table(title="layers", title_justify="left")
        for col in ("pass", "layer", "type", "stage", "kernels", "time (µs)", "first kernel", "last kernel"):
            tab.add_column(col, justify="right" if col in ("kernels", "time (µs)", "pass", "layer") else "left")
        shown = rows[:TABLE_ROWS]
        _rows(tab, list(zip(map(str, t.pass_index[shown].tolist()), map(str, t.index[shown].tolist()), [t.type[r] for r in shown.tolist()],
                            stage_names(t.stage[shown]), map(str, t.kernel_count[shown].tolist()),
                            [f"{d / 1e3:,.1f}" for d in t.duration[shown].tolist()], _shorts(a, t.first[shown]), _shorts(a, t.last[shown]))),
              "layers", max(len(rows) - TABLE_ROWS, 0))
    else:
        tab = Table(title="layers by kind", title_justify="left")
        for col in ("stage", "type", "layers", "kernels/layer", "µs/layer", "share"):
            tab.add_column(col, justify="left" if col in ("stage", "type") else "right")
        types, type_of = np.unique(np.array([t.type[r] for r in rows.tolist()], dtype=str), return_inverse=True)
        kinds, kind_of = np.unique(t.stage[rows].astype(np.int64) * len(types) + type_of.reshape(-1), return_inverse=True)
        kind_of = kind_of.reshape(-1)
        layers = np.bincount(kind_of, minlength=len(kinds))
        time = np.bincount(kind_of, weights=t.duration[rows].astype(float), minlength=len(kinds))
        kernels = np.bincount(kind_of, weights=t.kernel_count[rows].astype(float), minlength=len(kinds))
        for j, key in enumerate(kinds.tolist()):
            stage, ty = divmod(key, len(types))
            d = float(time[j])
            tab.add_row(stage_name(stage), str(types[ty]), str(int(layers[j])), f"{kernels[j] / layers[j]:.1f}",
                        f"{d / layers[j] / 1e3:,.1f}", f"{100 * d / total:.1f}%")
    con.print(tab)

    orphans = keep & (lay.layer < 0)
    con.print(f"outside layers: {int(orphans.sum()):,} kernels ({100 * dur[orphans].sum() / total:.1f}% of time); "
              f"unknown stage: {a.pct(a.stage < 0):.2f}% of kernels; unclassified: {a.pct(a.cls.entry < 0):.2f}%")

    if args.verbose:
        _top(con, a, keep, dur, total, args.top_n, "top kernels")
        if orphans.any():
            _top(con, a, orphans, dur, total, args.top_n, "kernels outside layers")
    if args.debug_layers:
        _debug_layers(con, a, args.debug_layers, args)


#: rows a terminal table shows; the rest are counted on a last "… N more" row (JSON and CSV have all)
TABLE_ROWS = 40


def _rows(tab, rows: list, what: str, left_out: int | None = None) -> None:
    """Add up to TABLE_ROWS ``rows`` to ``tab``; a caption counts the ``what`` left out (default:
    the rows past TABLE_ROWS)."""
    for cells in rows[:TABLE_ROWS]:
        tab.add_row(*cells)
    left_out = max(len(rows) - TABLE_ROWS, 0) if left_out is None else left_out
    if left_out:
        tab.caption, tab.caption_justify = f"… {left_out:,} more {what} (--json and --csv have every one)", "left"


def _pass_rows(a: Analysis, expected: int | None) -> tuple[list[tuple[str, ...]], list[int]]:
    """One row per pass, and how many passes each row stands for: consecutive passes alike in
    every column (the replays of one CUDA graph) share one row, numbered ``first-last (count)``."""
    lay = a.layers
    n = len(lay.layers_per_pass)
    q = lay.pass_of
    inside = (q >= 0) & (q < n)
    count = np.bincount(q[inside], minlength=n)
    eager = np.bincount(q[inside & ~a.trace.replayed()], minlength=n)
    rows: list[tuple[str, ...]] = []
    firsts: list[int] = []
    for p, (layers, kernels, eager_kernels, cut) in enumerate(zip(lay.layers_per_pass, count.tolist(), eager.tolist(), lay.partial)):
        how = "graph replay" if not eager_kernels else "eager" if eager_kernels == kernels else "graphs + eager"
        cells = [a.pass_label(p, "-"), how + (" (partial)" if cut else ""),
                 f"{kernels:,}", str(layers)]
        if expected:
            cells.append("ok" if layers == expected else f"[red]{expected}[/]" if layers else "-")
        if rows and rows[-1][1:] == tuple(cells):
            rows[-1] = (f"{firsts[-1]}-{p} ({p - firsts[-1] + 1})", *cells)
        else:
            rows.append((str(p), *cells))
            firsts.append(p)
    return rows, np.diff(np.r_[firsts, n]).tolist()


def _top(con, a: Analysis, mask: np.ndarray, dur: np.ndarray, total: int, n: int, title: str) -> None:
    from layerc.passes.kernel_tables import TYPES

    con, Table = _console(con)

    idx = np.nonzero(mask)[0]
    short = a.cls.short[idx]
    ids, inverse = np.unique(short, return_inverse=True)
    time = np.bincount(inverse.reshape(-1), weights=dur[idx], minlength=len(ids))
    count = np.bincount(inverse.reshape(-1), minlength=len(ids))
    first = {int(s): int(i) for s, i in zip(short[::-1].tolist(), idx[::-1].tolist())}
    tab = Table(title=title, title_justify="left")
    for col in ("kernel", "type", "calls", "time (µs)", "share"):
        tab.add_column(col, justify="left" if col in ("kernel", "type") else "right")
    for j in np.argsort(-time)[:n].tolist():
        i = first[int(ids[j])]
        tab.add_row(a.trace.strings[int(ids[j])] or "?", TYPES[int(a.cls.type[i])], f"{int(count[j]):,}",
                    f"{time[j] / 1e3:,.1f}", f"{100 * time[j] / total:.1f}%")
    con.print(tab)


def _debug_layers(con, a: Analysis, spec: tuple[int, ...], args: argparse.Namespace) -> None:
    from layerc.passes.kernel_tables import TYPES
    from layerc.passes.layer_facts import stage_name
    from layerc.passes.stage_shapes import stage_votes

    con, Table = _console(con)

    wanted = list(spec)
    k, t, lay = a.trace.kernels, a.table, a.layers
    votes = None
    shown: set[tuple[int, int]] = set()
    for r in np.nonzero(a.rows)[0].tolist():
        key = (int(t.stage[r]), int(t.index[r]))
        if int(t.index[r]) not in wanted or key in shown:
            continue
        shown.add(key)
        idx = np.nonzero((lay.pass_of == t.pass_index[r]) & (lay.layer == t.index[r]))[0]
        idx = idx[np.argsort(k.start[idx], kind="stable")]
        tab = Table(title=f"layer {int(t.index[r])} of pass {int(t.pass_index[r])}: {t.type[r]}, {stage_name(int(t.stage[r]))}",
                    title_justify="left")
        votes = votes if votes is not None else stage_votes(a.trace, a.cls)  # what each kernel's name or shapes say
        for col in ("#", "kernel", "type", "vote", "stream", "µs"):
            tab.add_column(col, justify="right" if col in ("#", "stream", "µs") else "left")
        for n, i in enumerate(idx.tolist()):
            tab.add_row(str(n), _short(a, i), TYPES[int(a.cls.type[i])], stage_name(int(votes[i])),
                        str(int(k.stream[i])), f"{(k.end[i] - k.start[i]) / 1e3:,.1f}")
        con.print(tab)
    missing = sorted(set(wanted) - {i for _, i in shown})
    if missing:
        warn(args, f"no layer {', '.join(map(str, missing))} in the trace")
