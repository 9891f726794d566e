"""``settle_edges``: the kernels between two forward passes' layers go to the pass whose tail
(final norm, lm_head) or head (inputs, embedding) the profile's edges show them to be, however
the host stalled between them. Streams of passes are generated: each pass runs a head, its
layers, a tail and sampling; the GPU idles between passes, and the host stalls, longer, at a
random kernel of a tail or a head."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from layerc.passes.kernel_tables import TYPES
from layerc.passes.pass_edges import gpu_rows, settle_edges

KINDS = [TYPES.index(t) for t in ("ELEMENTWISE", "MEMORY", "LINEAR", "NORM")]
SEQ = st.lists(st.sampled_from(KINDS), min_size=1, max_size=8)


def stream(head, tail, sample, layers, passes, stalls, wait=50_000, stall=400_000, tails=None):
    """Kernels of ``passes`` forward passes in start order: kind, layer (-1 outside), the pass
    each runs in (``truth``: sampling is the earlier pass's), start and end (1 µs each, 1 µs
    apart; ``wait`` before each pass's head; ``stall`` before the kernels ``stalls`` names, as
    (pass, part, index) with part "head" or "tail"). ``tails``: pass -> its own tail."""
    kind, layer, truth, part = [], [], [], []
    for p in range(passes):
        for name, seq in (("head", head), ("layers", layers), ("tail", (tails or {}).get(p, tail)), ("sample", sample)):
            kind += seq
            layer += [i if name == "layers" else -1 for i in range(len(seq))]
            truth += [p] * len(seq)
            part += [(p, name, i) for i in range(len(seq))]
    start, t = [], 0
    for i, where in enumerate(part):
        t += 1_000 + (wait if where[1:] == ("head", 0) and where[0] else 0) + (stall if where in stalls else 0)
        start.append(t)
        t += 1_000
    start = np.array(start, np.int64)
    return np.array(kind), np.array(layer), np.array(truth), start, start + 1_000, part


def settle(pass_of, layer, kind, device, start, end):
    return settle_edges(pass_of, layer, kind, start, end, gpu_rows(device, start))


def idle_cut_passes(layer, start, end):
    """Passes cut as the layer search does: between two passes' layers, after the longest idle gap."""
    lay = np.flatnonzero(layer >= 0)
    restart = np.flatnonzero(np.diff(layer[lay]) < 0) + 1
    out = np.zeros(len(layer), np.int64)
    for j in restart.tolist():
        a, b = int(lay[j - 1]) + 1, int(lay[j])
        waits = start[a + 1 : b] - end[a : b - 1]
        out[a + 1 + int(np.argmax(waits)) if len(waits) else b :] += 1
    return out


@settings(max_examples=150, deadline=None)
@given(SEQ, SEQ, st.lists(st.sampled_from(KINDS), max_size=2), st.integers(2, 6), st.data())
def test_tail_and_head_stay_with_their_pass_whatever_the_stalls(head, tail, sample, passes, data):
    layers = [TYPES.index("NORM"), TYPES.index("LINEAR"), TYPES.index("ATTENTION"), TYPES.index("LINEAR")] * 3
    stalls = set()  # between passes p - 1 and p: in the one's tail, the other's head, or both
    for p in range(1, passes):
        for part in data.draw(st.sets(st.sampled_from(["head", "tail"]))):
            seq = head if part == "head" else tail
            stalls.add((p if part == "head" else p - 1, part, data.draw(st.integers(0, len(seq) - 1))))
    kind, layer, truth, start, end, _ = stream(head, tail, sample, layers, passes, stalls)
    guess = idle_cut_passes(layer, start, end)
    settled = settle(guess, layer, kind, np.zeros(len(kind), np.int32), start, end)
    assert np.array_equal(settled, truth)


def test_a_stall_before_the_lm_head_no_longer_moves_it():
    """The case of the compiled piecewise capture: the host stalls before the prefill's lm_head
    longer than it waits between passes."""
    head, tail, sample = KINDS[:1] * 3, [TYPES.index("NORM"), TYPES.index("LINEAR")], [KINDS[0]]
    layers = [TYPES.index("NORM"), TYPES.index("LINEAR"), TYPES.index("ATTENTION"), TYPES.index("LINEAR")] * 2
    kind, layer, truth, start, end, part = stream(head, tail, sample, layers, 3, {(0, "tail", 1)})
    guess = idle_cut_passes(layer, start, end)
    lm_head = part.index((0, "tail", 1))
    assert guess[lm_head] == 1  # the longest idle gap put it in the next pass
    settled = settle(guess, layer, kind, np.zeros(len(kind), np.int32), start, end)
    assert settled[lm_head] == 0 and np.array_equal(settled, truth)


def test_a_profile_that_begins_inside_a_pass_tells_no_head():
    """Before the first layer lie a whole tail, sampling and head (the profile began in an
    earlier pass), and the profile ends with a layer: no edge tells a head or a tail, so the
    one pass whose tail runs a kernel more (a prefill's) keeps its tail."""
    head, tail, sample = [KINDS[1], KINDS[0]], [TYPES.index("NORM"), TYPES.index("LINEAR")], [KINDS[0]]
    layers = [TYPES.index("NORM"), TYPES.index("LINEAR"), TYPES.index("ATTENTION"), TYPES.index("LINEAR")] * 2
    kind, layer, truth, start, end, part = stream(head, tail, sample, layers, 4, set(), tails={1: [KINDS[1], *tail]})
    begin, stop = part.index((0, "tail", 0)), part.index((3, "layers", len(layers) - 1)) + 1
    kind, layer, truth, start, end = (x[begin:stop] for x in (kind, layer, truth, start, end))
    guess = idle_cut_passes(layer, start, end)
    assert np.array_equal(guess, np.maximum(truth - 1, 0))  # (the lead: the first pass found)
    settled = settle(guess, layer, kind, np.zeros(len(kind), np.int32), start, end)
    assert np.array_equal(settled, guess)


def test_each_gpu_is_settled_on_its_own():
    head, tail, sample = [KINDS[1]] * 2, [TYPES.index("NORM"), TYPES.index("LINEAR")], [KINDS[0]]
    layers = [TYPES.index("NORM"), TYPES.index("LINEAR"), TYPES.index("ATTENTION"), TYPES.index("LINEAR")] * 2
    kind, layer, truth, start, end, _ = stream(head, tail, sample, layers, 3, {(0, "tail", 1), (1, "head", 1)})
    guess = idle_cut_passes(layer, start, end)
    two = lambda x, shift=0: np.r_[x, x + shift]  # noqa: E731
    order = np.argsort(two(start, 500), kind="stable")  # the second GPU runs 0.5 µs later, interleaved
    device = np.r_[np.zeros(len(kind), np.int32), np.ones(len(kind), np.int32)][order]
    settled = settle(two(guess, 3)[order], two(layer)[order], two(kind)[order], device, two(start, 500)[order],
                     two(end, 500)[order])
    assert np.array_equal(settled, two(truth, 3)[order])
