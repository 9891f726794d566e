"""Dead-code elimination: drop ops whose results nothing reads and that change nothing else.

An op is kept when it may have effects: collectives, in-place ops (``aten.add_``, ``*_inplace``),
cache writers (``*_with_cache``), stream and event markers, asserts, ops that return None,
and modules or methods whose behaviour the IR does not know.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from layerc.ir.graph import OP, Module, Node
from layerc.ir.types import OpaqueType
from layerc.passes.base import Context, ModulePass, node_op_name

_EFFECTS = re.compile(
    r"all_reduce|allreduce|all_gather|allgather|reduce_scatter|all_to_all|broadcast|send|recv|barrier"
    r"|inplace|with_cache|cache|record_event|wait_event|aux_stream|_assert|print|copy_|set_|index_put_|fill_"
)


def has_effects(node: Node) -> bool:
    if node.opcode in ("call_module", "call_method"):
        return True
    if isinstance(node.type, OpaqueType) and node.type.pytype == "NoneType":
        return True
    name = node_op_name(node)
    return name.endswith("_") or bool(_EFFECTS.search(name))


@dataclass(frozen=True)
class DeadCodeElimination(ModulePass[Module]):
    """Remove ops whose results are unused and that have no effects."""

    name: ClassVar[str] = "dce"

    def apply(self, ctx: Context, module: Module) -> None:
        removed = 0
        for graph in module.graphs:
            for node in reversed(list(graph.nodes)):
                if node.kind == OP and not node.users and not has_effects(node):
                    graph.erase(node)
                    removed += 1
        module.meta.setdefault("statistics", {})["dce.removed"] = removed


@dataclass(frozen=True)
class StripUnusedWeights(ModulePass[Module]):
    """Forget weights that no node reads (after dce, or after slicing a graph)."""

    name: ClassVar[str] = "strip-unused-weights"

    def apply(self, ctx: Context, module: Module) -> None:
        for graph in module.graphs:
            for w in [w for w in graph.weights.values() if not w.users]:
                graph.erase_weight(w)
