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
