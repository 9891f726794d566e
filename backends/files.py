"""Writing output files atomically: a failure never leaves a partial file, and a reader never
sees one half-written. Everything layerc writes goes through here."""

from __future__ import annotations

import gzip
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator

from layerc.ir.diagnostics import LayercError


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path beside ``path``; on success it is renamed over ``path``, else deleted.
    For writers that need a file name (SQLite) rather than a file object."""
    path = Path(path)
    if path.is_dir():
        raise LayercError(f"cannot write {path}: it is a directory", str(path))
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise LayercError(f"cannot write {path}: no directory {directory}", str(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    except OSError as e:
        raise LayercError(f"cannot write {path}: {e.strerror}", str(path)) from None
    os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; outputs are ordinary files
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


@contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """``open(path, mode)`` that only appears complete; a binary ``.gz`` path is gzipped."""
    with atomic_path(path) as tmp:
        if "b" in mode:
            with open(tmp, mode, buffering=1 << 20) as raw:
                if str(path).endswith(".gz"):
                    with gzip.GzipFile(filename=Path(path).name[:-3], mode="wb", fileobj=raw, compresslevel=3, mtime=0) as z:
                        yield z
                else:
                    yield raw
        else:
            with open(tmp, mode, encoding="utf-8", newline="") as f:
                yield f


def write_atomic(path: str | os.PathLike, data: str | bytes) -> None:
    with atomic_open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def output_dir(path: str | os.PathLike) -> Path:
    """The directory ``path``, made if missing; a clear error (not an OS traceback) where a file
    or something unwritable stands in the way."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise LayercError("a file, not a directory", str(out))
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise LayercError(f"cannot make the directory {out}: {e.strerror}", str(out)) from None
    return out
