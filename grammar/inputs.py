"""Opening inputs: one place that every reader goes through.

A file is opened by its path, checked to be a regular file (or a directory where a reader takes
one) that can be read, and remembered, so that no output can ever be written over it
(``layerc.backends.outputs`` asks :func:`is_input`). Compressed files (gzip, bzip2, xz, and zstd
when ``zstandard`` is installed) are inflated as a stream, with a limit on what comes out: a
small file that inflates to gigabytes is a clear error, not a machine out of memory. SQLite
databases open read-only through a percent-quoted ``file:`` URI, so every name (``r%20x``,
``run#1``, ``a?b``) opens exactly that file.
"""

from __future__ import annotations

import os
import stat
import urllib.parse
from pathlib import Path
from typing import IO, Generator, Iterator

from layerc.ir.diagnostics import LayercError, Location, ParseError

#: Without ``--max-decompressed``: inflated data may be this many times the compressed file ...
MAX_RATIO = 100
#: ... or this size, whichever is larger (real traces inflate 5-20x; bombs 1000x).
MIN_LIMIT = 256 << 20

_limit: int | None = None  # an absolute limit from --max-decompressed; 0 = none
_inputs: set[tuple[int, int, int, int]] = set()  # ``_identity`` of everything opened

_MAGIC = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz", b"\x28\xb5\x2f\xfd": "zstd"}


def set_max_decompressed(limit: int | None) -> None:
    """An absolute limit on the bytes one compressed input may inflate to (0: no limit; None:
    the default rule, ``max(MIN_LIMIT, MAX_RATIO x the file's size)``)."""
    global _limit
    _limit = limit


def parse_size(text: str) -> int:
    """``512M``, ``20G``, ``1.5T``, ``1000000`` or ``0`` (no limit) as bytes; ValueError otherwise."""
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = 1
    if text and text[-1] in "KMGT":
        scale = 1 << (10 * ("KMGT".index(text[-1]) + 1))
        text = text[:-1]
    value = float(text)
    if not value >= 0 or value == float("inf"):
        raise ValueError(text)
    return int(value * scale)


def is_input(st: os.stat_result) -> bool:
    """Whether the file with this stat was opened as an input in this process."""
    return _identity(st) in _inputs


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    """A file, as long as it lives unchanged: its device and inode, when the inode last changed,
    and its size. A file made after another was deleted may get its inode, hardly ever its change
    time and size too: a program that reads a file, deletes it and later writes a new one (a test
    run does) is not refused the new one."""
    return st.st_dev, st.st_ino, st.st_ctime_ns, st.st_size


def remember(path: str | os.PathLike) -> None:
    """Note ``path`` as an input (for readers that open files with another library)."""
    try:
        st = os.stat(path)
    except OSError:
        return
    _inputs.add(_identity(st))


def check_file(path: str | os.PathLike, *, directory: bool = False, what: str = "file") -> Path:
    """``path`` as a Path once it is known to be a readable regular file (or, with
    ``directory``, a directory too); otherwise a LayercError that names it and says why."""
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise LayercError(f"no such {what}" if not directory else "no such file or directory", str(p)) from None
    except OSError as e:
        raise LayercError(f"cannot read: {e.strerror}", str(p)) from None
    if stat.S_ISDIR(st.st_mode):
        if not directory:
            raise LayercError(f"a directory, not a {what}", str(p))
    elif not stat.S_ISREG(st.st_mode):
        raise LayercError(f"{_kind(st.st_mode)}, not a regular file: layerc reads inputs it can read twice "
                          "(write the data to a file first)", str(p))
    if not os.access(p, os.R_OK | (os.X_OK if stat.S_ISDIR(st.st_mode) else 0)):
        raise LayercError("cannot read: permission denied", str(p))
    _inputs.add(_identity(st))
    return p


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def open_raw(path: str | os.PathLike) -> IO[bytes]:
    """The file's own bytes (not inflated), after :func:`check_file`."""
    p = check_file(path)
    try:
        return open(p, "rb")
    except OSError as e:
        raise LayercError(f"cannot read: {e.strerror}", str(p)) from None


def compression(head: bytes) -> str | None:
    """``gzip``, ``bzip2``, ``xz`` or ``zstd`` from a file's first bytes; None for plain data."""
    for magic, name in _MAGIC.items():
        if head.startswith(magic):
            return name
    return None


def limit_for(compressed_size: int) -> int:
    """The most bytes a compressed input of this size may inflate to (0: no limit)."""
    if _limit is not None:
        return _limit
    return max(MIN_LIMIT, MAX_RATIO * compressed_size)


def byte_stream(path: str | os.PathLike, size: int = 1 << 16) -> Generator[bytes, None, None]:
    """The file's bytes, inflated on the fly when it is compressed, in pieces of at most about
    ``size`` bytes; past the decompression limit a LayercError. Broken compressed data is a
    ParseError that names the format."""
    f = open_raw(path)
    with f:
        head = f.read(8)
        f.seek(0)
        kind = compression(head)
        if kind is None:
            while block := f.read(size):
                yield block
            return
        compressed = os.fstat(f.fileno()).st_size
        limit = limit_for(compressed)
        total = 0
        for block in _inflate(f, kind, size, str(path), compressed):
            total += len(block)
            if limit and total > limit:
                raise LayercError(
                    f"{kind} data inflates past {human_size(limit)} (the file is {human_size(os.fstat(f.fileno()).st_size)}): "
                    "a decompression bomb, or a larger input than expected; raise the limit with --max-decompressed SIZE",
                    str(path))
            yield block


def read_bytes(path: str | os.PathLike) -> bytes | bytearray:
    """The whole file, inflated when it is compressed (within the decompression limit), held
    once: grown in place, never joined from pieces."""
    data = bytearray()
    for block in byte_stream(path, 1 << 20):
        data += block
    return data


def read_text(path: str | os.PathLike) -> str:
    """The whole file as UTF-8 text; a bad byte is a located error."""
    return decode(read_bytes(path), str(path))


def decode(data: bytes | bytearray, path: str | None = None) -> str:
    """UTF-8 text; a bad byte is reported at its line and column."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        before = data[: e.start]
        line = before.count(b"\n") + 1
        col = e.start - (before.rfind(b"\n") + 1) + 1
        text = data.decode("utf-8", errors="replace")
        raise ParseError(f"invalid UTF-8 byte 0x{data[e.start]:02x}", path, Location(line, col)).with_source(path, text) from None


def _inflate(f: IO[bytes], kind: str, size: int, source: str, compressed: int) -> Iterator[bytes]:
    if kind == "gzip":
        yield from _inflate_gzip(f, size, source, compressed >= ISAL_FROM)
        return
    if kind == "zstd":
        try:
            import zstandard
        except ImportError:
            raise LayercError("a zstd-compressed file: reading it needs the 'zstandard' package "
                              "(pip install zstandard), or decompress it first", source) from None
        reader = zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True)
        try:
            while block := reader.read(size):
                yield block
        except zstandard.ZstdError as e:
            raise ParseError(f"corrupt zstd data: {e}", source) from None
        return
    import bz2
    import lzma

    new = bz2.BZ2Decompressor if kind == "bzip2" else lzma.LZMADecompressor
    z, pending = new(), b""
    try:
        while True:
            if not pending and z.needs_input:
                pending = f.read(size // 2)
                if not pending:
                    break
            yield z.decompress(pending, size)
            pending = b""
            if z.eof:  # a stream ends; another may follow (pbzip2, concatenated xz)
                pending = z.unused_data
                if not pending.strip(b"\0") and not (pending := f.read(size // 2)).strip(b"\0"):
                    return
                z = new()
    except (OSError, EOFError, lzma.LZMAError, ValueError) as e:
        raise ParseError(f"corrupt {kind} data: {e}", source) from None
    if not z.eof:
        raise ParseError(f"truncated {kind} file (it ends before the compressed stream does)", source)


#: gzip files from this size on are inflated by Intel ISA-L, about four times faster than zlib
#: (same interface); below it, ISA-L's import (about 1 ms) costs more than its speed saves
ISAL_FROM = 1 << 16


def _inflate_gzip(f: IO[bytes], size: int, source: str, isal: bool = True) -> Iterator[bytes]:
    import zlib

    if isal:
        try:
            from isal import isal_zlib as zlib  # type: ignore[no-redef]
        except ImportError:  # pragma: no cover - a platform without an isal wheel
            pass
    z = zlib.decompressobj(wbits=31)
    try:
        while block := f.read(size // 2):
            while block:
                yield z.decompress(block, size)
                block = z.unconsumed_tail
                if z.eof and z.unused_data:  # concatenated gzip members
                    block = z.unused_data
                    if not block.strip(b"\0"):  # zero padding after the last member
                        return
                    z = zlib.decompressobj(wbits=31)
        yield z.flush()
    except zlib.error as e:  # type: ignore[misc]  # isal's stub types ``error`` as an instance, not a class
        raise ParseError(f"corrupt gzip data: {e}", source) from None
    if not z.eof:
        raise ParseError("truncated gzip file (it ends before the compressed stream does)", source)


def sqlite_connect(path: str | os.PathLike):
    """A read-only connection to exactly the database at ``path``, whatever characters its name
    holds (the URI is percent-quoted; a bare path would be read as URI syntax)."""
    import sqlite3

    p = check_file(path)
    try:
        return sqlite3.connect(_sqlite_uri(p), uri=True)
    except sqlite3.Error as e:
        raise LayercError(f"cannot open {p} as an SQLite database: {e}", str(p)) from None


def _sqlite_uri(path: Path) -> str:
    return "file:" + urllib.parse.quote(os.path.abspath(path), safe="/") + "?mode=ro&immutable=1"


class ColumnsError(ValueError):
    """What :func:`sqlite_columns` could not read: a value that is not a 64-bit integer."""


def sqlite_columns(path: str | os.PathLike, select: list[str], source: str, count: int) -> list:
    """``SELECT select source`` (``source``: ``FROM table [WHERE ...]``) over the database at
    ``path`` as ``count``-row int64 numpy arrays, one per selected column, in rowid order.

    ADBC's SQLite driver reads the rows into Arrow batches in C, which are copied one by one into
    the arrays: rows never become Python objects (the sqlite3 module makes one per value, 4x the
    time on a 1M-row table). A long select is split in two queries read on two threads (the driver
    does not hold the GIL), every other column each, which meet by rowid order (the kernels' first
    and last seven columns took 0.43 and 0.58 s at 1M rows; every other one, 0.51 s for both).
    Opened as :func:`sqlite_connect` opens it.
    A value that is not a 64-bit integer (NULL, text, real: the driver types a column by its first
    batch) raises :class:`ColumnsError`, for the caller to find and name it."""
    if len(select) < 8:
        return _sqlite_columns(path, select, source, count)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:  # every other column each: costly expressions, often side by side, apart
        parts = list(pool.map(lambda part: _sqlite_columns(path, part, source, count), (select[0::2], select[1::2])))
    if len(parts[0][0]) != len(parts[1][0]):
        raise ColumnsError("the table changed while it was read")
    out = [None] * len(select)
    out[0::2], out[1::2] = parts
    return out


def _sqlite_columns(path: str | os.PathLike, select: list[str], source: str, count: int, batch_rows: int = 1 << 16) -> list:
    # The driver manager's own statement API, its stream read by pyarrow (which lets go of the
    # GIL while the driver steps through rows); the DB-API module would also import pyarrow's
    # datasets and pandas (0.2 s).
    import numpy as np

    try:
        import adbc_driver_manager
        import adbc_driver_sqlite
        import pyarrow as pa
    except ImportError as e:  # pragma: no cover - declared dependencies, but say what to install
        raise LayercError(f"reading an Nsight Systems export needs adbc-driver-sqlite and pyarrow "
                          f"(pip install adbc-driver-sqlite pyarrow): {e}", str(path)) from None
    out = [np.empty(count, np.int64) for _ in select]
    at = 0
    try:
        with adbc_driver_sqlite.connect(_sqlite_uri(check_file(path))) as db, adbc_driver_manager.AdbcConnection(db) as conn, \
                adbc_driver_manager.AdbcStatement(conn) as statement:
            try:
                statement.set_options(**{"adbc.sqlite.query.batch_rows": str(batch_rows)})
            except adbc_driver_manager.Error:  # a driver without the option: its own batch size
                pass
            statement.set_sql_query(f"SELECT {', '.join(select)} {source} ORDER BY rowid")
            stream, _ = statement.execute_query()
            with pa.RecordBatchReader.from_stream(stream) as batches:  # (closed before its statement)
                for batch in batches:
                    n = batch.num_rows
                    if at + n > count:
                        raise ColumnsError(f"more rows than the {count} counted")
                    for i, column in enumerate(batch.columns):
                        if column.type != pa.int64() or column.null_count:
                            raise ColumnsError(f"'{select[i]}' holds {column.type} values or NULL")
                        data = column.buffers()[1]  # (to_numpy would import pandas)
                        out[i][at:at + n] = np.frombuffer(data, np.int64, n, column.offset * 8)
                    at += n
    except (OSError, adbc_driver_manager.Error, pa.ArrowException) as e:
        raise ColumnsError(str(e)) from None
    return [c[:at] for c in out]


def human_size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def release_freed() -> None:
    """Hand the heap pages freed so far back to the operating system (glibc's ``malloc_trim``;
    elsewhere nothing): a reader frees most of what it allocated (decoded events, rows not kept)
    in holes between what it keeps, which glibc holds on to, so every later peak would count
    them again. On a 773K-kernel Kineto trace, 76 of the 200 MB held after reading."""
    trim = _libc("malloc_trim")
    if trim is not None:
        trim(0)


#: glibc's ``mallopt`` parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: blocks below this come from the heap, where a freed one is used again (glibc's own limit moves
#: up to 32 MB, and a column of 5M int64 values is 40 MB)
HEAP_BLOCKS_UP_TO = 256 << 20


def reuse_freed() -> None:
    """Keep freed heap memory for the next block (glibc's ``mallopt``; elsewhere nothing): an
    analysis over a large trace makes and drops hundreds of whole-column temporaries, and glibc
    by default hands each back (a column over 32 MB is mapped and unmapped, the heap's top above
    a dynamic threshold is trimmed), so every next one is page-faulted in afresh. The 1M- and
    5M-kernel exports took 7% and 13% less time for 2% and 5% more peak memory. A setting of the
    whole process: the commands make it; a program that calls layerc's readers keeps its own."""
    mallopt = _libc("mallopt")
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, HEAP_BLOCKS_UP_TO)
        mallopt(_M_TRIM_THRESHOLD, (1 << 31) - 1)  # (a C int) release_freed trims when a reader is done


def _libc(name: str):
    """A glibc function (None where the C library is another: macOS, musl)."""
    if name not in _LIBC:
        try:
            import ctypes

            _LIBC[name] = getattr(ctypes.CDLL("libc.so.6"), name, None)
        except (OSError, AttributeError):  # not glibc: its allocator decides alone
            _LIBC[name] = None
    return _LIBC[name]


_LIBC: dict[str, object] = {}  # glibc functions, once looked up (None: none)
