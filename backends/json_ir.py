"""The IR as JSON (``layerc opt --emit json``): everything a printer could show, in a form other
tools read without layerc. Arguments keep their kinds: references are ``{"ref": name}``,
tuples ``{"tuple": [...]}``, torch constants ``{"dtype": ...}`` / ``{"device": ...}``, complex
numbers ``{"complex": "(1+2j)"}``, symbolic sizes ``{"sym": "2*s77"}``, ``{"ellipsis": true}``."""

from __future__ import annotations

import math

from layerc.backends.json_encoding import to_json

from layerc.ir.constants import Device, DType, TorchAttr
from layerc.ir.graph import Graph, Module, Node, Value, Weight
from layerc.ir.types import OpaqueType, SymDim, TensorType, TupleType, Type, UnknownType


def module_to_dict(module: Module) -> dict:
    return {
        "transform": module.transform,
        "stage": module.stage,
        "generation": module.generation,
        "counter": module.counter,
        "source": module.source,
        "graphs": [graph_to_dict(g) for g in module.graphs],
    }


def graph_to_dict(graph: Graph) -> dict:
    return {
        "name": graph.name,
        "weights": [_weight(w) for w in graph.weights.values()],
        "nodes": [_node(n) for n in graph.nodes],
    }


def _weight(w: Weight) -> dict:
    d = {"name": w.name, "type": type_to_dict(w.type)}
    if w.target:
        d["target"] = w.target
    return d


def _node(n: Node) -> dict:
    d: dict[str, object] = {"name": n.name, "kind": n.kind}
    if n.target is not None:
        d["target"] = n.target
    if n.opcode:
        d["opcode"] = n.opcode
    d["type"] = type_to_dict(n.type)
    d["args"] = [arg_to_json(a) for a in n.args]
    if n.kwargs:
        d["kwargs"] = {k: arg_to_json(v) for k, v in n.kwargs.items()}
    if n.loc is not None:
        d["line"] = n.loc.line
    meta = {k: v for k, v in n.meta.items() if isinstance(v, (str, int, float, bool)) or v is None}
    if meta:
        d["meta"] = meta
    return d


def type_to_dict(t: Type) -> dict:
    if isinstance(t, TensorType):
        shape = None if t.shape is None else [d if isinstance(d, int) else str(d) for d in t.shape]
        return {"kind": "tensor", "shape": shape, "dtype": t.dtype}
    if isinstance(t, TupleType):
        return {"kind": t.container, "elements": [type_to_dict(e) for e in t.elements]}
    if isinstance(t, OpaqueType):
        return {"kind": "opaque", "pytype": t.pytype}
    if isinstance(t, UnknownType):
        return {"kind": "unknown"}
    raise TypeError(t)


def arg_to_json(a):
    if isinstance(a, Value):
        return {"ref": a.name}
    if a is None or isinstance(a, (bool, int, str)):
        return a
    if isinstance(a, float):
        return a if math.isfinite(a) else {"float": repr(a)}
    if isinstance(a, list):
        return [arg_to_json(x) for x in a]
    if isinstance(a, tuple):
        return {"tuple": [arg_to_json(x) for x in a]}
    if isinstance(a, dict):
        return {"dict": [[arg_to_json(k), arg_to_json(v)] for k, v in a.items()]}
    if isinstance(a, slice):
        return {"slice": [arg_to_json(a.start), arg_to_json(a.stop), arg_to_json(a.step)]}
    if isinstance(a, DType):
        return {"dtype": a.name}
    if isinstance(a, Device):
        return {"device": str(a)}
    if isinstance(a, TorchAttr):
        return {"torch": a.name}
    if isinstance(a, complex):
        return {"complex": repr(a)}
    if isinstance(a, SymDim):
        return {"sym": a.expr}
    if a is Ellipsis:
        return {"ellipsis": True}
    raise TypeError(f"cannot encode {type(a).__name__} as JSON")


def dumps(module: Module) -> str:
    return to_json(module_to_dict(module), indent=True).decode() + "\n"
