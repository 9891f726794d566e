"""Protobuf messages encoded a column at a time: the rows of one message type, each field a numpy
column (with the rows where it is present), written by numpy into one byte buffer.

A Perfetto timeline has a packet per event; building a protobuf object per packet costs a few
microseconds, most of a large trace's time. Here a field costs a few numpy operations per batch
of rows. The schema is the message's own descriptor: field numbers and wire types come from it,
never from constants here, and fields are written in field-number order (repeated ones in the
order they were added), as the protobuf library writes them, so that a row's bytes equal
``SerializeToString()`` of the same message: the tests check this against the library.
"""

from __future__ import annotations

from typing import Any

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


def varint_size(values: np.ndarray) -> np.ndarray:
    """Bytes of each value's varint (a negative int64 takes ten, as two's complement)."""
    v = np.asarray(values).astype(np.int64, copy=False).view(np.uint64)
    return np.searchsorted(_SIZE_STEPS, v, side="right") + 1


def put_varints(out: np.ndarray, at: np.ndarray, values: np.ndarray) -> None:
    """Write each value's varint at its offset of ``out`` (uint8), a 7-bit group at a time."""
    v = np.asarray(values).astype(np.int64, copy=False).view(np.uint64)
    if not len(v):
        return
    size = varint_size(v)
    longest = int(size.max())
    if longest == int(size.min()):  # one size (timestamps, small ids): no masks
        for k in range(longest):
            out[at + k] = ((v >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8) | (0x80 if k + 1 < longest else 0)
        return
    for k in range(longest):
        m = size > k
        byte = (v[m] >> np.uint64(7 * k)) & np.uint64(0x7F)
        out[at[m] + k] = byte.astype(np.uint8) | np.where(size[m] > k + 1, 0x80, 0).astype(np.uint8)


def put_bytes(out: np.ndarray, at: np.ndarray, data: bytes) -> None:
    """Write the same ``data`` at every offset."""
    for k, byte in enumerate(data):
        out[at + k] = byte


class Rows:
    """``n`` messages of the type ``descriptor`` describes, built a field at a time. A field's
    values are a column of one value per row that has it: ``present`` (a boolean column of ``n``)
    says which rows do (None: every row), and the values are theirs alone, in row order. One
    value (a scalar) serves every row that has the field, encoded once. An embedded message field
    takes a ``Rows`` with one row per row that has it."""

    def __init__(self, descriptor: Any, n: int):
        self.descriptor, self.n = descriptor, n
        self._parts: list[tuple[int, int, _Part]] = []  # (field number, order added, part)
        self._size: np.ndarray | None = None

    def _field(self, name: str, kinds: set[int]) -> tuple[int, bytes]:
        f = self.descriptor.fields_by_name[name]
        if f.type not in kinds:
            raise TypeError(f"{self.descriptor.name}.{name} is of type {f.type}, not one this encoder writes that way")
        wire = 0 if f.type in _VARINT_TYPES else 1 if f.type in _FIXED64_TYPES else 2
        return f.number, _varint_bytes(f.number << 3 | wire)

    def _rows(self, present: np.ndarray | None) -> np.ndarray | None:
        return None if present is None else np.flatnonzero(present)

    def _add(self, number: int, part: _Part) -> Rows:
        self._parts.append((number, len(self._parts), part))
        self._size = None
        return self

    def varint(self, name: str, values: Any, present: np.ndarray | None = None) -> Rows:
        number, tag = self._field(name, _VARINT_TYPES)
        rows = self._rows(present)
        if np.ndim(values) == 0:
            return self._add(number, _Constant(tag + _varint_bytes(int(values) & ((1 << 64) - 1)), rows))
        return self._add(number, _Varint(tag, self._values(values, rows), rows))

    def fixed64(self, name: str, values: Any, present: np.ndarray | None = None) -> Rows:
        """A fixed64 field, one value per row that has it (a repeated field may be added again)."""
        number, tag = self._field(name, {6, 16})
        rows = self._rows(present)
        return self._add(number, _Fixed64(tag, self._values(values, rows), rows))

    def repeated_fixed64(self, name: str, values: np.ndarray, counts: np.ndarray) -> Rows:
        """A repeated fixed64 field, unpacked: ``counts[i]`` values for row ``i``, in row order."""
        number, tag = self._field(name, {6, 16})
        counts = np.asarray(counts, np.int64)
        if len(counts) != self.n or int(counts.sum()) != len(values):
            raise ValueError(f"{name}: {len(values)} values for counts of {len(counts)} rows summing to {int(counts.sum())}")
        return self._add(number, _RepeatedFixed64(tag, np.asarray(values, np.int64), counts))

    def message(self, name: str, rows: Rows, present: np.ndarray | None = None) -> Rows:
        number, tag = self._field(name, {_MESSAGE_TYPE})
        where = self._rows(present)
        if rows.n != (self.n if where is None else len(where)):
            raise ValueError(f"{rows.n} rows of {name} for {self.n if where is None else len(where)} rows that have it")
        return self._add(number, _Message(tag, rows, where))

    def encoded(self, number: int, blobs: list[bytes], which: np.ndarray) -> Rows:
        """Fields already encoded (tag and all) by the protobuf library, for what is rare or
        irregular: row ``i`` gets ``blobs[which[i]]``, none where ``which[i] < 0``. ``number``
        is the field number the blobs hold, for the field order."""
        return self._add(number, _Encoded(blobs, np.asarray(which, np.int64)))

    def _values(self, values: Any, rows: np.ndarray | None) -> np.ndarray:
        v = np.asarray(values, np.int64)
        want = self.n if rows is None else len(rows)
        if v.shape != (want,):
            raise ValueError(f"{v.shape[0] if v.ndim else 1} values for {want} rows")
        return v

    def sizes(self) -> np.ndarray:
        """Each row's encoded size in bytes."""
        if self._size is None:
            size = np.zeros(self.n, np.int64)
            for _, _, part in self._parts:
                part.add_to(size)
            self._size = size
        return self._size

    def write(self, out: np.ndarray, at: np.ndarray) -> None:
        """Write every row at its offset in ``out`` (uint8)."""
        cursor = np.array(at, np.int64)
        for _, _, part in sorted(self._parts, key=lambda p: (p[0], p[1])):
            part.write(out, cursor)
            part.add_to(cursor)  # past what it wrote

    def tobytes(self) -> bytes:
        """The rows one after the other (a ``Trace`` of packets is its ``packet`` rows so)."""
        size = self.sizes()
        at = np.zeros(self.n, np.int64)
        np.cumsum(size[:-1], out=at[1:])
        out = np.zeros(int(size.sum()), np.uint8)
        self.write(out, at)
        return out.tobytes()


class _Part:
    """One field of the rows that have it (``rows``; None: all), ``size`` bytes each (one number,
    or one per row that has it); ``write`` puts it at ``cursor[rows]``."""

    rows: np.ndarray | None = None
    size: np.ndarray | int = 0

    def add_to(self, offsets: np.ndarray) -> None:
        """Add the field's size to ``offsets`` (row sizes, or a cursor) of the rows that have it."""
        if self.rows is None:
            offsets += self.size
        else:
            offsets[self.rows] += self.size

    def _at(self, cursor: np.ndarray) -> np.ndarray:
        return cursor if self.rows is None else cursor[self.rows]

    def write(self, out: np.ndarray, cursor: np.ndarray) -> None:
        raise NotImplementedError


class _Constant(_Part):
    def __init__(self, data: bytes, rows: np.ndarray | None):
        self.data, self.rows, self.size = data, rows, len(data)

    def write(self, out, cursor) -> None:
        put_bytes(out, self._at(cursor), self.data)


class _Varint(_Part):
    def __init__(self, tag: bytes, values: np.ndarray, rows: np.ndarray | None):
        self.tag, self.values, self.rows = tag, values, rows
        self.size = len(tag) + varint_size(values)

    def write(self, out, cursor) -> None:
        at = self._at(cursor)
        put_bytes(out, at, self.tag)
        put_varints(out, at + len(self.tag), self.values)


class _Fixed64(_Part):
    def __init__(self, tag: bytes, values: np.ndarray, rows: np.ndarray | None):
        self.tag, self.values, self.rows, self.size = tag, values, rows, len(tag) + 8

    def write(self, out, cursor) -> None:
        at = self._at(cursor)
        put_bytes(out, at, self.tag)
        _put_fixed64(out, at + len(self.tag), self.values)


class _RepeatedFixed64(_Part):
    def __init__(self, tag: bytes, values: np.ndarray, counts: np.ndarray):
        self.tag, self.values, self.counts = tag, values, counts
        self.size = counts * (len(tag) + 8)

    def write(self, out, cursor) -> None:
        counts = self.counts
        row = np.repeat(np.arange(len(counts)), counts)
        place = np.arange(len(row)) - np.repeat(np.cumsum(counts) - counts, counts)  # each value's place in its row
        at = cursor[row] + place * (len(self.tag) + 8)
        put_bytes(out, at, self.tag)
        _put_fixed64(out, at + len(self.tag), self.values)


class _Message(_Part):
    def __init__(self, tag: bytes, rows: Rows, where: np.ndarray | None):
        self.tag, self.inner, self.rows = tag, rows, where
        inner = rows.sizes()
        self.head = len(tag) + varint_size(inner)
        self.size = self.head + inner

    def write(self, out, cursor) -> None:
        at = self._at(cursor)
        put_bytes(out, at, self.tag)
        put_varints(out, at + len(self.tag), self.size - self.head)
        self.inner.write(out, at + self.head)


class _Encoded(_Part):
    def __init__(self, blobs: list[bytes], which: np.ndarray):
        self.buffer = np.frombuffer(b"".join(blobs), np.uint8)
        length = np.array([len(b) for b in blobs] + [0], np.int64)  # [-1]: none
        self.start = np.concatenate([[0], np.cumsum(length[:-1])]).astype(np.int64)
        self.which = which
        self.size = self.lengths = length[which]

    def write(self, out, cursor) -> None:
        length = self.lengths
        total = int(length.sum())
        if total:
            inside = np.arange(total) - np.repeat(np.cumsum(length) - length, length)
            out[np.repeat(cursor, length) + inside] = self.buffer[np.repeat(self.start[self.which], length) + inside]


def _put_fixed64(out: np.ndarray, at: np.ndarray, values: np.ndarray) -> None:
    little = np.ascontiguousarray(values, "<i8").view(np.uint8).reshape(-1, 8)
    for k in range(8):
        out[at + k] = little[:, k]
