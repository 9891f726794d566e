"""Printer of the AutoDeploy dump text: IR → the bytes the TensorRT-LLM writer produces.

``generation`` of the module picks the writer: 3 (sections, the current ``graph_writer.py``),
2 (shapes, no sections) or 1 (dtypes only). For any file the writer produced, parsing and
printing gives the same bytes back.
"""

from __future__ import annotations

from layerc.ir.diagnostics import VerifyError
from layerc.ir.graph import OP, OUTPUT, PLACEHOLDER, Graph, Module, Node, Value
from layerc.ir.pyformat import python_str
from layerc.ir.types import UnknownType, TupleType, Type

BANNER = "=" * 80


def print_module(module: Module) -> str:
    out: list[str] = [f"# Transform: {module.transform}\n# Stage: {module.stage}\n"]
    if module.generation == 3:
        out.append(f"# GraphModules found: {len(module.graphs)}\n\n")
        for graph in module.graphs:
            out.append(f"\n{BANNER}\n# GraphModule: {graph.name}\n{BANNER}\n\n")
            _print_graph(graph, 3, out)
    elif module.graphs and module.graphs[0].name is not None:
        # A header without the count line, then sections (NVIDIA's own v2-style fixture).
        out.append("\n")
        for i, graph in enumerate(module.graphs):
            out.append(f"{'' if i == 0 else chr(10)}{BANNER}\n# GraphModule: {graph.name}\n{BANNER}\n\n")
            _print_graph(graph, module.generation, out)
    else:
        if len(module.graphs) != 1:
            raise VerifyError(f"a generation-{module.generation} dump without sections holds one graph, not {len(module.graphs)}")
        out.append("\n")
        _print_graph(module.graphs[0], module.generation, out)
    return "".join(out)


def print_graph(graph: Graph, generation: int = 3) -> str:
    """The node lines of one graph, without header or banner."""
    out: list[str] = []
    _print_graph(graph, generation, out)
    return "".join(out)


def _print_graph(graph: Graph, generation: int, out: list[str]) -> None:
    for node in graph.nodes:
        out.append(format_node(node, generation))
        out.append("\n")


def format_node(node: Node, generation: int = 3) -> str:
    if node.kind == PLACEHOLDER:
        t = node.type
        return f"%{node.name} : {t.dtype_text() if generation == 1 else use_texts(t)}"
    if node.kind == OP:
        args = ", ".join(format_arg(a, generation) for a in node.args)
        return f"%{node.name} = {node.target}({args}) : {_def_texts(node.type, generation)}"
    if node.kind == OUTPUT:
        result = node.args[0] if node.args else ()
        items = result if isinstance(result, (tuple, list)) else [result]
        return "output " + ", ".join(f"%{a.name}" if isinstance(a, Value) else python_str(a) for a in items)
    raise VerifyError(f"unknown node kind '{node.kind}'", loc=node.loc)


def use_texts(t: Type) -> str:
    """``shape : dtype`` as printed where a value is used (and on placeholder lines)."""
    return f"{t.shape_text()} : {t.dtype_text()}"


def _def_texts(t: Type, generation: int) -> str:
    if isinstance(t, UnknownType):
        return "N/A" if generation == 1 else "? : N/A"
    if generation == 1:
        return t.dtype_text()
    if isinstance(t, TupleType):
        shapes = ", ".join(e.shape_text() for e in t.elements)
        dtypes = ", ".join(e.dtype_text() for e in t.elements)
        return f"({shapes}) : ({dtypes})"
    return use_texts(t)


def format_arg(arg, generation: int = 3) -> str:
    """A top-level op argument: an annotated reference, or ``str(constant)``."""
    if isinstance(arg, Value):
        return f"%{arg.name}" if generation == 1 else f"%{arg.name} : {use_texts(arg.type)}"
    return python_str(arg)
