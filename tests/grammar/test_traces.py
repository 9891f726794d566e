"""Trace readers: the real traces in ../shared/data (their MANIFEST facts), generated nsys exports
of every schema version in both CUDA-graph modes, and what goes wrong loudly."""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from layerc.grammar.kineto import read_kineto
from layerc.grammar.nsys import GRAPH_MODE_WARNING, read_nsys
from layerc.grammar.traces import read_trace
from layerc.ir.diagnostics import LayercError, ParseError
from layerc.passes.replays import layers_of, pick_replay
from layerc.backends.synth.nsys import generate

MANIFEST_KERNELS = {
    "torch/sglang_qwen3-8b_decode_mi300x.json.gz": 555,
    "torch/sglang_qwen3-8b_extend_mi300x.json.gz": 527,
    "torch/hf_qwen1.5-0.5b_h100.json.gz": 1465,
    "torch/hta_simple_add_a100.json.gz": 79,
    "torch/hta_minitoy_mi250.json.gz": 14,
    "torch/hta_triton_a100.json.gz": 1,
    "torch/hta_legacy_flows_a100.json.gz": 8568,
    "nsys/nsysai_2gpu_1s_schema3.25.sqlite": 3442,
    "nsys/pipit_saxpy_schema2.9.1.sqlite": 5,
}


@pytest.fixture(scope="module")
def traces(shared):
    return {name: read_trace(shared / "data" / "traces" / name) for name in MANIFEST_KERNELS}


@pytest.mark.parametrize("name", MANIFEST_KERNELS)
def test_every_real_trace_loads_with_its_kernel_count(traces, name):
    t = traces[name]
    assert len(t.kernels) == MANIFEST_KERNELS[name]
    k = t.kernels
    assert (k.end >= k.start).all() and (k.name >= 0).all() and (k.short >= 0).all()
    assert all(t.strings[int(i)] for i in np.unique(k.name))


def test_sglang_decode_is_one_hip_graph_replay(traces):
    t = traces["torch/sglang_qwen3-8b_decode_mi300x.json.gz"]
    replays = t.replays()
    assert max(len(v) for v in replays.values()) == 544
    corr, = [c for c, v in replays.items() if len(v) == 544]
    assert corr == 92178
    chosen = pick_replay(t)
    assert len(chosen.kernels) == 544 and chosen.how == "launch correlation"
    assert len(layers_of(t, chosen.kernels)) == 36
    assert t.devices[0] == "AMD Instinct MI300X"


def test_ground_truth_spans_and_shapes(traces):
    hf = traces["torch/hf_qwen1.5-0.5b_h100.json.gz"]
    names = [hf.strings[int(i)] for i in hf.modules.name]
    layers = {n for n in names if re.fullmatch(r"nn\.Module: Qwen2DecoderLayer_\d+", n)}
    assert len(layers) == 24
    dims = [hf.strings[int(i)] for i in hf.cpu_ops.input_dims if i >= 0]
    assert dims and all(d.startswith("[") for d in dims)
    assert (hf.launch_cpu_op() >= 0).sum() >= 1900  # launches know the aten op that issued them
    extend = traces["torch/sglang_qwen3-8b_extend_mi300x.json.gz"]
    spans = {extend.strings[int(i)] for i in extend.modules.name}
    assert len({s for s in spans if re.fullmatch(r"nn\.Module: Qwen3DecoderLayer_\d+", s)}) == 36


def test_timestamps_are_integer_nanoseconds(traces):
    t = traces["torch/hta_minitoy_mi250.json.gz"]  # float µs with ns precision
    assert t.kernels.start.dtype == np.int64 and (t.kernels.start % 1000 != 0).any()


def test_nsys_facts(traces):
    t = traces["nsys/nsysai_2gpu_1s_schema3.25.sqlite"]
    assert t.meta["schema_version"] == "3.25.0" and t.meta["cuda_graph_mode"] == "graph"
    assert t.warnings == [GRAPH_MODE_WARNING] and "--cuda-graph-trace=node" in GRAPH_MODE_WARNING
    assert len(t.annotations) == 16782
    linked = t.kernel_launch()
    # correlation ids repeat across the two processes; links respect the process
    assert (linked >= 0).sum() == 1632 and (t.launches.pid[linked[linked >= 0]] == t.kernels.pid[linked >= 0]).all()
    old = traces["nsys/pipit_saxpy_schema2.9.1.sqlite"]
    assert old.meta["schema_version"] == "2.9.1" and old.devices == {0: "NVIDIA A100-SXM4-40GB"}
    assert (old.kernel_launch() >= 0).all()
    assert all(not old.strings[int(n)].endswith("_v7000") for n in old.launches.name)


def test_chunked_decoding_equals_whole_file(shared):
    for name in MANIFEST_KERNELS:
        if name.startswith("torch/"):
            p = shared / "data" / "traces" / name
            a, b = read_kineto(p), read_kineto(p, chunk=40_000)
            assert a.summary() == b.summary()
            for col in ("start", "end", "correlation", "row"):
                assert (getattr(a.kernels, col) == getattr(b.kernels, col)).all()
            # string ids depend on the order strings were first seen; the strings must agree
            assert (a.strings.lookup(a.kernels.name) == b.strings.lookup(b.kernels.name)).all()


_kernel_names = st.text(st.sampled_from(list('ab_:<>(), {}"[]\\')), min_size=1, max_size=24)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=st.lists(_kernel_names, min_size=1, max_size=60), noise=st.integers(0, 40), bare=st.booleans(),
       meta_after=st.booleans(), indent=st.sampled_from([None, 1]), zipped=st.booleans(), chunk=st.sampled_from([200, 1000, 1 << 18]))
def test_any_layout_and_piece_size_reads_the_same_events(tmp_path, names, noise, bare, meta_after, indent, zipped, chunk):
    """Kernels among other events, in a bare array or an object with the header before or after
    the events, on one line or many, gzipped or not, decoded in pieces of any size; kernel names
    full of the braces, commas and quotes a piece boundary is searched by."""
    events = [{"ph": "X", "cat": "kernel", "name": n, "pid": 0, "tid": 7, "ts": 1000.5 + 3 * i, "dur": 2.25,
               "args": {"correlation": 50 + i, "stream": 7, "device": 0, "grid": [i + 1, 1, 1]}} for i, n in enumerate(names)]
    for j in range(noise):  # flows and instants between the kernels
        events.insert((j * 7) % (len(events) + 1), {"ph": "s" if j % 2 else "i", "cat": "ac2g", "name": "}, {", "id": j, "ts": 1.0})
    header = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "GPU [0], {x}"}]}
    doc = events if bare else ({"traceEvents": events, **header} if meta_after else {**header, "traceEvents": events})
    text = json.dumps(doc, indent=indent).encode()
    path = tmp_path / ("t.json.gz" if zipped else "t.json")
    path.write_bytes(gzip.compress(text) if zipped else text)
    t = read_kineto(path, chunk=chunk)
    assert list(t.strings.lookup(t.kernels.name)) == names
    assert (t.kernels.start == 1_000_500 + 3000 * np.arange(len(names))).all() and (t.kernels.duration == 2250).all()
    assert (t.kernels.correlation == 50 + np.arange(len(names))).all() and (t.kernels.grid_x == 1 + np.arange(len(names))).all()
    assert t.meta["events"] == len(events) and t.meta["flows"] == noise
    assert t.devices == ({} if bare else {0: "GPU [0], {x}"})


def test_errors_are_located_in_the_file_whatever_the_piece(tmp_path):
    """A one-line trace read in pieces: the column counts from the line's start, not the piece's,
    and a window of the long line is quoted with a caret; a wrong field is located at its value
    and names its event by its index in the whole array."""
    events = [{"ph": "X", "cat": "kernel", "name": f"k{i}", "ts": i, "dur": 1} for i in range(400)]
    good = json.dumps({"traceEvents": events})
    at = good.index('"ts": 300,') + len('"ts": ')
    (tmp_path / "bad.json").write_text(good[:at] + "@" + good[at + 1 :])
    (tmp_path / "field.json").write_text(good.replace('"name": "k321"', '"name": 321'))
    lines = json.dumps({"traceEvents": events}, indent=1).split("\n")
    line = next(i for i, text in enumerate(lines) if '"ts": 300,' in text)
    lines[line] = lines[line].replace('"ts": 300,', '"ts": @00,')
    (tmp_path / "lines.json").write_text("\n".join(lines))
    for chunk in (500, 4000, 1 << 18):
        with pytest.raises(ParseError) as e:
            read_kineto(tmp_path / "bad.json", chunk=chunk)
        assert e.value.loc == (1, at + 1) and "invalid character" in e.value.message
        _, quoted, caret = e.value.format().split("\n")
        assert quoted.startswith("...") and quoted[caret.index("^")] == "@"
        with pytest.raises(ParseError) as e:
            read_kineto(tmp_path / "lines.json", chunk=chunk)
        assert e.value.loc == (line + 1, lines[line].index("@") + 1)
        assert e.value.format().split("\n")[1:] == [lines[line], " " * lines[line].index("@") + "^"]
        with pytest.raises(ParseError) as e:
            read_kineto(tmp_path / "field.json", chunk=chunk)
        value = (tmp_path / "field.json").read_text().index('"name": 321') + len('"name": ')
        assert "$.traceEvents[321].name" in e.value.message and e.value.loc == (1, value + 1)
        _, quoted, caret = e.value.format().split("\n")
        assert quoted[caret.index("^"):].startswith("321, ")


def test_concatenated_gzip_members_read_as_one_stream(shared, tmp_path):
    """``cat a.gz b.gz`` is a valid gzip file; a member boundary may fall inside an event."""
    src = shared / "data/traces/torch/sglang_qwen3-8b_extend_mi300x.json.gz"
    doc = gzip.decompress(src.read_bytes())
    cuts = [0, len(doc) // 3 + 7, 2 * len(doc) // 3 + 11, len(doc)]
    p = tmp_path / "members.json.gz"
    p.write_bytes(b"".join(gzip.compress(doc[a:b]) for a, b in zip(cuts, cuts[1:])))
    a, b = read_kineto(src), read_kineto(p, chunk=50_000)
    assert a.summary() == b.summary() and len(b.kernels) == 527
    assert (a.kernels.start == b.kernels.start).all()


def test_kinds_not_asked_for_are_skipped(shared):
    t = read_kineto(shared / "data/traces/torch/hf_qwen1.5-0.5b_h100.json.gz", kinds={"kernels"})
    assert len(t.kernels) == 1465 and len(t.cpu_ops) == 0 and len(t.modules) == 0


@pytest.mark.parametrize("schema", ["2.9.1", "3.13", "3.25", "3.28"])
@pytest.mark.parametrize("mode", ["node", "graph"])
def test_generated_nsys_round_trips(tmp_path, schema, mode):
    path = tmp_path / f"run_{schema}_{mode}.sqlite"
    truth = generate(path, schema=schema, mode=mode, layers=3, replays=3)
    t = read_nsys(path)
    assert len(t.kernels) == truth["kernel_rows"]
    assert len(t.memops) == truth["memcpy_rows"] + truth["memset_rows"]
    assert len(t.annotations) == truth["nvtx_rows"]
    assert t.meta["schema_version"].startswith(schema)
    if mode == "graph":
        assert t.meta["cuda_graph_mode"] == "graph" and t.warnings == [GRAPH_MODE_WARNING]
        assert (t.kernels.graph_node_id < 0).all()
        return
    chosen_truth = truth["chosen_replay"]
    graph = chosen_truth["graphId"] if schema >= "3.25" else None
    if graph is None:  # without graphId the reader names a graph by its first node id
        graph = min(k["graphNodeId"] for k in chosen_truth["kernels"])
    assert pick_replay(t).graph == graph  # the graph with the most kernels
    replays = [pick_replay(t, graph, r) for r in range(pick_replay(t, graph).replays)]
    match = [r for r in replays if t.kernels.start[r.kernels[0]] == chosen_truth["kernels"][0]["start"]]
    assert len(match) == 1
    got = [(int(t.kernels.start[i]), int(t.kernels.stream[i]), t.strings[int(t.kernels.short[i])]) for i in match[0].kernels]
    want = [(k["start"], k["streamId"], k["shortName"]) for k in chosen_truth["kernels"]]
    assert got == want


@pytest.mark.parametrize("schema", ["2.9.1", "3.25"])
def test_every_kernel_column_equals_the_export(tmp_path, schema, shared):
    """The reader packs and sorts columns on the way: every value must still be the export's."""
    paths = [tmp_path / "g.sqlite", shared / "data/traces/nsys/nsysai_2gpu_1s_schema3.25.sqlite"]
    generate(paths[0], schema=schema, layers=2, replays=2)
    for path in paths:
        t = read_nsys(path)
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        have = {r[1] for r in db.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")}
        cols = ["start", "end", "deviceId", "streamId", "correlationId", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ",
                "registersPerThread", "staticSharedMemory", "dynamicSharedMemory", "demangledName", "graphNodeId"] + (["graphId"] if "graphId" in have else [])
        rows = db.execute(f"SELECT {', '.join('COALESCE(%s, -1)' % c for c in cols)} FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start, rowid").fetchall()
        names = dict(db.execute("SELECT id, value FROM StringIds"))
        rows = [(*r[:14], names[r[14]], *r[15:]) for r in rows]  # names compared as text: ids are the reader's own
        k = t.kernels
        got = list(zip(k.start, k.end, k.device, k.stream, k.correlation, k.grid_x, k.grid_y, k.grid_z, k.block_x, k.block_y, k.block_z,
                       k.registers, k.shared_static, k.shared_dynamic, t.strings.lookup(k.name), k.graph_node_id,
                       *([k.graph_id] if "graphId" in have else [])))
        assert [tuple(v if isinstance(v, str) else int(v) for v in g) for g in got] == rows


def test_processes_keep_their_correlations_apart(tmp_path):
    truth = generate(tmp_path / "two.sqlite", devices=2, layers=2, replays=2)
    assert truth["correlation_ids_overlap_across_processes"]
    t = read_nsys(tmp_path / "two.sqlite")
    linked = t.kernel_launch()
    assert (linked >= 0).all()
    assert (t.launches.pid[linked] == t.kernels.pid).all()


def _err(path) -> LayercError:
    with pytest.raises(LayercError) as e:
        read_trace(path)
    return e.value


def test_bad_traces_give_one_clear_line(tmp_path, shared):
    good = gzip.open(shared / "data/traces/torch/hta_simple_add_a100.json.gz").read()
    (tmp_path / "trunc.json.gz").write_bytes(gzip.compress(good)[:-2000])
    assert "truncated gzip" in _err(tmp_path / "trunc.json.gz").message
    (tmp_path / "cut.json").write_bytes(good[: len(good) // 2])
    assert "never closes" in _err(tmp_path / "cut.json").message
    events = [{"ph": "X", "cat": "kernel", "name": f"k{i}", "ts": i, "dur": 1, "args": {"correlation": i}} for i in range(50)]
    text = "{\n" + '"traceEvents": [\n' + ",\n".join(json.dumps(e) for e in events) + "\n]\n}\n"
    lines = text.split("\n")
    lines[31] = lines[31].replace('"ph": "X"', '"ph": X')  # the 30th event, on line 32, is broken
    bad = "\n".join(lines)
    (tmp_path / "bad.json").write_text(bad)
    e = _err(tmp_path / "bad.json")
    assert "invalid JSON" in e.message and e.loc is not None
    assert e.loc.line == 32 and e.format().startswith(f"{tmp_path / 'bad.json'}:32:")
    (tmp_path / "empty.json").write_text('{"traceEvents": []}')
    assert "no events" in _err(tmp_path / "empty.json").message
    (tmp_path / "zero.json").write_bytes(b"")
    assert "empty" in _err(tmp_path / "zero.json").message
    db = sqlite3.connect(tmp_path / "other.sqlite")
    db.execute("create table t (x)")
    db.commit()
    db.close()
    assert "not an Nsight Systems export" in _err(tmp_path / "other.sqlite").message
    (tmp_path / "junk.bin").write_bytes(b"\x00\x01binary")
    assert "not a trace" in _err(tmp_path / "junk.bin").message
    (tmp_path / "r.nsys-rep").write_bytes(b"x")
    if not __import__("shutil").which("nsys"):
        assert "needs 'nsys' on PATH" in _err(tmp_path / "r.nsys-rep").message


def test_replay_command(shared, tmp_path):
    out = tmp_path / "kernels.json"
    cmd = [sys.executable, "-m", "layerc.tools.driver", "replay", str(shared / "data/traces/torch/sglang_qwen3-8b_decode_mi300x.json.gz"), "-o", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["num_layers_detected"] == 36 and doc["unique_graph_nodes"] == 544
    assert sum(layer["kernel_count"] for layer in doc["layers"].values()) == 544
    first = doc["layers"]["1"]["kernels"][0]
    assert set(first) >= {"index", "kernel", "full_name", "duration_us", "stream_id"}
    r = subprocess.run([*cmd[:-2], "--layer", "99"], capture_output=True, text=True)
    assert r.returncode == 1 and "no layer 99" in r.stderr
    r = subprocess.run([sys.executable, "-m", "layerc.tools.driver", "replay", str(shared / "data/traces/nsys/nsysai_2gpu_1s_schema3.25.sqlite")], capture_output=True, text=True)
    assert r.returncode == 1 and "--cuda-graph-trace=node" in r.stderr and "Traceback" not in r.stderr


def test_perfetto_command_draws_replays_and_layers(shared, tmp_path):
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    out = tmp_path / "decode.pftrace"
    src = shared / "data/traces/torch/sglang_qwen3-8b_decode_mi300x.json.gz"
    r = subprocess.run([sys.executable, "-m", "layerc.tools.driver", "perfetto", str(src), "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    trace = pb.Trace.FromString(out.read_bytes())
    tracks = {p.track_descriptor.uuid: p.track_descriptor.name for p in trace.packet if p.HasField("track_descriptor")}
    begins: dict[str, int] = {}
    for p in trace.packet:
        if p.HasField("track_event") and p.track_event.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            name = tracks.get(p.track_event.track_uuid, "")
            begins[name] = begins.get(name, 0) + 1
    assert begins["layers"] == 36 and begins["graph replays"] == 1
    assert sum(v for k, v in begins.items() if k.startswith("stream")) >= 555


GEOMETRY = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers", "shared_static", "shared_dynamic")


@pytest.mark.parametrize("name", ["torch/hta_legacy_flows_a100.json.gz", "torch/sglang_qwen3-8b_extend_mi300x.json.gz",
                                  "nsys/nsysai_2gpu_1s_schema3.25.sqlite", "generated nsys"])
def test_a_read_without_launch_geometry_keeps_everything_else(shared, tmp_path, name):
    """``geometry=False`` (what ``trace`` reads when no output shows grids and blocks): those
    columns are -1, held once, and every other column of every table is what a full read gives."""
    from layerc.ir.trace import is_constant

    if name == "generated nsys":
        path = tmp_path / "g.sqlite"
        generate(path, kernels=3000, devices=2)
    else:
        path = shared / "data" / "traces" / name
    full, lean = read_trace(path), read_trace(path, geometry=False)
    assert (full.kernels.grid_x >= 0).any()  # the trace has geometry to leave out
    for table in ("kernels", "launches", "cpu_ops", "annotations", "memops", "modules"):
        a, b = getattr(full, table), getattr(lean, table)
        for col in a.COLUMNS:
            if table == "kernels" and col in GEOMETRY:
                assert (getattr(b, col) == -1).all() and (is_constant(getattr(b, col)) or len(b) < 2)
            else:
                assert np.array_equal(getattr(a, col), getattr(b, col)), (table, col)
    assert full.strings.values == lean.strings.values


def test_trace_reads_launch_geometry_only_for_outputs_that_show_it(shared, tmp_path, monkeypatch):
    """``layerc trace`` reads grids and blocks for --perfetto and --parquet, not for its report."""
    import layerc.grammar.traces as traces
    from layerc.tools.driver import main

    asked = []
    real = traces.read_trace
    monkeypatch.setattr(traces, "read_trace", lambda path, kinds=traces.KINDS, geometry=True: asked.append(geometry) or real(path, kinds, geometry))
    path = str(shared / "data" / "traces" / "torch" / "hf_qwen1.5-0.5b_h100.json.gz")
    for extra in ([], ["--json", str(tmp_path / "t.json")], ["--perfetto", str(tmp_path / "t.pftrace")], ["--parquet", str(tmp_path / "pq")]):
        assert main(["trace", path, *extra]) == 0
    assert main(["perfetto", path, "-o", str(tmp_path / "p.pftrace")]) == 0
    assert asked == [False, False, True, True, True]
