"""``layerc trace`` on every rank of a job: the ranks and their layers side by side (terminal
tables, JSON), and every rank's tables as one Parquet dataset partitioned by rank."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from layerc.backends.trace_report import _console, _rows


def _ms(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:,.3f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}%"


def show_ranks(c: dict[str, Any], con=None) -> None:
    con, Table = _console(con)
    ranks = c["ranks"]
    con.print(f"[bold]{len(ranks)} ranks[/]" + ("" if c["same_passes"] else
              ": [red]their passes differ[/] (layers per pass), so layers are compared by stage and index"))
    tab = Table(title="ranks (kernel time; communication; time waiting in collectives for the slowest rank)")
    for header, justify in (("rank", "right"), ("trace", "left"), ("kernels", "right"), ("ms", "right"), ("comm", "right"),
                            ("waiting", "right"), ("of comm", "right")):
        tab.add_column(header, justify=justify)
    _rows(tab, [(str(r["rank"]), os.path.basename(r["trace"]), f"{r['kernels']:,}", _ms(r["time_ns"]), _pct(r["communication_pct"]),
                 _ms(r["wait_ns"]), _pct(r["wait_pct_of_communication"])) for r in ranks], "ranks")
    con.print(tab)
    layers = sorted(c["layers"], key=lambda x: -(x["spread_pct"] or 0))
    tab = Table(title="layers by spread of compute across ranks (median pass per rank, µs; compute: outside collectives)")
    for header, justify in (("stage", "left"), ("layer", "right"), ("time", "right"), ("compute", "right"),
                            ("straggler", "right"), ("spread", "right"), ("most waiting", "right")):
        tab.add_column(header, justify=justify)

    def waiting(x: dict[str, Any]) -> str:
        if not x["wait_ns"]:
            return "-"
        r, w = max(x["wait_ns"].items(), key=lambda kv: kv[1])
        return f"rank {r}: {w / 1e3:,.1f}" if w > 0 else "-"

    _rows(tab, [(x["stage"], str(x["layer"]) + (f" (stack {x['stack']})" if x["stack"] else ""), f"{x['median_ns'] / 1e3:,.1f}",
                 f"{x['compute_median_ns'] / 1e3:,.1f}", "-" if x["straggler"] is None else f"rank {x['straggler']}",
                 _pct(x["spread_pct"]), waiting(x)) for x in layers], "layers")
    con.print(tab)
    col = c["collectives"]
    if col["unmatched"]:
        con.print(f"{col['unmatched']} collective kernels not found on every rank are left out of the waits "
                  f"({col['matched']} matched on all)")


def write_png(c: dict[str, Any], path: str | os.PathLike) -> None:
    """Each layer's compute per rank against the ranks' median (one panel per stage: a column per
    layer, a row per rank; slower in red, faster in blue), the stragglers boxed; beside it, each
    rank's share of time in communication and the part of it spent waiting."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.patches import Rectangle

    from layerc.backends.outputs import atomic_path

    ranks = [r["rank"] for r in c["ranks"]]
    stages = list(dict.fromkeys(x["stage"] for x in c["layers"]))
    fig, axes = plt.subplots(len(stages) + 1, 1, figsize=(12, 1.6 + 0.32 * len(ranks) * (len(stages) + 1)), squeeze=False,
                             gridspec_kw={"height_ratios": [3] * len(stages) + [2]}, layout="constrained")
    limit = 1.0
    grids = []
    for stage in stages:
        rows = [x for x in c["layers"] if x["stage"] == stage]
        grid = np.full((len(ranks), len(rows)), np.nan)
        for j, x in enumerate(rows):
            median = x["compute_median_ns"]
            for i, r in enumerate(ranks):
                v = x["compute_ns"].get(str(r))
                if v is not None and median:
                    grid[i, j] = 100 * (v / median - 1)
        grids.append((stage, rows, grid))
        if np.isfinite(grid).any():
            limit = max(limit, float(np.nanpercentile(np.abs(grid), 99)))
    image = None
    for ax, (stage, rows, grid) in zip(axes[:-1, 0], grids):
        image = ax.imshow(grid, aspect="auto", cmap="RdBu_r", vmin=-limit, vmax=limit, interpolation="nearest")
        for j, x in enumerate(rows):
            if x["straggler"] is not None and x["straggler"] in ranks:
                ax.add_patch(Rectangle((j - 0.5, ranks.index(x["straggler"]) - 0.5), 1, 1, fill=False, edgecolor="black", linewidth=1.6))
        ax.set_yticks(range(len(ranks)), [f"rank {r}" for r in ranks], fontsize=7)
        step = max(1, len(rows) // 30)
        ax.set_xticks(range(0, len(rows), step), [str(x["layer"]) for x in rows][::step], fontsize=7)
        ax.set_xlabel("layer", fontsize=8)
        ax.set_title(f"{stage}: each layer's compute (outside collectives) against the ranks' median; stragglers boxed",
                     fontsize=9, loc="left")
    if image is not None:
        fig.colorbar(image, ax=list(axes[:-1, 0]), label="% vs median", fraction=0.025, pad=0.01)
    ax = axes[-1, 0]
    if not stages:
        ax.set_title("no layers found in these traces (each rank's warning says why): only their communication", fontsize=9,
                     loc="left")
    comm = [r["communication_pct"] or 0 for r in c["ranks"]]
    wait = [r["wait_ns"] / r["time_ns"] * 100 if r["time_ns"] else 0 for r in c["ranks"]]
    ax.bar(range(len(ranks)), comm, color="#aab7c4", label="communication, % of kernel time")
    ax.bar(range(len(ranks)), wait, color="#c0392b", label="of which waiting for the slowest rank")
    ax.set_xticks(range(len(ranks)), [f"rank {r}" for r in ranks], fontsize=7)
    ax.set_ylabel("% of time", fontsize=8)
    ax.legend(fontsize=7, loc="upper right")
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)


def json_text(c: dict[str, Any]) -> str:
    import orjson

    return (orjson.dumps(c, option=orjson.OPT_INDENT_2) + b"\n").decode()


def write_parquet_ranks(ranks: list[tuple[int, str, dict]], path: str | os.PathLike) -> None:
    """Every rank's tables under ``path`` (``DIR/<table>/rank=R/part-0.parquet``), as
    ``trace --parquet`` writes one rank's; the collectives too."""
    import pyarrow.parquet as pq

    from layerc.backends.outputs import atomic_path, output_dir
    from layerc.backends.trace_parquet import PART

    root = output_dir(path)
    for rank, _, tables in ranks:
        for name, table in tables.items():
            folder = output_dir(Path(root, name, f"rank={rank}"))
            with atomic_path(folder / PART) as tmp:
                pq.write_table(table.drop_columns(["rank"]), tmp, compression="zstd")
