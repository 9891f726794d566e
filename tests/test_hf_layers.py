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
from layerc.passes.base import Context  # noqa: E402
from layerc.passes.slicing import SliceLayers  # noqa: E402
from layerc.tools import export_hf  # noqa: E402

# The four the issue names, and more shapes of decoder layer: fused QKV (phi3), parallel
# attention and MLP (falcon), sandwich norms (gemma2), MLA + MoE (deepseek_v3), GPT-NeoX, Mamba-2
# and Mamba-2/attention hybrids (one with a shared attention block, zamba2).
ARCHES = ["llama", "qwen3_moe", "mixtral", "deepseek_v3", "qwen2", "phi3", "falcon", "gemma2", "gpt_neox", "olmoe",
          "mamba2", "nemotron_h", "zamba2"]  # Mamba-2 (einsum in every layer), its hybrids


@pytest.mark.parametrize("arch", ARCHES)
def test_slices_agree_with_nn_module_stack(arch, tmp_path, record_property):
    export_hf.export(arch, 3, tmp_path)
    truth = json.loads((tmp_path / "layers.json").read_text())["nodes"]
    module = load(tmp_path)
    SliceLayers().apply(Context(), module)
    ops = [n for n in module.main_graph().nodes if n.kind == OP]
    inside = [n for n in ops if truth[n.name] is not None]
    agree = sum(n.meta["layer"] == truth[n.name] for n in inside) / len(inside)
    readers = [n for n in inside if n.weights]
    agree_w = sum(n.meta["layer"] == truth[n.name] for n in readers) / len(readers)
    record_property("layer_agreement", f"{arch}: {agree:.2%} of {len(inside)} nodes inside decoder layers, {agree_w:.2%} of {len(readers)} weight-reading nodes")
    assert agree >= 0.99, [(n.name, truth[n.name], n.meta["layer"]) for n in inside if n.meta["layer"] != truth[n.name]][:10]
    assert agree_w == 1.0
