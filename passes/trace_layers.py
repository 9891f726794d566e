"""Which decoder layer each kernel of a trace belongs to (``detect-layers``).

Strategies, best first:

1. **ground truth**: the module tree (``module_tree``): instances of the outermost repeated
   module class, from ``nn.Module`` spans or ranges named by a module path, one stack per parent;
   a kernel is in the span that holds its launch. A forward pass ends where the layer numbers
   start again.
2. **boundary**: the seed's rule generalized: a layer starts at a layer-start norm (a table flag)
   that follows an all-reduce (or at any layer-start norm when the trace has no all-reduce).
   Post-attention norms are layer-start kernels too, so this finds half layers; ``merge`` joins
   a half without attention to the attention half before it (dual-norm models such as Grok-2).
3. **motif**: a decoder stack repeats the same kernel sequence once per layer. The period comes
   from the gaps between repeats of each kernel name; the layer starts at the input norm before
   the unit's first attention kernel; every place the sequence from that norm to the attention
   kernel recurs starts a layer. No pattern table is needed for the period, and layers of other
   lengths (dense layers before MoE layers) are found too.

Kernels are cut into passes first (``trace_segments``: forward steps, piecewise pieces joined,
training steps and launching threads apart) and motif runs split a pass again where the layers
stop repeating (one forward pass ends, another begins); a stretch outside the motif's layers
that repeats a motif of its own is another stack. Layers that do not look like layers are
dropped, and the result carries its evidence and confidence (``layer_evidence``).
``auto`` takes the spans in the forward passes they cover and motif (or boundary) layers in the
others: profilers record module spans around eager passes, and a graph replay runs without them.
Without ``merge`` every strategy's layers are cut into their attention and FFN halves.
"""

from __future__ import annotations

import re
import zlib
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterable, cast

import numpy as np

from layerc.ir.trace import Kernels, Trace, first_rows, group_then_start, isin, median, unique, unique_inverse
from layerc.passes import layer_evidence as evidence
from layerc.passes.kernel_tables import TYPES, Classification, kernel_table
from layerc.passes.layer_strategies import STRATEGIES
from layerc.passes.module_tree import Spans, span_layers
from layerc.passes.pass_edges import gpu_rows, settle_edges
from layerc.passes.trace_segments import join_edges, kernel_steps, passes

ATTENTION, MOE, LINEAR, NORM, COMMUNICATION = (TYPES.index(t) for t in ("ATTENTION", "MOE", "LINEAR", "NORM", "COMMUNICATION"))
#: types a kernel may have without belonging to the layer's own sequence: fills, copies, kernels no table knows
WEAK = np.zeros(len(TYPES), bool)
WEAK[[TYPES.index("MEMORY"), TYPES.index("OTHER")]] = True
#: a period that fits LAYERS times in a longer one is the layer when it predicts this share of what the longer one does
SHORTER, LAYERS = 0.75, 4
#: an idle gap this many times the pass's median gap, at least IDLE_NS and half its longest, ends an eager forward pass
IDLE, IDLE_NS = 20.0, 20_000
#: an idle wait this share of the longest may end a forward pass where more than a layer lies around it
LOOSE = 0.2
#: a period predicting this share of the whole sequence is taken as it is (no noise to set aside)
CLEAN = 0.8
#: a weak kernel name is structural when it appears in this share of the periods
RECURS = 0.8
HEAVY = np.zeros(len(TYPES), bool)
HEAVY[[ATTENTION, MOE, LINEAR, COMMUNICATION]] = True
_BINARY_ADD = re.compile(r"(?i)(?<!OnSelf_)add")  #: ``OnSelf`` adds are tensor-scalar (the norm's eps)
ACTIVATION = re.compile(r"(?i)act_and_mul|silu|gelu|swiglu|relu")


@dataclass(eq=False)
class LayerResult:
    """The layers a strategy found: per kernel, its layer and pass; per pass, its layer count."""

    layer: np.ndarray  #: per kernel: the layer index within its pass, or -1
    pass_of: np.ndarray  #: per kernel: the pass index (a replay, or one eager forward pass)
    strategy: str  #: the strategy that decided (``ground-truth+motif``: spans where they cover a pass, motif elsewhere)
    confidence: float  #: 0..1: span coverage, or how regular the found layers are
    period: int | None = None  #: kernels per layer (motif)
    layers_per_pass: list[int] = field(default_factory=list)
    partial: list[bool] = field(default_factory=list)  #: per pass: fewer layers than the complete passes (cut by the profile)
    stack: np.ndarray | None = None  #: per kernel: which of ``stacks`` its layer is in, or -1
    stacks: list[dict[str, Any]] = field(default_factory=list)  #: class, parent, layers (per pass that runs it), offset
    steps: list[int] = field(default_factory=list)  #: per pass: its training step (``ProfilerStep#N``), or -1
    evidence: dict[str, Any] = field(default_factory=dict)  #: what the decision rests on
    warnings: list[str] = field(default_factory=list)


def from_spans(trace: Trace, cls: Classification | None = None) -> np.ndarray | None:
    """Layer of each kernel from the module spans (``module_tree``), or None when they name none."""
    found = span_layers(trace, heavy_kernels(trace, cls))
    return None if found is None else found.layer


def heavy_kernels(trace: Trace, cls: Classification | None = None) -> np.ndarray:
    """Per kernel: a GEMM, attention or MoE kernel (what a layer is made of)."""
    cls = cls if cls is not None else kernel_table().classify(trace)
    return isin(cls.type, [ATTENTION, MOE, LINEAR])


def find_period(tokens: np.ndarray, lo: int = 3) -> tuple[int, float]:
    """The period of a repeating sequence and the share of positions it predicts."""
    n = len(tokens)
    if n < 2 * lo:
        return 0, 0.0
    gaps = _repeat_gaps(tokens, n // 2)
    gaps[:lo] = 0
    best, score = 0, 0.0
    tried = np.argsort(-gaps, kind="stable")[:32]
    tried = tried[gaps[tried] > 0]
    for p, s in zip(tried.tolist(), shift_matches(tokens, tried).tolist()):
        if s > score + 1e-9 or abs(s - score) < 1e-9 and p < best:
            best, score = p, s
    # a multiple of the true period predicts as well: keep the smallest that does, and repeats
    # whole somewhere (a unit's halves that differ in one kernel, ViT's attention and MLP halves
    # between two LayerNorms, predict nearly as well where the rest of the pass matches neither)
    for d in range(2, 9):
        if best and best % d == 0 and best // d >= lo:
            q = best // d
            s = float(np.mean(tokens[q:] == tokens[:-q]))
            if s >= score - 0.01 and _repeats_whole(tokens, q, copies=2):
                best, score = q, s
    return _shortest_unit(tokens, gaps, best, score)


#: at most this many positions times shifts are compared in one step (a bool matrix of 1 MB)
_SHIFT_CELLS = 1 << 20


def shift_matches(tokens: np.ndarray, shifts: np.ndarray) -> np.ndarray:
    """For each shift ``q`` (0 < q < len), the share of positions ``i`` where ``tokens[i + q]
    == tokens[i]`` (``np.mean(tokens[q:] == tokens[:-q])``, the same float), for all shifts in
    a few steps: a short pass's candidates cost one comparison, not one each."""
    n, shifts = len(tokens), np.asarray(shifts, np.int64)
    if not len(shifts) or n * len(shifts) > _SHIFT_CELLS:
        return np.array([np.mean(tokens[q:] == tokens[:-q]) for q in shifts.tolist()], np.float64)
    at = np.arange(n) + shifts[:, None]
    inside = at < n
    same = (tokens[np.minimum(at, n - 1)] == tokens) & inside
    share: np.ndarray = np.count_nonzero(same, axis=1) / (n - shifts)
    return share


def _repeat_gaps(tokens: np.ndarray, most: int) -> np.ndarray:
    """How often each distance up to ``most`` separates two consecutive runs of one kernel."""
    order = np.argsort(tokens, kind="stable")  # positions grouped by token, ascending
    repeat = tokens[order][1:] == tokens[order][:-1]
    return np.bincount(np.diff(order)[repeat], minlength=most + 1)[: most + 1]


def _shortest_unit(tokens: np.ndarray, gaps: np.ndarray, best: int, score: float) -> tuple[int, float]:
    """A layer, not the whole forward pass: passes run back to back repeat whole, and the pass
    (layers plus embedding, lm_head, sampling: not a multiple of the layer) predicts a little
    better than the layer. The shortest candidate that fits ``LAYERS`` times in ``best``, predicts
    nearly as well, repeats exactly over three units in a row, and whose unit is a layer-like
    sequence (three distinct kernels, one of them once: not a run of one kernel) is the period."""
    shorter = np.nonzero(gaps[: best // LAYERS + 1])[0]
    for q, s in zip(shorter.tolist(), shift_matches(tokens, shorter).tolist()):
        if s < max(SHORTER * score, 0.35):
            continue
        match = tokens[q:] == tokens[:-q]
        at = _longest_match_run(match)
        if at + 2 * q > len(match) or not match[at : at + 2 * q].all():
            continue
        names, counts = np.unique(tokens[at : at + q], return_counts=True)
        if len(names) >= 3 and (counts == 1).any():
            return q, s
    return best, score


def layer_period(tokens: np.ndarray, kind: np.ndarray) -> tuple[int, float]:
    """The period of a layer: ``find_period``'s, or the layer inside it where the period is a
    whole forward pass of a shallow model (``_few_layers``; ``kind``: the kernels' types)."""
    best, score = find_period(tokens)
    if not best:
        return best, score
    best, score = _whole_layer(tokens, kind, best, score)
    return _few_layers(tokens, kind, best, score)


def _repeats_whole(tokens: np.ndarray, q: int, copies: int = 3) -> bool:
    """Whether the sequence holds ``copies`` copies of some unit of length ``q`` in a row (three:
    two can meet by chance where one stack ends, a ViT block's MLP half beside the merger's MLP)."""
    match = tokens[q:] == tokens[:-q]
    at = _longest_match_run(match)
    span = (copies - 1) * q
    return len(match) >= at + span and bool(match[at : at + span].all())


def _whole_layer(tokens: np.ndarray, kind: np.ndarray, best: int, score: float) -> tuple[int, float]:
    """A layer, not half of one: where the period never repeats whole (a ViT block's attention
    and MLP halves between two LayerNorms differ in one kernel) but an attention kernel recurs
    every two to four periods and that unit does repeat whole, the layer is that (the shortest
    such)."""
    if _repeats_whole(tokens, best):
        return best, score
    gaps = set()
    for t in unique(tokens[kind == ATTENTION]).tolist():
        where = np.nonzero(tokens == t)[0]
        if len(where) >= 3:
            gaps.add(int(median(np.diff(where))))
    for gap in sorted(g for g in gaps if g > best and g % best == 0 and g <= 4 * best):
        if _repeats_whole(tokens, gap):
            return gap, float(np.mean(tokens[gap:] == tokens[:-gap]))
    return best, score


def _few_layers(tokens: np.ndarray, kind: np.ndarray, best: int, score: float) -> tuple[int, float]:
    """A pass of few layers: its layers cover too little of it for their period to predict
    nearly as well as the pass's own (passes repeat whole, or the stretch holds passes of
    another kind too). The layer is then the unit of half the pass or
    less that the pass holds two or more exact copies of in a row, covering half of it or more but
    not all (a pass runs more than its layers; the most copies, the shorter on a tie), and a layer-like sequence (three distinct kernels,
    one of them once) that runs attention or MoE kernels, whose once-only kernels the pass's unit
    runs more than once (a layer's attention kernel recurs in its pass); else the pass's period
    stands."""
    found, cover = best, 0
    gaps = _repeat_gaps(tokens, best // 2)
    for q in (np.nonzero(gaps[3:])[0] + 3).tolist():
        match = tokens[q:] == tokens[:-q]
        at = _longest_match_run(match)
        run = int(np.argmin(np.r_[match[at:], False]))  # the length of that stretch of matches
        copies = 1 + (run + 1) // q  # the first layer's kernel at the seam may differ (a norm without residual)
        names, counts = np.unique(tokens[at : at + q], return_counts=True)
        # the copies leave room in the pass's unit for what a pass runs besides its layers
        if 2 <= copies and best / 2 <= copies * q < best and copies > cover and len(names) >= 3 and (counts == 1).any():
            window = tokens[at : at + best]
            layer_like = bool(isin(kind[at : at + q], [ATTENTION, MOE]).any())
            if layer_like and all(int((window == x).sum()) >= 2 for x in names[counts == 1].tolist()):
                found, cover = q, copies
    return (found, float(np.mean(tokens[found:] == tokens[:-found]))) if found != best else (best, score)


@dataclass(frozen=True, eq=False)
class _Pass:
    """One pass's kernels in launch order, with what the strategies look at."""

    token: np.ndarray  #: full-name string ids (short names merge distinct kernels)
    short: np.ndarray  #: short-name string ids
    kind: np.ndarray  #: type indices
    start_flag: np.ndarray  #: layer-start norms
    residual_add: np.ndarray  #: binary elementwise adds (a residual add ends a layer)
    activation: np.ndarray  #: FFN activations (SiLU, GELU, act-and-mul)
    start: np.ndarray
    end: np.ndarray

    @cached_property
    def norm_like(self) -> np.ndarray:
        """Norm kernels and layer-start kernels."""
        return cast(np.ndarray, (self.kind == NORM) | self.start_flag)

    def take(self, keep: np.ndarray | slice) -> _Pass:
        """The kernels ``keep`` (a mask, or a slice: views, no copy) as a pass of their own."""
        return _Pass(*(getattr(self, f)[keep] for f in ("token", "short", "kind", "start_flag", "residual_add", "activation",
                                                        "start", "end")))


def _longest_match_run(match: np.ndarray) -> int:
    """Where the longest stretch of True begins (the most regular region of the sequence)."""
    edges = np.diff(np.r_[0, match.astype(np.int8), 0])
    begins, ends = np.nonzero(edges == 1)[0], np.nonzero(edges == -1)[0]
    return int(begins[np.argmax(ends - begins)]) if len(begins) else 0


def _phase(p: _Pass, s: int, period: int) -> int:
    """Offset in the unit ``[s, s + period)`` where a layer starts: the input norm before the
    unit's first attention kernel (a layer-start norm when the tables know one; else the first
    kernel after the heavy kernel, and its residual add, that ends the layer before). Where the
    unit is a whole forward pass (its first attention kernel recurs in it: a shallow model), the
    walk starts from that kernel's second run, so that it meets the layer before, never the
    previous pass's final norm and lm_head."""
    unit = np.arange(s, s + period)
    kind = p.kind[unit]
    first = np.nonzero(kind == ATTENTION)[0]
    if not len(first):
        first = np.nonzero(kind == MOE)[0]
    a = int(first[0]) if len(first) else 0
    again = np.nonzero(p.token[unit] == p.token[unit[a]])[0] if len(first) else first
    a = int(again[1]) if len(again) >= 2 else a
    back = [(a - d) % period for d in range(1, period)]
    if p.start_flag[unit].any():
        found = _input_norm(p, (unit[j] for j in back), p.start_flag)
        return found - s if found is not None else next((j for j in back if p.start_flag[unit[j]]), a)
    by_norm = _norm_copy_start(p, unit, a)
    if by_norm is not None:
        return by_norm
    state = 0  # 0: before the projections, 1: in them, 2: in the norm before them
    for j in back:
        heavy = HEAVY[kind[j]]
        if state == 0 and kind[j] == LINEAR:
            state = 1
        elif state == 1 and not heavy:
            state = 2
        elif state == 2 and heavy:
            after = (j + 1) % period
            return (after + 1) % period if p.residual_add[unit[after]] else after
    return a


def _norm_copy_start(p: _Pass, unit: np.ndarray, a: int) -> int | None:
    """Offset in ``unit`` of a layer's input norm, known by being the same kernels as its
    post-attention norm (one norm class, however many kernels it runs as: an eager RMSNorm is
    five or more elementwise kernels). The post-attention norm is what runs between the output
    projection (the first GEMM after attention ``a``) and the FFN's first GEMM, after the
    residual add. The previous layer's FFN ends after its last activation, expert or all-reduce
    kernel; the layer's first projection is the first GEMM after the first copy of the norm
    past it, and the input norm is the last copy before that projection (a model that norms
    the FFN's output too runs two copies there; q/k norms between the projections are copies
    after it). None where a step is missing."""
    period = len(unit)
    short, kind = np.tile(p.short[unit], 3), np.tile(p.kind[unit], 3)
    act, res = np.tile(p.activation[unit], 3), np.tile(p.residual_add[unit], 3)
    at = a + period  # the attention kernel in the middle copy
    heavy = np.nonzero(HEAVY[kind])[0]
    after = heavy[heavy > at]
    o = after[kind[after] == LINEAR]
    if not len(o):
        return None
    ffn = after[after > o[0]]
    if not len(ffn) or ffn[0] - at >= period:
        return None
    between = np.arange(o[0] + 1, ffn[0])
    adds = between[res[between]]
    norm = short[between[between > adds[-1]]] if len(adds) else short[between]
    if not len(norm):
        return None
    markers = np.nonzero((act | (kind == MOE) | (kind == COMMUNICATION))[at - period + 1 : at])[0] + at - period + 1
    if not len(markers):
        return None
    barrier = int(markers[-1])
    m = len(norm)
    copies = [i for i in range(barrier + 1, at - m + 1) if (short[i : i + m] == norm).all()]
    if not copies:
        return None
    # the first copy after the FFN is the input norm or, in a model that norms the FFN's output
    # too, the norm before the residual add; the layer's first projection follows the input norm
    projection = heavy[heavy >= copies[0] + m]
    if not len(projection):
        return None
    before = [i for i in copies if i + m <= projection[0]]
    return before[-1] % period


def _occurrences(token: np.ndarray, signature: np.ndarray) -> np.ndarray:
    """Start positions of non-overlapping occurrences of ``signature`` in ``token``."""
    m = len(signature)
    cand = np.nonzero(token[: len(token) - m + 1] == signature[0])[0]
    for j in range(1, m):
        cand = cand[token[cand + j] == signature[j]]
    keep, last = [], -m
    for c in cand.tolist():
        if c >= last + m:
            keep.append(c)
            last = c
    return np.array(keep, np.int64)


def _layer_starts(p: _Pass, anchor: int, period: int, breaks: np.ndarray) -> np.ndarray:
    """Every layer's first kernel, given one layer's. Each layer has one kernel like the unit's
    first attention kernel; its layer starts at the kernel named like the anchor (short names:
    template variants such as the first layer's residual-free norm count) nearest to where the
    anchor sits before the attention kernel, and after the last of the ``breaks`` (idle gaps
    between forward passes) before it. Without attention, the anchor's opening run of kernels is
    matched as is."""
    att = np.nonzero(p.kind[anchor : anchor + period] == ATTENTION)[0]
    if not len(att):
        return _occurrences(p.token, p.token[anchor : anchor + min(period, 8)])
    d = int(att[0])
    hits = np.nonzero(p.token == p.token[anchor + d])[0]
    same = np.nonzero(p.short == p.short[anchor])[0]
    norm = np.nonzero(p.norm_like)[0]  # the first layer's norm may differ
    slack = max(2, d // 2)
    after = np.r_[0, breaks][np.searchsorted(breaks, hits, side="right")]  # the last break at or before each hit
    lo, target = np.maximum(hits - d - slack, after), hits - d
    # per hit, the nearest of the kernels named like the anchor and of the norms to where the
    # anchor sits (the previous pass's final norm may be the anchor's kernel too, the first
    # layer's own norm another template), inside [lo, hit); ties go to the anchor's name
    y, dist = np.full(len(hits), -1, np.int64), np.full(len(hits), np.iinfo(np.int64).max, np.int64)
    for pool in (same, norm):
        if not len(pool):
            continue
        at = np.searchsorted(pool, target)
        for cand in (pool[np.maximum(at - 1, 0)], pool[np.minimum(at, len(pool) - 1)]):
            ok = (cand >= lo) & (cand < hits)
            gap = np.abs(cand - target)
            better = ok & (gap < dist)
            y[better], dist[better] = cand[better], gap[better]
    y = y[y >= 0]
    return y[y > np.maximum.accumulate(np.r_[-1, y[:-1]])] if len(y) else y  # each after the one before


def motif_layers(p: _Pass, eager: bool = False) -> tuple[np.ndarray, np.ndarray, int, float]:
    """Per position of one pass: layer index within its run (-1 outside layers), run index
    (a run is one forward pass: layers that follow each other), the period and its score.
    Noise kernels (fills, copies, unknown kernels in some layers only) would break the period:
    it is found on the structural kernels, and the noise joins the layer it falls inside.
    ``eager``: the pass may hold several forward passes back to back (not one graph replay), so
    a long idle gap between two layers ends one; where the stretch as a whole shows no period
    (a shallow model whose prefill and decode passes differ), each forward pass between the
    idle gaps is looked at alone (kept where two or more of them show layers, as many in each:
    forward passes of one model; a repeat here and there is no stack of forward passes). A gap
    that falls inside a layer those passes show, or on the first kernel of a stretch's first
    layer, is the host stalling, not a pass ending: the passes are cut again without it; where
    no stall is to blame and the stretches are not alike, they are cut at shorter waits too."""
    got = _one_stretch(p, eager)
    if not eager or (got[0] >= 0).any():
        return got
    stalled, below = np.zeros(0, np.int64), None
    stretches: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, int, float]] = {}  # a round cuts some again, not all
    for _ in range(CUT_ROUNDS):
        breaks = _idle_breaks(p, stalled=stalled, below=below)
        if not len(breaks):
            return got
        layer, run, period, score, alike = _each_forward_pass(p, breaks, stretches)
        stall = _stalls(p, breaks, layer, run)
        if stall.any():
            stalled = np.union1d(stalled, breaks[stall])
        elif alike:
            return layer, run, period, score
        else:  # no stall to blame, and no forward passes alike: the waits between them are shorter
            below = _shortest_break(p, breaks)
    return got


#: how many times the forward passes of a stretch are cut again (after a host stall found inside
#: a layer, or at shorter waits)
CUT_ROUNDS = 8
#: the most distinct layers whose copies are looked for, to tell a stall inside a layer
STALL_UNITS = 8


def _each_forward_pass(p: _Pass, breaks: np.ndarray, stretches: dict[tuple[int, int], Any] | None = None
                       ) -> tuple[np.ndarray, np.ndarray, int, float, bool]:
    """``motif_layers`` of each stretch between two ``breaks`` alone; whether two or more show
    layers, as many in each. ``stretches``: the layers of stretches of ``p`` looked at before, by
    their first and end positions."""
    layer, run = np.full(len(p.token), -1, np.int64), np.zeros(len(p.token), np.int64)
    periods, base, counts = [], 0, set()
    stretches = {} if stretches is None else stretches
    for a, b in zip(np.r_[0, breaks].tolist(), np.r_[breaks, len(p.token)].tolist()):
        if (a, b) not in stretches:
            stretches[a, b] = _one_stretch(p.take(slice(a, b)), False)
        part, part_run, period, score = stretches[a, b]
        layer[a:b], run[a:b] = part, base + part_run
        base += int(part_run.max()) + 1 if b > a else 0
        if period and (part >= 0).any():
            periods.append((period, score * (b - a)))
            counts.add(len(unique(part[part >= 0])))
    if len(periods) < 2 or len(counts) > 1:
        return layer, run, 0, 0.0, False
    period = Counter(q for q, _ in periods).most_common(1)[0][0]
    return layer, run, period, sum(w for _, w in periods) / len(p.token), True


def _stalls(p: _Pass, breaks: np.ndarray, layer: np.ndarray, run: np.ndarray) -> np.ndarray:
    """Per break: whether a stall cut a layer found (``layer``, ``run``) there (``_stalls_in``),
    or fell on the first kernel of a layer with nothing before it in its stretch: a forward pass
    begins with its inputs and embedding, so a stretch that begins with a layer was cut by a stall."""
    edge = np.r_[True, (layer[1:] != layer[:-1]) | (run[1:] != run[:-1])]
    starts = np.flatnonzero(edge & (layer >= 0))
    whole = (run[starts[1:]] == run[starts[:-1]]) & (layer[starts[1:]] == layer[starts[:-1]] + 1)
    return cast(np.ndarray, (layer[breaks] >= 0) | _stalls_in(p, breaks, zip(starts[:-1][whole].tolist(), starts[1:][whole].tolist())))


def _stalls_in(p: _Pass, breaks: np.ndarray, layers: Iterable[tuple[int, int]]) -> np.ndarray:
    """Per break: whether it falls inside a copy of one of ``layers`` (first and end positions),
    by short names, or between two copies with nothing between them (``_inside_layers``)."""
    stall = np.zeros(len(breaks), bool)
    units: dict[bytes, tuple[int, int]] = {}
    for a, b in layers:
        if len(units) == STALL_UNITS:
            break
        units.setdefault(p.short[a:b].tobytes(), (a, b))
    for a, b in units.values():
        stall |= _inside_layers(p, a, b - a, breaks, _occurrences(p.short, p.short[a:b]))
    return stall


def _one_stretch(p: _Pass, eager: bool) -> tuple[np.ndarray, np.ndarray, int, float]:
    """``motif_layers`` on the whole of ``p``."""
    found = layer_period(p.token, p.kind)
    if found[1] >= CLEAN:  # the noise does not hide the period
        return _motif_layers(p, eager, found)
    keep = structural(p, found[0] if found[1] >= 0.35 else 0)
    if keep.all():
        return _motif_layers(p, eager, found)
    layer, run, period, score = _motif_layers(p.take(keep), eager, layer_period(p.token[keep], p.kind[keep]))
    if not (layer >= 0).any() and found[1] >= 0.35:  # without the noise no period stands out: keep the one with it
        return _motif_layers(p, eager, found)
    return *_noise_back(p, layer, run, keep), period, score


def structural(p: _Pass, period: int = 0) -> np.ndarray:
    """Per kernel: whether it belongs to the repeating sequence. Kernels of confident types
    (GEMM, attention, norm, MoE, communication, elementwise) do; a fill, copy or unknown kernel
    does when its name recurs in most periods of the others (a per-layer KV copy), not when it
    appears in some layers only. ``period``: the whole sequence's, when it has one (else the
    period of the confident kernels is found)."""
    weak = WEAK[p.kind]
    if not weak.any() or weak.all():
        return np.ones(len(weak), bool)
    counted = np.ones(len(weak), bool) if period else ~weak  # the kernels the period counts
    period = period or find_period(p.token[~weak])[0]
    if not period:
        return np.ones(len(weak), bool)
    unit = (np.cumsum(counted) - 1) // period  # the period each kernel falls in
    units = int(unit[-1]) + 1
    names, inverse = np.unique(p.token[weak], return_inverse=True)
    seen = unique(inverse.reshape(-1) * (units + 1) + np.maximum(unit[weak], 0))  # distinct (name, period)
    recurs = np.bincount(seen // (units + 1), minlength=len(names)) >= RECURS * units
    keep: np.ndarray = ~weak
    keep[np.nonzero(weak)[0][recurs[inverse.reshape(-1)]]] = True
    return keep


def _noise_back(p: _Pass, layer: np.ndarray, run: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Layers and runs of the structural kernels (``keep``) spread to the whole pass ``p``: a
    noise kernel is in the layer of the kernel before it when the kernel after it is in a layer
    of the same run (it ran inside the layers), else outside layers. Between two runs, the
    noise before the longest idle gap is the first run's (its sampling), the rest the next's (its
    inputs and embedding); before the first structural kernel, the first run's."""
    pos = np.nonzero(keep)[0]
    prev = np.maximum(np.cumsum(keep) - 1, 0)  # index into pos of the structural kernel at or before
    nxt = np.minimum(np.searchsorted(pos, np.arange(len(keep))), len(pos) - 1)
    out_layer, out_run = layer[prev], run[prev]
    noise = ~keep
    before = noise & (np.arange(len(keep)) < pos[0])
    inside = (layer[prev] >= 0) & (layer[nxt] >= 0) & (run[nxt] == run[prev]) & ~before
    out_layer = np.where(noise & ~inside, -1, out_layer)
    out_layer[keep] = layer
    out_run[keep] = run
    out_run[before] = run[0]
    placed = np.flatnonzero(out_layer >= 0)
    for j in np.flatnonzero(run[1:] != run[:-1]).tolist():  # the run changes between pos[j] and pos[j + 1]
        lo, hi = int(pos[j]), int(pos[j + 1])
        i = int(np.searchsorted(placed, hi))
        layer_first = 0 < i < len(placed) and out_run[placed[i - 1]] == run[j] and out_run[placed[i]] == run[j + 1]
        if layer_first:  # from the end of the one's last layer to the other's first
            lo, hi = int(placed[i - 1]) + 1, int(placed[i])
        if hi - lo > 1:
            cut = _idle_cut(p.start, p.end, lo, hi, layer_first=layer_first)
            out_run[lo:cut], out_run[cut:hi] = run[j], run[j + 1]
    return out_layer, out_run


def _motif_layers(p: _Pass, eager: bool, found: tuple[int, float]) -> tuple[np.ndarray, np.ndarray, int, float]:
    """``motif_layers`` on a pass of structural kernels whose period and score are ``found``."""
    n = len(p.token)
    layer, run = np.full(n, -1, np.int64), np.zeros(n, np.int64)
    period, score = found
    if not period or score < 0.35:
        return layer, run, 0, score
    s = _longest_match_run(p.token[period:] == p.token[:-period])
    anchor = s + _phase(p, s, period)
    if anchor + period > n:
        anchor -= period
    breaks = _idle_breaks(p) if eager else np.zeros(0, np.int64)
    starts = _layer_starts(p, anchor, period, breaks)
    copies = _occurrences(p.short, p.short[anchor : anchor + period]) if eager and anchor + period <= n else np.zeros(0, np.int64)
    stalls = _inside_layers(p, anchor, period, breaks, copies)
    if len(breaks) and len(starts) > 2 and not stalls.all():  # the unit may be more than a layer: the layers found tell too
        gaps = np.diff(starts)
        at = np.flatnonzero(gaps == np.bincount(gaps).argmax())
        stalls |= _stalls_in(p, breaks, zip(starts[at].tolist(), starts[at + 1].tolist()))
    stalled = breaks[stalls]
    if stalls.any():  # a host stall inside a layer, not a wait between forward passes
        breaks = breaks[~stalls]
        starts = _layer_starts(p, anchor, period, breaks)
    if not len(starts):
        return layer, run, period, score
    gaps = np.diff(starts)
    # a layer's usual length: the median of the shorter half of the gaps (a shallow model's passes
    # put a gap between passes after every other layer)
    typical = int(median(gaps[gaps <= median(gaps)])) if len(gaps) else period
    natural = _natural_ends(p, starts)
    # A long gap ends a run (one forward pass, then the next) unless the layer's own norms say
    # it reaches the next start (a MoE layer after dense ones is longer, not a break).
    reaches = (natural[:-1] >= 0) & (natural[:-1] >= starts[1:] - 2)
    # A shorter idle wait ends one too where it comes after the layer's own norms say the layer
    # ended (after its last layer, the final norm, lm_head and sampling): a stall inside a pass
    # (a host sync in a MoE layer) comes before the next layer's norm.
    loose = _idle_breaks(p, LOOSE, stalled=stalled) if eager else breaks
    new_run = np.r_[True, (gaps > 1.25 * typical) & ~reaches | _between(breaks, starts) | _after_end(loose, starts, natural)
                    | (_more_after_copy(p, starts, period, copies) if eager else False)]
    run_of = np.cumsum(new_run) - 1
    ends = np.r_[starts[1:], n]
    last = np.r_[new_run[1:], True]
    ends[last] = np.minimum(np.maximum(starts[last] + typical, natural[last]), ends[last])
    first_of_run = np.nonzero(new_run)[0]
    index = np.arange(len(starts)) - first_of_run[run_of]
    for a, b, i in zip(starts.tolist(), ends.tolist(), index.tolist()):
        layer[a:b] = i
    # runs split at the longest idle gap between one run's last layer and the next run's first
    cut = [0] + [_idle_cut(p.start, p.end, int(ends[f - 1]), int(starts[f])) for f in first_of_run[1:].tolist()]
    run[:] = np.searchsorted(np.array(cut), np.arange(n), side="right") - 1
    return layer, run, period, score


def _idle_waits(p: _Pass) -> np.ndarray:
    """Per kernel but the first, how long the GPU sat idle before it: its start after the latest
    end of the kernels before it (negative where it overlaps them)."""
    return p.start[1:] - np.maximum.accumulate(p.end)[:-1]


def _shortest_break(p: _Pass, breaks: np.ndarray) -> int:
    """The shortest of the waits before ``breaks``: where passes are cut again at shorter waits,
    the longest wait below it sets the next limit (``_idle_breaks``'s ``below``)."""
    return int(_idle_waits(p)[breaks - 1].min())


def _idle_breaks(p: _Pass, of_longest: float = 0.5, stalled: np.ndarray | None = None, below: int | None = None) -> np.ndarray:
    """Positions of the kernels that start after the GPU sat idle far longer than between the
    pass's kernels, and about as long as its longest wait (``of_longest`` of it: the host waited
    for one forward pass's result before launching the next). ``stalled``: positions known to
    follow a host stall inside a layer, which are neither breaks nor the longest wait; ``below``:
    the longest wait is the longest shorter than this (the longer ones are breaks all the same)."""
    _times_read[0] += 1
    idle = _idle_waits(p)
    if stalled is not None and len(stalled):
        idle[stalled - 1] = 0
    # no forward pass begins before the first attention or expert kernel, or after the last: a
    # wait there (before a pass's lm_head or in its embedding) is a stall inside a pass
    mixers = np.flatnonzero((p.kind == ATTENTION) | (p.kind == MOE))
    if len(mixers):
        idle[: mixers[0]] = 0
        idle[mixers[-1] :] = 0
    if not len(idle):
        return np.zeros(0, np.int64)
    # the waits between forward passes are alike and the longest; a stall inside one is shorter
    floor = max(IDLE * float(median(np.maximum(idle, 0))), IDLE_NS)
    longest = _usual_longest(idle[idle >= floor]) if below is None else float(idle[idle < below].max(initial=0))
    limit = max(floor, of_longest * longest)
    return np.nonzero(idle >= limit)[0] + 1


def _usual_longest(waits: np.ndarray) -> float:
    """The longest of the waits between forward passes: of the long waits, grouped where each is
    within twice the next shorter one, the longest of the group that recurs most (a host stall
    between two passes, longer than the waits between the others, happens once or twice; the
    waits recur once per pass). Ties go to the shorter group: a stall is as rare as the waits only
    where there are few passes, and the longer waits are breaks all the same."""
    if len(waits) < 3:
        return float(waits.max(initial=0))
    desc = np.sort(waits)[::-1].astype(float)
    group = np.r_[0, np.cumsum(desc[:-1] > 2 * desc[1:])]
    sizes = np.bincount(group)
    return float(desc[np.flatnonzero(group == len(sizes) - 1 - int(np.argmax(sizes[::-1])))[0]])


#: kernels after a whole copy of the layer, before the next layer starts, that end a forward pass
AFTER_COPY = 3


def _more_after_copy(p: _Pass, starts: np.ndarray, period: int, copies: np.ndarray) -> np.ndarray:
    """Per pair of consecutive layer starts: whether the first layer is a whole copy of the
    anchor's (``copies``: where its kernels recur, by short name) and more than a few kernels
    follow it before the next layer starts, none of them attention or experts: the final norm,
    lm_head, sampling and the next pass's inputs and embedding. A long layer (experts) holds far more kernels than that,
    so its length alone would not tell. Eager passes only (a replay is one forward pass)."""
    if len(starts) < 2 or not len(copies):
        return np.zeros(max(len(starts) - 1, 0), bool)
    whole = isin(starts[:-1], copies)
    heavy = np.r_[0, np.cumsum((p.kind == ATTENTION) | (p.kind == MOE))]  # no attention or experts between two passes
    quiet = heavy[starts[1:]] == heavy[np.minimum(starts[:-1] + period, len(p.kind))]
    return cast(np.ndarray, whole & quiet & (np.diff(starts) - period > AFTER_COPY))


def _inside_layers(p: _Pass, anchor: int, period: int, breaks: np.ndarray, copies: np.ndarray) -> np.ndarray:
    """Per break: whether it falls strictly inside a whole copy of the anchor's layer (``copies``:
    where its kernels recur, by short name, in the same order), or where one copy ends and the
    next begins. A forward pass never ends inside a layer, nor between two layers with nothing
    between them (its final norm and lm_head follow the last), so such a wait is the host
    stalling (a launch-bound eager pass, a first call after compilation). Only where the unit is
    one layer (its first attention kernel does not recur in it): a shallow model's unit may be a
    whole forward pass, whose copies straddle the waits between passes."""
    inside = np.zeros(len(breaks), bool)
    att = np.nonzero(p.kind[anchor : anchor + period] == ATTENTION)[0]
    if not len(breaks) or not len(copies) or len(att) != 1 and not (
            len(att) and (p.token[anchor : anchor + period] == p.token[anchor + att[0]]).sum() == 1):
        return inside
    before = np.searchsorted(copies, breaks, side="left") - 1  # the last copy starting before each break
    ok = before >= 0
    inside[ok] = breaks[ok] < copies[before[ok]] + period
    # or exactly where one copy ends and the next begins: between two layers of one pass
    at = np.minimum(before + 1, len(copies) - 1)
    joint = ok & (copies[at] == breaks) & (copies[np.maximum(before, 0)] + period == breaks)
    return cast(np.ndarray, inside | joint)


def _after_end(breaks: np.ndarray, starts: np.ndarray, natural: np.ndarray) -> np.ndarray:
    """Per pair of consecutive layer starts: whether a break lies after the first layer's natural
    end (``_natural_ends``; none where it is unknown), up to the second start."""
    if not len(breaks) or len(starts) < 2:
        return np.zeros(max(len(starts) - 1, 0), bool)
    last = np.searchsorted(breaks, starts[1:], side="right") - 1  # the last break at or before the next start
    b = breaks[np.maximum(last, 0)]
    return (last >= 0) & (natural[:-1] >= 0) & (b > natural[:-1]) & (b > starts[:-1])


def _between(breaks: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per pair of consecutive layer starts: whether a break lies after the first, up to the second."""
    return np.searchsorted(breaks, starts[1:], side="right") > np.searchsorted(breaks, starts[:-1], side="right")


#: how often a pass's kernel times were read: a pass whose layers were found without them is
#: remembered by its kernel sequence alone (a CUDA graph replays one sequence many times)
_times_read = [0]


def _idle_cut(start: np.ndarray, end: np.ndarray, lo: int, hi: int, layer_first: bool = True) -> int:
    """Where the next forward pass begins, between one that ends before ``lo`` and one whose first
    layer starts at ``hi``: after the longest idle gap there (the GPU waits for the host between
    sampling one token and the next pass's inputs). A pass runs its inputs and embedding before
    its first layer, so the wait before ``hi`` itself (a host stall on the layer's first kernel)
    counts only where nothing lies between; ``layer_first=False``: ``hi`` may be any kernel."""
    _times_read[0] += 1
    if hi <= lo:
        return hi
    last = hi - 1 if layer_first and hi - lo >= 2 else hi
    return lo + 1 + int(np.argmax(start[lo + 1 : last + 1] - end[lo:last]))


def _natural_ends(p: _Pass, starts: np.ndarray) -> np.ndarray:
    """Per layer start, where its norms say it ends: at the second norm after its first attention
    kernel (the first is the post-attention norm, the second the next layer's input norm or the
    final norm); -1 where the pass has too few norms to say."""
    n = len(p.kind)
    att = np.nonzero(p.kind == ATTENTION)[0]
    norms = np.nonzero(p.norm_like)[0]
    out = np.full(len(starts), -1, np.int64)
    if not len(att) or len(norms) < 2:
        return out
    j = np.searchsorted(att, starts)
    has_att = j < len(att)
    first_att = att[np.minimum(j, len(att) - 1)]
    k = np.searchsorted(norms, first_att, side="right") + 1
    ok = has_att & (k < len(norms))
    out[ok] = np.minimum(norms[np.minimum(k, len(norms) - 1)][ok], n)
    return out


def _input_norm(p: _Pass, back: Iterable[int], is_norm: np.ndarray) -> int | None:
    """The input norm of a layer, walking ``back`` from its first attention kernel: the farthest
    norm past the projections and before the previous layer's FFN (its activation, experts or
    all-reduce). q/k norms lie after the projections, a fused q_a/kv_a norm between two of them,
    the input norm before all of them."""
    seen_linear, found = False, None
    for j in back:
        if seen_linear and is_norm[j]:
            found = j  # an all-reduce fused with the residual add and the norm is one too
        if seen_linear and (p.kind[j] in (MOE, COMMUNICATION, ATTENTION) or p.activation[j]):
            break
        seen_linear |= p.kind[j] == LINEAR
    return found


def boundary_layers(p: _Pass) -> np.ndarray:
    """Half layers of one pass: each starts at a layer-start norm that follows an all-reduce (any
    layer-start norm when there is no all-reduce) and ends before the next."""
    n = len(p.kind)
    layer = np.full(n, -1, np.int64)
    heavy = np.nonzero(HEAVY[p.kind])[0]
    starts = []
    comm = (p.kind == COMMUNICATION).any()
    for i in np.nonzero(p.start_flag)[0].tolist():
        j = np.searchsorted(heavy, i)  # the first heavy kernel after it; j - 1 the last before
        feeds_gemm = j < len(heavy) and p.kind[heavy[j]] in (LINEAR, MOE)  # not a q/k norm
        after_reduce = j > 0 and p.kind[heavy[j - 1]] == COMMUNICATION
        if feeds_gemm and (after_reduce or not comm):
            starts.append(i)
    # the first layer's input norm may be a plain norm (no residual yet): find it from its attention
    att = np.nonzero(p.kind == ATTENTION)[0]
    if len(att) and (not starts or att[0] < starts[0]):
        first = _input_norm(p, range(int(att[0]) - 1, -1, -1), p.norm_like)
        if first is not None:
            starts.insert(0, first)
    if not starts:
        return layer
    # a segment too thin to be a half layer (a norm and one GEMM: the norm before a fused q_a/kv_a
    # projection and its own norm) opens the next segment instead
    kept = [starts[0]]
    for nxt in starts[1:] + [None]:
        if nxt is not None and not _is_half_layer(p.kind[kept[-1] : nxt]):
            continue  # drop the next start: the thin segment runs on into it
        if nxt is not None:
            kept.append(nxt)
    begins = np.array(kept)
    # the last half layer ends at its last heavy kernel (the lm_head and sampling are not in it)
    tail = heavy[heavy >= begins[-1]]
    ends = np.r_[begins[1:], _last_layer_end(p, begins[-1], tail, _usual_after(p, begins, heavy))]
    i = 0
    for a, b in zip(begins.tolist(), ends.tolist()):
        if _is_half_layer(p.kind[a:b]):
            layer[a:b] = i  # not the final norm before the lm_head
            i += 1
    return layer


#: a forward pass's inputs, matched by their last kernels, open the next forward pass in an eager stretch
PROLOGUE_TAIL = 3


def residual_norm_passes(p: _Pass) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Forward passes, half layers and layers of an eager stretch whose norms run as several
    kernels (an eager RMSNorm: a copy, pow, mean, add, rsqrt, mul...), whatever the mixer, and
    whatever the host stalls (transformers' generate stalls inside a pass for longer than it
    waits between passes). A decoder layer adds its mixer's output to the residual stream and
    norms the sum before its FFN; it adds the FFN's output, and the next layer norms that: the
    norm is the kernel sequence that most often runs between a residual add and the next GEMM.
    A forward pass opens with its inputs (the kernels before the stretch's first norm) and its
    first layer's norm, which follows them, not an add (a q/k norm of the same class follows a
    projection); after it, every other norm that follows an add opens a layer, the others the
    layer's FFN half, and the last is the final norm. Passes split where the next one's inputs
    begin. None where the norms do not pair up so, or a half holds no GEMM, attention or experts,
    or a norm kernel runs in the stretch (a norm of one kernel: not this kind of model)."""
    if (p.kind == NORM).any():  # a norm that runs as one kernel is known as one: the layer-start norms decide
        return None
    heavy = np.flatnonzero(HEAVY[p.kind])
    add = p.residual_add
    last_add = np.flatnonzero(add & ~np.r_[add[1:], False])  # the last of each run of adds (an expert sum, then the residual)
    j = np.searchsorted(heavy, last_add + 1)
    a, b = last_add[j < len(heavy)] + 1, heavy[j[j < len(heavy)]]
    a, b = a[b - a >= 2], b[b - a >= 2]
    if len(a) < 4:
        return None
    norm = Counter(p.short[x:y].tobytes() for x, y in zip(a.tolist(), b.tolist())).most_common(1)[0][0]
    signature = np.frombuffer(norm, p.short.dtype)
    copies = _occurrences(p.short, signature)
    first = int(copies[0])
    tail = p.short[max(first - PROLOGUE_TAIL, 0) : first]
    if not len(tail) or add[first - 1]:
        return None
    after_add = add[copies - 1]
    opens = [c for c in copies[~after_add].tolist() if c >= len(tail) and np.array_equal(p.short[c - len(tail) : c], tail)]
    run = np.zeros(len(p.kind), np.int64)
    halves, whole = np.full(len(p.kind), -1, np.int64), np.full(len(p.kind), -1, np.int64)
    for r, (o, nxt) in enumerate(zip(opens, opens[1:] + [len(p.kind)])):
        if r:  # between the last pass's final norm and this one's first: the longest wait for the host
            final = int(copies[copies < o][-1])
            run[_idle_cut(p.start, p.end, final + len(signature) - 1, o) :] = r
        norms = copies[(copies > o) & (copies < nxt) & after_add]
        if not len(norms) or len(norms) % 2:
            return None
        bounds = np.r_[o, np.sort(norms)]
        if not all(_is_half_layer(p.kind[x:y]) for x, y in zip(bounds[:-1].tolist(), bounds[1:].tolist())):
            return None
        for i, (x, y) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist())):
            halves[x:y], whole[x:y] = i, i // 2
    if len(opens) < 1 or len(unique(whole[whole >= 0])) < 2:
        return None
    return run, halves, whole


def _is_half_layer(kind: np.ndarray) -> bool:
    return bool((kind == ATTENTION).any() or (kind == MOE).any() or (kind == LINEAR).sum() >= 2)


def _last_layer_end(p: _Pass, s: int, heavy: np.ndarray, after: int = 0) -> int:
    """End of a pass's last half layer: through its last all-reduce when there are all-reduces,
    else through its heavy kernels and what follows them up to the final norm (a gated output's
    multiply, the residual add: the layer's; lm_head follows the norm), or, where no norm follows
    (a host stall cut the pass's tail off), through its heavy kernels and the ``after`` kernels
    that follow the heavy ones of the other half layers of its kind."""
    comm = heavy[p.kind[heavy] == COMMUNICATION]
    if len(comm):
        return int(comm[0]) + 1
    if not len(heavy):
        return s + 1
    end = int(heavy[-1]) + 1
    norm = np.flatnonzero(p.start_flag[end:] | (p.kind[end:] == NORM))
    return end + int(norm[0]) if len(norm) else min(end + after, len(p.kind))


def _usual_after(p: _Pass, begins: np.ndarray, heavy: np.ndarray) -> int:
    """How many kernels most often follow the last heavy kernel of a half layer of the last one's
    kind (with attention or without) before the next half layer begins."""
    if len(begins) < 2:
        return 0
    attention = np.r_[0, np.cumsum(p.kind == ATTENTION)]  # attention kernels before each position
    last = begins[-1]
    kind = attention[len(p.kind)] > attention[last]
    afters: Counter[int] = Counter()
    for a, b in zip(begins[:-1].tolist(), begins[1:].tolist()):
        inside = heavy[(heavy >= a) & (heavy < b)]
        if len(inside) and (attention[b] > attention[a]) == kind:
            afters[b - int(inside[-1]) - 1] += 1
    return afters.most_common(1)[0][0] if afters else 0


def merge_half_layers(layer: np.ndarray, kind: np.ndarray) -> np.ndarray:
    """Join each half layer without attention to an attention half just before it."""
    out = layer.copy()
    ids = [i for i in unique(layer).tolist() if i >= 0]
    has_att = {i: bool((kind[layer == i] == ATTENTION).any()) for i in ids}
    new, prev_open = -1, False
    for i in ids:
        if has_att[i] or not prev_open:
            new += 1
            prev_open = has_att[i]
        else:
            prev_open = False
        out[layer == i] = new
    return out


def split_half_layers(layer: np.ndarray, p: _Pass) -> np.ndarray:
    """Each layer of one pass cut where its second half (FFN or MoE) begins, numbered again from 0
    in order, so that every strategy can keep the halves apart: at the first boundary half layer
    that starts after the layer's first attention kernel, else (decomposed norms, no layer-start
    norm in the tables) after the attention output projection; a layer with neither stays whole."""
    out = np.full(len(layer), -1, np.int64)
    inside = layer >= 0
    if not inside.any():
        return out
    ids, first = np.unique(layer, return_index=True)
    ids, first = ids[ids >= 0], first[ids >= 0]
    cut = _half_starts(layer, p, ids, first)
    for i in np.nonzero(cut < 0)[0].tolist():
        cut[i] = _after_attention_output(p, np.nonzero(layer == ids[i])[0])
    pos = np.nonzero(inside)[0]
    at = cut[np.searchsorted(ids, layer[pos])]
    second = (at >= 0) & (pos >= at)
    out[pos] = np.unique(2 * layer[pos] + second, return_inverse=True)[1].reshape(-1)
    return out


def _half_starts(layer: np.ndarray, p: _Pass, ids: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Per layer ``ids`` (first kernels at ``first``), where the first of the boundary strategy's
    half layers that starts after the layer's first attention kernel (after its first kernel,
    where it has none) begins, or -1."""
    halves = boundary_layers(p)
    opens = np.nonzero((halves >= 0) & (np.r_[-1, halves[:-1]] != halves) & (layer >= 0))[0]
    att = np.nonzero((p.kind == ATTENTION) & (layer >= 0))[0]
    with_att, att_first = np.unique(layer[att], return_index=True)
    after = first.copy()
    after[np.searchsorted(ids, with_att)] = att[att_first]
    which = np.searchsorted(ids, layer[opens])
    keep = opens > after[which]
    cut = np.full(len(ids), -1, np.int64)
    got, at = np.unique(which[keep], return_index=True)  # opens ascend: the first of each layer
    cut[got] = opens[keep][at]
    return cut


def _after_attention_output(p: _Pass, pos: np.ndarray) -> int:
    """The first kernel of a layer's second half (``pos``: the layer's kernels) past its attention
    output projection (the first GEMM after the last attention kernel), that GEMM's all-reduce and
    the residual add; -1 when the layer has no such GEMM or nothing follows it."""
    kind = p.kind[pos]
    att = np.nonzero(kind == ATTENTION)[0]
    gemm: np.ndarray | list[int] = np.nonzero(kind[att[-1] :] == LINEAR)[0] if len(att) else []
    if not len(gemm):
        return -1
    j = int(att[-1] + gemm[0]) + 1
    while j < len(pos) and kind[j] == COMMUNICATION:
        j += 1
    j += int(j < len(pos) and p.residual_add[pos[j]])
    return int(pos[j]) if j < len(pos) else -1


@dataclass(frozen=True, eq=False)
class _Columns:
    """Trace-wide columns the strategies read, cut into one ``_Pass`` per pass."""

    kernels: Kernels
    cls: Classification
    residual_add: np.ndarray
    activation: np.ndarray
    replayed: np.ndarray
    gpus: list[np.ndarray | None]  #: each GPU's kernels in start order (``gpu_rows``)
    launch: np.ndarray  #: per kernel, its launch (``Trace.launch_keys``)
    step: np.ndarray  #: per kernel, its training step (-1 for none)

    @classmethod
    def of(cls_, trace: Trace, cls: Classification | None, step: np.ndarray) -> _Columns:
        cls = cls if cls is not None else kernel_table().classify(trace)
        elementwise = cls.type == TYPES.index("ELEMENTWISE")
        residual_add = elementwise & short_matches(trace, cls.short, _BINARY_ADD)
        activation = elementwise & short_matches(trace, cls.short, ACTIVATION)
        k = trace.kernels
        return cls_(k, cls, residual_add, activation, trace.replayed(), gpu_rows(k.device, k.start), trace.launch_keys()[0], step)

    def settled(self, pass_of: np.ndarray, layer: np.ndarray, fixed: np.ndarray | None = None) -> np.ndarray:
        """``pass_of`` with the kernels between two passes' layers in the pass they belong to (``settle_edges``)."""
        k = self.kernels
        replay = np.where(self.replayed, self.launch, -1) if self.replayed.any() else None
        return settle_edges(pass_of, layer, self.cls.type, k.start, k.end, self.gpus, fixed, self.step, replay)

    def at(self, idx: np.ndarray) -> _Pass:
        """The kernels ``idx`` (in start order) as one pass."""
        k, c = self.kernels, self.cls
        return _Pass(k.name[idx], c.short[idx], c.type[idx], c.layer_start[idx], self.residual_add[idx], self.activation[idx],
                     k.start[idx], k.end[idx])


def detect_layers(
    trace: Trace, strategy: str = "auto", cls: Classification | None = None, merge: bool = True
) -> LayerResult:
    """Layers of every kernel by ``strategy`` (one of ``STRATEGIES``); ``merge=False`` keeps each
    layer's attention and FFN halves apart, whichever strategy finds the layers. ``auto`` takes
    the spans for the forward passes they cover and motif or boundary layers for the rest (a
    profile often has module spans around eager passes only, none in graph replays)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; expected one of {', '.join(STRATEGIES)}")
    host = trace.kernel_host()  # once: passes, steps and spans all place kernels by their launch
    step = kernel_steps(trace, host)
    columns = _Columns.of(trace, cls, step)
    kind = columns.cls.type
    pass_of = passes(trace, kind, host, step)
    spans = span_layers(trace, heavy_kernels(trace, columns.cls), host) if strategy in ("auto", "ground-truth") else None
    if strategy == "ground-truth":
        if spans is None:
            raise ValueError("the trace has no nn.Module or NVTX layer spans")
        share = float((spans.layer >= 0).mean())
        if share < 0.25:  # spans around a few layers do not decide
            raise ValueError(f"the nn.Module or NVTX layer spans hold {100 * share:.1f}% of the kernels; ground truth needs 25%")
        return _finish(trace, _with_spans(trace, spans, pass_of, None, None if merge else columns), spans, columns, pass_of)
    found = _by_kernels(columns, pass_of, strategy, merge)
    return _finish(trace, found if spans is None else _with_spans(trace, spans, pass_of, found, None if merge else columns), spans,
                   columns, pass_of)


def _finish(trace: Trace, r: LayerResult, spans: Spans | None, columns: _Columns, segments: np.ndarray) -> LayerResult:
    """The layers as reported: kernel-found layers kept only where they look like layers (no
    layer structure is an answer), the stacks, the steps, the evidence and the warnings.
    ``segments``: the passes as segmented before any layer was looked for (a replay is one)."""
    k, kind, step = trace.kernels, columns.cls.type, columns.step
    r.pass_of = join_edges(r.pass_of, r.layer, k.device, step, columns.replayed, k.start, k.end, k.name)
    by_spans = spans.layer if spans is not None and r.strategy.startswith("ground-truth") else None
    calls = spans.root >= 0 if spans is not None and by_spans is not None and spans.root is not None else None  # calls cut these
    r.pass_of = columns.settled(r.pass_of, r.layer, calls)
    n = int(r.pass_of.max()) + 1 if len(r.pass_of) else 0
    spanned = evidence.spanned_passes(r.pass_of, n, by_spans)
    dropped = evidence.drop_unlayered(r.layer, r.pass_of, n, kind, spanned)
    r.layers_per_pass = per_pass_counts(r.layer, r.pass_of)
    r.confidence = evidence.confidence(r.layer, r.pass_of, n, kind, k.name, k.start, k.end, spanned)
    odd, compared = evidence.odd_counts(r.layer, r.pass_of, r.stack, n, spanned)
    stray = evidence.stray_heavy(r.layer, segments, kind, k.start)
    r.evidence = {"module_spans": bool(spanned.any()), "period": r.period, "passes_without_layer_structure": dropped,
                  "passes_with_other_layer_counts": len(odd), "stray_attention_or_experts": stray}
    if stray:  # every decoder layer holds its attention and experts: a kind of layer was missed
        heavy = int(((kind == ATTENTION) | (kind == MOE)).sum())
        r.confidence = round(r.confidence * (1 - stray / max(heavy, 1)), 4)
        r.warnings.append(f"{stray} attention or expert kernels of forward passes that have layers are in none: the layers "
                          "miss a kind of layer (a hybrid stack's?); --strategy boundary cuts at every layer's norm")
    crowded, counted = evidence.crowded_layers(r.layer, r.pass_of, kind, n)
    r.evidence["layers_holding_several"] = crowded
    if crowded:  # a decoder layer runs its attention and experts once
        r.confidence = round(r.confidence * (1 - crowded / counted), 4)
        r.warnings.append(f"{crowded} of {counted} layers each hold several layers' attention or expert kernels (more than "
                          f"{evidence.CROWDED} times their pass's usual layer): layers the strategy did not cut (another "
                          "stack's?); --strategy auto or module spans (with_modules=True) tell them apart")
    if odd:  # one model runs the same layers in every forward pass: some of these are wrong
        r.confidence = round(r.confidence * (1 - len(odd) / compared), 4)
        shown = ", ".join(map(str, odd[:8])) + (f" and {len(odd) - 8} more" if len(odd) > 8 else "")
        r.warnings.append(f"{len(odd)} of {compared} forward passes hold another number of layers than the others "
                          f"(pass {shown}): the layer boundaries there are doubtful")
    # two repeats of a sequence place its boundary anywhere along it (a short pass beside long
    # ones is one the profile cut, so the longest pass decides)
    found = [c for c, by_spans in zip(r.layers_per_pass, spanned.tolist()) if c and not by_spans]
    if found and max(r.layers_per_pass) < SHALLOW:
        r.confidence = round(r.confidence / 2, 4)
        r.warnings.append(f"the kernel motif repeats at most {max(found)} times per forward pass: where one layer ends "
                          "and the next begins rests on little evidence")
    if not (r.layer >= 0).any():
        r.strategy, r.confidence, r.period = "none", 0.0, None
        r.warnings.append("no layer structure found: no kernel sequence repeats as transformer layers do "
                          "(GEMM, attention or MoE kernels in each repeat), so no layers are reported")
    elif r.confidence < evidence.CONFIDENT:
        r.warnings.append(f"the layers were found with low confidence ({r.confidence:.2f} < {evidence.CONFIDENT}): "
                          "check them with --strategy, --num-layers or module spans (with_modules=True)")
    r.stack, r.stacks = evidence.stacks(r.layer, r.pass_of, r.stack, spanned, spans)
    first = first_rows(r.pass_of, n) if n and int(r.pass_of.min()) >= 0 else np.full(n, -1)  # each pass's first kernel
    r.steps = step[first].tolist() if (first >= 0).all() else [-1] * n
    return mark_partial(r)


#: kernel-found layers in passes of fewer layers than this are reported as doubtful
SHALLOW = 3


def mark_partial(r: LayerResult) -> LayerResult:
    """Mark the passes with fewer layers than the complete ones (the most any pass has) as
    partial, and number a leading partial pass's layers from the end: the profile began in the
    middle of that forward pass, so its first layer is not layer 0."""
    counts = r.layers_per_pass
    full = max(counts, default=0)
    r.partial = [0 < n < full for n in counts]
    first = next((q for q, n in enumerate(counts) if n), None)
    if first is not None and r.partial[first]:
        mine = (r.pass_of == first) & (r.layer >= 0)
        r.layer[mine] += full - counts[first]
    return r


def _by_kernels(columns: _Columns, pass_of: np.ndarray, strategy: str, merge: bool) -> LayerResult:
    """Motif or boundary layers; ``auto`` takes the motif when it is confident, leaves no
    attention or expert kernel between its layers and its passes agree on their layer count,
    else the boundary's where the motif leaves more of them or only the motif's passes disagree,
    else the more confident of the two."""
    results, stray, odd = {}, {}, {}
    kind, start = columns.cls.type, columns.kernels.start
    for name in ("motif", "boundary") if strategy == "auto" else (strategy,):
        results[name] = r = _by_strategy(columns, pass_of, name, merge)
        # within the passes as segmented (a replay is one): the motif may cut one where it lost track
        stray[name] = evidence.stray_heavy(r.layer, pass_of, kind, start)
        n, counts = len(r.layers_per_pass), set(r.layers_per_pass) - {0}
        odd[name] = len(counts) > 1 and len(evidence.odd_counts(r.layer, r.pass_of, r.stack, n, np.zeros(n, bool))[0])
        if name == "motif" and strategy == "auto" and r.confidence >= 0.8 and not stray[name] and not odd[name]:
            break
    if len(results) == 1:
        return next(iter(results.values()))
    if odd["motif"] and not odd["boundary"] and not stray["boundary"] and results["boundary"].layers_per_pass.count(0) <= \
            results["motif"].layers_per_pass.count(0) and sum(results["boundary"].layers_per_pass):
        # the motif's passes disagree on their layer count (one model runs them all in each),
        # the layer-start norms' do not, and find layers in as many passes
        return results["boundary"]
    if stray["motif"] > stray["boundary"] and sum(results["boundary"].layers_per_pass) >= sum(results["motif"].layers_per_pass):
        # the motif left attention or experts between its layers: a layer kind it does not know
        # (a hybrid stack's), which the layer-start norms around every layer do (and find at
        # least as many layers: a result of fewer layers leaves less room for strays)
        return results["boundary"]
    # the motif where the measure reported (time the layers hold, layers that repeat) trusts it,
    # else the more trusted: a strategy that misses a stack (a backward pass, a vision tower)
    # holds less of the time
    k = columns.kernels
    trust = {}
    for name, r in results.items():
        n = int(r.pass_of.max()) + 1 if len(r.pass_of) else 0
        trust[name] = evidence.confidence(r.layer, r.pass_of, n, columns.cls.type, k.name, k.start, k.end, np.zeros(n, bool))
    return results["motif" if trust["motif"] >= evidence.CONFIDENT or trust["motif"] >= trust["boundary"] else "boundary"]


def _by_strategy(columns: _Columns, pass_of: np.ndarray, name: str, merge: bool) -> LayerResult:
    """Layers of every pass by the motif or the boundary strategy; motif runs number the passes."""
    k = columns.kernels
    layer, pass_s, scores, periods = np.full(len(k), -1, np.int64), np.zeros(len(k), np.int64), [], []
    stack = np.full(len(k), -1, np.int64)
    signatures: list[set[int]] = []  # each stack's kernel names, to know it again in another pass
    base = 0
    seen: dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray, int, float, np.ndarray] | None] = {}
    for idx in by_pass(pass_of, k.start):
        p = columns.at(idx)
        if name == "motif":
            eager = not columns.replayed[idx].any()
            got, run, period, score, local = _motif_of(p, eager, seen)
            if period:
                scores.append(score * len(idx))
                periods.append(period)
            stack[idx] = _same_stacks(local, p.token, signatures)
        else:
            got, run, whole = _boundary_runs(p, eager=not columns.replayed[idx].any())
            scores.append(_regularity(p.token, whole, run) * len(idx))  # kept halves do not change the choice
            got = whole if merge else got
        if columns.replayed[idx].all() and (got >= 0).any():
            # a replay is one forward pass: its tail (final norm, lm_head, and the rest of a last
            # layer the motif's phase cut) goes with the last layer; not a whole motif's length
            # with attention in it, which is a layer of another kind (a hybrid stack's last)
            tail = int(np.nonzero(got >= 0)[0][-1])
            rest = p.kind[tail + 1 :]
            if not (name == "motif" and period and len(rest) >= period and (rest == ATTENTION).any()):
                got[tail:] = got[tail]
                stack[idx[tail:]] = stack[idx[tail]]
        if name == "motif" and not merge:
            got = _split_each_run(got, run, columns, idx)
        layer[idx] = got
        pass_s[idx] = base + run
        base += int(run.max()) + 1 if len(run) else 1
    confidence = float(sum(scores) / max(len(k), 1)) * float((layer >= 0).mean() if len(k) else 0)
    usual_period = Counter(periods).most_common(1)[0][0] if periods else None
    if not columns.replayed.any():  # a host stall may have cut an eager pass's head or tail off (the choice counts passes;
        pass_s = columns.settled(pass_s, layer)  # graph steps are joined to the eager kernels around them later: join_edges)
    found = LayerResult(layer, pass_s, name, confidence, usual_period, per_pass_counts(layer, pass_s))
    found.stack = _one_model_stacks(np.where(layer >= 0, np.maximum(stack, 0), -1), layer, pass_s, columns.cls.type)
    return found


def _one_model_stacks(stack: np.ndarray, layer: np.ndarray, pass_of: np.ndarray, kind: np.ndarray) -> np.ndarray:
    """Motif stacks joined where they are one model's: two stacks that no pass runs together,
    with as many layers in each pass that runs them and about as many GEMMs in each layer (within
    half again), are the same layers run as other kernels (an eager prefill and the compiled
    decode steps of ``torch.compile``: aten kernels, then Inductor's fused Triton ones). A vision
    tower or an encoder runs in a pass beside the stack it feeds; a training step's backward
    pass runs twice the GEMMs of its forward pass."""
    inside = stack >= 0
    if not inside.any() or int(stack.max()) == 0:
        return stack
    held = np.flatnonzero(inside)
    ids, dense = unique_inverse(stack[held])
    n, width, stacks_n = int(pass_of.max()) + 1, int(layer.max()) + 1, len(ids)
    pairs, pair_of = unique_inverse((pass_of[held] * stacks_n + dense) * width + layer[held])  # (pass, stack, layer)
    counts = np.bincount(pairs // width, minlength=n * stacks_n).reshape(n, stacks_n)
    gemms = np.bincount(pair_of[kind[held] == LINEAR], minlength=len(pairs))
    layer_stack = (pairs // width) % stacks_n
    runs = counts > 0
    usual = [int(np.bincount(counts[runs[:, s], s]).argmax()) for s in range(stacks_n)]
    usual_gemms = [float(median(gemms[layer_stack == s])) for s in range(stacks_n)]
    merged = np.arange(stacks_n)
    for b in range(1, stacks_n):
        for a in range(b):
            if merged[a] != a or usual[a] != usual[b]:
                continue
            if (np.asarray(runs[:, merged == a].any(1)) & runs[:, b]).any():  # a pass runs both
                continue
            g = sorted((usual_gemms[a], usual_gemms[b]))
            if g[0] > 0 and g[1] <= 1.5 * g[0]:
                merged[b] = a
                break
    if (merged == np.arange(stacks_n)).all():  # no two stacks are one model's: each keeps its number
        return cast(np.ndarray, np.maximum(stack, -1))
    out = np.full(len(stack), -1, np.int64)
    out[held] = ids[merged[dense]]
    return out


def _same_stacks(local: np.ndarray, token: np.ndarray, signatures: list[set[int]]) -> np.ndarray:
    """The trace-wide stack of each kernel, from its pass's own stack numbers: a stack is the one
    seen before whose kernel names it mostly shares (a decode pass runs the language model's
    stack only, a prefill pass the vision tower's first), else a new one."""
    out = np.full(len(local), -1, np.int64)
    for s in unique(local[local >= 0]).tolist():
        names = set(unique(token[local == s]).tolist())
        match = [len(names & seen) / len(names | seen) for seen in signatures]
        best = int(np.argmax(match)) if match else -1
        if best < 0 or match[best] < 0.5:
            signatures.append(names)
            best = len(signatures) - 1
        out[local == s] = best
    return out


#: a stretch outside the found layers this long (kernels) may hold a stack of its own
OTHER_STACK = 12


def _motif_of(p: _Pass, eager: bool, seen: dict[tuple[int, int, int], Any]) -> tuple[np.ndarray, np.ndarray, int, float, np.ndarray]:
    """``motif_layers`` and ``_more_stacks`` of a pass, remembered in ``seen`` by a digest of its
    kernel sequence where its kernel times played no part: the same replay again costs a lookup.
    A sequence is kept from its second sighting on (decode replays whose attention kernels vary
    with the context would each hold a copy of their layers for nothing)."""
    sequence = b"".join(np.ascontiguousarray(a).tobytes() for a in (p.token, p.short, p.kind, p.start_flag, p.residual_add,
                                                                      p.activation)) + bytes([eager])
    key = (len(sequence), hash(sequence), zlib.crc32(sequence))  # two independent digests: 96 bits
    del sequence
    hit = seen.get(key)
    if hit is not None:
        got, run, period, score, local = hit
        return got.copy(), run.copy(), period, score, local.copy()
    before = _times_read[0]
    got, run, period, score = motif_layers(p, eager=eager)
    got, run, local = _more_stacks(p, got, run, eager)
    if _times_read[0] == before:
        seen[key] = (got.copy(), run.copy(), period, score, local.copy()) if key in seen else None
    return got, run, period, score, local


def _more_stacks(p: _Pass, got: np.ndarray, run: np.ndarray, eager: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Layers of the other stacks of a pass: a stretch of kernels outside the motif's layers that
    repeats a motif of its own (a vision tower before the language model's layers, an encoder
    before a decoder) is a stack too. Returns the layers, numbered in order within each run, the
    runs (a forward pass the other motif begins is a run too), and per kernel its stack (0: the
    first motif's)."""
    stack = np.where(got >= 0, 0, -1)
    if not (got >= 0).any():  # the one stretch outside layers is the pass itself: the motif found none there
        return got, run, stack
    opens = np.r_[False, run[1:] != run[:-1]]
    free = np.r_[False, got < 0, False].astype(np.int8)
    edges = np.diff(free)
    begins, ends = np.nonzero(edges == 1)[0], np.nonzero(edges == -1)[0]
    extra, again = 0, False  # other stacks found; stretches of the first motif's layers found again
    first_motif = _usual_layer(p, got, run) if len(begins) else None
    # (waits between forward passes: a prefill's result may come sooner than the decode steps')
    breaks = _idle_breaks(p, of_longest=PASS_WAIT) if eager and len(begins) else np.zeros(0, np.int64)
    for a, b in zip(begins.tolist(), ends.tolist()):
        if b - a < OTHER_STACK:
            continue
        inner, inner_run, period, _ = motif_layers(p.take(slice(a, b)), eager=eager)
        ids = unique(inner[inner >= 0])
        kinds = p.kind[a:b][inner >= 0]
        if len(ids) < 2 or not ((kinds == ATTENTION).sum() >= len(ids) or (kinds == MOE).sum() >= len(ids)):
            continue
        # after the host's wait between two forward passes, most kernels alike will do (a decode
        # pass's linear attention runs one recurrent kernel where the prefill ran six chunked ones):
        # a wait on either side where the stretch meets the first motif's layers (before its first
        # layer, or after its last: a prefill that opens the profile, decode passes after it)
        found_at = a + np.flatnonzero(inner >= 0)
        waited = bool(((breaks > a - 1) & (breaks <= found_at[0])).any()) if a > 0 else False
        waited |= b < len(got) and bool(((breaks > found_at[-1]) & (breaks <= b)).any())
        if first_motif is not None and _same_layers_again(p, first_motif, a, inner, inner_run,
                                                          SAME_LAYER_APART if waited else SAME_LAYER):
            # the first motif's layers again, with other kernel variants (a decode pass after a
            # prefill picks other GEMM tiles): a forward pass of its own, of the same stack; a
            # run boundary the first motif drew among them (at an idle wait) is dropped
            have = a + np.nonzero(inner >= 0)[0]
            opens[a : int(have[0]) + 1] = False  # one cut on each side, at the longest idle wait there
            opens[int(have[0]) + 1 : b + 1] = False
            if a:
                opens[_idle_cut(p.start, p.end, a - 1, int(have[0]))] = True
            if b < len(got):
                opens[_idle_cut(p.start, p.end, int(have[-1]), b)] = True  # b: the first motif's next layer
            opens[a + 1 : b] |= inner_run[1:] != inner_run[:-1]
            got[a:b] = np.where(inner >= 0, inner, -1)
            stack[a:b] = np.where(inner >= 0, 0, -1)
            again = True  # renumbered below, like another stack's
            continue
        extra += 1
        got[a:b] = np.where(inner >= 0, (1 << 20) * extra + inner, -1)
        stack[a:b] = np.where(inner >= 0, extra, -1)
        opens[a + 1 : b] |= inner_run[1:] != inner_run[:-1]
    if not extra and not again:
        return got, run, stack
    run = np.cumsum(opens)
    out = np.full(len(got), -1, np.int64)
    sel = np.nonzero(got >= 0)[0]
    if len(sel):  # number the layers of each run in the order they run
        key = (run[sel] * (int(stack.max()) + 1) + stack[sel]) * (1 << 20) + got[sel] % (1 << 20)
        ids, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        order = np.lexsort((first, run[sel][first]))  # each run's layers by their first kernel
        runs = run[sel][first][order]
        rank = np.empty(len(order), np.int64)
        rank[order] = np.arange(len(order)) - np.searchsorted(runs, runs)
        out[sel] = rank[inverse.reshape(-1)]
    return out, run, stack


#: two layers whose kernels (short names, as multisets) share this share are the same layer; where
#: the host waited between them as between forward passes, this one
SAME_LAYER, SAME_LAYER_APART = 0.8, 0.5
#: a wait between forward passes, where another stack's or the same stack's layers meet the first
#: motif's: an idle break at least this share of the pass's longest wait
PASS_WAIT = 0.25


def _layer_shapes(short: np.ndarray, layer: np.ndarray) -> Counter[tuple[int, ...]]:
    """How often each layer's kernels (short names, sorted) occur among the layers of ``layer``."""
    have = layer >= 0
    order = np.lexsort((short[have], layer[have]))
    ids, names = layer[have][order], short[have][order]
    cuts = np.nonzero(np.diff(ids))[0] + 1
    return Counter(tuple(x.tolist()) for x in np.split(names, cuts))


def _usual_layer(p: _Pass, got: np.ndarray, run: np.ndarray) -> tuple[int, tuple[int, ...]] | None:
    """The first motif's usual layer count per forward pass and its usual layer (short names, sorted)."""
    ours = got >= 0
    if not ours.any():
        return None
    width = int(got[ours].max()) + 1
    per_run = np.bincount(unique(run[ours] * width + got[ours]) // width)
    usual = Counter(per_run[per_run > 0].tolist()).most_common(1)[0][0]
    return usual, _layer_shapes(p.short, np.where(ours, got + run * width, -1)).most_common(1)[0][0]


def _same_layers_again(p: _Pass, first: tuple[int, tuple[int, ...]], a: int, inner: np.ndarray, inner_run: np.ndarray,
                       share: float = SAME_LAYER) -> bool:
    """Whether a stretch's layers (``inner`` in its runs ``inner_run``, from ``a``) are the first
    motif's layers again (``first``: ``_usual_layer``): as many as a forward pass of the first
    motif usually holds, and the usual layer of each shares ``share`` of its kernels by short name
    (a prefill and a decode pick other variants of a template or tile; a vision tower or an
    encoder runs other kernels, a cross-attention more)."""
    mine = inner >= 0
    usual, theirs = first
    if not mine.any() or len(unique(inner[mine])) != usual:
        return False
    layer = _layer_shapes(p.short[a : a + len(inner)], np.where(mine, inner + inner_run * (int(inner.max()) + 1), -1)).most_common(1)[0][0]
    shared = sum((Counter(layer) & Counter(theirs)).values())
    return shared >= share * max(len(layer), len(theirs))


def _boundary_runs(p: _Pass, eager: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Boundary half layers of one pass, its runs (an eager pass may hold several forward passes,
    cut at the idle gaps between them) and the merged layers."""
    if not p.start_flag.any():  # norms of several kernels pair the halves and open the passes
        by_norms = residual_norm_passes(p)
        if by_norms is not None:  # (a replay is one forward pass: its norms open it once)
            run, halves, whole = by_norms
            return halves, run, whole
    if not eager:
        return _boundary_of_runs(p, np.zeros(len(p.token), np.int64))
    breaks = _idle_breaks(p)
    first = found = _boundary_of_runs(p, _runs_at(breaks, len(p.token)))
    for _ in range(CUT_ROUNDS):
        _, run, whole = found
        if len(set(per_pass_counts(whole, run)) - {0}) <= 1 or not len(breaks):
            return found
        # the forward passes hold different numbers of layers: a run may hold two of them,
        # parted by a shorter wait than those between the others (as the motif's rounds do)
        shorter = _idle_breaks(p, below=_shortest_break(p, breaks))
        if len(shorter) <= len(breaks):
            break
        breaks = shorter
        found = _boundary_of_runs(p, _runs_at(breaks, len(p.token)))
    return first


def _runs_at(breaks: np.ndarray, n: int) -> np.ndarray:
    """Per position of a pass of ``n`` kernels, its run: a new one opens at each break."""
    run = np.zeros(n, np.int64)
    run[breaks] = 1
    return np.cumsum(run)


def _boundary_of_runs(p: _Pass, run: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Boundary half layers and merged layers of each run of ``p`` alone."""
    halves, whole = np.full(len(run), -1, np.int64), np.full(len(run), -1, np.int64)
    for r in unique(run).tolist():
        sel = np.nonzero(run == r)[0]
        piece = p.take(run == r)
        halves[sel] = boundary_layers(piece)
        whole[sel] = merge_half_layers(halves[sel], piece.kind)
    return halves, run, whole


def _split_each_run(layer: np.ndarray, run: np.ndarray, columns: _Columns, idx: np.ndarray) -> np.ndarray:
    """``split_half_layers`` on each forward pass of ``idx`` apart (layer numbers restart in each)."""
    out = layer.copy()
    for r in unique(run).tolist():
        sel = run == r
        out[sel] = split_half_layers(layer[sel], columns.at(idx[sel]))
    return out


def _with_spans(trace: Trace, spans: Spans, pass_of: np.ndarray, found: LayerResult | None, columns: _Columns | None) -> LayerResult:
    """Layers from the spans in every forward pass whose kernels they hold a quarter of or more
    (spans around a few layers do not decide), ``found``'s (motif or boundary) in the others, or
    none there without ``found``. Spans cut their passes again where the layer numbers restart.
    ``columns``: given when half layers are to be split."""
    k = trace.kernels
    pieces = by_pass(found.pass_of if found is not None else pass_of, k.start)
    covered = [found is None or (spans.layer[idx] >= 0).mean() >= 0.25 for idx in pieces]
    # ``found`` is read only for the passes the spans do not cover, which there are only when it
    # was given (with no passes at all, it is handed back as it came)
    fallback = cast(LayerResult, found)
    if not any(covered):
        return fallback
    layer, pass_s = np.full(len(k), -1, np.int64), np.zeros(len(k), np.int64)
    base, weight, used = 0, 0.0, set()
    for idx, spanned in _blocks(pieces, covered, pass_of):
        if spanned:
            run = _restarts(spans, idx, k.start[idx], k.end[idx])
            got = _ordinals(spans.layer[idx], run)
            if columns is not None:
                got = _split_each_run(got, run, columns, idx)
            weight += float((spans.layer[idx] >= 0).sum())
        else:
            got, run = fallback.layer[idx], np.zeros(len(idx), np.int64)
            weight += fallback.confidence * len(idx)
        if (got >= 0).any():
            used.add("ground-truth" if spanned else fallback.strategy)
        layer[idx], pass_s[idx] = got, base + run
        base += int(run.max()) + 1
    if found is None or found.strategy not in used:
        strategy, period = "ground-truth", None
    else:
        strategy, period = "+".join(s for s in ("ground-truth", found.strategy) if s in used), found.period
    out = LayerResult(layer, pass_s, strategy, weight / max(len(k), 1), period, per_pass_counts(layer, pass_s))
    out.stack = found.stack if found is not None else None
    return out


def _ordinals(layer: np.ndarray, run: np.ndarray) -> np.ndarray:
    """Layer numbers as the order the layers run in within each forward pass (a decode pass that
    runs only the language model's stack numbers its layers from 0, as the motif does)."""
    out = np.full(len(layer), -1, np.int64)
    have = layer >= 0
    if have.any():
        width = int(layer.max()) + 1
        key = run[have] * width + layer[have]
        ids, inverse = np.unique(key, return_inverse=True)
        first = np.searchsorted(ids, (ids // width) * width)  # each run's first id
        out[have] = (np.arange(len(ids)) - first)[inverse.reshape(-1)]
    return out


def _blocks(pieces: list[np.ndarray], covered: list[bool], pass_of: np.ndarray) -> list[tuple[np.ndarray, bool]]:
    """The pieces in order, consecutive covered pieces of one pass joined (motif may cut one
    forward pass the spans hold in two; the spans cut it where it really ends)."""
    out: list[tuple[list[np.ndarray], bool]] = []
    for idx, spanned in zip(pieces, covered):
        if out and spanned and out[-1][1] and pass_of[out[-1][0][-1][0]] == pass_of[idx[0]]:
            out[-1][0].append(idx)
        else:
            out.append(([idx], spanned))
    return [(np.concatenate(parts), spanned) for parts, spanned in out]


def _restarts(spans: Spans, idx: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per kernel of ``idx`` (start order), its forward pass among those ``idx`` holds, from 0: in
    launch order a new span whose layer number is not above the last one's begins the next pass;
    the kernels between two passes (sampling, the next inputs) split at the longest idle gap."""
    layer, span = spans.layer[idx], spans.span[idx]
    have = np.nonzero(layer >= 0)[0]
    if len(have) < 2:
        return np.zeros(len(idx), np.int64)
    order = have[np.argsort(spans.when[idx][have], kind="stable")]
    new = (span[order][1:] != span[order][:-1]) & (layer[order][1:] <= layer[order][:-1])
    forward = np.zeros(len(idx), np.int64)
    forward[order] = np.r_[0, np.cumsum(new)]
    # in start order (a kernel that starts late on another stream stays in its pass)
    reached = np.maximum.accumulate(forward[have])
    firsts = np.nonzero(np.diff(reached))[0] + 1
    root = spans.root[idx] if spans.root is not None else None
    cut = [0] + [_root_cut(root, start, end, int(have[j - 1]), int(have[j])) for j in firsts.tolist()]
    return np.searchsorted(np.array(cut), np.arange(len(idx)), side="right") - 1


def _root_cut(root: np.ndarray | None, start: np.ndarray, end: np.ndarray, last: int, first: int) -> int:
    """Where the next forward pass begins, between one whose last layer kernel is at ``last`` and
    one whose first is at ``first``: what the model's call around each (its outermost span,
    ``root``) launched is that pass's (the final norm and lm_head, the embedding), the rest
    (sampling, the next inputs) splits at the longest idle gap."""
    lo, hi, layer_first = last + 1, first, True
    if root is not None and root[last] != root[first]:
        if root[last] >= 0 and (root[lo:hi] == root[last]).any():  # the cut comes after the call's last kernel
            lo += int(np.flatnonzero(root[lo:hi] == root[last])[-1])
        if root[first] >= 0 and (root[lo:hi] == root[first]).any():  # and at the next call's first, or before
            hi, layer_first = lo + int(np.argmax(root[lo:hi] == root[first])), False
        if hi <= lo:
            return hi
    return _idle_cut(start, end, lo, hi, layer_first=layer_first)


def short_matches(trace: Trace, short: np.ndarray, rx: re.Pattern[str]) -> np.ndarray:
    """Per kernel: whether its short name matches ``rx`` (tested once per distinct name)."""
    ids, inverse = unique_inverse(short)
    hit = np.array([bool(rx.search(trace.strings[int(s)] or "")) for s in ids.tolist()], bool)
    return hit[inverse] if len(ids) else np.zeros(0, bool)


def _regularity(token: np.ndarray, layer: np.ndarray, run: np.ndarray | None = None) -> float:
    """Share of layers whose kernel sequence is the most common one (1.0: all alike); 0 for a
    single layer, which shows no repeat (a whole pass taken for one layer is no finding).
    ``run``: the forward pass of each kernel, where layer numbers restart."""
    key = layer if run is None else np.where(layer >= 0, run * (int(layer.max()) + 1) + layer, -1)
    ids = [i for i in unique(key).tolist() if i >= 0]
    if len(ids) < 2:
        return 0.0
    seqs = Counter(tuple(token[key == i].tolist()) for i in ids)
    return seqs.most_common(1)[0][1] / len(ids)


def by_pass(pass_of: np.ndarray, start: np.ndarray) -> list[np.ndarray]:
    """Each pass's kernel indices in start order (one sort for all passes)."""
    order = group_then_start(pass_of, start)
    sorted_passes = pass_of[order]
    cuts = np.flatnonzero(sorted_passes[1:] != sorted_passes[:-1]) + 1
    return np.split(order, cuts) if len(order) else []


def per_pass_counts(layer: np.ndarray, pass_of: np.ndarray) -> list[int]:
    """Distinct layers in each pass."""
    return cast("list[int]", evidence.layers_per_pass(layer, pass_of, int(pass_of.max()) + 1 if len(pass_of) else 0).tolist())
