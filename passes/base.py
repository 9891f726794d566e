"""The pass contract, as in xDSL and MLIR (``OperationPass<ModuleOp>``).

A pass is a frozen dataclass generic in the module kind it runs on (``ModulePass[TraceModule]``):
``name`` says how pipelines call it, ``ir`` names its IR in the registry, its fields are its typed
options, and ``apply(ctx, module)`` changes the module in place. A pass keeps no state between
runs and must leave the IR valid (the pass manager verifies after each pass).

``requires`` names the passes whose results it reads: the pass manager runs each one first
(with its default options) unless the module already holds its result (``satisfied``), so a
prerequisite shows in ``--print-ir-after-all`` and ``--timing`` like any step. ``preserves``
names the analyses a pass leaves valid; the others are dropped after it runs.

Other tools can run passes without the CLI::

    from layerc.passes.pipeline import PassManager
    from layerc.passes.slicing import SliceLayer
    PassManager([SliceLayer(layer=5)]).run(Context(), module)   # runs tag-weights, slice-layers first
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Generic, TypeVar, cast

from layerc.ir.diagnostics import Diagnostic, Location
from layerc.ir.targets import op_name

if TYPE_CHECKING:  # a trace pipeline loads no graph IR
    from layerc.ir.graph import Node

M = TypeVar("M")  #: the module kind a pass runs on
R = TypeVar("R")


@dataclass(frozen=True)
class Analysis(Generic[R]):
    """A fact computed from an IR object (never a change to it), cached by the analysis manager
    until a pass that does not preserve it runs. ``compute(obj, **options)`` makes it."""

    name: str
    compute: Callable[..., R]


class AnalysisManager(dict[str | tuple[str, ...], Any]):
    """The results passes leave for later passes and for the emitters (``ctx.analyses['binding']``),
    and the cache of computed analyses (``get(analysis, obj, **options)``). Only the cache is
    invalidated: a result a pass stores is its output, not a derived fact."""

    def __init__(self) -> None:
        super().__init__()
        self._cache: dict[tuple[str, int, tuple[tuple[str, Any], ...]], tuple[Any, Any]] = {}

    def get_analysis(self, analysis: Analysis[R], obj: Any, **options: Any) -> R:
        """``analysis`` of ``obj`` with ``options``, computed once until invalidated."""
        held = (obj, *options.values())  # held with the value: their ids are not reused meanwhile
        key = (analysis.name, id(obj), tuple((k, _key(v)) for k, v in sorted(options.items())))
        hit = self._cache.get(key)
        if hit is not None:
            return cast(R, hit[1])
        value = analysis.compute(obj, **options)
        self._cache[key] = (held, value)
        return value

    def cached(self) -> list[str]:
        return sorted({key[0] for key in self._cache})

    def invalidate(self, preserved: tuple[str, ...] = ()) -> None:
        """Drop every cached analysis not named in ``preserved`` (``"*"``: keep them all)."""
        if "*" in preserved:
            return
        self._cache = {k: v for k, v in self._cache.items() if k[0] in preserved}


def _key(value: Any) -> Any:
    """An option as part of a cache key: plain values by value, objects by identity."""
    return value if isinstance(value, (str, int, float, bool, type(None))) else ("id", id(value))


@dataclass
class Context:
    """What passes share besides the module: inputs named on the command line (a trace, say),
    results and cached analyses, and the diagnostics they report (``ir.diagnostics``)."""

    inputs: dict[str, Any] = field(default_factory=dict)
    analyses: AnalysisManager = field(default_factory=AnalysisManager)
    diagnostics: list[Diagnostic] = field(default_factory=list)

    def warn(self, message: str, path: str | None = None, loc: Location | None = None) -> None:
        self.diagnostics.append(Diagnostic("warning", message, path, loc))

    @property
    def warnings(self) -> list[str]:
        """The warnings' messages."""
        return [d.message for d in self.diagnostics if d.severity == "warning"]


@dataclass(frozen=True)
class ModulePass(ABC, Generic[M]):
    """A pass: a frozen dataclass whose fields are its typed options (``name{key=value}`` in a
    pipeline), run on a module of one IR by ``apply``."""

    name: ClassVar[str]
    ir: ClassVar[str] = "graph"  #: the IR it runs on (``registry.IRS``)
    #: passes whose results this one reads; the pass manager runs the missing ones first
    requires: ClassVar[tuple[str, ...]] = ()
    #: analyses left valid by this pass (``"*"``: all of them: the pass only adds facts)
    preserves: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def apply(self, ctx: Context, module: M) -> None:
        """Transform ``module`` in place; raise a LayercError to stop the pipeline."""

    @classmethod
    def satisfied(cls, module: M) -> bool:
        """Whether ``module`` already holds what this pass makes (a required pass that is
        satisfied is not run again)."""
        return False

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


def _option_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    if any(c in text for c in " ,{}=()\"'") or text == "":
        return f'"{text}"'
    return text


def node_op_name(node: Node) -> str:
    """``op_name`` of a node's target. Only ops (and fx placeholders) have a target: like
    ``op_name`` itself, this fails on a node without one."""
    return op_name(cast(str, node.target))
