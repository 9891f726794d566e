"""``slice-layers`` and ``slice-layer{layer=N}``: which decoder layer each node belongs to,
decided by dataflow from the weights, never by node names or ids.

Seeds are ops that read weights tagged with a layer (``tag-weights``). Ops that read untagged,
non-fused weights (embedding, final norm, lm_head, rotary buffers) are the model's anchors:
``PRE`` before the stack, ``POST`` after it. Then, for every other op (``slice_flow``),

- ``A(n)``: the layer that last ran among those whose seeds reach ``n`` — the forward follow;
- ``D(n)``: the layer that runs first among those whose seeds ``n`` reaches — the backward follow.

``A == D``: inside that layer. Otherwise ``n`` lies between layers ``a`` and ``d`` (or between
the anchors and layer 0), and the region is cut where the later layer begins (``slice_cuts``).
Ops fed by no layer (masks, positions, rotary tables) join a layer only when they are its own
(``slice_unanchored``). Placeholders are never part of a layer. Fused weights take the layer of
the ops that read them.

Results go to ``meta``: ``layer`` (int, or None outside every layer), ``layer_role`` (seed, core,
head and tail — the ops a cut gave the layer that opens or closes there —, outside, shared,
input) and ``region`` (``prologue``, ``layer N``, ``epilogue``) on
nodes; ``layer`` on weights; ``layers`` (sorted layer numbers) on the graph.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import ClassVar

from layerc.ir.diagnostics import LayercError
from layerc.ir.graph import OP, OUTPUT, PLACEHOLDER, Graph, Module, Node, Value, Weight
from layerc.passes.base import Context, ModulePass, node_op_name
from layerc.passes.slice_cuts import align_ends, assign_boundaries, assign_prologues
from layerc.passes.slice_flow import POST, PRE, activations, backward, forward
from layerc.passes.slice_unanchored import assign_unanchored
from layerc.passes.tag_weights import TagWeights


def _seed_layer(node: Node) -> int | None:
    """The layer the op's tagged weights give (the most common; ties to the later layer)."""
    tags: list[int] = [w.meta["layer"] for w in node.inputs if isinstance(w, Weight) and w.meta.get("layer_source") == "name"]
    if not tags:
        return None
    counts = Counter(tags)
    return max(counts, key=lambda t: (counts[t], t))


def _is_model_level(node: Node) -> bool:
    """Reads a weight outside every layer that is not a fused (renumbered) one."""
    return any(
        isinstance(w, Weight) and w.meta.get("layer_source") != "name" and not w.name.startswith("fused_")
        for w in node.inputs
    )


def slice_graph(graph: Graph) -> None:
    """Assign ``meta['layer']``/``meta['layer_role']``/``meta['region']`` to every node of
    ``graph`` (see module doc)."""
    nodes = graph.nodes
    index: dict[Value, int] = {n: i for i, n in enumerate(nodes)}
    fixed: dict[Value, int] = {n: s for n in nodes if n.kind == OP and (s := _seed_layer(n)) is not None}
    # An op on a layer's weights alone that runs before the model reads its inputs (RWKV rescales
    # its weights in place first) prepares the model: it is the model's, not the layer's.
    live = activations(nodes)
    start = next((i for i, n in enumerate(nodes) if n.kind == OP and n in live and n.users), len(nodes))
    for n in [n for n in fixed if index[n] < start]:
        fixed[n] = PRE
    model_level = [n for n in nodes if n.kind == OP and n not in fixed and _is_model_level(n)]
    # Model-level ops fed by no layer come before the stack. One fed by a layer is after it only
    # if no layer's seed depends on it (a RoPE op reads an untagged cos/sin table mid-layer).
    A = forward(nodes, fixed)
    for n in model_level:
        if n not in A:
            fixed[n] = PRE
    A = forward(nodes, fixed)
    D = backward(nodes, fixed)
    for n in model_level:
        if n not in fixed and n not in D:
            fixed[n] = POST
    A = forward(nodes, fixed)
    D = backward(nodes, fixed)

    layer: dict[Value, int] = {}
    role: dict[Node, str] = {}
    regions: dict[tuple[int, int], list[Node]] = {}
    for n in nodes:
        if n.kind != OP:
            continue
        if n in fixed:
            layer[n], role[n] = fixed[n], "seed"
        elif n not in A or A[n] == PRE and n in D and D[n] >= 0:
            continue  # fed by no layer, read by one: decided below
        elif n not in D or A[n] == D[n] or A[n] > D[n] and (A[n] == POST or D[n] == PRE):
            layer[n], role[n] = A[n], "core"
        else:
            regions.setdefault((A[n], D[n]), []).append(n)
    # In a whole model (one with a head after the stack), what only the graph's output reads,
    # computed without weights, is a state the model returns beside the logits (XLNet's
    # memories: a slice of each layer's input), not a layer's work. (A graph of one layer, as
    # slice-layer writes it, returns the layer's own values.)
    if POST in fixed.values():
        returned: set[Node] = set()
        for n in reversed(nodes):
            if n.kind == OP and n.users and not n.weights and all(u.kind == OUTPUT or u in returned for u in n.users):
                returned.add(n)
                layer[n], role[n] = POST, "outside"
    assign_boundaries(nodes, regions, layer, role, index)
    assign_prologues(nodes, A, layer, role, index, live)
    align_ends(nodes, layer, role, index)
    assign_unanchored(nodes, layer, role, index, live)
    for n in nodes:  # a getitem goes with the tuple it reads (one output of a piece, of a topk)
        if n.kind == OP and node_op_name(n) == "getitem":
            src = n.args[0] if n.args else None
            if isinstance(src, Node) and src.kind == OP:
                if src in layer:
                    layer[n], role[n] = layer[src], role[src] if role[src] != "seed" else "core"
                else:
                    layer.pop(n, None)
    _label(graph, layer, role, index)


def _label(graph: Graph, layer: dict[Value, int], role: dict[Node, str], index: dict[Value, int]) -> None:
    """Write the results to ``meta``; name each op's region: ``prologue`` (the model's ops before
    the layers and the ones they share), ``layer N``, ``epilogue`` (after the last layer)."""
    nodes = graph.nodes
    last_layer_op = max((index[n] for n in nodes if layer.get(n, PRE) not in (PRE, POST)), default=-1)
    for n in nodes:
        if n.kind != OP:
            n.meta["layer"], n.meta["layer_role"] = None, "input" if n.kind == PLACEHOLDER else "output"
            n.meta["region"] = "prologue" if n.kind == PLACEHOLDER else "epilogue"
            continue
        value = layer.get(n)
        if value is None:
            n.meta["layer"], n.meta["layer_role"] = None, "shared"
        elif value in (PRE, POST):
            n.meta["layer"], n.meta["layer_role"] = None, "outside"
        else:
            n.meta["layer"], n.meta["layer_role"] = value, role[n]
        if value is not None and value not in (PRE, POST):
            n.meta["region"] = f"layer {value}"
        elif value == POST or value is None and index[n] > last_layer_op and not _feeds_layer(n, layer):
            n.meta["region"] = "epilogue"
        else:
            n.meta["region"] = "prologue"
    for w in graph.weights.values():  # fused weights: the layer of the ops that read them
        if w.meta.get("layer_source") != "name":
            seen = {u.meta.get("layer") for u in w.users}
            w.meta["layer"] = seen.pop() if len(seen) == 1 else None
            w.meta["layer_source"] = "dataflow" if w.meta["layer"] is not None else None
    graph.meta["layers"] = sorted({n.meta["layer"] for n in nodes if n.meta.get("layer") is not None})


def _feeds_layer(node: Node, layer: dict[Value, int]) -> bool:
    return any(layer.get(u, PRE) not in (PRE, POST) for u in node.users)


@dataclass(frozen=True)
class SliceLayers(ModulePass[Module]):
    """Partition every graph into decoder layers by dataflow (meta 'layer' on nodes and weights)."""

    name: ClassVar[str] = "slice-layers"
    requires: ClassVar[tuple[str, ...]] = ("tag-weights",)

    @classmethod
    def satisfied(cls, module: Module) -> bool:
        return bool(module.graphs) and all("layers" in g.meta or "layer" in g.meta for g in module.graphs)

    def apply(self, ctx: Context, module: Module) -> None:
        if not TagWeights.satisfied(module):
            raise LayercError("slice-layers needs the weights tagged: run tag-weights first (a PassManager does)")
        for graph in module.graphs:
            slice_graph(graph)


@dataclass(frozen=True)
class SliceLayer(ModulePass[Module]):
    """Keep only decoder layer N of the main graph; what it reads from outside becomes labelled inputs."""

    name: ClassVar[str] = "slice-layer"
    requires: ClassVar[tuple[str, ...]] = ("slice-layers",)
    layer: int = 0

    def apply(self, ctx: Context, module: Module) -> None:
        graph = module.main_graph()
        if "layers" not in graph.meta and "layer" not in graph.meta:
            raise LayercError("slice-layer needs the layers: run slice-layers first (a PassManager does)")
        layers = graph.meta.get("layers", [graph.meta.get("layer")])
        if self.layer not in layers:
            shown = f"{layers[0]}..{layers[-1]}" if layers else "none"
            raise LayercError(f"slice-layer: no layer {self.layer} in graph '{graph.name}' (layers: {shown})")
        module.graphs = [extract_layer(graph, self.layer)]
        module.declared_graph_count = None


def extract_layer(graph: Graph, layer: int) -> Graph:
    """A new graph with layer ``layer``'s ops; values read from outside become placeholders
    (``meta['external']`` holds their label), values used outside are returned by the output."""
    from layerc.passes.labels import external_label

    members = [n for n in graph.nodes if n.kind == OP and n.meta.get("layer") == layer]
    inside = set(members)
    out = Graph(graph.name)
    # sliced_from: the whole graph, for passes that need the program around the layer (bind-kernels)
    out.meta.update(layer=layer, source_graph=graph.name, sliced_from=graph)
    mapping: dict[Value, Value] = {}
    for n in members:
        for v in n.inputs:
            if v in inside or v in mapping:
                continue
            if isinstance(v, Weight):
                w = out.weight(v.name, v.type, v.loc)
                w.target = v.target
                w.meta.update(v.meta)
                mapping[v] = w
            else:
                ph = Node(PLACEHOLDER, v.name, type=v.type, loc=v.loc)
                ph.meta.update(external=external_label(v), source_layer=v.meta.get("layer"))
                mapping[v] = out.append(ph)
    from layerc.ir.graph import map_values

    for n in members:
        copy = Node(OP, n.name, n.target, map_values(n.args, lambda v: mapping.get(v, v)),
                    map_values(n.kwargs, lambda v: mapping.get(v, v)), n.type, n.loc, n.opcode)
        copy.meta.update(n.meta)
        mapping[n] = out.append(copy)
    escaping = [mapping[n] for n in members if any(u not in inside for u in n.users)]
    out.append(Node(OUTPUT, "output" if "output" not in out else "output_1", args=(tuple(escaping) if len(escaping) != 1 else escaping[0],)))
    return out
