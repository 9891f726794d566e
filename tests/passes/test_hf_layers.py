"""Slicing real graphs: tiny HF models exported with `export-hf`, checked against the true layer
of every node (from torch's nn_module_stack). The agreement per architecture is printed in the
test summary."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from layerc.grammar.dumps import load  # noqa: E402
from layerc.ir.graph import OP  # noqa: E402
from layerc.passes.pipeline import run_passes
from layerc.passes.slicing import SliceLayers  # noqa: E402
from layerc.backends.synth import hf_export as export_hf  # noqa: E402
from layerc.backends.fidelity import agreement  # noqa: E402

# The four the issue names, and more shapes of decoder layer: fused QKV (phi3), parallel
# attention and MLP (falcon), sandwich norms (gemma2), MLA + MoE (deepseek_v3), GPT-NeoX, Mamba-2
# and Mamba-2/attention hybrids (one with a shared attention block, zamba2).
ARCHES = ["llama", "qwen3_moe", "mixtral", "deepseek_v3", "qwen2", "phi3", "falcon", "gemma2", "gpt_neox", "olmoe",
          "mamba2", "nemotron_h", "zamba2"]  # Mamba-2 (einsum in every layer), its hybrids
# One guard per slicing rule (the fidelity table has every architecture):
RULES = {
    "gpt2": "what follows the embedding (a position embedding, a dropout) is the model's",
    "gemma": "a scaled embedding is the model's; the cast that opens layer 0's norm is the layer's",
    "minimax": "a post-norm residual: layer 0 starts right after the embedding",
    "cpmant": "an alias between the embedding sum and the stack is the model's",
    "bamba": "a mask or rotary table that only one layer of a hybrid reads is still the model's",
    "afmoe": "a sliding-window mask that one layer reads is the model's",
    "bert-generation": "layers numbered by structure (encoder.layer.N); an alias out of a post-norm stack",
    "falcon_mamba": "a residual cast that only its layer's closing add reads (a region skipping a layer)",
    "gemma4_text": "a layer-closing scale: the next norm starts after it",
    "gemma3n_text": "AltUp's stacked streams: the paths into a layer meet at the last op of the one before",
    "zaya": "a state one layer hands the next from its middle stays with the layer that made it",
    "nanochat": "periodicity: the model's weight-less norm before layer 0's identical one is the model's",
    "opt": "periodicity: the last layer closes with the reshape every layer closes with",
    "openai-gpt": "periodicity: the model's reshape after the last layer is not the layer's",
    "xlnet": "states the model returns beside the logits (memories) are the model's",
    "rwkv": "an op on a layer's weights that runs before the model reads its input is the model's",
    "dory": "a looped stack: each pass cut, the model's mixing between passes left out",
    "hrm_text": "twin stacks (H and L modules) numbered together",
    "deepseek_v2": "the cast each layer makes of the rotary table the layer before handed on",
}


@pytest.mark.parametrize("arch", ARCHES + list(RULES))
def test_slices_agree_with_nn_module_stack(arch, tmp_path, record_property):
    if arch not in export_hf.model_types():
        pytest.skip(f"the installed transformers has no '{arch}'")
    export_hf.export(arch, 3, tmp_path)
    truth = json.loads((tmp_path / "layers.json").read_text())["nodes"]
    module = load(tmp_path)
    run_passes([SliceLayers()], module)
    ops = [n for n in module.main_graph().nodes if n.kind == OP]
    every = agreement([(n.name, n.meta["layer"], truth[n.name]) for n in ops], "all")
    weights = agreement([(n.name, n.meta["layer"], truth[n.name]) for n in ops if n.weights], "w")
    record_property("layer_agreement", f"{arch}: recall {every['all_recall']:.4f}, precision {every['all_precision']:.4f} "
                    f"of {len(ops)} ops; weight-reading ops {weights['w_recall']:.4f} / {weights['w_precision']:.4f}")
    assert every["all_recall"] >= 0.995 and every["all_precision"] >= 0.995, (RULES.get(arch), every["all_examples"])
    assert weights["w_recall"] == weights["w_precision"] == 1.0, weights["w_examples"]
