"""Ops fed by no layer (masks, positions, rotary tables): which of them a layer owns."""

from __future__ import annotations

from layerc.ir.graph import OP, OUTPUT, PLACEHOLDER, Node, Value
from layerc.passes.base import node_op_name
from layerc.passes.slice_flow import POST, PRE, Runs


def assign_unanchored(nodes: list[Node], layer: dict[Value, int], role: dict[Node, str], index: dict[Value, int],
                      activation: set[Node]) -> None:
    """Ops fed by no layer (computed from placeholders, constants or model-level ops: masks,
    positions, rotary tables) that one layer alone reads join it when they are its own: computed
    from inputs only it reads (its KV cache), or computed inside it, after its first op (a
    per-layer reshape of a shared table). The rest is model-level: read by several layers, by
    none, or computed before the layer began (a mask that only one layer of a short stack uses
    is still the model's)."""
    first: dict[int, int] = {}  # where each layer begins: its first activation
    for n in nodes:
        if n in layer and layer[n] not in (PRE, POST) and n in activation:
            first.setdefault(layer[n], index[n])
    # A placeholder read by several layers (positions, masks' inputs) makes what is computed from
    # it shared; one read by a single layer (its KV cache) does not.
    readers: dict[Node, set[int]] = {}
    for n in reversed(nodes):
        if n.kind not in (OP, PLACEHOLDER) or n in layer:
            continue
        found: set[int] = set()
        for u in n.users:
            if u in layer:
                found.add(layer[u])
            elif u in readers:
                found |= readers[u]
            elif u.kind == OUTPUT:
                found.add(POST)
        readers[n] = found
    sources: dict[Node, set[Node]] = {}
    for n in nodes:
        if n.kind != OP or n in layer:
            continue
        srcs: set[Node] = set()
        for v in n.inputs:
            if isinstance(v, Node) and v.kind == PLACEHOLDER:
                srcs.add(v)
            elif v in sources:
                srcs |= sources[v]
        sources[n] = srcs
        found = readers[n]
        if is_batch_level(n):
            continue
        if len(found) != 1 or next(iter(found)) in (PRE, POST):
            continue
        d = next(iter(found))
        own_inputs = bool(srcs) and all(readers[p] == found for p in srcs)
        if own_inputs or index[n] > first.get(d, len(nodes)):
            layer[n], role[n] = d, "core"
    runs = Runs.over(nodes, layer, layers_only=True)
    for n in nodes:
        if n.kind == OP and n not in layer and not is_batch_level(n):
            linked = _chain_link(n, layer, runs, index)
            if linked is not None:
                layer[n], role[n] = linked, "core"


def _chain_link(n: Node, layer: dict[Value, int], runs: Runs, index: dict[Value, int]) -> int | None:
    """The layer of an op that one layer reads and the next copies on (each layer casts the
    rotary table it was handed, and hands on its cast): computed while that layer runs and read
    there, its other readers the same op on it, in another layer's run."""
    d = runs.next_layer(index[n])
    if d is None or not any(layer.get(u) == d for u in n.users):
        return None
    rest = [u for u in n.users if layer.get(u) != d]
    return d if rest and all(u.kind == OP and u.target == n.target and u.args[:1] == (n,)
                             and runs.next_layer(index[u]) not in (d, None) for u in rest) else None


def is_batch_level(node: Node) -> bool:
    """Metadata preparation runs once per forward pass for every layer, however many use it."""
    return "prepare_metadata" in node_op_name(node)
