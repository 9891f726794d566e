"""A trace's roofline as a picture: each kind of kernel whose cost ``measure-roofline`` knows, at
its arithmetic intensity (FLOPs per byte moved) and its achieved TFLOP/s, under the roofs of the
GPU it ran on (the matrix peak of its precision, the HBM bandwidth line). A point's area is its
share of the kernel time; kernels that move data but compute nothing (copies, gathers) have no
place on those axes and are summed under the chart as GB/s against the HBM peak."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from layerc.ir.diagnostics import LayercError

#: points drawn (the kinds with the most time; the rest are summed under the chart)
POINTS = 14


def _groups(a: Any) -> list[dict[str, Any]]:
    """Per kernel kind (type, short name) with a known cost: time, FLOPs, bytes; most time first."""
    from layerc.passes.kernel_tables import TYPES

    r, k = a.roofline, a.trace.kernels
    known = a.keep & r.known()
    dur = (k.end - k.start).astype(np.float64)
    key = a.cls.type.astype(np.int64) * (1 << 32) + a.cls.short.astype(np.int64)
    keys, inverse = np.unique(key[known], return_inverse=True)
    sums = [np.bincount(inverse, weights=w[known], minlength=len(keys)) for w in (dur, r.flops, r.bytes)]
    out = [{"type": TYPES[int(kk >> 32)], "name": a.trace.strings.values[int(kk & 0xFFFFFFFF)], "time_ns": t, "flops": f, "bytes": b}
           for kk, t, f, b in zip(keys.tolist(), *(s.tolist() for s in sums))]
    return sorted(out, key=lambda g: -g["time_ns"])


def peaks(a: Any) -> Any:
    """The first GPU's peaks that the roofline knows (its preset, as ``measure-roofline`` found it
    from the device's name: a ROCm kernel's device id need not be one the trace describes)."""
    from layerc.passes.hardware import load_hardware

    key = next((p for p in a.roofline.devices.values() if p), None)
    return load_hardware(key) if key else None


def write_roofline_png(module: Any, path: str | os.PathLike[str], stage: str = "all") -> None:
    """The roofline chart of a trace module after ``measure-roofline`` (PNG; SVG where ``path``
    ends in ``.svg``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import PathCollection

    from layerc.backends.outputs import atomic_path
    from layerc.backends.trace_report import Analysis
    a = Analysis.of(module, stage)
    if a.roofline is None or not (a.keep & a.roofline.known()).any():
        raise LayercError("no kernel's cost is known (the roofline needs Kineto's Input Dims and Input type: "
                          "profile with record_shapes=True)", a.trace.source)
    hw = peaks(a)
    groups = _groups(a)
    total = sum(g["time_ns"] for g in groups)
    computing = [g for g in groups if g["flops"] > 0 and g["bytes"] > 0][:POINTS]
    moving = [g for g in groups if g["flops"] <= 0 < g["bytes"]]

    fig, ax = plt.subplots(figsize=(10, 6.2))
    ax.set_xscale("log")
    ax.set_yscale("log")
    intensity = [g["flops"] / g["bytes"] for g in computing]
    achieved = [g["flops"] / g["time_ns"] / 1e3 for g in computing]  # TFLOP/s
    lo = min([*intensity, 0.1]) / 2
    hi = max([*intensity, 1e3]) * 2
    if hw is not None:
        xs = np.geomspace(lo, hi, 200)
        tb = hw.hbm_gbps / 1e3  # TB/s: TFLOP/s per FLOP/byte
        for precision, style in (("bfloat16", "-"), ("float8", "--"), ("float32", ":")):
            peak = hw.matrix_tflops.get(precision)
            if peak:
                ax.plot(xs, np.minimum(peak, xs * tb), style, color="#444444", linewidth=1.2,
                        label=f"{precision} roof: {peak:,.0f} TFLOP/s, {hw.hbm_gbps / 1e3:,.2f} TB/s")
    colours = [plt.get_cmap("tab20")(i) for i in range(20)]
    for i, (g, x, y) in enumerate(zip(computing, intensity, achieved)):
        share = g["time_ns"] / total if total else 0
        ax.scatter([x], [y], s=40 + 2400 * share, color=colours[i % len(colours)], alpha=0.75, edgecolors="black",
                   linewidths=0.5, label=f"{g['name'][:38]} ({g['type']}, {100 * share:.1f}% of time)")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP / byte moved)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.grid(True, which="major", alpha=0.3)
    legend = ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    for handle in legend.legend_handles:  # one marker size in the legend; the chart's areas say the time
        if isinstance(handle, PathCollection):
            handle.set_sizes([40])
    names = set(a.trace.devices.values())
    device = hw.name if hw else (names.pop() if len(names) == 1 else "unknown GPU")
    ax.set_title(f"{os.path.basename(a.trace.source or '')}: {device}" + ("" if hw else " (no peaks known)"), fontsize=10)
    data = sum(g["bytes"] for g in moving)
    data_time = sum(g["time_ns"] for g in moving)
    if moving and data_time:
        note = (f"data movement only ({len(moving)} kinds, {100 * data_time / total:.1f}% of the costed time): "
                f"{data / data_time:,.0f} GB/s" + (f", {100 * data / data_time / hw.hbm_gbps:.0f}% of HBM" if hw else ""))
        fig.text(0.01, 0.01, note, fontsize=8)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="svg" if os.fspath(path).endswith(".svg") else "png", dpi=110)
    plt.close(fig)
