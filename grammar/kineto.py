"""Reader of PyTorch profiler (Kineto) Chrome-trace JSON, ``.json`` or ``.json.gz`` → Trace.

The ``traceEvents`` array is decoded in chunks of about 1 MB by msgspec into typed structs that
keep only the fields layerc uses, so memory stays bounded on multi-GB traces and unknown fields
cost nothing; ``Input Dims`` stays raw JSON text until someone asks. Event kinds can be skipped
(``kinds=``). µs float timestamps become int64 ns. CUDA and ROCm fields, runtime and driver
launches, ``cudaGraphLaunch``/``hipGraphLaunch`` replays (their kernels share the launch's
correlation id), and both flow-category generations (``ac2g``, legacy ``async_cpu_to_gpu``)
are understood.
"""

from __future__ import annotations

import gc
import re
import zlib
from pathlib import Path
from typing import Iterator, Union

import msgspec
import numpy as np

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
_meta = msgspec.json.Decoder(dict)

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
        z = zlib.decompressobj(wbits=31)
        try:
            while block := f.read(size):
                while block:
                    yield z.decompress(block, out)
                    block = z.unconsumed_tail
                    if z.eof and z.unused_data:  # concatenated gzip members
                        block = z.unused_data
                        z = zlib.decompressobj(wbits=31)
            yield z.flush()
        except zlib.error as e:
            raise ParseError(f"corrupt gzip data: {e}", str(path)) from None
        if not z.eof:
            raise ParseError("truncated gzip file (it ends before the compressed stream does)", str(path))


def _event_chunks(path: Path, chunk: int, meta: dict) -> Iterator[list[_Event]]:
    """Decoded events, a chunk at a time; the keys around ``traceEvents`` go to ``meta``."""
    stream = _byte_stream(path)
    buf = b""
    consumed_lines = 0
    start = None
    for block in stream:
        buf += block
        if start is None:
            stripped = buf.lstrip()
            if stripped[:1] == b"[":
                prefix, buf = None, stripped[1:]
                start = 0
            elif (m := _START.search(buf)) is not None:
                prefix, buf = buf[: m.start()], buf[m.end():]
                consumed_lines += prefix.count(b"\n")
                start = 0
            elif len(buf) > 64 << 20:
                raise ParseError("no 'traceEvents' array in the first 64 MB: not a PyTorch profiler trace", str(path))
            continue
        pos = 0
        while len(buf) - pos >= chunk:
            found = _split_point(buf, pos, chunk)
            if found is None:
                break
            split, events = found
            consumed_lines += buf.count(b"\n", pos, split)
            pos = buf.index(b",", split) + 1  # past the separating comma
            yield events
        if pos:
            buf = buf[pos:]
    if start is None:
        text = buf.lstrip()
        if not text:
            raise ParseError("the file is empty", str(path))
        if text[:1] not in (b"{", b"["):
            raise ParseError("not JSON (a PyTorch profiler trace is a JSON object with 'traceEvents')", str(path))
        raise ParseError("no 'traceEvents' array: not a PyTorch profiler trace", str(path))
    # The end of the array is found by decoding the rest twice: leave only a small rest for that.
    pos, tail = 0, 64 << 10
    while len(buf) - pos > 2 * tail and (found := _split_point(buf, pos, len(buf) - pos - tail)) is not None:
        split, events = found
        consumed_lines += buf.count(b"\n", pos, split)
        pos = buf.index(b",", split) + 1
        yield events
    buf = buf[pos:]
    events, suffix = _array_end(buf, path, consumed_lines)
    if events:
        yield events
    if prefix is not None:
        try:
            meta.update(_meta.decode(prefix + b'"__events__": null' + suffix))
        except msgspec.DecodeError:
            pass  # metadata is a convenience: a broken header must not hide the events


def _split_point(buf: bytes, pos: int, chunk: int) -> tuple[int, list[_Event]] | None:
    """Index just after an event's closing brace about ``chunk`` bytes after ``pos``, with the
    events before it (decoding is how a split is known to fall between events, not in a string)."""
    for m in _SPLIT.finditer(buf, pos + chunk - min(chunk // 2, 1 << 20)):
        candidate = m.start() + 1
        try:
            return candidate, _events.decode(b"[" + buf[pos:candidate] + b"]")
        except msgspec.DecodeError:
            continue
    return None


def _array_end(buf: bytes, path: Path, lines: int) -> tuple[list[_Event], bytes]:
    """The last events and the rest of the document. Decoding ``[`` + the rest stops where the
    events array closes: msgspec reports the trailing characters' offset, which is that place."""
    try:
        return _events.decode(b"[" + buf), b""
    except msgspec.ValidationError as e:
        raise _decode_error(buf, path, lines, f"unexpected event field: {e}") from None
    except msgspec.DecodeError as e:
        m = re.search(r"trailing characters \(byte (\d+)\)", str(e))
        if m is None:
            if "truncated" in str(e):
                raise _decode_error(buf, path, lines, "the events array never closes (a truncated trace?)") from None
            raise _decode_error(buf, path, lines, f"invalid JSON: {e}") from None
    close = buf.rfind(b"]", 0, int(m.group(1)) - 1)  # the offset counts the "[" we added, from 0
    return _decode(buf[:close], path, lines), buf[close + 1 :]


def _decode(data: bytes, path: Path, lines: int) -> list[_Event]:
    try:
        return _events.decode(b"[" + data + b"]")
    except msgspec.ValidationError as e:
        raise _decode_error(data, path, lines, f"unexpected event field: {e}") from None
    except msgspec.DecodeError as e:
        raise _decode_error(data, path, lines, f"invalid JSON: {e}") from None


def _decode_error(data: bytes, path: Path, lines: int, message: str) -> ParseError:
    m = re.search(r"\(byte (\d+)\)", message)
    if m:
        offset = max(int(m.group(1)) - 1, 0)
        before = data[:offset]
        line = lines + before.count(b"\n") + 1
        col = offset - (before.rfind(b"\n") + 1) + 1
        return ParseError(message, str(path), Location(line, col))
    return ParseError(message, str(path))


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


class _Rows:
    """Chunks of events sorted by kind, turned into columns with comprehensions and numpy."""

    def __init__(self, kinds: set[str]):
        self.kinds = kinds
        self.strings = Strings()
        self.parts: dict[str, list[dict]] = {k: [] for k in KINDS}
        self.flows = 0
        self.row = 0

    def add(self, events: list[_Event]) -> None:
        buckets: dict[str, list] = {}
        rows: dict[str, list] = {}
        flow_cats, flows = _FLOW_CATS, 0
        for i, e in enumerate(events):
            if e.ph == "X":
                try:
                    buckets[e.cat].append(e)
                    rows[e.cat].append(i)
                except KeyError:
                    buckets[e.cat] = [e]
                    rows[e.cat] = [i]
            elif e.cat in flow_cats:
                flows += 1
        self.flows += flows
        base = self.row
        self.row += len(events)
        kinds = self.kinds
        for cat, evs in buckets.items():
            row = np.asarray(rows[cat], dtype=np.int64) + base
            if cat == "kernel" and "kernels" in kinds:
                self._kernels(evs, row)
            elif cat in _CPU_CATS and "cpu_ops" in kinds:
                args = [e.args or _NO_ARGS for e in evs]
                dims = [bytes(a.input_dims).decode() for a in args]
                self._part("cpu_ops", evs, row, external_id=_ints([a.external_id for a in args]),
                           input_dims=np.where([bool(d) for d in dims], self._ids(dims), -1).astype(np.int32),
                           sequence=_ints([a.sequence for a in args]))
            elif cat in _RUNTIME_CATS and "launches" in kinds:
                args = [e.args or _NO_ARGS for e in evs]
                self._part("launches", evs, row, correlation=_ints([a.correlation for a in args]),
                           external_id=_ints([a.external_id for a in args]), kind=np.full(len(evs), _RUNTIME_CATS[cat], np.int8))
            elif cat == "python_function" and "modules" in kinds:
                picked = [k for k, e in enumerate(evs) if e.name.startswith("nn.Module: ")]
                if picked:
                    self._part("modules", [evs[k] for k in picked], row[picked])
            elif cat in ("user_annotation", "gpu_user_annotation") and "annotations" in kinds:
                kind = ANNOTATION_USER if cat == "user_annotation" else ANNOTATION_GPU
                self._part("annotations", evs, row, kind=np.full(len(evs), kind, np.int8))
            elif cat in ("gpu_memcpy", "gpu_memset") and "memops" in kinds:
                args = [e.args or _NO_ARGS for e in evs]
                self._part("memops", evs, row, device=_ints([a.device for a in args], [e.pid for e in evs]),
                           stream=_ints([a.stream for a in args], [e.tid for e in evs]),
                           correlation=_ints([a.correlation for a in args]), bytes=_ints([a.bytes for a in args]),
                           kind=np.full(len(evs), MEMCPY if cat == "gpu_memcpy" else MEMSET, np.int8))

    def _part(self, table: str, evs: list[_Event], row: np.ndarray, **extra) -> None:
        start = _ns([e.ts for e in evs])
        cols = {"start": start, "end": start + _ns([e.dur for e in evs]), "row": row,
                "name": self._ids([e.name for e in evs])}
        if table != "memops":
            cols.update(pid=_ints([e.pid for e in evs]), tid=_ints([e.tid for e in evs]))
        cols.update(extra)
        self.parts[table].append(cols)

    def _ids(self, texts: list[str]) -> np.ndarray:
        """Interned ids of many strings (the common case, a known string, without a call)."""
        ids, intern = self.strings.ids, self.strings.intern
        return np.array([ids[t] if t in ids else intern(t) for t in texts], np.int32)

    def _kernels(self, evs: list[_Event], row: np.ndarray) -> None:
        args = [e.args or _NO_ARGS for e in evs]
        grid = _triples([a.grid for a in args])
        block = _triples([a.block for a in args])
        self._part(
            "kernels", evs, row,
            device=_ints([a.device for a in args], [e.pid for e in evs]),
            stream=_ints([a.stream for a in args], [e.tid for e in evs]),
            correlation=_ints([a.correlation for a in args]), external_id=_ints([a.external_id for a in args]),
            grid_x=grid[:, 0], grid_y=grid[:, 1], grid_z=grid[:, 2],
            block_x=block[:, 0], block_y=block[:, 1], block_z=block[:, 2],
            registers=_ints([a.registers for a in args]), shared_static=_ints([a.shared for a in args]),
            pid=np.full(len(evs), -1, np.int64),  # a kernel event's pid is its device, not a process
        )

    def build(self, source: str) -> Trace:
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
        a = np.array(values, dtype=np.float64)
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
        a = np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        a = np.array([_int(v) for v in values], dtype=np.int64)
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
