"""layerc's typed graph IR (dump files) — see graph.py — and its value types.

The names load on first use: importing ``layerc.ir.diagnostics`` (every command does) loads
nothing else."""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "layerc.ir.constants": ("Device", "DType", "TorchAttr"),
    "layerc.ir.diagnostics": ("LayercError", "Location", "ParseError", "VerifyError"),
    "layerc.ir.graph": ("OP", "OUTPUT", "PLACEHOLDER", "Graph", "Module", "Node", "Value", "Weight",
                        "is_structurally_equivalent"),
    "layerc.ir.types": ("UNKNOWN", "OpaqueType", "SymDim", "TensorType", "TupleType", "Type", "UnknownType"),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = [name for names in _EXPORTS.values() for name in names]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(_WHERE[name]), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
