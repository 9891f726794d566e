"""The pass registry, one for every IR: names → factories, loaded lazily (importing layerc stays
cheap).

Built-in passes are listed here with the IR they run on (``graph``: an AutoDeploy/FX graph;
``trace``: a profiler trace; ``mem``: a memory plan; ``optree``: model source and its op tree);
each pass class says the same in ``ir``. Other packages add theirs through the ``layerc.passes``
entry-point group (``name = "package.module:PassClass"``). A name defined twice is an error.

A new pass is one new module in this package: a pass class there that the list does not name
is found when a pipeline asks for its name, and by ``opt --list-passes`` (the list is the fast
path that keeps the other modules unimported).
"""

from __future__ import annotations

from functools import lru_cache
from importlib import import_module
from typing import TYPE_CHECKING, Any, Callable, cast

from layerc.ir.diagnostics import LayercError
from layerc.passes.base import ModulePass

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

#: the IRs passes run on, and the commands whose pipelines run them
IRS: dict[str, str] = {"graph": "opt, layer", "trace": "trace", "mem": "mem", "optree": "optrace"}

#: name → (IR, "module:Class") of the built-in passes.
BUILTIN_PASSES: dict[str, tuple[str, str]] = {
    "dce": ("graph", "layerc.passes.dce:DeadCodeElimination"),
    "select-graph": ("graph", "layerc.passes.select_graph:SelectGraph"),
    "strip-unused-weights": ("graph", "layerc.passes.dce:StripUnusedWeights"),
    "tag-weights": ("graph", "layerc.passes.tag_weights:TagWeights"),
    "slice-layers": ("graph", "layerc.passes.slicing:SliceLayers"),
    "slice-layer": ("graph", "layerc.passes.slicing:SliceLayer"),
    "infer-groups": ("graph", "layerc.passes.groups:InferGroups"),
    "specialize-shapes": ("graph", "layerc.passes.cost:SpecializeShapes"),
    "cost": ("graph", "layerc.passes.cost:CostModel"),
    "schedule": ("graph", "layerc.passes.schedule:ListSchedule"),
    "bind-kernels": ("graph", "layerc.passes.bind_kernels:BindKernels"),
    "classify-kernels": ("trace", "layerc.passes.trace_passes:ClassifyKernels"),
    "detect-layers": ("trace", "layerc.passes.trace_passes:DetectLayers"),
    "merge-half-layers": ("trace", "layerc.passes.trace_passes:MergeHalfLayers"),
    "type-layers": ("trace", "layerc.passes.trace_passes:TypeLayers"),
    "measure-roofline": ("trace", "layerc.passes.trace_passes:MeasureRoofline"),
    "mem-liveness": ("mem", "layerc.passes.mem_liveness:MemLiveness"),
    "mem-check": ("mem", "layerc.passes.mem_check:MemCheck"),
    "trace-ops": ("optree", "layerc.passes.optrace_passes:TraceOps"),
    "cross-validate-kernels": ("optree", "layerc.passes.optrace_passes:CrossValidateKernels"),
    "profile-ops": ("optree", "layerc.passes.optrace_dynamic:ProfileOps"),
}


def _loader(spec: str) -> Callable[[], type[ModulePass[Any]]]:
    module, _, cls = spec.partition(":")
    return lambda: getattr(import_module(module), cls)


@lru_cache(maxsize=None)
def get_all_passes(ir: str | None = None) -> dict[str, Callable[[], type[ModulePass[Any]]]]:
    """Every known pass name (of one IR, or of all) with a factory that imports its class on
    first use. A plugin's IR is known only once it is loaded: it is loaded to be filtered."""
    passes = {name: _loader(spec) for name, (kind, spec) in BUILTIN_PASSES.items() if ir in (None, kind)}
    for ep in _plugins():
        if ep.name in BUILTIN_PASSES or ep.name in passes:
            raise LayercError(f"pass '{ep.name}' is registered twice (entry point {ep.value})")
        load = _plugin_loader(ep)
        if ir is None or getattr(load(), "ir", "graph") == ir:
            passes[ep.name] = load
    return passes


@lru_cache(maxsize=1)
def discovered_passes() -> dict[str, type[ModulePass[Any]]]:
    """Pass classes of this package's modules that ``BUILTIN_PASSES`` does not list (imports
    the modules it has not imported yet: only when a name is not found, or for a listing)."""
    import pkgutil
    from inspect import isclass

    import layerc.passes as package

    listed = {spec.partition(":")[0] for _, spec in BUILTIN_PASSES.values()}
    found: dict[str, type[ModulePass[Any]]] = {}
    for info in pkgutil.iter_modules(package.__path__):
        module_name = f"{package.__name__}.{info.name}"
        if module_name in listed or info.ispkg:
            continue
        module = import_module(module_name)
        for value in vars(module).values():
            if (isclass(value) and issubclass(value, ModulePass) and value.__module__ == module_name
                    and isinstance(getattr(value, "name", None), str) and value.name not in BUILTIN_PASSES):
                if value.name in found:
                    raise LayercError(f"pass '{value.name}' is defined twice ({found[value.name].__module__}, {module_name})")
                found[value.name] = value
    return found


def with_discovered(ir: str | None = None) -> dict[str, Callable[[], type[ModulePass[Any]]]]:
    """Every pass of ``ir`` (or of all IRs), the package's unlisted modules included."""
    passes = dict(get_all_passes(ir))
    for name, cls in discovered_passes().items():
        if ir in (None, getattr(cls, "ir", "graph")) and name not in passes:
            passes[name] = (lambda c: lambda: c)(cls)
    return passes


def _plugins() -> list[EntryPoint]:
    """The ``layerc.passes`` entry points (importlib.metadata is imported only when asked)."""
    from importlib.metadata import entry_points

    return list(entry_points(group="layerc.passes"))


def pass_ir(name: str) -> str:
    """The IR a registered pass runs on."""
    if name in BUILTIN_PASSES:
        return BUILTIN_PASSES[name][0]
    return getattr(get_pass_class(name), "ir", "graph")


def other_ir(name: str) -> str | None:
    """The IR a pass of that name runs on, wherever it is registered (None: no such pass)."""
    if name in BUILTIN_PASSES:
        return BUILTIN_PASSES[name][0]
    cls = with_discovered().get(name)
    return getattr(cls(), "ir", "graph") if cls is not None else None


def _plugin_loader(ep: EntryPoint) -> Callable[[], type[ModulePass[Any]]]:
    """A plugin's pass class; a plugin that fails to import is named in a clear error."""

    def load() -> type[ModulePass[Any]]:
        try:
            return cast("type[ModulePass[Any]]", ep.load())
        except Exception as e:  # any import-time failure of third-party code
            raise LayercError(f"pass '{ep.name}' (plugin {ep.value}) failed to load: {type(e).__name__}: {e}") from None

    return load


def get_pass_class(name: str) -> type[ModulePass[Any]]:
    """The class of pass ``name``: a built-in one without reading plugins' entry points."""
    if name in BUILTIN_PASSES:
        factory: Callable[[], type[ModulePass[Any]]] | None = _loader(BUILTIN_PASSES[name][1])
    else:
        factory = get_all_passes().get(name) or with_discovered().get(name)
    if factory is None:
        raise LayercError(f"unknown pass '{name}'")
    cls = factory()
    if getattr(cls, "name", None) != name:
        raise LayercError(f"pass class {cls.__qualname__} is registered as '{name}' but is named '{getattr(cls, 'name', None)}'")
    if name in BUILTIN_PASSES and getattr(cls, "ir", "graph") != BUILTIN_PASSES[name][0]:
        raise LayercError(f"pass '{name}' is registered for the {BUILTIN_PASSES[name][0]} IR but runs on {cls.ir}")
    return cls
