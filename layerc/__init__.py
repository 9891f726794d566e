"""layerc: what a transformer model really does, layer by layer, as a compiler sees it.

The public API. Every name loads on first use (``import layerc`` imports nothing heavy)::

    import layerc

    ir, module = layerc.read("run.json.gz")             # any input: its IR is told from the content
    ctx = layerc.run_passes(layerc.build_pipeline("type-layers", layerc.get_all_passes(ir)), module)
    print(layerc.emitter(ir)(module))                   # the module in its IR's text

    trace = layerc.read_trace("run.json.gz")            # a trace, its facts as pandas DataFrames
    trace.layers_df().groupby("type").duration_ns.sum()  # (kernels_df, stages_df, types_df, passes_df)

Readers: ``read`` (any input), ``read_dump``, ``read_trace``, ``read_memory_plan``; parsing text:
``parse_dump``. Passes: ``ModulePass``, ``Analysis``, ``Context``, ``PassManager``,
``run_passes``, ``build_pipeline``, ``get_all_passes``, ``get_pass_class``. Emitters: ``Emitter``, ``emitter``,
``formats``. IR: ``Module``, ``Trace`` (``AnalyzedTrace``: one with dataframes), ``TraceModule``, ``MemoryModule``, ``OpTraceModule``.
Diagnostics: ``Diagnostic``, ``DiagnosticEngine``, ``LayercError``. Property-based tests of other
projects use ``layerc.testing``.
"""

from __future__ import annotations

from importlib import import_module
TYPE_CHECKING = False  # (as typing's, without importing typing at start-up)

if TYPE_CHECKING:
    from typing import Any

#: public name → (module, attribute)
_EXPORTS: dict[str, tuple[str, str]] = {
    "read": ("layerc.passes.readers", "read_module"),
    "ReadOptions": ("layerc.passes.readers", "ReadOptions"),
    "read_dump": ("layerc.grammar.dumps", "load"),
    "parse_dump": ("layerc.grammar.dumps", "parse_and_verify"),
    "read_trace": ("layerc.passes.trace_tables", "read_analyzed"),
    "AnalyzedTrace": ("layerc.passes.trace_tables", "AnalyzedTrace"),
    "read_memory_plan": ("layerc.grammar.ws_memory", "read_ws_memory"),
    "input_kind": ("layerc.grammar.input_kinds", "input_kind"),
    "Module": ("layerc.ir.graph", "Module"),
    "Trace": ("layerc.ir.trace", "Trace"),
    "MemoryModule": ("layerc.ir.memory", "MemoryModule"),
    "TraceModule": ("layerc.passes.trace_passes", "TraceModule"),
    "OpTraceModule": ("layerc.passes.optrace_passes", "OpTraceModule"),
    "Diagnostic": ("layerc.ir.diagnostics", "Diagnostic"),
    "DiagnosticEngine": ("layerc.ir.diagnostics", "DiagnosticEngine"),
    "LayercError": ("layerc.ir.diagnostics", "LayercError"),
    "Location": ("layerc.ir.diagnostics", "Location"),
    "ModulePass": ("layerc.passes.base", "ModulePass"),
    "Analysis": ("layerc.passes.base", "Analysis"),
    "Context": ("layerc.passes.base", "Context"),
    "PassManager": ("layerc.passes.pipeline", "PassManager"),
    "run_passes": ("layerc.passes.pipeline", "run_passes"),
    "build_pipeline": ("layerc.passes.pipeline", "build_pipeline"),
    "get_all_passes": ("layerc.passes.registry", "with_discovered"),
    "get_pass_class": ("layerc.passes.registry", "get_pass_class"),
    "Emitter": ("layerc.backends.registry", "Emitter"),
    "emitter": ("layerc.backends.registry", "emitter"),
    "formats": ("layerc.backends.registry", "formats"),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    where = _EXPORTS.get(name)
    if where is None:
        raise AttributeError(f"module 'layerc' has no attribute {name!r}")
    value = getattr(import_module(where[0]), where[1])
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted([*__all__, "testing"])
