"""``tag-weights``: the decoder layer of every weight whose name says it.

Weight names are sanitized module paths (``model.layers.5.mlp.gate.weight`` →
``model_layers_5_mlp_gate_weight``), so ``layers_N_``, ``h_N_`` (GPT-2, Falcon) and
``blocks_N_`` name the layer, also in dotted ``get_attr`` targets. Fused weights
(``fused_moe_w3_w1_stacked_2``, ``fused_weight_7``) carry a global counter, not a layer:
they match nothing here and get their layer from dataflow (``slice-layers``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from layerc.ir.diagnostics import LayercError
from layerc.ir.graph import Module, Weight
from layerc.passes.base import Context, ModulePass

DEFAULT_PATTERN = r"(?:^|_)(?:layers|h|blocks)_(\d+)(?:_|$)"
DOTTED_PATTERN = r"(?:^|\.)(?:layers|h|blocks)\.(\d+)(?:\.|$)"


def weight_layer(weight: Weight, pattern: re.Pattern, dotted: re.Pattern | None) -> int | None:
    m = pattern.search(weight.name)
    if m is None and dotted is not None and weight.target:
        m = dotted.search(weight.target)
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class TagWeights(ModulePass):
    """Tag each weight with the decoder layer its name gives (meta 'layer'; None when none)."""

    name: ClassVar[str] = "tag-weights"
    #: A regex whose first group is the layer number (default: layers_N_, h_N_, blocks_N_).
    pattern: str = ""

    def apply(self, ctx: Context, module: Module) -> None:
        try:
            pattern = re.compile(self.pattern or DEFAULT_PATTERN)
        except re.error as e:
            raise LayercError(f"tag-weights: bad pattern: {e}") from None
        if pattern.groups < 1:
            raise LayercError("tag-weights: the pattern needs a group that captures the layer number")
        dotted = None if self.pattern else re.compile(DOTTED_PATTERN)
        for graph in module.graphs:
            for w in graph.weights.values():
                layer = weight_layer(w, pattern, dotted)
                w.meta["layer"] = layer
                w.meta["layer_source"] = "name" if layer is not None else None
