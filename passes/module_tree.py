"""The decoder layers a profile's module spans name, found from the tree the spans form.

Module events come in two shapes: Kineto's ``nn.Module: <Class>_<instance>`` spans (one per
forward call of a module, numbered per class), and ranges named by a module path
(``model.layers.3``, ``vision_tower.encoder.layers.7.mlp``: NVTX ranges, ``record_function``).
Either way a span has a *class* (the class name; the path up to its first number) and an
*instance* (the number). The spans of one thread nest, so they form a tree.

A layer is an instance of the outermost repeated class, decided by structure, not by name:

- **repeated**: the class has two or more instances, and its median instance launches two or
  more GEMM, attention or MoE kernels (an embedding pair, norms or single linears are no layer);
- **outermost**: a class whose instances nest inside another repeated class's is part of a
  layer (vLLM's gpt-oss ``MLPBlock`` inside its ``TransformerBlock``, MoE experts), never one,
  unless that class is a *container*: each instance holds two or more of the inner instances,
  which launch most of its kernels (T5's ``T5Stack`` around its ``T5Block``s).

A model with one layer repeats nothing; there, and only there, a class named like a layer
(``...DecoderLayer``, ``...Block``, ``...Layer``) is taken.

The layers of one class under one parent span are a *stack*; a vision-language model has two
(the vision tower's blocks and the language model's layers), an encoder-decoder too. Layers are
numbered within their stack (the rank of the instance number), and the stacks one after another.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from layerc.ir.trace import ANNOTATION_GPU, Trace, isin, median, unique, unique_inverse

_MODULE = re.compile(r"^nn\.Module: (\w+?)_(\d+)$")
#: a module path with a numbered entry: the class is the path before the first number
_PATH = re.compile(r"(?:^|[\s/:])((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)[.\[](\d+)\]?(?=[.\s/\]]|$)")
#: what a layer class is called where the model has one layer (nothing repeats)
_CONVENTIONAL = re.compile(r"(?:DecoderLayer|EncoderLayer|Block|Layer)$")
#: a repeated class's median instance launches at least this many GEMM, attention or MoE kernels
HEAVY_PER_LAYER = 2
#: a container's inner instances launch at least this share of its kernels
CONTAINER_SHARE = 0.8
#: the most classes compared (a model has a few dozen module classes)
MAX_CLASSES = 64
#: an instance number longer than this is no module's (it would not fit the int64 columns)
MAX_DIGITS = 9


@dataclass(frozen=True)
class Stack:
    """One stack of layers: their class, the parent span they run under, and how many there are."""

    cls: str
    parent: str
    count: int
    offset: int  #: layer numbers of this stack start here (stacks are numbered one after another)


@dataclass(frozen=True, eq=False)
class Spans:
    """Per kernel, what the layer spans say (-1 where no layer span holds its launch)."""

    layer: np.ndarray  #: the layer number (the stack's offset + the instance's rank in its stack)
    span: np.ndarray  #: which span (a forward pass opens a new span per layer)
    when: np.ndarray  #: launch time (host order: layer numbers only rise within a forward pass)
    stack: np.ndarray  #: which of ``stacks``
    stacks: tuple[Stack, ...] = ()
    #: the outermost span of any class that holds the launch where it is not the layer's own
    #: (the model's call: one forward pass, its embedding before the layers and its final norm
    #: and lm_head after them), else -1
    root: np.ndarray | None = None


@dataclass(eq=False)
class _Table:
    """Candidate spans as columns: class id, instance, start, end, thread."""

    cls: np.ndarray
    inst: np.ndarray
    start: np.ndarray
    end: np.ndarray
    tid: np.ndarray
    names: list[str]  #: class id -> class name


def _read(trace: Trace) -> _Table | None:
    """Module spans: ``nn.Module`` spans when there are any, else host ranges named by a module path."""
    m, a = trace.modules, trace.annotations
    found = _named(trace, m.name, _MODULE.match)
    if found is not None:
        rows, classes, inst, which = found
        start, end, tid = m.start[rows], m.end[rows], m.tid[rows]
    else:
        host = np.nonzero(a.kind != ANNOTATION_GPU)[0]  # host ranges: launches happen inside them
        found = _named(trace, a.name[host], _PATH.search)
        if found is None:
            return None
        rows, classes, inst, which = found
        start, end, tid = a.start[host[rows]], a.end[host[rows]], a.tid[host[rows]]
    names = sorted(set(classes))
    order = {c: j for j, c in enumerate(names)}
    cls = np.array([order[c] for c in classes], np.int64)[which]
    return _Table(cls, inst, start.astype(np.int64), end.astype(np.int64), tid.astype(np.int64), names)


def _named(trace: Trace, name: np.ndarray, match: Callable[[str], re.Match[str] | None]
           ) -> tuple[np.ndarray, list[str], np.ndarray, np.ndarray] | None:
    """The rows whose name ``match`` takes (class and instance: groups 1 and 2), each distinct
    name matched once: the rows, the classes matched (one per distinct name), and per row its
    instance number and which of those classes it has. None where no row matches."""
    if not len(name):
        return None
    ids, inverse = unique_inverse(name)
    classes: list[str] = []
    number = np.full(len(ids), -1, np.int64)
    which = np.full(len(ids), -1, np.int64)
    for j, s in enumerate(ids.tolist()):
        hit = match(trace.strings[s] or "")
        if hit and len(hit.group(2)) <= MAX_DIGITS:
            number[j], which[j] = int(hit.group(2)), len(classes)
            classes.append(hit.group(1))
    rows = np.nonzero(which[inverse] >= 0)[0]
    if not len(rows):
        return None
    return rows, classes, number[inverse[rows]], which[inverse[rows]]


def span_layers(trace: Trace, heavy: np.ndarray | None = None, host: tuple[np.ndarray, np.ndarray] | None = None) -> Spans | None:
    """Each kernel's layer span, by its launch; None when the trace names no layers.
    ``heavy``: per kernel, whether it is a GEMM, attention or MoE kernel (the tables' types);
    without it every kernel counts. ``host``: ``trace.kernel_host()``, where already made."""
    table = _read(trace)
    if table is None:
        return None
    when, tid = host if host is not None else trace.kernel_host()
    heavy = np.ones(len(trace.kernels), bool) if heavy is None else heavy
    repeated = [c for c in range(len(table.names)) if len(unique(table.inst[table.cls == c])) >= 2]
    repeated = sorted(repeated, key=lambda c: -int((table.cls == c).sum()))[:MAX_CLASSES]
    held = {c: _holding(table, table.cls == c, when, tid) for c in repeated}
    candidates = [c for c in repeated if _is_heavy(held[c], heavy)]
    layers = _outermost(table, candidates, held)
    if not layers:  # a one-layer model repeats nothing: its layer is known by the conventional names
        once = [c for c in range(len(table.names)) if _CONVENTIONAL.search(table.names[c]) and c not in repeated]
        held.update({c: _holding(table, table.cls == c, when, tid) for c in once})
        layers = [c for c in once if _is_heavy(held[c], heavy)][:1]
    if not layers:
        return None
    spans = _numbered(table, layers, held, when, trace)
    root = _holding(table, np.ones(len(table.cls), bool), when, tid)
    return replace(spans, root=np.where(root == spans.span, -1, root))  # a layer's own span is no model call


def _holding(table: _Table, sel: np.ndarray, when: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """Per kernel, the row of the outermost span among ``sel`` that holds its launch, or -1."""
    rows = np.nonzero(sel)[0]
    out = np.full(len(when), -1, np.int64)
    for t in unique(table.tid[rows]).tolist():
        mine = rows[table.tid[rows] == t]
        mine = mine[np.lexsort((-table.end[mine], table.start[mine]))]
        # the outermost: drop spans inside an earlier one of the same rows (a path's sub-ranges)
        reach = np.maximum.accumulate(table.end[mine])
        mine = mine[np.r_[True, table.end[mine][1:] > reach[:-1]]]
        pick = np.nonzero((tid == t) & (when >= 0))[0]
        j = np.searchsorted(table.start[mine], when[pick], side="right") - 1
        ok = (j >= 0) & (when[pick] <= table.end[mine[np.maximum(j, 0)]])
        out[pick[ok]] = mine[j[ok]]
    return out


def _is_heavy(held: np.ndarray, heavy: np.ndarray) -> bool:
    """Whether the median span that holds kernels launches ``HEAVY_PER_LAYER`` heavy ones."""
    inside = held >= 0
    if not inside.any():
        return False
    _, per_span = np.unique(held[inside], return_inverse=True)
    counts = np.bincount(per_span.reshape(-1), weights=heavy[inside].astype(float))
    return float(median(counts)) >= HEAVY_PER_LAYER


def _outermost(table: _Table, candidates: list[int], held: dict[int, np.ndarray]) -> list[int]:
    """The layer classes: candidates not nested in another candidate, except in a container."""
    inside = {(c, d): _nested(table, c, d) for c in candidates for d in candidates if c != d}
    container = {d: any(inside[c, d] and _contains(held[c], held[d]) for c in candidates if c != d) for d in candidates}
    return [c for c in candidates if not container[c] and all(container[d] for d in candidates if d != c and inside[c, d])]


def _nested(table: _Table, c: int, d: int) -> bool:
    """Whether most spans of class ``c`` lie inside a span of class ``d`` (same thread)."""
    mine = np.nonzero(table.cls == c)[0]
    outer = _holding(table, table.cls == d, table.start[mine], table.tid[mine])  # the ``d`` span around each start
    return bool(((outer >= 0) & (table.end[mine] <= table.end[np.maximum(outer, 0)])).mean() > 0.5)


def _contains(inner: np.ndarray, outer: np.ndarray) -> bool:
    """Whether the outer spans hold two or more inner spans each, which launch most of their kernels."""
    launched = outer >= 0
    if not launched.any():
        return False
    per_outer = len(unique(outer[launched & (inner >= 0)] * (1 << 32) + inner[launched & (inner >= 0)]))
    return per_outer >= 2 * len(unique(outer[launched])) and float((inner[launched] >= 0).mean()) >= CONTAINER_SHARE


def _numbered(table: _Table, layers: list[int], held: dict[int, np.ndarray], when: np.ndarray, trace: Trace) -> Spans:
    """Per kernel, its layer: stacks are the layer classes' spans grouped by the span they run in."""
    k = trace.kernels
    parent = _parents(table, layers)
    keys: dict[tuple[int, int], list[int]] = {}  # (class, parent class-and-instance) -> rows
    for r in np.nonzero(isin(table.cls, layers))[0].tolist():
        keys.setdefault((int(table.cls[r]), parent[r]), []).append(r)
    ordered = sorted(keys, key=lambda key: min(int(table.start[r]) for r in keys[key]))
    layer, span, stack_of = np.full(len(k), -1, np.int64), np.full(len(k), -1, np.int64), np.full(len(k), -1, np.int64)
    stacks, offset = [], 0
    rank = np.full(len(table.cls), -1, np.int64)
    which = np.full(len(table.cls), -1, np.int64)
    for s, key in enumerate(ordered):
        rows = np.array(keys[key])
        numbers = unique(table.inst[rows])
        rank[rows] = offset + np.searchsorted(numbers, table.inst[rows])
        which[rows] = s
        p = key[1]
        stacks.append(Stack(table.names[key[0]], "" if p < 0 else f"{table.names[p >> 32]}_{p & 0xFFFFFFFF}", len(numbers), offset))
        offset += len(numbers)
    for c in layers:
        h = held[c]
        got = h >= 0
        layer[got], span[got], stack_of[got] = rank[h[got]], h[got], which[h[got]]
    return Spans(layer, span, when, stack_of, tuple(stacks))


def _parents(table: _Table, layers: list[int]) -> np.ndarray:
    """Per span row of a layer class: the innermost enclosing span of another class, as
    ``class << 32 | instance`` (-1 for none)."""
    out = np.full(len(table.cls), -1, np.int64)
    is_layer = isin(table.cls, layers)
    for t in unique(table.tid).tolist():
        rows = np.nonzero(table.tid == t)[0]
        rows = rows[np.lexsort((-table.end[rows], table.start[rows]))]
        open_: list[int] = []  # enclosing spans of other classes, outermost first
        for r in rows.tolist():
            while open_ and table.end[open_[-1]] < table.start[r]:
                open_.pop()
            if is_layer[r]:
                if open_:
                    out[r] = int(table.cls[open_[-1]]) << 32 | int(table.inst[open_[-1]])
            else:
                open_.append(r)
    return out
