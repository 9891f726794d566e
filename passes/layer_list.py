"""Which numbered module list holds the decoder layers, found from the weight names' structure.

A weight name is a module path (``model.layers.5.mlp.gate.weight``, sanitized to
``model_layers_5_mlp_gate_weight``): a numbered component is an entry of a module list, and the
path before it names the list. The decoder layers are the list that repeats a block of weights:
at least two entries, a typical entry holding several weights (a fused weight's counter,
``fused_weight_7``, or a list of single projections has one each), and of all such lists the
one that holds the most weights (ties: the most per entry, then the outer list). That covers
every spelling (``layers``, ``h``, ``blocks``, ``encoder.layer``, ``transformer.layer``) and
picks the main stack where a model has several: BLT's global transformer over its one-layer
local encoder and decoder, the layers over the experts nested in them. Twin stacks, the same
entries of the same blocks (HRM's H and L modules), are numbered together.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from statistics import median_low
from typing import Iterable, cast

#: A numbered component: digits between separators, not the name's first part.
_FIRST_NUMBER = re.compile(r"[._]([0-9]{1,6})(?=[._]|$)")
#: An entry of the decoder list holds a block: at least this many weights in the typical one.
MIN_WEIGHTS_PER_ENTRY = 2


@dataclass(frozen=True)
class LayerList:
    """The list found: its path (as spelled in the names, ``model_layers``), and per weight name
    its entry number."""

    path: str
    layer_of: dict[str, int]
    others: tuple[str, ...] = ()  # other repeated lists, smaller


def first_numbered(name: str) -> tuple[str, int] | None:
    """(list path, entry) of the outermost numbered component of ``name``, or None. Only the
    outermost counts: a list inside an entry of another (a layer's experts) is never the stack."""
    m = _FIRST_NUMBER.search(name)
    return None if m is None else (name[: m.start()].replace(".", "_"), int(m.group(1)))


def find_layer_list(names: Iterable[str]) -> LayerList | None:
    """The decoder-layer list among ``names`` (see the module doc), or None when no list repeats
    (a one-layer model's list has one entry: then the caller decides)."""
    entries: dict[str, Counter[int]] = defaultdict(Counter)
    members: dict[str, dict[str, int]] = defaultdict(dict)
    for name in names:
        found = first_numbered(name)
        if found is not None:
            path, entry = found
            entries[path][entry] += 1
            members[path][name] = entry
    repeated = [p for p, c in entries.items() if len(c) >= 2 and median_low(c.values()) >= MIN_WEIGHTS_PER_ENTRY]
    if not repeated:
        return None
    ranked = sorted(repeated, key=lambda p: (-sum(entries[p].values()), -median_low(entries[p].values()), len(p), p))
    best = ranked[0]
    # Twin stacks (HRM's H and L modules): the same entries holding the same weights. Their
    # layers are numbered together, as each stack numbers its own.
    twins = [p for p in ranked[1:] if set(entries[p]) == set(entries[best]) and _blocks(members[p]) == _blocks(members[best])]
    layer_of = dict(members[best])
    for p in twins:
        layer_of.update(members[p])
    return LayerList("+".join([best, *twins]), layer_of, tuple(p for p in ranked[1:] if p not in twins))


def _blocks(members: dict[str, int]) -> frozenset[str]:
    """What one entry of a list holds: the weight names after their entry number, all entries
    together."""
    # every member was found by ``first_numbered``: its name has a number
    return frozenset(name[cast("re.Match[str]", _FIRST_NUMBER.search(name)).end():] for name in members)
