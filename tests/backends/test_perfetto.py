"""The Perfetto backend (``layerc.backends.perfetto``): real Kineto traces from ../shared and
synthetic traces are written as ``.pftrace`` and parsed back with the Perfetto protos.

``replay`` below does what trace_processor does with TrackEvent slices (resolve interned names
in file order, order events by timestamp, keeping file order for equal ones, and let an END close
the most recent open slice on its track), so a wrong event order or a bad nesting shows up as a
slice with the wrong duration, an END with nothing open, or a slice left open.
"""

from __future__ import annotations

import gzip
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import given, settings, strategies as st

pytest.importorskip("perfetto")
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace as PbTrace  # noqa: E402
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent  # noqa: E402

from tests.conftest import SHARED
from layerc.backends import perfetto as pf  # noqa: E402
from layerc.backends.perfetto import Span, write_chrome_json, write_pftrace  # noqa: E402
from layerc.grammar.kineto import read_kineto  # noqa: E402
from layerc.ir.trace import (  # noqa: E402
    ANNOTATION_GPU,
    ANNOTATION_USER,
    MEMCPY,
    Annotations,
    CpuOps,
    Kernels,
    Launches,
    MemOps,
    Strings,
    Trace,
)

TORCH = sorted((SHARED / "data" / "traces" / "torch").glob("*.json.gz"))
BEGIN, END = TrackEvent.TYPE_SLICE_BEGIN, TrackEvent.TYPE_SLICE_END


# -- reading a .pftrace back ---------------------------------------------------------------------
def replay(path: Path) -> dict:
    raw = path.read_bytes()
    if path.name.endswith(".gz"):
        raw = gzip.decompress(raw)
    trace = PbTrace.FromString(raw)
    names, arg_names, values = {}, {}, {}
    tracks: dict[int, object] = {}
    events = []
    seqs, cleared = set(), None
    for i, p in enumerate(trace.packet):
        seqs.add(p.trusted_packet_sequence_id)
        if cleared is None:
            cleared = p.sequence_flags & 1 and p.first_packet_on_sequence
        d = p.interned_data
        names.update((e.iid, e.name) for e in d.event_names)
        arg_names.update((e.iid, e.name) for e in d.debug_annotation_names)
        values.update((e.iid, e.str.decode()) for e in d.debug_annotation_string_values)
        if p.HasField("track_descriptor"):
            td = p.track_descriptor
            assert td.uuid not in tracks, "a track described twice"
            tracks[td.uuid] = td
        if p.HasField("track_event"):
            te = p.track_event
            assert te.track_uuid in tracks, "an event before its track's descriptor"
            ev = {"i": i, "ts": p.timestamp, "type": te.type, "track": te.track_uuid}
            if te.type == BEGIN:
                assert te.HasField("name_iid") and not te.HasField("name"), "slice names are interned"
                assert p.sequence_flags == 2, "a packet using interned data says so"
                ev["name"] = names[te.name_iid]  # KeyError: used before it was interned
                args = {}
                for a in te.debug_annotations:
                    key = arg_names[a.name_iid] if a.HasField("name_iid") else a.name
                    kind = a.WhichOneof("value")
                    args[key] = values[a.string_value_iid] if kind == "string_value_iid" else getattr(a, kind)
                ev["args"] = args
                ev["flows"] = list(te.flow_ids)
                ev["ends_flows"] = list(te.terminating_flow_ids)
            events.append(ev)
    events.sort(key=lambda e: e["ts"])  # stable: file order among equal timestamps
    open_: dict[int, list] = defaultdict(list)
    slices = []
    for ev in events:
        if ev["type"] == BEGIN:
            ev["depth"] = len(open_[ev["track"]])
            open_[ev["track"]].append(ev)
            slices.append(ev)
        else:
            assert ev["type"] == END
            assert open_[ev["track"]], "an END with no open slice"
            s = open_[ev["track"]].pop()
            s["dur"] = ev["ts"] - s["ts"]
    assert not any(open_.values()), "slices left open"
    return {"tracks": tracks, "slices": slices, "sequences": seqs, "cleared": cleared, "packets": len(trace.packet)}


def track_paths(tracks: dict) -> dict[int, tuple[str, str]]:
    """uuid → (process name, track name)."""
    def process_of(td):
        while not td.HasField("process"):
            td = tracks[td.parent_uuid]
        return td.process.process_name

    out = {}
    for uuid, td in tracks.items():
        name = td.thread.thread_name if td.HasField("thread") else td.process.process_name if td.HasField("process") else td.name
        out[uuid] = (process_of(td), name)
    return out


def by_category(doc: dict) -> dict:
    slices, paths = doc["slices"], track_paths(doc["tracks"])
    out = defaultdict(list)
    for s in slices:
        proc, track = paths[s["track"]]
        if proc.startswith("GPU"):
            out["stream" if track.startswith("stream") else track].append(s)
        else:
            out["host"].append(s)
    return out


def flows(doc: dict) -> tuple[dict, dict]:
    src, dst = {}, {}
    for s in doc["slices"]:
        for f in s["flows"]:
            assert f not in src
            src[f] = s
        for f in s["ends_flows"]:
            assert f not in dst
            dst[f] = s
    return src, dst


# -- traces ----------------------------------------------------------------------------------------
def full_columns(n: int, cols: dict) -> dict:
    return {k: np.array(np.broadcast_to(np.asarray(v), (n,))) for k, v in cols.items()}


def synthetic(n: int, devices: int = 2, streams: int = 2, per_layer: int = 10, replay_every: int = 4,
              replay_len: int = 8, cpu: bool = True) -> tuple[Trace, np.ndarray]:
    """``n`` kernels round-robin over devices × streams, 1 µs apart on each stream; runs of
    ``replay_len`` kernels per stream of a device (one run in ``replay_every``) share one graph launch, the rest have a
    ``cudaLaunchKernel`` each inside an ``aten::op``; ``per_layer`` consecutive kernels of a stream
    form a layer. Returns the trace and each kernel's layer."""
    s = Strings()
    groups = devices * streams
    i = np.arange(n, dtype=np.int64)
    g, j = i % groups, i // groups
    start = 1_000_000 + j * 1000 + g * 50
    dur = 100 + (i * 37) % 500
    names = [f"void at::native::kernel_{a}<float, {a}>(int, float*)" for a in range(7)]
    short = [s.intern(f"kernel_{a}") for a in range(7)]
    full = [s.intern(x) for x in names]
    pick = i % 7
    replayed = ((j // replay_len) % replay_every == 0) if replay_every else np.zeros(n, bool)
    run = j // replay_len
    corr = np.where(replayed, 10_000_000 + run * devices + g // streams, i + 1)  # a replay covers a device's streams
    kernels = Kernels.from_columns(full_columns(n, {
        "start": start, "end": start + dur, "device": g // streams, "stream": 7 + g % streams, "correlation": corr,
        "graph_id": np.where(replayed, 1, -1), "graph_node_id": np.where(replayed, j % replay_len + 100, -1),
        "grid_x": 128 + pick, "grid_y": 1, "grid_z": 1, "block_x": 256, "block_y": 1, "block_z": 1,
        "registers": 32 + pick, "shared_static": 1024 * pick, "shared_dynamic": 0,
        "name": np.array(full)[pick], "short": np.array(short)[pick], "row": i,
    }))
    # launches: a kernel launch per eager kernel, one graph launch per run (at its first kernel)
    first = ~replayed | ((j % replay_len == 0) & (g % streams == 0))
    li = np.nonzero(first)[0]
    lstart = start[li] - 500
    launch_name = np.where(replayed[li], s.intern("cudaGraphLaunch"), s.intern("cudaLaunchKernel"))
    launches = Launches.from_columns(full_columns(len(li), {
        "start": lstart, "end": lstart + 20, "pid": 4242, "tid": 100 + g[li] // streams, "correlation": corr[li],
        "external_id": li + 1, "name": launch_name, "kind": 0, "row": li,
    }))
    t = Trace(source="synthetic", format="kineto", strings=s, kernels=kernels, launches=launches,
              devices={d: "NVIDIA H100 80GB HBM3" for d in range(devices)})
    if cpu:
        t.cpu_ops = CpuOps.from_columns(full_columns(len(li), {
            "start": lstart - 5, "end": lstart + 25, "pid": 4242, "tid": 100 + g[li] // streams,
            "name": s.intern("aten::op"), "external_id": li + 1,
            "input_dims": s.intern("[[8, 4096], [4096, 4096]]"), "sequence": li,
        }))
    layer = (j // per_layer) % 32
    return t, layer


def layer_spans(t: Trace, layer: np.ndarray, per_layer: int = 10) -> list:
    """A span per device and layer instance (kernels of all streams), as ``Span`` objects and dicts."""
    k = t.kernels
    groups = len(np.unique(np.stack([k.device, k.stream], 1), axis=0))
    inst = np.arange(len(k)) // groups // per_layer
    out = []
    for key in np.unique(np.stack([k.device, inst], 1), axis=0).tolist():
        m = (k.device == key[0]) & (inst == key[1])
        lay = int(layer[m][0])
        s = Span(name=f"layer {lay}", start=int(k.start[m].min()), end=int(k.end[m].max()), track="layers",
                 device=key[0], args={"layer": lay})
        out.append(s if len(out) % 2 else {"name": s.name, "start": s.start, "end": s.end, "track": s.track,
                                           "device": s.device, "args": s.args})
    return out


def replay_spans(t: Trace) -> list[dict]:
    k = t.kernels
    out = []
    for corr, idx in t.replays().items():
        for d in np.unique(k.device[idx]).tolist():
            sel = idx[k.device[idx] == d]
            out.append({"name": f"replay {corr}", "start": int(k.start[sel].min()), "end": int(k.end[sel].max()),
                        "track": "graph replays", "device": d})
    return out


def edge_trace() -> Trace:
    """Overlapping kernels on one stream, a zero-length kernel, identical CPU spans, a memcpy, GPU
    and user annotations, a device with no name, a launch whose kernel starts with it."""
    s = Strings()
    kn = s.intern("k")
    kernels = Kernels.from_columns({
        "start": [100, 150, 300, 300, 400, 400], "end": [200, 250, 300, 350, 500, 450],
        "device": [0, 0, 0, 0, 3, 3], "stream": [1, 1, 1, 1, 2, 2], "correlation": [1, 2, 3, 4, 5, 6],
        "name": [kn] * 6, "short": [-1] * 6, "grid_x": [1] * 6, "grid_y": [1] * 6, "grid_z": [1] * 6,
    })
    launch = s.intern("cudaLaunchKernel")
    launches = Launches.from_columns({
        "start": [10, 20, 30, 40, 50, 400], "end": [15, 25, 35, 45, 55, 410], "pid": [7] * 6, "tid": [8] * 6,
        "correlation": [1, 2, 3, 4, 5, 6], "name": [launch] * 6, "kind": [0] * 6,
    })
    op = s.intern("aten::mm")
    cpu = CpuOps.from_columns({"start": [5, 5, 5, 30], "end": [60, 60, 28, 50], "pid": [7] * 4, "tid": [8] * 4,
                               "name": [op] * 4, "input_dims": [-1] * 4})
    ann = Annotations.from_columns({"start": [0, 90], "end": [70, 600], "pid": [7, 0], "tid": [8, 1],
                                    "name": [s.intern("step"), s.intern("step")], "kind": [ANNOTATION_USER, ANNOTATION_GPU]})
    memops = MemOps.from_columns({"start": [260], "end": [290], "device": [0], "stream": [1], "correlation": [-1],
                                  "bytes": [4096], "kind": [MEMCPY], "name": [-1]})
    return Trace(source="edge", format="kineto", strings=s, kernels=kernels, launches=launches, cpu_ops=cpu,
                 annotations=ann, memops=memops, devices={0: "NVIDIA H100 80GB HBM3"})


@pytest.fixture(scope="module", params=[p.name for p in TORCH] or ["missing"])
def torch_trace(request, shared):
    path = shared / "data" / "traces" / "torch" / request.param
    return read_kineto(path)


def overlaps(t: Trace, device: int, stream: int) -> bool:
    k, m = t.kernels, t.memops
    a, b = (k.device == device) & (k.stream == stream), (m.device == device) & (m.stream == stream)
    s, e = np.concatenate([k.start[a], m.start[b]]), np.concatenate([k.end[a], m.end[b]])
    o = np.lexsort((-e, s))
    s, e = s[o], e[o]
    return not _nested(s, e)


def _nested(s, e) -> bool:
    stack = []
    for a, b in zip(s.tolist(), e.tolist()):
        while stack and stack[-1] <= a:
            stack.pop()
        if stack and b > stack[-1]:
            return False
        stack.append(b)
    return True


def intervals(rows) -> list[tuple[int, int]]:
    return sorted(zip(rows.start.tolist(), (rows.end - rows.start).tolist()))


# -- tests ---------------------------------------------------------------------------------------
def test_real_traces(torch_trace, tmp_path):
    t = torch_trace
    out = tmp_path / "t.pftrace"
    stats = write_pftrace(t, out)
    doc = replay(out)
    assert doc["sequences"] == {pf.SEQUENCE_ID} and doc["cleared"]
    assert stats["packets"] == doc["packets"] and stats["bytes"] == out.stat().st_size
    assert not list(tmp_path.glob(".*.tmp")), "the temporary file is renamed, not left behind"

    # a process per device, named from the trace; one track per stream under it
    paths = track_paths(doc["tracks"])
    procs = {td.process.process_name for td in doc["tracks"].values() if td.HasField("process")}
    devices = set(t.kernels.device.tolist()) | set(t.memops.device.tolist())
    devices |= set(t.annotations.pid[t.annotations.kind == ANNOTATION_GPU].tolist())
    gpu = {p for p in procs if p.startswith("GPU")}
    assert len(gpu) == len(devices)
    for d in devices:
        label = next(p for p in gpu if p.startswith(f"GPU {d}"))
        if d in t.devices:
            assert label == f"GPU {d}: {t.devices[d]}"
    k, m = t.kernels, t.memops
    streams = set(zip(k.device.tolist(), k.stream.tolist())) | set(zip(m.device.tolist(), m.stream.tolist()))
    stream_tracks = [(p, n) for p, n in paths.values() if n.startswith("stream ")]
    assert len(set(stream_tracks)) == len(streams)
    # a second, same-named track only for a stream whose kernels overlap (hta_legacy_flows: a
    # memcpy starts 40 ns before a kernel ends, µs rounding)
    extra = {key for key, n in Counter(stream_tracks).items() if n > 1}
    assert {(int(p.split()[1].rstrip(":")), int(n.split()[1])) for p, n in extra} == {key for key in streams if overlaps(t, *key)}

    # every kernel, memop and host event is one slice, with its own times (so BEGIN/END paired right)
    cats = by_category(doc)
    n_host = len(t.launches) + len(t.cpu_ops) + len(t.modules) + int((t.annotations.kind != ANNOTATION_GPU).sum())
    assert len(doc["slices"]) == sum(len(x) for x in (t.kernels, t.memops, t.launches, t.cpu_ops, t.modules, t.annotations))
    assert len(cats["stream"]) == len(t.kernels) + len(t.memops)
    assert len(cats["host"]) == n_host
    got = sorted((s["ts"], s["dur"]) for s in cats["stream"])
    want = sorted(intervals(t.kernels) + intervals(t.memops))
    assert got == want

    # names resolve through interning; kernel args
    kernel_slices = [s for s in cats["stream"] if "full name" in s["args"]]
    assert len(kernel_slices) == len(t.kernels)
    short = Counter(t.strings.lookup(t.kernels.short).tolist())
    assert Counter(s["name"] for s in kernel_slices) == short
    full = Counter(t.strings.lookup(t.kernels.name).tolist())
    assert Counter(s["args"]["full name"] for s in kernel_slices) == full
    want_args = {"full name"} | {key for key, col in (("grid", k.grid_x), ("block", k.block_x), ("registers per thread", k.registers),
                                                      ("shared memory", k.shared_static), ("correlation", k.correlation),
                                                      ("External id", k.external_id)) if (col >= 0).all()}
    assert len(want_args) >= 2
    for s in kernel_slices:
        assert want_args <= set(s["args"])
    if "grid" in want_args:
        want = Counter(f"[{x}, {y}, {z}]" for x, y, z in zip(k.grid_x, k.grid_y, k.grid_z))
        assert Counter(s["args"]["grid"] for s in kernel_slices) == want

    # flows: launch → each kernel it launched
    src, dst = flows(doc)
    linked = int((t.kernel_launch() >= 0).sum())
    kernel_dst = [f for f, s in dst.items() if "full name" in s["args"]]
    assert len(kernel_dst) == linked and set(dst) <= set(src)
    paths = track_paths(doc["tracks"])
    for f in kernel_dst[:200]:
        assert src[f]["args"]["correlation"] == dst[f]["args"]["correlation"]
        # a flow runs from the launch on a host thread to the kernel on a GPU stream (not by
        # time: host and device clocks may disagree)
        assert not paths[src[f]["track"]][0].startswith("GPU") and paths[dst[f]["track"]][0].startswith("GPU")


def test_sglang_decode_replay_spans(shared, tmp_path, record_property):
    """The decode trace: 544 kernels of one hipGraphLaunch fan out from it, and sit inside the
    graph-replay span drawn on the device."""
    t = read_kineto(shared / "data" / "traces" / "torch" / "sglang_qwen3-8b_decode_mi300x.json.gz")
    spans = replay_spans(t)
    assert spans
    out = tmp_path / "decode.pftrace"
    t0 = time.perf_counter()
    stats = write_pftrace(t, out, spans=spans)
    record_property("perfetto sglang decode .pftrace", f"{stats['bytes']} B in {time.perf_counter() - t0:.3f} s")
    doc = replay(out)
    paths = track_paths(doc["tracks"])
    replays = [s for s in doc["slices"] if paths[s["track"]][1] == "graph replays"]
    assert len(replays) == len(spans)
    src, dst = flows(doc)
    (corr, idx), = t.replays().items()
    graph_launch = [s for s in doc["slices"] if s["args"].get("correlation") == corr and "full name" not in s["args"]]
    assert len(graph_launch) == 1 and len(graph_launch[0]["flows"]) == len(idx) >= 500
    kernels = [s for s in doc["slices"] if "full name" in s["args"]]
    inside = [k for k in kernels if k["args"]["correlation"] == corr]
    for k in inside:
        proc = paths[k["track"]][0]
        assert any(r["ts"] <= k["ts"] and k["ts"] + k["dur"] <= r["ts"] + r["dur"] and paths[r["track"]][0] == proc for r in replays)
    js = tmp_path / "decode.json"
    t0 = time.perf_counter()
    jstats = write_chrome_json(t, js, spans=spans)
    record_property("perfetto sglang decode .json", f"{jstats['bytes']} B in {time.perf_counter() - t0:.3f} s")


def test_synthetic_layers_replays_flows(tmp_path):
    t, layer = synthetic(4000)
    spans = layer_spans(t, layer) + replay_spans(t)
    out = tmp_path / "syn.pftrace"
    stats = write_pftrace(t, out, spans=spans, layer_of=layer)
    doc = replay(out)
    paths = track_paths(doc["tracks"])
    n = len(t.kernels) + len(spans) + len(t.launches) + len(t.cpu_ops)
    assert len(doc["slices"]) == n == stats["slices"]

    # tracks: 2 devices, each: layers, graph replays, stream 7, stream 8; host: threads 100, 101
    by_proc = defaultdict(list)
    for uuid, (proc, name) in paths.items():
        by_proc[proc].append(name)
    assert sorted(by_proc) == ["GPU 0: NVIDIA H100 80GB HBM3", "GPU 1: NVIDIA H100 80GB HBM3", "host process 4242"]
    for d in (0, 1):
        names = by_proc[f"GPU {d}: NVIDIA H100 80GB HBM3"]
        assert sorted(names) == sorted([f"GPU {d}: NVIDIA H100 80GB HBM3", "layers", "graph replays", "stream 7", "stream 8"])
        # ordered: span tracks above streams
        tds = {td.name: td for td in doc["tracks"].values() if td.parent_uuid and paths[td.uuid][0].startswith(f"GPU {d}")}
        assert tds["layers"].sibling_order_rank < tds["graph replays"].sibling_order_rank < tds["stream 7"].sibling_order_rank
    assert sorted(by_proc["host process 4242"]) == ["host process 4242", "thread 100", "thread 101"]

    # every kernel inside a layer span of its device with its layer, and a replayed one inside its replay
    kernels = [s for s in doc["slices"] if "grid" in s["args"]]
    assert len(kernels) == len(t.kernels)
    assert Counter(s["args"]["layer"] for s in kernels) == Counter(layer.tolist())
    spans_on = defaultdict(list)
    for s in doc["slices"]:
        proc, name = paths[s["track"]]
        if name in ("layers", "graph replays"):
            spans_on[(proc, name)].append(s)
    for key in spans_on:
        spans_on[key].sort(key=lambda s: s["ts"])
    starts = {key: np.array([s["ts"] for s in v]) for key, v in spans_on.items()}
    replayed = 0
    for k in kernels:
        proc = paths[k["track"]][0]
        for track in ("layers", "graph replays"):
            v = spans_on[(proc, track)]
            i = np.searchsorted(starts[(proc, track)], k["ts"], side="right") - 1
            hit = i >= 0 and v[i]["ts"] <= k["ts"] and k["ts"] + k["dur"] <= v[i]["ts"] + v[i]["dur"]
            if track == "layers":
                assert hit and v[i]["name"] == f"layer {k['args']['layer']}" and v[i]["args"]["layer"] == k["args"]["layer"]
            elif "graph node id" in k["args"]:
                assert hit and v[i]["name"] == f"replay {k['args']['correlation']}"
                replayed += 1
            else:
                assert not hit
    assert replayed == int((t.kernels.graph_id >= 0).sum()) > 0

    # flows: one per kernel; a graph launch starts one per kernel of its replay
    src, dst = flows(doc)
    assert len(dst) == len(t.kernels) == stats["flows"] and set(src) == set(dst)
    fan = Counter(id(src[f]) for f in dst)
    assert max(fan.values()) == 16 and min(fan.values()) == 1
    for f, k in dst.items():
        assert src[f]["name"] == ("cudaGraphLaunch" if "graph node id" in k["args"] else "cudaLaunchKernel")
        assert src[f]["ts"] < k["ts"]

    # host nesting: each launch inside its aten::op
    host = [s for s in doc["slices"] if paths[s["track"]][0].startswith("host")]
    assert {s["depth"] for s in host if s["name"] == "aten::op"} == {0}
    assert {s["depth"] for s in host if s["name"].startswith("cuda")} == {1}
    assert all(s["args"]["Input Dims"] == "[[8, 4096], [4096, 4096]]" for s in host if s["name"] == "aten::op")


def test_edge_cases(tmp_path):
    """Overlap goes to a same-named overflow track; zero-length and identical slices keep their
    times; a device without a name is still a process."""
    t = edge_trace()
    out = tmp_path / "edge.pftrace.gz"
    write_pftrace(t, out)
    doc = replay(out)
    paths = track_paths(doc["tracks"])
    stream1 = [p for p in paths.values() if p[1] == "stream 1"]
    assert stream1 == [("GPU 0: NVIDIA H100 80GB HBM3", "stream 1")] * 2  # kernel 150-250 overlaps 100-200
    assert ("GPU 3", "stream 2") in paths.values() and ("GPU 0: NVIDIA H100 80GB HBM3", "gpu annotations") in paths.values()
    slices = doc["slices"]
    gpu = sorted((s["ts"], s["dur"]) for s in slices if paths[s["track"]][0].startswith("GPU"))
    assert gpu == sorted(intervals(t.kernels) + intervals(t.memops) + [(90, 510)])
    memcpy = [s for s in slices if s["name"] == "Memcpy"]
    assert len(memcpy) == 1 and memcpy[0]["args"]["bytes"] == 4096
    # stream 2: 400-500 holds 400-450 (nested by time)
    s2 = sorted((s["ts"], s["dur"], s["depth"]) for s in slices if paths[s["track"]][1] == "stream 2")
    assert s2 == [(400, 50, 1), (400, 100, 0)]
    host = sorted((s["ts"], s["dur"], s["name"]) for s in slices if paths[s["track"]][0].startswith("host"))
    want = sorted([(a, b, "cudaLaunchKernel") for a, b in intervals(t.launches)]
                  + [(a, b, "aten::mm") for a, b in intervals(t.cpu_ops)] + [(0, 70, "step")])
    assert host == want
    # a CPU op 30-50 overlapping 5-28 is fine; ops 5-60 twice nest; launch 30-35 nests in op 30-50
    depth = {(s["ts"], s["dur"], s["name"]): s["depth"] for s in slices if paths[s["track"]][0].startswith("host")}
    assert depth[(30, 5, "cudaLaunchKernel")] == 4 and depth[(0, 70, "step")] == 0
    src, dst = flows(doc)
    assert len(dst) == 6


def test_chrome_json(tmp_path):
    t, layer = synthetic(2000)
    spans = layer_spans(t, layer)
    out = tmp_path / "syn.json"
    write_chrome_json(t, out, spans=spans, layer_of=layer)
    doc = orjson.loads(out.read_bytes())
    ev = doc["traceEvents"]
    x = [e for e in ev if e["ph"] == "X"]
    kernels = [e for e in x if e["cat"] == "kernel"]
    assert len(kernels) == len(t.kernels) and len(x) == len(t.kernels) + len(spans) + len(t.launches) + len(t.cpu_ops)
    assert {e["args"]["layer"] for e in kernels} == set(layer.tolist())
    assert Counter(e["ph"] for e in ev if e["ph"] in "sf") == {"s": len(t.kernels), "f": len(t.kernels)}
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"].endswith("_name")}
    assert names[(0, None)] == "GPU 0: NVIDIA H100 80GB HBM3" and names[(0, 7)] == "stream 7"
    assert {names[(e["pid"], e["tid"])] for e in kernels} == {"stream 7", "stream 8"}
    assert {names[(e["pid"], e["tid"])] for e in x if e["cat"] == "layerc_span"} == {"layers"}
    # read back by the Kineto reader: same kernels, same times (µs, 3 decimals)
    back = read_kineto(out)
    assert len(back.kernels) == len(t.kernels)
    assert intervals(back.kernels) == intervals(t.kernels)
    assert (np.sort(back.kernels.correlation) == np.sort(t.kernels.correlation)).all()


def test_chrome_json_real(torch_trace, tmp_path):
    t = torch_trace
    out = tmp_path / "t.json.gz"
    write_chrome_json(t, out)
    doc = orjson.loads(gzip.decompress(out.read_bytes()))
    x = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert sum(e["cat"] == "kernel" for e in x) == len(t.kernels)
    base = doc.get("baseTimeNanoseconds", 0)
    k = sorted((round(e["ts"] * 1000) + base, round(e["dur"] * 1000)) for e in x if e["cat"] == "kernel")
    assert k == intervals(t.kernels)  # every ns kept, large clocks relative to the base


def test_no_partial_file(tmp_path):
    t, _ = synthetic(100)
    out = tmp_path / "keep.pftrace"
    out.write_bytes(b"old")
    with pytest.raises(Exception):
        write_pftrace(t, out, layer_of=np.zeros(3, np.int64))  # wrong length: refused
    with pytest.raises(Exception):
        write_pftrace(t, out, spans=[{"name": "x"}])  # no times
    assert out.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["keep.pftrace"]


def test_streams_in_batches(tmp_path, record_property, monkeypatch):
    """Many batches and time windows: the file is a concatenation of Trace messages that parses
    as one, and events keep their order across windows."""
    monkeypatch.setattr(pf, "BATCH", 1000)
    monkeypatch.setattr(pf, "WINDOW", 5000)
    t, layer = synthetic(20_000, cpu=False)
    out = tmp_path / "big.pftrace"
    t0 = time.perf_counter()
    stats = write_pftrace(t, out, layer_of=layer)
    record_property("perfetto 20k synthetic kernels", f"{stats['bytes']} B in {time.perf_counter() - t0:.3f} s")
    doc = replay(out)
    assert len(doc["slices"]) == len(t.kernels) + len(t.launches)
    names = Counter(s["name"] for s in doc["slices"])
    assert sum(v for k, v in names.items() if k.startswith("kernel_")) == len(t.kernels)
    assert sorted((s["ts"], s["dur"]) for s in doc["slices"] if "full name" in s["args"]) == intervals(t.kernels)
    file_ts = [s["ts"] for s in sorted(doc["slices"], key=lambda s: s["i"])]
    assert file_ts == sorted(file_ts), "BEGINs are written in time order"
    js = tmp_path / "big.json"
    write_chrome_json(t, js, layer_of=layer)
    ev = orjson.loads(js.read_bytes())["traceEvents"]
    assert sum(e["ph"] == "X" and e["cat"] == "kernel" for e in ev) == len(t.kernels)


def test_nesting_check_agrees_with_lanes():
    """The numpy nesting check says yes exactly when the stack walk needs no overflow lane,
    on small random intervals full of ties and zero lengths."""
    rng = np.random.default_rng(7)
    seen = Counter()
    for _ in range(3000):
        m = int(rng.integers(1, 9))
        s = rng.integers(0, 6, m)
        e = s + rng.integers(0, 4, m)
        o = np.lexsort((-e, s))
        s, e = s[o], e[o]
        nested = pf._nested(s, e)
        assert nested == (max(pf._stack_lanes(s.tolist(), e.tolist())) == 0), (s, e)
        seen[nested] += 1
    assert min(seen.values()) > 300


def test_pieces_cut_where_nothing_is_open():
    rng = np.random.default_rng(3)
    s = np.sort(rng.integers(0, 5000, 2000))
    e = s + rng.integers(0, 30, 2000)
    o = np.lexsort((-e, s))
    s, e = s[o], e[o]
    pieces = list(pf._pieces(s, e, size=50))
    assert pieces[0][0] == 0 and pieces[-1][1] == len(s) and len(pieces) > 3
    for (a, b), (c, _) in zip(pieces, pieces[1:]):
        assert b == c and e[:b].max() <= s[b]


def test_odd_inputs(tmp_path):
    """An empty trace, a kernel without a time (not drawn, no dangling flow), a span without a
    device on a one-device trace; the file gets an ordinary mode."""
    empty = Trace(source="empty", format="nsys", strings=Strings(), kernels=Kernels.empty())
    out = tmp_path / "empty.pftrace"
    stats = write_pftrace(empty, out)
    doc = replay(out)
    assert stats["slices"] == 0 and not doc["slices"] and doc["cleared"]
    write_chrome_json(empty, tmp_path / "empty.json")
    assert orjson.loads((tmp_path / "empty.json").read_bytes())["traceEvents"] == []

    t, _ = synthetic(40, devices=1, streams=1, replay_every=0, cpu=False)
    t.kernels.start[3] = -1
    out = tmp_path / "odd.pftrace"
    stats = write_pftrace(t, out, spans=[{"name": "all", "start": 0, "end": 10**9, "track": "run"}])
    assert stats["skipped"] == 1
    doc = replay(out)
    src, dst = flows(doc)
    assert len(dst) == 39 and set(dst) <= set(src) and len(src) == 39
    paths = track_paths(doc["tracks"])
    gpu = "GPU 0: NVIDIA H100 80GB HBM3"
    assert set(paths.values()) == {(gpu, gpu), (gpu, "run"), (gpu, "stream 7"),
                                   ("host process 4242", "host process 4242"), ("host process 4242", "thread 100")}
    from layerc.backends.outputs import _umask

    assert out.stat().st_mode & 0o777 == 0o666 & ~_umask()


def test_span_arguments_of_any_value_type_are_written(tmp_path):
    """Spans from the API may carry any values: bools, ints, floats as themselves, anything else
    (a list, a dict, None) as its text; alike (name, value) pairs share one encoding."""
    t, _ = synthetic(20, devices=1, streams=1, replay_every=0, cpu=False)
    args = {"flag": True, "n": -3, "x": 0.5, "dims": [1, 2], "meta": {"a": 1}, "none": None, "big": 1 << 70}
    spans = [{"name": f"s{i}", "start": 0, "end": 10**9, "track": "run", "args": args if i else {"n": -3}} for i in range(3)]
    spans += [Span("zero", 0, 10**9, "run", None, {"z": 0.0}), Span("negative zero", 0, 10**9, "", None, {"z": -0.0})]
    out = tmp_path / "args.pftrace"
    write_pftrace(t, out, spans=spans)
    trace = PbTrace()
    trace.ParseFromString(out.read_bytes())
    got = [[(d.name, d.WhichOneof("value")) for d in p.track_event.debug_annotations]
           for p in trace.packet if p.HasField("track_event") and any(d.name for d in p.track_event.debug_annotations)]
    assert got[0] == [("n", "int_value")]
    assert got[1] == got[2] == [("flag", "bool_value"), ("n", "int_value"), ("x", "double_value"), ("dims", "string_value"),
                                ("meta", "string_value"), ("none", "string_value"), ("big", "string_value")]
    values = {d.name: d for p in trace.packet for d in p.track_event.debug_annotations if d.name}
    assert values["dims"].string_value == "[1, 2]" and values["none"].string_value == "None" and values["n"].int_value == -3
    zeros = [str(d.double_value) for p in trace.packet for d in p.track_event.debug_annotations if d.name == "z"]
    assert zeros == ["0.0", "-0.0"]  # equal values that encode apart are not shared
    assert pf._span(Span("a", 0, 1, "", None, {}), 0).track == "spans"  # an empty track name means the default


def test_a_span_table_draws_what_its_spans_draw(tmp_path):
    """Spans given as columns (``SpanTable``: a long trace's layers, no object per span) draw the
    same slices, names, tracks and arguments as the same spans given one by one, in either
    format; mixed with loose spans, the tracks keep their order of first appearance."""
    from layerc.backends.perfetto import SpanTable

    t, _ = synthetic(300, devices=2, streams=2, replay_every=0, cpu=True)
    k = t.kernels
    rng = np.random.default_rng(5)
    picks = np.sort(rng.choice(len(k), 40, replace=False))
    types = ["MLA_MOE", "ATTN"]
    loose = [Span("whole run", int(k.start.min()), int(k.end.max()), "run")]
    spans = [Span(f"layer {i % 7} {types[i % 2]}", int(k.start[j]), int(k.end[j]), "layers", int(k.device[j]),
                  {"layer": i % 7, "type": types[i % 2], "kernels": 1, "ratio": i / 3})
             for i, j in enumerate(picks.tolist())]
    names = sorted({s.name for s in spans})
    table = SpanTable("layers", names, np.array([names.index(s.name) for s in spans]), k.start[picks], k.end[picks],
                      k.device[picks].astype(np.int64), {
                          "layer": (list(range(7)), np.arange(40) % 7), "type": (types, np.arange(40) % 2),
                          "kernels": ([1], np.zeros(40, np.int64)), "ratio": ([i / 3 for i in range(40)], np.arange(40))})
    a, b = tmp_path / "objects.pftrace", tmp_path / "table.pftrace"
    write_pftrace(t, a, spans=loose + spans)
    stats = write_pftrace(t, b, spans=[*loose, table])
    paths = track_paths(replay(a)["tracks"])

    def drawn(path: Path) -> list:
        return [(s["ts"], s["dur"], s["name"], paths[s["track"]], s["depth"], s["args"], s["flows"], s["ends_flows"])
                for s in replay(path)["slices"]]
    assert drawn(a) == drawn(b) and stats["slices"] > 40  # (names are interned in another order)
    ja, jb = tmp_path / "objects.json", tmp_path / "table.json"
    write_chrome_json(t, ja, spans=loose + spans)
    write_chrome_json(t, jb, spans=[*loose, table])
    assert ja.read_bytes() == jb.read_bytes()
    doc = replay(b)
    layers = [s for s in doc["slices"] if s["name"].startswith("layer ")]
    assert len(layers) == 40 and {s["args"]["type"] for s in layers} == set(types)


def test_a_span_table_that_does_not_add_up_is_refused(tmp_path):
    from layerc.backends.perfetto import SpanTable
    from layerc.ir.diagnostics import LayercError

    t, _ = synthetic(20, devices=1, streams=1, replay_every=0, cpu=False)
    one = np.zeros(1, np.int64)
    bad = [SpanTable("x", ["a"], one, one, one, np.zeros(2, np.int64)),  # columns of two lengths
           SpanTable("x", ["a"], one + 1, one, one, one),  # a name outside the names
           SpanTable("", ["a"], one, one, one, one),  # no track
           SpanTable("x", ["a"], one, one, one, one, {"k": ([], one)})]  # an argument outside its values
    for table in bad:
        with pytest.raises(LayercError):
            write_pftrace(t, tmp_path / "bad.pftrace", spans=[table])
    assert not (tmp_path / "bad.pftrace").exists()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 20), st.integers(0, 5)), max_size=60))
def test_rows_are_ordered_as_the_lexsort_orders_them(rows):
    """The layout's order of rows (group, start, longer first, then row order) is np.lexsort's,
    by its fast path (rows in start order, few groups) or not."""
    g = np.array([r[0] for r in rows], np.int64)
    s = np.array([r[1] for r in rows], np.int64)
    e = s + np.array([r[2] for r in rows], np.int64)
    for order in (np.arange(len(rows)), np.argsort(s, kind="stable")):
        gg, ss, ee = g[order], s[order], e[order]
        want = np.lexsort((-ee, ss, gg))
        order, *cols = pf._by_group_start(gg, ss, ee)
        assert np.array_equal(order, want)
        assert all(np.array_equal(c, x[want]) for c, x in zip(cols, (gg, ss, ee)))


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 3), st.sampled_from([(-1, 5), (-(1 << 40), 1 << 40), (-(1 << 63), (1 << 63) - 1)]), st.data())
def test_distinct_rows_are_numpy_s(width, bounds, data):
    """``_unique_rows`` gives ``np.unique(axis=0)``'s rows and inverse, whether the columns fit one
    packed key (grids, devices and streams) or span too wide a range together."""
    n = data.draw(st.integers(1, 40))
    cols = [np.array(data.draw(st.lists(st.integers(*bounds), min_size=n, max_size=n)), np.int64) for _ in range(width)]
    rows, key = pf._unique_rows(*cols)
    want, inverse = np.unique(np.stack(cols, 1), axis=0, return_inverse=True)
    assert rows == [tuple(r) for r in want.tolist()]
    assert key.tolist() == inverse.reshape(-1).tolist()
