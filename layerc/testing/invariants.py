"""What every layer slicing must keep, as a list of violations (empty: it holds): slices are
disjoint; no op reads a weight of another layer; every seed (an op on a layer's named weight) is
in that layer; an op has a layer exactly when its role says so; and where the generator planted
the truth (``meta['true_layer']``), every op is in its true layer."""

from __future__ import annotations

from layerc.ir.graph import OP, Graph, Module, Weight


def slicing_violations(graph: Graph, truth: bool = True) -> list[str]:
    """The broken invariants of a sliced graph (``truth``: also compare with ``true_layer``)."""
    problems = []
    seen: dict[object, int] = {}
    for n in graph.nodes:
        layer = n.meta.get("layer")
        if n.kind == OP and layer is not None:
            if n in seen:
                problems.append(f"'{n.name}' is in two layers")
            seen[n] = layer
            tags = {w.meta["layer"] for w in n.inputs if isinstance(w, Weight) and w.meta.get("layer") is not None}
            if not tags <= {layer}:
                problems.append(f"'{n.name}' (layer {layer}) reads a weight of layer(s) {sorted(tags - {layer})}")
        named = {w.meta["layer"] for w in n.inputs if isinstance(w, Weight) and w.meta.get("layer_source") == "name"}
        if n.kind == OP and named and (layer not in named or n.meta.get("layer_role") != "seed"):
            problems.append(f"'{n.name}' reads the weights of layer(s) {sorted(named)} but is in {layer} "
                            f"as {n.meta.get('layer_role')}")
        outside = n.meta.get("layer_role") in ("shared", "outside", "input", "output")
        if (layer is not None) == outside:
            problems.append(f"'{n.name}' has layer {layer} but role {n.meta.get('layer_role')}")
        if truth and n.kind == OP and "true_layer" in n.meta and layer != n.meta["true_layer"]:
            problems.append(f"'{n.name}' is in layer {layer}, its true layer is {n.meta['true_layer']}")
    return problems


def sliced_dump(module: Module) -> Graph:
    """The main graph of ``module`` after ``slice-layers`` (and what it requires)."""
    from layerc.passes.pipeline import run_passes
    from layerc.passes.slicing import SliceLayers

    run_passes([SliceLayers()], module)
    return module.main_graph()
