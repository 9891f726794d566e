"""The pass contract, as in xDSL and MLIR.

A pass is a frozen dataclass: ``name`` says how pipelines call it, its fields are its typed
options, and ``apply(ctx, module)`` changes the module in place. A pass keeps no state
between runs and must leave the IR valid (the pass manager verifies after each pass).
Other tools can run one without the CLI::

    from layerc.passes.dce import DeadCodeElimination
    DeadCodeElimination().apply(Context(), module)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from layerc.ir.graph import Module


@dataclass
class Context:
    """What passes share besides the module: inputs named on the command line (a trace, say),
    analyses that later passes reuse, and diagnostics to report."""

    inputs: dict[str, Any] = field(default_factory=dict)
    analyses: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def warn(self, message: str) -> None:
        self.warnings.append(message)


@dataclass(frozen=True)
class ModulePass(ABC):
    name: ClassVar[str]
    ir: ClassVar[str] = "graph"  #: the IR it runs on (``registry.IRS``)

    @abstractmethod
    def apply(self, ctx: Context, module: Module) -> None:
        """Transform ``module`` in place; raise a LayercError to stop the pipeline."""

    def pipeline_text(self) -> str:
        """This pass as pipeline text, e.g. ``slice-layer{layer=5}``; parsing it gives it back."""
        opts = []
        for f in fields(self):
            value = getattr(self, f.name)
            if value == f.default:
                continue
            key = f.name.replace("_", "-")
            if isinstance(value, tuple):
                text = ",".join(_option_text(v) for v in value)
            else:
                text = _option_text(value)
            opts.append(f"{key}={text}")
        return self.name + ("{" + " ".join(opts) + "}" if opts else "")


def _option_text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    if any(c in text for c in " ,{}=()\"'") or text == "":
        return f'"{text}"'
    return text
