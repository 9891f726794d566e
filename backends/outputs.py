"""Writing outputs: one place that every command and backend goes through.

- ``-`` is standard output.
- An existing special file (a character device such as ``/dev/null``, a FIFO, ``/dev/std*``,
  ``/dev/fd/N`` from ``>(cmd)``, a terminal) is opened and written in place: never renamed over.
- A regular file is written to a temporary file beside it and renamed over it, so no reader ever
  sees half a file; a symlink keeps pointing where it did, at the new file.
- No output is ever written over a file that this process read as an input
  (``layerc.grammar.inputs`` remembers every one).
- Inside a :func:`transaction` (the driver runs every command in one) files are only staged;
  they all appear together when it commits, and none does if it fails, is interrupted or is sent
  SIGTERM. A directory the transaction made is removed again when it stays empty.
"""

from __future__ import annotations

import atexit
import os
import signal
import stat
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Iterable, Iterator, cast

from layerc.grammar import inputs
from layerc.ir.diagnostics import LayercError

#: Temporary files not yet renamed or copied: removed at exit, whatever happened.
_live: set[str] = set()


@atexit.register
def _remove_live() -> None:
    for tmp in list(_live):
        _unlink(tmp)


def _unlink(tmp: str) -> None:
    try:
        os.unlink(tmp)
    except OSError:
        pass
    _live.discard(tmp)


@dataclass(frozen=True)
class _Target:
    """Where an output goes: ``rename`` over a regular file path, or ``copy`` into a special
    file (``fd`` 1 or 2 for the process's own standard output or error)."""

    path: str
    how: str  # "rename" or "copy"
    fd: int | None = None
    mode: int | None = None  # the mode of the regular file it replaces


def resolve(path: str | os.PathLike) -> _Target:
    """Where writing ``path`` goes, or a LayercError saying why it cannot."""
    text = os.fspath(path)
    if text == "-":
        return _Target("<stdout>", "copy", fd=1)
    try:
        st = os.stat(text)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise LayercError(f"cannot write {text}: {e.strerror}", text) from None
    if st is None:
        real = os.path.realpath(text)  # a dangling symlink: create what it points to
        parent = os.path.dirname(real) or "."
        if not os.path.isdir(parent):
            raise LayercError(f"cannot write {text}: no directory {os.path.dirname(text) or '.'}", text)
        return _Target(real, "rename")
    for fd in (1, 2):
        try:
            own = os.fstat(fd)
        except OSError:
            continue
        if (own.st_dev, own.st_ino) == (st.st_dev, st.st_ino) and not stat.S_ISREG(st.st_mode):
            return _Target(text, "copy", fd=fd)
    if stat.S_ISDIR(st.st_mode):
        raise LayercError(f"cannot write {text}: it is a directory", text)
    if inputs.is_input(st):
        raise LayercError(f"refusing to write {text}: it is an input of this command", text)
    real = os.path.realpath(text)
    if not stat.S_ISREG(st.st_mode) or real.startswith(("/dev/", "/proc/")):
        return _Target(text, "copy")  # a device, FIFO, socket, terminal, or /dev/stdout itself
    return _Target(real, "rename", mode=stat.S_IMODE(st.st_mode))


@dataclass
class Transaction:
    """Staged outputs that appear all together on :meth:`commit`, or not at all."""

    #: where ``-`` goes (the driver's stdout, even while the command prints its report elsewhere)
    stdout: IO[str] | None = None
    staged: list[tuple[str, _Target]] = field(default_factory=list)
    made_dirs: list[Path] = field(default_factory=list)
    targets: set[str] = field(default_factory=set)

    def stage(self, path: str | os.PathLike) -> Path:
        """A new temporary file that becomes ``path`` at commit."""
        target = resolve(path)
        key = target.path if target.fd is None else f"<fd {target.fd}>"
        if key in self.targets and target.fd is None and target.how == "rename":
            raise LayercError(f"cannot write {os.fspath(path)} twice: two outputs name the same file", os.fspath(path))
        self.targets.add(key)
        where = os.path.dirname(target.path) if target.how == "rename" else None
        name = os.path.basename(target.path) if target.how == "rename" else "layerc-output"
        try:
            import tempfile  # (here: its import of random costs a small run 2 ms)

            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=where)
        except OSError as e:
            raise LayercError(f"cannot write {os.fspath(path)}: {e.strerror}", os.fspath(path)) from None
        _live.add(tmp)
        os.fchmod(fd, target.mode if target.mode is not None else 0o666 & ~_umask())
        os.close(fd)
        self.staged.append((tmp, target))
        return Path(tmp)

    def make_dir(self, path: str | os.PathLike) -> Path:
        out = Path(path)
        if out.exists() and not out.is_dir():
            raise LayercError("a file, not a directory", str(out))
        missing = []
        parent = out
        while not parent.exists():
            missing.append(parent)
            if parent.parent == parent:
                break
            parent = parent.parent
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise LayercError(f"cannot make the directory {out}: {e.strerror}", str(out)) from None
        self.made_dirs += reversed(missing)
        return out

    def commit(self) -> None:
        """Rename and copy every staged file into place, with SIGINT and SIGTERM held back so that
        the set is never cut in half."""
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            for tmp, target in self.staged:
                if target.how == "rename":
                    try:
                        os.replace(tmp, target.path)
                    except OSError as e:
                        raise LayercError(f"cannot write {target.path}: {e.strerror}", target.path) from None
                    _live.discard(tmp)
                else:
                    _copy_into(tmp, target, self.stdout)
                    _unlink(tmp)
            self.staged.clear()
            self.made_dirs.clear()
        finally:
            self.abort()
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def abort(self) -> None:
        for tmp, _ in self.staged:
            _unlink(tmp)
        self.staged.clear()
        for d in reversed(self.made_dirs):
            try:
                d.rmdir()  # only when empty: a directory someone else filled stays
            except OSError:
                pass
        self.made_dirs.clear()


def _copy_into(tmp: str, target: _Target, stdout: IO[str] | None) -> None:
    import shutil

    try:
        with open(tmp, "rb") as src:
            if target.fd is not None:
                stream: Any = (stdout or sys.stdout) if target.fd == 1 else sys.stderr  # a text stream with .buffer
                stream.flush()
                shutil.copyfileobj(src, stream.buffer, 1 << 20)
                stream.buffer.flush()
            else:
                with open(target.path, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
    except BrokenPipeError:
        raise
    except OSError as e:
        raise LayercError(f"cannot write {target.path}: {e.strerror}", target.path) from None


_current: Transaction | None = None


@contextmanager
def transaction(stdout: IO[str] | None = None) -> Iterator[Transaction]:
    """Every output written inside appears when the block ends normally, none otherwise;
    ``-`` goes to ``stdout`` (default: ``sys.stdout`` at commit)."""
    global _current
    outer, txn = _current, Transaction(stdout=stdout)
    _current = txn
    try:
        yield txn
        txn.commit()
    except BaseException:
        txn.abort()
        raise
    finally:
        _current = outer


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path to write (for writers that need a file name, such as SQLite): it becomes
    ``path`` with the enclosing transaction, or when the block ends if there is none."""
    if _current is not None:
        yield _current.stage(path)
        return
    with transaction() as txn:
        yield txn.stage(path)


@contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """``open(path, mode)`` whose file appears only complete; a binary ``.gz`` path is gzipped."""
    with atomic_path(path) as tmp, open_staged(tmp, path, mode) as f:
        yield f


@contextmanager
def open_staged(tmp: Path, path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """The staged file ``tmp`` of ``path`` opened for writing (gzipped when a binary ``path``
    ends in ``.gz``); a writer that reports its size reads ``tmp``'s after the block."""
    if "b" not in mode:
        with open(tmp, mode, encoding="utf-8", newline="") as f:
            yield f
        return
    with open(tmp, mode, buffering=1 << 20) as raw:
        if os.fspath(path).endswith(".gz"):
            import gzip

            with gzip.GzipFile(filename=Path(path).name[:-3], mode="wb", fileobj=raw, compresslevel=3, mtime=0) as z:
                yield cast(IO[bytes], z)
        else:
            yield raw


def write_atomic(path: str | os.PathLike, data: str | bytes) -> int:
    """Write ``data`` (gzipped for a binary ``.gz`` path); returns the bytes the file holds."""
    with atomic_path(path) as tmp:
        with open_staged(tmp, path, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
        return os.path.getsize(tmp)


def emit(text: str, output: str | None) -> None:
    """A command's main text: to ``output`` (a file, ``-``, a device) or, without one, stdout."""
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        write_atomic(output, text)


def is_stream(path: str | os.PathLike) -> bool:
    """Whether ``path`` is standard output or a special file (a device, a FIFO, ``/dev/fd/N``):
    somewhere without a directory of its own to put companions in or to link from."""
    return os.fspath(path) == "-" or resolve(path).how == "copy"


def is_terminal(path: str | os.PathLike) -> bool:
    """Whether writing ``path`` goes to a terminal (``-`` on one, or a tty device). Only a
    character device is opened to ask: a FIFO opened and closed would end its reader's input."""
    target = resolve(path)
    if target.fd is not None:
        return os.isatty(target.fd)
    if target.how != "copy":
        return False
    try:
        if not stat.S_ISCHR(os.stat(target.path).st_mode):
            return False
        fd = os.open(target.path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return False
    try:
        return os.isatty(fd)
    finally:
        os.close(fd)


def companion(path: str | os.PathLike, name: str) -> Path | None:
    """The file ``name`` beside the output ``path`` (a generated trace's ground truth), or None
    where ``path`` is a stream, which has no "beside"."""
    return None if is_stream(path) else Path(path).with_name(name)


def output_dir(path: str | os.PathLike) -> Path:
    """The directory ``path``, made with its parents when missing (and removed again if the
    command then fails); a clear error where a file or something unwritable stands in the way."""
    if _current is not None:
        return _current.make_dir(path)
    return Transaction().make_dir(path)


def check_paths(inputs_: Iterable[str], outputs: Iterable[str]) -> None:
    """Refuse, before anything is read, an output that is an input (the same file, through a
    symlink or a hard link too) or two outputs that are one file."""
    seen: dict[tuple[int, int], str] = {}
    for p in inputs_:
        st = _stat(p)
        if st is not None and not stat.S_ISDIR(st.st_mode):
            seen[(st.st_dev, st.st_ino)] = p
    written: dict[Any, str] = {}  # an existing file by (device, inode), a new one (or stdout) by its path
    for p in outputs:
        st = _stat(p) if p != "-" else None
        if st is not None and not stat.S_ISREG(st.st_mode):
            continue  # a device or a FIFO: writes to it stay writes to it
        key: Any = (st.st_dev, st.st_ino) if st is not None else ("-" if p == "-" else os.path.abspath(p))
        if key in seen:
            how = "" if os.path.abspath(p) == os.path.abspath(seen[key]) else f" ({p} and {seen[key]} are one file)"
            raise LayercError(f"refusing to write {p}: it is an input of this command{how}", p)
        if key in written:
            raise LayercError(f"two outputs name the same file: {written[key]} and {p}", p)
        written[key] = p


def _stat(p: str) -> os.stat_result | None:
    try:
        return os.stat(p)
    except OSError:
        return None


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
