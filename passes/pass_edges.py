"""Where one forward pass ends and the next begins, between the two passes' layers.

Between the last layer of one pass and the first layer of the next lie the first pass's tail
(final norm, lm_head), the sampling, and the next pass's head (inputs, embedding, rotary
tables). The layer search cuts there at the longest idle gap, which is right where the GPU
waited for the host between two steps and wrong where the host stalled inside one (before an
lm_head, an embedding): then an lm_head is counted in the next pass, often of another stage.

A profile shows the two sides apart at its edges: before the first layer of the first pass,
a pass's head alone; after the last layer of the last pass, a pass's tail and sampling alone.
A kernel sequence between two passes that begins as the profile's end does is that tail, one
that ends as the profile's start does is the next pass's head (compared by kernel type: a
prefill runs the same tail and head as a decode step, with other GEMM tiles). Where both are
known the cut falls between them, at the longest idle gap; where one is, right after the tail
or right before the head. The cut stays where it is when it already lies there. It never
falls inside a graph replay, nor moves across a training step. Where an edge of the profile
matches a whole sequence between two passes (the profile began or ended mid-pass), that edge
tells nothing; where the two overlap, the edge that runs in one pass is trusted.

A stall may also have made a piece of a head or tail a pass of its own (no layers, fewer
kernels than a pass): between two passes it joins them at the cut; at the profile's edges, the
piece that ends as the usual head (begins as the usual tail) joins the first (last) pass.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from layerc.ir.trace import ascending, ragged, unique


def gpu_rows(device: np.ndarray, start: np.ndarray) -> list[np.ndarray | None]:
    """Each GPU's kernels in start order, as rows of the columns (None: all of them, as they are)."""
    if not len(device):
        return []
    if int(device.min()) == int(device.max()):
        return [None if ascending(start) else np.argsort(start, kind="stable")]
    out: list[np.ndarray | None] = []
    for d in unique(device).tolist():
        rows = np.flatnonzero(device == d)
        out.append(rows if ascending(start[rows]) else rows[np.argsort(start[rows], kind="stable")])
    return out


def settle_edges(pass_of: np.ndarray, layer: np.ndarray, kind: np.ndarray, start: np.ndarray, end: np.ndarray,
                 gpus: list[np.ndarray | None], fixed: np.ndarray | None = None, step: np.ndarray | None = None,
                 replay: np.ndarray | None = None) -> np.ndarray:
    """``pass_of`` with the kernels between two passes' layers cut by the profile's edges (the
    module docstring). ``gpus``: ``gpu_rows`` of the kernels. ``fixed``: per kernel, whether a
    model call's span holds its launch: the call decided where the passes beside it begin and
    end. ``step``: per kernel, its training step (-1 for none): nothing moves across two.
    ``replay``: per kernel, the graph launch that replayed it (-1 for an eager one): none is cut."""
    out, merged = pass_of, False
    for rows in gpus:
        q, lay, kd, s, e = (c if rows is None else c[rows] for c in (pass_of, layer, kind, start, end))
        moved = _settle(q, lay, kd, s, e, *(c if c is None or rows is None else c[rows] for c in (fixed, step, replay)))
        if moved is not None:
            out = out.copy() if out is pass_of else out
            merged |= len(unique(moved)) < len(unique(q))
            if rows is None:
                out[:] = moved
            else:
                out[rows] = moved
    if merged:  # passes numbered again, in the same order, without those joined to their neighbours
        out = np.unique(out, return_inverse=True)[1].reshape(-1).astype(np.int64)
    return out


def _settle(q: np.ndarray, layer: np.ndarray, kind: np.ndarray, start: np.ndarray, end: np.ndarray,
            fixed: np.ndarray | None, step: np.ndarray | None, replay: np.ndarray | None) -> np.ndarray | None:
    """One GPU's kernels in start order: the passes with their edges settled, or None if none moved."""
    lay = np.flatnonzero(layer >= 0)
    if len(lay) < 2:
        return None
    # two layer kernels in a row of different passes straddle a kernel where the pass changes
    j = np.searchsorted(lay, np.flatnonzero(q[1:] != q[:-1]) + 1)
    j = unique(j[(j > 0) & (j < len(lay))])
    j = j[q[lay[j - 1]] != q[lay[j]]] - 1
    lo, hi = lay[j] + 1, lay[j + 1]  # each region between two passes' layers: [lo, hi)
    keep = hi - lo >= 2
    if fixed is not None:
        keep &= ~fixed[lay[j]] & ~fixed[lay[j + 1]]
    lo, hi = lo[keep], hi[keep]
    head, tail = kind[: lay[0]], kind[lay[-1] + 1 :]
    if not len(lo):
        return None
    size = hi - lo
    tail_of = _matched(kind, lo, hi, tail, from_end=False)  # kernels at each region's start that are a tail
    head_of = _matched(kind, lo, hi, head, from_end=True)  # kernels at each region's end that are a head
    if (tail_of == size).any():  # the profile ended inside a pass: its end is no pass's tail
        tail_of[:] = 0
    if (head_of == size).any():  # it began inside one
        head_of[:] = 0
    # where the tail and the head overlap, the edge that runs in one pass (of the layers beside
    # it) is the one to trust: the other runs into a pass without layers (a replay, a piece)
    overlap = tail_of > size - head_of
    lead_alone, trail_alone = bool((q[: lay[0]] == q[lay[0]]).all()), bool((q[lay[-1] + 1 :] == q[lay[-1]]).all())
    if lead_alone != trail_alone:
        (tail_of if lead_alone else head_of)[overlap] = 0
    # where the cut may fall: between the tail and the head where both are known; right after
    # the tail, or right before the head, where one is
    want_lo = np.where(tail_of > 0, tail_of, np.where(head_of > 0, size - head_of, 0))
    want_hi = np.where(head_of > 0, size - head_of, np.where(tail_of > 0, tail_of, size))
    now, foreign = _now(q, lo, hi)
    todo = np.flatnonzero(foreign | (now < want_lo) | (now > want_hi))
    if not len(todo):
        return None
    sizes = np.bincount(q)
    layered = np.zeros(len(sizes), bool)
    layered[q[lay]] = True
    usual = float(np.median(sizes[layered]))
    out = None
    for a, b, w_lo, w_hi in zip(lo[todo].tolist(), hi[todo].tolist(), want_lo[todo].tolist(), want_hi[todo].tolist()):
        first, second = q[a - 1], q[b]
        others = unique(q[a:b])
        others = others[(others != first) & (others != second)]
        if len(others) and (layered[others].any() or (sizes[others] >= usual).any()
                            or (np.bincount(q[a:b], minlength=len(sizes))[others] != sizes[others]).any()):
            continue  # a pass of its own runs between them, not pieces of their edges
        if step is not None and (step[a - 1 : b + 1] != step[a - 1]).any():
            continue
        # a graph replay is never cut: what the replay beside a region's end launched stays with it
        # (where the edges point into a replay, they are not this pass's head or tail: no cut)
        r_lo, r_hi = _replay_bounds(replay, a, b) if replay is not None else (0, b - a)
        cut = _longest_wait(start, end, a, b, max(w_lo, r_lo), min(w_hi, r_hi))
        if cut is None and len(others):  # the edges tell nothing: where the GPU waited longest
            cut = _longest_wait(start, end, a, b, r_lo, r_hi)
        if cut is None:
            continue
        out = q.copy() if out is None else out
        out[a : a + cut], out[a + cut : b] = first, second
    ends = None if lead_alone and trail_alone else _join_ends(q if out is None else out, lay, kind, lo, hi, layered,
                                                              sizes < usual, step)
    return ends if ends is not None else out


def _join_ends(q: np.ndarray, lay: np.ndarray, kind: np.ndarray, lo: np.ndarray, hi: np.ndarray, layered: np.ndarray,
               small: np.ndarray, step: np.ndarray | None) -> np.ndarray | None:
    """The first pass's head and the last one's tail, where a host stall left a piece of them a
    pass of its own (the kernels before the first layer, or after the last, are not all theirs): the kernels before the first layer up to the start of the usual head
    between two passes (by type), and those after the last layer up to the end of the usual
    tail, join their pass (from a pass without layers, smaller than the usual pass, in the same
    training step)."""
    first, last = int(q[lay[0]]), int(q[lay[-1]])
    now, foreign = _now(q, lo, hi)
    clean = np.flatnonzero((now >= 0) & ~foreign)
    if not len(clean):
        return None
    heads = Counter(kind[a + c : b].tobytes() for a, b, c in zip(lo[clean].tolist(), hi[clean].tolist(), now[clean].tolist()))
    tails = Counter(kind[a : a + c].tobytes() for a, c in zip(lo[clean].tolist(), now[clean].tolist()))
    out = q.copy()
    for usual, pass_, anchor, leads in ((heads, first, int(lay[0]), True), (tails, last, int(lay[-1]), False)):
        edge = np.frombuffer(usual.most_common(1)[0][0], kind.dtype)
        stretch = np.arange(anchor) if leads else np.arange(anchor + 1, len(q))
        reach = _reach(kind[stretch[::-1]] if leads else kind[stretch], edge[::-1] if leads else edge)
        part = stretch[len(stretch) - reach :] if leads else stretch[:reach]
        movable = (out[part] == pass_) | (~layered[out[part]] & small[out[part]])
        if step is not None:
            movable &= step[part] == step[anchor]
        if movable.all():
            out[part] = pass_
    return out if (out != q).any() else None


def _reach(stretch: np.ndarray, edge: np.ndarray) -> int:
    """How far into ``stretch`` (kernel types, from the layers outward) the ``edge`` sequence
    ends, where it begins no further in than its own length; 0 where it is not there."""
    n = len(edge)
    for k in range(min(n, len(stretch) - n) + 1):
        if n and np.array_equal(stretch[k : k + n], edge):
            return k + n
    return 0


def _replay_bounds(replay: np.ndarray, a: int, b: int) -> tuple[int, int]:
    """How far into region ``[a, b)`` the replay of the layer kernel before it reaches (the cut
    comes after), and where the replay of the one after it begins (the cut comes at or before)."""
    lo, hi = 0, b - a
    if replay[a - 1] >= 0:
        mine = np.flatnonzero(replay[a:b] == replay[a - 1])
        lo = int(mine[-1]) + 1 if len(mine) else 0
    if replay[b] >= 0:
        theirs = np.flatnonzero(replay[a:b] == replay[b])
        hi = int(theirs[0]) if len(theirs) else b - a
    return lo, hi


def _now(q: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per region ``[lo, hi)``: how many of its kernels lie in the pass before it, counted from
    its start (-1 where the two passes interleave), and whether another pass has kernels in it."""
    n = hi - lo
    owner, offset = ragged(n)
    here = q[np.repeat(lo, n) + offset]
    earlier, later = here == q[np.repeat(lo - 1, n)], here == q[np.repeat(hi, n)]
    count = np.bincount(owner, weights=earlier, minlength=len(lo)).astype(np.int64)
    leading = np.bincount(owner, weights=earlier & (offset < np.repeat(count, n)), minlength=len(lo))
    foreign = np.bincount(owner, weights=~earlier & ~later, minlength=len(lo)) > 0
    return np.where(leading == count, count, -1), foreign


def _matched(kind: np.ndarray, lo: np.ndarray, hi: np.ndarray, edge: np.ndarray, from_end: bool) -> np.ndarray:
    """Per region ``[lo, hi)``: how many of its kernels, from its start (from its end with
    ``from_end``), run the kernel types ``edge`` does from its start (from its end)."""
    size = hi - lo
    if not len(edge):
        return np.zeros(len(lo), np.int64)
    n = np.minimum(size, len(edge))
    owner, offset = ragged(n)
    if from_end:
        same = kind[np.repeat(hi, n) - 1 - offset] == edge[len(edge) - 1 - offset]
    else:
        same = kind[np.repeat(lo, n) + offset] == edge[offset]
    first_miss: np.ndarray = n.copy()
    np.minimum.at(first_miss, owner[~same], offset[~same])
    return first_miss


def _longest_wait(start: np.ndarray, end: np.ndarray, a: int, b: int, lo: int, hi: int) -> int | None:
    """Where in region ``[a, b)`` to cut, from ``lo`` to ``hi`` kernels into it: after the
    longest idle gap (the GPU waited for the host between two steps); never before the region's
    first kernel or at the next pass's first layer while a kernel between can take it. None
    where the tail and the head overlap."""
    lo, hi = max(lo, 1), min(hi, b - a - 1)
    if lo > hi:
        return None
    pos = np.arange(a + lo, a + hi + 1)
    latest = np.maximum.accumulate(end[a - 1 : a + hi])  # the latest end before each candidate
    waits = start[pos] - latest[lo : hi + 1]
    return lo + int(np.argmax(waits))
