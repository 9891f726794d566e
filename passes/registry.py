"""The pass registry: names → factories, loaded lazily (importing layerc stays cheap).

Built-in passes are listed here; other packages add theirs through the ``layerc.passes``
entry-point group (``name = "package.module:PassClass"``). A name defined twice is an error.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import import_module
from importlib.metadata import entry_points
from typing import Callable

from layerc.ir.diagnostics import LayercError
from layerc.passes.base import ModulePass

#: name → "module:Class" of the built-in passes.
BUILTIN_PASSES: dict[str, str] = {
    "dce": "layerc.passes.dce:DeadCodeElimination",
    "select-graph": "layerc.passes.select_graph:SelectGraph",
    "strip-unused-weights": "layerc.passes.dce:StripUnusedWeights",
    "tag-weights": "layerc.passes.tag_weights:TagWeights",
    "slice-layers": "layerc.passes.slicing:SliceLayers",
    "slice-layer": "layerc.passes.slicing:SliceLayer",
    "infer-groups": "layerc.passes.groups:InferGroups",
    "specialize-shapes": "layerc.passes.cost:SpecializeShapes",
    "cost": "layerc.passes.cost:CostModel",
    "schedule": "layerc.passes.schedule:ListSchedule",
    "bind-kernels": "layerc.passes.bind_kernels:BindKernels",
}


def _loader(spec: str) -> Callable[[], type[ModulePass]]:
    module, _, cls = spec.partition(":")
    return lambda: getattr(import_module(module), cls)


@lru_cache(maxsize=1)
def get_all_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """Every known pass name with a factory that imports its class on first use."""
    passes = {name: _loader(spec) for name, spec in BUILTIN_PASSES.items()}
    for ep in entry_points(group="layerc.passes"):
        if ep.name in passes:
            raise LayercError(f"pass '{ep.name}' is registered twice (entry point {ep.value})")
        passes[ep.name] = _plugin_loader(ep)
    return passes


def _plugin_loader(ep) -> Callable[[], type[ModulePass]]:
    """A plugin's pass class; a plugin that fails to import is named in a clear error."""

    def load() -> type[ModulePass]:
        try:
            return ep.load()
        except Exception as e:  # any import-time failure of third-party code
            raise LayercError(f"pass '{ep.name}' (plugin {ep.value}) failed to load: {type(e).__name__}: {e}") from None

    return load


def get_pass_class(name: str) -> type[ModulePass]:
    factory = get_all_passes().get(name)
    if factory is None:
        raise LayercError(f"unknown pass '{name}'")
    cls = factory()
    if getattr(cls, "name", None) != name:
        raise LayercError(f"pass class {cls.__qualname__} is registered as '{name}' but is named '{getattr(cls, 'name', None)}'")
    return cls
