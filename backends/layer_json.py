"""The layer document of seed 000 (``<dump_stem>_layer<N>.json``), from a sliced layer graph.

``nodes[id, op, shape, dtype, group, sub_group, inputs, weight_inputs[name, shape, dtype]]``,
``edges[from, to]``, ``external_inputs[id, label, shape]``; ``trace_kernels`` on nodes and
``trace_summary`` when kernels are bound. ``layer.schema.json`` beside this file is the schema.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

from layerc.ir.graph import OP, PLACEHOLDER, Graph, Module, Node, Weight
from layerc.ir.types import TupleType, Type


def shape_dtype(t: Type) -> tuple[str, str]:
    """As the writer shows an op's own result: ``(8x8, 8x8)`` / ``(torch.float32, torch.int32)``."""
    if isinstance(t, TupleType):
        return (
            "(" + ", ".join(e.shape_text() for e in t.elements) + ")",
            "(" + ", ".join(e.dtype_text() for e in t.elements) + ")",
        )
    return t.shape_text(), t.dtype_text()


def layer_document(graph: Graph, source_file: str | None) -> dict:
    """The JSON document of one sliced layer (the graph ``slice-layer`` and ``infer-groups`` made)."""
    nodes: list[dict] = []
    edges: list[dict] = []
    external: list[dict] = []
    for n in graph.nodes:
        if n.kind == PLACEHOLDER and "external" in n.meta:
            external.append({"id": n.name, "label": n.meta["external"], "shape": shape_dtype(n.type)[0]})
        elif n.kind == OP:
            nodes.append(_node(n))
    seen = set()
    for entry in nodes:
        for src in entry["inputs"]:
            if (src, entry["id"]) not in seen:
                seen.add((src, entry["id"]))
                edges.append({"from": src, "to": entry["id"]})
    doc = {"layer": graph.meta["layer"], "source_file": source_file, "nodes": nodes, "edges": edges, "external_inputs": external}
    summary = graph.meta.get("trace_summary")
    if summary:
        doc["trace_summary"] = summary
        doc["trace_unbound"] = graph.meta.get("trace_unbound", {"kernels": [], "nodes": []})
    return doc


def module_document(module: Module) -> dict:
    """The layer document of a module that ``slice-layer`` (and ``infer-groups``) left one graph in."""
    from pathlib import Path

    graph = module.main_graph()
    if "layer" not in graph.meta:
        from layerc.ir.diagnostics import LayercError

        raise LayercError(f"graph '{graph.name}' is not one sliced layer: run slice-layer first")
    return layer_document(graph, Path(module.source).name if module.source else None)


def module_text(module: Module) -> str:
    """The layer document as ``layerc layer --format json`` writes it."""
    return dumps(module_document(module))


def _node(n: Node) -> dict:
    shape, dtype = shape_dtype(n.type)
    d = {
        "id": n.name,
        "op": n.target,
        "shape": shape,
        "dtype": dtype,
        "group": n.meta.get("group", "other"),
    }
    if n.meta.get("sub_group"):
        d["sub_group"] = n.meta["sub_group"]
    d["inputs"] = [v.name for v in n.inputs if not isinstance(v, Weight)]
    d["weight_inputs"] = [{"name": w.name, "shape": w.type.shape_text(), "dtype": w.type.dtype_text()} for w in n.inputs if isinstance(w, Weight)]
    if n.meta.get("aux_stream"):
        d["aux_stream"] = n.meta["aux_stream"]
    if n.meta.get("trace_kernels"):
        d["trace_kernels"] = n.meta["trace_kernels"]
    return d


@lru_cache(maxsize=1)
def schema() -> dict:
    return json.loads(resources.files("layerc.backends").joinpath("layer.schema.json").read_text(encoding="utf-8"))


def dumps(doc: dict) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
