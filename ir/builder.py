"""Build graphs in code with torch.fx's naming rules.

Generators and tests need graphs that look like what AutoDeploy writes, so node names are
derived from targets exactly as ``torch.fx.graph._Namespace`` derives them (``add``,
``add_1``, ``torch_linear_simple_default_3``): a consumer that wrongly trusts name
suffixes then fails on generated graphs the way it would on real dumps.
"""

from __future__ import annotations

import builtins
import keyword
import re
from typing import Any

from layerc.ir.graph import OP, OUTPUT, PLACEHOLDER, Graph, Module, Node, Weight
from layerc.ir.types import UNKNOWN, TupleType, Type

GETITEM = "<built-in function getitem>"

_NAME = re.compile(r"^([a-zA-Z_][0-9a-zA-Z_]*?)(?:_(\d+))?$")
_ILLEGAL_CHARS = re.compile(r"[^0-9a-zA-Z_]+")
_CAMEL = re.compile(r"(?<=[a-z])([A-Z])")
#: fx refuses to shadow these, so their first use is already ``pow_1``, ``slice_1``.
_ILLEGAL_NAMES = (
    set(keyword.kwlist) | set(vars(builtins)) | {"NoneType", "device", "fx_pytree", "inf", "nan", "pytree", "torch"}
)
_FUNCTION = re.compile(r"<(?:built-in )?(?:function|method) ([A-Za-z_][A-Za-z0-9_]*)")


def target_base(target: str) -> str:
    """The name fx would start from for a printed target, before de-duplication.

    ``aten`` ops are named after the packet as ``torch.export`` names them (``aten.add.Tensor``
    → ``add``); ops that transforms insert keep their overload (``trtllm.noaux_tc_op.default``
    → ``noaux_tc_op_default``); functions use their ``__name__``.
    """
    m = _FUNCTION.match(target)
    if m:
        op = m.group(1)
    elif target.startswith("aten."):
        op = target.split(".")[1]
    elif "." in target:
        op = target.split(".", 1)[1]  # drop the namespace, keep ``op.overload``
    else:
        op = target  # call_method / call_module
    return sanitize(op)


def sanitize(name: str) -> str:
    """fx's ``_snake_case`` then its identifier rule (``model.layers.0.A_log`` → ``model_layers_0_a_log``)."""
    return _identifier(_CAMEL.sub(r"_\1", name).lower())


def _identifier(name: str) -> str:
    name = _ILLEGAL_CHARS.sub("_", name)
    if not name:
        return "_unnamed"
    return f"_{name}" if name[0].isdigit() else name


class Namespace:
    """``torch.fx.graph._Namespace.create_name`` for nodes (``obj=None``): unique names with
    ``_1``, ``_2`` suffixes counted per base name."""

    def __init__(self) -> None:
        self.used: set[str] = set()
        self._base_count: dict[str, int] = {}

    def create_name(self, candidate: str) -> str:
        match = _NAME.match(candidate)
        if match is None:
            candidate = _identifier(candidate)
            match = _NAME.match(candidate)
            assert match is not None  # _identifier always gives a name _NAME matches
        base, num = match.group(1, 2)
        if num is None or candidate in self.used:
            num = self._base_count.get(base, 0)
            if candidate in _ILLEGAL_NAMES:
                num += 1
                candidate = f"{base}_{num}"
        else:
            num = int(num)
        while candidate in self.used:
            num += 1
            candidate = f"{base}_{num}"
        self.used.add(candidate)
        self._base_count[base] = num
        return candidate


class GraphBuilder:
    """Appends placeholders, ops and the output to one Graph.

    ``meta`` is copied into every node created, so a generator can stamp facts such as the
    true layer on whole regions without threading them through each call.
    """

    def __init__(self, name: str | None = "monolithic.model"):
        self.graph = Graph(name)
        self.names = Namespace()
        self.meta: dict[str, Any] = {}

    def _add(self, node: Node) -> Node:
        node.meta.update(self.meta)
        return self.graph.append(node)

    def placeholder(self, name: str, type: Type = UNKNOWN) -> Node:
        return self._add(Node(PLACEHOLDER, self.names.create_name(name), type=type))

    def weight(self, name: str, type: Type = UNKNOWN) -> Weight:
        """A parameter or buffer by dotted FQN or sanitized name; created on first reference
        (a dump has no line for it), then the same Weight every time."""
        name = sanitize(name)
        w = self.graph.weights.get(name)
        if w is None:
            self.names.create_name(name)  # reserve it: fx get_attr nodes share the namespace
            w = self.graph.weight(name, type)
        return w

    def op(self, target: str, args: tuple[Any, ...] = (), type: Type = UNKNOWN, name: str | None = None) -> Node:
        node_name = self.names.create_name(name or target_base(target))
        return self._add(Node(OP, node_name, target, tuple(args), type=type))

    def getitems(self, node: Node) -> list[Node]:
        """``getitem(node, i)`` for every element of a multi-output node, as fx splits tuples."""
        if not isinstance(node.type, TupleType):
            raise TypeError(f"'{node.name}' is not multi-output")
        return [self.op(GETITEM, (node, i), t) for i, t in enumerate(node.type.elements)]

    def output(self, *items: Any) -> Node:
        return self._add(Node(OUTPUT, self.names.create_name("output"), args=tuple(items)))


def module(transform: str, stage: str, graphs: list[Graph], counter: int | None = None, generation: int = 3) -> Module:
    """A Module as the writer would dump it after ``transform`` in ``stage``."""
    return Module(transform, stage, generation, list(graphs), counter)


__all__ = ["GraphBuilder", "Namespace", "module", "sanitize", "target_base", "GETITEM", "OP", "OUTPUT", "PLACEHOLDER"]
