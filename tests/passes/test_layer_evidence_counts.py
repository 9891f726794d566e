"""The evidence added with the real GPU captures: the stage an attention op's shapes say, passes
of one stack holding other layer counts, a motif repeating at most twice per pass, and idle
waits that are host stalls inside a forward pass rather than its end."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from layerc.backends.synth.kineto import generate
from layerc.grammar.traces import read_trace
from layerc.passes import trace_layers as tl
from layerc.passes.kernel_tables import kernel_table
from layerc.passes.layer_evidence import _group_medians, odd_counts
from layerc.passes.stage_shapes import DECODE, PREFILL, UNKNOWN, query_key_stage, stage_votes
from layerc.passes.trace_layers import detect_layers


@given(batch=st.integers(1, 64), heads=st.sampled_from((8, 32)), kv_heads=st.sampled_from((1, 8)),
       asked=st.integers(1, 4096), cached=st.integers(0, 8192), dim=st.sampled_from((64, 128)), bshd=st.booleans())
def test_query_and_key_shapes_say_the_stage(batch, heads, kv_heads, asked, cached, dim, bshd):
    """One query against more keys is decode, in either layout; queries that span their keys
    (a prompt, or a chunk of it over a cache) are a prefill."""
    keys = asked + cached

    def shape(h, s):
        return [batch, s, h, dim] if bshd else [batch, h, s, dim]

    got = query_key_stage(json.dumps([shape(heads, asked), shape(kv_heads, keys), shape(kv_heads, keys)]))
    assert got == (DECODE if asked == 1 and keys > 1 else PREFILL)


@pytest.mark.parametrize("dims", [
    "", "not json", "[]", "[[1, 2, 3, 4]]", "[[4, 32, 128], [2000, 8, 128]]",  # varlen: 3-d packed tokens say nothing
    "[[2, 32, 1, 128], [2, 8, 7]]", "[[2, 32, 1, 128], [2, 8, 0, 128]]", '[["a", 1, 1, 1], [1, 1, 2, 1]]',
    "[[5, 32, 128], [5, 32, 128], [900, 16, 8, 128]]",  # paged attention: (out, query, key_cache)
])
def test_shapes_that_are_not_a_query_and_keys_say_nothing(dims):
    assert query_key_stage(dims) == UNKNOWN


def test_a_kernels_name_outvotes_its_shapes(tmp_path):
    """Shapes vote where the name is silent: a kernel whose name says decode keeps it."""
    path = tmp_path / "hf.json.gz"
    generate(path, model="llama", style="hf_eager", graphs="none", layers=4, prefill=1, decode=1)
    trace = read_trace(path)
    cls = kernel_table().classify(trace)
    votes = stage_votes(trace, cls)
    attention = cls.type == tl.ATTENTION
    assert set(votes[attention].tolist()) == {0, 1} and (cls.stage[attention] < 0).all()
    cls.stage[attention] = 1  # as if the name said decode
    assert (stage_votes(trace, cls)[attention] == 1).all()


def _counts(per_pass: list[int], stacks: list[int] | None = None):
    """Columns of passes holding ``per_pass`` layers each (one kernel per layer), of one stack or
    of the ``stacks`` given per pass."""
    layer, pass_of, stack = [], [], []
    for q, n in enumerate(per_pass):
        layer += list(range(n))
        pass_of += [q] * n
        stack += [(stacks or [0] * len(per_pass))[q]] * n
    return np.array(layer), np.array(pass_of), np.array(stack), len(per_pass), np.zeros(len(per_pass), bool)


def test_passes_with_other_layer_counts_are_found():
    assert odd_counts(*_counts([8, 8, 8, 8])) == ([], 4)
    assert odd_counts(*_counts([5, 8, 8, 8, 3])) == ([], 5)  # the first and the last may be cut by the profile
    assert odd_counts(*_counts([8, 8, 5, 8])) == ([2], 4)
    assert odd_counts(*_counts([8, 11, 8, 8, 3])) == ([1], 5)
    assert odd_counts(*_counts([12, 8, 8, 8])) == ([0], 4)  # never longer than usual
    assert odd_counts(*_counts([8, 0, 8, 8])) == ([], 3)  # a pass without layers is another finding


def test_a_stack_is_compared_only_with_the_passes_that_run_it():
    """A vision tower runs in prefill passes only: decode passes without it are not odd."""
    layer, pass_of, stack, n, spanned = _counts([24, 28, 28, 24, 28, 28, 24, 28], [1, 0, 0, 1, 0, 0, 1, 0])
    assert odd_counts(layer, pass_of, stack, n, spanned) == ([], 8)
    spanned[2] = True
    layer[(pass_of == 2) & (layer >= 20)] = -1  # a spanned pass is not compared
    assert odd_counts(layer, pass_of, stack, n, spanned) == ([], 7)


def test_a_motif_that_repeats_twice_is_doubtful(tmp_path):
    path = tmp_path / "two.json.gz"
    generate(path, model="llama", layers=2, prefill=0, decode=3)
    r = detect_layers(read_trace(path))
    assert r.layers_per_pass == [2, 2, 2]
    assert any("repeats at most 2 times" in w for w in r.warnings) and r.confidence <= 0.5


def _pass_of(unit: list[int], copies: int, junk: list[int]) -> tl._Pass:
    """A pass of ``copies`` copies of a unit of short names, ``junk`` after them, one kernel per
    µs: its idle breaks are set by the test."""
    short = np.array(unit * copies + junk, np.int64)
    n = len(short)
    kind = np.full(n, tl.TYPES.index("ELEMENTWISE"))
    kind[np.isin(short, [7])] = tl.ATTENTION
    zeros = np.zeros(n, bool)
    start = np.arange(n, dtype=np.int64) * 1000
    return tl._Pass(short, short, kind, zeros, zeros, zeros, start, start + 500)


def test_a_wait_inside_a_layer_or_between_two_of_its_copies_is_a_stall():
    unit = [1, 2, 3, 7, 4, 5]
    p = _pass_of(unit, 3, [9, 9, 9, 9])
    breaks = np.array([2, 6, 12, 18, 20])  # inside copy 0, at copy 1's start, at copy 2's, after the last, in the junk
    copies = tl._occurrences(p.short, p.short[: len(unit)])
    assert tl._inside_layers(p, 0, len(unit), breaks, copies).tolist() == [True, True, True, False, False]
    two_layers = _pass_of(unit * 2, 2, [])  # a unit whose attention recurs may be a whole pass: no stall is known
    assert not tl._inside_layers(two_layers, 0, 12, np.array([3]), tl._occurrences(two_layers.short, two_layers.short[:12])).any()


def test_stacks_that_never_run_together_with_as_many_layers_are_one_model():
    """A compiled model's eager prefill and its Inductor decode steps: two motifs, one stack. A
    vision tower runs in the same pass as the language model: two stacks. So does a stack with
    other layer counts (a one-layer draft model between the target's steps)."""
    def columns(passes: list[list[tuple[int, int]]]):  # per pass: (stack, layers) pairs
        layer, pass_of, stack = [], [], []
        for q, pairs in enumerate(passes):
            for s, n in pairs:
                layer += list(range(n))
                pass_of += [q] * n
                stack += [s] * n
        return np.array(stack), np.array(layer), np.array(pass_of), np.full(len(layer), tl.LINEAR)

    alternating = columns([[(0, 8)], [(1, 8)], [(1, 8)], [(0, 8)], [(1, 8)]])
    assert set(tl._one_model_stacks(*alternating).tolist()) == {0}
    vlm = columns([[(1, 24), (0, 28)], [(0, 28)], [(0, 28)], [(1, 24), (0, 28)]])
    assert set(tl._one_model_stacks(*vlm).tolist()) == {0, 1}
    draft = columns([[(0, 32)], [(1, 1)], [(0, 32)], [(1, 1)]])
    assert set(tl._one_model_stacks(*draft).tolist()) == {0, 1}
    gap = columns([[(0, 2)], [(2, 2)]])  # stack ids need not be dense
    assert set(tl._one_model_stacks(*gap).tolist()) == {0}


def test_a_training_steps_backward_is_not_its_forward(tmp_path):
    """Forward and backward passes never run together and hold as many layers, but a backward
    layer runs about twice the GEMMs: two stacks (the backward's layers run in reverse)."""
    from layerc.backends.synth import kineto_workloads

    path = tmp_path / "train.json.gz"
    kineto_workloads.generate(path, workload="training", layers=4, steps=3, seed=0, modules="none")
    r = detect_layers(read_trace(path), "motif")
    assert len(r.stacks) == 2


@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 9)), min_size=1, max_size=80))
def test_each_groups_median_is_np_median(rows):
    """``layer_evidence._group_medians``: one sort for every pass's median layer."""
    rows.sort(key=lambda r: r[0])
    group = np.array([g for g, _ in rows], np.int64)
    values = np.array([v for _, v in rows], np.float64)
    got = _group_medians(group, values)
    for g in set(group.tolist()):
        assert got[g] == np.median(values[group == g])


@given(st.lists(st.tuples(st.integers(-1, 5), st.integers(-1, 40)), max_size=300), st.integers(0, 3))
def test_layers_per_pass_counts_the_distinct_pairs(rows, extra):
    """Per pass, its distinct layer numbers (kernels outside a layer, -1, count for none), on the
    table path and on the sparse one (a layer number far beyond the others)."""
    from layerc.passes.layer_evidence import layers_per_pass

    for sparse in (False, True):
        pairs = [(p, (layer * 100_000 if sparse and layer > 0 else layer)) for p, layer in rows]
        pass_of = np.array([p for p, _ in pairs], np.int64).reshape(-1)
        layer = np.array([x for _, x in pairs], np.int64).reshape(-1)
        n = (int(pass_of.max()) + 1 if len(pairs) else 0) + extra
        want = [len({x for p, x in pairs if p == q and x >= 0}) for q in range(n)]
        assert layers_per_pass(layer, pass_of, n).tolist() == want


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(-1, 6), st.sampled_from((tl.ATTENTION, tl.LINEAR, tl.NORM, 0))),
                max_size=200), st.booleans())
def test_repeat_share_is_the_share_of_layers_repeating_another(rows, shuffled):
    """Per pass, the share of its layers whose structural kernel types, in start order, another
    layer of the pass runs too (against the definition, in rows given in and out of start order)."""
    from layerc.passes.layer_evidence import STRUCTURAL, _repeat_share

    n = 4
    start = np.arange(len(rows), dtype=np.int64) * 10
    if shuffled:
        start = start[np.random.default_rng(len(rows)).permutation(len(rows))]
    pass_of = np.array([p for p, _, _ in rows], np.int64).reshape(-1)
    layer = np.array([x for _, x, _ in rows], np.int64).reshape(-1)
    kind = np.array([k for _, _, k in rows], np.int8).reshape(-1)
    seqs: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for i, (p, x, k) in enumerate(rows):
        if x >= 0 and STRUCTURAL[k]:
            seqs.setdefault((p, x), []).append((int(start[i]), k))
    want = []
    for q in range(n):
        mine = [tuple(k for _, k in sorted(v)) for (p, _), v in seqs.items() if p == q]
        want.append(sum(mine.count(s) >= 2 for s in mine) / max(len(mine), 1))
    got = _repeat_share(layer, pass_of, n, kind, np.zeros(len(rows), np.int32), start)
    assert np.allclose(got, want)
