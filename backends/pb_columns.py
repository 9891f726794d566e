"""Protobuf messages encoded a column at a time: the rows of one message type, each field a numpy
column of one value per row (with the rows where it is present), written by numpy.

A Perfetto timeline has a packet per event; building a protobuf object per packet costs a few
microseconds, most of a large trace's time. Here a message's fields are laid out side by side,
each in a block of columns as wide as its longest value, in a byte matrix of one row per
message; a boolean mask of the bytes each row really has turns the matrix into the rows' bytes
in one step. A field is then a few numpy operations per batch of rows, on contiguous memory.
What has no bounded width (a repeated field, bytes already encoded) is kept as its own pieces,
and the rows are put together from their pieces by Arrow's ``take`` (a copy per piece).

The schema is the message's own descriptor: field numbers and wire types come from it, never
from constants here, and fields are written in field-number order (repeated ones in the order
they were added), as the protobuf library writes them, so that a row's bytes equal
``SerializeToString()`` of the same message: the tests check this against the library.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Sequence, cast

import numpy as np

#: wire type of each FieldDescriptor type that has one here (the protobuf encoding spec)
_VARINT_TYPES = {3, 4, 5, 8, 13, 14}  # int64, uint64, int32, bool, uint32, enum (sint32/64 are zigzag: not written here)
_FIXED64_TYPES = {1, 6, 16}  # double, fixed64, sfixed64
_MESSAGE_TYPE = 11


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


#: the smallest value of each varint size past one byte
_SIZE_STEPS = np.array([1 << (7 * k) for k in range(1, 10)], np.uint64)
#: continuation bits of a varint of each size (1..8 bytes), as the little-endian uint64 of its first 8 bytes
_CONTINUED = np.array([sum(0x80 << (8 * k) for k in range(min(size - 1, 8))) for size in range(11)], np.uint64)


def varint_size(values: np.ndarray) -> np.ndarray:
    """Bytes of each value's varint (a negative int64 takes ten, as two's complement), as uint8."""
    v = np.asarray(values).astype(np.int64, copy=False).view(np.uint64)
    if not len(v):
        return np.zeros(0, np.uint8)
    lo, hi = (int(np.searchsorted(_SIZE_STEPS, x, side="right")) + 1 for x in (v.min(), v.max()))
    size = np.full(len(v), lo, np.uint8)
    for k in range(lo, hi):  # only the sizes between the smallest and the largest value's (timestamps: none)
        size += v >= _SIZE_STEPS[k - 1]
    return size


def varint_rows(values: np.ndarray, size: np.ndarray | None = None, width: int | None = None) -> np.ndarray:
    """Each value's varint as a column of ``width`` bytes (the longest by default; bytes past a
    value's own size are left over, not zero): byte ``k`` of every value is row ``k``."""
    u = np.asarray(values).astype(np.int64, copy=False).view(np.uint64)
    size = varint_size(u) if size is None else size
    width = int(size.max(initial=1)) if width is None else width
    out = np.empty((width, len(u)), np.uint8)
    if width <= 2:  # small ids and lengths: a byte at a time costs less than spreading 64 bits
        out[0] = (u & np.uint64(0x7F)).astype(np.uint8) | np.where(size > 1, 0x80, 0).astype(np.uint8)
        if width == 2:
            out[1] = (u >> np.uint64(7)).astype(np.uint8) & np.uint8(0x7F)
        return out
    # spread the low 56 bits' seven-bit groups into the eight bytes of a uint64 (28|28, 14|14, 7|7)
    x = u & np.uint64((1 << 56) - 1)
    x = ((x & np.uint64(0x00FFFFFFF0000000)) << np.uint64(4)) | (x & np.uint64(0x000000000FFFFFFF))
    x = ((x & np.uint64(0x0FFFC0000FFFC000)) << np.uint64(2)) | (x & np.uint64(0x00003FFF00003FFF))
    x = ((x & np.uint64(0x3F803F803F803F80)) << np.uint64(1)) | (x & np.uint64(0x007F007F007F007F))
    x |= _CONTINUED[size]
    out[:min(width, 8)] = x.astype("<u8", copy=False).view(np.uint8).reshape(-1, 8).T[:width]
    if width > 8:  # the eighth byte's continuation bit came with _CONTINUED
        out[8] = ((u >> np.uint64(56)) & np.uint64(0x7F)).astype(np.uint8) | np.where(size > 9, 0x80, 0).astype(np.uint8)
        if width > 9:
            out[9] = (u >> np.uint64(63)).astype(np.uint8)
    return out


# -- what a message's rows are made of ---------------------------------------------------------------
@dataclass
class _Block:
    """A field as ``width`` rows of the byte matrix (a row per byte, a column per message):
    ``size`` bytes of each message (0: absent)."""

    size: np.ndarray
    width: int
    fill: Any  #: fill(view of the matrix's (width, n) rows)


@dataclass
class _Ragged:
    """A field without a bounded width: each row's bytes one after another in ``data``."""

    size: np.ndarray
    data: np.ndarray


@dataclass
class Pieces:
    """Rows' bytes as pieces: piece ``i`` is ``data[offsets[i]:offsets[i + 1]]``, and row ``r``
    is the pieces ``index[r]`` one after the other."""

    data: np.ndarray
    offsets: np.ndarray
    index: np.ndarray

    def tobytes(self) -> bytes:
        return bytes(take(self.data, self.offsets, self.index.ravel()))


#: at most this many bytes are put together by numpy at a time (an index of 8 bytes per byte)
_SMALL = 1 << 18


def take(data: np.ndarray, offsets: np.ndarray, pieces: np.ndarray, arrow: bool | None = None) -> memoryview:
    """The pieces ``pieces`` (ids into ``offsets``) one after the other: by Arrow's ``take`` on a
    binary array (a copy per piece) where ``arrow`` says so (None: where Arrow is loaded already,
    as for an nsys export, or ``data`` is large); else by numpy, a byte at a time, a slice of
    ``_SMALL`` bytes at a time (for a small trace, less than importing Arrow)."""
    if not len(pieces):
        return memoryview(b"")
    if len(offsets) == len(pieces) + 1 and np.array_equal(pieces, np.arange(len(pieces))):
        return memoryview(data[offsets[0]: offsets[-1]].data)  # already in order
    if arrow is None:
        arrow = "pyarrow" in sys.modules or len(data) > 8 * _SMALL
    if not arrow:
        length = offsets[pieces + 1] - offsets[pieces]
        ends = np.cumsum(length)
        out = np.empty(int(ends[-1]), np.uint8)
        cut = np.searchsorted(ends, np.arange(_SMALL, int(ends[-1]), _SMALL), side="right").tolist()
        for a, b in zip([0, *cut], [*cut, len(pieces)]):
            if a == b:
                continue
            lo = int(ends[a - 1]) if a else 0
            part = length[a:b]
            at = np.repeat(offsets[pieces[a:b]] - (ends[a:b] - part - lo), part)
            at += np.arange(len(at))
            out[lo: int(ends[b - 1])] = data[at]
        return memoryview(out.data)
    import pyarrow as pa

    arr = pa.Array.from_buffers(pa.large_binary(), len(offsets) - 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    order = np.ascontiguousarray(pieces, np.int64)
    out = arr.take(pa.Array.from_buffers(pa.int64(), len(order), [None, pa.py_buffer(order)]))  # (pa.array() would import pandas)
    bounds = np.frombuffer(out.buffers()[1], np.int64)
    return memoryview(out.buffers()[2])[bounds[out.offset]: bounds[out.offset + len(out)]]


def join(parts: Sequence[Pieces], group: np.ndarray, row: np.ndarray, arrow: bool | None = None) -> memoryview:
    """Rows of several ``Pieces`` interleaved: output row ``i`` is row ``row[i]`` of
    ``parts[group[i]]`` (``arrow``: as ``take``)."""
    per = np.array([p.index.shape[1] for p in parts], np.int64)
    count = per[group]
    start = np.zeros(len(group), np.int64)
    np.cumsum(count[:-1], out=start[1:])
    flat = np.empty(int(count.sum()), np.int64)
    data, offsets, first, base = [], [], 0, 0
    for g, p in enumerate(parts):
        mine = np.flatnonzero(group == g)
        for s in range(p.index.shape[1]):
            flat[start[mine] + s] = p.index[row[mine], s] + first
        data.append(p.data)
        offsets.append(p.offsets[:-1] + base)
        first += len(p.offsets) - 1
        base += int(p.offsets[-1])
    offsets.append(np.array([base], np.int64))
    return take(np.concatenate(data) if data else np.empty(0, np.uint8), np.concatenate(offsets), flat, arrow)


class Rows:
    """``n`` messages of the type ``descriptor`` describes, built a field at a time. A field's
    values are a column of one value per row; ``present`` (a boolean column of ``n``) says which
    rows have the field (None: every row). One value (a scalar) serves every row that has the
    field, encoded once. An embedded message field takes a ``Rows`` of the same ``n`` rows."""

    def __init__(self, descriptor: Any, n: int):
        self.descriptor, self.n = descriptor, n
        self._fields: list[tuple[int, int, Any]] = []  # (field number, order added, field)

    def _field(self, name: str, kinds: set[int]) -> tuple[int, bytes]:
        f = self.descriptor.fields_by_name[name]
        if f.type not in kinds:
            raise TypeError(f"{self.descriptor.name}.{name} is of type {f.type}, not one this encoder writes that way")
        wire = 0 if f.type in _VARINT_TYPES else 1 if f.type in _FIXED64_TYPES else 2
        return f.number, _varint_bytes(f.number << 3 | wire)

    def _add(self, number: int, field: Any) -> Rows:
        self._fields.append((number, len(self._fields), field))
        return self

    def _present(self, present: np.ndarray | None) -> np.ndarray | None:
        if present is None:
            return None
        p = np.asarray(present, bool)
        if p.shape != (self.n,):
            raise ValueError(f"a presence column of {p.shape} for {self.n} rows")
        return p

    def _values(self, values: Any) -> np.ndarray:
        v = np.asarray(values, np.int64)
        if v.shape != (self.n,):
            raise ValueError(f"{v.shape[0] if v.ndim else 1} values for {self.n} rows")
        return v

    def varint(self, name: str, values: Any, present: np.ndarray | None = None) -> Rows:
        number, tag = self._field(name, _VARINT_TYPES)
        if np.ndim(values) == 0:
            return self._add(number, ("constant", tag + _varint_bytes(int(values) & ((1 << 64) - 1)), self._present(present)))
        return self._add(number, ("varint", tag, self._values(values), self._present(present)))

    def fixed64(self, name: str, values: Any, present: np.ndarray | None = None) -> Rows:
        """A fixed64 field, one value per row that has it (a repeated field may be added again)."""
        number, tag = self._field(name, {6, 16})
        return self._add(number, ("fixed64", tag, self._values(values), self._present(present)))

    def repeated_fixed64(self, name: str, values: np.ndarray, counts: np.ndarray) -> Rows:
        """A repeated fixed64 field, unpacked: ``counts[i]`` values for row ``i``, in row order."""
        number, tag = self._field(name, {6, 16})
        counts = np.asarray(counts, np.int64)
        if len(counts) != self.n or int(counts.sum()) != len(values):
            raise ValueError(f"{name}: {len(values)} values for counts of {len(counts)} rows summing to {int(counts.sum())}")
        cells = np.empty((len(values), len(tag) + 8), np.uint8)
        cells[:, :len(tag)] = np.frombuffer(tag, np.uint8)
        cells[:, len(tag):] = np.asarray(values, np.int64).astype("<i8").view(np.uint8).reshape(-1, 8)
        return self._add(number, ("ragged", counts * cells.shape[1], cells.reshape(-1)))

    def message(self, name: str, rows: Rows, present: np.ndarray | None = None) -> Rows:
        number, tag = self._field(name, {_MESSAGE_TYPE})
        if rows.n != self.n:
            raise ValueError(f"{rows.n} rows of {name} for {self.n} rows")
        return self._add(number, ("message", tag, rows, self._present(present)))

    def encoded(self, number: int, blobs: list[bytes], which: np.ndarray) -> Rows:
        """Fields already encoded (tag and all) by the protobuf library, for what is rare or
        irregular: row ``i`` gets ``blobs[which[i]]``, none where ``which[i] < 0``. ``number``
        is the field number the blobs hold, for the field order."""
        which = np.asarray(which, np.int64)
        if which.shape != (self.n,):
            raise ValueError(f"{len(which)} blob choices for {self.n} rows")
        length = np.array([len(b) for b in blobs] + [0], np.int64)  # [-1]: none
        size = length[which]
        start = np.zeros(len(blobs) + 1, np.int64)
        np.cumsum(length[:-1], out=start[1:])
        chosen = which[which >= 0]
        table = np.frombuffer(b"".join(blobs), np.uint8)
        data = np.frombuffer(take(table, start, chosen), np.uint8).copy() if len(chosen) else np.empty(0, np.uint8)
        return self._add(number, ("ragged", size, data))

    # -- encoding ----------------------------------------------------------------------------------
    def _parts(self, present: np.ndarray | None) -> tuple[list[_Block | _Ragged], np.ndarray]:
        """The blocks and ragged pieces of every row, in the order they are written, and each
        row's size; rows outside ``present`` (None: all) have none."""
        parts: list[_Block | _Ragged] = []
        total = np.zeros(self.n, np.int64)  # (a block's sizes are uint8: at most 11 bytes)
        for _, _, field in sorted(self._fields, key=lambda f: (f[0], f[1])):
            kind = field[0]
            if kind == "ragged":
                size = field[1]
                if present is not None and size[~present].any():
                    raise ValueError("a repeated or encoded field in rows of a message they are not in")
                parts.append(_Ragged(size, field[2]))
                total += size
                continue
            mine = _both(present, field[-1])
            if kind == "message":  # its length, then its fields
                inner, inner_size = field[2]._parts(mine)
                small = _small_message(field[1], inner, inner_size, mine)
                if small is not None:
                    parts.append(small)
                    total += small.size
                    continue
                head = _varint(field[1], inner_size, mine)
                parts += [head, *inner]
                total += head.size + inner_size
                continue
            block = (_constant(field[1], mine, self.n) if kind == "constant" else
                     _varint(field[1], field[2], mine) if kind == "varint" else _fixed64(field[1], field[2], mine))
            parts.append(block)
            total += block.size
        return parts, total

    def pieces(self) -> Pieces:
        """The rows' bytes as pieces: a run of blocks is one piece per row, cut out of the row
        matrix by its mask; each ragged field is another."""
        parts, _ = self._parts(None)
        n = self.n
        runs: list[list[_Block]] = [[]]
        ragged: list[_Ragged] = []
        for part in parts:
            if isinstance(part, _Ragged):
                ragged.append(part)
                runs.append([])
            else:
                runs[-1].append(part)
        width = sum(b.width for run in runs for b in run)
        matrix = np.empty((width, n), np.uint8)  # a field's byte k of every row is a row here: contiguous writes
        # where every row has every byte of every block (an END's fields, often), no mask is needed
        whole = n > 0 and all(int(b.size.min()) == b.width for run in runs for b in run)
        keep = None if whole else np.empty((width, n), bool)
        lengths = np.zeros((len(runs), n), np.int64)
        at = 0
        for s, run in enumerate(runs):
            for b in run:
                b.fill(matrix[at: at + b.width])
                if keep is not None:
                    np.less(_COLUMNS[: b.width, None], b.size, out=keep[at: at + b.width])
                lengths[s] += b.size
                at += b.width
        data = [np.ascontiguousarray(matrix.T).reshape(-1) if keep is None else matrix.T[keep.T]]
        piece_lengths = [lengths.T.ravel()]
        for r in ragged:
            data.append(r.data)
            piece_lengths.append(r.size)
        offsets = np.zeros(sum(len(x) for x in piece_lengths) + 1, np.int64)
        np.cumsum(np.concatenate(piece_lengths), out=offsets[1:])
        index = np.empty((n, len(runs) + len(ragged)), np.int64)
        rows = np.arange(n, dtype=np.int64)
        index[:, 0::2] = rows[:, None] * len(runs) + np.arange(len(runs))
        for j in range(len(ragged)):
            index[:, 2 * j + 1] = n * len(runs) + j * n + rows
        return Pieces(np.concatenate(data) if len(data) > 1 else data[0], offsets, index)

    def tobytes(self) -> bytes:
        """The rows one after the other (a ``Trace`` of packets is its ``packet`` rows so)."""
        return self.pieces().tobytes()


_COLUMNS = np.arange(256, dtype=np.uint8)  # (a block is at most 11 bytes wide)


def _both(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    return b if a is None else a if b is None else a & b


def _rows_size(width: int, present: np.ndarray | None, n: int) -> np.ndarray:
    return np.full(n, width, np.uint8) if present is None else present.view(np.uint8) * np.uint8(width)


def _constant(data: bytes, present: np.ndarray | None, n: int) -> _Block:
    def fill(view: np.ndarray) -> None:
        view[:] = np.frombuffer(data, np.uint8)[:, None]
    return _Block(_rows_size(len(data), present, n), len(data), fill)


def _varint(tag: bytes, values: np.ndarray, present: np.ndarray | None) -> _Block:
    size = varint_size(values)
    t = len(tag)
    longest = int(size.max(initial=0) if present is None else size.max(initial=0, where=present))
    if not longest:
        return _Block(np.zeros(len(size), np.uint8), 0, _nothing)

    def fill(view: np.ndarray) -> None:
        view[:t] = np.frombuffer(tag, np.uint8)[:, None]
        view[t:] = varint_rows(values, size, longest)
    whole = size + np.uint8(t)
    return _Block(whole if present is None else whole * present.view(np.uint8), t + longest, fill)


def _nothing(view: np.ndarray) -> None:
    pass


def _small_message(tag: bytes, inner: list[_Block | _Ragged], size: np.ndarray, present: np.ndarray | None) -> _Block | None:
    """An embedded message as one block (its tag, a one-byte length, its fields), where its
    bytes lie side by side in a row with no gap: each field but the last is as wide as its block
    wherever the message is, and every message is under 128 bytes (a debug annotation: a name
    id and a value). None where that is not so: the message's blocks are then laid out apart."""
    if not inner or not all(isinstance(b, _Block) for b in inner):
        return None
    blocks = cast("list[_Block]", inner)
    rows = slice(None) if present is None else present
    for b in blocks[:-1]:
        if b.width and not (b.size[rows] == b.width).all():
            return None
    if len(size) and int(size.max()) >= 128:
        return None
    t = len(tag)
    width = t + 1 + sum(b.width for b in blocks)

    def fill(view: np.ndarray) -> None:
        view[:t] = np.frombuffer(tag, np.uint8)[:, None]
        view[t] = size.astype(np.uint8)
        at = t + 1
        for b in blocks:
            b.fill(view[at: at + b.width])
            at += b.width
    whole = size.astype(np.uint8) + np.uint8(t + 1)
    return _Block(whole if present is None else whole * present.view(np.uint8), width, fill)


def _fixed64(tag: bytes, values: np.ndarray, present: np.ndarray | None) -> _Block:
    t = len(tag)

    def fill(view: np.ndarray) -> None:
        view[:t] = np.frombuffer(tag, np.uint8)[:, None]
        view[t:] = values.astype("<i8").view(np.uint8).reshape(-1, 8).T
    return _Block(_rows_size(t + 8, present, len(values)), t + 8, fill)
