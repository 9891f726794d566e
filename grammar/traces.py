"""Reading any trace: Nsight Systems exports and PyTorch profiler traces, told apart by content."""

from __future__ import annotations

from pathlib import Path

from layerc.grammar.kineto import KINDS, read_kineto
from layerc.grammar.nsys import read_nsys
from layerc.ir.diagnostics import LayercError, ParseError
from layerc.ir.trace import Trace


def read_trace(path: str | Path, kinds=KINDS) -> Trace:
    path = Path(path)
    if not path.is_file():
        raise LayercError(f"no such file: {path}", str(path))
    if path.suffix == ".nsys-rep":
        return read_nsys(path)
    with path.open("rb") as f:
        head = f.read(16)
    if head.startswith(b"SQLite format 3"):
        return read_nsys(path)
    if head[:2] == b"\x1f\x8b" or head.lstrip()[:1] in (b"{", b"["):
        return read_kineto(path, kinds)
    if not head:
        raise ParseError("the file is empty", str(path))
    raise ParseError("not a trace: neither an Nsight Systems SQLite export nor PyTorch profiler JSON", str(path))
