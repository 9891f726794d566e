"""Two graph dumps compared node by node: two AutoDeploy transform stages of one model, or two
models that share their weights' names.

Nodes are matched by structure, never by their names (fx numbers ``view_17`` by creation order,
which any transform renumbers) nor by their order:

1. inputs by name; each op that reads a set of weights no other op reads, with the op of the
   other graph that reads the same set (a norm that became another norm's kernel stays matched);
   and ops that share the weights that only they read (a linear quantized to read its scales too);
2. then along the dataflow, to a fixpoint: from a matched pair, the users that read it at the same
   place with the same op, and the inputs at the same place of two matched ops of the same kind,
   wherever that pairing is the only one possible (ambiguous candidates stay unmatched); then ops
   that compute the same expression of matched values (a mask built from constants). A pair must
   sit in the same layer of both graphs, as ``slice-layers`` placed them; only what is left may
   pair across a layer boundary.

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
from typing import Any, Iterable, Iterator

from layerc.ir.builder import sanitize
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


def _operands(node: Node, keywords: bool = True) -> Iterator[tuple[int, Any]]:
    """(position, leaf) over the node's arguments (and keyword values), flattened in order."""
    position = 0
    stack: list[Any] = [*node.args, *(node.kwargs.values() if keywords else ())][::-1]
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)) and not isinstance(item, Value):
            stack.extend(reversed(item))
            continue
        yield position, item
        position += 1


def _signature(leaves: list[tuple[int, Any]]) -> tuple[tuple[int, ...], str]:
    """The positions of a node's value operands and the text of its constants (``getitem(x, 0)``
    and ``getitem(x, 1)`` differ only there)."""
    values, constants = [], []
    for position, leaf in leaves:
        if isinstance(leaf, Value):
            values.append(position)
        else:
            constants.append(repr(leaf))
    return tuple(values), "|".join(constants)


class Matching:
    """A one-to-one map between the nodes of graph ``a`` and graph ``b``."""

    def __init__(self, a: Graph, b: Graph):
        self.a, self.b = a, b
        self.ab: dict[Node, Node] = {}
        self.ba: dict[Node, Node] = {}
        self._queue: deque[tuple[Node, Node]] = deque()
        self._slack = 0  #: layers apart that a pair found by the dataflow may be
        self._flat: dict[Node, list[tuple[int, Any]]] = {}

    def pair(self, x: Node, y: Node) -> None:
        if x in self.ab or y in self.ba:
            return
        self.ab[x], self.ba[y] = y, x
        self._queue.append((x, y))

    def run(self) -> "Matching":
        """Anchors, then the dataflow and the same expressions to a fixpoint: the evidence that
        checks most first (users and inputs with the same op and constants, whole expressions),
        ops that differ in their constants only where that is all that is left;
        all of it within one layer, then (only what is left) across a layer boundary, so an op
        pairs with the one of its own layer wherever the evidence allows."""
        self._anchor()
        for self._slack in (0, 1):
            self._queue.extend(self.ab.items())
            while self._queue:
                while self._queue:
                    x, y = self._queue.popleft()
                    self._forward(x, y, strict=True)
                    if op_key(x) == op_key(y):
                        self._backward(x, y, strict=True, evidence=True)
                self._same_expressions()
                for strict, evidence in ((True, False), (False, False)):
                    if self._queue:
                        break
                    for x, y in list(self.ab.items()):
                        if not strict:
                            self._forward(x, y, strict=False)
                        if op_key(x) == op_key(y):
                            self._backward(x, y, strict, evidence)
        return self

    def _same_expressions(self) -> None:
        """Ops that nothing matched yet links (a chain of ``arange`` and ``unsqueeze`` that builds
        a mask, code left dead): paired where they compute the same expression of matched values,
        inputs and constants. Where each graph computes one expression equally often, its copies
        are interchangeable and pair in graph order."""
        found = [_unmatched_by_expression(g, self.ab if g is self.a else self.ba, g is self.a) for g in (self.a, self.b)]
        for h, xs in found[0].items():
            ys = found[1].get(h)
            if ys is not None and len(xs) == len(ys):
                for x, y in zip(xs, ys):
                    if x not in self.ab and y not in self.ba and same_place(x, y):
                        self.pair(x, y)

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
        for x, y in _weight_partners(self.a, self.b):
            if x not in self.ab and y not in self.ba:
                self.pair(x, y)

    def _forward(self, x: Node, y: Node, strict: bool) -> None:
        """Users of a matched pair that read it at the same place with the same op (and, when
        ``strict``, the same constants), where one candidate is left on each side."""
        ux = self._users_by(x, self.ab, strict)
        uy = self._users_by(y, self.ba, strict)
        for key, xs in ux.items():
            ys = uy.get(key)
            if (ys is not None and len(xs) == 1 and len(ys) == 1 and same_place(xs[0], ys[0], self._slack)
                    and (not strict or self._consistent(xs[0], ys[0]))):
                self.pair(xs[0], ys[0])

    def _users_by(self, value: Node, matched: dict[Node, Node], strict: bool) -> dict[tuple[Any, ...], list[Node]]:
        """The unmatched users of ``value`` by (op, where they read it[, constants])."""
        groups: dict[tuple[Any, ...], list[Node]] = defaultdict(list)
        for u in value.users:
            if u in matched or u.kind == PLACEHOLDER:
                continue
            leaves = self._leaves(u)
            key: tuple[Any, ...] = (op_key(u), tuple(p for p, leaf in leaves if leaf is value))
            if strict:
                key += (_signature(leaves),)
            groups[key].append(u)
        return groups

    def _leaves(self, n: Node) -> list[tuple[int, Any]]:
        """``_operands(n)``, flattened once per node (a node is visited from each of its inputs)."""
        found = self._flat.get(n)
        if found is None:
            found = self._flat[n] = list(_operands(n))
        return found

    def _backward(self, x: Node, y: Node, strict: bool, evidence: bool = False) -> None:
        """The inputs at the same place of two matched ops of one kind, when they compute the same
        (in the same layer; in the second round, also the next: a cast on a layer's boundary goes
        to either)."""
        ix, iy = ([(p, v) for p, v in self._leaves(n) if isinstance(v, Value) and not isinstance(v, Weight)] for n in (x, y))
        if [p for p, _ in ix] != [p for p, _ in iy]:
            return
        for (_, u), (_, v) in zip(ix, iy):
            if (isinstance(u, Node) and isinstance(v, Node) and u.kind == v.kind == OP and u not in self.ab
                    and v not in self.ba and op_key(u) == op_key(v) and same_place(u, v, self._slack)
                    and (not strict or self._consistent(u, v, evidence))):
                self.pair(u, v)

    def _consistent(self, u: Node, v: Node, evidence: bool = False) -> bool:
        """Whether ``u`` and ``v`` have the same constants, and read at each place either inputs
        matched to each other or inputs not matched yet (the strict rounds' test); with
        ``evidence``, at least one of their inputs matched to the other's, or none at all: two
        getitems of the same index pair through the tuple they unpack, not through a user alone."""
        lu, lv = self._leaves(u), self._leaves(v)
        if _signature(lu) != _signature(lv):
            return False
        seen = shown = False
        for (_, p), (_, q) in zip(lu, lv):
            if isinstance(p, Node) and isinstance(q, Node):
                seen = True
                if p in self.ab and q in self.ba:
                    if self.ab[p] is not q:
                        return False
                    shown = True
        return shown or not seen or not evidence


def _expressions(graph: Graph, matched: dict[Node, Node] | None = None, is_a: bool = True) -> dict[Value, int]:
    """A hash of the expression each node computes: its op, its positional constants and its
    operands' hashes, down to inputs, weights and (given ``matched``) matched nodes, known by A's
    node. Constant keywords are left out: an fx print spells ``device=cpu`` where a dump does not."""
    code: dict[Value, int] = {}
    for n in graph.nodes:
        if matched is not None and n in matched:
            code[n] = hash(("matched", id(n if is_a else matched[n])))
        elif n.kind != OP:
            code[n] = hash((n.kind, n.name))
        else:
            leaves = tuple(_leaf_code(code, leaf) for _, leaf in _operands(n, keywords=False))
            leaves += tuple(_leaf_code(code, v) for v in n.kwargs.values() if isinstance(v, Value))
            code[n] = hash((op_key(n), leaves))
    return code


def _unmatched_by_expression(graph: Graph, matched: dict[Node, Node], is_a: bool) -> dict[int, list[Node]]:
    """The unmatched ops of ``graph`` by the hash of their expression (``_expressions``)."""
    code = _expressions(graph, matched, is_a)
    groups: dict[int, list[Node]] = defaultdict(list)
    for n in graph.nodes:
        if n.kind == OP and n not in matched:
            groups[code[n]].append(n)
    return groups


def _leaf_code(code: dict[Value, int], leaf: Any) -> Any:
    if isinstance(leaf, Weight):
        return hash(("weight", weight_key(leaf)))
    if isinstance(leaf, Value):
        return code.get(leaf, 0)
    return repr(leaf)


def weight_key(w: Weight) -> str:
    """A weight's identity across dumps: its dotted path sanitized as fx names it (a dump names
    ``model_layers_0_mlp_down_proj_weight`` what an fx print calls ``model.layers.0.mlp.down_proj.weight``)."""
    return sanitize(w.target) if w.target else w.name


def _weights(n: Node) -> frozenset[str]:
    return frozenset(weight_key(v) for v in n.inputs if isinstance(v, Weight))


def same_place(x: Node, y: Node, slack: int = 0) -> bool:
    """Whether two ops sit in the same place of their models (layer i of each, or both before or
    after the layers), as the slicer placed them: what the dataflow pairs must also agree with the
    layers, or the norm that reads the last layer's output in one model would pair with the next
    layer's in a model with one more. ``slack``: places apart that still count as one (an op on
    the boundary of two layers, or of the last layer and what follows, which a slicer may give to
    either)."""
    if slack:
        px, py = _place(x), _place(y)
        if px is not None and py is not None:
            return abs(px - py) <= slack
    rx, ry = x.meta.get("region"), y.meta.get("region")
    return rx is None or ry is None or rx == ry


def _place(n: Node) -> int | None:
    """The op's place in the order of its model: -1 before the layers, i in layer i, one past the
    last layer after them (None where the slicer did not say)."""
    layer, region = n.meta.get("layer"), n.meta.get("region")
    if isinstance(layer, int):
        return layer
    if region == "prologue":
        return -1
    if region == "epilogue" and n.graph is not None:
        layers: list[int] = n.graph.meta.get("layers") or [-1]
        return max(layers) + 1
    return None


def _unique_weight_readers(graph: Graph) -> dict[frozenset[str], Node]:
    """Each set of weights that one op alone reads → that op."""
    readers: dict[frozenset[str], list[Node]] = defaultdict(list)
    for n in graph.nodes:
        if n.kind == OP and (names := _weights(n)):
            readers[names].append(n)
    return {k: v[0] for k, v in readers.items() if len(v) == 1}


def _sole_readers(ops: Iterable[Node]) -> dict[str, Node]:
    """Each weight that one of ``ops`` alone reads → that op."""
    readers: dict[str, list[Node]] = defaultdict(list)
    for n in ops:
        for k in _weights(n):
            readers[k].append(n)
    return {k: v[0] for k, v in readers.items() if len(v) == 1}


def _weight_partners(a: Graph, b: Graph) -> list[tuple[Node, Node]]:
    """Ops that kept some of their weights but not all (a linear that was quantized and reads its
    scales too, a down projection fused with the gate and up ones): x of A and y of B where every
    weight that only x reads in A and only one op reads in B is read by y, and the other way round."""
    only = [_sole_readers(n for n in g.nodes if n.kind == OP) for g in (a, b)]
    partners: dict[Node, set[Node]] = defaultdict(set)
    for k, x in only[0].items():
        y = only[1].get(k)
        if y is not None:
            partners[x].add(y)
            partners[y].add(x)
    return [(x, next(iter(ys))) for x, ys in partners.items()
            if x.graph is a and len(ys) == 1 and partners[next(iter(ys))] == {x}]


# -- regions --------------------------------------------------------------------------------------
@dataclass
class Region:
    """Nodes of A and of B that one change turned into each other."""

    kind: str  #: fused, split, replaced, added, removed, rewritten; rewired, constants (an op kept)
    a: list[Node]
    b: list[Node]
    layer: int | None
    where: str  #: ``layer 3``, ``prologue`` or ``epilogue``
    detail: str = ""  #: what a kept op changed: ``argument 1: add_1 → add``, ``1e-05 → 1e-06``

    @property
    def signature(self) -> tuple[str, tuple[str, ...], tuple[str, ...], str]:
        """What makes two regions one change: a new constant is one change wherever it is; a
        rewiring names nodes of its own layer, so its kind and ops make it."""
        return self.kind, _names(self.a), _names(self.b), self.detail if self.kind == "constants" else ""


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
    found += kept_but_changed(m)
    found.sort(key=lambda r: (order_a[r.a[0]] if r.a else len(order_a), order_b[r.b[0]] if r.b else 0))
    return found


def _weight_links(items: list[Item]) -> list[tuple[Item, Item]]:
    """An unmatched op of A and one of B that alone (on their sides) read one weight."""
    only = [_sole_readers(n for s, n in items if s == side) for side in ("a", "b")]
    return [(("a", x), ("b", only[1][k])) for k, x in only[0].items() if k in only[1]]


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
    by_input: dict[Node, list[Item]] = defaultdict(list)
    roots = list(dict.fromkeys(sets.find(i) for i in items))
    for ra in (r for r in roots if r[0] == "a"):
        for x in ins[ra]:
            by_input[x].append(ra)
    for rb in (r for r in roots if r[0] == "b"):
        for ra in dict.fromkeys(ra for x in ins[rb] for ra in by_input[x]):
            if layer[ra] & layer[rb] and outs[ra] & outs[rb]:
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
        if _op(n) == "getitem" and n.args and isinstance(n.args[0], Node) and (side, n.args[0]) in owner:
            owner[(side, n)] = owner[(side, n.args[0])]
    pieces: list[list[Item]] = [[] for _ in seeds]
    rest: list[Item] = []
    for item in items:
        (pieces[owner[item]] if item in owner else rest).append(item)
    return [p for p in pieces if p] + ([rest] if rest else [])


def kept_but_changed(m: Matching) -> list[Region]:
    """Ops matched with an op of their kind that read other inputs (``rewired``: another matched
    node, another weight) or other constants (``constants``). An input that is itself part of a
    change (unmatched, or replaced) explains the difference and is not counted again."""
    found = []
    same = {**_expressions(m.a), **_expressions(m.b)}
    for x, y in m.ab.items():
        if x.kind != OP or op_key(x) != op_key(y):
            continue
        detail = _rewiring(m, x, y, same)
        if detail:
            found.append(_region("rewired", [x], [y], detail))
        elif detail := _new_constants(x, y):
            found.append(_region("constants", [x], [y], detail))
    return found


def _rewiring(m: Matching, x: Node, y: Node, code: dict[Value, int]) -> str:
    ox, oy = [(p, v) for p, v in _operands(x) if isinstance(v, Value)], [(p, v) for p, v in _operands(y) if isinstance(v, Value)]
    if [p for p, _ in ox] != [p for p, _ in oy]:
        return "its arguments are other values"
    said = []
    for (p, u), (_, v) in zip(ox, oy):
        if isinstance(u, Weight) or isinstance(v, Weight):
            if not (isinstance(u, Weight) and isinstance(v, Weight)) or weight_key(u) != weight_key(v):
                said.append(f"argument {p}: {u.name} → {v.name}")
        elif (isinstance(u, Node) and isinstance(v, Node) and u in m.ab and v in m.ba and m.ab[u] is not v
              and code.get(u) != code.get(v)):  # (two copies of one expression are one value)
            if op_key(u) == op_key(m.ab[u]) and op_key(v) == op_key(m.ba[v]):  # (a replaced input is its own change)
                said.append(f"argument {p}: {u.name} → {v.name}")
    return ", ".join(said)


def _new_constants(x: Node, y: Node) -> str:
    """The positional constants, and the keyword constants both spell, that differ."""
    cx = [repr(v) for _, v in _operands(x, keywords=False) if not isinstance(v, Value)]
    cy = [repr(v) for _, v in _operands(y, keywords=False) if not isinstance(v, Value)]
    keys = [k for k in x.kwargs if k in y.kwargs and not isinstance(x.kwargs[k], Value) and not isinstance(y.kwargs[k], Value)]
    cx += [f"{k}={x.kwargs[k]!r}" for k in keys]
    cy += [f"{k}={y.kwargs[k]!r}" for k in keys]
    if cx == cy:
        return ""
    if len(cx) != len(cy):
        return f"({', '.join(cx)}) → ({', '.join(cy)})"
    return ", ".join(f"{a} → {b}" for a, b in zip(cx, cy) if a != b)


def _region(kind: str, a: list[Node], b: list[Node], detail: str = "") -> Region:
    layers = Counter(n.meta.get("layer") for n in a or b if n.meta.get("layer") is not None)
    layer = min(layers, key=lambda k: (-layers[k], k)) if layers else None
    regions_ = Counter(str(n.meta.get("region") or "") for n in a or b)
    where = f"layer {layer}" if layer is not None else (regions_.most_common(1)[0][0] or "outside the layers")
    return Region(kind, a, b, layer, where, detail)


# -- the comparison -------------------------------------------------------------------------------
@dataclass
class Change:
    """One change, as every region that has it: its layers, or the prologue/epilogue."""

    kind: str
    before: tuple[str, ...]  #: A's op names
    after: tuple[str, ...]  #: B's op names
    detail: str = ""  #: a new constant's text (``1e-05 → 1e-06``)
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
    grouped: dict[tuple[str, tuple[str, ...], tuple[str, ...], str], Change] = {}
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
        return [{"name": n.name, "op": op_key(n), "weights": sorted(_weights(n))} for n in ns]

    return {
        "a": d.a, "b": d.b,
        "layers": {"a": len(d.layers_a), "b": len(d.layers_b)},
        "ops": {"a": d.nodes_a, "b": d.nodes_b, "matched": d.matched,
                "matched_share": round(d.matched / max(d.nodes_a, d.nodes_b, 1), 4)},
        "inputs_added": d.inputs_added, "inputs_removed": d.inputs_removed,
        "changes": [{
            "kind": c.kind, "before": list(c.before), "after": list(c.after), "detail": c.detail,
            "where": layer_span(c.layers, d.layers_a), "layers": c.layers, "outside_layers": c.outside,
            "regions": [{"where": r.where, "a": nodes(r.a), "b": nodes(r.b), "detail": r.detail} for r in c.regions],
        } for c in d.changes],
    }

