"""What a layer result rests on, and how far to trust it: whether a pass's layers look like
layers at all (else no layer structure is the answer), a confidence, and the stacks.

Each is computed over all kernels at once (bincounts and sorted groups): a profile has a million
kernels in thousands of passes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, cast

import numpy as np

from layerc.ir.trace import distinct, group_then_start, table_fits, unique, unique_inverse
from layerc.passes.kernel_tables import TYPES

if TYPE_CHECKING:
    from layerc.passes.module_tree import Spans

ATTENTION, MOE, LINEAR, NORM, COMMUNICATION = (TYPES.index(t) for t in ("ATTENTION", "MOE", "LINEAR", "NORM", "COMMUNICATION"))
#: below this confidence a result is reported with a warning: a good part of the GPU time lies
#: outside the layers, or the layers differ from each other more than a model's do
CONFIDENT = 0.5
#: layers that hold this share of their passes' GPU time leave nothing unexplained
HELD = 0.8
#: types whose kernels make a layer's sequence (fills, copies and unknown kernels come and go)
STRUCTURAL = np.zeros(len(TYPES), bool)
STRUCTURAL[[ATTENTION, MOE, LINEAR, NORM, COMMUNICATION]] = True


def spanned_passes(pass_of: np.ndarray, n: int, span_layer: np.ndarray | None) -> np.ndarray:
    """Per pass: whether module spans decided its layers (they hold a quarter of its kernels)."""
    if span_layer is None:
        return np.zeros(n, bool)
    held = np.bincount(pass_of, weights=(span_layer >= 0).astype(float), minlength=n)
    return held >= 0.25 * np.bincount(pass_of, minlength=n)


def drop_unlayered(layer: np.ndarray, pass_of: np.ndarray, n: int, kind: np.ndarray, spanned: np.ndarray) -> int:
    """Clear (in place) the kernel-found layers of passes without layer structure: fewer than two
    layers, or layers that hold, per layer, less than half an attention or MoE kernel and fewer
    than two GEMMs and half a norm (an HPC time step, a data-processing loop, an MLP). Returns
    how many passes lost their layers."""
    inside = layer >= 0
    if not inside.any():
        return 0
    per = layers_per_pass(layer, pass_of, n).astype(float)
    types = len(TYPES)
    held = np.flatnonzero(inside & (kind >= 0) & (kind < types))
    by_type = np.bincount(pass_of[held] * types + kind[held], minlength=n * types).reshape(n, types)  # kernels in layers, per pass and type
    count: Callable[[int], np.ndarray] = lambda t: by_type[:, t]  # noqa: E731
    like = (count(ATTENTION) >= per / 2) | (count(MOE) >= per / 2) | ((count(LINEAR) >= 2 * per) & (count(NORM) >= per / 2))
    drop = (per > 0) & ((per < 2) | ~like) & ~spanned
    layer[inside & drop[pass_of]] = -1
    return int(drop.sum())


def confidence(layer: np.ndarray, pass_of: np.ndarray, n: int, kind: np.ndarray, name: np.ndarray,
               start: np.ndarray, end: np.ndarray, spanned: np.ndarray) -> float:
    """How far to trust the layers, 0..1: over the passes with layers, weighted by their GPU
    time, the share of the time the layers hold (``HELD`` or more counts as all) times, for
    kernel-found layers, the share of layers whose structural kernels repeat those of another
    layer of the pass (module spans need no repeat)."""
    inside = layer >= 0
    if not inside.any():
        return 0.0
    dur = (end - start).astype(float)
    np.maximum(dur, 0.0, out=dur)
    time = np.bincount(pass_of, weights=dur, minlength=n)
    dur *= inside  # the time in layers (a sum of the same terms and zeros: the same sums)
    held = np.minimum(1.0, np.bincount(pass_of, weights=dur, minlength=n) / np.maximum(time, 1.0) / HELD)
    repeats = _repeat_share(layer, pass_of, n, kind, name, start)
    score = np.where(spanned, held, held * repeats)
    has = layers_per_pass(layer, pass_of, n) > 0
    total = float(time[has].sum())
    return round(float((time * score)[has].sum()) / total, 4) if total else 0.0


def _repeat_share(layer: np.ndarray, pass_of: np.ndarray, n: int, kind: np.ndarray, name: np.ndarray,
                  start: np.ndarray) -> np.ndarray:
    """Per pass: the share of its layers whose sequence of structural kernel types another layer
    of the pass has too (each sequence hashed: a polynomial over the types, in start order).
    Types, not names: the first layer's norm is another template (no residual yet), and a
    shallow model's layers would otherwise repeat nothing."""
    sel = np.flatnonzero((layer >= 0) & STRUCTURAL[kind])
    out = np.zeros(n)
    if not len(sel):
        return out
    width = int(layer.max()) + 1
    group = pass_of[sel] * width + layer[sel]
    order = group_then_start(group, start[sel])
    sel, group = sel[order], group[order]  # (the keys gathered once, from the selection's)
    opens = np.empty(len(sel), bool)
    opens[0] = True
    np.not_equal(group[1:], group[:-1], out=opens[1:])
    heads = np.flatnonzero(opens)
    lengths = np.diff(np.r_[heads, len(sel)])
    j = np.arange(len(sel), dtype=np.int32 if len(sel) < 1 << 31 else np.int64)  # (narrow: a column of every kernel)
    np.subtract(j, np.repeat(heads.astype(j.dtype), lengths), out=j)  # position within the layer
    powers = np.cumprod(np.r_[np.uint64(1), np.full(int(lengths.max()) - 1, np.uint64(1_000_003), np.uint64)], dtype=np.uint64)
    with np.errstate(over="ignore"):
        terms = (kind[sel].astype(np.uint64) + np.uint64(1)) * powers[j]
        sig = np.add.reduceat(terms, heads) ^ (lengths.astype(np.uint64) << np.uint64(48))
    q = group[heads] // width  # each layer's pass
    # layers of the same pass and signature: one sort of the (pass, signature) pairs, then runs
    order = np.lexsort((sig, q))
    q_sorted, sig_sorted = q[order], sig[order]
    same = np.zeros(len(q), bool)
    same[1:] = (q_sorted[1:] == q_sorted[:-1]) & (sig_sorted[1:] == sig_sorted[:-1])
    run = np.cumsum(~same) - 1
    repeated = np.empty(len(q), bool)
    repeated[order] = np.bincount(run)[run] >= 2
    layers = np.bincount(q, minlength=n)
    return np.bincount(q, weights=repeated.astype(float), minlength=n) / np.maximum(layers, 1)


def odd_counts(layer: np.ndarray, pass_of: np.ndarray, stack: np.ndarray | None, n: int, spanned: np.ndarray) -> tuple[list[int], int]:
    """The kernel-found passes whose layers of a stack are not as many as the stack's passes
    usually hold, and how many passes were compared. One model runs all of a stack's layers in
    every forward pass that runs the stack (a vision tower runs in prefill passes only), so a
    pass holding more than usual is wrong, and so is one holding fewer but the first and the
    last (the profile may cut those). Passes decided by module spans are not compared."""
    inside = (layer >= 0) & ~spanned[pass_of] if n else layer >= 0
    if not inside.any():
        return [], 0
    st = np.maximum(stack, 0) if stack is not None else np.zeros(len(layer), np.int64)
    width, stacks_n = int(layer.max()) + 1, int(st.max()) + 1
    pairs = distinct((pass_of[inside] * stacks_n + st[inside]) * width + layer[inside])
    counts = np.bincount(pairs // width, minlength=n * stacks_n).reshape(n, stacks_n)
    odd: set[int] = set()
    compared: set[int] = set()
    for s in range(stacks_n):
        has = np.nonzero(counts[:, s])[0]
        if len(has) < 3:
            continue
        usual = int(np.bincount(counts[has, s]).argmax())
        inner = has[1:-1]
        compared.update(has.tolist())
        odd.update(inner[counts[inner, s] != usual].tolist())
        odd.update(has[counts[has, s] > usual].tolist())  # a profile cuts a pass short, never longer
    return sorted(odd), len(compared)


def stray_heavy(layer: np.ndarray, pass_of: np.ndarray, kind: np.ndarray, start: np.ndarray) -> int:
    """Attention and expert kernels in no layer of a pass that has layers: every layer of a decoder
    holds its attention (or linear attention) and its experts, and what a forward pass runs
    around its layers (inputs, embedding, final norm, lm_head, sampling) holds neither, so such a
    kernel is a layer the result missed: another kind of layer in a hybrid stack, between the
    layers found or at either end (a hybrid stack's one full-attention layer after its linear
    ones; a dense first layer before the MoE ones)."""
    inside = layer >= 0
    heavy = ((kind == ATTENTION) | (kind == MOE)) & ~inside
    if not inside.any() or not heavy.any():
        return 0
    n = int(pass_of.max()) + 1
    layered = np.zeros(n, bool)
    layered[pass_of[inside]] = True
    return int(layered[pass_of[heavy]].sum())


#: a layer holding more than this many times the attention and expert kernels of its pass's
#: usual layer (and at least CROWDED_MORE more) holds several layers
CROWDED, CROWDED_MORE = 3, 4


def crowded_layers(layer: np.ndarray, pass_of: np.ndarray, kind: np.ndarray, n: int) -> tuple[int, int]:
    """How many layers hold several layers' attention and experts, and how many layers there are.
    A decoder layer runs its attention and its experts once: a layer found around many times as
    many as its pass's median layer holds layers the strategy did not cut (a vision tower's,
    ahead of the language model's first layer start)."""
    inside = layer >= 0
    if not inside.any():
        return 0, 0
    width = int(layer.max()) + 1
    pairs, pair_of = unique_inverse(pass_of[inside] * width + layer[inside])
    heavy = np.bincount(pair_of[((kind == ATTENTION) | (kind == MOE))[inside]], minlength=len(pairs))  # per layer
    q = pairs // width  # each layer's pass, in order
    usual = _group_medians(q, heavy)[q]
    return int(((heavy > CROWDED * usual) & (heavy >= usual + CROWDED_MORE)).sum()), len(pairs)


def _group_medians(group: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per group id (``group`` in order), the median of its ``values``: one sort for all groups."""
    order = np.lexsort((values, group))
    v = values[order]
    count = np.bincount(group)
    first = np.cumsum(count) - count
    mid = first + count // 2
    low = np.where(count % 2, mid, mid - 1)
    out = np.zeros(len(count))
    has = count > 0
    out[has] = (v[low[has]] + v[mid[has]]) / 2
    return out


def layers_per_pass(layer: np.ndarray, pass_of: np.ndarray, n: int) -> np.ndarray:
    """Distinct layers in each of ``n`` passes (``pass_of`` below ``n``): a table of the (pass,
    layer) pairs present, marked in one scatter (no selection of the kernels in layers first)."""
    width = int(layer.max()) + 1 if len(layer) else 0
    if width <= 0:
        return np.zeros(n, np.int64)
    if not table_fits(n * width, len(layer)):  # sparse pairs (layer numbers far apart): no table sized by them
        inside = layer >= 0
        pairs = distinct(pass_of[inside] * width + layer[inside])
        return np.bincount(pairs // width, minlength=n)
    key = pass_of * width + layer
    key[(layer < 0) | (pass_of < 0) | (pass_of >= n)] = n * width  # (one slot past the table's: outside any layer)
    present = np.zeros(n * width + 1, bool)
    present[key] = True
    return cast(np.ndarray, present[:-1].reshape(n, width).sum(1))


def stacks(layer: np.ndarray, pass_of: np.ndarray, motif: np.ndarray | None, spanned: np.ndarray,
           spans: Spans | None) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """Per kernel its stack, and the stacks: the module spans' in the passes they decided (class,
    parent, layers, offset), the kernel motifs' (class unknown) in the others."""
    n = len(spanned)
    stack = np.full(len(layer), -1, np.int64)
    out: list[dict[str, Any]] = []
    by_spans = (spanned[pass_of] if n else np.zeros(len(layer), bool)) & (layer >= 0)
    if spans is not None and by_spans.any():
        stack[by_spans] = spans.stack[by_spans]
        out = [{"class": s.cls, "parent": s.parent, "layers": s.count, "offset": s.offset} for s in spans.stacks]
    motif = motif if motif is not None else np.zeros(len(layer), np.int64)
    found = ~by_spans & (layer >= 0)
    for m in unique(motif[found]).tolist():
        sel = found & (motif == m)
        stack[sel] = len(out)
        out.append({"class": None, "parent": None, "layers": int(layers_per_pass(np.where(sel, layer, -1), pass_of, n).max()),
                    "offset": None})
    return stack, out
