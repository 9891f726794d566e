"""What each detected layer is: its type (MLA_MOE, MHA_FC, ...), stage, kernels and time.

Types come from what the layer's kernels are (MLA or GDN marks, attention kernels, experts, an FFN
activation); stages from the votes the kernels cast (``stage_shapes``: their ops' query and key
shapes, else ``stage`` in the kernel tables): ties are UNKNOWN, a graph replay is decode, UNKNOWN layers take the stage of the layer before them (the
first ones of a pass the stage after them), and every kernel takes its layer's stage (kernels
outside layers, their pass's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from layerc.ir.trace import Trace, group_then_start
from layerc.passes.kernel_tables import TYPES, Classification
from layerc.passes.stage_shapes import stage_votes
from layerc.passes.trace_layers import ACTIVATION, LayerResult, short_matches

STAGES = ("prefill", "decode")  #: stage codes 0 and 1; -1 is unknown
UNKNOWN = -1
LAYER_TYPES = ("MLA_MOE", "MLA_FC", "MHA_MOE", "MHA_FC", "GDN_MOE", "GDN_FC", "MLA", "GDN", "ATTN", "MOE", "FC", "UNKNOWN")
_ATTENTION, _MOE, _LINEAR = (TYPES.index(t) for t in ("ATTENTION", "MOE", "LINEAR"))


@dataclass(frozen=True, eq=False)
class LayerTable:
    """One row per layer, in pass order then layer order (columnar, like the trace IR)."""

    pass_index: np.ndarray
    index: np.ndarray  #: the layer's index within its pass
    type: list[str]
    stage: np.ndarray  #: int8 stage code
    kernel_count: np.ndarray
    duration: np.ndarray  #: sum of the layer's kernel durations, ns
    start: np.ndarray  #: first kernel start, ns
    end: np.ndarray  #: last kernel end, ns
    first: np.ndarray  #: kernel index of the first kernel
    last: np.ndarray  #: kernel index of the last kernel
    row_of: np.ndarray  #: per kernel of the trace: its layer's row, -1 outside layers

    def __len__(self) -> int:
        return len(self.index)


def stage_name(code: int) -> str:
    return STAGES[code] if code >= 0 else "unknown"


def stage_names(codes: np.ndarray) -> list[str]:
    """``stage_name`` of each code of a column."""
    names = ("unknown", *STAGES)
    return [names[c + 1] for c in codes.tolist()]


def layer_type(mla: bool, gdn: bool, attention: bool, moe: bool, fc: bool) -> str:
    """The seed's layer types, from what a layer's kernels are."""
    att = "MLA" if mla else "GDN" if gdn else "MHA" if attention else None
    ffn = "MOE" if moe else "FC" if fc else None
    if att and ffn:
        return f"{att}_{ffn}"
    if att:
        return "ATTN" if att == "MHA" else att
    return ffn or "UNKNOWN"


def layer_table(trace: Trace, cls: Classification, layers: LayerResult, votes: np.ndarray | None = None) -> LayerTable:
    """The layers of ``layers`` with their type, voted stage and time (segment reductions over
    the kernels sorted by pass, layer and start: no per-layer Python work but the type name).
    ``votes``: each kernel's stage vote (default ``stage_votes``)."""
    k = trace.kernels
    votes = stage_votes(trace, cls) if votes is None else votes
    inside = np.nonzero(layers.layer >= 0)[0]
    key = layers.pass_of * (int(layers.layer.max()) + 2 if len(inside) else 1) + layers.layer
    if not len(inside):
        e = np.zeros(0, np.int64)
        return LayerTable(e, e, [], np.zeros(0, np.int8), e, e, e, e, e, e, np.full(len(k), -1, np.int64))
    order = inside[group_then_start(key[inside], k.start[inside])]  # by layer, then start
    sorted_key = key[order]
    at = np.flatnonzero(np.r_[True, sorted_key[1:] != sorted_key[:-1]])
    ends = np.r_[at[1:], len(order)]
    add: Callable[[np.ndarray], np.ndarray] = lambda x: np.add.reduceat(np.asarray(x, np.int64), at)  # noqa: E731
    anyof: Callable[[np.ndarray], np.ndarray] = lambda x: add(x) > 0  # noqa: E731
    kind, start, end = cls.type[order], k.start[order], k.end[order]
    attention = kind == _ATTENTION
    # LINEAR kernels after the layer's last attention kernel: an FFN when there are two or more
    from_end = np.r_[np.cumsum(attention[::-1])[::-1], 0]
    after_last = (from_end[:-1] - from_end[ends][np.repeat(np.arange(len(at)), ends - at)]) == 0
    activation = (cls.type == TYPES.index("ELEMENTWISE")) & short_matches(trace, cls.short, ACTIVATION)
    replay = trace.replayed()
    prefill, decode = add(votes[order] == 0), add(votes[order] == 1)
    stage = np.where(prefill > decode, 0, np.where(decode > prefill, 1, UNKNOWN)).astype(np.int8)
    stage[add(~replay[order]) == 0] = 1  # graph replay => decode
    flags = (anyof(cls.has("mla")[order]), anyof(cls.has("gdn")[order]), anyof(attention),
             anyof((kind == _MOE) | cls.has("moe")[order]), anyof(activation[order]) | (add((kind == _LINEAR) & after_last) >= 2))
    code = np.zeros(len(at), np.int64)  # each layer's flags as bits: a name per combination
    for bit, f in enumerate(flags):
        code |= f.astype(np.int64) << bit
    names = [layer_type(*(bool(c >> bit & 1) for bit in range(len(flags)))) for c in range(1 << len(flags))]
    types = [names[c] for c in code.tolist()]
    first, last = order[at], order[ends - 1]
    row_of = np.full(len(k), -1, np.int64)
    row_of[order] = np.repeat(np.arange(len(at)), ends - at)
    return LayerTable(
        layers.pass_of[first].astype(np.int64), layers.layer[first].astype(np.int64), types,
        _propagate(layers.pass_of[first], stage), ends - at, add(end - start),
        np.minimum.reduceat(start, at).astype(np.int64), np.maximum.reduceat(end, at).astype(np.int64), first, last, row_of,
    )


def _propagate(pass_index: np.ndarray, stage: np.ndarray) -> np.ndarray:
    """UNKNOWN layers take the stage before them in their pass (leading ones, the stage after)."""
    n = len(stage)
    if not n:
        return stage.copy()
    order = np.argsort(pass_index, kind="stable")
    s, q = stage[order], pass_index[order]
    pos = np.arange(n)
    group_start = np.maximum.accumulate(np.where(np.r_[True, q[1:] != q[:-1]], pos, 0))
    group_end = np.minimum.accumulate(np.where(np.r_[q[1:] != q[:-1], True], pos, n)[::-1])[::-1]
    known = s != UNKNOWN
    before = np.maximum.accumulate(np.where(known, pos, -1))  # the last known at or before
    after = np.minimum.accumulate(np.where(known, pos, n)[::-1])[::-1]  # the first known at or after
    filled = np.where(before >= group_start, s[np.maximum(before, 0)],
                      np.where(after <= group_end, s[np.minimum(after, n - 1)], UNKNOWN))
    out = np.empty_like(stage)
    out[order] = filled.astype(stage.dtype)
    return out


def pass_stages(table: LayerTable, passes: int) -> np.ndarray:
    """Per pass: the stage most of its layers have (UNKNOWN for a pass without staged layers)."""
    known = table.stage >= 0
    votes = np.zeros((passes, len(STAGES)), np.int64)
    np.add.at(votes, (table.pass_index[known], table.stage[known].astype(np.int64)), 1)
    return np.where(votes.sum(1) > 0, votes.argmax(1), UNKNOWN).astype(np.int8)


def kernel_stages(trace: Trace, cls: Classification, layers: LayerResult, table: LayerTable,
                  votes: np.ndarray | None = None) -> np.ndarray:
    """Per kernel: its layer's stage; outside layers, the stage most of its pass's layers have
    (a pass without layers: the next pass's, else the last's; no layers at all: its own vote)."""
    out = (stage_votes(trace, cls) if votes is None else votes).astype(np.int8, copy=True)
    if not len(table):
        return out
    inside = table.row_of >= 0
    out[inside] = table.stage[table.row_of[inside]]
    majority = pass_stages(table, int(layers.pass_of.max()) + 1)
    # a pass without layers (batch preparation, sampling) takes the stage of the pass it
    # prepares, the next with layers; after the last one, that last one's
    has = majority >= 0
    known = np.nonzero(has)[0]
    if len(known):
        nxt = np.minimum(np.searchsorted(known, np.arange(len(has))), len(known) - 1)
        majority = majority[known[nxt]]
    outside = ~inside
    out[outside] = majority[layers.pass_of[outside]]
    return out
