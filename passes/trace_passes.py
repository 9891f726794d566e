"""Passes over the trace IR: ``classify-kernels``, ``detect-layers``, ``merge-half-layers``,
``type-layers``, ``measure-roofline``. They follow the graph passes' contract (frozen dataclass, ``name``, typed
options, ``apply(ctx, module)``) on a ``TraceModule``, so pipelines, verification and timing
work the same way, and another tool can run one on its own::

    module = TraceModule(read_trace("trace.json.gz"))
    run_passes(build_pipeline("detect-layers{strategy=motif}", TRACE_PASSES), module)  # classifies first
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from layerc.ir.diagnostics import Diagnostic, LayercError, VerifyError
from layerc.ir.trace import Trace
from layerc.passes.base import Analysis, Context, ModulePass
from layerc.passes.registry import get_all_passes
from layerc.passes.kernel_tables import Classification, kernel_table
from layerc.passes.layer_facts import LayerTable, kernel_stages, layer_table
from layerc.passes.stage_shapes import stage_votes
from layerc.passes.layer_strategies import STRATEGIES
from layerc.passes.roofline import Roofline, kernel_roofline
from layerc.passes.trace_layers import LayerResult, by_pass, detect_layers, mark_partial, merge_half_layers, per_pass_counts

#: each kernel's pass and decoder layer, one detection per (trace, strategy, classification, merge)
TRACE_LAYERS: Analysis[LayerResult] = Analysis("trace-layers", detect_layers)


@dataclass
class TraceModule:
    """A trace and what the trace passes found about it (columns as long as the kernels)."""

    trace: Trace
    classification: Classification | None = None
    layers: LayerResult | None = None
    table: LayerTable | None = None
    stage: np.ndarray | None = None  #: per kernel, after layer voting
    roofline: Roofline | None = None  #: per kernel: FLOPs, bytes and their bound at the GPU's peaks

    def verify(self) -> None:
        n = len(self.trace.kernels)
        columns: dict[str, np.ndarray | None] = {
            "classification": None if self.classification is None else self.classification.type, "stage": self.stage,
            "roofline": None if self.roofline is None else self.roofline.flops}
        if self.layers is not None:
            columns.update(layer=self.layers.layer, pass_of=self.layers.pass_of)
            if len(self.layers.layer) and int(self.layers.layer.min()) < -1:
                raise VerifyError("a kernel has a layer index below -1")
        for name, column in columns.items():
            if column is not None and len(column) != n:
                raise VerifyError(f"{name} has {len(column)} rows for {n} kernels")

    def diagnostics(self) -> list[Diagnostic]:
        """What the reader said of the trace (a CUDA graph traced as a whole, rows left out)."""
        return [Diagnostic("warning", w, self.trace.source) for w in self.trace.warnings]

    def need_classification(self, pass_name: str) -> Classification:
        if self.classification is None:
            raise LayercError(f"{pass_name} needs the kernels classified: run classify-kernels before it (a PassManager does)")
        return self.classification

    def need_layers(self, pass_name: str) -> LayerResult:
        if self.layers is None:
            raise LayercError(f"{pass_name} needs layers: run detect-layers before it (a PassManager does)")
        return self.layers


@dataclass(frozen=True)
class ClassifyKernels(ModulePass["TraceModule"]):
    """Type, short name, stage vote, layer-start flag and marks of every kernel, from the tables
    (``tables``: a directory of extra TOML families, tried first)."""

    name: ClassVar[str] = "classify-kernels"
    ir: ClassVar[str] = "trace"
    tables: str | None = None

    @classmethod
    def satisfied(cls, module: TraceModule) -> bool:
        return module.classification is not None

    def apply(self, ctx: Context, module: TraceModule) -> None:
        module.classification = kernel_table(self.tables).classify(module.trace)


@dataclass(frozen=True)
class DetectLayers(ModulePass["TraceModule"]):
    """Each kernel's pass and decoder layer (see ``trace_layers``); ``merge=false`` keeps each
    layer's attention and FFN halves apart, whichever strategy decides."""

    name: ClassVar[str] = "detect-layers"
    ir: ClassVar[str] = "trace"
    requires: ClassVar[tuple[str, ...]] = ("classify-kernels",)
    strategy: str = "auto"
    merge: bool = True

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, not '{self.strategy}'")

    @classmethod
    def satisfied(cls, module: TraceModule) -> bool:
        return module.layers is not None

    def apply(self, ctx: Context, module: TraceModule) -> None:
        cls = module.need_classification(self.name)
        try:
            module.layers = ctx.analyses.get_analysis(TRACE_LAYERS, module.trace, strategy=self.strategy, cls=cls, merge=self.merge)
        except ValueError as e:
            raise LayercError(str(e), module.trace.source) from None
        for warning in module.layers.warnings:  # "no layer structure found", low confidence: said, not hidden
            ctx.warn(warning, module.trace.source)
        module.table = module.stage = None


@dataclass(frozen=True)
class MergeHalfLayers(ModulePass["TraceModule"]):
    """Join each half layer without attention to the attention half before it (dual-norm models)."""

    name: ClassVar[str] = "merge-half-layers"
    ir: ClassVar[str] = "trace"
    requires: ClassVar[tuple[str, ...]] = ("detect-layers",)

    def apply(self, ctx: Context, module: TraceModule) -> None:
        layers = module.need_layers(self.name)
        kind = module.need_classification(self.name).type
        start = module.trace.kernels.start
        merged = layers.layer.copy()
        for idx in by_pass(layers.pass_of, start):
            merged[idx] = merge_half_layers(layers.layer[idx], kind[idx])
        per = per_pass_counts(merged, layers.pass_of)
        module.layers = mark_partial(LayerResult(merged, layers.pass_of, layers.strategy, layers.confidence, layers.period, per))
        module.table = module.stage = None


@dataclass(frozen=True)
class TypeLayers(ModulePass["TraceModule"]):
    """Each layer's type (MLA_MOE, MHA_FC, ...) and voted stage, and each kernel's stage."""

    name: ClassVar[str] = "type-layers"
    ir: ClassVar[str] = "trace"
    requires: ClassVar[tuple[str, ...]] = ("detect-layers",)
    preserves: ClassVar[tuple[str, ...]] = ("*",)  #: it adds the layers' types and stages, changes nothing

    def apply(self, ctx: Context, module: TraceModule) -> None:
        layers, cls = module.need_layers(self.name), module.need_classification(self.name)
        votes = stage_votes(module.trace, cls)
        module.table = layer_table(module.trace, cls, layers, votes)
        module.stage = kernel_stages(module.trace, cls, layers, module.table, votes)


@dataclass(frozen=True)
class MeasureRoofline(ModulePass["TraceModule"]):
    """Each kernel's FLOPs and bytes, from the shapes the op that launched it recorded, and the
    time they take at its GPU's peaks (``roofline``: unknown where no shapes or no model)."""

    name: ClassVar[str] = "measure-roofline"
    ir: ClassVar[str] = "trace"
    preserves: ClassVar[tuple[str, ...]] = ("*",)  #: it adds the costs, changes nothing

    @classmethod
    def satisfied(cls, module: TraceModule) -> bool:
        return module.roofline is not None

    def apply(self, ctx: Context, module: TraceModule) -> None:
        module.roofline = kernel_roofline(module.trace)


def trace_pipeline(tables: str | None = None, strategy: str = "auto", merge: bool = True) -> list[ModulePass[TraceModule]]:
    """``layerc trace``'s passes: classify (``tables``: extra TOML families), find the layers
    (``strategy``; ``merge=False`` keeps half layers apart), type them, measure the roofline.
    Built as objects: a tables path may hold any character a pipeline's text could not."""
    return [ClassifyKernels(tables), DetectLayers(strategy, merge=merge), TypeLayers(), MeasureRoofline()]


def __getattr__(name: str) -> object:
    """``TRACE_PASSES``: the one registry's trace view, made on first use (a plugin's
    entry points load importlib.metadata, which the command's own pipeline never needs)."""
    if name == "TRACE_PASSES":
        return get_all_passes("trace")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
