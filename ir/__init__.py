"""layerc's typed graph IR (dump files) — see graph.py — and its value types."""

from layerc.ir.constants import Device, DType, TorchAttr
from layerc.ir.diagnostics import LayercError, Location, ParseError, VerifyError
from layerc.ir.graph import (
    OP,
    OUTPUT,
    PLACEHOLDER,
    Graph,
    Module,
    Node,
    Value,
    Weight,
    is_structurally_equivalent,
)
from layerc.ir.types import UNKNOWN, OpaqueType, SymDim, TensorType, TupleType, Type, UnknownType

__all__ = [
    "Device", "DType", "TorchAttr", "LayercError", "Location", "ParseError", "VerifyError",
    "OP", "OUTPUT", "PLACEHOLDER", "Graph", "Module", "Node", "Value", "Weight",
    "is_structurally_equivalent", "UNKNOWN", "OpaqueType", "SymDim", "TensorType", "TupleType",
    "Type", "UnknownType",
]
