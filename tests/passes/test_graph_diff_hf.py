"""The graph diff on real graphs: tiny HF models exported with ``export-hf``.

- One model printed two ways (torch.fx's print and the AutoDeploy dump): every op matched, no
  change, whatever the architecture.
- Llama against Qwen3 (Qwen3 is Llama with an RMSNorm on the queries and one on the keys): exactly
  that, two added norms in every layer, and nothing else.
- A model against itself with one more layer: that layer added, and nothing else but an op on
  its boundary that exists only to feed it.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from layerc.backends.synth import hf_export as export_hf  # noqa: E402
from layerc.grammar.dumps import load  # noqa: E402
from layerc.passes.base import Context  # noqa: E402
from layerc.passes.graph_diff import diff_graphs  # noqa: E402
from layerc.passes.pipeline import PassManager  # noqa: E402
from layerc.passes.select_graph import SelectGraph  # noqa: E402
from layerc.passes.slicing import SliceLayers  # noqa: E402
from layerc.passes.tag_weights import TagWeights  # noqa: E402


def _graph(path):
    module = load(path)
    PassManager([SelectGraph(), TagWeights(), SliceLayers()]).run(Context(), module)
    return module.main_graph()


def _export(arch, layers, tmp_path):
    out = tmp_path / f"{arch}_{layers}"
    export_hf.export(arch, layers, out)
    return out


# (checked on 12 while this was built: falcon, phi3, gpt_neox, olmoe, mixtral and nemotron_h too)
@pytest.mark.parametrize("arch", ["llama", "qwen3_moe", "deepseek_v3", "gemma2", "mamba2", "qwen3_next"])
def test_one_model_printed_two_ways_is_the_same(arch, tmp_path):
    if arch not in export_hf.model_types():
        pytest.skip(f"the installed transformers has no '{arch}'")
    out = _export(arch, 2, tmp_path)
    dump = next(out.glob("0*.txt"))
    d = diff_graphs(_graph(out / "fx_graph.txt"), _graph(dump))
    assert d.changes == [] and d.matched == d.nodes_a == d.nodes_b


def test_llama_and_qwen3_differ_by_the_query_and_key_norms(tmp_path):
    d = diff_graphs(_graph(_export("llama", 2, tmp_path)), _graph(_export("qwen3", 2, tmp_path)))
    assert [(c.kind, c.layers, len(c.regions)) for c in d.changes] == [("added", [0, 1], 4)]
    assert "rsqrt" in d.changes[0].after and d.matched == d.nodes_a


@pytest.mark.parametrize("arch", ["llama", "qwen3_moe", "gemma2", "mamba2", "gpt_neox"])
def test_one_more_layer_is_that_layer_added(arch, tmp_path):
    if arch not in export_hf.model_types():
        pytest.skip(f"the installed transformers has no '{arch}'")
    d = diff_graphs(_graph(_export(arch, 2, tmp_path)), _graph(_export(arch, 3, tmp_path)))
    first, *rest = d.changes
    assert (first.kind, first.layers, len(first.regions)) == ("added", [2], 1)
    assert d.matched == d.nodes_a
    # besides: at most an op on the boundary that only exists because layer 2 does (mamba2 casts
    # the residual once more for it), which the slicer gives to layer 1
    for c in rest:
        (region,) = c.regions
        assert c.kind == "added" and c.layers == [1] and len(region.b) == 1
        assert all(u.meta.get("layer") == 2 for u in region.b[0].users)
