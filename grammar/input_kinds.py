"""Which IR an input is, from its content (not its name): the reader ``layerc opt`` picks.

- ``trace``: an Nsight Systems export (SQLite, or ``.nsys-rep``) or PyTorch profiler JSON;
- ``mem``: a Triton warp-specialization memory-planner dump directory or debug log;
- ``optree``: Python model source (a ``.py`` file, a package directory, a wheel);
- ``graph``: an AutoDeploy dump (file or directory) or a torch.fx print.
"""

from __future__ import annotations

import re
from itertools import chain, islice
from pathlib import Path

from layerc.grammar import inputs
from layerc.grammar.ws_memory import FILE_PREFIXES, holds_graphs
from layerc.ir.diagnostics import LayercError

_HEAD = 1 << 16
_OVERLAP = 512  #: longer than any marker line
_MEM_FILE = re.compile("^(" + "|".join(FILE_PREFIXES.values()) + r").*\.dot$")
_DUMP_FILE = re.compile(r"^\d+_.*\.txt$")


def input_kind(path: str | Path) -> str:
    """``graph``, ``trace``, ``mem`` or ``optree`` (see the module doc); a located error when
    the input is none of them."""
    p = inputs.check_file(path, directory=True, what="file or directory")
    if p.is_dir():
        return _directory_kind(p)
    if p.suffix == ".nsys-rep":
        return "trace"
    if p.suffix == ".py":
        return "optree"
    with inputs.open_raw(p) as f:
        raw = f.read(16)
    if raw.startswith(b"SQLite format 3"):
        return "trace"
    if raw.startswith(b"PK\x03\x04"):
        return "optree"  # a wheel
    if not raw:
        raise LayercError("the file is empty", str(p))
    chunks = inputs.byte_stream(p, _HEAD)
    head = next(chunks, b"")
    if head.lstrip()[:1] in (b"{", b"["):
        return "trace"
    return "mem" if _holds_graphs(head, chunks) else "graph"


def _holds_graphs(head: bytes, rest) -> bool:
    """Whether the text holds a memory-planner graph anywhere (a debug log has compiler output
    before its first one), read in pieces that overlap by a line."""
    tail = b""
    for chunk in chain((head,), rest):
        text = (tail + chunk).decode("utf-8", "replace")
        if holds_graphs(text):
            return True
        tail = chunk[-_OVERLAP:]
    return False



def _directory_kind(p: Path) -> str:
    names = [c.name for c in islice(p.iterdir(), 100_000)]
    if any(_MEM_FILE.match(n) for n in names):
        return "mem"
    if any(_DUMP_FILE.match(n) for n in names):
        return "graph"
    if any(n.endswith(".py") for n in names):
        return "optree"
    raise LayercError("no input layerc reads in this directory: not an AutoDeploy dump directory (NNN_*.txt), "
                      "a TRITON_DUMP_WS_GRAPHS directory (*.dot) or a Python package", str(p))


_COMMENTED = (".py", ".dot", ".log", ".txt", ".gz", ".mlir", ".ttgir")
_MAX_COMMENTED = 10_000


def commented_files(path: str | Path) -> list[Path]:
    """The text files of an input that may hold expected-diagnostic comments: the file itself,
    or a directory's source and dump files (at most 10,000)."""
    p = Path(path)
    if p.is_file():
        return [p]
    return sorted(islice((f for f in p.rglob("*") if f.is_file() and f.suffix in _COMMENTED), _MAX_COMMENTED))
