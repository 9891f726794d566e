"""The graph IR: a Module holds the dump header and one Graph per GraphModule section.

A Graph is an ordered list of Nodes (placeholders, ops, one output) plus the Weights that the
nodes read. Weights and buffers have no line of their own in an AutoDeploy dump (the writer
skips ``get_attr`` nodes); they become Weight values on first reference. Arguments are fx-style
trees of constants and Values; use-def links are kept both ways (``node.inputs``,
``value.users``). Passes store their results in ``meta``.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from layerc.ir.constants import same_constant
from layerc.ir.diagnostics import Location, VerifyError
from layerc.ir.types import UNKNOWN, TupleType, Type

PLACEHOLDER = "placeholder"
OP = "op"
OUTPUT = "output"


class Value:
    """Anything an argument can reference: a node's result or a weight."""

    __slots__ = ("name", "type", "users", "meta", "loc", "__weakref__")

    def __init__(self, name: str, type: Type = UNKNOWN, loc: Location | None = None):
        self.name = name
        self.type = type
        #: Nodes reading this value, in the order they were linked (an ordered set).
        self.users: dict[Node, None] = {}
        self.meta: dict[str, Any] = {}
        self.loc = loc

    def replace_all_uses_with(self, new: "Value") -> None:
        for user in list(self.users):
            user.args = _map_values(user.args, lambda v: new if v is self else v)
            user.kwargs = _map_values(user.kwargs, lambda v: new if v is self else v)


class Weight(Value):
    """A parameter or buffer (an fx ``get_attr``), known by its sanitized name.

    ``target`` is the dotted attribute path when the input named it (fx prints), else None.
    """

    __slots__ = ("target",)

    def __init__(self, name: str, type: Type = UNKNOWN, loc: Location | None = None, target: str | None = None):
        # Flat on purpose: dumps before MoE fusion reference tens of thousands of weights.
        self.name = name
        self.type = type
        self.users = {}
        self.meta = {}
        self.loc = loc
        self.target = target

    def __repr__(self) -> str:
        return f"<Weight {self.name}>"


class Node(Value):
    """A placeholder, an op or the output.

    ``target`` is the printed target of an op (``aten.add.Tensor``, ``<built-in function getitem>``);
    ``opcode`` is torch.fx's (``call_function``...) when the input said so, else None.
    """

    __slots__ = ("kind", "target", "opcode", "_args", "_kwargs", "_inputs", "graph")

    def __init__(
        self,
        kind: str,
        name: str,
        target: str | None = None,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        type: Type = UNKNOWN,
        loc: Location | None = None,
        opcode: str | None = None,
    ):
        # Flat on purpose (no super().__init__): the parser makes one per line.
        self.name = name
        self.type = type
        self.users = {}
        self.meta = {}
        self.loc = loc
        self.kind = kind
        self.target = target
        self.opcode = opcode
        self.graph: Graph | None = None
        self._args: tuple[Any, ...] = ()
        self._kwargs: dict[str, Any] = {}
        self._inputs: tuple[Value, ...] = ()
        self._relink(args, kwargs or {})

    def __repr__(self) -> str:
        return f"<{self.kind} {self.name}>"

    # -- arguments and use-def links -------------------------------------------------------
    @property
    def args(self) -> tuple[Any, ...]:
        return self._args

    @args.setter
    def args(self, args: tuple[Any, ...]) -> None:
        self._relink(tuple(args), self._kwargs)

    @property
    def kwargs(self) -> dict[str, Any]:
        return self._kwargs

    @kwargs.setter
    def kwargs(self, kwargs: dict[str, Any]) -> None:
        self._relink(self._args, dict(kwargs))

    def _relink(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        for v in self._inputs:
            v.users.pop(self, None)
        self._args, self._kwargs = args, kwargs
        seen: dict[Value, None] = {}
        for a in args:  # flat arguments are the common case: no recursion for them
            if isinstance(a, Value):
                seen[a] = None
            elif isinstance(a, (list, tuple, dict, slice)):
                _collect_values(a, seen)
        if kwargs:
            _collect_values(kwargs, seen)
        self._inputs = tuple(seen)
        for v in self._inputs:
            v.users[self] = None

    @property
    def inputs(self) -> tuple[Value, ...]:
        """Distinct values read by this node, in argument order."""
        return self._inputs

    def drop_links(self) -> None:
        for v in self._inputs:
            v.users.pop(self, None)
        self._inputs = ()

    @property
    def weights(self) -> list[Weight]:
        return [v for v in self.inputs if isinstance(v, Weight)]

    @property
    def is_multi_output(self) -> bool:
        return isinstance(self.type, TupleType)


def _collect_values(arg: Any, seen: dict[Value, None]) -> None:
    if isinstance(arg, Value):
        seen[arg] = None
    elif isinstance(arg, (list, tuple)):
        for a in arg:
            _collect_values(a, seen)
    elif isinstance(arg, dict):
        for a in arg.values():
            _collect_values(a, seen)
    elif isinstance(arg, slice):
        for a in (arg.start, arg.stop, arg.step):
            _collect_values(a, seen)


def _map_values(arg: Any, fn: Callable[[Value], Value]) -> Any:
    if isinstance(arg, Value):
        return fn(arg)
    if isinstance(arg, list):
        return [_map_values(a, fn) for a in arg]
    if isinstance(arg, tuple):
        return tuple(_map_values(a, fn) for a in arg)
    if isinstance(arg, dict):
        return {k: _map_values(a, fn) for k, a in arg.items()}
    if isinstance(arg, slice):
        return slice(_map_values(arg.start, fn), _map_values(arg.stop, fn), _map_values(arg.step, fn))
    return arg


map_values = _map_values


class Graph:
    """One GraphModule: nodes in program order and the weights they read."""

    def __init__(self, name: str | None = None):
        #: Section name (``monolithic.model``, ``(root)``), None in single-graph dumps.
        self.name = name
        self.nodes: list[Node] = []
        self.weights: dict[str, Weight] = {}
        self._values: dict[str, Value] = {}
        self.meta: dict[str, Any] = {}
        self.loc: Location | None = None

    # -- building --------------------------------------------------------------------------
    def append(self, node: Node) -> Node:
        if node.name in self._values:
            raise VerifyError(f"redefinition of '%{node.name}'", loc=node.loc)
        node.graph = self
        self.nodes.append(node)
        self._values[node.name] = node
        return node

    def insert_before(self, anchor: Node, node: Node) -> Node:
        """Place ``node`` just before ``anchor`` (a rewrite's new op, ahead of its first user)."""
        if node.name in self._values:
            raise VerifyError(f"redefinition of '%{node.name}'", loc=node.loc)
        node.graph = self
        self.nodes.insert(self.nodes.index(anchor), node)
        self._values[node.name] = node
        return node

    def weight(self, name: str, type: Type = UNKNOWN, loc: Location | None = None) -> Weight:
        """The weight called ``name``, created on first reference."""
        w = self._values.get(name)
        if w is None:
            w = self.weights[name] = self._values[name] = Weight(name, type, loc)
        elif not isinstance(w, Weight):
            raise VerifyError(f"'{name}' is a node, not a weight", loc=loc)
        return w

    def value(self, name: str) -> Value | None:
        return self._values.get(name)

    def __contains__(self, name: str) -> bool:
        return name in self._values

    def erase(self, node: Node) -> None:
        """Remove a node that nothing reads any more."""
        if node.users:
            raise VerifyError(f"cannot erase '%{node.name}': it still has users", loc=node.loc)
        node.drop_links()
        self.nodes.remove(node)
        del self._values[node.name]
        node.graph = None

    def erase_weight(self, weight: Weight) -> None:
        if weight.users:
            raise VerifyError(f"cannot erase weight '{weight.name}': it still has users", loc=weight.loc)
        del self.weights[weight.name]
        del self._values[weight.name]

    # -- queries ---------------------------------------------------------------------------
    @property
    def placeholders(self) -> list[Node]:
        return [n for n in self.nodes if n.kind == PLACEHOLDER]

    @property
    def ops(self) -> list[Node]:
        return [n for n in self.nodes if n.kind == OP]

    @property
    def output(self) -> Node | None:
        last = self.nodes[-1] if self.nodes else None
        return last if last is not None and last.kind == OUTPUT else None

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    # -- invariants ------------------------------------------------------------------------
    def verify(self) -> None:
        """Raise VerifyError at the first broken invariant."""
        position: dict[Value, int] = {}
        readers: dict[Value, int] = {}  # how many nodes read each value, to check use-lists in O(n)
        for w in self.weights.values():
            if self._values.get(w.name) is not w:
                raise VerifyError(f"weight '{w.name}' is not registered under its name", loc=w.loc)
            position[w] = -1
        for i, node in enumerate(self.nodes):
            if node.graph is not self or self._values.get(node.name) is not node:
                raise VerifyError(f"'%{node.name}' is not registered in graph '{self.name}'", loc=node.loc)
            if node.kind == PLACEHOLDER and (len(node.args) > 1 or node.kwargs or node.inputs):
                raise VerifyError(f"placeholder '%{node.name}' may only have a constant default", loc=node.loc)
            if node.kind == OP and not node.target:
                raise VerifyError(f"op '%{node.name}' has no target", loc=node.loc)
            if node.kind == OUTPUT and i != len(self.nodes) - 1:
                raise VerifyError("the output must be the last node", loc=node.loc)
            for v in node.inputs:
                if v not in position:
                    what = "defined after its use" if self._values.get(v.name) is v else "not in this graph"
                    raise VerifyError(f"'%{node.name}' reads '{v.name}', which is {what}", loc=node.loc)
                if node not in v.users:
                    raise VerifyError(f"use-list of '{v.name}' misses '%{node.name}'", loc=node.loc)
                readers[v] = readers.get(v, 0) + 1
            position[node] = i
        for v in position:
            if len(v.users) != readers.get(v, 0):
                extra = next((u for u in v.users if u not in position or v not in u.inputs), None)
                name = extra.name if extra is not None else "?"
                raise VerifyError(f"use-list of '{v.name}' names '%{name}', which does not read it", loc=v.loc)


class Module:
    """A parsed dump file: the header, then one Graph per GraphModule section.

    ``generation`` is the writer generation (1: dtypes only; 2: shapes; 3: sections), ``counter``
    the ``NNN`` of ``NNN_<stage>_<transform>.txt`` when the file name follows that scheme.
    """

    def __init__(
        self,
        transform: str | None = None,
        stage: str | None = None,
        generation: int = 3,
        graphs: list[Graph] | None = None,
        counter: int | None = None,
        source: str | None = None,
    ):
        self.transform = transform
        self.stage = stage
        self.generation = generation
        self.graphs: list[Graph] = graphs or []
        self.counter = counter
        self.source = source
        #: ``# GraphModules found: N`` as read; None when built in memory or in older dumps.
        self.declared_graph_count: int | None = None
        self.meta: dict[str, Any] = {}

    def graph(self, name: str) -> Graph:
        for g in self.graphs:
            if g.name == name:
                return g
        raise KeyError(name)

    def main_graph(self) -> Graph:
        """``monolithic.model`` if present, else the section with the most op nodes."""
        for g in self.graphs:
            if g.name == "monolithic.model":
                return g
        if not self.graphs:
            raise VerifyError("the module has no graph")
        return max(self.graphs, key=lambda g: sum(1 for n in g.nodes if n.kind == OP))

    def verify(self) -> None:
        if self.declared_graph_count is not None and self.declared_graph_count != len(self.graphs):
            raise VerifyError(
                f"header says {self.declared_graph_count} GraphModules, the file has {len(self.graphs)}",
                loc=Location(3, 1),
            )
        names = [g.name for g in self.graphs]
        if len(set(names)) != len(names):
            raise VerifyError("two sections have the same GraphModule name")
        for g in self.graphs:
            g.verify()


def is_structurally_equivalent(a: Module, b: Module) -> bool:
    """Same header, graphs, nodes, types, arguments and weights (values matched by name)."""
    return structural_key(a) == structural_key(b)


def structural_key(m: Module) -> tuple[Any, ...]:
    """A hashable summary of everything a printer could show; used to compare modules."""
    return (
        m.transform,
        m.stage,
        m.generation,
        tuple(_graph_key(g) for g in m.graphs),
    )


def _graph_key(g: Graph) -> tuple[Any, ...]:
    weights = tuple(sorted((w.name, w.type, w.target) for w in g.weights.values()))
    nodes = tuple(
        (n.kind, n.name, n.target, n.opcode, n.type, _arg_key(n.args), _arg_key(n.kwargs)) for n in g.nodes
    )
    return (g.name, nodes, weights)


def _arg_key(arg: Any) -> tuple[Any, ...]:
    if isinstance(arg, Value):
        return ("%", arg.name)
    if isinstance(arg, (list, tuple)):
        return (type(arg).__name__, tuple(_arg_key(a) for a in arg))
    if isinstance(arg, dict):
        return ("dict", tuple((k, _arg_key(v)) for k, v in arg.items()))
    if isinstance(arg, slice):
        return ("slice", _arg_key(arg.start), _arg_key(arg.stop), _arg_key(arg.step))
    if isinstance(arg, (float, complex)) and arg != arg:
        return (type(arg).__name__, repr(arg))  # nan never equals itself
    return (type(arg).__name__, arg)


__all__ = [
    "Value", "Weight", "Node", "Graph", "Module", "PLACEHOLDER", "OP", "OUTPUT",
    "is_structurally_equivalent", "structural_key", "map_values", "same_constant",
]


def op_label(node: Node) -> str:
    """The name an op is shown and measured by: the label its builder gave, else its name."""
    return node.meta.get("label") or node.name
