"""Reader of PyTorch profiler (Kineto) Chrome-trace JSON, ``.json`` or ``.json.gz`` → Trace.

The ``traceEvents`` array is decoded in pieces of 64 to 256 KB of text by msgspec into typed
structs that keep only the fields layerc uses, so memory stays bounded on multi-GB traces and
unknown fields cost nothing; a small trace is one decode of the whole document. ``Input Dims``
stays raw JSON text until someone asks. Event kinds can be skipped (``kinds=``). µs float
timestamps become int64 ns. CUDA and ROCm fields, runtime and driver launches,
``cudaGraphLaunch``/``hipGraphLaunch`` replays (their kernels share the launch's correlation
id), and both flow-category generations (``ac2g``, legacy ``async_cpu_to_gpu``) are understood.
"""

from __future__ import annotations

import gc
import itertools
import re
import zlib
from collections import defaultdict
from pathlib import Path
from typing import Iterator, Union

import msgspec
import numpy as np

try:  # Intel ISA-L inflates gzip about four times faster than zlib; same interface
    from isal import isal_zlib as _inflate
except ImportError:  # pragma: no cover - a platform without an isal wheel
    _inflate = zlib

from layerc.ir.diagnostics import LayercError, Location, ParseError
from layerc.ir.trace import (
    ANNOTATION_GPU,
    ANNOTATION_USER,
    LAUNCH_DRIVER,
    LAUNCH_RUNTIME,
    MEMCPY,
    MEMSET,
    Annotations,
    CpuOps,
    Kernels,
    Launches,
    MemOps,
    Modules,
    Strings,
    Trace,
    distinct,
)

#: Every kind of row a reader can produce; ``kinds=`` picks some.
KINDS = frozenset({"kernels", "launches", "cpu_ops", "annotations", "memops", "modules"})

_F = msgspec.field
#: Tolerant field types: profilers write some ids as strings ("stream 7"); anything else is -1.
_Num = Union[int, float, str, None]


class _Args(msgspec.Struct, gc=False):
    external_id: _Num = _F(default=-1, name="External id")
    correlation: _Num = -1
    device: _Num = -1
    stream: _Num = -1
    grid: Union[list, str, None] = None
    block: Union[list, str, None] = None
    registers: _Num = _F(default=-1, name="registers per thread")
    shared: _Num = _F(default=-1, name="shared memory")
    bytes: _Num = -1
    input_dims: msgspec.Raw = _F(default=msgspec.Raw(b""), name="Input Dims")
    sequence: _Num = _F(default=-1, name="Sequence number")


_NO_ARGS = _Args()


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: _Num = -1
    tid: _Num = -1
    ts: Union[float, int, None] = None
    dur: Union[float, int, None] = 0.0
    args: Union[_Args, None] = None


_events = msgspec.json.Decoder(list[_Event])

CHUNK = 1 << 18
_START = re.compile(rb'"traceEvents"\s*:\s*\[')
_SPLIT = re.compile(rb"\}\s*,\s*\{")
_RUNTIME_CATS = {"cuda_runtime": LAUNCH_RUNTIME, "cuda_driver": LAUNCH_DRIVER, "runtime": LAUNCH_RUNTIME}
_CPU_CATS = {"cpu_op", "operator"}
_FLOW_CATS = {"ac2g", "async_cpu_to_gpu", "async_gpu", "async", "fwdbwd", "forward_backward", "fwd_bwd"}
_GRAPH_API = re.compile(r"GraphLaunch")


def read_kineto(path: str | Path, kinds=KINDS, chunk: int = CHUNK) -> Trace:
    """Read a Kineto trace; ``kinds`` limits what is kept (fewer kinds, less work)."""
    path = Path(path)
    rows = _Rows(set(kinds))
    meta: dict = {}
    n_events = 0
    collecting = gc.isenabled()
    gc.disable()  # the decoded events are acyclic and short-lived: collector passes are pure cost
    try:
        for events in _event_chunks(path, chunk, meta):
            n_events += len(events)
            rows.add(events)
    finally:
        if collecting:
            gc.enable()
    if n_events == 0:
        raise ParseError("the trace has no events (an empty 'traceEvents' array)", str(path))
    trace = rows.build(str(path))
    for d in meta.get("deviceProperties") or ():
        if isinstance(d, dict) and "id" in d:
            trace.devices[int(d["id"])] = str(d.get("name", ""))
    trace.meta.update({k: v for k, v in meta.items() if k in ("schemaVersion", "traceName", "displayTimeUnit", "baseTimeNanoseconds", "distributedInfo")})
    trace.meta["events"] = n_events
    trace.meta["flows"] = rows.flows
    return trace


# -- chunking ----------------------------------------------------------------------------------
def _byte_stream(path: Path, size: int = 1 << 15, out: int = 1 << 16) -> Iterator[bytes]:
    """The file's bytes, gunzipped on the fly when it is gzip, in pieces of at most ``out``
    bytes (a compressed block inflates about twentyfold: memory should stay near one chunk)."""
    try:
        f = path.open("rb")
    except OSError as e:
        raise LayercError(f"cannot read {path}: {e.strerror}", str(path)) from None
    with f:
        head = f.read(2)
        f.seek(0)
        if head != b"\x1f\x8b":
            while block := f.read(size):
                yield block
            return
        z = _inflate.decompressobj(wbits=31)
        try:
            while block := f.read(size):
                while block:
                    yield z.decompress(block, out)
                    block = z.unconsumed_tail
                    if z.eof and z.unused_data:  # concatenated gzip members
                        block = z.unused_data
                        z = _inflate.decompressobj(wbits=31)
            yield z.flush()
        except _inflate.error as e:
            raise ParseError(f"corrupt gzip data: {e}", str(path)) from None
        if not z.eof:
            raise ParseError("truncated gzip file (it ends before the compressed stream does)", str(path))


class _Document(msgspec.Struct, gc=False):
    """The last piece of a trace, decoded with the document's head as one JSON object: its
    events and the keys around ``traceEvents`` that layerc keeps."""

    traceEvents: list[_Event]
    schemaVersion: object = None
    traceName: object = None
    displayTimeUnit: object = None
    baseTimeNanoseconds: object = None
    distributedInfo: object = None
    deviceProperties: object = None


_document = msgspec.json.Decoder(_Document)
_BYTE_OFFSET = re.compile(r" \(byte (\d+)\)")  # where msgspec says a decode failed
_EVENT_INDEX = re.compile(r"`\$(?:\.traceEvents)?\[(\d+)\]((?:\.\w+)*)`")


def _event_chunks(path: Path, chunk: int, meta: dict) -> Iterator[list[_Event]]:
    """Decoded events, about ``chunk`` bytes of text at a time. The rest of the array is decoded
    behind the document's head (everything before the array): one decode of a complete JSON
    document gives the last events and the keys around ``traceEvents``, and a small trace is
    read in that one decode."""
    stream = _byte_stream(path)
    head, buf, bare = _array_start(stream, path)
    at = len(head)  # the file offset (of the inflated text) where ``buf`` begins
    buf, done = bytearray(buf), 0  # deleting from a bytearray's front does not copy the rest
    try:
        for block in itertools.chain((b"",), stream):  # what came with the head is split first
            buf += block
            if len(buf) < _piece(at, chunk):
                continue
            pos = 0
            while len(buf) - pos >= (piece := _piece(at, chunk)) and (found := _split_point(buf, pos, piece)) is not None:
                split, events = found
                end = buf.index(b",", split) + 1  # past the separating comma
                at, pos, done = at + end - pos, end, done + len(events)
                yield events
            del buf[:pos]
        text = head + buf
        del buf
        if bare:
            yield _decode_rest(_events, text, len(head), at, path)
            return
        doc = _decode_rest(_document, text, len(head), at, path)
    except _BadEvent as bad:
        raise bad.located(path, at, done) from None
    meta.update({k: v for k in doc.__struct_fields__[1:] if (v := getattr(doc, k)) is not None})
    yield doc.traceEvents


def _piece(at: int, chunk: int) -> int:
    """Bytes of text to decode next: a quarter of what has been read, from 64 KB up to ``chunk``.
    Memory stays a fraction of a small trace's text, and a big one is read in few pieces."""
    return min(chunk, max(1 << 16, at // 4))


def _array_start(stream: Iterator[bytes], path: Path) -> tuple[bytes, bytes, bool]:
    """The document up to the events array's ``[``, what follows, and whether the document is
    a bare array of events rather than an object with ``traceEvents``."""
    buf = b""
    for block in stream:
        buf += block
        start = len(buf) - len(buf.lstrip())
        if buf[start : start + 1] == b"[":
            return buf[: start + 1], buf[start + 1 :], True
        if (m := _START.search(buf)) is not None:
            return buf[: m.end()], buf[m.end() :], False
        if len(buf) > 64 << 20:
            raise ParseError("no 'traceEvents' array in the first 64 MB: not a PyTorch profiler trace", str(path))
    text = buf.lstrip()
    if not text:
        raise ParseError("the file is empty", str(path))
    if text[:1] not in (b"{", b"["):
        raise ParseError("not JSON (a PyTorch profiler trace is a JSON object with 'traceEvents')", str(path))
    raise ParseError("no 'traceEvents' array: not a PyTorch profiler trace", str(path))


def _split_point(buf: bytearray, pos: int, chunk: int) -> tuple[int, list[_Event]] | None:
    """Index just after an event's closing brace about ``chunk`` bytes after ``pos``, with the
    events before it (decoding is how a split is known to fall between events, not in a string)."""
    for m in _SPLIT.finditer(buf, pos + chunk - min(chunk // 2, 1 << 20)):
        candidate = m.start() + 1
        piece = b"".join((b"[", memoryview(buf)[pos:candidate], b"]"))
        try:
            return candidate, _events.decode(piece)
        except msgspec.ValidationError as e:  # well-formed JSON: the split is right, an event is wrong
            raise _BadEvent(e, piece, 1) from None
        except msgspec.DecodeError:
            continue
    return None


def _decode_rest(decoder: msgspec.json.Decoder, text: bytes, head: int, at: int, path: Path):
    """Decode the document's head (its first ``head`` bytes) and the rest of the array, which
    begins at file offset ``at``, as one document."""
    try:
        return decoder.decode(text)
    except msgspec.ValidationError as e:
        raise _BadEvent(e, text, head) from None
    except msgspec.DecodeError as e:
        if "truncated" in str(e):
            raise ParseError("the events array never closes (a truncated trace?)", str(path)) from None
        m = _BYTE_OFFSET.search(str(e))
        what = f"invalid JSON: {_BYTE_OFFSET.sub('', str(e))}"
        if m is None:
            raise ParseError(what, str(path)) from None
    offset = int(m.group(1)) - ("trailing characters" in what)  # msgspec counts those one past
    raise _located_error(what, path, offset if offset < head else at + offset - head)


class _BadEvent(Exception):
    """A well-formed piece of the array with a field of the wrong type. msgspec says which event
    of the piece and which field, not where: ``text`` is the piece, ``shift`` its byte that is
    the file's byte ``at`` (where the piece's events begin)."""

    def __init__(self, error: msgspec.ValidationError, text: bytes, shift: int):
        super().__init__(str(error))
        self.error, self.text, self.shift = error, text, shift

    def located(self, path: Path, at: int, before: int) -> ParseError:
        """The error at the field in the file, its event named by its index in the whole array
        (``before`` events came in earlier pieces)."""
        message = str(self.error)
        m = _EVENT_INDEX.search(message)
        if m is None:
            return ParseError(f"unexpected event field: {message}", str(path))
        index, keys = int(m.group(1)), re.findall(r"\.(\w+)", m.group(2))
        message = message[: m.start()] + f"`$.traceEvents[{index + before}]{m.group(2)}`" + message[m.end() :]
        offset = self._field_offset(index, keys)
        return _located_error(f"unexpected event field: {message}", path, at + offset - self.shift)

    def _field_offset(self, index: int, keys: list[str]) -> int:
        """Offset in the piece of the value of ``keys`` (a path such as args.stream) in event
        ``index``: the piece decoded again, each event as its raw text, found in order."""
        text = self.text
        raw = (_raw_events if text.lstrip()[:1] == b"[" else _raw_document).decode(text)
        events = raw if isinstance(raw, list) else raw.traceEvents
        at = end = 0
        for event in events[: index + 1]:
            at = text.find(bytes(event), end)
            end = at + len(event)
        for key in keys:
            m = re.compile(rb'"%s"\s*:\s*' % re.escape(key.encode())).search(text, at, end)
            if m is None:
                break
            at = m.end()
        return at


class _RawDocument(msgspec.Struct):
    traceEvents: list[msgspec.Raw]


_raw_events = msgspec.json.Decoder(list[msgspec.Raw])
_raw_document = msgspec.json.Decoder(_RawDocument)


def _located_error(message: str, path: Path, offset: int) -> ParseError:
    """``message`` at byte ``offset`` of the (inflated) text, with its line quoted and a caret."""
    where, window, window_from = _location(path, offset)
    return ParseError(message, str(path), where, window, source_from=window_from)


#: bytes of a line quoted on each side of an error (a trace is often one very long line)
_CONTEXT = 120


def _location(path: Path, offset: int) -> tuple[Location, str, int]:
    """Line and column of byte ``offset`` of the (inflated) text, the text of that line around
    it and the column where that text starts. The file is read again up to there: lines are
    counted only when there is an error to report, never during a load."""
    line, line_start, seen, before = 1, 0, 0, b""
    stream = _byte_stream(path)
    block = b""
    for block in stream:
        if seen + len(block) > offset:
            break
        if n := block.count(b"\n"):
            line += n
            line_start = seen + block.rfind(b"\n") + 1
        before = (before + block)[-_CONTEXT:]
        seen += len(block)
        block = b""
    k = offset - seen
    if n := block.count(b"\n", 0, k):
        line += n
        line_start = seen + block.rfind(b"\n", 0, k) + 1
    if len(block) - k < _CONTEXT:
        block += next(stream, b"")
    stream.close()
    text, base = before + block, seen - len(before)
    lo = max(line_start, offset - _CONTEXT) - base
    newline = text.find(b"\n", offset - base)
    hi = min(len(text) if newline < 0 else newline, offset - base + _CONTEXT)
    window = text[lo:hi].decode("utf-8", "replace").rstrip("\r")
    return Location(line, offset - line_start + 1), window, lo + base - line_start + 1


# -- rows ----------------------------------------------------------------------------------------
def _int(v) -> int:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return int(v) if v == v else -1
    if isinstance(v, str):  # "stream 7", "Spans"
        digits = re.sub(r"\D", "", v)
        return int(digits[:18]) if digits else -1
    return -1


def short_name(full: str) -> str:
    """``void at::native::(anonymous namespace)::multi_tensor_apply_kernel<...>(...)`` →
    ``multi_tensor_apply_kernel``: no return type, namespaces, template or call arguments."""
    text = full.replace("(anonymous namespace)", "anonymous")
    cuts = [i for i in (text.find("<"), text.find("(")) if i > 0]
    head = text[: min(cuts)] if cuts else text
    head = head.strip().rsplit(" ", 1)[-1].rsplit("::", 1)[-1]
    return head or full


#: Rows a table gathers as Python values before they become numpy columns: a numpy call costs
#: microseconds whatever its length, so converting each piece of a small trace would dominate.
_FLUSH = 1024
#: Event category → the table its complete ("X") events go to.
_TABLE_OF = {"kernel": "kernels", **dict.fromkeys(_CPU_CATS, "cpu_ops"), **dict.fromkeys(_RUNTIME_CATS, "launches"),
             "python_function": "modules", "user_annotation": "annotations", "gpu_user_annotation": "annotations",
             "gpu_memcpy": "memops", "gpu_memset": "memops"}
_KIND_OF = {**_RUNTIME_CATS, "user_annotation": ANNOTATION_USER, "gpu_user_annotation": ANNOTATION_GPU,
            "gpu_memcpy": MEMCPY, "gpu_memset": MEMSET}


class _Rows:
    """Events sorted by table; a table's values gather in Python lists and become numpy columns
    every ``_FLUSH`` rows and at the end."""

    def __init__(self, kinds: set[str]):
        self.kinds = kinds
        self.strings = Strings()
        self.staged: dict[str, defaultdict[str, list]] = {}
        self.parts: dict[str, list[dict]] = {k: [] for k in KINDS}
        self.flows = 0
        self.row = 0

    def add(self, events: list[_Event]) -> None:
        by_cat: defaultdict[str, list[int]] = defaultdict(list)  # complete events by category
        flow_cats, flows = _FLOW_CATS, 0
        for i, e in enumerate(events):
            if e.ph == "X":
                by_cat[e.cat].append(i)
            elif e.cat in flow_cats:
                flows += 1
        self.flows += flows
        base = self.row
        self.row += len(events)
        for cat, picked in by_cat.items():
            table = _TABLE_OF.get(cat)
            if table is None or table not in self.kinds:
                continue
            if table == "modules":
                picked = [i for i in picked if events[i].name.startswith("nn.Module: ")]
            if picked:
                self._stage(table, cat, [events[i] for i in picked], [i + base for i in picked])

    def _stage(self, table: str, cat: str, evs: list[_Event], row: list[int]) -> None:
        cols = self.staged.get(table)
        if cols is None:
            cols = self.staged[table] = defaultdict(list)
        cols["row"] += row
        cols["ts"] += [e.ts for e in evs]
        cols["dur"] += [e.dur for e in evs]
        cols["name"] += [e.name for e in evs]
        cols["pid"] += [e.pid for e in evs]
        cols["tid"] += [e.tid for e in evs]
        if cat in _KIND_OF:
            cols["kind"] += [_KIND_OF[cat]] * len(evs)
        args = [e.args or _NO_ARGS for e in evs] if table not in ("modules", "annotations") else []
        if table in ("kernels", "launches", "memops"):
            cols["correlation"] += [a.correlation for a in args]
        if table in ("kernels", "memops"):
            cols["device"] += [a.device for a in args]
            cols["stream"] += [a.stream for a in args]
        if table in ("kernels", "launches", "cpu_ops"):
            cols["external_id"] += [a.external_id for a in args]
        if table == "kernels":
            cols["grid"] += [a.grid for a in args]
            cols["block"] += [a.block for a in args]
            cols["registers"] += [a.registers for a in args]
            cols["shared"] += [a.shared for a in args]
        elif table == "cpu_ops":
            cols["input_dims"] += [str(a.input_dims, "utf-8") for a in args]
            cols["sequence"] += [a.sequence for a in args]
        elif table == "memops":
            cols["bytes"] += [a.bytes for a in args]
        if len(cols["row"]) >= _FLUSH:
            self._flush(table)

    def _flush(self, table: str) -> None:
        raw = self.staged.pop(table)
        start = _ns(raw.pop("ts"))
        cols = {"start": start, "end": start + _ns(raw.pop("dur")), "row": _ints(raw.pop("row")), "name": self._ids(raw.pop("name"))}
        pid, tid = raw.pop("pid"), raw.pop("tid")
        if table in ("kernels", "memops"):  # their pid and tid are a device and a stream
            cols["device"] = _ints(raw.pop("device"), pid)
            cols["stream"] = _ints(raw.pop("stream"), tid)
        else:
            cols["pid"], cols["tid"] = _ints(pid), _ints(tid)
        if "kind" in raw:
            cols["kind"] = np.fromiter(raw.pop("kind"), np.int8)
        if "grid" in raw:
            for axis, values in (("grid", raw.pop("grid")), ("block", raw.pop("block"))):
                xyz = _triples(values)
                cols.update({f"{axis}_x": xyz[:, 0], f"{axis}_y": xyz[:, 1], f"{axis}_z": xyz[:, 2]})
            cols["shared_static"] = _ints(raw.pop("shared"))
        if "input_dims" in raw:
            dims = raw.pop("input_dims")
            cols["input_dims"] = np.where(np.fromiter(map(bool, dims), bool, len(dims)), self._ids(dims), -1).astype(np.int32)
        cols.update((name, _ints(values)) for name, values in raw.items())
        self.parts[table].append(cols)

    def _ids(self, texts: list[str]) -> np.ndarray:
        """Interned ids of many strings (the common case, a known string, without a call)."""
        ids, intern = self.strings.ids, self.strings.intern
        return np.fromiter([ids[t] if t in ids else intern(t) for t in texts], np.int32, len(texts))

    def build(self, source: str) -> Trace:
        for table in list(self.staged):
            self._flush(table)
        tables = {kind: _concat(cls, self.parts[kind]) for kind, cls in _TABLES.items()}
        k = tables["kernels"]
        if len(k):  # short names, once per distinct kernel name
            names = distinct(k.name)
            table = np.full(names.max() + 1, -1, dtype=np.int32)
            for i in names:
                table[i] = self.strings.intern(short_name(self.strings.values[i]))
            k.short = table[k.name]
        return Trace(source=source, format="kineto", strings=self.strings, **tables)


_TABLES = {"kernels": Kernels, "launches": Launches, "cpu_ops": CpuOps, "annotations": Annotations, "memops": MemOps, "modules": Modules}


def _concat(cls, parts: list[dict]):
    if not parts:
        return cls.empty()
    return cls.from_columns({name: np.concatenate([p[name] for p in parts]) for name in parts[0]})


def _ns(values: list) -> np.ndarray:
    """µs (floats, ints or None) → int64 ns."""
    try:
        a = np.fromiter(values, np.float64, len(values))  # (fromiter: a list converts ~1.5x faster)
    except (TypeError, ValueError):
        a = np.array([v if isinstance(v, (int, float)) else np.nan for v in values], dtype=np.float64)
    a = a * 1000.0
    missing = np.isnan(a)
    if missing.any():
        a[missing] = 0.0
    return np.rint(a).astype(np.int64)


def _ints(values: list, fallback: list | None = None) -> np.ndarray:
    """Integer ids; strings such as "stream 7" give their digits; where a value is missing (-1)
    the ``fallback`` (an event's pid/tid) is used."""
    try:
        a = np.fromiter(values, np.int64, len(values))
    except (TypeError, ValueError, OverflowError):
        a = np.fromiter(map(_int, values), np.int64, len(values))
    if fallback is not None and (a < 0).any():
        fb = _ints(fallback)
        a = np.where(a < 0, fb, a)
    return a


def _triples(values: list) -> np.ndarray:
    """``grid``/``block`` lists as an (n, 3) array; -1 where absent."""
    try:
        a = np.array(values, dtype=np.int32)
        if a.shape == (len(values), 3):
            return a
    except (TypeError, ValueError, OverflowError):
        pass
    out = np.full((len(values), 3), -1, dtype=np.int32)
    for i, v in enumerate(values):
        if isinstance(v, str):  # "[4, 1, 1]" in some driver-launch records
            v = re.findall(r"-?\d+", v)
        if v:
            for j, x in enumerate(v[:3]):
                out[i, j] = _int(x)
    return out
