"""A kernel's buffer liveness as a chart (matplotlib, Agg): one row per buffer on an operation-id
axis, SMEM blue and TMEM red, OperandD accumulators hatched; under it the live SMEM bytes and the
live TMEM columns against the hardware capacity, each peak marked where it happens.

The figure's size never follows the input: at most ``MAX_ROWS`` buffers get a row (the title says
how many are left out), names are cut to ``MAX_NAME`` characters, and the curves are drawn from
their steps, however far apart the operation ids are."""

from __future__ import annotations

import io

import numpy as np

from layerc.ir.memory import SMEM, TMEM, Kernel, Liveness, MemoryModule, interval_text

COLORS = {SMEM: "#3b78b5", TMEM: "#c8463d"}
PEAK_COLOR = "#222222"
MAX_ROWS = 100  #: buffers drawn, one row each (0.3 inch a row)
MAX_NAME = 40  #: characters of a buffer name on its row (of a kernel name in the title: twice that)


def liveness_chart(module: MemoryModule, k: Kernel, fmt: str = "png", dpi: int = 150) -> bytes:
    """The chart as PNG or SVG bytes (the ``liveness`` of ``mem-liveness`` must be there)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    b = k.buffers
    order = np.lexsort((b.start, b.kind))[:MAX_ROWS][::-1]  # SMEM on top, each kind by start
    left_out = f"; {len(b) - len(order):,} more buffers not drawn" if len(b) > len(order) else ""
    panels = [mem for mem, kind in (("smem", SMEM), ("tmem", TMEM)) if (b.kind == kind).any() and mem in k.liveness]
    rows = max(len(order), 1)
    heights = [max(1.2, 0.3 * rows)] + [1.6] * len(panels)
    fig = Figure(figsize=(11, sum(heights) + 1.3), layout="constrained")
    axes = fig.subplots(len(heights), 1, sharex=True, height_ratios=heights, squeeze=False)[:, 0]
    fig.suptitle(f"{_cut(k.name, 2 * MAX_NAME)}: buffer liveness by operation id ({module.arch or 'no capacity'}{left_out})",
                 fontsize=12, fontweight="bold")
    _gantt(axes[0], module, k, order)
    for ax, mem in zip(axes[1:], panels):
        _usage(ax, k.liveness[mem], mem)
    for mem in panels:
        live = k.liveness[mem]
        if live.peak_at >= 0:
            for ax in axes:
                ax.axvline(live.peak_at + 0.5, color=COLORS[SMEM if mem == "smem" else TMEM], lw=1, ls=":", alpha=0.8)
    axes[-1].set_xlabel("operation id")
    if len(b):  # room on the right for the interval labels
        lo = int(b.start.min())
        hi = max(int(b.end.max()), lo + 1)
        axes[-1].set_xlim(lo - 1, hi + max(3, (hi - lo) * 0.09))
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=dpi)
    return buf.getvalue()


def _gantt(ax, m: MemoryModule, k: Kernel, order: np.ndarray) -> None:
    from matplotlib.patches import Patch

    b = k.buffers
    labels = []
    for y, i in enumerate(order.tolist()):
        kind = int(b.kind[i])
        start, end = int(b.start[i]), int(b.end[i])
        ax.barh(y, max(end - start, 0.15), left=start, height=0.7, color=COLORS[kind], alpha=0.85,
                hatch="//" if b.operand_d[i] else None, edgecolor="white" if not b.operand_d[i] else "#5a1410", lw=0.6)
        size = (_kib(int(b.bytes[i])) if kind == SMEM else (f"{b.rows[i]}x{b.cols[i]}" if b.rows[i] >= 0 else "?"))
        ax.text(end + 0.3, y, f"{interval_text(start, end)}", va="center", fontsize=7, color="#444444")
        labels.append(f"{_cut(m.text(b.name[i]) or '', MAX_NAME)}  {size}")
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylim(-0.7, max(len(labels), 1) - 0.3)
    ax.grid(axis="x", alpha=0.3)
    ax.set_ylabel("buffers")
    handles = [Patch(color=COLORS[SMEM], label="SMEM"), Patch(color=COLORS[TMEM], label="TMEM"),
               Patch(facecolor=COLORS[TMEM], hatch="//", edgecolor="#5a1410", label="OperandD")]
    ax.legend(handles=handles, loc="lower right", bbox_to_anchor=(1.0, 1.0), fontsize=7, ncols=3, frameon=False)
    if not labels:
        ax.text(0.5, 0.5, "no buffers", transform=ax.transAxes, ha="center", va="center")


def _usage(ax, live: Liveness, mem: str) -> None:
    color = COLORS[SMEM if mem == "smem" else TMEM]
    scale, unit = (1024, "KiB") if mem == "smem" else (1, "columns")
    if len(live.live):  # the steps themselves: a point where the amount changes, the last at 0
        x, y = live.ops, live.live / scale
        ax.fill_between(x, y, step="post", color=color, alpha=0.35)
        ax.step(x, y, where="post", color=color, lw=1.2)
    if live.capacity:
        ax.axhline(live.capacity / scale, color="#888888", ls="--", lw=1)
        ax.text(0.995, live.capacity / scale, f"capacity {live.capacity / scale:,.0f} {unit}", transform=ax.get_yaxis_transform(),
                ha="right", va="bottom", fontsize=7, color="#555555")
    if live.peak_at >= 0:
        peak = live.peak / scale
        over = live.capacity and live.peak > live.capacity
        ax.plot([live.peak_at + 0.5], [peak], marker="v", color="#b00000" if over else PEAK_COLOR, ms=7)
        ax.annotate(f"peak {peak:,.1f} {unit} at op {live.peak_at}".replace(".0 ", " "), (live.peak_at + 0.5, peak),
                    xytext=(6, 4), textcoords="offset points", fontsize=8, fontweight="bold",
                    color="#b00000" if over else PEAK_COLOR)
    top = max(live.peak, live.capacity or 0, 1) / scale
    ax.set_ylim(0, top * 1.22)
    ax.set_ylabel(f"live {mem.upper()}\n({unit})", fontsize=8)
    ax.grid(alpha=0.3)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _kib(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:g} KiB"
