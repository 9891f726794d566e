"""What a module derives from its package's data files, kept beside the module's bytecode, as
Python keeps the bytecode: a small run reads it instead of deriving it again (the kernel tables'
TOML and the literals of their 139 regexes took about a sixth of a one-kernel trace's run).

An entry holds its key (the data it was derived from, whole: no digest to collide) and is used
only where the key is equal. It is written where Python would write bytecode (not under
``PYTHONDONTWRITEBYTECODE``, in ``sys.pycache_prefix`` where set), atomically, and never where
that fails: a read-only install derives the data each run, as before.
"""

from __future__ import annotations

import marshal
import os
import sys
from pathlib import Path
from typing import Any

#: bumped when what an entry holds changes shape (the key holds it too)
FORMAT = 1


def beside(module_file: str, suffix: str) -> Path | None:
    """The cache file for ``module_file`` (its bytecode's path, with ``suffix``), None where the
    interpreter keeps no bytecode cache."""
    try:
        from importlib.util import cache_from_source

        return Path(cache_from_source(module_file)).with_suffix("." + suffix)
    except (NotImplementedError, ValueError):
        return None


def stamp(path: str) -> tuple[int, int]:
    """A module's file as Python stamps its bytecode (modification time, size): a key holds the
    stamps of the code that derives what it keeps."""
    st = os.stat(path)
    return st.st_mtime_ns, st.st_size


def _stamped(key: Any) -> tuple[Any, ...]:
    return (FORMAT, sys.version, marshal.version, key)


def read(path: Path | None, key: Any) -> Any | None:
    """The data stored at ``path`` under ``key``; None where there is none, another key's, or an
    unreadable file."""
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            stored_key, data = marshal.loads(f.read())  # (marshal.load reads a file a few bytes at a time)
    except (OSError, EOFError, ValueError, TypeError):
        return None
    return data if stored_key == _stamped(key) else None


def writable(path: Path | None) -> bool:
    """Whether ``write`` would try: deriving what only the cache would use is wasted otherwise."""
    return path is not None and not sys.dont_write_bytecode


def write(path: Path | None, key: Any, data: Any) -> None:
    """Store ``data`` under ``key``: whole or not at all (a temporary file renamed over the old
    one, so a reader never sees half an entry), silently not where the folder is not writable."""
    if not writable(path):
        return
    assert path is not None
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "xb") as f:
            marshal.dump((_stamped(key), data), f)
        os.replace(tmp, path)
    except (OSError, ValueError):
        try:
            tmp.unlink()
        except OSError:
            pass
