"""Reading any trace: Nsight Systems exports and PyTorch profiler traces, told apart by content."""

from __future__ import annotations

from pathlib import Path

from layerc.grammar import inputs
from layerc.grammar.kineto import KINDS, read_kineto
from layerc.grammar.nsys import read_nsys
from layerc.ir.diagnostics import ParseError
from layerc.ir.trace import Trace


def read_trace(path: str | Path, kinds=KINDS) -> Trace:
    """The trace at ``path``, rows that no clock can have produced left out (and counted)."""
    trace = _read(path, kinds)
    trace.drop_invalid()
    return trace


def _read(path: str | Path, kinds) -> Trace:
    path = inputs.check_file(path)
    if path.suffix == ".nsys-rep":
        return read_nsys(path)
    with inputs.open_raw(path) as f:
        head = f.read(16)
    if head.startswith(b"SQLite format 3"):
        return read_nsys(path)
    if inputs.compression(head) or head.lstrip()[:1] in (b"{", b"["):
        return read_kineto(path, kinds)
    if not head:
        raise ParseError("the file is empty", str(path))
    raise ParseError("not a trace: neither an Nsight Systems SQLite export nor PyTorch profiler JSON", str(path))
