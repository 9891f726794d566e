"""The class of the real H100 captures (``tests/data/gpu``), generated: a transformers model run
eagerly (``gen-trace --style hf_eager``): every torch op a kernel (an RMSNorm is eight), q/k/v and
gate/up apart, cuDNN attention, DynamicCache cats, grouped-GEMM experts, prefill and decode with
other GEMM tiles, host stalls inside layers, and no module spans. Layers, passes and stages are
checked against the generator's truth; a decode graph replay too."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layerc.backends.synth.kineto import HF_EAGER_GRAPHS, HF_EAGER_MODELS, generate
from layerc.grammar.traces import read_trace
from layerc.passes.kernel_tables import kernel_table
from layerc.passes.layer_facts import STAGES, kernel_stages, layer_table
from layerc.passes.trace_layers import detect_layers
from layerc.passes.trace_segments import passes
from tests.passes.test_trace_layers import _same_passes, agreement, truth_columns


def _check(path, truth, strict: bool) -> None:
    trace = read_trace(path)
    cls = kernel_table().classify(trace)
    layer, pass_, per_pass = truth_columns(trace, truth)
    r = detect_layers(trace, "auto", cls=cls)
    right = r.layers_per_pass == per_pass and _same_passes(r, pass_, layer) and agreement(r.layer, layer) == 1.0
    if strict:
        assert right, (r.layers_per_pass, per_pass, agreement(r.layer, layer))
        stage = kernel_stages(trace, cls, r, layer_table(trace, cls, r))
        rows = {(t["correlation"], t["start"], t["stream"]): t["stage"] for t in truth["kernels"]}
        k = trace.kernels
        want = np.array([STAGES.index(rows[key]) for key in zip(k.correlation.tolist(), k.start.tolist(), k.stream.tolist())])
        assert np.array_equal(stage[layer >= 0], want[layer >= 0])  # by the attention's shapes, or a replay's
    elif not right:  # a shallow model: no answer, or a doubtful one said so, never a confident wrong one
        doubts = ("no layer structure found", "another number of layers", "repeats at most", "low confidence", "in none")
        assert r.strategy == "none" or any(d in w for d in doubts for w in r.warnings), \
            (r.layers_per_pass, per_pass, r.confidence, r.warnings)


@pytest.mark.parametrize("graphs", HF_EAGER_GRAPHS)
@pytest.mark.parametrize("model", HF_EAGER_MODELS)
def test_hf_eager_layers_passes_and_stages(tmp_path, model, graphs):
    path = tmp_path / "hf.json.gz"
    truth = generate(path, model=model, style="hf_eager", graphs=graphs, layers=6, prefill=1, decode=3, seed=1)
    _check(path, truth, strict=True)


@settings(max_examples=25, deadline=None)
@given(model=st.sampled_from(HF_EAGER_MODELS), graphs=st.sampled_from(HF_EAGER_GRAPHS), layers=st.integers(2, 14),
       prefill=st.integers(0, 2), decode=st.integers(1, 4), requests=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_any_hf_eager_run(tmp_path_factory, model, graphs, layers, prefill, decode, requests, seed):
    """Any model, graph mode and depth, requests one after another (a prefill between decode
    steps), host stalls anywhere in a layer (its first kernel too), longer than the waits between
    forward passes or not. Exact from three layers; a two-layer model may come out doubtful."""
    path = tmp_path_factory.mktemp("hf") / "hf.json.gz"
    truth = generate(path, model=model, style="hf_eager", graphs=graphs, layers=layers, prefill=prefill, decode=decode,
                     requests=requests, seed=seed)
    _check(path, truth, strict=layers >= 3)  # two layers: right, or doubtful and said so


def test_hf_eager_asks_for_what_it_has(tmp_path):
    for kwargs in ({"model": "deepseek_v3"}, {"model": "llama", "vendor": "rocm"}, {"model": "llama", "tp": 2},
                   {"model": "llama", "graphs": "piecewise"}, {"model": "llama", "style": "bogus"}):
        with pytest.raises(ValueError):
            generate(tmp_path / "x.json.gz", **{"style": "hf_eager", **kwargs})


@settings(max_examples=12, deadline=None)
@given(model=st.sampled_from(HF_EAGER_MODELS), graphs=st.sampled_from(HF_EAGER_GRAPHS), layers=st.integers(2, 12),
       prefill=st.integers(0, 2), decode=st.integers(1, 3), requests=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_any_hf_eager_run_by_its_norms(tmp_path_factory, model, graphs, layers, prefill, decode, requests, seed):
    """``--strategy boundary`` on an eager model whose RMSNorm runs as eight kernels (no layer-start
    norm kernel to cut at): the norms that follow the residual adds pair up into layers, and the
    norm that follows a pass's inputs (not an add) opens the pass, whatever the host stalls. Exact
    from two layers, every kernel's pass included."""
    path = tmp_path_factory.mktemp("hf") / "hf.json.gz"
    truth = generate(path, model=model, style="hf_eager", graphs=graphs, layers=layers, prefill=prefill, decode=decode,
                     requests=requests, seed=seed)
    trace = read_trace(path)
    layer, pass_, per_pass = truth_columns(trace, truth)
    r = detect_layers(trace, "boundary", cls=kernel_table().classify(trace))
    assert r.layers_per_pass == per_pass and _same_passes(r, pass_, layer) and agreement(r.layer, layer) == 1.0


@settings(max_examples=15, deadline=None)
@given(model=st.sampled_from(HF_EAGER_MODELS), layers=st.integers(1, 8), decode=st.integers(2, 4),
       requests=st.integers(2, 3), seed=st.integers(0, 2**16))
def test_an_eager_prefill_between_replays_is_no_piece_gap(tmp_path_factory, model, layers, decode, requests, seed):
    """A request's eager prefill between two decode replays runs attention and no norm kernel (its
    norms are decomposed), with about as many kernels as a replay, fewer at times: it is a forward
    pass of its own, not the attention between two pieces of a piecewise pass. No pass that the
    segments make (before any layer is looked for) holds the replays of two steps."""
    path = tmp_path_factory.mktemp("hf") / "hf.json.gz"
    truth = generate(path, model=model, style="hf_eager", graphs="full", layers=layers, prefill=1, decode=decode,
                     requests=requests, seed=seed)
    trace = read_trace(path)
    _, pass_, _ = truth_columns(trace, truth)
    segment_pass = passes(trace, kernel_table().classify(trace).type)
    replayed = trace.replayed()
    steps = {(int(a), int(b)) for a, b in zip(segment_pass[replayed], pass_[replayed])}
    assert len({a for a, _ in steps}) == len(steps), sorted(steps)
