"""Reader of PyTorch profiler (Kineto) Chrome-trace JSON, ``.json`` or compressed → Trace.

The ``traceEvents`` array is decoded in pieces of 64 to 256 KB of text by msgspec into typed
structs that keep only the fields layerc uses, so memory stays bounded on multi-GB traces and
unknown fields cost nothing; a small trace is one decode of the whole document. ``Input Dims``,
``Input type`` and ``Concrete Inputs`` stay raw JSON text until someone asks. Event kinds can be skipped (``kinds=``). µs float
timestamps become int64 ns. CUDA and ROCm fields, runtime and driver launches,
``cudaGraphLaunch``/``hipGraphLaunch`` replays (their kernels share the launch's correlation
id), and both flow-category generations (``ac2g``, legacy ``async_cpu_to_gpu``) are understood.

On broken or hostile input: bytes come only through :func:`layerc.grammar.inputs.byte_stream`
(gzip, bzip2, xz, zstd inflated within the decompression limit); the work is linear in the file
whatever it holds, and the first error is reported at its line and column; no more than
MAX_EVENT of text is held without an event ending in it; nesting msgspec cannot decode is an
error at the first bracket deeper than MAX_NESTING; a field of the wrong type is an error at
its value that names the event and the field; a row whose times are absent, or beyond ±2**62 ns
(1e300, an overflowing integer), is left out by Trace.drop_invalid, which counts it. However the
text is cut into pieces the answer is the same: a trailing comma or a second ``traceEvents`` key
is an error at its place, and where a compressed stream breaks, an error in the JSON before it
comes first.
"""

from __future__ import annotations

import gc
import itertools
import math
import re
from collections import Counter, defaultdict
from functools import partial
from operator import is_
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Union, cast

import msgspec
import numpy as np

from layerc.grammar import inputs
from layerc.grammar.inputs import human_size
from layerc.ir.diagnostics import Location, ParseError
from layerc.grammar.traces import KINDS  # every kind of row a reader can produce; kinds= picks some
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
    TIME_LIMIT,
    Trace,
    distinct,
)

_F = msgspec.field
#: Tolerant field types: profilers write some ids as strings ("stream 7"); anything else is -1.
_Num = Union[int, float, str, None]


class _Args(msgspec.Struct, gc=False, frozen=True):
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
    input_types: msgspec.Raw = _F(default=msgspec.Raw(b""), name="Input type")
    concrete_inputs: msgspec.Raw = _F(default=msgspec.Raw(b""), name="Concrete Inputs")
    sequence: _Num = _F(default=-1, name="Sequence number")


_NO_ARGS = _Args()  # frozen: one shared default, never written


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: _Num = -1
    tid: _Num = -1
    ts: Union[float, int, None] = None
    dur: Union[float, int, None] = 0.0
    args: Union[_Args, None] = _NO_ARGS  # None only where the JSON says null


_events = msgspec.json.Decoder(list[_Event])

CHUNK = 1 << 18
#: Text without a boundary between two events after which the JSON is taken as broken (an
#: event is at most kilobytes; a kernel name of megabytes already is not a profiler's).
MAX_EVENT = 64 << 20
#: JSON's whitespace: space, tab, CR, LF (a regex's \s also takes a vertical tab and a form feed,
#: which a cut between two events must not let through)
_JSON_WS = rb"[ \t\r\n]*"
_START = re.compile(rb'"traceEvents"' + _JSON_WS + rb":" + _JSON_WS + rb"\[")
_SPLIT = re.compile(rb"\}" + _JSON_WS + rb"," + _JSON_WS + rb"\{")
_RUNTIME_CATS = {"cuda_runtime": LAUNCH_RUNTIME, "cuda_driver": LAUNCH_DRIVER, "runtime": LAUNCH_RUNTIME}
_CPU_CATS = {"cpu_op", "operator"}
_FLOW_CATS = {"ac2g", "async_cpu_to_gpu", "async_gpu", "async", "fwdbwd", "forward_backward", "fwd_bwd"}
#: Categories of earlier Kineto generations (2020-21: capitalized ``Kernel``, ``Memcpy``,
#: ``Memset``, ``Runtime``, ``Operator``) and of ROCm builds (``hip_runtime``), as today's names.
_CAT_ALIASES = {"Kernel": "kernel", "Memcpy": "gpu_memcpy", "Memset": "gpu_memset", "Runtime": "runtime",
                "Operator": "operator", "hip_runtime": "cuda_runtime", "hip_driver": "cuda_driver",
                "Python": "python_function", "User_annotation": "user_annotation", "GPU_user_annotation": "gpu_user_annotation"}
_GRAPH_API = re.compile(r"GraphLaunch")


def read_kineto(path: str | Path, kinds=KINDS, chunk: int = CHUNK, geometry: bool = True) -> Trace:
    """Read a Kineto trace; ``kinds`` limits what is kept (fewer kinds, less work), and
    ``geometry=False`` leaves out the kernels' grid, block, registers and shared memory."""
    path = Path(path)
    rows = _Rows(set(kinds), geometry)
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
    trace.devices.update(_devices(meta.get("deviceProperties")))
    trace.meta.update({k: v for k, v in meta.items() if k in ("schemaVersion", "traceName", "displayTimeUnit", "baseTimeNanoseconds", "distributedInfo")})
    trace.meta["events"] = n_events
    trace.meta["flows"] = rows.flows
    if "kernels" in kinds and not len(trace.kernels):
        seen = ", ".join(f"{c} ({n})" for c, n in rows.categories.most_common(6)) or "none"
        trace.warnings.append(f"no GPU kernels in the trace: nothing ran on a GPU, or its events are of a kind layerc "
                              f"does not read (complete events by category: {seen})")
    return trace


# -- chunking ----------------------------------------------------------------------------------
#: The most text held without an event ending in it (also: the most text before the events array
#: and after it). A Kineto event is a few hundred bytes, a kernel with long template arguments a
#: few KB: 64 MB with no event end is not a profiler trace, and holding more would let one
#: malformed event take the machine's memory.
MAX_EVENT = 64 << 20
#: Kineto's JSON nests 3 or 4 levels. msgspec stops at Python's recursion limit (about 1000
#: levels) with a RecursionError that says nothing of where; that error is reported at the first
#: bracket that opens a level deeper than this.
MAX_NESTING = 200


if TYPE_CHECKING:
    _MaybeRaw = Union[msgspec.Raw, None]  # None: the key is absent (the default)
else:
    _MaybeRaw = msgspec.Raw  # what msgspec sees: a JSON null stays raw text (b"null"), not None


class _Document(msgspec.Struct, gc=False):
    """The last piece of a trace, decoded with the document's head as one JSON object: its
    events and the keys around ``traceEvents`` that layerc keeps (as raw text, decoded after:
    a value JSON allows but Python cannot hold, such as 1e999, is left out, not an error)."""

    traceEvents: list[_Event]
    schemaVersion: _MaybeRaw = None
    traceName: _MaybeRaw = None
    displayTimeUnit: _MaybeRaw = None
    baseTimeNanoseconds: _MaybeRaw = None
    distributedInfo: _MaybeRaw = None
    deviceProperties: _MaybeRaw = None


def _document_keys(doc: _Document) -> dict:
    out = {}
    for key in doc.__struct_fields__[1:]:
        if (raw := getattr(doc, key)) is not None:
            try:
                out[key] = msgspec.json.decode(raw)
            except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):  # 1e999, bad UTF-8: left out
                pass
    return out


_document = msgspec.json.Decoder(_Document)
_raw = msgspec.json.Decoder(msgspec.Raw)
_BYTE_OFFSET = re.compile(r" \(byte (\d+)\)")  # where msgspec says a decode failed
_EVENT_INDEX = re.compile(r"`\$(?:\.traceEvents)?\[(\d+)\]((?:\.[^`.\[]+|\[\d+\])*)`")
_WS = re.compile(_JSON_WS)
_BRACKETS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def _ws_end(text: bytes | bytearray, at: int = 0) -> int:
    """The first index at or after ``at`` that is not JSON whitespace."""
    m = _WS.match(text, at)
    assert m is not None  # the pattern matches the empty string
    return m.end()


def _event_chunks(path: Path, chunk: int, meta: dict) -> Iterator[list[_Event]]:
    """Decoded events, about ``chunk`` bytes of text at a time. The rest of the array is decoded
    behind the document's head (everything before the array): one decode of a complete JSON
    document gives the last events and the keys around ``traceEvents``, and a small trace is
    read in that one decode."""
    stream = _Utf8(inputs.byte_stream(path))
    head, rest, bare = _array_start(stream, path)
    if not bare:
        _check_head(head, path)
    pieces = _Pieces(path, head, rest, chunk, bare)
    blocks = itertools.chain((b"",), stream)  # what came with the head is cut first
    while True:
        try:
            block = next(blocks)
        except StopIteration:
            break
        except ParseError:  # the compressed stream is broken: an error in the text before it comes first
            pieces.check_received()
            raise
        yield from pieces.add(block)
    yield pieces.finish(meta, stream)


class _Utf8:
    """The blocks of a byte stream up to its first byte that is not UTF-8 (``bad``: its offset,
    None if there is none). JSON is UTF-8, and msgspec checks only the strings it keeps: the text
    is made to end before a bad byte, so errors before it are found first and the bad byte is
    the error where the text ends. (An ASCII block, the common case, is checked in nanoseconds.)"""

    bad: int | None

    def __init__(self, stream: Iterator[bytes]):
        self.stream, self.bad, self.byte = stream, None, 0
        self.blocks = self._blocks()

    def __iter__(self) -> Iterator[bytes]:
        return self.blocks  # one pass, however many loops take from it

    def _blocks(self) -> Iterator[bytes]:
        seen, tail = 0, b""  # ``tail``: a character cut by the end of the last block
        for block in self.stream:
            if not tail and block.isascii():
                seen += len(block)
                yield block
                continue
            data, tail = tail + block, b""
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as e:
                good = data[: e.start]
                if e.reason != "unexpected end of data":
                    self.bad, self.byte = seen + e.start, data[e.start]
                    yield good
                    return
                tail = data[e.start :]
                data = good
            seen += len(data)
            yield data
        if tail:
            self.bad, self.byte = seen, tail[0]

    def error(self, path: Path) -> ParseError:
        assert self.bad is not None  # asked only once a bad byte is found
        return _located_error(f"invalid UTF-8 byte 0x{self.byte:02x}", path, self.bad)


class _Malformed(Exception):
    """Text that is not JSON (or too deep for the decoder) at ``offset`` of the text decoded;
    ``offset`` None: the text ends too soon. ``trailing``: a whole value, then more text at
    ``offset``."""

    def __init__(self, message: str, offset: int | None, trailing: bool = False):
        super().__init__(message)
        self.message, self.offset, self.trailing = message, offset, trailing


class _TooDeep(_Malformed):
    """JSON nested deeper than msgspec decodes."""

    offset: int  #: always known: where the deep bracket is


class _BadEvent(Exception):
    """Well-formed text with a field of the wrong type. msgspec says which event (its index in
    the text decoded) and which field, not where."""

    def __init__(self, error: msgspec.ValidationError, text: bytes):
        super().__init__(str(error))
        self.error, self.text = error, text


def _decode(decoder: msgspec.json.Decoder, text, outer: int = 0):
    """``decoder.decode(text)``, every failure but a wrong type turned into _Malformed at its
    offset in ``text`` (``outer``: the levels of nesting open where ``text`` begins). Every
    decode of the reader goes through here."""
    try:
        return decoder.decode(text)
    except msgspec.ValidationError as e:
        raise _BadEvent(e, bytes(text)) from None
    except msgspec.DecodeError as e:
        message = str(e)
        if message == "Input data was truncated":
            raise _Malformed(message, None) from None
        m = _BYTE_OFFSET.search(message)
        trailing = "trailing characters" in message
        offset = int(m.group(1)) - trailing if m else 0  # msgspec counts trailing characters one past
        if offset >= len(text):  # a token cut by the end of the text ("1." of "1.5"): it ends too soon
            raise _Malformed("Input data was truncated", None) from None
        raise _Malformed(f"invalid JSON: {_BYTE_OFFSET.sub('', message)}", offset, trailing) from None
    except RecursionError:
        raise _TooDeep(f"nesting deeper than {MAX_NESTING} levels of arrays and objects", _too_deep(text, outer)) from None
    except UnicodeDecodeError:  # msgspec checks strings it keeps (not those it skips)
        at = _bad_utf8(text)
        raise _Malformed(f"invalid UTF-8 byte 0x{text[at]:02x}", at) from None


def _too_deep(text, outer: int) -> int:
    """Offset of the first bracket in ``text`` that opens a level deeper than MAX_NESTING."""
    depth = outer
    for m in _BRACKETS.finditer(text):
        c = text[m.start()]
        if c == 0x5B or c == 0x7B:  # [ {
            depth += 1
            if depth > MAX_NESTING:
                return m.start()
        elif c != 0x22:  # ] }
            depth -= 1
    return 0


def _too_deep_here(text: bytes, at: int, outer: int) -> int:
    """Where JSON too deep for msgspec is, in a text whose events begin at ``at``: the place in
    the first event that msgspec cannot decode alone, as the walk of :class:`_Pieces` finds it
    (not an event's less deep nesting elsewhere); else in what follows the events."""
    with memoryview(text) as view:
        while True:
            at = _ws_end(text, at)
            if text[at : at + 1] in (b"]", b""):
                break
            try:
                q = _value_end(view, at, outer)
            except _TooDeep as e:
                return e.offset
            except _Malformed:
                break
            if q is None or text[q] != 0x2C:
                at = len(text) if q is None else q
                break
            at = q + 1
    return at + _too_deep(memoryview(text)[at:], outer)


def _bad_utf8(text) -> int:
    try:
        bytes(text).decode("utf-8")
    except UnicodeDecodeError as e:
        return e.start
    return 0


def _value_end(view: memoryview, p: int, outer: int) -> int | None:
    """Index of the first byte after the JSON value that begins at ``p`` (after any whitespace)
    that is not whitespace; None when ``view`` ends first. msgspec decodes the value alone, as
    raw text, and says where it is followed by more: that is how an event's end is found, its
    strings and nested lists and all. The text is offered in windows that grow fourfold, so a
    value is decoded about once whatever follows it; _Malformed (offsets in ``view``) when the
    value is not JSON."""
    n, window = len(view), 1 << 12
    while True:
        stop = min(n, p + window)
        with view[p:stop] as text:
            try:
                _decode(_raw, text, outer)  # a whole value, then only whitespace: its end is not here yet
            except _Malformed as e:
                if e.trailing:
                    assert e.offset is not None  # trailing text has its place
                    return p + e.offset
                if e.offset is not None:
                    raise type(e)(e.message, p + e.offset) from None
        if stop == n:
            return None
        window *= 4


class _Pieces:
    """The events array cut into pieces of whole events as its text arrives, each decoded once.

    A cut is first guessed at the first ``}, {`` past half a piece and checked by decoding what
    comes before it (the common case, one decode a piece). When that text is not a whole run of
    events (the ``}, {`` is inside a string or a list of objects, the array ends, the text is
    broken) the events are walked one by one (:func:`_value_end`), which also finds the first
    error at its offset. When no event ends in what has arrived, nothing is tried again before
    twice as much text is held: a long event costs a few decodes, and past MAX_EVENT it is an
    error. So every byte is looked at a bounded number of times: time linear in the file."""

    def __init__(self, path: Path, head: bytes, rest: bytes, chunk: int, bare: bool):
        self.path, self.head, self.chunk, self.bare = path, head, chunk, bare
        self.buf = bytearray(rest)  # deleting from a bytearray's front does not copy the rest
        self.pos = 0  # where the next event begins in ``buf``
        self.at = len(head)  # the file offset (of the inflated text) of ``buf[pos]``
        self.done = 0  # events decoded so far
        self.wait = 0  # the text held after ``pos`` before a cut is tried again
        self.closed = False  # the array's ``]`` has been seen: what follows is the document's tail
        self.outer = 1 if bare else 2  # levels open inside the array

    def add(self, block: bytes) -> Iterator[list[_Event]]:
        """The pieces that ``block`` completes."""
        buf = self.buf
        buf += block
        while not self.closed and len(buf) - self.pos >= max(self.wait, _piece(self.at, self.chunk)):
            cut = self._cut(_piece(self.at, self.chunk))
            if cut is None:
                if not self.closed:
                    self._hold()
                break
            end, events = cut
            self.at, self.pos, self.done, self.wait = self.at + end - self.pos, end, self.done + len(events), 0
            yield events
        if self.closed and len(buf) - self.pos > MAX_EVENT:
            raise self._error(f"the document goes on for more than {human_size(MAX_EVENT)} after its events array", self.pos)
        del buf[: self.pos]
        self.pos = 0

    def _cut(self, piece: int) -> tuple[int, list[_Event]] | None:
        """The events of about ``piece`` bytes from ``pos`` and where the next event begins;
        None when no event ends in what has arrived."""
        buf, pos = self.buf, self.pos
        m = _SPLIT.search(buf, pos + piece // 2)
        if m is not None:
            split = m.start() + 1  # just past an event's closing brace, if the guess is right
            text = b"".join((b"[", memoryview(buf)[pos:split], b"]"))
            try:
                return m.end() - 1, _decode(_events, text)
            except _BadEvent as bad:  # the text before the error is well-formed: the error is real
                raise self._bad_event(bad, 1) from None
            except _Malformed:
                pass  # not a cut, or broken text: the walk tells which, and where
        found = self._walk(piece)
        if found is None:
            return None
        end, after = found
        return after, self._events_to(end)

    def _events_to(self, end: int) -> list[_Event]:
        """The events from ``pos`` to ``end``, which the walk has found whole."""
        text = b"".join((b"[", memoryview(self.buf)[self.pos : end], b"]"))
        try:
            return _decode(_events, text, self.outer - 1)
        except _BadEvent as bad:
            raise self._bad_event(bad, 1) from None
        except _Malformed as e:
            raise self._error(e.message, self.pos + (e.offset or 1) - 1) from None

    def _walk(self, piece: int) -> tuple[int, int] | None:
        """The events from ``pos`` one at a time, up to ``piece`` bytes or the last whole one:
        where the last ends and where the next begins; None when none is whole. A broken one
        is an error at its place."""
        if (end := self._end_after_comma()) is not None:
            raise self._error(_TRAILING_COMMA, end)
        buf, p, last, error, comma = self.buf, self.pos, None, None, False
        with memoryview(buf) as view:
            while True:
                p = _ws_end(buf, p)
                if p == len(buf):
                    break
                if buf[p] == 0x5D:  # ']': the array ends, or a comma of this walk was its last
                    if not comma:
                        self.closed = True
                        break
                    error = _Malformed(_TRAILING_COMMA, p)
                    break
                try:
                    q = _value_end(view, p, self.outer)
                except _Malformed as e:
                    error = e
                else:
                    if q is None:
                        break
                    if buf[q] == 0x2C:  # ','
                        last, comma = (q, q + 1), True
                    elif buf[q] == 0x5D:  # ']'
                        last, self.closed = (q, q), True
                        break
                    else:
                        error = _Malformed("invalid JSON: JSON is malformed: expected ',' or ']'", q)
                if error is not None:
                    break
                assert q is not None  # no error: the value ended at q
                p = q + 1
                if q - self.pos >= piece:
                    break
        if error is not None:
            self._broken(error)
        return last

    def _broken(self, error: _Malformed) -> None:
        """The walk found ``error`` (offset in ``buf``): a wrong type in an event before it is
        the first error; and the error is said in the words of the decoder that reads the whole
        document (the raw decoder words some errors otherwise), decoding up to its byte."""
        assert error.offset is not None  # the walk's errors have their place
        if isinstance(error, _TooDeep):  # the events before it, and the deep one up to its bracket
            end = error.offset
        else:  # the events up to the error, and a little past it (where the decoder looks ahead)
            end = min(error.offset + 64, len(self.buf))
        text = b"".join((b"[", memoryview(self.buf)[self.pos : end], b"]"))
        try:
            _decode(_events, text, self.outer - 1)
        except _BadEvent as bad:
            raise self._bad_event(bad, 1) from None
        except _Malformed as e:  # the text cut in the deep event ends too soon: nothing before it is wrong
            if e.offset is not None and not isinstance(error, _TooDeep):
                raise self._error(e.message, self.pos + e.offset - 1) from None
        raise self._error(error.message, error.offset)

    def _end_after_comma(self) -> int | None:
        """Where the array's ``]`` comes right after the comma the last cut went past (every cut
        but the array's end is made past one): a trailing comma that no decode from ``pos``
        sees; None where there is none."""
        if not self.done or self.closed:
            return None
        p = _ws_end(self.buf, self.pos)
        return p if self.buf[p : p + 1] == b"]" else None

    def check_received(self) -> None:
        """The first error in the text received so far (a broken event, a wrong field), raised:
        where the stream breaks after it, the file's first error is this one, whether pieces
        were cut as the text came or it was held to be cut later."""
        if not self.closed and (found := self._walk(1 << 62)) is not None:
            self._events_to(found[0])

    def _hold(self) -> None:
        """No event ends in the text held: wait for twice as much, up to MAX_EVENT."""
        held = len(self.buf) - self.pos
        if held <= MAX_EVENT:
            self.wait = min(2 * held, MAX_EVENT + 1)
            return
        start = _ws_end(self.buf, self.pos)
        if start == len(self.buf):
            raise self._error(f"more than {human_size(MAX_EVENT)} of whitespace where an event should begin (between events, or before the first)", self.pos)
        raise self._error(f"the event that begins here is not followed by ',' or ']' within {human_size(MAX_EVENT)} "
                          "(a profiler event is a few KB: a broken trace?)", start)

    def finish(self, meta: dict, stream: _Utf8) -> list[_Event]:
        """The rest of the array decoded behind the document's head, as one document; where
        the text stops at a byte that is not UTF-8, that byte is the error unless one comes
        before it."""
        if (end := self._end_after_comma()) is not None:
            raise self._error(_TRAILING_COMMA, end)
        text = b"".join((self.head, memoryview(self.buf)[self.pos :]))
        self.buf = bytearray()
        try:
            doc = _decode(_events if self.bare else _document, text)
        except _BadEvent as bad:
            raise self._bad_event(bad, len(self.head)) from None
        except _Malformed as e:
            if e.offset is None:
                if stream.bad is not None:
                    raise stream.error(self.path) from None
                raise ParseError("the JSON never closes: the file ends inside it (a truncated trace?)", str(self.path)) from None
            at = _too_deep_here(text, len(self.head), self.outer) if isinstance(e, _TooDeep) else e.offset
            offset = at if at < len(self.head) else self.at + at - len(self.head)
            raise _located_error(e.message, self.path, offset) from None
        if stream.bad is not None:
            raise stream.error(self.path)
        if self.bare:
            return doc
        maybe = text.find(b'"traceEvents"', len(self.head)) >= 0 or text.find(b"\\u", len(self.head)) >= 0  # (a key may be escaped)
        if maybe and (second := _second_events_key(text, len(self.head), self.outer)) is not None:
            raise _located_error("a second 'traceEvents' key: which of two equal keys counts, JSON leaves undefined, "
                                 "and the events of both are not one trace", self.path, self.at + second - len(self.head))
        meta.update(_document_keys(doc))
        return doc.traceEvents

    def _error(self, message: str, index: int) -> ParseError:
        """``message`` at ``buf[index]``."""
        return _located_error(message, self.path, self.at + index - self.pos)

    def _bad_event(self, bad: _BadEvent, shift: int) -> ParseError:
        """The wrong field at its place, its event named by its index in the whole array;
        ``shift``: the offset in the decoded text of ``buf[pos]``, where its events begin."""
        message = str(bad.error)
        m = _EVENT_INDEX.search(message)
        if m is None:
            return ParseError(f"unexpected event field: {message}", str(self.path))
        index, keys = int(m.group(1)), re.findall(r"\.([^.\[]+)", m.group(2))
        message = message[: m.start()] + f"`$.traceEvents[{index + self.done}]{m.group(2)}`" + message[m.end() :]
        offset = _field_offset(bad.text, shift, index, keys, self.outer)
        return _located_error(f"unexpected event field: {message}", self.path, self.at + offset - shift)


def _field_offset(text: bytes, at: int, index: int, keys: list[str], outer: int) -> int:
    """Offset in ``text`` of the value of ``keys`` (a path such as args.stream) in its event
    ``index``, the events beginning at ``at``: the events walked one by one to it, the keys
    found in order inside it (as far as they are; the event's start if the walk fails)."""
    with memoryview(text) as view:
        try:
            for _ in range(index):
                q = _value_end(view, at, outer)
                if q is None:
                    return at
                at = q + 1  # past the comma
        except _Malformed:
            return at
        at = _ws_end(text, at)
        try:
            end = _value_end(view, at, outer)
        except _Malformed:  # broken after the wrong field
            end = None
    end = len(text) if end is None else end
    for key in keys:
        m = re.compile(rb'"%s"' % re.escape(key.encode()) + _JSON_WS + rb":" + _JSON_WS).search(text, at, end)
        if m is None:
            break
        at = m.end()
    return at


_TRAILING_COMMA = "invalid JSON: JSON is malformed: trailing comma in array"  # (msgspec's words)


def _second_events_key(text: bytes, at: int, outer: int) -> int | None:
    """Where a second ``traceEvents`` key of the document is, in a text whose events begin at
    ``at`` and that decodes as a whole (msgspec keeps the last of equal keys, a stream has read
    the first array's events already): the events walked to the array's end, then the keys
    after it one by one, each decoded (``trace\\u0045vents`` is the same key); None where
    there is none."""
    with memoryview(text) as view:
        try:
            while text[(p := _ws_end(text, at))] != 0x5D:  # the array's end
                q = _value_end(view, p, outer)
                if q is None:
                    return None
                at = q + 1 if text[q] == 0x2C else q
            p = _ws_end(text, p + 1)
            while text[p : p + 1] == b",":  # the document's next key, and its value
                key_at = _ws_end(text, p + 1)
                colon = _value_end(view, key_at, 1)
                if colon is None or text[colon] != 0x3A:
                    return None
                if msgspec.json.decode(text[key_at:colon], type=str) == "traceEvents":
                    return key_at
                end = _value_end(view, colon + 1, 1)
                if end is None:
                    return None
                p = end
        except (_Malformed, msgspec.DecodeError):
            return None
    return None


def _piece(at: int, chunk: int) -> int:
    """Bytes of text to decode next: a quarter of what has been read, from 64 KB up to ``chunk``.
    Memory stays a fraction of a small trace's text, and a big one is read in few pieces."""
    return min(chunk, max(1 << 16, at // 4))


def _array_start(stream: _Utf8, path: Path) -> tuple[bytes, bytes, bool]:
    """The document up to the events array's ``[``, what follows, and whether the document is
    a bare array of events rather than an object with ``traceEvents``. The text is searched
    each time it has doubled (linear time), up to MAX_EVENT."""
    buf, look = bytearray(), 0
    for block in stream:
        buf += block
        if len(buf) < look:
            continue
        look = min(2 * len(buf), MAX_EVENT + 1)
        if (found := _find_start(buf, path)) is not None:
            return found
        if len(buf) > MAX_EVENT:
            raise ParseError(f"no 'traceEvents' array in the first {human_size(MAX_EVENT)}: not a PyTorch profiler trace", str(path))
    if (found := _find_start(buf, path)) is not None:
        return found
    if stream.bad is not None:
        raise stream.error(path)
    if not buf.strip():
        raise ParseError("the file is empty", str(path))
    raise ParseError("no 'traceEvents' array: not a PyTorch profiler trace", str(path))


def _find_start(buf: bytearray, path: Path) -> tuple[bytes, bytes, bool] | None:
    start = _ws_end(buf)
    if start == len(buf):
        return None
    if buf[start] == 0x5B:  # '['
        return bytes(buf[: start + 1]), bytes(buf[start + 1 :]), True
    if buf[start] != 0x7B:  # '{'
        raise ParseError("not JSON (a PyTorch profiler trace is a JSON object with 'traceEvents')", str(path))
    if (m := _START.search(buf)) is not None:
        return bytes(buf[: m.end()]), bytes(buf[m.end() :]), False
    return None


def _check_head(head: bytes, path: Path) -> None:
    """The document's head, decoded with an empty array (``head]}``): an error in it is reported
    before any in the events; and when it does not close there, the ``"traceEvents": [`` found
    is not the events array of a top-level object (it is in a string or nested: broken JSON, or
    not a profiler trace), and the events cannot be read as a stream."""
    try:
        _decode(_document, head + b"]}")
    except _Malformed as e:
        if e.offset is not None and e.offset < len(head):
            raise _located_error(e.message, path, e.offset) from None
        key = head.rindex(b'"traceEvents"')
        raise _located_error("this 'traceEvents' is not a key of the document's top-level object "
                             "(the text before it is broken, or not a PyTorch profiler trace)", path, key) from None
    except _BadEvent as bad:  # (the keys of the head are raw text: no wrong type is expected)
        raise ParseError(f"unexpected value: {bad.error}", str(path)) from None


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
    stream = inputs.byte_stream(path)
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
        try:
            block += next(stream, b"")
        except ParseError:  # a compressed stream broken past the error: its line is quoted as far as it goes
            pass
    stream.close()
    text, base = before + block, seen - len(before)
    lo = max(line_start, offset - _CONTEXT) - base
    newline = text.find(b"\n", offset - base)
    hi = min(len(text) if newline < 0 else newline, offset - base + _CONTEXT)
    window = text[lo:hi].decode("utf-8", "replace").rstrip("\r")
    return Location(line, offset - line_start + 1), window, lo + base - line_start + 1


def _devices(props) -> dict[int, str]:
    """Device id → name from ``deviceProperties``; entries without a usable id are skipped."""
    out = {}
    for d in props if isinstance(props, list) else ():
        if isinstance(d, dict) and (i := _int(d.get("id"))) >= 0:
            name = d.get("name")
            out[i] = name if isinstance(name, str) else ""
    return out


# -- rows ----------------------------------------------------------------------------------------
def _int(v, bound: int = 1 << 63) -> int:
    """An id or count as an integer in [-bound, bound); -1 when absent, not a number, not finite
    or out of that range. Strings such as "stream 7" give their digits."""
    if isinstance(v, str):  # "stream 7", "Spans"
        digits = re.sub(r"\D", "", v)
        v = int(digits[:18]) if digits else -1
    elif isinstance(v, float):
        v = int(v) if math.isfinite(v) else -1
    elif not isinstance(v, int):  # (bool is an int)
        return -1
    return int(v) if -bound <= v < bound else -1


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

    def __init__(self, kinds: set[str], geometry: bool = True):
        self.kinds, self.geometry = kinds, geometry
        self.strings = Strings()
        self.staged: dict[str, defaultdict[str, list]] = {}
        self.parts: dict[str, list[dict]] = {k: [] for k in KINDS}
        self.flows = 0
        self.row = 0
        self.categories: Counter = Counter()  # complete events per category, for the no-kernel warning

    def add(self, events: list[_Event]) -> None:
        by_cat: defaultdict[str, list[int]] = defaultdict(list)  # complete events by category
        flow_cats, flows = _FLOW_CATS, 0
        aliases = _CAT_ALIASES
        for i, e in enumerate(events):  # (a loop over attributes beats maps of attrgetters: Python
            if e.ph == "X":  # specializes a struct field's load, not a getattr from C)
                by_cat[aliases.get(e.cat, e.cat)].append(i)
            elif e.cat in flow_cats:
                flows += 1
        for cat, picked in by_cat.items():
            self.categories[cat] += len(picked)
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
        args: list[_Args] = []
        if table not in ("modules", "annotations"):
            given = [e.args for e in evs]
            args = [a or _NO_ARGS for a in given] if None in given else cast("list[_Args]", given)  # (None: "args": null)
        if table in ("kernels", "launches", "memops"):
            cols["correlation"] += [a.correlation for a in args]
        if table in ("kernels", "memops"):
            cols["device"] += [a.device for a in args]
            cols["stream"] += [a.stream for a in args]
        if table in ("kernels", "launches", "cpu_ops"):
            cols["external_id"] += [a.external_id for a in args]
        if table == "kernels" and self.geometry:
            cols["grid"] += [a.grid for a in args]
            cols["block"] += [a.block for a in args]
            cols["registers"] += [a.registers for a in args]
            cols["shared"] += [a.shared for a in args]
        elif table == "cpu_ops":
            cols["input_dims"] += [a.input_dims for a in args]
            cols["input_types"] += [a.input_types for a in args]
            cols["concrete_inputs"] += [a.concrete_inputs for a in args]
            cols["sequence"] += [a.sequence for a in args]
        elif table == "memops":
            cols["bytes"] += [a.bytes for a in args]
        if len(cols["row"]) >= _FLUSH:
            self._flush(table)

    def _flush(self, table: str) -> None:
        raw = self.staged.pop(table)
        start, end = _times(raw.pop("ts"), raw.pop("dur"))
        cols = {"start": start, "end": end, "row": _ints(raw.pop("row")), "name": self._ids(raw.pop("name"))}
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
        for key in ("input_dims", "input_types", "concrete_inputs"):  # raw JSON text, interned; -1 where absent
            if key in raw:
                texts = _texts(raw.pop(key))
                cols[key] = np.where(np.fromiter(map(bool, texts), bool, len(texts)), self._ids(texts), -1).astype(np.int32)
        cols.update((name, _ints(values)) for name, values in raw.items())
        self.parts[table].append(cols)

    def _ids(self, texts: list[str]) -> np.ndarray:
        """Interned ids of many strings (known strings, the common case, looked up in C)."""
        known = self.strings.ids
        ids = list(map(known.get, texts))
        if None in ids:  # new strings: each interned once, then all looked up again
            for text in dict.fromkeys(itertools.compress(texts, map(_is_none, ids))):
                self.strings.intern(text)
            ids = list(map(known.__getitem__, texts))
        return np.fromiter(ids, np.int32, len(ids))

    def build(self, source: str) -> Trace:
        for table in list(self.staged):
            self._flush(table)
        tables = {kind: _concat(cls, self.parts[kind]) for kind, cls in _TABLES.items()}
        k = tables["kernels"]
        if len(k):  # short names, once per distinct kernel name
            names = distinct(k.name)
            short_of = np.full(names.max() + 1, -1, dtype=np.int32)
            for i in names:
                short_of[i] = self.strings.intern(short_name(self.strings.values[i]))
            k.short = short_of[k.name]
        return Trace(source=source, format="kineto", strings=self.strings, **tables)


_is_none = partial(is_, None)


def _texts(raws: list[msgspec.Raw]) -> list[str]:
    """Raw JSON texts as strings, decoded as one text and split (a decode per text cost a CPU
    op's row 90 ns a field)."""
    texts = b"\x00".join(raws).decode("utf-8", "replace").split("\x00")
    if len(texts) != len(raws):  # a NUL in a text (JSON escapes it; a broken file need not), or none
        texts = [str(r, "utf-8", "replace") for r in raws]
    return texts


_TABLES = {"kernels": Kernels, "launches": Launches, "cpu_ops": CpuOps, "annotations": Annotations, "memops": MemOps, "modules": Modules}


#: a column's parts of this many bytes or more are handed back to the system once joined
_RELEASE_PARTS = 1 << 20


def _concat(cls, parts: list[dict]):
    """The table from its parts, a column at a time in its final type, each column's parts let go
    as it is made: the peak is the parts and one column, not the parts and the whole table. (The
    parts are small blocks in the heap, the column one large block: the parts' memory is handed
    back as they go, or every column would come on top of it: 192 MB at the peak of reading a
    774K-kernel trace, 137 MB so.)"""
    if not parts:
        return cls.empty()
    columns = {}
    for name in list(parts[0]):
        pieces = [p.pop(name) for p in parts]
        dtype = cls.COLUMNS.get(name, pieces[0].dtype)
        columns[name] = col = (pieces[0].astype(dtype, casting="unsafe", copy=False) if len(pieces) == 1 else
                               np.concatenate(pieces, dtype=dtype, casting="unsafe"))
        del pieces
        if col.nbytes >= _RELEASE_PARTS:
            inputs.release_freed()
    parts.clear()
    return cls.from_columns(columns)


def _times(ts: list, dur: list) -> tuple[np.ndarray, np.ndarray]:
    """Start and end in int64 ns from µs (floats, ints or None). A row whose start is absent, or
    whose start or duration is beyond ±2**62 ns (1e300, an int64-overflowing integer), gets
    start = end = TIME_LIMIT, which Trace.drop_invalid leaves out and counts; an absent duration
    is 0. (JSON has no NaN or inf: msgspec refuses them as text, and 1e999 as out of range.)"""
    start, length = _floats(ts, math.nan) * 1000.0, _floats(dur, 0.0) * 1000.0
    bad = ~((np.abs(start) < TIME_LIMIT) & (np.abs(length) < TIME_LIMIT))  # NaN compares False
    if bad.any():
        start[bad], length[bad] = TIME_LIMIT, 0.0
    start_ns = np.rint(start).astype(np.int64)
    return start_ns, start_ns + np.rint(length).astype(np.int64)  # |each| < 2**62: no overflow


def _floats(values: list, absent: float) -> np.ndarray:
    try:
        a = np.fromiter(values, np.float64, len(values))  # (fromiter: a list converts ~1.5x faster)
    except (TypeError, ValueError, OverflowError):  # None; an int beyond a float's range
        a = np.fromiter((_float(v, absent) for v in values), np.float64, len(values))
    return a


def _float(v, absent: float) -> float:
    if v is None:
        return absent
    try:
        return float(v)
    except OverflowError:
        return math.inf
    except (TypeError, ValueError):
        return math.nan


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
    """``grid``/``block`` lists as an (n, 3) int32 array; -1 where absent or out of range."""
    try:
        a = np.array(values, dtype=np.int32)
        if a.shape == (len(values), 3):
            return a
    except (TypeError, ValueError, OverflowError):
        pass
    out = np.full((len(values), 3), -1, dtype=np.int32)
    for i, v in enumerate(values):
        if isinstance(v, str):  # "[4, 1, 1]" in some driver-launch records
            v = re.findall(r"-?\d+", v[:200])
        if v:
            for j, x in enumerate(v[:3]):
                out[i, j] = _int(x, 1 << 31)
    return out
