"""Mutations of a valid input, by class, drawn by hypothesis.

A mutation is data (its class and the numbers it was drawn with), so a case can be printed,
saved and replayed; :func:`apply` turns a sample's bytes into the mutated bytes. A compressed
sample is mutated inside (inflated, mutated, compressed again), and its compressed bytes can be
damaged too (``gz_flip``, ``gz_truncate``). SQLite inputs get mutations of their own
(:func:`apply_sqlite`): a column's values swapped to another storage class, a table or column
dropped, rows duplicated, ids made huge.
"""

from __future__ import annotations

import gzip
import itertools
import re
import sqlite3
import zlib
from dataclasses import dataclass

from hypothesis import strategies as st

#: Numbers that have broken readers: overflows, NaN/inf, negative counts, ids sized like memory.
EXTREMES = (b"1e308", b"-1e308", b"-1", b"0", b"9223372036854775808", b"-9223372036854775809", b"NaN", b"nan",
            b"Infinity", b"-Infinity", b"inf", b"1000000000", b"2147483648", b"4294967296", b"1e-320",
            b"99999999999999999999999999999999", b"1e400", b"-0")
#: Ids past every array a reader might size by them.
HUGE_IDS = (b"2147483648", b"4294967297", b"9007199254740993", b"9223372036854775807", b"18446744073709551616",
            b"1000000000000000000", b"1000000000000000000000000000000")
_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_INTEGER = re.compile(rb"(?<![\w.])\d{1,18}(?![\w.])")  # a whole number, not part of a name or a float
_STRING = re.compile(rb'"(?:[^"\\\n]|\\.){1,200}"')

TEXT_CLASSES = ("flip", "truncate", "splice", "extreme", "huge_id", "nesting", "huge_token", "lines", "type_swap",
                "gzip", "bomb")
#: Inside a compressed sample, plus damage to the compressed bytes themselves.
PACKED_CLASSES = TEXT_CLASSES + ("gz_flip", "gz_truncate")
SQLITE_CLASSES = ("sql_type", "sql_drop_table", "sql_drop_column", "sql_huge_id", "sql_dup_rows", "flip", "truncate")
#: A command-line argument: no NUL, no line structure worth mutating, at most ARG_MAX bytes.
ARGUMENT_CLASSES = ("flip", "truncate", "splice", "extreme", "huge_id", "nesting", "huge_token", "type_swap")


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
        data = _APPLY[m.kind](data, m, other)
    return data


def apply_packed(packed: bytes, ms: tuple[Mutation, ...], other: bytes = b"") -> bytes:
    """A gzip sample mutated inside: inflated, mutated, compressed again (unless a mutation
    already compressed it), then the compressed bytes damaged by the ``gz_*`` mutations."""
    inner = [m for m in ms if not m.kind.startswith("gz_")]
    data = apply(gzip.decompress(packed), tuple(inner), other)
    if not data.startswith(b"\x1f\x8b"):
        data = gzip.compress(data, 6, mtime=0)
    for m in ms:
        if m.kind.startswith("gz_"):
            data = _APPLY[m.kind[3:]](data, m, other)
    return data


def _at(data, f: float) -> int:
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


def _nth_from(pattern: re.Pattern, data: bytes, m: Mutation) -> re.Match | None:
    """One of the first 64 matches after the place ``m.a`` (or from the start), chosen by ``m.n``."""
    hits = list(itertools.islice(pattern.finditer(data, _at(data, m.a)), 64)) or \
        list(itertools.islice(pattern.finditer(data), 64))
    return hits[m.n % len(hits)] if hits else None


def _extreme(data: bytes, m: Mutation, other: bytes) -> bytes:
    hit = _nth_from(_NUMBER, data, m)
    if hit is None:
        return data
    return data[: hit.start()] + EXTREMES[int(m.b * len(EXTREMES)) % len(EXTREMES)] + data[hit.end():]


def _huge_id(data: bytes, m: Mutation, other: bytes) -> bytes:
    """Every occurrence of one whole number made huge: ids that still refer to each other."""
    hit = _nth_from(_INTEGER, data, m)
    if hit is None:
        return data
    huge = HUGE_IDS[int(m.b * len(HUGE_IDS)) % len(HUGE_IDS)]
    same = re.compile(rb"(?<![\w.])" + re.escape(hit.group()) + rb"(?![\w.])")
    return same.sub(huge, data)


def _nesting(data: bytes, m: Mutation, other: bytes) -> bytes:
    depth = 1000 + (m.n * 7) % 100_000
    opener, closer = [(b"[", b"]"), (b"(", b")"), (b"{", b"}"), (b'{"a":', b"}"), (b"<", b">")][m.n % 5]
    at = _at(data, m.a)
    return data[:at] + opener * depth + b"1" + closer * (depth if m.b < 0.5 else 0) + data[at:]


def _huge_token(data: bytes, m: Mutation, other: bytes) -> bytes:
    """A name, a number or a string of 64 KiB to 1 MiB where the input has one."""
    size = (64 << 10) + int(m.b * (1 << 20))
    token = [b"A" * size, b"x<" * (size // 2), b"9" * size, b'"' + b"s" * size + b'"'][m.n % 4]
    at = _at(data, m.a)
    return data[:at] + token + data[at:]


def _lines(data: bytes, m: Mutation, other: bytes) -> bytes:
    """A line deleted, duplicated elsewhere, or two lines swapped."""
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
    """About 300 KB that inflates past the default limit (256 MiB), after a valid beginning."""
    filler = [b" ", b"\0", b"[", b'{"a":1},'][m.n % 4]
    block = filler * ((1 << 20) // len(filler))
    z = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip, fed a megabyte at a time: no 300 MB here
    out = [z.compress(data[: _at(data, m.a)])]
    out += [z.compress(block) for _ in range(300)]
    return b"".join(out) + z.flush()


_APPLY = {"flip": _flip, "truncate": _truncate, "splice": _splice, "extreme": _extreme, "huge_id": _huge_id,
          "nesting": _nesting, "huge_token": _huge_token, "lines": _lines, "type_swap": _type_swap, "gzip": _gzip,
          "bomb": _bomb}


# -- SQLite ------------------------------------------------------------------------------------
#: What a column's values become: TEXT, REAL, NULL, BLOB, integer extremes, a 1 MB string.
_SQL_VALUES = ("'text'", "1.5", "NULL", "x'00ff'", "-1", "9223372036854775807", "-9223372036854775808", "1000000000",
               "1e308", "replace(hex(zeroblob(500000)), '0', 'x')", "''")


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
            try:
                _sql_mutation(db, m)
            finally:
                db.close()
        except sqlite3.Error:
            pass  # the mutation itself did not apply (a constraint, a broken file): keep what is there


def _tables(db: sqlite3.Connection, busiest: bool) -> list[str]:
    """Every table, or the 8 with the most rows: an export has dozens of enum and metadata tables,
    and the few that hold the events would otherwise be drawn rarely."""
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
    if not busiest:
        return tables
    rows = {t: db.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in tables}
    return sorted((t for t in tables if rows[t]), key=lambda t: (-rows[t], t))[:8]


def _sql_mutation(db: sqlite3.Connection, m: Mutation) -> None:
    tables = _tables(db, busiest=(m.n >> 8) % 2 == 1)
    if not tables:
        return
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
    elif m.kind == "sql_dup_rows":
        db.execute(f'INSERT OR IGNORE INTO "{table}" SELECT * FROM "{table}"')
