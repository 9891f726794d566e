"""Mutations of a valid input, by class, drawn by hypothesis.

A mutation is data (its class and the numbers it was drawn with), so a case can be printed,
saved and replayed; :func:`apply` turns a sample's bytes into the mutated bytes. SQLite inputs
also get mutations of their own (:func:`apply_sqlite`): a used column's values swapped to
another storage class, a table or column dropped, ids made huge.
"""

from __future__ import annotations

import gzip
import re
import sqlite3
import zlib
from dataclasses import dataclass

from hypothesis import strategies as st

#: Numbers that have broken readers: overflows, NaN/inf, negative counts, ids sized like memory.
EXTREMES = (b"1e308", b"-1e308", b"-1", b"0", b"9223372036854775808", b"-9223372036854775809", b"NaN", b"Infinity",
            b"1000000000", b"2147483648", b"4294967296", b"1e-320", b"99999999999999999999999999999999")
_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_STRING = re.compile(rb'"(?:[^"\\\n]|\\.){1,200}"')

TEXT_CLASSES = ("flip", "truncate", "splice", "extreme", "nesting", "huge_token", "lines", "type_swap", "gzip", "bomb")
SQLITE_CLASSES = ("sql_type", "sql_drop_table", "sql_drop_column", "sql_huge_id", "flip", "truncate")


@dataclass(frozen=True)
class Mutation:
    kind: str
    a: float = 0.0  #: where, as a fraction of the input
    b: float = 0.0  #: a second place or a size, as a fraction
    n: int = 0  #: a count or an index

    def __str__(self) -> str:
        return f"{self.kind}(a={self.a:.4f}, b={self.b:.4f}, n={self.n})"


def mutations(classes: tuple[str, ...]) -> st.SearchStrategy[tuple[Mutation, ...]]:
    """One to three mutations of the given classes."""
    one = st.builds(Mutation, st.sampled_from(classes), st.floats(0, 1), st.floats(0, 1), st.integers(0, 1 << 16))
    return st.lists(one, min_size=1, max_size=3).map(tuple)


def apply(data: bytes, ms: tuple[Mutation, ...], other: bytes = b"") -> bytes:
    """The sample's bytes with every mutation applied in turn; ``other`` is spliced from."""
    for m in ms:
        data = _APPLY[m.kind](data, m, other) if m.kind in _APPLY else data
    return data


def _at(data: bytes, f: float) -> int:
    return min(int(f * len(data)), max(len(data) - 1, 0))


def _flip(data: bytes, m: Mutation, other: bytes) -> bytes:
    out = bytearray(data)
    for i in range(1 + m.n % 8):  # a few bytes near one place
        if out:
            j = (_at(data, m.a) + i * (1 + int(m.b * 997))) % len(out)
            out[j] = (out[j] ^ (1 << (m.n + i) % 8)) or 0x01
    return bytes(out)


def _truncate(data: bytes, m: Mutation, other: bytes) -> bytes:
    return data[: _at(data, m.a)]


def _splice(data: bytes, m: Mutation, other: bytes) -> bytes:
    other = other or data
    return data[: _at(data, m.a)] + other[_at(other, m.b):]


def _extreme(data: bytes, m: Mutation, other: bytes) -> bytes:
    numbers = list(_NUMBER.finditer(data, _at(data, m.a)))[:64] or list(_NUMBER.finditer(data))[:64]
    if not numbers:
        return data
    hit = numbers[m.n % len(numbers)]
    return data[: hit.start()] + EXTREMES[int(m.b * len(EXTREMES)) % len(EXTREMES)] + data[hit.end():]


def _nesting(data: bytes, m: Mutation, other: bytes) -> bytes:
    depth = 1000 + (m.n * 7) % 100_000
    opener, closer = [(b"[", b"]"), (b"(", b")"), (b"{", b"}"), (b'{"a":', b"}")][m.n % 4]
    at = _at(data, m.a)
    return data[:at] + opener * depth + b"1" + closer * (depth if m.b < 0.5 else 0) + data[at:]


def _huge_token(data: bytes, m: Mutation, other: bytes) -> bytes:
    size = (64 << 10) + int(m.b * (1 << 20))
    at = _at(data, m.a)
    return data[:at] + (b"A" * size if m.n % 2 else b"x<" * (size // 2)) + data[at:]


def _lines(data: bytes, m: Mutation, other: bytes) -> bytes:
    lines = data.split(b"\n")
    if len(lines) < 2:
        return data
    i, j = _at(lines, m.a), _at(lines, m.b)
    op = m.n % 3
    if op == 0:
        del lines[i]
    elif op == 1:
        lines.insert(j, lines[i])
    else:
        lines[i], lines[j] = lines[j], lines[i]
    return b"\n".join(lines)


def _type_swap(data: bytes, m: Mutation, other: bytes) -> bytes:
    """A number becomes a string, a list or an object, or a string becomes a number."""
    at = _at(data, m.a)
    if m.n % 2:
        hit = _NUMBER.search(data, at) or _NUMBER.search(data)
        repl = [b'"7"', b"[1,2]", b'{"x":1}', b"null", b"true", b'""'][m.n % 6]
    else:
        hit = _STRING.search(data, at) or _STRING.search(data)
        repl = [b"12", b"-1", b"null", b"[]", b"{}", b"1e400"][m.n % 6]
    return data if hit is None else data[: hit.start()] + repl + data[hit.end():]


def _gzip(data: bytes, m: Mutation, other: bytes) -> bytes:
    packed = gzip.compress(data, 1, mtime=0)
    return packed if m.b < 0.7 else packed[: _at(packed, 0.5 + m.a / 2)]  # sometimes cut short


def _bomb(data: bytes, m: Mutation, other: bytes) -> bytes:
    """About 300 KB that inflates past the default limit (256 MB), after a valid beginning."""
    filler = [b" ", b"\0", b"[", b'{"a":1},'][m.n % 4]
    block = filler * ((1 << 20) // len(filler))
    z = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip, fed a megabyte at a time: no 300 MB here
    out = [z.compress(data[: _at(data, m.a)])]
    out += [z.compress(block) for _ in range(300)]
    return b"".join(out) + z.flush()


_APPLY = {"flip": _flip, "truncate": _truncate, "splice": _splice, "extreme": _extreme, "nesting": _nesting,
          "huge_token": _huge_token, "lines": _lines, "type_swap": _type_swap, "gzip": _gzip, "bomb": _bomb}


# -- SQLite ------------------------------------------------------------------------------------
_SQL_VALUES = ("'text'", "1.5", "NULL", "x'00ff'", "-1", "9223372036854775807", "-9223372036854775808", "1000000000")


def apply_sqlite(path: str, ms: tuple[Mutation, ...]) -> None:
    """Mutate the database at ``path`` in place (a copy of the sample)."""
    for m in ms:
        if m.kind in ("flip", "truncate"):
            with open(path, "rb") as f:
                data = f.read()
            with open(path, "wb") as f:
                f.write(_APPLY[m.kind](data, m, b""))
            continue
        try:
            db = sqlite3.connect(path, isolation_level=None)
            tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
            if not tables:
                db.close()
                continue
            table = tables[m.n % len(tables)]
            cols = [r[1] for r in db.execute(f'PRAGMA table_info("{table}")')]
            col = cols[int(m.b * len(cols)) % len(cols)] if cols else None
            if m.kind == "sql_type" and col:
                value = _SQL_VALUES[int(m.a * len(_SQL_VALUES)) % len(_SQL_VALUES)]
                where = "" if m.n % 3 == 0 else f" WHERE rowid % {2 + m.n % 5} = 0"
                db.execute(f'UPDATE "{table}" SET "{col}" = {value}{where}')
            elif m.kind == "sql_drop_table":
                db.execute(f'DROP TABLE "{table}"')
            elif m.kind == "sql_drop_column" and col and len(cols) > 1:
                db.execute(f'ALTER TABLE "{table}" DROP COLUMN "{col}"')
            elif m.kind == "sql_huge_id" and col:
                db.execute(f'UPDATE "{table}" SET "{col}" = "{col}" + {[1 << 30, 1 << 40, 10**18][m.n % 3]} '
                           f'WHERE typeof("{col}") = \'integer\'')
            db.close()
        except sqlite3.Error:
            pass  # the mutation itself did not apply (a constraint, a broken file): keep what is there
