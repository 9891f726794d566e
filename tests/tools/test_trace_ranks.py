"""``layerc trace`` on every rank of a job (a directory, or several files): each rank analysed in
its own process, then compared. On four ranks of one workload, each with its own noise, where
rank 2 computes decode layer 5 half as long again and the others wait for it in that layer's
all-reduce, the straggler of decode layer 5 is rank 2, the others' waits there are the planted
delay, and no other layer has a straggler; the processes change no byte of the JSON."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.layerc_cli import run_layerc
from tests.passes.test_trace_diff import _generate, _kernels, jitter

RANKS, SLOW, LAYER = 4, 2, 5


def _job(tmp: Path, seed: int, straggle: bool = True, model: str = "llama", noise: int | None = None) -> Path:
    """RANKS traces of one workload (drawn by ``seed``), each with its own noise (drawn by
    ``noise``, default the seed), rank SLOW straggling in decode layer LAYER where ``straggle``."""
    noise = seed if noise is None else noise
    base, truth = _generate(tmp / "base.json.gz", seed, model, tp=RANKS)
    delay: dict[int, float] = {}  # per decode pass: what the straggler adds to layer LAYER
    for e, k in _kernels(base, truth):
        if straggle and k["stage"] == "decode" and k["layer"] == LAYER and k["kernel_type"] != "COMMUNICATION":
            delay[k["pass"]] = delay.get(k["pass"], 0.0) + 0.5 * e["dur"]
    job = tmp / "job"
    job.mkdir()
    for rank in range(RANKS):
        doc = jitter(json.loads(json.dumps(base)), 100 * noise + rank)
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": RANKS}
        waited = set()
        for e, k in _kernels(doc, truth):
            if k["stage"] != "decode" or k["layer"] != LAYER or k["pass"] not in delay:
                continue
            if rank == SLOW and k["kernel_type"] != "COMMUNICATION":
                e["dur"] = round(e["dur"] * 1.5, 3)
            elif rank != SLOW and k["kernel_type"] == "COMMUNICATION" and k["pass"] not in waited:
                e["dur"] = round(e["dur"] + delay[k["pass"]], 3)  # the first all-reduce after the slow compute
                waited.add(k["pass"])
        (job / f"rank{rank}.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    return job


def _compare(job: Path, tmp: Path, *flags: str) -> dict:
    out = tmp / f"ranks{len(flags)}.json"
    rc, _, err = run_layerc("trace", job, "--json", out, *flags)
    assert rc == 0, err
    return json.loads(out.read_text())


@pytest.mark.parametrize("seed", [1, 4, 7])
def test_the_straggler_and_the_waits_are_found(seed, tmp_path):
    c = _compare(_job(tmp_path, seed), tmp_path, "--jobs", "2")
    assert [r["rank"] for r in c["ranks"]] == list(range(RANKS)) and c["same_passes"]
    stragglers = {(x["stage"], x["layer"]): x["straggler"] for x in c["layers"] if x["straggler"] is not None}
    assert stragglers == {("decode", LAYER): SLOW}
    layer = next(x for x in c["layers"] if (x["stage"], x["layer"]) == ("decode", LAYER))
    waits = {int(r): w for r, w in layer["wait_ns"].items()}
    assert waits[SLOW] < min(w for r, w in waits.items() if r != SLOW) / 3
    assert all(r["communication_pct"] > 0 for r in c["ranks"])


@pytest.mark.parametrize("seed", [2, 5])
def test_ranks_that_differ_by_noise_have_no_straggler(seed, tmp_path):
    c = _compare(_job(tmp_path, seed, straggle=False), tmp_path)
    assert all(x["straggler"] is None for x in c["layers"])


def test_processes_change_no_byte_and_the_tables_hold_every_rank(tmp_path):
    duckdb = pytest.importorskip("duckdb")
    job = _job(tmp_path, 3)
    one = _compare(job, tmp_path, "--jobs", "1")
    two = _compare(job, tmp_path, "--jobs", "2", "--parquet", tmp_path / "tables")
    assert one == two
    rows = duckdb.sql(f"select rank, count(*) from read_parquet('{tmp_path}/tables/kernels/*/*.parquet', hive_partitioning = true) "
                      "group by rank order by rank").fetchall()
    assert rows == [(r["rank"], r["kernels"]) for r in one["ranks"]]


def test_options_of_one_trace_are_refused_for_several(tmp_path):
    job = _job(tmp_path, 1, straggle=False)
    rc, _, err = run_layerc("trace", job, "--csv", tmp_path / "x.csv")
    assert rc == 2 and "--csv" in err
    assert not (tmp_path / "x.csv").exists()


def test_ray_tasks_give_the_bytes_of_local_processes(tmp_path):
    """The same ranks as tasks on a local Ray instance (started and stopped by the command, in a
    process of its own: Ray's signal handlers stay out of the test runner): the JSON is byte for
    byte the one of local processes."""
    pytest.importorskip("ray")
    job = _job(tmp_path, 6)
    local, on_ray = tmp_path / "local.json", tmp_path / "ray.json"
    rc, _, err = run_layerc("trace", job, "--json", local, "--jobs", "2")
    assert rc == 0, err
    proc = subprocess.run([sys.executable, "-m", "layerc.tools.driver", "trace", str(job), "--json", str(on_ray), "--ray"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert on_ray.read_bytes() == local.read_bytes()
    stragglers = {(x["stage"], x["layer"]): x["straggler"] for x in json.loads(local.read_text())["layers"] if x["straggler"] is not None}
    assert stragglers == {("decode", LAYER): SLOW}


def test_the_ranks_picture_and_options_of_several_traces_refused_for_one(tmp_path):
    job = _job(tmp_path, 2)
    rc, _, err = run_layerc("trace", job, "--png", tmp_path / "ranks.png")
    assert rc == 0, err
    assert (tmp_path / "ranks.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    one = next(job.iterdir())
    for flags in (("--png", tmp_path / "one.png"), ("--ray",)):
        rc, _, err = run_layerc("trace", one, *flags)
        assert rc == 2 and flags[0] in err
    assert not (tmp_path / "one.png").exists()


def _job_diff(tmp: Path, seed: int, straggle: bool) -> dict:
    a = _job(tmp / "a", seed, straggle=False, noise=10 * seed)
    b = _job(tmp / "b", seed, straggle=straggle, noise=10 * seed + 1)
    rc, _, err = run_layerc("diff", a, b, "--json", tmp / "d.json", "--jobs", "2")
    assert rc == 0, err
    return json.loads((tmp / "d.json").read_text())


@pytest.mark.parametrize("seed", [1, 3])
def test_two_runs_of_a_job_name_the_rank_that_straggles_and_those_waiting(seed, tmp_path):
    """Rank by rank, two runs of one workload with their own noise, B's rank 2 straggling in decode
    layer 5: the straggler is new in B, rank 2's compute there is slower, the others' all-reduce
    there is slower (they wait), and nothing else changed."""
    for side in ("a", "b"):
        (tmp_path / side).mkdir()
    d = _job_diff(tmp_path, seed, straggle=True)
    assert d["stragglers"]["new"] == [{"stage": "decode", "stack": 0, "layer": LAYER, "rank": SLOW}]
    assert d["stragglers"]["gone"] == [] and d["changes"]
    others = [r for r in range(RANKS) if r != SLOW]
    for c in d["changes"]:
        assert c["where"] == [f"decode layer {LAYER}"] and c["what"] == "slower"
        waiting = all(k.endswith("(COMMUNICATION)") for k in c["kernels_b"])
        assert c["ranks"] == (others if waiting else [SLOW]), c
    assert any(c["ranks"] == others for c in d["changes"]) and any(c["ranks"] == [SLOW] for c in d["changes"])


def test_two_runs_of_a_job_that_differ_by_noise_have_no_change(tmp_path):
    for side in ("a", "b"):
        (tmp_path / side).mkdir()
    d = _job_diff(tmp_path, 2, straggle=False)
    assert d["changes"] == [] and d["stragglers"]["new"] == d["stragglers"]["gone"] == []
