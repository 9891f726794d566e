"""A scheduled layer as a Gantt chart PNG (matplotlib): one row per engine, a bar per op coloured
by op type, the critical path outlined; with the seed's simulated trace of the same layer drawn
below it on its own time axis (its nominal µs), its dependency violations in red."""

from __future__ import annotations

import io
import os

from layerc.backends.outputs import write_atomic
from layerc.backends.sim_trace import op_label
from layerc.ir.graph import Graph

#: op type → colour (matplotlib tab10)
COLOURS = {"gemm": "#1f77b4", "attention": "#d62728", "moe": "#9467bd", "fused_mlp": "#17becf", "norm": "#2ca02c",
           "rope": "#ff7f0e", "softmax": "#e377c2", "act": "#bcbd22", "elementwise": "#7f7f7f", "kv_cache": "#8c564b",
           "router": "#aec7e8", "collective": "#000000"}
#: The tallest chart in inches (about 6600 pixels at the chart's 110 dpi): with many engine rows
#: (a seed trace with thousands of tids) the rows get thinner, the image no taller.
MAX_HEIGHT_IN = 60.0
#: Rows above this many get no per-row tick labels and no op names (they would not be legible).
MAX_LABELLED_ROWS = 64
#: seed op_type → the colour of our kind
SEED_KINDS = {"MatMul": "gemm", "Norm": "norm", "ROPE": "rope", "Cache": "kv_cache", "Softmax.1": "softmax",
              "Softmax.2": "softmax", "Softmax.3": "softmax", "MatAdd": "elementwise", "Activation": "act"}


def render_schedule_png(graph: Graph, path: str | os.PathLike, title: str, seed=None, violations=()) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    s = graph.meta["schedule"]
    ops = [n for n in graph.nodes if "schedule" in n.meta and n.meta["cost"].is_kernel]
    rows = [s.engines] + ([seed.engines] if seed is not None else [])
    height = sum(2.2 + 0.55 * r for r in rows)
    fig, axes = plt.subplots(len(rows), 1, figsize=(13, min(height, MAX_HEIGHT_IN)), squeeze=False,
                             gridspec_kw={"height_ratios": [r + 1.5 for r in rows]})
    ax = axes[0][0]
    span = max(s.makespan / 1e3, 1e-3)
    named = s.engines <= MAX_LABELLED_ROWS
    sch = [n.meta["schedule"] for n in ops]
    critical = [x["critical"] for x in sch]
    ax.barh([x["engine"] for x in sch], [(x["end"] - x["start"]) / 1e3 for x in sch], left=[x["start"] / 1e3 for x in sch],
            height=0.7, color=[COLOURS.get(n.meta["cost"].kind, "#cccccc") for n in ops],
            edgecolor=["black" if c else "white" for c in critical], linewidth=[1.4 if c else 0.5 for c in critical])
    if named:
        for n, x in zip(ops, sch):
            _label(ax, op_label(n), x["start"] / 1e3, (x["end"] - x["start"]) / 1e3, x["engine"], span)
    _rows(ax, s.engines)
    ax.invert_yaxis()
    ax.set_xlim(0, span * 1.01)
    ax.set_xlabel("µs (roofline + launch overhead)")
    ax.set_title(f"{title}: makespan {s.makespan / 1e3:,.1f} µs on {s.engines} engine{'s' if s.engines > 1 else ''} "
                 f"(critical path {s.critical_path / 1e3:,.1f} µs, outlined)", loc="left", fontsize=10)
    kinds = sorted({n.meta["cost"].kind for n in ops})
    ax.legend(handles=[Patch(color=COLOURS.get(k, "#cccccc"), label=k) for k in kinds], loc="upper left",
              bbox_to_anchor=(1.0, 1.0), fontsize=8, title="op type", title_fontsize=8)
    if seed is not None:
        _seed_panel(axes[1][0], seed, violations)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    write_atomic(path, buf.getvalue())


def _seed_panel(bx, seed, violations) -> None:
    """The seed's trace on its own axis: its bars in one call (a trace may have thousands), the
    events that start before an input of theirs has ended outlined in red and explained once each."""
    late = {v.op for v in violations}
    span = max(seed.makespan, 1e-3)
    bad = [name in late for name in seed.name]
    bx.barh(seed.engine.tolist(), seed.dur.tolist(), left=seed.start.tolist(), height=0.7,
            color=[COLOURS.get(SEED_KINDS.get(t, ""), "#cccccc") for t in seed.op_type],
            edgecolor=["red" if b else "white" for b in bad], linewidth=[2.0 if b else 0.5 for b in bad])
    if seed.engines <= MAX_LABELLED_ROWS:
        for i, name in enumerate(seed.name):
            _label(bx, name, float(seed.start[i]), float(seed.dur[i]), int(seed.engine[i]), span)
    marked = set()
    for i, name in enumerate(seed.name):
        if bad[i] and name not in marked:
            marked.add(name)
            v = next(v for v in violations if v.op == name)
            start = float(seed.start[i])
            bx.annotate(f"'{name}' starts at +{start:,.0f},\nbefore '{v.reads}' (which it reads) ends at +{v.end:,.0f}",
                        xy=(start, int(seed.engine[i])), xytext=(start + span * 0.04, seed.engines - 0.6),
                        fontsize=8, color="red", arrowprops={"arrowstyle": "->", "color": "red"})
    bx.set_ylim(seed.engines - 0.2, -0.6)
    _rows(bx, seed.engines)
    bx.set_xlim(0, span * 1.01)
    bx.set_xlabel("nominal µs (the seed's per-element constants)")
    note = f"; {len(late)} dependency violation{'s' if len(late) > 1 else ''} (red)" if late else ""
    bx.set_title(f"seed 004's simulated trace: makespan {seed.makespan:,.0f} nominal µs on {seed.engines} engines{note}",
                 loc="left", fontsize=10)


def _rows(ax, engines: int) -> None:
    """One tick per engine row while they are legible."""
    if engines <= MAX_LABELLED_ROWS:
        ax.set_yticks(range(engines), [f"engine {e}" for e in range(engines)])
    else:
        ax.set_ylabel(f"{engines} engines")


def _label(ax, text: str, start: float, width: float, row: int, span: float) -> None:
    """The op's name inside its bar when it fits (about 0.6% of the axis per character)."""
    if width > span * 0.0065 * len(text):
        ax.text(start + width / 2, row, text, ha="center", va="center", fontsize=7, color="white")


def render_profile_png(rows: list[dict], path: str | os.PathLike, title: str) -> None:
    """Measured against simulated time per op (kernel ops, in program order), on a log axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = [r for r in rows if r["kernel"]]
    y = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.28 * len(rows)))
    ax.barh(y - 0.2, [r["measured_us"] for r in rows], height=0.4, label="measured (median)", color="#1f77b4")
    ax.barh(y + 0.2, [r["simulated_us"] for r in rows], height=0.4, label="simulated", color="#ff7f0e")
    ax.set_yticks(y, [f"{r['op']} ({r['type']}, {r['bound']})" for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("µs per op (log)")
    ax.set_title(title, loc="left", fontsize=10)
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    write_atomic(path, buf.getvalue())
