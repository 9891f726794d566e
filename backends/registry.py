"""The emitter contract: every output of every IR is an :class:`Emitter`, found by (IR, format).

An emitter renders a module as text or bytes (a picture), or streams it into a file (Perfetto);
the passes whose results it reads are its ``requires`` (``layerc opt`` adds them to the
pipeline). ``layerc opt --emit FORMAT``, ``--print-ir-after-all`` and each command's outputs
(``layer``'s JSON/DOT/PNG/SVG, ``trace``'s JSON/CSV/Perfetto/tables, ``mem``'s JSON and Perfetto)
take their writers from here. Emitters load on first use.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING, Any, Callable, Literal

from layerc.ir.diagnostics import LayercError

if TYPE_CHECKING:  # a trace's outputs load no graph IR
    from layerc.ir.graph import Module

#: what a layer picture or document reads: one sliced layer with its ops grouped
_LAYER = ("slice-layer", "infer-groups")
#: what a trace's tables read: typed layers and the kernels' costs
_COSTED = ("type-layers", "measure-roofline")
#: what a memory plan's report reads: liveness and the checks' findings (``layerc mem``'s passes)
_MEM = ("mem-liveness", "mem-check")


@dataclass(frozen=True)
class Emitter:
    """One output format of one IR. ``output``: ``text`` and ``bytes`` emitters return the
    output; a ``stream`` emitter writes it to a path itself, in pieces; a ``directory`` emitter
    writes files under a directory it is given (it has no single text or bytes). Options (a trace's
    ``stage``, say) are keywords of the function, with defaults."""

    ir: str
    format: str
    target: str  #: "module:function"
    summary: str
    requires: tuple[str, ...] = ()
    output: Literal["text", "bytes", "stream", "directory"] = "text"

    def function(self) -> Callable[..., Any]:
        module, _, name = self.target.partition(":")
        return getattr(import_module(module), name)  # type: ignore[no-any-return]

    def __call__(self, module: Any, **options: Any) -> Any:
        """The output as text or bytes (a stream emitter's too, through a temporary file)."""
        if self.output == "directory":
            raise LayercError(f"the {self.ir} {self.format} output is a directory of files: write it to a path")
        if self.output != "stream":
            return self.function()(module, **options)
        import tempfile

        with tempfile.TemporaryDirectory(prefix="layerc-") as tmp:
            path = os.path.join(tmp, f"out.{self.format}")
            self.function()(module, path, **options)
            with open(path, "rb") as f:
                return f.read()

    def write(self, module: Any, path: str | os.PathLike[str], **options: Any) -> Any:
        """The output into ``path`` (``-``: stdout; a device or FIFO is written in place),
        atomically; bytes are refused on a terminal. Returns a stream emitter's figures, or the
        bytes written."""
        from layerc.backends.outputs import is_terminal, write_atomic

        if self.output == "directory":
            where = os.fspath(path)
            if where == "-" or (os.path.exists(where) and not os.path.isdir(where)):
                raise LayercError(f"the {self.ir} {self.format} output is a directory of files, and {where} is not one", where)
            return self.function()(module, path, **options)
        if self.output != "text" and is_terminal(path):
            raise LayercError(f"refusing to write {self.ir} {self.format} (binary) to a terminal: name a file with -o")
        if self.output == "stream":
            return self.function()(module, path, **options)
        return write_atomic(path, self.function()(module, **options))


#: every emitter; the first listed for an IR is its default
EMITTERS: tuple[Emitter, ...] = (
    Emitter("graph", "ad", "layerc.backends.autodeploy:print_module", "the AutoDeploy dump syntax"),
    Emitter("graph", "fx", "layerc.backends.registry:_fx", "torch.fx's graph print (one graph)"),
    Emitter("graph", "json", "layerc.backends.json_ir:dumps", "the IR as JSON"),
    Emitter("graph", "meta", "layerc.backends.graph_meta:print_meta", "one line per node with what the passes found"),
    Emitter("graph", "layer-json", "layerc.backends.layer_json:module_text", "the layer document (layer --format json)", _LAYER),
    Emitter("graph", "dot", "layerc.backends.layer_dot:module_dot", "the layer diagram's DOT", _LAYER),
    Emitter("graph", "png", "layerc.backends.layer_dot:module_png", "the layer diagram (Graphviz)", _LAYER, "bytes"),
    Emitter("graph", "svg", "layerc.backends.layer_dot:module_svg", "the layer diagram (Graphviz)", _LAYER, "bytes"),
    Emitter("trace", "text", "layerc.backends.trace_ir:print_trace", "one line per kernel"),
    Emitter("trace", "json", "layerc.backends.trace_report:json_text", "trace --json's document", _COSTED),
    Emitter("trace", "csv", "layerc.backends.trace_report:csv_module_text", "one row per layer (trace --csv)", ("type-layers",)),
    Emitter("trace", "table", "layerc.backends.trace_report:table_text", "trace's tables, as plain text", ("type-layers",)),
    Emitter("trace", "pftrace", "layerc.backends.trace_report:write_module_perfetto",
            "Perfetto timeline with passes and layers as spans, layer roofline counters", _COSTED, "stream"),
    Emitter("trace", "chrome-json", "layerc.backends.trace_report:write_module_chrome_json",
            "the same timeline as Chrome trace JSON", ("type-layers",), "stream"),
    Emitter("trace", "roofline-png", "layerc.backends.roofline_chart:write_roofline_png",
            "each kind of kernel at its arithmetic intensity and TFLOP/s under the GPU's roofs (trace --roofline)", _COSTED,
            "stream"),
    Emitter("trace", "parquet", "layerc.backends.trace_parquet:write_parquet",
            "kernels, layers, stages, types and passes as Parquet, partitioned by rank (trace --parquet DIR)", _COSTED,
            "directory"),
    Emitter("mem", "text", "layerc.backends.mem_report:ir_text", "one block per kernel"),
    Emitter("mem", "json", "layerc.backends.mem_report:json_text", "mem's memory.json", _MEM),
    Emitter("mem", "pftrace", "layerc.backends.mem_perfetto:write_memory_pftrace",
            "liveness and usage as a Perfetto timeline (mem's memory.pftrace)", _MEM, "stream"),
    Emitter("optree", "text", "layerc.backends.registry:_optree_text", "the op tree, with what the passes found"),
)


def formats(ir: str) -> list[str]:
    """The formats a module of ``ir`` can be emitted in, its default first."""
    return [e.format for e in EMITTERS if e.ir == ir]


def all_formats() -> list[str]:
    """Every format of every IR, once each (for a command line's choices)."""
    return list(dict.fromkeys(e.format for e in EMITTERS))


def emitter(ir: str, fmt: str | None = None) -> Emitter:
    """The emitter of ``ir`` in ``fmt`` (default: the IR's first format)."""
    fmt = fmt or formats(ir)[0]
    for e in EMITTERS:
        if (e.ir, e.format) == (ir, fmt):
            return e
    raise LayercError(f"the {ir} IR has no '{fmt}' output (it has: {', '.join(formats(ir))})")


def _fx(module: Module) -> str:
    from layerc.backends.fx import print_graph

    if len(module.graphs) != 1:
        names = ", ".join(str(g.name) for g in module.graphs)
        raise LayercError(f"torch.fx text holds one graph; pick a section with --section ({names})")
    return print_graph(module.graphs[0]) + "\n"


def _optree_text(module: Any) -> str:
    from layerc.backends.optrace import graph_lines

    lines = graph_lines(module.tree, lambda site: f"{site.path}#L{site.line}") if module.tree else []
    v = getattr(module, "validation", None)
    if v is not None:  # what cross-validate-kernels found
        lines.append(f"cross-validation: {len(v.kernels)} kernels in {v.chains} call chains, {len(v.unmapped)} unmapped, "
                     f"{len(v.ops_without_kernels)} ops without a kernel")
        for category, names in sorted(v.categories.items()):
            lines.append(f"  {category}: " + ", ".join(f"{k} <- {' '.join(v.kernels[k])}" for k in names))
        for op in v.ops_without_kernels:
            where = f" ({op.site.path}:{op.site.line})" if op.site else ""
            lines.append(f"  no kernel: {op.label}{where}")
    a = getattr(module, "dynamic", None)
    if a is not None:  # what profile-ops found
        lines.append(f"profile: {a.agreed} of {a.total} aten ops in the tree ({a.percent:.1f}%), "
                     f"{len(a.runtime_missing)} modules ran outside it, {len(a.never_called)} tree ops never ran")
    return "\n".join(lines) + "\n"
