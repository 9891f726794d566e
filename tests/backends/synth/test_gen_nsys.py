"""The synthetic Nsight Systems export generator (``layerc.backends.synth.nsys``).

Generated exports stand in for real node-mode LLM captures in the trace reader's tests, so they
must have the tables and columns of the schema version they claim (compared with the two real
exports in ../shared for 2.9.1 and 3.25), and their ground truth must agree with what SQL over
the file finds: counts, one correlation id per graph replay, no replayed kernel rows in graph mode.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from layerc.backends.synth import nsys as gen_nsys
from layerc.backends.synth.nsys import MODES, SCHEMAS, generate, table_columns

REAL = {
    "2.9.1": "data/traces/nsys/pipit_saxpy_schema2.9.1.sqlite",
    "3.25": "data/traces/nsys/nsysai_2gpu_1s_schema3.25.sqlite",
}
#: columns a post-processor (pipit) added to the real 2.9.1 export; nsys does not write them
POSTPROCESSED = {("CUPTI_ACTIVITY_KIND_RUNTIME", "name"), ("CUPTI_ACTIVITY_KIND_MEMCPY", "name")}
LAUNCH_APIS = {"cudaLaunchKernel_v7000", "cudaLaunchKernelExC_v11060", "cuLaunchKernelEx"}
ENV_TABLES = {"TARGET_INFO_SYSTEM_ENV", "ProcessStreams"}


def ro(path: Path | str) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def columns(con: sqlite3.Connection, table: str) -> list[tuple[str, str, int, int]]:
    return [(r[1], r[2], r[3], r[5]) for r in con.execute(f'PRAGMA table_info("{table}")')]


def tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def strings(con: sqlite3.Connection) -> dict[int, str]:
    return dict(con.execute("SELECT id, value FROM StringIds"))


def graph_launches(con: sqlite3.Connection) -> list[tuple[int, int, int]]:
    """(pid, correlationId, start) of every cudaGraphLaunch row."""
    return con.execute(
        "SELECT (r.globalTid >> 24) & 0xFFFFFF, r.correlationId, r.start FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
        "JOIN StringIds s ON s.id = r.nameId WHERE s.value = 'cudaGraphLaunch_v10000' ORDER BY r.start").fetchall()


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict[tuple[str, str], tuple[Path, dict]]:
    """Every schema × mode: DeepSeek-V3, 4 layers (1 dense + 3 MoE), 2 devices, 4 replays (both graphs)."""
    out = {}
    root = tmp_path_factory.mktemp("nsys")
    for schema in SCHEMAS:
        for mode in MODES:
            path = root / f"dsv3_{schema}_{mode}.sqlite"
            out[schema, mode] = path, generate(path, schema=schema, mode=mode, layers=4, replays=4, devices=2, seed=3)
    return out


CASES = [(s, m) for s in SCHEMAS for m in MODES]


# -- layout ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("schema, mode", CASES)
def test_tables_of_the_version(exports, schema, mode):
    path, truth = exports[schema, mode]
    con = ro(path)
    have = tables(con)
    assert have == set(truth["tables"])
    assert not have & ENV_TABLES
    core = {"StringIds", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
            "CUPTI_ACTIVITY_KIND_MEMSET", "NVTX_EVENTS", "TARGET_INFO_GPU", "TARGET_INFO_CUDA_STREAM", "ThreadNames",
            "PROCESSES"}
    assert core <= have
    enums = {t for t in have if t.startswith("ENUM_")}
    if schema == "2.9.1":
        assert "EXPORT_META_DATA" in have and "META_DATA_EXPORT" not in have
        assert not enums and "META_DATA_CAPTURE" not in have
        assert "CUDA_GRAPH_NODE_EVENTS" not in have and "CUPTI_ACTIVITY_KIND_GRAPH_TRACE" not in have
        assert ("CUDA_GRAPH_EVENTS" in have) == (mode == "node")
    else:
        assert {"META_DATA_EXPORT", "META_DATA_CAPTURE"} <= have and "EXPORT_META_DATA" not in have
        assert {"ENUM_CUDA_KERNEL_LAUNCH_TYPE", "ENUM_NSYS_EVENT_TYPE", "ENUM_NSYS_EVENT_CLASS",
                "ENUM_CUDA_MEMCPY_OPER", "ENUM_CUDA_MEM_KIND"} <= enums
        assert "CUDA_GRAPH_EVENTS" in have
        assert ("CUDA_GRAPH_NODE_EVENTS" in have) == (mode == "node")
        assert ("CUPTI_ACTIVITY_KIND_GRAPH_TRACE" in have) == (mode == "graph")


@pytest.mark.parametrize("schema", ["2.9.1", "3.25"])
def test_columns_match_the_real_export(shared, exports, schema):
    real = ro(shared / REAL[schema])
    common = 0
    for mode in MODES:
        con = ro(exports[schema, mode][0])
        for t in sorted(tables(con) & tables(real)):
            want = [c for c in columns(real, t) if (t, c[0]) not in POSTPROCESSED]
            assert columns(con, t) == want, t
            common += 1
    assert common >= 20 if schema == "3.25" else common >= 10


def test_enum_tables_match_the_real_export(shared, exports):
    real = ro(shared / REAL["3.25"])
    con = ro(exports["3.25", "node"][0])
    enums = sorted(t for t in tables(real) if t.startswith("ENUM_"))
    assert enums == sorted(t for t in tables(con) if t.startswith("ENUM_"))
    for t in enums:
        assert con.execute(f"SELECT * FROM {t} ORDER BY id").fetchall() == \
            real.execute(f"SELECT * FROM {t} ORDER BY id").fetchall(), t
    row = con.execute("SELECT name FROM ENUM_NSYS_EVENT_TYPE WHERE id = 59").fetchone()
    assert row == ("NvtxPushPopRange",)


def test_column_deltas_between_versions():
    k = {s: [c[0] for c in table_columns("CUPTI_ACTIVITY_KIND_KERNEL", s)] for s in SCHEMAS}
    assert len(k["2.9.1"]) == 27 and "greenContextId" not in k["2.9.1"] and "graphId" not in k["2.9.1"]
    assert len(k["3.13"]) == 28 and k["3.13"][4] == "greenContextId" and "graphId" not in k["3.13"]
    assert len(k["3.25"]) == 40 and "graphId" in k["3.25"] and k["3.28"] == k["3.25"]
    nvtx = {s: [c[0] for c in table_columns("NVTX_EVENTS", s)] for s in SCHEMAS}
    assert "binaryData" not in nvtx["2.9.1"] and "eventId" not in nvtx["3.25"]
    assert nvtx["3.28"] == nvtx["3.25"] + ["eventId"]
    assert "copyCount" in [c[0] for c in table_columns("CUPTI_ACTIVITY_KIND_MEMCPY", "3.25")]
    assert "copyCount" not in [c[0] for c in table_columns("CUPTI_ACTIVITY_KIND_MEMCPY", "3.13")]


@pytest.mark.parametrize("schema, mode", CASES)
def test_metadata(exports, schema, mode):
    path, truth = exports[schema, mode]
    con = ro(path)
    meta = "EXPORT_META_DATA" if schema == "2.9.1" else "META_DATA_EXPORT"
    got = dict(con.execute(f"SELECT name, value FROM {meta}"))
    assert got["EXPORT_SCHEMA_VERSION"] == truth["schema"] == gen_nsys.SCHEMA_FULL[schema]
    assert got["EXPORT_SCHEMA_VERSION"].startswith(schema)
    if schema != "2.9.1":
        capture = dict(con.execute("SELECT name, value FROM META_DATA_CAPTURE"))
        assert capture["CUDA_GRAPH_TRACE_OPTIONS:MODE"] == mode.capitalize()
        assert not any("ENVIRONMENT" in name for name in capture)
    gpus = [r[0] for r in con.execute("SELECT name FROM TARGET_INFO_GPU ORDER BY id")]
    assert gpus == ["NVIDIA B200", "NVIDIA B200"]


# -- counts and ids -------------------------------------------------------------------------------
@pytest.mark.parametrize("schema, mode", CASES)
def test_counts_equal_the_truth(exports, schema, mode):
    path, truth = exports[schema, mode]
    con = ro(path)

    def count(table):
        return con.execute(f"SELECT count(*) FROM {table}").fetchone()[0] if table in tables(con) else 0

    assert count("CUPTI_ACTIVITY_KIND_KERNEL") == truth["kernel_rows"]
    assert count("CUPTI_ACTIVITY_KIND_MEMCPY") == truth["memcpy_rows"]
    assert count("CUPTI_ACTIVITY_KIND_MEMSET") == truth["memset_rows"]
    assert count("CUPTI_ACTIVITY_KIND_RUNTIME") == truth["runtime_rows"]
    assert count("NVTX_EVENTS") == truth["nvtx_rows"]
    assert count("CUPTI_ACTIVITY_KIND_GRAPH_TRACE") == truth["graph_trace_rows"]
    assert count("StringIds") == truth["string_ids"]
    assert len(graph_launches(con)) == truth["graph_launches"] == 4 * 2
    per_stream = Counter()
    for dev, stream, n in con.execute(
            "SELECT deviceId, streamId, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY 1, 2"):
        per_stream[str(dev), str(stream)] = n
    assert per_stream == Counter({(d, s): n for d, ss in truth["kernel_rows_per_stream"].items() for s, n in ss.items()})
    assert truth["kernels_executed"] == truth["eager_kernel_rows"] + sum(
        g["kernels_executed"] for g in truth["graphs"])
    if mode == "node":
        assert truth["kernel_rows"] == truth["kernels_executed"]
    else:
        assert truth["kernel_rows"] == truth["eager_kernel_rows"] < truth["kernels_executed"]
        assert truth["graph_trace_rows"] == (0 if schema == "2.9.1" else truth["graph_launches"])


@pytest.mark.parametrize("schema, mode", CASES)
def test_string_ids_resolve(exports, schema, mode):
    con = ro(exports[schema, mode][0])
    ids = strings(con)
    refs = [("CUPTI_ACTIVITY_KIND_KERNEL", c) for c in ("demangledName", "shortName", "mangledName")]
    refs += [("CUPTI_ACTIVITY_KIND_RUNTIME", "nameId"), ("NVTX_EVENTS", "textId"), ("ThreadNames", "nameId")]
    refs += [(t, "nameId") for t in ("CUDA_GRAPH_EVENTS", "CUDA_GRAPH_NODE_EVENTS") if t in tables(con)]
    for table, col in refs:
        for (i,) in con.execute(f"SELECT DISTINCT {col} FROM {table} WHERE {col} IS NOT NULL"):
            assert i in ids, (table, col, i)
    names = set(ids.values())
    assert {"cudaGraphLaunch_v10000", "cudaLaunchKernel_v7000", "cudaMemcpyAsync_v3020", "cuLaunchKernelEx"} <= names
    # NVTX names: text or registered string, never both missing
    assert con.execute("SELECT count(*) FROM NVTX_EVENTS WHERE text IS NULL AND textId IS NULL").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM NVTX_EVENTS WHERE eventType != 59").fetchone()[0] == 0


@pytest.mark.parametrize("schema, mode", CASES)
def test_global_ids_encode_pid_and_tid(exports, schema, mode):
    path, truth = exports[schema, mode]
    con = ro(path)
    for p in truth["processes"]:
        assert p["globalPid"] == (1 << 48) | (p["pid"] << 24) and p["globalTid"] == p["globalPid"] | p["pid"]
    pids = {p["pid"] for p in truth["processes"]}
    assert {r[0] for r in con.execute("SELECT DISTINCT (globalTid >> 24) & 0xFFFFFF FROM CUPTI_ACTIVITY_KIND_RUNTIME")} == pids
    assert {r[0] for r in con.execute("SELECT DISTINCT (globalPid >> 24) & 0xFFFFFF FROM CUPTI_ACTIVITY_KIND_KERNEL")} == pids
    assert con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE globalPid & 0xFFFFFF != 0").fetchone()[0] == 0


# -- graph replays --------------------------------------------------------------------------------
@pytest.mark.parametrize("schema", SCHEMAS)
def test_node_mode_replays_share_the_launch_correlation_id(exports, schema):
    path, truth = exports[schema, "node"]
    con = ro(path)
    per_replay = {int(g): n for g, n in truth["kernels_per_replay"].items()}
    has_graph_id = "graphId" in [c[0] for c in columns(con, "CUPTI_ACTIVITY_KIND_KERNEL")]
    nodes_of_graph: dict[tuple[int, int], set] = {}
    for pid, corr, start in graph_launches(con):
        rows = con.execute(
            f"SELECT graphNodeId, {'graphId' if has_graph_id else 'NULL'}, streamId, start FROM CUPTI_ACTIVITY_KIND_KERNEL "
            "WHERE correlationId = ? AND (globalPid >> 24) & 0xFFFFFF = ?", (corr, pid)).fetchall()
        assert rows and all(r[0] is not None for r in rows)
        assert all(r[3] > start for r in rows)  # GPU work after the launch call began
        assert 2 <= len({r[2] for r in rows}) <= 3
        nodes = frozenset(r[0] for r in rows)
        assert len(nodes) == len(rows)
        gid = rows[0][1] if has_graph_id else min(per_replay, key=lambda g: abs(per_replay[g] - len(rows)))
        if has_graph_id:
            assert {r[1] for r in rows} == {gid}
        assert len(rows) == per_replay[gid]
        # graphNodeId is stable across the replays of one graph
        assert nodes_of_graph.setdefault((pid, gid), nodes) == nodes
        # memset/memcpy nodes of the replay carry the same correlation id
        for table in ("CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_MEMCPY"):
            n = con.execute(f"SELECT count(*) FROM {table} WHERE correlationId = ? AND graphNodeId IS NOT NULL "
                            "AND (globalPid >> 24) & 0xFFFFFF = ?", (corr, pid)).fetchone()[0]
            g = next(x for x in truth["graphs"] if x["graphId"] == gid)
            assert n == g["memsets_per_replay" if "MEMSET" in table else "memcpys_per_replay"]
    assert len(nodes_of_graph) == 2 * 2  # 2 graphs × 2 processes
    most = max(per_replay, key=per_replay.get)
    assert truth["graph_with_most_kernels"] == most


@pytest.mark.parametrize("schema", SCHEMAS)
def test_graph_mode_has_no_replayed_kernel_rows(exports, schema):
    path, truth = exports[schema, "graph"]
    con = ro(path)
    launches = graph_launches(con)
    for pid, corr, _ in launches:
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_MEMCPY"):
            assert con.execute(f"SELECT count(*) FROM {table} WHERE correlationId = ? "
                               "AND (globalPid >> 24) & 0xFFFFFF = ?", (corr, pid)).fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE graphNodeId IS NOT NULL").fetchone()[0] == 0
    if schema != "2.9.1":
        trace = con.execute("SELECT (globalPid >> 24) & 0xFFFFFF, correlationId, graphId, start, end "
                            "FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE").fetchall()
        assert sorted(r[:2] for r in trace) == sorted((p, c) for p, c, _ in launches)
        assert {r[2] for r in trace} == {1, 2} and all(r[3] < r[4] for r in trace)


@pytest.mark.parametrize("schema", SCHEMAS)
def test_eager_kernels_have_their_own_launch(exports, schema):
    for mode in MODES:
        con = ro(exports[schema, mode][0])
        rows = con.execute(
            "SELECT s.value, r.eventClass, k.start > r.end FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId "
            "AND (r.globalTid >> 24) = (k.globalPid >> 24) JOIN StringIds s ON s.id = r.nameId "
            "WHERE k.graphNodeId IS NULL").fetchall()
        n = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE graphNodeId IS NULL").fetchone()[0]
        assert len(rows) == n > 0
        assert {r[0] for r in rows} <= LAUNCH_APIS and all(r[2] for r in rows)
        assert {r[1] for r in rows if r[0] == "cuLaunchKernelEx"} == {1}  # driver API
        assert {r[1] for r in rows if r[0].startswith("cuda")} == {0}


@pytest.mark.parametrize("schema, mode", CASES)
def test_streams_are_in_order(exports, schema, mode):
    con = ro(exports[schema, mode][0])
    rows = con.execute("SELECT deviceId, streamId, start, end FROM CUPTI_ACTIVITY_KIND_KERNEL "
                       "ORDER BY deviceId, streamId, start").fetchall()
    assert all(r[2] < r[3] for r in rows)
    assert not [(a, b) for a, b in zip(rows, rows[1:]) if a[:2] == b[:2] and b[2] < a[3]]
    # distinct start times within a device: "by start order" is well defined
    assert con.execute("SELECT count(*) FROM (SELECT deviceId, start FROM CUPTI_ACTIVITY_KIND_KERNEL "
                       "GROUP BY 1, 2 HAVING count(*) > 1)").fetchone()[0] == 0


@pytest.mark.parametrize("schema", SCHEMAS)
def test_chosen_replay_rows(exports, schema):
    path, truth = exports[schema, "node"]
    con = ro(path)
    chosen = truth["chosen_replay"]
    ids = strings(con)
    rows = con.execute("SELECT start, end, streamId, graphNodeId, shortName, demangledName FROM "
                       "CUPTI_ACTIVITY_KIND_KERNEL WHERE correlationId = ? AND globalPid = ? ORDER BY start",
                       (chosen["correlationId"], chosen["globalPid"])).fetchall()
    got = [{"start": s, "end": e, "streamId": st, "graphNodeId": n, "shortName": ids[sh], "demangledName": ids[dm]}
           for s, e, st, n, sh, dm in rows]
    want = [{k: r[k] for k in got[0]} for r in chosen["kernels"]]
    assert got == want
    assert len(got) == truth["kernels_per_replay"][str(chosen["graphId"])]
    layers = [r["layer"] for r in chosen["kernels"]]
    assert set(layers) == {None, 0, 1, 2, 3}
    assert truth["graph_with_most_kernels"] == chosen["graphId"]
    assert "chosen_replay" in truth and "kernels" not in exports[schema, "graph"][1]["chosen_replay"]


def test_capture_events_map_replayed_kernels_to_layer_ranges(exports):
    """The TensorRT-LLM join: kernel → cloned node → captured node → NVTX layer range at capture time."""
    path, truth = exports["3.25", "node"]
    con = ro(path)
    chosen = truth["chosen_replay"]
    rows = con.execute(
        "SELECT (SELECT n.text FROM NVTX_EVENTS n WHERE n.text LIKE 'model.layers.%' "
        "        AND n.globalTid >> 24 = k.globalPid >> 24 AND n.start <= c2.start AND n.end >= c2.end) "
        "FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN CUDA_GRAPH_NODE_EVENTS c1 ON c1.graphNodeId = k.graphNodeId AND c1.originalGraphNodeId IS NOT NULL "
        "     AND c1.globalTid >> 24 = k.globalPid >> 24 "
        "JOIN CUDA_GRAPH_NODE_EVENTS c2 ON c2.graphNodeId = c1.originalGraphNodeId AND c2.globalTid >> 24 = k.globalPid >> 24 "
        "WHERE k.correlationId = ? AND k.globalPid = ? ORDER BY k.start",
        (chosen["correlationId"], chosen["globalPid"])).fetchall()
    assert [r[0] for r in rows] == [None if k["layer"] is None else f"model.layers.{k['layer']}"
                                    for k in chosen["kernels"]]


def test_eager_steps_have_nvtx_ranges_per_layer(exports):
    con = ro(exports["3.25", "node"][0])
    texts = Counter(r[0] for r in con.execute("SELECT text FROM NVTX_EVENTS WHERE text IS NOT NULL"))
    # per process: 2 captures + 1 prefill step, each with one range per layer
    assert all(texts[f"model.layers.{i}"] == 3 * 2 for i in range(4))
    registered = {strings(con)[r[0]] for r in con.execute("SELECT textId FROM NVTX_EVENTS WHERE textId IS NOT NULL")}
    assert {"prefill step 0", "cuda_graph_capture bs=1", "cuda_graph_capture bs=8"} == registered


def test_correlation_ids_are_per_process(exports):
    """Two ranks: CUPTI numbers each process's calls itself, so the ranges overlap."""
    con = ro(exports["3.25", "node"][0])
    ranges = con.execute("SELECT min(correlationId), max(correlationId) FROM CUPTI_ACTIVITY_KIND_RUNTIME "
                         "GROUP BY globalTid").fetchall()
    (a0, a1), (b0, b1) = ranges
    assert a0 <= b1 and b0 <= a1
    assert exports["3.25", "node"][1]["correlation_ids_overlap_across_processes"]


# -- models, scaling, determinism, files ----------------------------------------------------------
def test_kernel_names_of_the_models(tmp_path):
    dsv3 = generate(tmp_path / "d.sqlite", layers=4, replays=1, devices=2)
    llama = generate(tmp_path / "l.sqlite", model="llama", layers=2, replays=1)
    d = set(strings(ro(tmp_path / "d.sqlite")).values())
    for prefix in ("fmhaSm100fKernel_", "nvjet_tst_64x8_64x16_", "splitKreduce_kernel", "deepseek_v3_topk_kernel",
                   "bmm_E4m3_", "moe_activation", "finalizeKernelVecLoad", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
                   "allreduce_fusion_kernel_oneshot_lamport", "rms_norm", "applyMLARope", "fused_kernel_"):
        assert any(s.startswith(prefix) for s in d), prefix
    assert any(s.startswith("void tensorrt_llm::kernels::") for s in d)  # demangled names next to short ones
    l_ = set(strings(ro(tmp_path / "l.sqlite")).values())
    for name in ("BatchDecodeWithPagedKVCacheKernel", "act_and_mul_kernel", "RMSNormKernel", "rotary_embedding_kernel"):
        assert name in l_
    assert any(s.startswith("nvjet_") for s in l_) and any(s.startswith("sm90_xmma_gemm") for s in l_)
    assert dsv3["gpu"] == "NVIDIA B200" and llama["gpu"] == "NVIDIA H100 80GB HBM3"
    assert [g["streams_used"] for g in dsv3["graphs"]] == [[0, 1, 2]] * 2
    assert [g["streams_used"] for g in llama["graphs"]] == [[0, 1]] * 2


@pytest.mark.parametrize("n, mode", [(5_000, "node"), (30_000, "graph")])
def test_kernels_scales_the_workload(tmp_path, n, mode):
    truth = generate(tmp_path / "s.sqlite", kernels=n, mode=mode)
    biggest = max(truth["kernels_per_replay"].values())
    assert abs(truth["kernels_executed"] - n) <= biggest
    assert truth["layers"] > 4 and truth["replays"] > 3
    con = ro(tmp_path / "s.sqlite")
    assert con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0] == truth["kernel_rows"]


def _digest(path: Path) -> str:
    con = ro(path)
    h = hashlib.sha256()
    for t in sorted(tables(con)):
        for row in con.execute(f'SELECT * FROM "{t}"'):
            h.update(repr(row).encode())
    return h.hexdigest()


def test_deterministic_per_seed(tmp_path):
    a = generate(tmp_path / "a.sqlite", schema="3.28", seed=7)
    b = generate(tmp_path / "b.sqlite", schema="3.28", seed=7)
    c = generate(tmp_path / "c.sqlite", schema="3.28", seed=8)
    strip = {"path", "seconds", "bytes"}
    assert {k: v for k, v in a.items() if k not in strip} == {k: v for k, v in b.items() if k not in strip}
    assert _digest(tmp_path / "a.sqlite") == _digest(tmp_path / "b.sqlite") != _digest(tmp_path / "c.sqlite")


def test_truth_file_and_atomic_write(tmp_path):
    out = tmp_path / "sub" / "trace.sqlite"
    truth = generate(out, replays=2)
    assert json.loads((tmp_path / "sub" / "trace_truth.json").read_text())["kernel_rows"] == truth["kernel_rows"]
    assert sorted(p.name for p in out.parent.iterdir()) == ["trace.sqlite", "trace_truth.json"]
    generate(out, replays=1)  # overwrite in place
    assert sorted(p.name for p in out.parent.iterdir()) == ["trace.sqlite", "trace_truth.json"]


def test_zero_replays_and_no_eager_steps(tmp_path):
    truth = generate(tmp_path / "z.sqlite", replays=0, eager_steps=0)
    assert truth["kernel_rows"] == 0 and truth["graph_launches"] == 0 and truth["chosen_replay"] is None


@pytest.mark.parametrize("kw", [{"schema": "3.0"}, {"mode": "nodes"}, {"model": "gpt"}, {"layers": 0},
                                {"kernels": 0}, {"devices": 0}])
def test_bad_arguments(tmp_path, kw):
    with pytest.raises(ValueError):
        generate(tmp_path / "x.sqlite", **kw)
    assert not list(tmp_path.iterdir())


def test_cli(tmp_path, capsys):
    out = tmp_path / "cli.sqlite"
    from layerc.tools.driver import main as layerc

    assert layerc(["gen-nsys", str(out), "--schema", "2.9.1", "--mode", "graph", "--model", "llama", "--layers", "2",
                   "--replays", "2", "--seed", "1"]) == 0
    assert str(out) in capsys.readouterr().out
    truth = json.loads((tmp_path / "cli_truth.json").read_text())
    assert (truth["schema"], truth["mode"], truth["model"], truth["layers"]) == ("2.9.1", "graph", "llama", 2)
    with pytest.raises(SystemExit) as e:
        layerc(["gen-nsys", str(out), "--schema", "9.9"])
    assert e.value.code == 2
