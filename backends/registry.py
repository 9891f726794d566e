"""The emitter contract: (IR, format) → a function that renders a module of that IR as text.
An emitter that reads what a pass makes names it in ``requires`` (``layerc opt`` adds the pass).

``layerc opt --emit FORMAT`` and ``--print-ir-after-all`` take their printers from here; each
command's file outputs (``layer``'s JSON/DOT/PNG, ``trace``'s JSON/CSV/Perfetto, ``mem``'s
pictures) are emitters of the same IRs. Emitters load on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any, Callable

from layerc.ir.diagnostics import LayercError
from layerc.ir.graph import Module

#: (IR, format) → "module:function"; the first format listed for an IR is its default
EMITTER_SPECS: dict[tuple[str, str], str] = {
    ("graph", "ad"): "layerc.backends.autodeploy:print_module",
    ("graph", "fx"): "layerc.backends.registry:_fx",
    ("graph", "json"): "layerc.backends.json_ir:dumps",
    ("graph", "meta"): "layerc.backends.graph_meta:print_meta",
    ("trace", "text"): "layerc.backends.trace_ir:print_trace",
    ("trace", "json"): "layerc.backends.trace_report:json_text",
    ("trace", "csv"): "layerc.backends.trace_report:csv_module_text",
    ("mem", "text"): "layerc.backends.mem_report:ir_text",
    ("optree", "text"): "layerc.backends.registry:_optree_text",
}


def formats(ir: str) -> list[str]:
    """The formats a module of ``ir`` can be emitted in, its default first."""
    return [fmt for kind, fmt in EMITTER_SPECS if kind == ir]


def emitter(ir: str, fmt: str | None = None) -> Callable[[Any], str]:
    """The printer of ``ir`` in ``fmt`` (default: the IR's first format)."""
    fmt = fmt or formats(ir)[0]
    spec = EMITTER_SPECS.get((ir, fmt))
    if spec is None:
        raise LayercError(f"the {ir} IR has no '{fmt}' output (it has: {', '.join(formats(ir))})")
    module, _, name = spec.partition(":")
    return getattr(import_module(module), name)


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

