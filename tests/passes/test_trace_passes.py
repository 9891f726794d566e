"""The trace passes as passes: built from pipeline text, verified, run one by one without the CLI."""

from __future__ import annotations

import numpy as np
import pytest

from layerc.grammar.traces import read_trace
from layerc.ir.diagnostics import LayercError, ParseError, VerifyError
from layerc.passes.base import Context
from layerc.passes.pipeline import PassManager, build_pipeline, run_passes
from layerc.passes.registry import get_all_passes
from layerc.passes.trace_passes import TRACE_PASSES, ClassifyKernels, DetectLayers, MergeHalfLayers, TraceModule, TypeLayers
from layerc.backends.synth.kineto import generate


@pytest.fixture(scope="module")
def grok(tmp_path_factory):
    path = tmp_path_factory.mktemp("grok") / "grok2.json.gz"
    generate(path, model="grok2", vendor="rocm", tp=8, layers=4, seed=1)
    return read_trace(path)


def run(text: str, trace) -> TraceModule:
    module = TraceModule(trace)
    PassManager(build_pipeline(text, TRACE_PASSES)).run(Context(), module)
    return module


def test_pipeline_types_and_stages(grok):
    m = run("classify-kernels,detect-layers{strategy=motif},type-layers", grok)
    assert m.layers.layers_per_pass == [4, 4, 4]
    assert set(m.table.type) == {"MHA_MOE"}
    assert sorted(m.table.stage.tolist()) == [0] * 4 + [1] * 8  # one prefill pass, two decode replays
    assert len(m.stage) == len(grok.kernels)


def test_merge_half_layers_pass_equals_merging_in_detection(grok):
    split = run("classify-kernels,detect-layers{strategy=boundary merge=false}", grok)
    assert split.layers.layers_per_pass == [8, 8, 8]  # attention and MoE halves
    merged = run("classify-kernels,detect-layers{strategy=boundary merge=false},merge-half-layers", grok)
    direct = run("classify-kernels,detect-layers{strategy=boundary}", grok)
    assert merged.layers.layers_per_pass == direct.layers.layers_per_pass == [4, 4, 4]
    assert np.array_equal(merged.layers.layer, direct.layers.layer)
    halves = run("classify-kernels,detect-layers{strategy=boundary merge=false},type-layers", grok)
    assert set(halves.table.type) == {"ATTN", "MOE"}


def test_one_pass_without_the_cli(grok):
    module = TraceModule(grok)
    with pytest.raises(LayercError, match="run classify-kernels before it"):  # no hidden prerequisite
        DetectLayers(strategy="motif").apply(Context(), module)
    manager = PassManager([DetectLayers(strategy="motif"), TypeLayers()])
    manager.run(Context(), module)  # the manager runs what they require, and shows it
    assert [p.pipeline_text() for p in manager.ran] == ["classify-kernels", "detect-layers{strategy=motif}", "type-layers"]
    assert [t.name for t in manager.timings if t.name != "(verify)"] == ["classify-kernels", "detect-layers", "type-layers"]
    assert len(module.table) == 12
    module.verify()


def test_a_satisfied_requirement_is_not_run_again(grok):
    module = TraceModule(grok)
    run_passes([ClassifyKernels(), DetectLayers(strategy="boundary")], module)
    manager = PassManager([TypeLayers()])
    manager.run(Context(), module)
    assert [p.name for p in manager.ran] == ["type-layers"]
    assert module.layers.strategy == "boundary"  # the layers already found, not a default detection


def test_layer_detection_is_one_cached_analysis(grok):
    ctx, module = Context(), TraceModule(grok)
    run_passes([ClassifyKernels()], module, ctx)
    DetectLayers().apply(ctx, module)
    first = module.layers
    DetectLayers().apply(ctx, module)
    assert module.layers is first and ctx.analyses.cached() == ["trace-layers"]
    DetectLayers(strategy="motif").apply(ctx, module)
    assert module.layers is not first
    ClassifyKernels().apply(ctx, module)
    ctx.analyses.invalidate(ClassifyKernels.preserves)  # a pass that does not preserve it drops it
    assert ctx.analyses.cached() == []


def test_passes_that_need_layers_say_so(grok):
    with pytest.raises(LayercError, match="run detect-layers before it"):
        TypeLayers().apply(Context(), TraceModule(grok))
    with pytest.raises(LayercError, match="run detect-layers before it"):
        MergeHalfLayers().apply(Context(), TraceModule(grok))


def test_bad_options_and_names_fail_before_running():
    with pytest.raises(ParseError, match="strategy must be one of"):
        build_pipeline("detect-layers{strategy=guess}", TRACE_PASSES)
    with pytest.raises(ParseError, match=r"pass 'dce' runs on the graph IR \(layerc opt, layer\), not here"):
        build_pipeline("dce", TRACE_PASSES)  # a graph pass is no trace pass
    assert set(TRACE_PASSES) == {"classify-kernels", "detect-layers", "merge-half-layers", "type-layers", "measure-roofline"}
    assert set(TRACE_PASSES) < set(get_all_passes()) and not set(TRACE_PASSES) & set(get_all_passes("graph"))


def test_verify_catches_a_column_of_the_wrong_length(grok):
    module = run("classify-kernels,detect-layers,type-layers", grok)
    module.stage = module.stage[:-1]
    with pytest.raises(VerifyError, match="rows for"):
        module.verify()
