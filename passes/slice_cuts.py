"""Where a layer begins and ends: the regions between two layers (or between the model's anchors
and a layer) cut on the chain of ops every path into the later one crosses."""

from __future__ import annotations

from collections import Counter
from typing import Collection, Mapping, Sequence, cast

from layerc.ir.graph import OP, Node, Value
from layerc.ir.targets import ALIASES, CASTS
from layerc.passes.base import node_op_name
from layerc.passes.slice_flow import POST, PRE, Runs, backward, forward, is_add

#: The most paths into a layer cut one by one (a real boundary has a handful).
MAX_PATH_CUTS = 64
#: Each vertex of a flow graph (an op, a value, or a virtual source or sink) with its immediate
#: dominator (None for the source)
Dominators = dict[object, object | None]


def assign_boundaries(nodes: list[Node], regions: dict[tuple[int, int], list[Node]], layer: dict[Value, int],
                      role: dict[Node, str], index: dict[Value, int]) -> None:
    """Split each region between layers ``a`` and ``d`` at its cut. An op between two layers that
    are not adjacent (a residual cast of layer ``a+1`` that only its closing add reads, which
    itself sits between ``a+1`` and ``a+2``) is placed again once its neighbours are: its
    forward and backward follows, now through placed ops, usually meet in one layer."""
    runs = Runs.over(nodes, layer)  # where each layer runs: the ops placed before any cut

    def split(regions: dict[tuple[int, int], list[Node]]) -> None:
        for (a, d), members in regions.items():
            after = _after_cut(members, a, d, layer, index, runs)
            for n in members:
                layer[n], role[n] = (d, "head") if n in after else (a, "tail")

    for attempt in range(3):
        split(regions)
        skipping = [n for (a, d), members in regions.items() if 0 <= a and d != POST and d - a >= 2 for n in members]
        if not skipping or attempt == 2:
            return
        for n in skipping:
            del layer[n]
        A, D = forward(nodes, layer), backward(nodes, layer)
        regions = {}
        for n in skipping:
            if n not in D or A[n] >= D[n]:
                layer[n], role[n] = A[n], "core"
            else:
                regions.setdefault((A[n], D[n]), []).append(n)
        if all(d - a >= 2 for a, d in regions):  # nothing moved closer: keep the first answer
            split(regions)
            return


def assign_prologues(nodes: list[Node], A: dict[Node, int], layer: dict[Value, int], role: dict[Node, str],
                     index: dict[Value, int], activation: set[Node]) -> None:
    """The ops between the model's inputs and a layer ``d`` that are ``d``'s own: those on the way
    into the layer's first ops (the ones no other op of ``d`` feeds: its input norm) after the last
    op that every path from the model's anchors into ``d`` crosses (the embedding, its scaling or
    its dropout), the same backward rule as between two layers. Masks and rotary tables enter
    ``d`` further in (at the attention scores), so they stay outside."""
    prologue: dict[int, list[Node]] = {}
    # through the ops placed so far (a residual cast read by a closing add), to the layers only: a
    # model op that also reads the value (a state returned from the embedding) does not count
    D = backward(nodes, {n: x for n, x in layer.items() if x not in (PRE, POST)})
    for n in nodes:
        if n.kind == OP and n not in layer and A.get(n) == PRE and D.get(n, -1) >= 0:
            prologue.setdefault(D[n], []).append(n)
    if not prologue:
        return
    # The layer's entry: its first op (in program order) that the region feeds and no activation
    # of its own does: the input norm, not a mask's consumer.
    # A layer that reads an earlier layer has its stream from it: what the model's anchors feed
    # it (Zamba's copy of the embeddings, concatenated in each hybrid layer) is the model's.
    chained = {layer[n] for n in nodes if layer.get(n, PRE) not in (PRE, POST)
               and any(0 <= layer.get(v, PRE) < layer[n] for v in n.inputs)}
    ops_of: dict[int, list[Node]] = {}
    for n in nodes:
        if n.kind == OP and layer.get(n) in prologue:
            ops_of.setdefault(layer[n], []).append(n)
    for d, members in prologue.items():
        if d in chained:
            continue
        region = set(members)
        entry = next((x for x in ops_of.get(d, ()) if any(v in region or layer.get(v) == PRE for v in x.inputs)
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
            layer[n], role[n] = d, "head"


def _after_entry(feeding: set[Node], region: set[Node], d: int, layer: dict[Value, int], index: dict[Value, int],
                 entry_inputs: set[Value] | frozenset[Value] = frozenset()) -> set[Node]:
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
    return stream if c is src else _downstream(list(stream), [cast(Node, c)], index)  # not the source: an op


def _after_cut(members: list[Node], a: int, d: int, layer: dict[Value, int], index: dict[Value, int],
               runs: Runs) -> set[Node]:
    """Boundary nodes that follow the last node every path from layer ``a`` to layer ``d`` crosses
    (and that run when layer ``a`` is done: ``runs``)."""
    region = set(members)
    # The flow graph: a virtual source feeding layer-a nodes, a virtual sink fed by layer-d nodes.
    src, sink = object(), object()
    preds: dict[object, Sequence[object]] = {}
    targets: list[Node] = []
    for n in members:
        ps: list[object] = []
        for v in n.inputs:
            if v in region:
                ps.append(v)
            elif layer.get(v) == a:
                preds.setdefault(v, [src])
                ps.append(v)
        preds[n] = ps or [src]
    # what enters d from the region or beside it (no virtual vertex yet: the others are values)
    for v in [*members, *(cast(Value, v) for v in preds if v not in region)]:
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
    order: dict[object, int] = {src: -1}
    for vertex in preds:
        order[vertex] = index[cast(Node, vertex)]  # no virtual vertex yet: the ops of layer a and the region
    for t in targets:
        preds[t] = [v for v in t.inputs if v in preds]
        order[t] = index[t]
    preds[sink] = targets
    order[sink] = 1 << 40
    idom = _dominators(preds, order, src)
    cuts = _region_cuts(idom, sink, targets, region, src)
    # In program order a layer runs whole: what runs while layer a still runs is a's (a state it
    # hands the next layer from its middle, as ZAYA's router does).
    return {n for n in _downstream(members, cuts, index) if runs.next_layer(index[n]) != a}


def _region_cuts(idom: Dominators, sink: object, targets: list[Node], region: set[Node], src: object) -> list[Node]:
    """The cuts of a region between two layers: one, or where no op carries every path (a layer
    that hands the next one a side state beside its residual stream), one per path's target.

    With no cut (the residual bypasses the region: AD fuses the add into the next norm; or a
    weight-less tail runs into the final norm) the whole region stays in a, router arithmetic
    and the MoE tail with it."""
    def one(end: object, others: Collection[object]) -> Node | None:
        c, _ = _cut(idom, end, others, region)
        return None if c is None or c is src else cast(Node, c)  # not the source: an op

    found = one(sink, set(targets))
    if found is not None or idom.get(sink) is not src or len(targets) < 2:
        return [found] if found is not None else []
    if len(targets) > MAX_PATH_CUTS:  # each cut walks the chain: keep the work linear
        return []
    return [c for t in targets if (c := one(t, set())) is not None]


def _downstream(members: list[Node], cuts: list[Node], index: dict[Value, int]) -> set[Node]:
    """Of ``members``, those fed (transitively, among them) by a cut, the cuts themselves aside."""
    after: set[Node] = set()
    for n in sorted(members, key=index.__getitem__):
        if n not in cuts and any(v in cuts or v in after for v in n.inputs):
            after.add(n)
    return after


def _cut(idom: Dominators, sink: object, targets: Collection[object], region: set[Node]) -> tuple[object | None, object]:
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
    chain: list[Node] = []
    while c in region:
        chain.append(c)
        c = idom.get(c)
    forks = [x for x in chain if len(set(x.users)) >= 2]
    if chain and isinstance(c, Node) and len({u for u in c.users if u in region or u in targets}) >= 2:
        return c, c  # the earlier stretch's last op is the fork (a final norm without a cast)
    if forks:
        cut: object = forks[-1]
        while cut in region and node_op_name(cut) in CASTS:
            cut = idom.get(cut)
        return cut, c
    if not chain:  # the paths meet above the region, at one op: everything after it is later
        return c, c
    adds = [x for x in chain if is_add(x)]
    if adds:
        return adds[0], c
    handed = 0
    while handed < len(chain) and node_op_name(chain[handed]) in ALIASES:
        handed += 1
    if handed:
        return (chain[handed] if handed < len(chain) else c), c
    return None, c


def _dominators(preds: Mapping[object, Sequence[object]], order: dict[object, int], src: object) -> Dominators:
    """Immediate dominators in a DAG, visiting nodes in topological order (Cooper–Harvey–Kennedy)."""
    idom: Dominators = {src: None}
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


def _lca(x: object, y: object, idom: Dominators, depth: dict[object, int]) -> object:
    while x is not y:
        if depth[x] >= depth[y]:
            x = idom[x]
        else:
            y = idom[y]
    return x


def align_ends(nodes: list[Node], layer: dict[Value, int], role: dict[Node, str], index: dict[Value, int]) -> None:
    """Periodicity: a layer opens as the layers of its kind usually do, and the last layer closes
    as the one before it of its kind does.

    Where a cut leaves a layer a longer head than its kind's usual one (nanochat normalizes the
    embedding with the same weight-less norm every layer opens with; a looped stack mixes the
    layers' outputs between passes, as Dory does) and the usual head ends it, the ops before that
    are the model's. Where the last layer closes with more or fewer ops than its neighbour (OPT's
    reshape after its residual add, GPT's reshape of the stack's output), the excess goes to the
    model and the missing ones come from it, when that makes the two alike op for op. Else
    nothing moves."""
    ops: dict[int, list[Node]] = {}
    for n in nodes:
        if n.kind == OP and layer.get(n, PRE) not in (PRE, POST):
            ops.setdefault(layer[n], []).append(n)
    kind = {x: tuple(sorted(node_op_name(n) for n in members if role.get(n) == "seed")) for x, members in ops.items()}
    openings = _openings(nodes, layer, role)
    _align_heads(openings, kind, layer, role)
    passes = [x for x, _ in openings]
    if len(ops) < 2 or len(passes) != len(set(passes)):  # a looped stack: its last layer closes each pass
        return
    order = sorted(ops)
    last = order[-1]
    ref = next((x for x in reversed(order[:-1]) if kind[x] == kind[last]), None)
    if ref is None:  # how a layer of another kind closes says nothing (a MoE layer after dense ones)
        return
    # Compared: the ops that close each layer after all its others, past its last add (the
    # residual add), the rest being the layer's own business (a MoE tail, a state handed on).
    tail, want = _closing(ops[last], role), _names(_closing(ops[ref], role))
    if len(tail) > len(want) and _names(tail[: len(want)]) == want:
        for n in tail[len(want):]:
            layer[n], role[n] = POST, "outside"
    elif len(tail) < len(want):
        after = sorted((n for n in nodes if layer.get(n) == POST and role.get(n) == "head"), key=index.__getitem__)
        missing = after[: len(want) - len(tail)]
        if _names(tail + missing) == want:
            for n in missing:
                layer[n], role[n] = last, "tail"


def _openings(nodes: list[Node], layer: dict[Value, int], role: dict[Node, str]) -> list[tuple[int, list[Node]]]:
    """Each run of a layer, in program order (a looped stack runs each layer again), with the
    head ops it opens with. A run starts at the first seed of a layer after another layer's
    seeds; its opening is the layer's head ops seen since that other layer's last seed."""
    openings: list[tuple[int, list[Node]]] = []
    pending: dict[int, list[Node]] = {}
    current = None
    for n in nodes:
        x = layer.get(n, PRE)
        if n.kind != OP or x in (PRE, POST):
            continue
        if role.get(n) == "head" and x != current:
            pending.setdefault(x, []).append(n)
        elif role.get(n) == "seed" and x != current:
            openings.append((x, pending.pop(x, [])))
            pending.clear()
            current = x
    return openings


def _align_heads(openings: list[tuple[int, list[Node]]], kind: dict[int, tuple[str, ...]], layer: dict[Value, int],
                 role: dict[Node, str]) -> None:
    """A run's opening longer than its kind's usual one (the commonest, seen twice at least; in a
    short stack or a hybrid, the longest other run's opening it ends with) that ends with it
    gives the model the ops before it."""
    for i, (x, opening) in enumerate(openings):
        usual = _commonest([tuple(_names(o)) for y, o in openings if kind[y] == kind[x]])
        if usual is None:  # no usual opening yet (a short stack): another run's, of its kind if any
            others = [tuple(_names(o)) for j, (y, o) in enumerate(openings) if j != i and kind[y] == kind[x]]
            if not others and i == 0:  # before the stack's first layer, a hybrid's other kinds show it
                others = [tuple(_names(o)) for _, o in openings[1:]]
            ends = [o for o in others if 0 < len(o) < len(opening) and tuple(_names(opening[len(opening) - len(o):])) == o]
            # the same layer's other passes, even one that opens with nothing (a looped
            # post-norm stack: what precedes a pass is the model's mixing)
            ends += [tuple(_names(o)) for j, (y, o) in enumerate(openings) if j != i and y == x and len(o) < len(opening)
                     and tuple(_names(opening[len(opening) - len(o):])) == tuple(_names(o))]
            usual = max(ends, key=len) if ends else None
        excess = len(opening) - len(usual or ())
        if usual is not None and excess > 0 and tuple(_names(opening[excess:])) == usual:
            for n in opening[:excess]:
                layer[n], role[n] = PRE, "outside"


def _commonest(sequences: list[tuple[str, ...]]) -> tuple[str, ...] | None:
    """The sequence seen most often, if twice at least (the shorter on a tie)."""
    counts = Counter(sequences)
    if not counts:
        return None
    best = max(counts, key=lambda s: (counts[s], -len(s)))
    return best if counts[best] >= 2 else None


def _names(seq: list[Node]) -> list[str]:
    return [node_op_name(n) for n in seq]


def _closing(members: list[Node], role: dict[Node, str]) -> list[Node]:
    """A layer's tail ops after its last other op and after its last add (program order)."""
    i = len(members)
    while i and role.get(members[i - 1]) == "tail" and not is_add(members[i - 1]):
        i -= 1
    return members[i:]
