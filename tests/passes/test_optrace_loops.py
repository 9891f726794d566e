"""The layer loops today's model sources write, followed: ``for``, ``enumerate`` (over a slice,
as 157 HF modeling files write it), ``zip``, indexing, ``getattr`` by an f-string name set by
``setattr``, ``ModuleDict`` views, ``nn.Sequential``, comprehensions. A loop that cannot be
followed is an error naming the layer class, never an op tree without layers and "0 issues"."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.passes.test_optrace import HF, find, kernel_names, needs_transformers, trace
from tests.layerc_cli import run_layerc

MODEL = '''
import functools
import torch
from torch import nn


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.proj(x))


class Model(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.n = config.num_hidden_layers
        self.layers = nn.ModuleList([Layer() for _ in range(config.num_hidden_layers)])
        self.blocks = nn.ModuleDict({"a": Layer(), "b": Layer()})
        self.seq = nn.Sequential(Layer(), Layer())
        self.caches = [None] * self.n
        for i in range(self.n):
            setattr(self, f"layer_{i}", Layer())
        self.grown = nn.ModuleList()
        for i in range(self.n):
            self.grown.append(Layer())
        built = []
        for i in range(self.n):
            built.append(Layer())
        self.built = nn.ModuleList(built)
        self.extended = nn.ModuleList()
        self.extended.extend([Layer() for _ in range(self.n)])
        self.added = nn.ModuleList()
        self.added += [Layer()]

    def forward(self, h):
{body}
        return h
'''

LOOPS = {
    "for": "for layer in self.layers:\n    h = layer(h)",
    "enumerate": "for i, layer in enumerate(self.layers):\n    h = layer(h)",
    "enumerate-slice": "for i, decoder_layer in enumerate(self.layers[: self.config.num_hidden_layers]):\n    h = decoder_layer(h)",
    "slice": "for layer in self.layers[: self.n]:\n    h = layer(h)",
    "index": "for i in range(self.n):\n    h = self.layers[i](h)",
    "zip": "for layer, cache in zip(self.layers, self.caches):\n    h = layer(h)",
    "getattr-fstring": "for i in range(self.n):\n    h = getattr(self, f'layer_{i}')(h)",
    "dict-items": "for name, block in self.blocks.items():\n    h = block(h)",
    "dict-values": "for block in self.blocks.values():\n    h = block(h)",
    "sequential": "h = self.seq(h)",
    "comprehension": "hs = [layer(h) for layer in self.layers]\nh = hs[-1]",
    "reversed": "for layer in reversed(self.layers):\n    h = layer(h)",
    # lists grown after they are made (DeepSeek-V3's own inference code: ModuleList() then append)
    "appended-attribute": "for layer in self.grown:\n    h = layer(h)",
    "appended-local": "for layer in self.built:\n    h = layer(h)",
    "extended": "for layer in self.extended:\n    h = layer(h)",
    "added": "for layer in self.added:\n    h = layer(h)",
}


def _package(root: Path, body: str) -> Path:
    pkg = root / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "m.py").write_text(MODEL.replace("{body}", textwrap.indent(body, " " * 8)))
    return pkg


@pytest.mark.parametrize("loop", list(LOOPS))
def test_every_loop_form_reaches_the_layer(tmp_path, loop):
    tree = trace(_package(tmp_path, LOOPS[loop]), "Model").tree
    called = [n for n, _ in tree.root.walk() if "Layer" in n.callee_classes]
    assert called and all(n.children or n.kernels for n in called)
    assert "torch.relu" in set().union(*(kernel_names(n) for n, _ in tree.root.walk()))


def test_a_loop_not_followed_is_an_error_at_the_layer_class(tmp_path):
    pkg = _package(tmp_path, "h = functools.reduce(lambda acc, layer: layer(acc), self.layers, h)")
    rc, _, err = run_layerc("optrace", pkg, "--entry", "Model", "-o", tmp_path / "r.md")
    assert rc == 1 and "m.py:7:1: error: the decoder layer Layer (the list Model.layers) is never called" in err
    assert not (tmp_path / "r.md").exists()


def test_a_loop_over_values_not_known_is_a_located_warning(tmp_path):
    pkg = _package(tmp_path, LOOPS["for"] + "\nfor hook in self.config.hooks:\n    h = hook(h)")
    rc, _, err = run_layerc("optrace", pkg, "--entry", "Model", "-o", tmp_path / "r.md")
    assert rc == 0 and "warning: cannot resolve hook" in err and "1 unresolved calls" in err


def test_an_ambiguous_entry_names_the_candidates(tmp_path):
    pkg = _package(tmp_path, LOOPS["for"])
    (pkg / "other.py").write_text((pkg / "m.py").read_text())
    rc, _, err = run_layerc("optrace", pkg, "--entry", "Model", "-o", tmp_path / "r.md")
    assert rc == 1 and "--entry 'Model' is ambiguous: 2 classes" in err
    assert "pkg.m:Model" in err and "pkg.other:Model" in err
    rc, _, err = run_layerc("optrace", pkg, "--entry", "pkg.m:Model", "-o", tmp_path / "r.md")
    assert rc == 0, err


@needs_transformers
@pytest.mark.parametrize("arch, entry", [("gpt_oss", "GptOssForCausalLM"), ("qwen2", "Qwen2ForCausalLM"),
                                         ("qwen3", "Qwen3ForCausalLM"), ("gemma3", "Gemma3ForCausalLM"),
                                         ("llama4", "Llama4ForCausalLM")])
def test_hf_enumerate_loops_reach_the_decoder_layer(arch, entry):
    """``for i, decoder_layer in enumerate(self.layers[: self.config.num_hidden_layers])``: the
    decoder layer was empty before (the tree stopped at the model's norm and rotary embedding)."""
    source = HF / arch / f"modeling_{arch}.py"
    if not source.exists():
        pytest.skip(f"transformers has no {arch}")
    (layer,) = find(trace(source, entry).tree.root, "decoder_layer()")
    labels = [c.label for c in layer.children]
    assert "self.self_attn()" in labels and len(labels) >= 4
