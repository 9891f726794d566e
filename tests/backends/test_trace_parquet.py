"""``trace --parquet DIR`` and the DataFrame API: the tables hold the numbers ``trace --json``
reports. DuckDB queries the Parquet files of every shared trace and gets the JSON's totals; the
DataFrames of ``layerc.read_trace`` do too; ranks land in their own partitions."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tests.conftest import SHARED
from tests.layerc_cli import run_layerc

duckdb = pytest.importorskip("duckdb")

TRACES = sorted((SHARED / "data" / "traces").glob("*/*.*")) if (SHARED / "data" / "traces").is_dir() else []


def _query(sql: str) -> list[tuple]:
    con = duckdb.connect()
    try:
        return con.sql(sql).fetchall()
    finally:
        con.close()


def _table(root: Path, name: str) -> str:
    return f"read_parquet('{root}/{name}/*/*.parquet', hive_partitioning = true)"


def _written(trace: Path, tmp: Path, *flags: str) -> tuple[dict, Path]:
    out, doc = tmp / "tables", tmp / "report.json"
    rc, _, err = run_layerc("trace", trace, "--json", doc, "--parquet", out, *flags)
    assert rc == 0, err
    return json.loads(doc.read_text()), out


def _check_totals(doc: dict, root: Path, all_stages: bool = True) -> None:
    """Every total of the JSON, as DuckDB sums it from the tables."""
    kernels = _table(root, "kernels")
    [(count, time)] = _query(f"select count(*), coalesce(sum(duration_ns), 0) from {kernels}")
    assert (count, time) == (doc["kernel_count"], doc["total_kernel_time_ns"])
    [(orphans, orphan_time)] = _query(f"select count(*), coalesce(sum(duration_ns), 0) from {kernels} where layer is null")
    assert {"kernels": orphans, "time_ns": orphan_time} == doc["orphans"]
    for what in ("stages", "types"):
        rows = _query(f"select {what[:-1]}, kernels, time_ns from {_table(root, what)}")
        assert {name: {"kernels": n, "time_ns": t} for name, n, t in rows} == doc[what]
        # ... and the kernels table sums to the same per stage and type
        again = _query(f"select {what[:-1]}, count(*), sum(duration_ns) from {kernels} group by 1")
        assert {name: {"kernels": n, "time_ns": t} for name, n, t in again} == doc[what]
    layers = _query(f"select pass, layer, type, stage, kernel_count, duration_ns, start_ns, end_ns, first_kernel, last_kernel, "
                    f"partial, stack from {_table(root, 'layers')} order by pass, layer")
    keys = ("pass", "index", "type", "stage", "kernel_count", "duration_ns", "start_ns", "end_ns", "first_kernel", "last_kernel",
            "partial", "stack")
    assert sorted([dict(zip(keys, row)) for row in layers], key=lambda r: (r["pass"], r["index"])) == \
        sorted([{k: r[k] for k in keys} for r in doc["layers"]], key=lambda r: (r["pass"], r["index"]))
    # a layer's kernels, counted from the kernels table, are its kernel_count
    per_layer = _query(f"select pass, layer, count(*), sum(duration_ns) from {kernels} where layer is not null group by 1, 2")
    assert {(q, i): (n, t) for q, i, n, t in per_layer} == {(r["pass"], r["index"]): (r["kernel_count"], r["duration_ns"])
                                                            for r in doc["layers"]}
    passes = _query(f"select pass, layers, partial, kernels from {_table(root, 'passes')} order by pass")
    if all_stages:  # every pass has kernels: one row each
        assert [n for _, n, _, _ in passes] == doc["layers_per_pass"]
        assert [q for q, _, cut, _ in passes if cut] == doc["partial_passes"]
    else:  # the passes with a layer of the stage
        assert [n for _, n, _, _ in passes if n] == doc["layers_per_pass"]
    assert sum(n for *_, n in passes) == doc["kernel_count"] - doc["orphans"]["kernels"] + \
        _query(f"select count(*) from {kernels} where layer is null and pass is not null")[0][0]


@pytest.mark.parametrize("trace", TRACES, ids=[p.name for p in TRACES])
def test_duckdb_totals_equal_the_json_on_every_shared_trace(trace, tmp_path, shared):
    doc, root = _written(trace, tmp_path)
    _check_totals(doc, root)


@pytest.mark.parametrize("stage", ["prefill", "decode"])
def test_a_stage_selects_the_same_rows_as_the_json(stage, tmp_path, shared):
    trace = SHARED / "data" / "traces" / "torch" / "sglang_qwen3-8b_decode_mi300x.json.gz"
    doc, root = _written(trace, tmp_path, "--stage", stage)
    _check_totals(doc, root, all_stages=False)
    stages = _query(f"select distinct stage from {_table(root, 'kernels')}")
    assert stages in ([], [(stage,)])


def test_dataframes_hold_the_json_totals(tmp_path, shared):
    import layerc

    path = SHARED / "data" / "traces" / "torch" / "hf_qwen1.5-0.5b_h100.json.gz"
    doc, _ = _written(path, tmp_path)
    trace = layerc.read_trace(path)
    assert isinstance(trace, layerc.Trace) and len(trace.kernels) == doc["kernel_count"]  # still the IR
    kernels, layers = trace.kernels_df(), trace.layers_df()
    assert len(kernels) == doc["kernel_count"] and int(kernels.duration_ns.sum()) == doc["total_kernel_time_ns"]
    assert len(layers) == doc["num_layers"] and layers.kernel_count.tolist() == [r["kernel_count"] for r in doc["layers"]]
    by_type = trace.types_df().set_index("type").time_ns.to_dict()
    assert {str(k): int(v) for k, v in by_type.items()} == {k: v["time_ns"] for k, v in doc["types"].items()}
    assert trace.passes_df().layers.tolist() == doc["layers_per_pass"]
    assert set(trace.stages_df().stage.astype(str)) == set(doc["stages"])


def _with_rank(src: Path, dst: Path, rank: int) -> Path:
    doc = json.loads(gzip.open(src).read())
    doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 2}
    dst.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return dst


def test_ranks_share_a_folder_each_in_its_partition(tmp_path, shared):
    src = SHARED / "data" / "traces" / "torch" / "hta_simple_add_a100.json.gz"
    out = tmp_path / "job"
    counts = {}
    for rank in (0, 1):
        trace = _with_rank(src, tmp_path / f"rank{rank}.json.gz", rank)
        rc, _, err = run_layerc("trace", trace, "--parquet", out)
        assert rc == 0, err
        counts[rank] = len(_query(f"select * from read_parquet('{out}/kernels/rank={rank}/*.parquet')"))
        assert counts[rank] > 0
    assert sorted(p.name for p in (out / "kernels").iterdir()) == ["rank=0", "rank=1"]
    assert _query(f"select rank, count(*) from {_table(out, 'kernels')} group by rank order by rank") == sorted(counts.items())
    before = (out / "kernels" / "rank=1" / "part-0.parquet").read_bytes()
    rc, _, err = run_layerc("trace", tmp_path / "rank0.json.gz", "--parquet", out)  # rank 0 again: rank 1 untouched
    assert rc == 0, err
    assert (out / "kernels" / "rank=1" / "part-0.parquet").read_bytes() == before


def test_the_same_trace_gives_the_same_bytes_and_opt_emits_them(tmp_path, shared):
    trace = SHARED / "data" / "traces" / "torch" / "hf_bert-small_h100.json.gz"
    files = []
    for name in ("a", "b"):
        rc, _, err = run_layerc("trace", trace, "--parquet", tmp_path / name)
        assert rc == 0, err
        files.append({p.relative_to(tmp_path / name): p.read_bytes() for p in sorted((tmp_path / name).rglob("*.parquet"))})
    rc, _, err = run_layerc("opt", trace, "--emit", "parquet", "-o", tmp_path / "opt")
    assert rc == 0, err
    emitted = {p.relative_to(tmp_path / "opt"): p.read_bytes() for p in sorted((tmp_path / "opt").rglob("*.parquet"))}
    assert files[0] == files[1] == emitted and len(emitted) == 5


@pytest.mark.parametrize("where", ["-", "/dev/null", "file"])
def test_a_path_that_is_not_a_directory_is_refused_and_nothing_written(where, tmp_path, shared):
    trace = SHARED / "data" / "traces" / "torch" / "hta_minitoy_mi250.json.gz"
    target = tmp_path / "taken" if where == "file" else Path(where)
    if where == "file":
        target.write_text("mine")
    rc, _, err = run_layerc("trace", trace, "--json", tmp_path / "r.json", "--parquet", target)
    assert rc == 1 and "error:" in err and "Traceback" not in err
    assert not (tmp_path / "r.json").exists()  # all outputs or none
    if where == "file":
        assert target.read_text() == "mine"
    else:
        assert Path("/dev/null").is_char_device()


def test_a_failed_run_leaves_no_folder(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2},')
    rc, _, err = run_layerc("trace", broken, "--parquet", tmp_path / "out")
    assert rc == 1 and "error:" in err
    assert not (tmp_path / "out").exists()
