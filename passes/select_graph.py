"""Keep one GraphModule section of a dump (``monolithic.model`` by default, as a person would
pick it: else the section with the most op nodes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from layerc.ir.diagnostics import LayercError
from layerc.ir.graph import Module
from layerc.passes.base import Context, ModulePass


@dataclass(frozen=True)
class SelectGraph(ModulePass[Module]):
    """Keep one GraphModule section (default: monolithic.model, else the largest)."""

    name: ClassVar[str] = "select-graph"
    section: str = ""

    def apply(self, ctx: Context, module: Module) -> None:
        if self.section:
            try:
                keep = module.graph(self.section)
            except KeyError:
                names = ", ".join(str(g.name) for g in module.graphs)
                raise LayercError(f"no GraphModule section '{self.section}' (sections: {names})") from None
        else:
            keep = module.main_graph()
        module.graphs = [keep]
        module.declared_graph_count = None
