"""Writing results: atomically, so a failure never leaves a partial file behind."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from layerc.ir.diagnostics import LayercError


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write to a temporary file beside ``path``, then rename it over ``path``."""
    path = Path(path)
    if path.is_dir():
        raise LayercError(f"cannot write {path}: it is a directory", str(path))
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise LayercError(f"cannot write {path}: no directory {directory}", str(path))
    mode = "wb" if isinstance(data, bytes) else "w"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # as an ordinary new file (mkstemp makes it 0600)
        with os.fdopen(fd, mode, **({} if mode == "wb" else {"encoding": "utf-8", "newline": ""})) as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def emit(text: str, output: str | None) -> None:
    """``-o FILE`` writes atomically; no ``-o`` (or ``-``) writes to stdout."""
    if output in (None, "-"):
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        write_atomic(output, text)
