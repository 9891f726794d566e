"""A trace IR as a Perfetto timeline: TrackEvent protobuf (``.pftrace``) or legacy Chrome JSON.

``write_pftrace(trace, path, spans=None, layer_of=None)`` streams TracePackets; the
``write_chrome_json`` twin writes the same slices, tracks and flows as Chrome-trace JSON (Perfetto
calls that format legacy: no interning, µs timestamps; keep it for tools that want JSON).

Layout (both formats):

* one process per device, ``GPU 0: NVIDIA H100 80GB HBM3`` (``CPU 0: ...`` for a layer profiled
  on the host: ``Trace.device_kinds``), with child tracks: first one per kind of parent span
  (``spans=``: ``layers``, ``graph replays``... one track each, so a layer span and a replay span
  never have to nest in one another), then ``gpu annotations`` (Kineto's
  ``gpu_user_annotation``), then one track per stream (``stream 7``) holding kernels, memcpys and
  memsets. Lined up one under the other, a kernel sits under its layer and replay spans.
* one process per host pid, ``host process 1234``, a thread track per tid holding runtime/driver
  calls, CPU ops, NVTX/user annotations and ``nn.Module`` spans, nested by time.
* a flow from every launch to each kernel (and memcpy/memset) it launched: one flow id per kernel,
  listed in the launch's ``flow_ids`` and ended by the kernel's ``terminating_flow_ids`` (a flow
  cannot fork, so a graph launch starts one flow per kernel of its replay).

Slices on one track must nest. Where a track's intervals overlap without nesting (clock jitter
between kernels of one stream, a CPU op outliving its caller), the extra ones go to overflow
tracks: a stream's or span kind's has the same name beside it (the Perfetto UI draws same-named
sibling tracks as one), a thread's is ``thread N (overlap k)`` under the thread. Memcpy/memset
flows need their launch's correlation id to be unambiguous: they are drawn when all launches come
from one process. Rows without a start time (-1) are left out (counted in ``skipped``).

Protobuf details: one ``trusted_packet_sequence_id``; event names, debug-annotation names and
repeated string values (full kernel names, grid/block, Input Dims) are interned on first use
(``interned_data`` + ``*_iid``, ``sequence_flags``; a batch's new strings in a packet before it);
timestamps are the IR's int64 ns. Events are written in time order (trace_processor sorts by
timestamp and keeps file order among equal ones, so ties are ordered here: ENDs before BEGINs,
inner ENDs and outer BEGINs first). Packets are encoded ``PB_BATCH`` events at a time from the
IR's columns (``pb_columns``: a field is a few numpy operations per batch, not a protobuf object
per event; the bytes are those the protobuf library writes), the BEGINs of each kind of row and
all ENDs as a group each, and put back in time order as they are written, by a second thread,
while the next batch is encoded (concatenated ``Trace`` messages are one trace). Parent spans
come as objects or, many at once, as columns (``SpanTable``); their annotations (any names and
value types) are encoded by the protobuf library once per distinct (name, value). Memory: each
slice's track and rank (int32) and whether it ends a flow, each launch's flows (int32), the event
index of one time window (``WINDOW`` events) and two batches; names, grids and blocks are looked
up a batch at a time.

Both writers write a temporary file beside ``path`` and rename it over ``path`` when complete; a
path ending in ``.gz`` is gzip-compressed (the Perfetto UI opens gzipped traces).
"""

from __future__ import annotations

import os
import struct
import sys
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import numpy as np

from layerc.ir.diagnostics import LayercError
from layerc.backends.outputs import atomic_path, open_staged
from layerc.backends.pb_columns import Rows, join
from layerc.ir.trace import ANNOTATION_GPU, LAUNCH_DRIVER, MEMSET, Trace, ascending, distinct, group_order, link, ragged, unique, unique_inverse

#: The one packet sequence every packet is written on.
SEQUENCE_ID = 0x6C63
#: Slice events per Chrome JSON batch ...
BATCH = 8192
#: ... and per encoded ``Trace`` batch (a column operation's cost is spread over this many packets).
PB_BATCH = 1 << 15
#: Slices from which packets are put together by Arrow (its import, about 0.1 s, repaid)
_ARROW_ROWS = 1 << 18
#: Events sorted at a time (a time window's worth): bounds the event index's memory.
WINDOW = 1 << 19
#: First track uuid (uuids are global in a trace: a prefix keeps ours apart from others' when merged).
_UUID_BASE = 0x6C63 << 40

_SEQ_CLEARED, _SEQ_NEEDS = 1, 2
_BEGIN, _END, _COUNTER = 1, 2, 4  # TrackEvent.Type
_END_GROUP = 7  # the group of END events of every kind (BEGINs are grouped by kind)
_EXPLICIT = 3  # TrackDescriptor.ChildTracksOrdering.EXPLICIT

# event kinds (3 bits in the packed event code)
K_KERNEL, K_MEMOP, K_SPAN, K_LAUNCH, K_CPU_OP, K_ANNOTATION, K_MODULE = range(7)

#: debug-annotation names, interned once (iid = position + 1)
ARG_NAMES = (
    "full name", "grid", "block", "registers per thread", "shared memory", "correlation", "graph id",
    "graph node id", "External id", "layer", "bytes", "Input Dims", "Sequence number",
)
_ARG = {name: i + 1 for i, name in enumerate(ARG_NAMES)}
_A_CORRELATION, _A_NODE, _A_EXTERNAL, _A_LAYER = (_ARG[k] for k in ("correlation", "graph node id", "External id", "layer"))



# -- public API ---------------------------------------------------------------------------------
@dataclass(eq=False)
class Counter:
    """A counter track under a device (``layer TFLOP/s``): ``value`` from each ``start`` to its
    ``end`` (0 between). Written after the slices (trace_processor sorts by time), in time order."""

    name: str
    unit: str
    device: int
    start: np.ndarray
    end: np.ndarray
    value: np.ndarray


def write_pftrace(trace: Trace, path: str | os.PathLike, spans: Iterable[Any] | None = None,
                  layer_of: np.ndarray | None = None, counters: Iterable[Counter] = ()) -> dict[str, int]:
    """Write ``trace`` (and ``spans``, each kernel's ``layer_of`` index, and ``counters``) as a
    Perfetto protobuf trace; returns counts (``packets``, ``slices``, ``flows``, ``tracks``,
    ``counters``, ``bytes``)."""
    try:
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    except ImportError:  # pragma: no cover - the dependency is declared, but say what to install
        raise LayercError("writing a .pftrace needs the 'perfetto' package (pip install perfetto)") from None
    layout = _Layout(trace, spans, layer_of)
    with atomic_path(path) as tmp:
        with open_staged(tmp, path, "wb") as f:
            writer = _ProtoWriter(pb, layout, f)
            stats = writer.write()
            stats["counters"] = writer.counters(list(counters))
        stats["bytes"] = os.path.getsize(tmp)
    return stats


def write_chrome_json(trace: Trace, path: str | os.PathLike, spans: Iterable[Any] | None = None,
                      layer_of: np.ndarray | None = None) -> dict[str, int]:
    """The same timeline as Chrome-trace JSON (``X`` slices, ``M`` names, ``s``/``f`` flows).
    Timestamps are µs; when ns timestamps are too large for µs doubles to keep every ns, they are
    written relative to ``baseTimeNanoseconds`` (as Kineto does)."""
    layout = _Layout(trace, spans, layer_of)
    with atomic_path(path) as tmp:
        with open_staged(tmp, path, "wb") as f:
            stats = _JsonWriter(layout, f).write()
        stats["bytes"] = os.path.getsize(tmp)
    return stats


@dataclass
class Span:
    """A parent span drawn above kernels (a layer, a graph replay...); dicts with these keys do too."""

    name: str
    start: int
    end: int
    track: str = "spans"
    device: int | None = None
    args: dict = field(default_factory=dict)


@dataclass
class SpanTable:
    """Many parent spans of one track, as columns (a long trace's layers: no object per span).
    Span ``i`` is named ``names[name[i]]``, runs from ``start[i]`` to ``end[i]`` on device
    ``device[i]`` (-1: none given), and has the argument ``key`` valued ``values[index[i]]``
    for each ``key: (values, index)`` of ``args`` where ``index[i] >= 0``."""

    track: str
    names: list[str]
    name: np.ndarray
    start: np.ndarray
    end: np.ndarray
    device: np.ndarray
    args: dict[str, tuple[list, np.ndarray]] = field(default_factory=dict)


@dataclass
class _SpanColumns:
    """Every parent span, as columns: its name (``texts[name]``), its track kind
    (``kinds[kind]``), its device (-1: none), and its arguments, a column per position in the
    span's own order: ``(pairs, index)``, span ``i``'s being ``pairs[index[i]]`` (a key and a
    value) where ``index[i] >= 0``."""

    start: np.ndarray
    end: np.ndarray
    texts: list[str]
    name: np.ndarray
    kinds: list[str]
    kind: np.ndarray
    device: np.ndarray
    args: list[tuple[list[tuple[str, Any]], np.ndarray]]

    def args_of(self, i: int) -> dict:
        return dict(pairs[index[i]] for pairs, index in self.args if index[i] >= 0)


def _span_columns(spans: Iterable[Any] | None) -> _SpanColumns:
    """``spans`` (``Span`` objects, dicts with their keys, ``SpanTable`` objects) as one set of columns."""
    out = _SpanBuilder()
    loose: list[Span] = []
    for i, s in enumerate(spans or ()):
        if isinstance(s, SpanTable):
            out.add_spans(loose)
            loose = []
            out.add_table(_checked_table(s, i))
        else:
            loose.append(_span(s, i))
    out.add_spans(loose)
    return out.columns()


class _SpanBuilder:
    """Span columns gathered a table (or a run of ``Span`` objects) at a time."""

    def __init__(self) -> None:
        self.texts: dict[str, int] = {}
        self.kinds: dict[str, int] = {}
        self.cols: dict[str, list[np.ndarray]] = {c: [] for c in ("start", "end", "name", "kind", "device")}
        self.pairs: list[list[tuple[str, Any]]] = []  # per argument position
        self.index: list[list[tuple[int, np.ndarray]]] = []  # per position: (chunk, index) of the chunks that have it
        self.chunks = 0

    def _chunk(self, start, end, name, kind, device, args: list[tuple[list[tuple[str, Any]], np.ndarray]]) -> None:
        for c, col in zip(("start", "end", "name", "kind", "device"), (start, end, name, kind, device)):
            self.cols[c].append(np.asarray(col, np.int64).reshape(-1))
        for j, (pairs, idx) in enumerate(args):
            if j == len(self.pairs):
                self.pairs.append([])
                self.index.append([])
            idx = np.asarray(idx, np.int64)
            self.index[j].append((self.chunks, np.where(idx >= 0, idx + len(self.pairs[j]), -1)))
            self.pairs[j].extend(pairs)
        self.chunks += 1

    def add_spans(self, spans: list[Span]) -> None:
        if not spans:
            return
        known: dict[tuple, int] = {}
        pairs: list[tuple[str, Any]] = []
        index = np.full((max(len(sp.args) for sp in spans), len(spans)), -1, np.int64)
        for i, sp in enumerate(spans):
            for j, (key, value) in enumerate(sp.args.items()):
                v = _arg_value(value)  # (a list, a dict... would not serve as a key)
                token = (str(key), type(v), struct.pack("<d", v) if type(v) is float else v)  # (-0.0 is not 0.0)
                at = known.get(token)
                if at is None:
                    at = known[token] = len(pairs)
                    pairs.append((str(key), value))
                index[j, i] = at
        self._chunk([x.start for x in spans], [x.end for x in spans], [self.texts.setdefault(x.name, len(self.texts)) for x in spans],
                    [self.kinds.setdefault(x.track, len(self.kinds)) for x in spans],
                    [-1 if x.device is None else x.device for x in spans], [(pairs, idx) for idx in index])

    def add_table(self, t: SpanTable) -> None:
        text = np.array([self.texts.setdefault(x, len(self.texts)) for x in t.names], np.int64)
        kind = self.kinds.setdefault(t.track, len(self.kinds))
        self._chunk(t.start, t.end, text[t.name], np.full(len(t.name), kind), t.device,
                    [([(str(key), v) for v in vals], idx) for key, (vals, idx) in t.args.items()])

    def columns(self) -> _SpanColumns:
        def cat(parts: list[np.ndarray]) -> np.ndarray:
            return np.concatenate(parts) if parts else np.zeros(0, np.int64)

        sizes = [len(c) for c in self.cols["start"]]
        args = []
        for pairs, chunks in zip(self.pairs, self.index):
            parts = [np.full(n, -1, np.int64) for n in sizes]
            for c, idx in chunks:
                parts[c] = idx
            args.append((pairs, cat(parts)))
        col = {k: cat(v) for k, v in self.cols.items()}
        return _SpanColumns(col["start"], col["end"], list(self.texts), col["name"], list(self.kinds), col["kind"], col["device"], args)


def _checked_table(t: SpanTable, i: int) -> SpanTable:
    """A span table whose columns agree (else a LayercError naming it); devices below 0: none."""
    n = len(t.name)
    cols = [np.asarray(x) for x in (t.name, t.start, t.end, t.device)]
    if any(c.shape != (n,) or not np.issubdtype(c.dtype, np.integer) for c in cols) or not str(t.track):
        raise LayercError(f"span table {i} ({t.track!r}) needs a track and integer name, start, end and device columns of one length")
    if n and (int(cols[0].min()) < 0 or int(cols[0].max()) >= len(t.names)):
        raise LayercError(f"span table {i} ({t.track!r}) names a span outside its {len(t.names)} names")
    for key, (vals, idx) in t.args.items():
        idx = np.asarray(idx)
        if idx.shape != (n,) or not np.issubdtype(idx.dtype, np.integer) or (n and int(idx.max()) >= len(vals)):
            raise LayercError(f"span table {i} ({t.track!r}): argument {key!r} needs an index per span into its {len(vals)} values")
    cols[3] = np.where(cols[3] < 0, -1, cols[3])
    name, start, end, device = cols
    return SpanTable(str(t.track), [str(x) for x in t.names], name, start, end, device, dict(t.args))


# -- names ---------------------------------------------------------------------------------------
class _Names:
    """Interned ids for event names and string values: a trace string id ``s`` is iid ``s + 1``;
    strings the trace lacks (track and span names, grid texts) follow."""

    def __init__(self, trace: Trace):
        self.values = trace.strings.values
        self.base = len(self.values) + 1
        self.extra: dict[str, int] = {}
        self.extra_values: list[str] = []

    def iid(self, text: str) -> int:
        i = self.extra.get(text)
        if i is None:
            i = self.extra[text] = self.base + len(self.extra_values)
            self.extra_values.append(text)
        return i

    def from_ids(self, ids: np.ndarray, fallback: str) -> np.ndarray:
        """iids for a string-id column; -1 (no string) becomes ``fallback``."""
        out = ids.astype(np.int32) + 1
        if (ids < 0).any():
            out[ids < 0] = self.iid(fallback)
        return out

    def text(self, iid: int) -> str:
        return self.values[iid - 1] if iid < self.base else self.extra_values[iid - self.base]

    def __len__(self) -> int:
        return self.base + len(self.extra_values)


# -- layout: tracks and which row goes on which ----------------------------------------------------
@dataclass
class _Track:
    uuid: int
    name: str
    parent: int | None = None  #: parent track uuid
    process: tuple[int, str] | None = None  #: (pid, process name): a process track
    thread: tuple[int, int, str] | None = None  #: (pid, tid, name): a thread track
    rank: int = 0  #: order among its siblings
    ordered: bool = False  #: children ordered by ``rank``
    json_pid: int = 0
    json_tid: int | None = None  #: None for a process track


@dataclass
class _Rows:
    """One kind of slice: times, the track of each row, its rank among the rows of its track
    (by start, longer first: the order of BEGINs), its name iid."""

    kind: int
    start: np.ndarray
    end: np.ndarray
    track: np.ndarray = None  # type: ignore[assignment]
    rank: np.ndarray = None  # type: ignore[assignment]
    name: np.ndarray = None  # type: ignore[assignment]

    def __len__(self) -> int:
        return len(self.start)


class _Layout:
    def __init__(self, trace: Trace, spans: Iterable[Any] | None, layer_of: np.ndarray | None):
        self.trace = trace
        self.names = _Names(trace)
        self.tracks: list[_Track] = []
        self.layer_of = _check_layer_of(trace, layer_of)
        self.spans = _span_columns(spans)
        self.rows: dict[int, _Rows] = {}
        self.skipped = 0
        self._cpu_rows(trace)
        self._gpu_rows(trace)
        self._tracks(trace)
        self._flows(trace)

    # rows ---------------------------------------------------------------------------------------
    def _valid(self, kind: int, start: np.ndarray | list[int], end: np.ndarray | list[int]) -> _Rows:
        begins = np.asarray(start, np.int64)
        ends = np.asarray(end, np.int64)
        if (ends < begins).any():  # (a copy only where some end comes before its start)
            ends = np.maximum(ends, begins)
        self.skipped += int((begins < 0).sum())
        return _Rows(kind, begins, ends)

    def _cpu_rows(self, t: Trace) -> None:
        gpu_ann = t.annotations.kind == ANNOTATION_GPU
        self.gpu_ann = np.nonzero(gpu_ann)[0]
        self.cpu_ann = np.nonzero(~gpu_ann)[0]
        self.rows[K_LAUNCH] = self._valid(K_LAUNCH, t.launches.start, t.launches.end)
        self.rows[K_CPU_OP] = self._valid(K_CPU_OP, t.cpu_ops.start, t.cpu_ops.end)
        self.rows[K_MODULE] = self._valid(K_MODULE, t.modules.start, t.modules.end)
        ann = t.annotations
        self.rows[K_ANNOTATION] = self._valid(K_ANNOTATION, ann.start, ann.end)
        n = self.names
        self.rows[K_LAUNCH].name = n.from_ids(t.launches.name, "launch")
        self.rows[K_CPU_OP].name = n.from_ids(t.cpu_ops.name, "cpu op")
        self.rows[K_MODULE].name = n.from_ids(t.modules.name, "module")
        self.rows[K_ANNOTATION].name = n.from_ids(ann.name, "annotation")

    def _gpu_rows(self, t: Trace) -> None:
        k, m, n = t.kernels, t.memops, self.names
        self.rows[K_KERNEL] = self._valid(K_KERNEL, k.start, k.end)
        self.rows[K_KERNEL].name = n.from_ids(np.where(k.short >= 0, k.short, k.name), "kernel")
        self.rows[K_MEMOP] = self._valid(K_MEMOP, m.start, m.end)
        memop_names = np.where(m.kind == MEMSET, n.iid("Memset"), n.iid("Memcpy"))
        self.rows[K_MEMOP].name = np.where(m.name >= 0, m.name.astype(np.int64) + 1, memop_names)
        s = self.spans
        self.rows[K_SPAN] = self._valid(K_SPAN, s.start, s.end)
        self.rows[K_SPAN].name = np.array([n.iid(x) for x in s.texts], np.int64)[s.name]

    # tracks -------------------------------------------------------------------------------------
    def _new(self, **kw) -> _Track:
        tr = _Track(uuid=_UUID_BASE + len(self.tracks) + 1, **kw)
        self.tracks.append(tr)
        return tr

    def _tracks(self, t: Trace) -> None:
        k, m, ann = t.kernels, t.memops, t.annotations
        cpu_pids = set()
        for table, idx in ((t.launches, None), (t.cpu_ops, None), (t.modules, None), (ann, self.cpu_ann)):
            pid = table.pid if idx is None else table.pid[idx]
            cpu_pids.update(unique(pid).tolist())
        devices = set(unique(k.device).tolist()) | set(unique(m.device).tolist())
        devices |= set(unique(ann.pid[self.gpu_ann]).tolist())
        sp_dev = self.spans.device  # -1: none given
        span_devices = set(unique(sp_dev).tolist())
        if -1 in span_devices:  # a span without a device: on the only device, else on its own
            if len(devices | (span_devices - {-1})) == 1:
                sp_dev[sp_dev == -1] = next(iter(devices | (span_devices - {-1})))
            span_devices = set(unique(sp_dev).tolist())
        devices |= {None if d == -1 else d for d in span_devices}
        taken = set(cpu_pids)
        next_pid = max([p for p in taken | {d for d in devices if d is not None} if isinstance(p, int)] + [0]) + 1

        def fresh() -> int:
            nonlocal next_pid
            while next_pid in taken:
                next_pid += 1
            taken.add(next_pid)
            return next_pid

        # devices: process track, then span tracks, gpu annotations, streams
        dev_track: dict[Any, _Track] = {}
        for d in sorted(devices, key=lambda x: (x is None, x if x is not None else 0)):
            dev_pid = d if (d is not None and 0 <= d < 1 << 31 and d not in taken) else fresh()
            taken.add(dev_pid)
            label = _device_label(t, d, devices)
            dev_track[d] = self._new(name=label, process=(_i32(dev_pid), label), ordered=True, json_pid=dev_pid)
        self.device_tracks = dev_track
        tids: dict[int, set] = {tr.json_pid: set() for tr in dev_track.values()}
        for d, s in set(zip(k.device.tolist(), k.stream.tolist())) | set(zip(m.device.tolist(), m.stream.tolist())):
            tids[dev_track[d].json_pid].add(s)
        rank = 0

        def child(parent: _Track, name: str, tid: int | None = None) -> _Track:
            """A named track under a device; ``tid`` its JSON thread id (a fresh one if None)."""
            nonlocal rank
            used = tids.setdefault(parent.json_pid, set())
            if tid is None:
                tid = max(used | {0}) + 1
            used.add(tid)
            rank += 1
            return self._new(name=name, parent=parent.uuid, rank=rank, json_pid=parent.json_pid, json_tid=tid)

        # spans, one track kind at a time in order of first appearance
        sp = self.rows[K_SPAN]
        kinds = self.spans.kinds
        dev_list = list(dev_track)
        dev_pos = {d: i for i, d in enumerate(dev_list)}
        ids, inverse = unique_inverse(sp_dev)  # (a span's -1 is no device: None, never a kernel's -1)
        span_dev = np.array([dev_pos[None if d == -1 else d] for d in ids.tolist()], np.int64)[inverse]
        sp.track, sp.rank = self._place(
            sp, span_dev * max(len(kinds), 1) + self.spans.kind,
            lambda g, lane: child(dev_track[dev_list[g // max(len(kinds), 1)]], kinds[g % max(len(kinds), 1)]))

        # gpu annotations, one track per device
        ar = self.rows[K_ANNOTATION]
        ar.track = np.zeros(len(ar), np.int32)
        ar.rank = np.zeros(len(ar), np.int32)
        if len(self.gpu_ann):
            sub = _Rows(K_ANNOTATION, ar.start[self.gpu_ann], ar.end[self.gpu_ann])
            dev = ann.pid[self.gpu_ann]
            ar.track[self.gpu_ann], ar.rank[self.gpu_ann] = self._place(
                sub, dev, lambda g, lane: child(dev_track[g], "gpu annotations"))

        # streams: kernels and memops together
        kr, mr = self.rows[K_KERNEL], self.rows[K_MEMOP]
        both = _Rows(-1, _joined(kr.start, mr.start), _joined(kr.end, mr.end))
        keys, key = _unique_rows(_joined(k.device, m.device).astype(np.int64), _joined(k.stream, m.stream))

        def stream_track(g: int, lane: int) -> _Track:
            d, s = int(keys[g][0]), int(keys[g][1])
            return child(dev_track[d], f"stream {s}" if s >= 0 else "stream ?", s if lane == 0 else None)

        placed, ranks = self._place(both, key, stream_track)
        kr.track, kr.rank = placed[: len(kr)], ranks[: len(kr)]
        mr.track, mr.rank = placed[len(kr):], ranks[len(kr):]

        # host: a process per pid, a thread track per tid
        cpu = [(K_LAUNCH, t.launches.pid, t.launches.tid, None), (K_CPU_OP, t.cpu_ops.pid, t.cpu_ops.tid, None),
               (K_MODULE, t.modules.pid, t.modules.tid, None), (K_ANNOTATION, ann.pid, ann.tid, self.cpu_ann)]
        starts, ends, pids, tids_, owners = [], [], [], [], []
        for kind, pid, tid, idx in cpu:
            rows = self.rows[kind]
            sel = np.arange(len(rows)) if idx is None else idx
            starts.append(rows.start[sel])
            ends.append(rows.end[sel])
            pids.append(pid[sel])
            tids_.append(tid[sel])
            owners.append((kind, sel))
        allrows = _Rows(-1, np.concatenate(starts), np.concatenate(ends))
        threads, tkey = _unique_rows(np.concatenate(pids).astype(np.int64), np.concatenate(tids_).astype(np.int64))
        proc_track: dict[int, _Track] = {}
        thread_track: dict[int, _Track] = {}
        host_tids: dict[int, set] = {}
        for p, tid in threads:
            host_tids.setdefault(p, set()).add(tid)

        def thread_track_for(g: int, lane: int) -> _Track:
            p, tid = (int(x) for x in threads[g])
            if p not in proc_track:
                label = f"host process {p}"
                proc_track[p] = self._new(name=label, process=(_i32(p), label), json_pid=p)
            if lane == 0:
                tr = self._new(name=f"thread {tid}", parent=proc_track[p].uuid, thread=(_i32(p), _i32(tid), f"thread {tid}"),
                               json_pid=p, json_tid=tid)
                thread_track[g] = tr
                return tr
            main = thread_track.get(g) or thread_track_for(g, 0)
            used = host_tids[p]
            jt = max(used) + 1
            used.add(jt)
            return self._new(name=f"thread {tid} (overlap {lane})", parent=main.uuid, json_pid=p, json_tid=jt)

        placed, ranks = self._place(allrows, tkey, thread_track_for)
        at = 0
        for kind, sel in owners:
            rows = self.rows[kind]
            if rows.track is None:
                rows.track = np.zeros(len(rows), np.int32)
                rows.rank = np.zeros(len(rows), np.int32)
            rows.track[sel] = placed[at: at + len(sel)]
            rows.rank[sel] = ranks[at: at + len(sel)]
            at += len(sel)

    def _place(self, rows: _Rows, group: np.ndarray, make) -> tuple[np.ndarray, np.ndarray]:
        """Each row's track (its place in ``tracks``) and rank, as int32: rows of one group share its
        track where they nest; rows that overlap without nesting go to the group's overflow lanes.
        ``make(group, lane)`` creates a lane's track."""
        n = len(rows)
        track = np.zeros(n, np.int32)
        rank = np.zeros(n, np.int32)
        if n == 0:
            return track, rank
        group = np.asarray(group, np.int64)
        order, g, s, e = _by_group_start(group, rows.start, rows.end)
        rank[order] = np.arange(n, dtype=np.int32)
        bounds = np.concatenate([[0], np.nonzero(g[1:] != g[:-1])[0] + 1, [n]])
        first = g[bounds[:-1]].tolist()  # each run's group
        del g
        flat = np.ones(n, bool)  # the next row starts after this one ends, within the group
        flat[:-1] = s[1:] >= e[:-1]
        flat[bounds[1:] - 1] = True
        lanes: dict[tuple[int, int], int] = {}
        for a, b, gid in zip(bounds[:-1].tolist(), bounds[1:].tolist(), first):
            ln = np.zeros(b - a, np.int64)
            if not flat[a:b].all():
                for c, d in _pieces(s[a:b], e[a:b]):
                    if not _nested(s[a + c: a + d], e[a + c: a + d]):
                        ln[c:d] = _stack_lanes(s[a + c: a + d].tolist(), e[a + c: a + d].tolist())
            uu = np.empty(int(ln.max()) + 1, np.int32)
            for lane in range(len(uu)):
                if (gid, lane) not in lanes:
                    lanes[(gid, lane)] = make(gid, lane).uuid - (_UUID_BASE + 1)
                uu[lane] = lanes[(gid, lane)]
            track[order[a:b]] = uu[ln]
        return track, rank

    # flows and args -----------------------------------------------------------------------------
    def _flows(self, t: Trace) -> None:
        """Flow ids: kernel ``i`` is ``i + 1``, memop ``j`` is ``n_kernels + j + 1`` (where it has
        one: ``kernel_flows``, ``memop_flows``); each launch lists the flow ids of what it launched
        (CSR: ``launch_flows[offsets[i]:offsets[i+1]]``, int32)."""
        nk = len(t.kernels)
        kl = t.kernel_launch() if len(t.launches) else np.full(nk, -1, np.int64)
        ml = np.full(len(t.memops), -1, np.int64)
        if len(t.launches) and len(t.memops) and len(unique(t.launches.pid)) == 1:
            ml = link(t.memops.correlation, t.launches.correlation)
        if len(t.launches):  # rows without a time are not drawn: no flows either
            drawn = self.rows[K_LAUNCH].start >= 0
            kl = np.where((kl >= 0) & (self.rows[K_KERNEL].start >= 0) & drawn[np.maximum(kl, 0)], kl, -1)
            ml = np.where((ml >= 0) & (self.rows[K_MEMOP].start >= 0) & drawn[np.maximum(ml, 0)], ml, -1)
        self.kernel_flows, self.memop_flows = kl >= 0, ml >= 0
        launch = _joined(kl, ml)
        del kl, ml
        keep = np.flatnonzero(launch >= 0)  # (flow id: position + 1)
        launch = launch[keep]
        start = _joined(self.rows[K_KERNEL].start, self.rows[K_MEMOP].start)[keep]
        # each launch's flows in start order (ties in row order): where the rows come in start
        # order (kernels read in start order, no memops), a stable sort by launch alone
        order = np.argsort(launch, kind="stable") if ascending(start) else np.lexsort((start, launch))
        del start
        self.launch_flows = (keep[order] + 1).astype(np.int32)
        counts = np.bincount(launch, minlength=len(t.launches)) if len(launch) else np.zeros(len(t.launches), np.int64)
        self.launch_offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.flows = len(keep)

    def kernel_flow(self, b: np.ndarray) -> np.ndarray:
        """Flow ids of kernels ``b`` (0: none)."""
        return np.where(self.kernel_flows[b], b + 1, 0)

    def memop_flow(self, b: np.ndarray) -> np.ndarray:
        """Flow ids of memops ``b`` (0: none)."""
        return np.where(self.memop_flows[b], b + len(self.kernel_flows) + 1, 0)

    def grid(self, b: np.ndarray) -> np.ndarray:
        """iids of kernels ``b``'s grid texts (``[x, y, z]``, interned once per distinct triple; 0: none)."""
        k = self.trace.kernels
        return _triple_iids(self.names, k.grid_x[b], k.grid_y[b], k.grid_z[b])

    def block(self, b: np.ndarray) -> np.ndarray:
        """The same for their blocks."""
        k = self.trace.kernels
        return _triple_iids(self.names, k.block_x[b], k.block_y[b], k.block_z[b])

    def full(self, b: np.ndarray) -> np.ndarray:
        """iids of kernels ``b``'s full names (0: none); made per batch, not kept per kernel."""
        name = self.trace.kernels.name[b]
        return np.where(name >= 0, name + 1, 0).astype(np.int32)

    def shared(self, b: np.ndarray) -> np.ndarray:
        """Kernels ``b``'s static + dynamic shared memory (-1: neither known)."""
        k = self.trace.kernels
        st, dy = k.shared_static[b], k.shared_dynamic[b]
        return np.where((st >= 0) | (dy >= 0), np.maximum(st, 0) + np.maximum(dy, 0), -1).astype(np.int32)

    # event order ------------------------------------------------------------------------------
    def events(self, ends: bool = True, window: int | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Every slice's BEGIN (and END) event as (timestamps, codes) arrays, in time order, about
        ``window`` events at a time (windows split at timestamps, so equal ones stay together).
        Ties are broken by ``_event_keys``. A code is ``row << 4 | kind << 1 | is_end``."""
        window = window or WINDOW
        parts = [(kind, rows) for kind, rows in self.rows.items() if len(rows)]
        total = sum(len(rows) for _, rows in parts) * (2 if ends else 1)
        cuts: list = []
        if total > window:
            step = max(1, total // (64 * (total // window)))
            sample = np.sort(np.concatenate([rows.start[::step] for _, rows in parts]))
            at = np.linspace(0, len(sample) - 1, total // window + 1)[1:-1].astype(np.int64)
            cuts = unique(sample[at]).tolist()
        edges = [None] + cuts + [None]
        for lo, hi in zip(edges[:-1], edges[1:]):
            ts, codes = self._window(parts, lo, hi, ends)
            if len(ts):
                yield ts, codes

    @staticmethod
    def _window(parts, lo, hi, ends: bool) -> tuple[np.ndarray, np.ndarray]:
        ts, keys, codes = [], [], []

        def within(x: np.ndarray) -> np.ndarray:
            m = x >= 0 if lo is None else x >= lo
            return m if hi is None else m & (x < hi)

        for kind, rows in parts:
            valid = rows.start >= 0
            for is_end in ((0, 1) if ends else (0,)):
                col = rows.end if is_end else rows.start
                idx = np.nonzero(valid & within(col))[0].astype(np.int64)
                if not len(idx):
                    continue
                ts.append(col[idx])
                codes.append(idx << 4 | kind << 1 | is_end)
                keys.append(_event_keys(rows.rank[idx].astype(np.int64), (rows.end[idx] == rows.start[idx]) if is_end else None))
        if not ts:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        ts_a, key_a, code_a = np.concatenate(ts), np.concatenate(keys), np.concatenate(codes)
        del ts, keys, codes
        order = np.lexsort((key_a, ts_a))
        return ts_a[order], code_a[order]


def _joined(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A kernel column and its memop twin one after the other: the kernels' own where a trace
    has no memops (no copy of a column per kernel)."""
    return np.concatenate([a, b]) if len(b) else a


def _by_group_start(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, ...]:
    """The order of rows by (group, start, longer first), ties in row order: ``np.lexsort``'s;
    and the group, start and end columns in that order. Rows mostly come in start order (a
    trace's kernels, then its memcpys), and groups are few: a stable sort by start (runs merged)
    then by group (``group_order``) give it unless two rows of a group start together shorter
    first, where the lexsort is done after all."""
    order = np.argsort(start, kind="stable")
    order = order[group_order(group[order])]
    g, s, e = group[order], start[order], end[order]
    if ((g[1:] == g[:-1]) & (s[1:] == s[:-1]) & (e[1:] > e[:-1])).any():
        order = np.lexsort((-end, start, group))
        g, s, e = group[order], start[order], end[order]
    return order, g, s, e


def _event_keys(rank: np.ndarray, zero: np.ndarray | None) -> np.ndarray:
    """Sort keys, after the timestamp, of BEGIN events (``zero`` None) or END events of rows with
    these ranks: at one time on one track, ENDs (inner ones, i.e. later-ranked, first) come
    before BEGINs (outer, i.e. earlier-ranked, first), except that a zero-length slice ends right
    after it begins."""
    begin = (1 << 40) | rank << 1
    if zero is None:
        return begin
    return np.where(zero, begin | 1, (1 << 39) - rank)


def _pieces(s: np.ndarray, e: np.ndarray, size: int = 1 << 18) -> Iterator[tuple[int, int]]:
    """Rows sorted by (start, -end) cut where nothing is open into pieces of about ``size`` rows
    (nesting is decided a piece at a time, in bounded memory)."""
    n = len(s)
    quiet = np.nonzero(s[1:] >= np.maximum.accumulate(e)[:-1])[0] + 1  # rows that start after all before end
    a = 0
    while a < n:
        i = np.searchsorted(quiet, a + size)
        b = int(quiet[i]) if a + size < n and i < len(quiet) else n
        yield a, b
        a = b


def _nested(s: np.ndarray, e: np.ndarray) -> bool:
    """Whether rows sorted by (start, -end) nest: replay their BEGIN/END events in the order the
    writer emits them and check that every END closes its own BEGIN (the most recent one open at
    its depth), in numpy."""
    m = len(s)
    r = np.arange(m, dtype=np.int64)
    ts = np.concatenate([s, e])
    key = np.concatenate([_event_keys(r, None), _event_keys(r, e == s)])
    is_end = np.concatenate([np.zeros(m, bool), np.ones(m, bool)])
    ident = np.concatenate([r, r])
    order = np.lexsort((key, ts))
    is_end, ident = is_end[order], ident[order]
    delta = np.where(is_end, -1, 1)
    after = np.cumsum(delta)
    if (after < 0).any():
        return False
    level = np.where(is_end, after, after - 1)  # a BEGIN opens, its END closes, the same level
    by = np.argsort(level, kind="stable")
    is_end, ident, level = is_end[by], ident[by], level[by]
    return bool(not is_end[0::2].any() and is_end[1::2].all() and (ident[0::2] == ident[1::2]).all()
                and (level[0::2] == level[1::2]).all())


def _stack_lanes(starts: list[int], ends: list[int]) -> list[int]:
    """Rows sorted by (start, -end): the first lane each nests in (a lane is a stack of the rows
    open there)."""
    stacks: list[list[int]] = []
    out = []
    for s, e in zip(starts, ends):
        for li, st in enumerate(stacks):
            while st and st[-1] <= s:
                st.pop()
            if not st or e <= st[-1]:
                out.append(li)
                st.append(e)
                break
        else:
            stacks.append([e])
            out.append(len(stacks) - 1)
    return out


def _unique_rows(*cols: np.ndarray) -> tuple[list[tuple], np.ndarray]:
    """Distinct rows of equal-length integer columns and each row's index among them (what
    ``np.unique(axis=0)`` gives, without its slow sort of row bytes)."""
    n = len(cols[0])
    if n == 0:
        return [], np.empty(0, np.int64)
    key = _packed(cols)
    if key is not None:  # the columns' ranges fit one int64: one pass over one key
        key = unique_inverse(key)[1]
    else:
        key = np.zeros(n, np.int64)
        for c in cols:
            u, inv = unique_inverse(c)
            key = unique_inverse(key * len(u) + inv)[1]  # kept dense (no overflow)
    count = int(key.max()) + 1
    some = np.empty(count, np.int64)
    some[key] = np.arange(n)  # a row of each group (its rows are alike)
    rows = list(zip(*(c[some].tolist() for c in cols)))
    return rows, key


def _packed(cols: tuple[np.ndarray, ...]) -> np.ndarray | None:
    """The columns side by side in one int64 key (each less its least value, in as many bits as
    its range needs), or None where the ranges need more than 62 bits together."""
    spans = [(int(c.min()), int(c.max())) for c in cols]
    bits = [(hi - lo).bit_length() for lo, hi in spans]
    if sum(bits) > 62:
        return None
    key = np.zeros(len(cols[0]), np.int64)
    for c, (lo, _), b in zip(cols, spans, bits):
        key <<= b
        key |= c.astype(np.int64, copy=False) - lo
    return key


def _triple_iids(names: _Names, x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
    """iids of ``[x, y, z]`` texts (0 where absent), made once per distinct triple."""
    rows, inv = _unique_rows(x, y, z)
    if not rows:
        return np.zeros(0, np.int32)
    iids = np.array([names.iid(f"[{a}, {b}, {c}]") if a >= 0 else 0 for a, b, c in rows], np.int32)
    return iids[inv]


def _check_layer_of(trace: Trace, layer_of) -> np.ndarray | None:
    if layer_of is None:
        return None
    a = np.asarray(layer_of)
    if a.ndim != 1 or len(a) != len(trace.kernels) or not np.issubdtype(a.dtype, np.integer):
        raise LayercError(f"layer_of must be an integer array with one entry per kernel ({len(trace.kernels)}), "
                          f"not {a.dtype} of shape {a.shape}")
    return a.astype(np.int64, copy=False)


def _span(s: Any, i: int) -> Span:
    if (type(s) is Span and type(s.name) is str and type(s.start) is int and type(s.end) is int and type(s.track) is str and s.track
            and (s.device is None or (type(s.device) is int and s.device >= 0)) and type(s.args) is dict):
        return s  # already what the rest below would make of it
    get = s.get if isinstance(s, dict) else (lambda key, default=None: getattr(s, key, default))
    name, start, end = get("name"), get("start"), get("end")
    if name is None or start is None or end is None:
        raise LayercError(f"span {i} needs a name, a start and an end (got {s!r})")
    device = get("device")
    return Span(name=str(name), start=int(start), end=int(end), track=str(get("track") or "spans"),
                device=None if device is None or int(device) < 0 else int(device), args=dict(get("args") or {}))


def _arg_value(value: Any) -> Any:
    """A span argument as it is written: a bool, an int64, a float, else its text."""
    if isinstance(value, np.generic):
        value = value.item()
    if not isinstance(value, (bool, int, float)) or (type(value) is int and not -(1 << 63) <= value < 1 << 63):
        return str(value)
    return value


def _device_label(t: Trace, d, devices: set) -> str:
    if d is None:
        return "GPU (all devices)"
    name = t.devices.get(d)
    if name is None and len(t.devices) == 1 and len({x for x in devices if x is not None}) == 1:
        name = next(iter(t.devices.values()))  # ROCm traces number the one device differently
    kind = t.device_kinds.get(d, "GPU")
    if d < 0:
        return f"{kind} ?" + (f": {name}" if name else "")
    return f"{kind} {d}: {name}" if name else f"{kind} {d}"


def _i32(x: int) -> int:
    return x if -(1 << 31) <= x < (1 << 31) else x & 0x7FFFFFFF


# -- protobuf -------------------------------------------------------------------------------------
class _ProtoWriter:
    def __init__(self, pb, layout: _Layout, f):
        self.pb, self.lay, self.f = pb, layout, f
        self.packets = 0
        self.name_done = bytearray(len(layout.names) + 1)  # event names interned so far
        self.value_done = bytearray(len(layout.names) + 1)  # debug-annotation string values
        self._da = pb.DebugAnnotation.DESCRIPTOR
        self._da_number = pb.TrackEvent.DESCRIPTOR.fields_by_name["debug_annotations"].number
        self._blobs: list[list[bytes]] | None = None

    def write(self) -> dict[str, int]:
        pb, lay = self.pb, self.lay
        batch = pb.Trace()
        first = batch.packet.add()
        first.trusted_packet_sequence_id = SEQUENCE_ID
        first.first_packet_on_sequence = True
        first.sequence_flags = _SEQ_CLEARED
        for name, iid in _ARG.items():
            first.interned_data.debug_annotation_names.add(iid=iid, name=name)
        for tr in lay.tracks:
            p = batch.packet.add()
            p.trusted_packet_sequence_id = SEQUENCE_ID
            td = p.track_descriptor
            td.uuid = tr.uuid
            if tr.parent is not None:
                td.parent_uuid = tr.parent
            if tr.process is not None:
                td.process.pid, td.process.process_name = tr.process
            elif tr.thread is not None:
                td.thread.pid, td.thread.tid, td.thread.thread_name = tr.thread
            else:
                td.name = tr.name
                td.sibling_order_rank = tr.rank
            if tr.ordered:
                td.child_ordering = _EXPLICIT
        self._flush(batch)
        from concurrent.futures import ThreadPoolExecutor

        # a batch is put together and written (Arrow and the file release the GIL) while the next
        # is encoded; one waits at most, so memory stays a batch or two (a second encoding thread
        # gained nothing: the encoding holds the GIL between its numpy calls). Batches are put
        # together by Arrow where it is loaded (an nsys export) or the trace is large enough to
        # repay its import; else by numpy.
        slices = 0
        self.arrow = "pyarrow" in sys.modules or sum(len(r) for r in lay.rows.values()) > _ARROW_ROWS
        with ThreadPoolExecutor(1, thread_name_prefix="layerc-write") as out:
            written = None
            for ts, codes in lay.events():
                slices += int((codes & 1).sum())
                for a in range(0, len(ts), PB_BATCH):
                    job = self._written(*self._encode(ts[a: a + PB_BATCH], codes[a: a + PB_BATCH]))
                    if written is not None:
                        written.result()
                    written = out.submit(job)
            if written is not None:
                written.result()
        return {"packets": self.packets, "slices": slices, "flows": lay.flows, "tracks": len(lay.tracks),
                "skipped": lay.skipped}

    def _flush(self, batch) -> None:
        self.packets += len(batch.packet)
        self.f.write(batch.SerializeToString())

    def counters(self, series: list[Counter]) -> int:
        """Each counter's track (under its device, after the layout's tracks) and values: a value
        at each start, 0 at each end (an end before a start at the same time). Returns the values
        written. (Layers are thousands, not millions: the protobuf library writes them.)"""
        pb, written = self.pb, 0
        for n, c in enumerate(series):
            parent = self.lay.device_tracks.get(c.device)
            if parent is None or not len(c.start):
                continue
            uuid = _UUID_BASE + len(self.lay.tracks) + 1 + n
            batch = pb.Trace()
            p = batch.packet.add()
            p.trusted_packet_sequence_id = SEQUENCE_ID
            p.track_descriptor.uuid, p.track_descriptor.parent_uuid, p.track_descriptor.name = uuid, parent.uuid, c.name
            p.track_descriptor.counter.unit_name = c.unit
            order = np.argsort(c.start, kind="stable")
            for ts, end, value in zip(c.start[order].tolist(), c.end[order].tolist(), c.value[order].tolist()):
                for when, v in ((ts, value), (end, 0.0)):
                    e = batch.packet.add()
                    e.timestamp, e.trusted_packet_sequence_id = when, SEQUENCE_ID
                    e.track_event.type, e.track_event.track_uuid, e.track_event.double_counter_value = _COUNTER, uuid, v
                written += 1
            self._flush(batch)
        return written

    def _encode(self, ts: np.ndarray, codes: np.ndarray) -> tuple:
        """One batch of events as packets, encoded from columns (``pb_columns``): the BEGINs of
        each kind of row, and all ENDs, as a group each (``join`` puts them back in time order),
        with the names and string values they use."""
        lay, pb = self.lay, self.pb
        n = len(codes)
        kind = (codes >> 1) & 7
        begin = (codes & 1) == 0
        idx = codes >> 4
        group = np.where(begin, kind, _END_GROUP)
        groups = distinct(group)
        place = np.zeros(_END_GROUP + 1, np.int64)
        place[groups] = np.arange(len(groups))
        row = np.empty(n, np.int64)
        parts, names, values = [], [], []
        for g in groups.tolist():
            sel = np.flatnonzero(group == g)
            row[sel] = np.arange(len(sel))
            m = len(sel)
            te = Rows(pb.TrackEvent.DESCRIPTOR, m)
            if g == _END_GROUP:
                track = np.empty(m, np.int64)
                for k in distinct(kind[sel]).tolist():
                    mine = kind[sel] == k
                    track[mine] = lay.rows[k].track[idx[sel][mine]]
                te.varint("type", _END).varint("track_uuid", track + (_UUID_BASE + 1))
            else:
                b = idx[sel]
                used = self._annotate(te, g, b)
                if used is not None:
                    values.append(used)
                name = lay.rows[g].name[b]
                names.append(name)
                te.varint("type", _BEGIN).varint("name_iid", name).varint("track_uuid", lay.rows[g].track[b].astype(np.int64) + (_UUID_BASE + 1))
            packets = Rows(pb.TracePacket.DESCRIPTOR, m)
            packets.varint("timestamp", ts[sel]).varint("trusted_packet_sequence_id", SEQUENCE_ID).message("track_event", te)
            if g != _END_GROUP:
                packets.varint("sequence_flags", _SEQ_NEEDS)
            parts.append(Rows(pb.Trace.DESCRIPTOR, m).message("packet", packets).pieces())
        return parts, place[group], row, names, values

    def _written(self, parts: list, group: np.ndarray, row: np.ndarray, names: list, values: list):
        """What writes an encoded batch, after a packet interning the strings it uses first."""
        interned = self._intern(names, values)
        self.packets += len(row) + (interned is not None)
        head = interned.SerializeToString() if interned is not None else b""

        def write() -> None:
            self.f.write(head)
            self.f.write(join(parts, group, row, self.arrow))
        return write

    def _intern(self, names: list[np.ndarray], values: list[np.ndarray]):
        """A ``Trace`` of one packet interning the strings not interned before (None: none)."""
        text = self.lay.names.text
        new_names, new_values = _first_uses(names, self.name_done), _first_uses(values, self.value_done)
        if not new_names and not new_values:
            return None
        batch = self.pb.Trace()
        p = batch.packet.add()
        p.trusted_packet_sequence_id = SEQUENCE_ID
        p.sequence_flags = _SEQ_NEEDS
        for i in new_names:
            p.interned_data.event_names.add(iid=i, name=text(i))
        for i in new_values:
            p.interned_data.debug_annotation_string_values.add(iid=i, str=text(i).encode())
        return batch

    # per-kind BEGIN fields ------------------------------------------------------------------------
    def _annotate(self, te: Rows, k: int, b: np.ndarray) -> np.ndarray | None:
        """The debug annotations and flows of ``te``, the BEGIN events of rows ``b`` of kind ``k``;
        returns the string values they use."""
        lay, t, da = self.lay, self.lay.trace, self._da

        def annotations(field: str, pairs: tuple[tuple[int, np.ndarray], ...], keep) -> None:
            for iid, values in pairs:
                has = keep(values)
                if has.any():
                    te.message("debug_annotations", Rows(da, te.n).varint("name_iid", iid).varint(field, values), has)

        def strings(*pairs: tuple[int, np.ndarray]) -> None:
            annotations("string_value_iid", pairs, lambda v: v > 0)

        def ints(*pairs: tuple[int, np.ndarray]) -> None:
            annotations("int_value", pairs, lambda v: v >= 0)

        def ending(flow: np.ndarray) -> None:
            if flow.any():
                te.fixed64("terminating_flow_ids", flow, flow != 0)

        if k == K_KERNEL:
            kk = t.kernels
            layer = lay.layer_of[b] if lay.layer_of is not None else np.full(len(b), -1)
            full, grid, block = lay.full(b), lay.grid(b), lay.block(b)
            strings((_ARG["full name"], full), (_ARG["grid"], grid), (_ARG["block"], block))
            ints((_ARG["registers per thread"], kk.registers[b]), (_ARG["shared memory"], lay.shared(b)), (_ARG["graph id"], kk.graph_id[b]),
                 (_A_CORRELATION, kk.correlation[b]), (_A_NODE, kk.graph_node_id[b]), (_A_EXTERNAL, kk.external_id[b]), (_A_LAYER, layer))
            ending(lay.kernel_flow(b))
            return np.concatenate([full, grid, block])
        if k == K_MEMOP:
            mm = t.memops
            ints((_ARG["bytes"], mm.bytes[b]), (_A_CORRELATION, mm.correlation[b]), (_A_NODE, mm.graph_node_id[b]))
            ending(lay.memop_flow(b))
            return None
        if k == K_LAUNCH:
            ll, off = t.launches, lay.launch_offsets
            ints((_A_CORRELATION, ll.correlation[b]), (_A_EXTERNAL, ll.external_id[b]))
            many = off[b + 1] - off[b]
            if many.any():
                inside = ragged(many)[1]
                te.repeated_fixed64("flow_ids", lay.launch_flows[np.repeat(off[b], many) + inside].astype(np.int64), many)
            return None
        if k == K_CPU_OP:
            cc = t.cpu_ops
            dims = np.where(cc.input_dims[b] >= 0, cc.input_dims[b].astype(np.int64) + 1, 0)
            ints((_A_EXTERNAL, cc.external_id[b]), (_ARG["Sequence number"], cc.sequence[b]))
            strings((_ARG["Input Dims"], dims))
            return dims
        if k == K_SPAN:
            for (_, index), blobs in zip(lay.spans.args, self._span_blobs()):
                te.encoded(self._da_number, blobs, index[b])
        return None  # annotations, module spans: a name on a track

    def _span_blobs(self) -> list[list[bytes]]:
        """Each span argument's values as ``debug_annotations`` fields, encoded once by the protobuf
        library (any names, any value types)."""
        if self._blobs is None:
            self._blobs = [[self._span_arg(key, _arg_value(value)) for key, value in pairs] for pairs, _ in self.lay.spans.args]
        return self._blobs

    def _span_arg(self, key: str, value: Any) -> bytes:
        """One ``debug_annotations`` field of a span, tag and all."""
        te = self.pb.TrackEvent()
        d = te.debug_annotations.add(name=key)
        if isinstance(value, bool):
            d.bool_value = value
        elif isinstance(value, int):
            d.int_value = value
        elif isinstance(value, float):
            d.double_value = value
        else:
            d.string_value = str(value)
        return te.SerializeToString()


# -- Chrome JSON ----------------------------------------------------------------------------------
class _JsonWriter:
    def __init__(self, layout: _Layout, f):
        self.lay, self.f = layout, f
        self.first = True
        valid = [r for r in layout.rows.values() if len(r)]
        lo = min((int(r.start[r.start >= 0].min()) for r in valid if (r.start >= 0).any()), default=0)
        hi = max((int(r.end[r.start >= 0].max()) for r in valid if (r.start >= 0).any()), default=0)
        # µs doubles keep every ns below 2**53 ns (104 days); larger clocks are written relative
        self.base = (lo // 1_000_000_000) * 1_000_000_000 if hi >= 1 << 53 else 0
        self.pid = [tr.json_pid for tr in layout.tracks]
        self.tid = [tr.json_tid for tr in layout.tracks]

    def _emit(self, events: list) -> None:
        if events:
            import orjson

            body = orjson.dumps(events)[1:-1]
            self.f.write(body if self.first else b"," + body)
            self.first = False

    def write(self) -> dict[str, int]:
        import orjson

        lay = self.lay
        head: dict[str, Any] = {"displayTimeUnit": "ns", "traceName": lay.trace.source}
        if self.base:
            head["baseTimeNanoseconds"] = self.base
        self.f.write(orjson.dumps(head)[:-1] + b',"traceEvents":[')
        self._emit(self._metadata())
        slices = 0
        for _, codes in lay.events(ends=False):
            slices += len(codes)
            for a in range(0, len(codes), BATCH):
                self._emit(self._chunk(codes[a: a + BATCH]))
        self.f.write(b"]}")
        return {"slices": slices, "flows": lay.flows, "tracks": len(lay.tracks), "skipped": lay.skipped}

    def _metadata(self) -> list[dict]:
        out = []
        for tr in self.lay.tracks:
            if tr.json_tid is None:
                out.append({"ph": "M", "name": "process_name", "pid": tr.json_pid, "args": {"name": tr.name}})
                if tr.ordered:  # devices above host processes
                    out.append({"ph": "M", "name": "process_sort_index", "pid": tr.json_pid, "args": {"sort_index": -1}})
            else:
                out.append({"ph": "M", "name": "thread_name", "pid": tr.json_pid, "tid": tr.json_tid, "args": {"name": tr.name}})
                out.append({"ph": "M", "name": "thread_sort_index", "pid": tr.json_pid, "tid": tr.json_tid,
                            "args": {"sort_index": tr.rank}})
        return out

    def _chunk(self, codes: np.ndarray) -> list[dict]:
        """X events (and flow ends) for a chunk of BEGIN codes, built a kind at a time."""
        kind = (codes >> 1) & 7
        idx = codes >> 4
        made: dict[int, Iterator] = {}
        for k in unique(kind).tolist():
            made[k] = iter(self._events(k, idx[kind == k]))
        out: list[dict] = []
        for k in kind.tolist():
            out.extend(next(made[k]))
        return out

    def _events(self, k: int, b: np.ndarray) -> list[list[dict]]:
        lay, text = self.lay, self.lay.names.text
        rows = lay.rows[k]
        pos = rows.track[b].tolist()
        start = rows.start[b]
        ts = ((start - self.base) / 1000).tolist()
        dur = ((rows.end[b] - start) / 1000).tolist()
        name = [text(i) for i in rows.name[b].tolist()]
        pid, tid = self.pid, self.tid
        args = self._args(k, b)
        cat = self._cats(k, b)
        out = []
        for j in range(len(b)):
            p, q = pid[pos[j]], tid[pos[j]]
            ev = {"ph": "X", "cat": cat[j], "name": name[j], "pid": p, "tid": q, "ts": ts[j], "dur": dur[j]}
            if args[j]:
                ev["args"] = args[j]
            out.append([ev])
        if k == K_LAUNCH:
            off = lay.launch_offsets
            for j, i in enumerate(b.tolist()):
                if off[i + 1] > off[i]:
                    ev = out[j][0]
                    out[j] += [_flow("s", fid, ev) for fid in lay.launch_flows[off[i]: off[i + 1]].tolist()]
        elif k in (K_KERNEL, K_MEMOP):
            flows = (lay.kernel_flow if k == K_KERNEL else lay.memop_flow)(b).tolist()
            for j, fid in enumerate(flows):
                if fid:
                    out[j].append(_flow("f", fid, out[j][0]))
        return out

    def _cats(self, k: int, b: np.ndarray) -> list[str]:
        t = self.lay.trace
        if k == K_MEMOP:
            return np.where(t.memops.kind[b] == MEMSET, "gpu_memset", "gpu_memcpy").tolist()
        if k == K_LAUNCH:
            return np.where(t.launches.kind[b] == LAUNCH_DRIVER, "cuda_driver", "cuda_runtime").tolist()
        if k == K_ANNOTATION:
            return np.where(t.annotations.kind[b] == ANNOTATION_GPU, "gpu_user_annotation", "user_annotation").tolist()
        return [{K_KERNEL: "kernel", K_SPAN: "layerc_span", K_CPU_OP: "cpu_op", K_MODULE: "python_function"}[k]] * len(b)

    def _args(self, k: int, b: np.ndarray) -> list[dict]:
        """Kineto's arg names, so the JSON reads back with ``read_kineto``."""
        lay, t = self.lay, self.lay.trace
        n = len(b)
        if k == K_KERNEL:
            kk = t.kernels
            full = [lay.names.text(i) if i else None for i in lay.full(b).tolist()]
            grid = np.stack([kk.grid_x[b], kk.grid_y[b], kk.grid_z[b]], 1).tolist()
            block = np.stack([kk.block_x[b], kk.block_y[b], kk.block_z[b]], 1).tolist()
            ints = {"device": kk.device[b], "stream": kk.stream[b], "registers per thread": kk.registers[b],
                    "shared memory": lay.shared(b), "correlation": kk.correlation[b], "graph id": kk.graph_id[b],
                    "graph node id": kk.graph_node_id[b], "External id": kk.external_id[b]}
            if lay.layer_of is not None:
                ints["layer"] = lay.layer_of[b]
            out = _int_args(ints, n)
            for a, f, g, bl in zip(out, full, grid, block):
                if f is not None:
                    a["full name"] = f
                if g[0] >= 0:
                    a["grid"] = g
                if bl[0] >= 0:
                    a["block"] = bl
            return out
        if k == K_MEMOP:
            mm = t.memops
            return _int_args({"device": mm.device[b], "stream": mm.stream[b], "bytes": mm.bytes[b],
                              "correlation": mm.correlation[b], "graph node id": mm.graph_node_id[b]}, n)
        if k == K_LAUNCH:
            ll = t.launches
            return _int_args({"correlation": ll.correlation[b], "External id": ll.external_id[b]}, n)
        if k == K_CPU_OP:
            cc = t.cpu_ops
            out = _int_args({"External id": cc.external_id[b], "Sequence number": cc.sequence[b]}, n)
            for a, d in zip(out, cc.input_dims[b].tolist()):
                if d >= 0:
                    a["Input Dims"] = t.strings.values[d]
            return out
        if k == K_SPAN:
            sp = lay.spans
            return [{**sp.args_of(i), "track": sp.kinds[sp.kind[i]]} for i in b.tolist()]
        return [{} for _ in range(n)]


def _flow(ph: str, fid: int, at: dict) -> dict:
    """A flow start (``s``, at a launch) or end (``f``, bound to the enclosing kernel slice)."""
    ev = {"ph": ph, "cat": "ac2g", "name": "ac2g", "id": fid, "pid": at["pid"], "tid": at["tid"], "ts": at["ts"]}
    if ph == "f":
        ev["bp"] = "e"
    return ev


def _int_args(cols: dict[str, np.ndarray], n: int) -> list[dict]:
    """Per row, the columns whose value is present (>= 0)."""
    names = [name for name, col in cols.items() if (col >= 0).any()]
    values = [cols[name].tolist() for name in names]
    out = []
    for j in range(n):
        out.append({name: v[j] for name, v in zip(names, values) if v[j] >= 0})
    return out


def _first_uses(arrays: list[np.ndarray], done_buffer) -> list[int]:
    """String ids in ``arrays`` not yet interned (0 is "none"), marked done in ``done_buffer`` (a
    bytearray, grown as texts made on the way, such as grid triples, get ids)."""
    if not arrays:
        return []
    ids = unique(np.concatenate(arrays))
    if len(ids) and int(ids[-1]) >= len(done_buffer):
        done_buffer.extend(bytes(int(ids[-1]) + 1 - len(done_buffer)))
    done = np.frombuffer(done_buffer, np.uint8)
    ids = ids[(ids > 0) & (done[ids] == 0)]
    done[ids] = 1
    return ids.tolist()
