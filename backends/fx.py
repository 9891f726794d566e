"""Printer of torch.fx's graph text (``print(gm.graph)``) from the IR.

Weights print as ``get_attr`` lines: where the fx input had them, else before the first node,
as ``ep.module()`` graphs have them. Argument formatting follows fx's ``_format_arg``.
"""

from __future__ import annotations

from layerc.ir.graph import OUTPUT, PLACEHOLDER, Graph, Node, Value, Weight
from layerc.ir.pyformat import python_str
from layerc.ir.targets import to_fx_target


def print_graph(graph: Graph) -> str:
    """Exactly ``str(gm.graph)`` (no final newline; ``print`` adds one)."""
    ret = graph.meta.get("fx_return_type")
    lines = [f"graph(){' -> ' + ret if ret else ''}:"]
    weights_at: dict[int, list[Weight]] = {}
    for w in graph.weights.values():
        weights_at.setdefault(w.meta.get("fx_index", 0), []).append(w)
    for i, node in enumerate(graph.nodes):
        for w in weights_at.pop(i, ()):
            lines.append(_get_attr(w))
        lines.append(_node(node))
    for ws in weights_at.values():
        lines.extend(_get_attr(w) for w in ws)
    return "\n    ".join(lines)


def _lhs(value: Value) -> str:
    fx_type = value.meta.get("fx_type")
    return f"%{value.name} : {fx_type + ' ' if fx_type else ''}[num_users={len(value.users)}] = "


def _get_attr(w: Weight) -> str:
    return f"{_lhs(w)}get_attr[target={w.target or w.name}]"


def _node(node: Node) -> str:
    if node.kind == PLACEHOLDER:
        default = f"(default={python_str(node.args[0])})" if node.args else ""
        return f"{_lhs(node)}placeholder[target={node.target or node.name}]{default}"
    if node.kind == OUTPUT:
        return f"return {python_str(node.args[0] if node.args else None)}"
    opcode = node.opcode or "call_function"
    # str(): a verified op has a target; an unverified one without prints None, as it always has
    target = node.meta.get("fx_target") or to_fx_target(str(node.target), opcode)
    return f"{_lhs(node)}{opcode}[target={target}](args = {format_arg(node.args)}, kwargs = {format_arg(node.kwargs)})"


def format_arg(arg) -> str:
    """torch.fx's ``_format_arg``: ``%name`` for values, ``str()`` for everything else."""
    if isinstance(arg, Value):
        return "%" + arg.name
    if isinstance(arg, list):
        return "[" + ", ".join(format_arg(a) for a in arg) + "]"
    if isinstance(arg, tuple):
        return "(" + ", ".join(format_arg(a) for a in arg) + ("," if len(arg) == 1 else "") + ")"
    if isinstance(arg, dict):
        return "{" + ", ".join(f"{k}: {format_arg(v)}" for k, v in arg.items()) + "}"
    return python_str(arg)
