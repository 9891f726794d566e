"""Which forward pass each kernel of a trace runs in, before any layer is looked for.

A pass is one forward step of the model, not one graph launch:

- each CUDA/HIP graph replay is a segment, and so is each run of eagerly launched kernels
  between two replays (it may run interleaved with a replay on other streams);
- **piecewise capture** (vLLM PIECEWISE and FULL_AND_PIECEWISE, SGLang and AutoDeploy piecewise
  graphs) replays one forward step as several graphs, with the attention launched eagerly
  between them. An eager segment between two replays that runs attention, and is neither a
  forward pass of its own (no norm) nor longer than the pieces around it, joins them: the
  pieces and the attention between them are one pass;
- **training steps** (``ProfilerStep#N`` ranges, which ``torch.profiler``'s ``step()`` records)
  bound every pass where a profile holds two or more: nothing runs across two steps;
- **launching threads** split eager kernels: autograd launches the backward pass from its own
  thread, so a training step's forward and backward are two passes;
- each GPU runs its own copy of the model (tensor-parallel ranks in one trace).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import cast

import numpy as np

from layerc.ir.trace import ANNOTATION_GPU, Trace, ascending, first_rows, group_order, group_then_start, isin, last_rows, median, unique, unique_inverse
from layerc.passes.kernel_tables import TYPES

ATTENTION, NORM = TYPES.index("ATTENTION"), TYPES.index("NORM")
_STEP = re.compile(r"^ProfilerStep#\d+$")


def passes(trace: Trace, kind: np.ndarray | None = None, host: tuple[np.ndarray, np.ndarray] | None = None,
           step: np.ndarray | None = None) -> np.ndarray:
    """Per kernel, its pass (numbered in order of their first kernels). ``kind``: per kernel, its
    type index (from the kernel tables); without it piecewise pieces stay apart. ``host`` and
    ``step``: ``trace.kernel_host()`` and ``kernel_steps``, where already made."""
    k = trace.kernels
    segment = _segments(trace)
    if kind is not None:
        segment = _join_pieces(segment, trace, kind)
    host = host if host is not None else trace.kernel_host()
    tid = host[1]
    # a replay's kernels all come from its one launch; the pieces of a piecewise pass and the
    # attention between them are one pass whichever thread launched them
    segment = _dense(segment)
    in_graph = np.zeros(int(segment.max()) + 1 if len(segment) else 0, bool)
    in_graph[segment[trace.replayed()]] = True
    tid = np.where(in_graph[segment], -1, tid)
    step = step if step is not None else kernel_steps(trace, host)
    if len(unique(step[step >= 0])) < 2:  # one step bounds nothing inside the profile (its edges are ragged)
        step = np.zeros(len(k), np.int64)
    group = _combine(_dense(k.device), segment, _dense(step))
    tid = _fill_threads(tid, group, k.start)
    key = _dense(_combine(group, _dense(tid)))
    first = np.full(int(key.max()) + 1 if len(key) else 0, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first, key, k.start)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return cast(np.ndarray, rank[key])


def _dense(values: np.ndarray) -> np.ndarray:
    """Values renumbered 0, 1, ... in their sorted order."""
    return unique_inverse(values)[1]


def _combine(*columns: np.ndarray) -> np.ndarray:
    """One int64 key per row of dense columns (each below its own maximum + 1)."""
    key = columns[0].astype(np.int64)  # (a copy, built on in place: no column-sized temporaries)
    for c in columns[1:]:
        key *= int(c.max()) + 1 if len(c) else 1
        key += c
    return key


def _fill_threads(tid: np.ndarray, group: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Launching threads where the launch is unknown (its host side ran before the profile began)
    taken from the kernel before it in its group (else the one after): an unknown thread is
    no reason to split a pass."""
    if not len(tid) or (tid >= 0).all():
        return tid
    out = tid.copy()
    # only a group with a known thread has one to give (a graph replay's kernels have none)
    some = np.flatnonzero(isin(group, unique(group[tid >= 0])))
    tid, group, start = tid[some], group[some], start[some]
    # kernels come in start order (the trace IR's), where a stable sort by group alone is (group, start)
    order = group_then_start(group, start)
    t, g = tid[order], group[order]
    known, unknown = np.flatnonzero(t >= 0), np.flatnonzero(t < 0)
    if len(known):  # each unknown between the known ones around it: a search per unknown, not a scan of all
        j = np.searchsorted(known, unknown)
        b, a = known[np.maximum(j - 1, 0)], known[np.minimum(j, len(known) - 1)]
        mine = g[unknown]
        t[unknown] = np.where((j > 0) & (g[b] == mine), t[b], np.where((j < len(known)) & (g[a] == mine), t[a], -1))
    out[some[order]] = t
    return out


def _segments(trace: Trace) -> np.ndarray:
    """Per kernel: 2n + 1 for the kernels of the n-th graph replay, 2n for the eager kernels
    between the (n-1)-th and n-th replays of their GPU (another GPU's replays cut nothing)."""
    k = trace.kernels
    out = np.full(len(k), -1, np.int64)
    replayed = np.flatnonzero(trace.replayed())
    launches, replay_of = unique_inverse(trace.launch_keys()[0][replayed])  # a replay per graph launch
    starts = np.full(len(launches), np.iinfo(np.int64).max, np.int64)
    np.minimum.at(starts, replay_of, k.start[replayed])  # each replay's first start
    order = np.argsort(starts, kind="stable")  # replays in time order (ties: by launch)
    n = np.empty(len(order), np.int64)
    n[order] = np.arange(len(order))
    out[replayed] = 2 * n[replay_of] + 1
    eager = np.flatnonzero(out < 0)
    if not len(order) or not len(eager):
        return out
    gpu = np.zeros(len(launches), k.device.dtype)
    gpu[replay_of] = k.device[replayed]
    gpus = unique(k.device)
    for d in gpus.tolist():  # the eager kernels after each of their GPU's replays: the segment after it
        mine = order[gpu[order] == d] if len(gpus) > 1 else order
        at = eager[k.device[eager] == d] if len(gpus) > 1 else eager
        before = np.searchsorted(starts[mine], k.start[at], side="right")  # this GPU's replays started before each
        out[at] = np.where(before > 0, 2 * n[mine[np.maximum(before - 1, 0)]] + 2, 0)
    return out


def _join_pieces(segment: np.ndarray, trace: Trace, kind: np.ndarray) -> np.ndarray:
    """Segments with piecewise pieces joined: on each GPU, an eager segment between two
    replays that runs attention, no norm, fewer kernels than either replay, and mostly kernels
    that neither replay runs joins them."""
    k = trace.kernels
    out = segment.copy()
    devices = unique(k.device).tolist()
    for d in devices:
        # (one GPU, the usual case: its kernels are all the kernels, taken as they are)
        mine = np.flatnonzero(k.device == d) if len(devices) > 1 else None
        ids, inverse = unique_inverse(_rows(segment, mine))  # (dense ids: a table, not a sort of every kernel)
        at = first_rows(inverse, len(ids))  # each segment's first kernel
        size = np.bincount(inverse, minlength=len(ids))
        kinds = _rows(kind, mine)
        attention, norm = np.zeros(len(ids), bool), np.zeros(len(ids), bool)
        attention[inverse[kinds == ATTENTION]] = True
        norm[inverse[kinds == NORM]] = True
        starts = _rows(k.start, mine)
        if ascending(starts):  # the IR's start order: a segment's first kernel starts first
            first = starts[at]
        else:
            first = np.full(len(ids), np.iinfo(np.int64).max, np.int64)
            np.minimum.at(first, inverse, starts)
        seq = np.argsort(first, kind="stable").tolist()  # segment positions in time order
        ends = np.cumsum(size)
        rows: list[np.ndarray] = []  # each segment's kernels together, from ends[i] - size[i] to ends[i]

        def kernels_of(i: int, inverse: np.ndarray = inverse, mine: np.ndarray | None = mine) -> np.ndarray:
            if not rows:  # sorted once, where a segment is a candidate
                order = group_order(inverse)
                rows.append(order if mine is None else mine[order])
            return cast(np.ndarray, k.name[rows[0][ends[i] - size[i]:ends[i]]])

        label = ids.copy()
        for j in range(1, len(seq) - 1):
            before, here, after = seq[j - 1], seq[j], seq[j + 1]
            if ids[here] % 2 or not (ids[before] % 2 and ids[after] % 2):
                continue  # not an eager run between two replays
            if not (attention[here] and not norm[here] and size[here] < min(size[before], size[after])):
                continue
            # what the graphs around it left out, not what they run: a forward pass of its own (an
            # eager prefill between two decode replays, its norms decomposed) runs the same model
            own = kernels_of(here)
            if 2 * int(isin(own, np.concatenate([kernels_of(before), kernels_of(after)])).sum()) < len(own):
                label[here] = label[after] = label[before]
        if not np.array_equal(label, ids):  # (else its kernels keep their segments)
            out[slice(None) if mine is None else mine] = label[inverse]
    return out


def _rows(column: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
    """``column[rows]``; the whole column where ``rows`` is None (all of them)."""
    return column if rows is None else column[rows]


def kernel_steps(trace: Trace, host: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Per kernel, the training step (``ProfilerStep#N`` range) its launch falls in (its start
    where no launch is recorded), or -1. ``host``: ``trace.kernel_host()``, where already made."""
    k, a = trace.kernels, trace.annotations
    out = np.full(len(k), -1, np.int64)
    if not len(a):
        return out
    ids = trace.strings.matching(_STEP)
    rows = np.nonzero(isin(a.name, ids) & (a.kind != ANNOTATION_GPU))[0]
    if not len(rows):
        return out
    rows = rows[np.argsort(a.start[rows], kind="stable")]
    when = (host if host is not None else trace.kernel_host())[0]
    when = np.where(when >= 0, when, k.start)
    j = np.searchsorted(a.start[rows], when, side="right") - 1
    ok = (j >= 0) & (when <= a.end[rows[np.maximum(j, 0)]])
    out[ok] = j[ok]
    return out


def join_edges(pass_of: np.ndarray, layer: np.ndarray, device: np.ndarray, step: np.ndarray, replayed: np.ndarray,
               start: np.ndarray, end: np.ndarray, name: np.ndarray) -> np.ndarray:
    """Passes with the eager kernels around a forward step's graphs joined to it: a step replays
    its model as graphs (whole, or in pieces) and launches its inputs' preparation before them and
    lm_head and sampling after them eagerly. So the eager kernels between two steps' layers (a
    replay's kernels, where it has no layers), where a graph is one of them, are the tail of one
    and the head of the next: they are cut where the GPU waits longest for the host (not at the
    wait before the next step's first layer, where something lies between). The eager passes
    without layers that join a step each run fewer kernels than the GPU's steps usually do (the
    median: a step the profile cut is no measure), on its GPU and in its training step: between
    two steps, all of them; before the first or after the last step on a GPU, those beside it,
    but for a step the profile cut, which keeps its side apart: taking the kernels before the
    first step as one (a strategy may have cut them into passes already), and those after the
    last, what lies before their longest wait where the kernels after it are those that open
    every other step (by ``name``), or after it where the kernels before it are those that close
    every other step; where the steps' heads or tails differ, what lies beyond a wait as long as
    half the usual wait between steps. Kernels come in start order; passes are
    renumbered in order of their first kernels."""
    n = int(pass_of.max()) + 1 if len(pass_of) else 0
    graphs = _any_of(pass_of, replayed, n)
    if not n or not graphs.any() or replayed.all():  # an eager run's passes are cut by its layers' motif alone
        return pass_of
    layered = _any_of(pass_of, layer >= 0, n)
    steps = layered | graphs  # a replay is a step, layers found in it or not
    size = np.bincount(pass_of, minlength=n)
    out = pass_of.copy()
    waits: list[int] = []
    heads: Counter[bytes] = Counter()  # the eager kernels (names) that open a step after another, and that close one
    tails: Counter[bytes] = Counter()
    edges: list[tuple[np.ndarray, np.ndarray, bool]] = []  # a leading or trailing pass: its kernels, their waits, whether it leads
    devices = unique(device)
    for d in devices.tolist():
        # one GPU's kernels: the whole columns where the trace has one GPU (no copy of them)
        mine = np.flatnonzero(device == d) if len(devices) > 1 else None
        q, s, e, eager = _rows(pass_of, mine), _rows(start, mine), _rows(end, mine), ~_rows(replayed, mine)

        def at(i: np.ndarray, mine: np.ndarray | None = mine) -> np.ndarray:
            """Positions on this GPU as positions in the trace."""
            return i if mine is None else mine[i]

        core = np.where(layered[q], _rows(layer, mine) >= 0, ~eager)  # a step's layers, or its graphs
        first, last = first_rows(q, n), last_rows(q, n)
        qc = np.where(core, q, n)  # a step's core kernels (the rest under id n)
        first_core, last_core = first_rows(qc, n + 1), last_rows(qc, n + 1)
        del qc, core
        seq = np.flatnonzero(first >= 0)
        seq = seq[np.argsort(first[seq], kind="stable")]  # the GPU's passes in time order
        step_of = np.where(first >= 0, step[at(np.maximum(first, 0))], -2)
        at_steps = np.flatnonzero(steps[seq])
        a, b = seq[at_steps[:-1]], seq[at_steps[1:]]  # two steps in a row
        lo, hi = last_core[a] + 1, first_core[b]
        todo = (step_of[a] == step_of[b]) & (graphs[a] | graphs[b]) & (hi > lo)
        eager_before = np.cumsum(eager, dtype=np.int32 if len(q) < 2**31 else np.int64)
        todo[todo] &= eager_before[hi[todo] - 1] > eager_before[lo[todo]] - eager[lo[todo]]  # eager kernels lie between them
        del eager_before
        regions = [(int(lo[i]), int(hi[i]), i) for i in np.flatnonzero(todo).tolist()]
        usual_step = float(median(size[seq[at_steps]])) if len(at_steps) else 0.0  # (not a step the profile cut: the median)
        ends = []  # a leading or trailing pass without layers beside the first or last step, outward
        for j, leads in ((int(at_steps[0]), True), (int(at_steps[-1]), False)) if len(at_steps) else ():
            near = int(seq[j])
            side = seq[:j][::-1] if leads else seq[j + 1 :]
            for x in side.tolist():
                if not graphs[near] or steps[x] or size[x] >= usual_step or step_of[x] != step_of[near]:
                    break
                ends.append((x, near, leads))
        wait = _waits(s, e, [(x, y) for x, y, _ in regions] + [(int(first[x]), int(last[x]) + 1) for x, _, _ in ends])
        for (x0, x1, i), waited in zip(regions, wait):
            x, y, between = int(a[i]), int(b[i]), seq[at_steps[i] + 1 : at_steps[i + 1]]
            if (graphs[between] | (size[between] >= usual_step) | (step_of[between] != step_of[x])).any():
                continue
            cut = x0 + int(np.argmax(waited))  # the wait before the next step's first layer only where nothing lies between
            waits.append(int(waited[cut - x0]))
            span = np.arange(x0, x1)
            movable = span[eager[span] & isin(q[span], [x, y, *between.tolist()])]
            out[at(movable[movable < cut])] = x
            out[at(movable[movable >= cut])] = y
            tails[name[at(movable[movable < cut])].tobytes()] += 1
            heads[name[at(movable[movable >= cut])].tobytes()] += 1
        block: dict[bool, list[tuple[np.ndarray, np.ndarray]]] = {}  # the passes before the first step, and after the last
        for (x, near, leads), waited in zip(ends, wait[len(regions) :]):
            kernels = np.arange(first[x], last[x] + 1)
            kernels, waited = kernels[q[kernels] == x], waited[q[kernels] == x]
            block.setdefault(leads, []).append((kernels, waited))
            out[at(kernels)] = near
        for leads, parts in block.items():  # each side as one: a cut step's rest may be a pass of its own already
            kernels, waited = np.concatenate([k for k, _ in parts]), np.concatenate([w for _, w in parts])
            order = np.argsort(kernels, kind="stable")
            edges.append((at(kernels[order]), waited[order], leads))
    if not edges and not waits:
        return pass_of
    if edges and waits:  # the profile cut a step inside a leading or trailing pass: its side stays apart
        usual = float(median(np.array(waits)))
        head, tail = heads.most_common(1)[0][0], tails.most_common(1)[0][0]
        for kernels, waited, leads in edges:
            apart = kernels[:0]
            if len(kernels) > 1:  # at the longest wait inside it, the usual head after it (tail before it)
                c = 1 + int(np.argmax(waited[1:]))
                if leads and name[kernels[c:]].tobytes() == head:
                    apart = kernels[:c]
                elif not leads and name[kernels[:c]].tobytes() == tail:
                    apart = kernels[c:]
            if not len(apart):  # steps' heads or tails differ: a wait as long as those between steps
                inner = np.flatnonzero(waited[1:] >= usual / 2) + 1
                if len(inner):
                    apart = kernels[: inner[-1]] if leads else kernels[inner[0] :]
            if len(apart):
                out[apart] = pass_of[apart[0]]
    # renumbered in order of their first kernels (the passes left keep their order; a joined one is gone)
    first = first_rows(out, n)
    kept = np.flatnonzero(first >= 0)
    rank = np.zeros(n, np.int64)
    rank[kept[np.argsort(first[kept], kind="stable")]] = np.arange(len(kept))
    return np.take(rank, out, out=out)


def _any_of(ids: np.ndarray, mask: np.ndarray, n: int) -> np.ndarray:
    """Per id below ``n``: whether ``mask`` holds for any of its rows (a piece at a time, so no
    whole-column temporary)."""
    out = np.zeros(n, bool)
    for i in range(0, len(ids), 1 << 16):
        out[ids[i : i + (1 << 16)][mask[i : i + (1 << 16)]]] = True
    return out


def _waits(start: np.ndarray, end: np.ndarray, spans: list[tuple[int, int]]) -> list[np.ndarray]:
    """For each ``(lo, hi)``, the GPU's idle wait before each kernel lo..hi-1 (its start after the
    latest end of the kernels before it; 0 for the first kernel), from the running latest end
    at each span's start rather than a whole column of it."""
    if not spans:
        return []
    cuts = unique(np.array([0, *(lo for lo, _ in spans)], np.int64))
    block = np.maximum.reduceat(end, cuts) if len(end) else np.zeros(0, np.int64)  # the latest end in each block
    before = np.r_[start[0], np.maximum.accumulate(block)]  # the latest end before each cut (the first kernel waits for none)
    out = []
    for lo, hi in spans:
        reach = np.maximum.accumulate(np.r_[before[np.searchsorted(cuts, lo)], end[lo:hi]])[:-1]
        out.append(start[lo:hi] - reach)
    return out
