"""Text emitters for ``layerc opt --emit``, by name (xdsl-opt's targets)."""

from __future__ import annotations

from typing import Callable

from layerc.ir.diagnostics import LayercError
from layerc.ir.graph import Module


def _ad(module: Module) -> str:
    from layerc.backends.autodeploy import print_module

    return print_module(module)


def _fx(module: Module) -> str:
    from layerc.backends.fx import print_graph

    if len(module.graphs) != 1:
        names = ", ".join(str(g.name) for g in module.graphs)
        raise LayercError(f"torch.fx text holds one graph; pick a section with --section ({names})")
    return print_graph(module.graphs[0]) + "\n"


def _json(module: Module) -> str:
    from layerc.backends.json_ir import dumps

    return dumps(module)


EMITTERS: dict[str, Callable[[Module], str]] = {"ad": _ad, "fx": _fx, "json": _json}
