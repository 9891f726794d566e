"""Two graph dumps compared node by node: two AutoDeploy transform stages of one model, or two
models that share their weights' names.

Nodes are matched by structure, never by their names (fx numbers ``view_17`` by creation order,
which any transform renumbers) nor by their order:

1. inputs by name, and each op that reads a set of weights no other op reads, with the op of the
   other graph that reads the same set (a norm that became another norm's kernel stays matched);
2. then along the dataflow, to a fixpoint: from a matched pair, the users that read it at the same
   place with the same op, and the inputs at the same place of two matched ops of the same kind,
   wherever that pairing is the only one possible (ambiguous candidates stay unmatched).

What stays unmatched, with the matched ops whose kind changed, is grouped into *regions*: nodes
connected by the dataflow on each side, and an A region joined with the B region that reads the
same weights or sits between the same matched nodes. A region is ``fused`` (several ops became
one), ``split``, ``replaced`` (one op for another), ``added``, ``removed`` or ``rewritten``. The
same change in several layers (a fusion every layer got) is one change with its layers listed.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field
from typing import Any, Iterator

from layerc.ir.graph import OP, PLACEHOLDER, Graph, Node, Value, Weight
from layerc.ir.targets import op_name

#: ops that only unpack or reshape what another op computed: a fusion that leaves some of them
#: around (a fused op's ``getitem``\ s) is still one op becoming another
PLUMBING = frozenset({"getitem", "view", "reshape", "_unsafe_view", "squeeze", "unsqueeze", "flatten", "expand", "t",
                      "transpose", "permute", "contiguous", "alias", "detach",
                      # stream and event markers order work, they compute nothing
                      "begin_aux_stream_passthrough", "end_aux_stream_passthrough", "wait_aux_stream_passthrough",
                      "record_event_passthrough", "record_event", "wait_event"})
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def op_key(node: Node) -> str:
    """What a node computes, without what varies from one dump to another (a Python function's
    address)."""
    if node.kind != OP:
        return node.kind
    return _ADDRESS.sub("", node.target or "")


def _operands(node: Node) -> Iterator[tuple[int, Any]]:
    """(position, leaf) over the node's arguments and keyword values, flattened in order."""
    position = 0
    stack: list[Any] = [*node.args, *node.kwargs.values()][::-1]
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)) and not isinstance(item, Value):
            stack.extend(reversed(item))
            continue
        yield position, item
        position += 1


def _signature(node: Node) -> tuple[tuple[int, ...], str]:
    """The positions of its value operands and the text of its constants (``getitem(x, 0)`` and
    ``getitem(x, 1)`` differ only there)."""
    values, constants = [], []
    for position, leaf in _operands(node):
        if isinstance(leaf, Value):
            values.append(position)
        else:
            constants.append(repr(leaf))
    return tuple(values), "|".join(constants)


def _value_operands(node: Node) -> list[tuple[int, Value]]:
    return [(p, leaf) for p, leaf in _operands(node) if isinstance(leaf, Value) and not isinstance(leaf, Weight)]


class Matching:
    """A one-to-one map between the nodes of graph ``a`` and graph ``b``."""

    def __init__(self, a: Graph, b: Graph):
        self.a, self.b = a, b
        self.ab: dict[Node, Node] = {}
        self.ba: dict[Node, Node] = {}
        self._queue: deque[tuple[Node, Node]] = deque()

    def pair(self, x: Node, y: Node) -> None:
        if x in self.ab or y in self.ba:
            return
        self.ab[x], self.ba[y] = y, x
        self._queue.append((x, y))

    def run(self) -> "Matching":
        self._anchor()
        while self._queue:
            x, y = self._queue.popleft()
            self._forward(x, y)
            if op_key(x) == op_key(y):
                self._backward(x, y)
        return self

    def _anchor(self) -> None:
        b_inputs = {n.name: n for n in self.b.nodes if n.kind == PLACEHOLDER}
        for n in self.a.nodes:
            if n.kind == PLACEHOLDER and n.name in b_inputs:
                self.pair(n, b_inputs[n.name])
        if self.a.output is not None and self.b.output is not None:
            self.pair(self.a.output, self.b.output)
        readers = [_unique_weight_readers(g) for g in (self.a, self.b)]
        for key, x in readers[0].items():
            y = readers[1].get(key)
            if y is not None:
                self.pair(x, y)

    def _forward(self, x: Node, y: Node) -> None:
        """Users of a matched pair that read it at the same place with the same op: first by op,
        place and constants, then by op and place alone, each where one candidate is left a side."""
        for strict in (True, False):
            ux = _users_by(x, self.ab, strict)
            uy = _users_by(y, self.ba, strict)
            for key, xs in ux.items():
                ys = uy.get(key)
                if ys is not None and len(xs) == 1 and len(ys) == 1:
                    self.pair(xs[0], ys[0])

    def _backward(self, x: Node, y: Node) -> None:
        """The inputs at the same place of two matched ops of one kind, when they compute the same."""
        ix, iy = _value_operands(x), _value_operands(y)
        if [p for p, _ in ix] != [p for p, _ in iy]:
            return
        for (_, u), (_, v) in zip(ix, iy):
            if (isinstance(u, Node) and isinstance(v, Node) and u.kind == v.kind == OP and u not in self.ab
                    and v not in self.ba and op_key(u) == op_key(v)):
                self.pair(u, v)


def _unique_weight_readers(graph: Graph) -> dict[frozenset[str], Node]:
    """Each set of weights that one op alone reads → that op."""
    readers: dict[frozenset[str], list[Node]] = defaultdict(list)
    for n in graph.nodes:
        if n.kind == OP:
            names = frozenset(w.name for w in n.inputs if isinstance(w, Weight))
            if names:
                readers[names].append(n)
    return {k: v[0] for k, v in readers.items() if len(v) == 1}


def _users_by(value: Node, matched: dict[Node, Node], strict: bool) -> dict[tuple[Any, ...], list[Node]]:
    """The unmatched users of ``value`` by (op, where they read it[, constants])."""
    groups: dict[tuple[Any, ...], list[Node]] = defaultdict(list)
    for u in value.users:
        if u in matched or u.kind == PLACEHOLDER:
            continue
        places = tuple(p for p, leaf in _operands(u) if leaf is value)
        key: tuple[Any, ...] = (op_key(u), places)
        if strict:
            key += (_signature(u),)
        groups[key].append(u)
    return groups


# -- regions --------------------------------------------------------------------------------------
@dataclass
class Region:
    """Nodes of A and of B that one change turned into each other."""

    kind: str  #: fused, split, replaced, added, removed or rewritten
    a: list[Node]
    b: list[Node]
    layer: int | None
    where: str  #: ``layer 3``, ``prologue`` or ``epilogue``

    @property
    def signature(self) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
        return self.kind, _names(self.a), _names(self.b)


def _op(node: Node) -> str:
    return op_name(node.target) if node.kind == OP and node.target else node.kind


def _names(nodes: list[Node]) -> tuple[str, ...]:
    return tuple(sorted(_op(n) for n in nodes))


def _kind(a: list[Node], b: list[Node]) -> str:
    if not a:
        return "added"
    if not b:
        return "removed"
    work_a = [n for n in a if _op(n) not in PLUMBING] or a
    work_b = [n for n in b if _op(n) not in PLUMBING] or b
    if len(work_a) == len(work_b) == 1:
        return "replaced"
    if len(work_b) == 1:
        return "fused"
    if len(work_a) == 1:
        return "split"
    return "rewritten"


class _Sets:
    """Union-find over hashable items."""

    def __init__(self) -> None:
        self.parent: dict[Any, Any] = {}

    def find(self, x: Any) -> Any:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, x: Any, y: Any) -> None:
        rx, ry = self.find(x), self.find(y)
        if rx != ry:
            self.parent[ry] = rx


Item = tuple[str, Node]  #: ("a" or "b", a node of that side's graph)


def regions(m: Matching) -> list[Region]:
    """The changes between the two graphs, in A's (then B's) graph order."""
    changed = [(x, y) for x, y in m.ab.items() if x.kind == OP and op_key(x) != op_key(y)]
    kept = {x for x, _ in changed} | {y for _, y in changed}
    items = [("a", n) for n in m.a.nodes if n.kind == OP and (n not in m.ab or n in kept)]
    items += [("b", n) for n in m.b.nodes if n.kind == OP and (n not in m.ba or n in kept)]
    free = set(items)
    sets, anchors = _Sets(), _Sets()  # anchors: the cross-side links alone, what each piece of a region was
    for item in items:
        sets.find(item)
    for x, y in changed:
        sets.union(("a", x), ("b", y))
        anchors.union(("a", x), ("b", y))
    # one layer's changes stay apart from the next layer's, however the residual stream links them
    for side, n in items:
        for v in n.inputs:
            if (side, v) in free and v.meta.get("layer") == n.meta.get("layer"):
                sets.union((side, n), (side, v))
    for pair in _weight_links(items):
        sets.union(*pair)
        anchors.union(*pair)
    _join_between_matches(m, items, free, sets)
    members: dict[Item, list[Item]] = defaultdict(list)
    for item in items:
        members[sets.find(item)].append(item)
    order_a = {n: i for i, n in enumerate(m.a.nodes)}
    order_b = {n: i for i, n in enumerate(m.b.nodes)}
    found = []
    for piece in (p for group in members.values() for p in _split(group, anchors)):
        a = sorted((n for s, n in piece if s == "a"), key=order_a.__getitem__)
        b = sorted((n for s, n in piece if s == "b"), key=order_b.__getitem__)
        found.append(_region(_kind(a, b), a, b))
    found.sort(key=lambda r: (order_a[r.a[0]] if r.a else len(order_a), order_b[r.b[0]] if r.b else 0))
    return found


def _weight_links(items: list[Item]) -> list[tuple[Item, Item]]:
    """An unmatched op of A and one of B that alone (on their sides) read one weight."""
    by_weight: dict[str, list[Item]] = defaultdict(list)
    for side, n in items:
        for w in dict.fromkeys(n.inputs):
            if isinstance(w, Weight):
                by_weight[w.name].append((side, n))
    links = []
    for readers in by_weight.values():
        if len(readers) == 2 and readers[0][0] != readers[1][0]:
            links.append((readers[0], readers[1]))
    return links


def _join_between_matches(m: Matching, items: list[Item], free: set[Item], sets: _Sets) -> None:
    """An A region and a B region of one layer that read the same matched nodes and are read by
    the same matched nodes are one change."""
    ins: dict[Item, set[Node]] = defaultdict(set)
    outs: dict[Item, set[Node]] = defaultdict(set)
    layer: dict[Item, set[int | None]] = defaultdict(set)
    for side, n in items:
        root = sets.find((side, n))
        layer[root].add(n.meta.get("layer"))
        for v in n.inputs:
            if isinstance(v, Node) and (side, v) not in free and (a := _in_a(m, side, v)) is not None:
                ins[root].add(a)
        for u in n.users:
            if (side, u) not in free and (a := _in_a(m, side, u)) is not None:
                outs[root].add(a)
    roots = list(dict.fromkeys(sets.find(i) for i in items))
    for ra in (r for r in roots if r[0] == "a"):
        for rb in (r for r in roots if r[0] == "b"):
            if layer[ra] & layer[rb] and ins[ra] & ins[rb] and outs[ra] & outs[rb]:
                sets.union(ra, rb)


def _in_a(m: Matching, side: str, n: Node) -> Node | None:
    """``n`` as A's node: itself on side A, its match on side B (None when it has none)."""
    return n if side == "a" else m.ba.get(n)


def _split(items: list[Item], anchors: _Sets) -> list[list[Item]]:
    """A region holding several anchored changes (ops of A and B linked by a weight or a match),
    cut into one piece per anchor: the ops that feed an anchor join it (what a fused op took in),
    then the ops an anchor feeds, and a tuple's items the op that made them; so a fusion next to
    an added op reads as two changes, not one rewrite."""
    linked: dict[Item, list[Item]] = defaultdict(list)
    for item in items:
        linked[anchors.find(item)].append(item)
    seeds = [group for group in linked.values() if len({side for side, _ in group}) == 2]
    if len(seeds) < 2:
        return [items]
    inside = set(items)
    owner: dict[Item, int] = {item: k for k, group in enumerate(seeds) for item in group}
    for upstream in (True, False):
        frontier = deque(owner)
        while frontier:
            side, n = frontier.popleft()
            for v in (n.inputs if upstream else n.users):
                if not isinstance(v, Node):
                    continue
                item = (side, v)
                if item in inside and item not in owner and v.meta.get("layer") == n.meta.get("layer"):
                    owner[item] = owner[(side, n)]
                    frontier.append(item)
    for side, n in list(owner):
        if _op(n) == "getitem" and n.args and (side, n.args[0]) in owner:
            owner[(side, n)] = owner[(side, n.args[0])]
    pieces: list[list[Item]] = [[] for _ in seeds]
    rest: list[Item] = []
    for item in items:
        (pieces[owner[item]] if item in owner else rest).append(item)
    return [p for p in pieces if p] + ([rest] if rest else [])


def _region(kind: str, a: list[Node], b: list[Node]) -> Region:
    layers = Counter(n.meta.get("layer") for n in a or b if n.meta.get("layer") is not None)
    layer = min(layers, key=lambda k: (-layers[k], k)) if layers else None
    regions_ = Counter(str(n.meta.get("region") or "") for n in a or b)
    where = f"layer {layer}" if layer is not None else (regions_.most_common(1)[0][0] or "outside the layers")
    return Region(kind, a, b, layer, where)


# -- the comparison -------------------------------------------------------------------------------
@dataclass
class Change:
    """One change, as every region that has it: its layers, or the prologue/epilogue."""

    kind: str
    before: tuple[str, ...]  #: A's op names
    after: tuple[str, ...]  #: B's op names
    regions: list[Region] = field(default_factory=list)

    @property
    def layers(self) -> list[int]:
        return sorted({r.layer for r in self.regions if r.layer is not None})

    @property
    def outside(self) -> list[str]:
        return sorted({r.where for r in self.regions if r.layer is None})


@dataclass
class GraphDiff:
    a: str
    b: str
    layers_a: list[int]
    layers_b: list[int]
    nodes_a: int
    nodes_b: int
    matched: int  #: ops matched one to one (whatever their kind)
    inputs_added: list[str]
    inputs_removed: list[str]
    changes: list[Change]
    regions: list[Region]
    matching: Matching


def diff_graphs(a: Graph, b: Graph, name_a: str = "A", name_b: str = "B") -> GraphDiff:
    """Compare two sliced graphs (``meta['layer']`` on their nodes, from ``slice-layers``)."""
    m = Matching(a, b).run()
    found = regions(m)
    grouped: dict[tuple[str, tuple[str, ...], tuple[str, ...]], Change] = {}
    for r in found:
        grouped.setdefault(r.signature, Change(*r.signature)).regions.append(r)
    changes = sorted(grouped.values(), key=lambda c: (-len(c.regions) * (len(c.before) + len(c.after)), c.kind, c.before, c.after))
    names_b = {n.name for n in b.nodes if n.kind == PLACEHOLDER}
    names_a = {n.name for n in a.nodes if n.kind == PLACEHOLDER}
    return GraphDiff(
        a=name_a, b=name_b, layers_a=list(a.meta.get("layers", [])), layers_b=list(b.meta.get("layers", [])),
        nodes_a=sum(n.kind == OP for n in a.nodes), nodes_b=sum(n.kind == OP for n in b.nodes),
        matched=sum(1 for x in m.ab if x.kind == OP),
        inputs_added=[n.name for n in b.nodes if n.kind == PLACEHOLDER and n.name not in names_a],
        inputs_removed=[n.name for n in a.nodes if n.kind == PLACEHOLDER and n.name not in names_b],
        changes=changes, regions=found, matching=m,
    )


def layer_span(layers: list[int], every: list[int]) -> str:
    """``every layer (32)``, ``layers 0-3, 7`` or ``layer 5``."""
    if not layers:
        return ""
    if every and layers == every and len(layers) > 1:
        return f"every layer ({len(layers)})"
    runs: list[list[int]] = []
    for k in layers:
        if runs and k == runs[-1][-1] + 1:
            runs[-1].append(k)
        else:
            runs.append([k])
    text = ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)
    return ("layer " if len(layers) == 1 else "layers ") + text


def to_dict(d: GraphDiff) -> dict[str, Any]:
    """The comparison as plain data (the JSON output)."""
    def nodes(ns: list[Node]) -> list[dict[str, Any]]:
        return [{"name": n.name, "op": op_key(n), "weights": [w.name for w in n.inputs if isinstance(w, Weight)]} for n in ns]

    return {
        "a": d.a, "b": d.b,
        "layers": {"a": len(d.layers_a), "b": len(d.layers_b)},
        "ops": {"a": d.nodes_a, "b": d.nodes_b, "matched": d.matched,
                "matched_share": round(d.matched / max(d.nodes_a, d.nodes_b, 1), 4)},
        "inputs_added": d.inputs_added, "inputs_removed": d.inputs_removed,
        "changes": [{
            "kind": c.kind, "before": list(c.before), "after": list(c.after),
            "where": layer_span(c.layers, d.layers_a), "layers": c.layers, "outside_layers": c.outside,
            "regions": [{"where": r.where, "a": nodes(r.a), "b": nodes(r.b)} for r in c.regions],
        } for c in d.changes],
    }

