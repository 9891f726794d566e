"""Pass splitting's helpers against their definitions."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from layerc.backends.synth import nsys as gen_nsys
from layerc.grammar.traces import read_trace
from layerc.passes.trace_layers import detect_layers
from layerc.passes.trace_segments import _fill_threads, _waits

KERNELS = st.lists(st.tuples(st.integers(-1, 3), st.integers(0, 3), st.integers(0, 20)))  # (thread, group, start)


@given(KERNELS, st.booleans())
def test_an_unknown_thread_is_its_groups_nearest_known_one_before_else_after(rows, in_start_order):
    if in_start_order:  # the trace IR's order (a faster path), or any
        rows = sorted(rows, key=lambda r: r[2])
    tid, group, start = (np.array(c, np.int64).reshape(-1) for c in zip(*rows)) if rows else (np.empty(0, np.int64),) * 3
    got = _fill_threads(tid, group, start).tolist()
    order = sorted(range(len(rows)), key=lambda i: (rows[i][1], rows[i][2], i))  # each group in start order
    for place, i in enumerate(order):
        t, g, _ = rows[i]
        if t >= 0:
            assert got[i] == t
            continue
        same = [j for j in order if rows[j][1] == g and rows[j][0] >= 0]
        before = [j for j in same if order.index(j) < place]
        after = [j for j in same if order.index(j) > place]
        assert got[i] == (rows[before[-1]][0] if before else rows[after[0]][0] if after else -1)


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 80)), min_size=1, max_size=60), st.data())
def test_waits_of_spans_are_the_whole_columns(kernels, data):
    """``_waits`` reads each span's waits from the latest end before it, never a whole column:
    the same waits as the GPU's idle time before each kernel over the whole stretch."""
    start = np.cumsum([s for s, _ in kernels]).astype(np.int64)
    end = start + np.array([d for _, d in kernels], np.int64)
    whole = start - np.r_[start[0], np.maximum.accumulate(end)[:-1]]
    n = len(start)
    spans = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(1, n)).map(lambda t: (min(t), max(t[1], min(t) + 1))),
                               max_size=6))
    for (lo, hi), got in zip(spans, _waits(start, end, spans)):
        assert got.tolist() == whole[lo:hi].tolist()


@settings(max_examples=12, deadline=None)
@given(devices=st.integers(2, 4), model=st.sampled_from(["llama", "deepseek_v3"]), layers=st.integers(3, 8),
       replays=st.integers(1, 4), eager_steps=st.integers(0, 2), seed=st.integers(0, 2**16))
def test_each_gpu_of_an_nsys_export_has_its_own_passes(tmp_path_factory, devices, model, layers, replays, eager_steps, seed):
    """One process per GPU, each replaying its own graphs with the same correlation ids as the
    others: a GPU's eager prefill is not cut where another GPU's replay began, and no replay is
    joined to another process's by its correlation id. Every pass has the model's layers."""
    path = tmp_path_factory.mktemp("nsys") / "n.sqlite"
    gen_nsys.generate(path, model=model, layers=layers, replays=replays, eager_steps=eager_steps, devices=devices, seed=seed)
    trace = read_trace(path)
    r = detect_layers(trace, "auto")
    assert r.layers_per_pass == [layers] * (devices * (replays + eager_steps)), r.warnings
    assert len(trace.replays()) == devices * replays
    assert all(len(np.unique(trace.kernels.device[r.pass_of == p])) == 1 for p in range(len(r.layers_per_pass)))
