"""Reading any trace: Nsight Systems exports and PyTorch profiler traces, told apart by content."""

from __future__ import annotations

from pathlib import Path

from typing import TYPE_CHECKING

from layerc.grammar import inputs
from layerc.ir.diagnostics import ParseError

if TYPE_CHECKING:
    from layerc.ir.trace import Trace

#: the tables a PyTorch profiler trace fills (the reader of each format loads when its format is met)
KINDS = frozenset({"kernels", "launches", "cpu_ops", "annotations", "memops", "modules"})
#: kernels from which the memory a reader freed is handed back at once (a smaller trace's reading
#: frees too little to repay the lookup), and from which the commands keep an analysis's freed
#: memory for reuse
RELEASE_FROM = 1 << 16


def read_trace(path: str | Path, kinds: frozenset[str] = KINDS, geometry: bool = True) -> Trace:
    """The trace at ``path``, rows that no clock can have produced left out (and counted), every
    table in start order. ``geometry=False``: kernels' grid, block, registers and shared memory
    are not read (-1, held once), for what does not show them: a fifth of a Kineto kernel's
    reading, most of its launch columns."""
    trace = _read(path, kinds, geometry)
    trace.drop_invalid()
    trace.compact()
    trace.in_start_order()
    if len(trace.kernels) >= RELEASE_FROM:
        inputs.release_freed()
    return trace


def _read(path: str | Path, kinds: frozenset[str], geometry: bool) -> Trace:
    path = inputs.check_file(path)
    head = b""
    if path.suffix != ".nsys-rep":
        with inputs.open_raw(path) as f:
            head = f.read(16)
    if path.suffix == ".nsys-rep" or head.startswith(b"SQLite format 3"):
        from layerc.grammar.nsys import read_nsys

        return read_nsys(path, geometry)
    if inputs.compression(head) or head.lstrip()[:1] in (b"{", b"["):
        from layerc.grammar.kineto import read_kineto

        return read_kineto(path, kinds, geometry=geometry)
    if not head:
        raise ParseError("the file is empty", str(path))
    raise ParseError("not a trace: neither an Nsight Systems SQLite export nor PyTorch profiler JSON", str(path))
