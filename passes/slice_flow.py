"""The dataflow facts layer slicing stands on: the model's anchors before and after the stack
(``PRE``, ``POST``), which layer last reached an op and which one it reaches first (by when the
layers run), activations, and which layer runs next after a point of the program."""

from __future__ import annotations

from bisect import bisect_right
from typing import Callable, Iterable

from layerc.ir.graph import OP, PLACEHOLDER, Node, Value
from layerc.passes.base import node_op_name

PRE = -1
POST = 1 << 30


def activations(nodes: list[Node]) -> set[Node]:
    """Values computed from the model's inputs, not from weights and constants alone (as a norm's
    ``1 + weight`` or a shared block's weight transpose is, wherever the program puts it)."""
    activation: set[Node] = set()
    for n in nodes:
        if n.kind == PLACEHOLDER or n.kind == OP and any(v in activation for v in n.inputs):
            activation.add(n)
    return activation


class Runs:
    """Which layer the next placed op after a program position belongs to."""

    def __init__(self, positions: list[int], layers: list[int]):
        self.positions, self.layers = positions, layers

    @classmethod
    def over(cls, nodes: list[Node], layer: dict[Value, int], layers_only: bool = False) -> "Runs":
        """The runs of the ops placed in ``layer`` (``layers_only``: in a decoder layer, not in
        the model's anchors before or after the stack)."""
        placed = [(i, layer[n]) for i, n in enumerate(nodes)
                  if n in layer and not (layers_only and layer[n] in (PRE, POST))]
        return cls([i for i, _ in placed], [x for _, x in placed])

    def next_layer(self, position: int) -> int | None:
        i = bisect_right(self.positions, position)
        return self.layers[i] if i < len(self.layers) else None


def forward(nodes: list[Node], fixed: dict[Value, int]) -> dict[Node, int]:
    """A(n): the layer that last ran among those reaching n (fixed nodes keep their own)."""
    return _propagate(nodes, nodes, fixed, lambda n: n.inputs, max)


def backward(nodes: list[Node], fixed: dict[Value, int]) -> dict[Node, int]:
    """D(n): the layer that runs first among those n reaches (fixed nodes keep their own)."""
    return _propagate(nodes, reversed(nodes), fixed, lambda n: n.users, min)


def _propagate(nodes: list[Node], order: Iterable[Node], fixed: dict[Value, int], neighbours: Callable[[Node], Iterable[Value]],
               pick: Callable[[list[tuple[int, int]]], tuple[int, int]]) -> dict[Node, int]:
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


def is_add(node: Node) -> bool:
    return node_op_name(node) in ("add", "add_", "iadd") if node.kind == OP else False
