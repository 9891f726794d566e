"""``slice-layers`` and ``slice-layer{layer=N}``: which decoder layer each node belongs to,
decided by dataflow from the weights, never by node names or ids.

Seeds are ops that read weights tagged with a layer (``tag-weights``). Ops that read untagged,
non-fused weights (embedding, final norm, lm_head, rotary buffers) are model-level anchors:
``PRE`` before the stack, ``POST`` after it. Then, for every other op,

- ``A(n)``: the latest layer whose seeds reach ``n`` (max over inputs) — the forward follow;
- ``D(n)``: the earliest layer whose seeds ``n`` reaches (min over users) — the backward follow.

``A == D``: inside that layer. ``A < D``: between layers ``a`` and ``d``. Such a boundary region
is cut where all dataflow from layer ``a`` to layer ``d`` passes through one node — the residual
add that ends a layer in an eager graph. The cut and what precedes it belong to ``a``, what
follows it to ``d``; with no cut (AutoDeploy fuses the residual add into the next layer's norm,
so a residual edge bypasses every boundary node) the region belongs to ``a``: router arithmetic
and the fused MoE stay with the router's layer. Ops fed only by placeholders (masks, positions,
RoPE tables, batch metadata) join the one layer that reads them, or are shared. Placeholders
are never part of a layer. Fused weights take the layer of the ops that read them.

Results go to ``meta``: ``layer`` (int, or None outside every layer) and ``layer_role``
(seed, core, boundary, outside, shared, input) on nodes; ``layer`` on weights;
``layers`` (sorted layer numbers) on the graph.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass
from typing import ClassVar

from layerc.ir.diagnostics import LayercError
from layerc.ir.graph import OP, OUTPUT, PLACEHOLDER, Graph, Module, Node, Value, Weight
from layerc.ir.targets import ALIASES, CASTS, op_name
from layerc.passes.base import Context, ModulePass
from layerc.passes.tag_weights import TagWeights

PRE = -1
POST = 1 << 30


def _seed_layer(node: Node) -> int | None:
    """The layer the op's tagged weights give (the most common; ties to the later layer)."""
    tags = [w.meta["layer"] for w in node.inputs if isinstance(w, Weight) and w.meta.get("layer_source") == "name"]
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
    index = {n: i for i, n in enumerate(nodes)}
    fixed: dict[Node, int] = {n: s for n in nodes if n.kind == OP and (s := _seed_layer(n)) is not None}
    model_level = [n for n in nodes if n.kind == OP and n not in fixed and _is_model_level(n)]
    # Model-level ops fed by no layer come before the stack. One fed by a layer is after it only
    # if no layer's seed depends on it (a RoPE op reads an untagged cos/sin table mid-layer).
    A = _forward(nodes, fixed)
    for n in model_level:
        if n not in A:
            fixed[n] = PRE
    A = _forward(nodes, fixed)
    D = _backward(nodes, fixed)
    for n in model_level:
        if n not in fixed and n not in D:
            fixed[n] = POST
    A = _forward(nodes, fixed)
    D = _backward(nodes, fixed)

    layer: dict[Node, int] = {}
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
    _assign_boundaries(nodes, regions, layer, role, index)
    _assign_prologues(nodes, A, layer, role, index)
    _assign_unanchored(nodes, layer, role, index)
    for n in nodes:  # a getitem goes with the tuple it reads (one output of a piece, of a topk)
        if n.kind == OP and op_name(n.target) == "getitem":
            src = n.args[0] if n.args else None
            if isinstance(src, Node) and src.kind == OP:
                if src in layer:
                    layer[n], role[n] = layer[src], role[src] if role[src] != "seed" else "core"
                else:
                    layer.pop(n, None)
    _label(graph, layer, role, index)


def _assign_boundaries(nodes: list[Node], regions: dict, layer: dict, role: dict, index: dict) -> None:
    """Split each region between layers ``a`` and ``d`` at its cut. An op between two layers that
    are not adjacent (a residual cast of layer ``a+1`` that only its closing add reads, which
    itself sits between ``a+1`` and ``a+2``) is placed again once its neighbours are: its
    forward and backward follows, now through placed ops, usually meet in one layer."""
    # Where each layer runs: the assigned ops in program order, for "which layer runs next".
    placed = [index[n] for n in nodes if n in layer]
    runs = _Runs(placed, [layer[nodes[i]] for i in placed])
    for _ in range(3):
        for (a, d), members in regions.items():
            after = _after_cut(members, a, d, layer, index, runs)
            for n in members:
                layer[n], role[n] = (d if n in after else a), "boundary"
        skipping = [n for (a, d), members in regions.items() if 0 <= a and d != POST and d - a >= 2 for n in members]
        if not skipping:
            return
        for n in skipping:
            del layer[n]
        A, D = _forward(nodes, layer), _backward(nodes, layer)
        regions = {}
        for n in skipping:
            if n not in D or A[n] >= D[n]:
                layer[n], role[n] = A[n], "core"
            else:
                regions.setdefault((A[n], D[n]), []).append(n)
        if all(d - a >= 2 for a, d in regions):  # nothing moved closer: keep the first answer
            for (a, d), members in regions.items():
                after = _after_cut(members, a, d, layer, index, runs)
                for n in members:
                    layer[n], role[n] = (d if n in after else a), "boundary"
            return


def _assign_prologues(nodes: list[Node], A: dict, layer: dict, role: dict, index: dict) -> None:
    """The ops between the model's inputs and a layer ``d`` that are ``d``'s own: those on the way
    into the layer's first ops (the ones no other op of ``d`` feeds: its input norm) after the last
    op that every path from the model's anchors into ``d`` crosses (the embedding, its scaling or
    its dropout), the same backward rule as between two layers. Masks and rotary tables enter
    ``d`` further in (at the attention scores), so they stay outside."""
    prologue: dict[int, list[Node]] = {}
    D = _backward(nodes, layer)  # through the ops placed so far (a residual cast read by a closing add)
    for n in nodes:
        if n.kind == OP and n not in layer and A.get(n) == PRE and D.get(n, -1) >= 0:
            prologue.setdefault(D[n], []).append(n)
    if not prologue:
        return
    # The layer's entry: its first op (in program order) that the region feeds and no activation
    # of its own does: the input norm, not a mask's consumer.
    activation = _activations(nodes)
    # A layer that reads an earlier layer has its stream from it: what the model's anchors feed
    # it (Zamba's copy of the embeddings, concatenated in each hybrid layer) is the model's.
    chained = {layer[n] for n in nodes if layer.get(n, PRE) not in (PRE, POST)
               and any(0 <= layer.get(v, PRE) < layer[n] for v in n.inputs)}
    for d, members in prologue.items():
        if d in chained:
            continue
        region = set(members)
        entry = next((x for x in nodes if layer.get(x) == d and x.kind == OP
                      and any(v in region or layer.get(v) == PRE for v in x.inputs)
                      and not any(layer.get(v) == d and v in activation for v in x.inputs)), None)
        if entry is None:
            continue
        entry_inputs = {v for v in entry.inputs if v in region or layer.get(v) == PRE}
        feeding: set[Node] = set()
        stack = [v for v in entry_inputs if v in region]
        while stack:
            v = stack.pop()
            if v not in feeding:
                feeding.add(v)
                stack.extend(u for u in v.inputs if u in region)
        for n in _after_entry(feeding, region, d, layer, index, entry_inputs):
            layer[n], role[n] = d, "boundary"


def _after_entry(feeding: set[Node], region: set[Node], d: int, layer: dict, index: dict,
                 entry_inputs: set = frozenset()) -> set[Node]:
    """Of the ops on the way into layer ``d``'s entries (``feeding``) and the ops of ``region``
    they feed that feed only ``d`` (a scaled residual), those after the last op every path from the model's anchors
    into ``d`` crosses; a cast right after that op is the layer's own first op."""
    anchors = {v for n in feeding for v in n.inputs if layer.get(v) == PRE} | {v for v in entry_inputs if layer.get(v) == PRE}
    stream = set(feeding)
    stream |= {n for n in region if n.users and all(layer.get(u) == d for u in n.users)
               and any(v in feeding or v in anchors for v in n.inputs)}
    if not stream:
        return set()
    sources = {v for n in stream for v in n.inputs if layer.get(v) == PRE}
    src, sink = object(), object()
    preds: dict[object, list[object]] = {s: [src] for s in sources}
    order: dict[object, int] = {src: -1, sink: 1 << 40}
    targets: list[Node] = []
    for n in sorted(stream | sources, key=index.__getitem__):
        if n in stream:
            preds[n] = [v for v in n.inputs if v in stream or v in sources] or [src]
        order[n] = index[n]
        targets += [u for u in n.users if layer.get(u) == d and u not in preds]
    for t in dict.fromkeys(targets):
        preds[t] = [v for v in t.inputs if v in stream or v in sources]
        order[t] = index[t]
    preds[sink] = list(dict.fromkeys(targets))
    if not targets:
        return set()
    idom = _dominators(preds, order, src)
    c, top = _cut(idom, sink, set(preds[sink]), stream)
    c = top if c is None else c
    if c is src:
        return stream
    after: set[Node] = set()
    for n in sorted(stream, key=index.__getitem__):
        if n is not c and any(v is c or v in after for v in n.inputs):
            after.add(n)
    return after


def _activations(nodes: list[Node]) -> set[Node]:
    """Values computed from the model's inputs, not from weights and constants alone (as a norm's
    ``1 + weight`` or a shared block's weight transpose is, wherever the program puts it)."""
    activation: set[Node] = set()
    for n in nodes:
        if n.kind == PLACEHOLDER or n.kind == OP and any(v in activation for v in n.inputs):
            activation.add(n)
    return activation


def _assign_unanchored(nodes: list[Node], layer: dict, role: dict, index: dict) -> None:
    """Ops fed by no layer (computed from placeholders, constants or model-level ops: masks,
    positions, rotary tables) that one layer alone reads join it when they are its own: computed
    from inputs only it reads (its KV cache), or computed inside it, after its first op (a
    per-layer reshape of a shared table). The rest is model-level: read by several layers, by
    none, or computed before the layer began (a mask that only one layer of a short stack uses
    is still the model's)."""
    first: dict[int, int] = {}  # where each layer begins: its first activation
    last: dict[int, int] = {}
    activation = _activations(nodes)
    for n in nodes:
        if n in layer and layer[n] not in (PRE, POST) and n in activation:
            first.setdefault(layer[n], index[n])
            last[layer[n]] = index[n]
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
        if _is_batch_level(n):
            continue
        if len(found) != 1 or next(iter(found)) in (PRE, POST):
            continue
        d = next(iter(found))
        own_inputs = bool(srcs) and all(readers[p] == found for p in srcs)
        if own_inputs or index[n] > first.get(d, len(nodes)):
            layer[n], role[n] = d, "core"
    placed = [index[n] for n in nodes if n in layer and layer[n] not in (PRE, POST)]
    runs = _Runs(placed, [layer[nodes[i]] for i in placed])
    for n in nodes:
        if n.kind == OP and n not in layer and not _is_batch_level(n):
            d = _chain_link(n, layer, runs, index)
            if d is not None:
                layer[n], role[n] = d, "core"


def _chain_link(n: Node, layer: dict, runs: "_Runs", index: dict) -> int | None:
    """The layer of an op that one layer reads and the next copies on (each layer casts the
    rotary table it was handed, and hands on its cast): computed while that layer runs and read
    there, its other readers the same op on it, in another layer's run."""
    d = runs.next_layer(index[n])
    if d is None or not any(layer.get(u) == d for u in n.users):
        return None
    rest = [u for u in n.users if layer.get(u) != d]
    return d if rest and all(u.kind == OP and u.target == n.target and u.args[:1] == (n,)
                             and runs.next_layer(index[u]) not in (d, None) for u in rest) else None


def _label(graph: Graph, layer: dict, role: dict, index: dict) -> None:
    """Write the results to ``meta``; name each op's region: ``prologue`` (the model's ops before
    the layers and the ones they share), ``layer N``, ``epilogue`` (after the last layer)."""
    nodes = graph.nodes
    last_layer_op = max((index[n] for n in nodes if layer.get(n, PRE) not in (PRE, POST)), default=-1)
    for n in nodes:
        if n.kind != OP:
            n.meta["layer"], n.meta["layer_role"] = None, "input" if n.kind == PLACEHOLDER else "output"
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


def _feeds_layer(node: Node, layer: dict) -> bool:
    return any(layer.get(u, PRE) not in (PRE, POST) for u in node.users)


def _is_batch_level(node: Node) -> bool:
    """Metadata preparation runs once per forward pass for every layer, however many use it."""
    return "prepare_metadata" in op_name(node.target)


def _is_add(node: Node) -> bool:
    return op_name(node.target) in ("add", "add_", "iadd") if node.kind == OP else False


class _Runs:
    """Which layer the next placed op after a program position belongs to."""

    def __init__(self, positions: list[int], layers: list[int]):
        self.positions, self.layers = positions, layers

    def next_layer(self, position: int) -> int | None:
        i = bisect_right(self.positions, position)
        return self.layers[i] if i < len(self.layers) else None


def _forward(nodes: list[Node], fixed: dict[Node, int]) -> dict[Node, int]:
    """A(n): the layer that last ran among those reaching n (fixed nodes keep their own)."""
    return _propagate(nodes, nodes, fixed, lambda n: n.inputs, max)


def _backward(nodes: list[Node], fixed: dict[Node, int]) -> dict[Node, int]:
    """D(n): the layer that runs first among those n reaches (fixed nodes keep their own)."""
    return _propagate(nodes, reversed(nodes), fixed, lambda n: n.users, min)


def _propagate(nodes: list[Node], order, fixed: dict[Node, int], neighbours, pick) -> dict[Node, int]:
    """Latest and earliest by when a fixed op runs, not by its layer's number: in a stack the two
    agree, and in a looped model (the same layers run again, weights shared) the layer before
    a loop's first is its last, not a lower number. The model's anchors before the stack come
    before every layer, those after it after every layer."""
    end = len(nodes)
    position = {n: i for i, n in enumerate(nodes)}
    keys: dict[Node, tuple[int, int]] = {}
    for n in order:
        if n in fixed:
            value = fixed[n]
            keys[n] = (-1, value) if value == PRE else (end, value) if value == POST else (position[n], value)
        elif n.kind == OP:
            seen = [keys[v] for v in neighbours(n) if v in keys]
            if seen:
                keys[n] = pick(seen)
    return {n: k[1] for n, k in keys.items()}


def _after_cut(members: list[Node], a: int, d: int, layer: dict[Node, int], index: dict[Node, int],
               runs: "_Runs | None" = None) -> set[Node]:
    """Boundary nodes that follow the last node every path from layer ``a`` to layer ``d`` crosses
    (and that run when layer ``a`` is done: ``runs``)."""
    region = set(members)
    # The flow graph: a virtual source feeding layer-a nodes, a virtual sink fed by layer-d nodes.
    src, sink = object(), object()
    preds: dict[object, list[object]] = {}
    targets = []
    for n in members:
        ps = []
        for v in n.inputs:
            if v in region:
                ps.append(v)
            elif layer.get(v) == a:
                preds.setdefault(v, [src])
                ps.append(v)
        preds[n] = ps or [src]
    for v in [*members, *(v for v in preds if v not in region)]:  # what enters d from the region or beside it
        for u in v.users:
            if u not in region and layer.get(u) == d:
                targets.append(u)
    targets = list(dict.fromkeys(targets))
    if not targets:
        return set()
    for t in targets:
        for v in t.inputs:
            if v not in region and layer.get(v) == a:
                preds.setdefault(v, [src])  # a direct edge from layer a to layer d bypasses the region
    order = {src: -1}
    for v in preds:
        order[v] = index[v]
    for t in targets:
        preds[t] = [v for v in t.inputs if v in preds]
        order[t] = index[t]
    preds[sink] = targets
    order[sink] = 1 << 40
    idom = _dominators(preds, order, src)
    cuts = _region_cuts(idom, sink, targets, region, src)
    # In program order a layer runs whole: what runs while layer a still runs is a's (a state it
    # hands the next layer from its middle, as ZAYA's router does).
    after = _downstream(members, cuts, index)
    return after if runs is None else {n for n in after if runs.next_layer(index[n]) != a}


def _region_cuts(idom: dict, sink, targets: list, region: set, src) -> list[Node]:
    """The cuts of a region between two layers: one, or where no op carries every path (a layer
    that hands the next one a side state beside its residual stream), one per path's target.

    With no cut (the residual bypasses the region: AD fuses the add into the next norm; or a
    weight-less tail runs into the final norm) the whole region stays in a, router arithmetic
    and the MoE tail with it."""
    def one(end, others) -> Node | None:
        c, _ = _cut(idom, end, others, region)
        return None if c is None or c is src else c

    found = one(sink, set(targets))
    if found is not None or idom.get(sink) is not src or len(targets) < 2:
        return [found] if found is not None else []
    return [c for t in targets if (c := one(t, set())) is not None]


def _downstream(members: list[Node], cuts: list[Node], index: dict) -> set[Node]:
    """Of ``members``, those fed (transitively, among them) by a cut, the cuts themselves aside."""
    after: set[Node] = set()
    for n in sorted(members, key=index.__getitem__):
        if n not in cuts and any(v in cuts or v in after for v in n.inputs):
            after.add(n)
    return after


def _cut(idom: dict, sink, targets: set, region: set) -> tuple[object | None, object]:
    """Where a region between two stretches of the program (two layers, or the model's anchors and
    a layer) is cut, and the op above the chain of the region's ops that every path into the
    later stretch crosses. The ops after the cut belong to the later stretch.

    The cut is the chain's topmost fork, the value that both the next block and the residual read
    (the residual add that ends a layer, the embedding's dropout); where a cast makes the fork,
    the op before the cast (a norm casts its input first). A chain without a fork is cut at its
    last add (the residual add before a final norm without weights), else before the aliases
    that end it (export hands a value out of the layer stack through one); else there is no cut
    (None) and the caller decides: a weight-less tail stays with its layer, a post-norm layer
    that keeps its normed input as the residual starts after the op above the chain. With no
    chain at all, the paths meet at the op above the region (the earlier layer's last op): the
    cut is that op, or the virtual source where they never meet."""
    c = idom.get(sink)
    while c in targets:
        c = idom.get(c)
    chain = []
    while c in region:
        chain.append(c)
        c = idom.get(c)
    forks = [x for x in chain if len(set(x.users)) >= 2]
    if chain and isinstance(c, Node) and len({u for u in c.users if u in region or u in targets}) >= 2:
        return c, c  # the earlier stretch's last op is the fork (a final norm without a cast)
    if forks:
        cut = forks[-1]
        while cut in region and op_name(cut.target) in CASTS:
            cut = idom.get(cut)
        return cut, c
    if not chain:  # the paths meet above the region, at one op: everything after it is later
        return c, c
    adds = [x for x in chain if _is_add(x)]
    if adds:
        return adds[0], c
    handed = 0
    while handed < len(chain) and op_name(chain[handed].target) in ALIASES:
        handed += 1
    if handed:
        return (chain[handed] if handed < len(chain) else c), c
    return None, c


def _dominators(preds: dict, order: dict, src) -> dict:
    """Immediate dominators in a DAG, visiting nodes in topological order (Cooper–Harvey–Kennedy)."""
    idom = {src: None}
    depth = {src: 0}
    for v in sorted(preds, key=order.__getitem__):
        if v is src:
            continue
        ps = [p for p in preds[v] if p in idom]
        if not ps:
            ps = [src]
        cur = ps[0]
        for p in ps[1:]:
            cur = _lca(cur, p, idom, depth)
        idom[v] = cur
        depth[v] = depth[cur] + 1
    return idom


def _lca(x, y, idom, depth):
    while x is not y:
        if depth[x] >= depth[y]:
            x = idom[x]
        else:
            y = idom[y]
    return x


def _needs_tags(module: Module) -> bool:
    return any("layer" not in w.meta for g in module.graphs for w in g.weights.values())


@dataclass(frozen=True)
class SliceLayers(ModulePass):
    """Partition every graph into decoder layers by dataflow (meta 'layer' on nodes and weights)."""

    name: ClassVar[str] = "slice-layers"

    def apply(self, ctx: Context, module: Module) -> None:
        if _needs_tags(module):
            TagWeights().apply(ctx, module)
        for graph in module.graphs:
            slice_graph(graph)


@dataclass(frozen=True)
class SliceLayer(ModulePass):
    """Keep only decoder layer N of the main graph; what it reads from outside becomes labelled inputs."""

    name: ClassVar[str] = "slice-layer"
    layer: int = 0

    def apply(self, ctx: Context, module: Module) -> None:
        graph = module.main_graph()
        if "layers" not in graph.meta:
            SliceLayers().apply(ctx, module)
        layers = graph.meta["layers"]
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
