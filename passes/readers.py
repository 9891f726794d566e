"""Reading any input into the module of its IR (``grammar.input_kinds`` tells which), so that
one command (``layerc opt INPUT -p PIPELINE``) runs any pipeline on any input.

Other packages add readers through the ``layerc.readers`` entry-point group: the object named
has ``ir`` (a name from ``registry.IRS`` or its own), ``accepts(path) -> bool`` and
``read(path) -> module``, and is tried before the built-in readers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from layerc.grammar.input_kinds import input_kind
from layerc.ir.diagnostics import LayercError

if TYPE_CHECKING:
    from layerc.ir.graph import Module
    from layerc.ir.memory import MemoryModule
    from layerc.passes.optrace_passes import OpTraceModule
    from layerc.passes.trace_passes import TraceModule


@dataclass(frozen=True)
class ReadOptions:
    """What some readers need beyond the path: a dump directory's file and syntax, an op tree's
    entry class."""

    file: str | None = None
    syntax: str = "auto"
    entry: str | None = None


def read_module(path: str | Path, options: ReadOptions = ReadOptions()) -> tuple[str, Any]:
    """(IR, module) of the input at ``path``."""
    for reader in _plugins():
        if reader.accepts(path):
            return reader.ir, reader.read(path)
    ir = input_kind(path)
    return ir, _READ[ir](path, options)


def _graph(path: str | Path, o: ReadOptions) -> Module:
    from layerc.grammar.dumps import load

    return load(path, file=o.file, syntax=o.syntax)


def _trace(path: str | Path, o: ReadOptions) -> TraceModule:
    from layerc.grammar.traces import read_trace
    from layerc.passes.trace_passes import TraceModule

    return TraceModule(read_trace(path))


def _mem(path: str | Path, o: ReadOptions) -> MemoryModule:
    from layerc.grammar.ws_memory import read_ws_memory

    return read_ws_memory(path)


def _optree(path: str | Path, o: ReadOptions) -> OpTraceModule:
    from layerc.grammar.pysource import SourceSet
    from layerc.passes.optrace_passes import OpTraceModule

    if not o.entry:
        raise LayercError("model source needs its entry class: --entry CLASS (or package.module:Class)", str(path))
    return OpTraceModule(SourceSet(path), o.entry)


_READ = {"graph": _graph, "trace": _trace, "mem": _mem, "optree": _optree}


def _plugins() -> list[Any]:
    from importlib.metadata import entry_points

    found = []
    for ep in entry_points(group="layerc.readers"):
        try:
            found.append(ep.load())
        except Exception as e:  # third-party code failing at import
            raise LayercError(f"reader plugin {ep.value} failed to load: {type(e).__name__}: {e}") from None
    return found
