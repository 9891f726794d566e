"""``trace --parquet DIR``: a typed trace's tables (``passes.trace_tables``) as Parquet, laid out
as a Hive-partitioned dataset that DuckDB, pandas, Polars and Spark read as one table each::

    DIR/kernels/rank=0/part-0.parquet
    DIR/layers/rank=0/part-0.parquet   ... stages, types, passes

The rank is in the path, not in the files (the Hive convention: ``read_parquet('DIR/kernels/*/*.parquet',
hive_partitioning = true)`` gives it back as a column), so the traces of every rank of a job can
be written into one DIR and queried together. A rank's files are replaced whole; another rank's
are left as they are. Written with the command's other outputs, all or none."""

from __future__ import annotations

import os
from pathlib import Path

from layerc.backends.outputs import atomic_path, output_dir
from layerc.passes.trace_tables import TABLES, rank_of, trace_tables

#: each rank's file in its partition (one: a trace's tables are small beside its events)
PART = "part-0.parquet"


def write_parquet(module, path: str | os.PathLike, stage: str = "all", rank: int | None = None) -> dict:
    """Every table of ``module`` (after ``type-layers``) under ``path``; returns the rows written
    per table and the rank."""
    import pyarrow.parquet as pq

    rank = rank_of(module.trace) if rank is None else rank
    tables = trace_tables(module, stage, rank)
    root = output_dir(path)
    rows = {}
    for name in TABLES:
        folder = output_dir(Path(root, name, f"rank={rank}"))
        table = tables[name].drop_columns(["rank"])
        with atomic_path(folder / PART) as tmp:
            # (no write time or host in the file: the same trace gives the same bytes)
            pq.write_table(table, tmp, compression="zstd")
        rows[name] = table.num_rows
    return {"rank": rank, "rows": rows}
