"""How an external input of a layer is called: what a person reading the layer wants to know
about a value that comes from outside it."""

from __future__ import annotations

import re
from typing import cast

from layerc.ir.graph import OP, PLACEHOLDER, Node, Value, Weight

_CACHE = re.compile(r"(kv|ckv|kpe|k|v|mla|conv|ssm|state|paged)_?cache|_cache$|cache_")
_METADATA = re.compile(
    r"batch_info|cu_seqlen|seq_len|cache_loc|last_page|num_pages|pages_per_seq|slot_idx|seq_start|"
    r"input_pos|use_initial_states|batch_indices|flashinfer_positions|metadata|page_table|block_table"
)
_ROPE = re.compile(r"rotary|rope|cos_sin|_cos|_sin|freqs|inv_freq")
_INPUT = re.compile(r"^(input_ids|position_ids|inputs_embeds|attention_mask|token_type_ids)$")


def external_label(value: Value) -> str:
    """``Layer 4 residual output``, ``KV cache``, ``RoPE cos/sin cache``, ``batch metadata``,
    ``model input``, or what the value's origin says."""
    layer = value.meta.get("layer")
    if isinstance(value, Weight):
        return "weight"
    node = cast(Node, value)  # a value that is not a weight is a node
    if node.kind == OP and layer is not None:
        return f"Layer {layer} residual output"
    name = value.name
    if node.kind == PLACEHOLDER:
        if _METADATA.search(name):  # first: cache_loc, seq_len_with_cache are page bookkeeping
            return "batch metadata"
        if _CACHE.search(name):
            return "KV cache" if "conv" not in name and "ssm" not in name else "state cache"
        return "model input"
    origins = _origins(value)
    if any(_ROPE.search(o) for o in origins):
        return "RoPE cos/sin cache"
    if any(_METADATA.search(o) or "prepare_metadata" in o for o in origins):
        return "batch metadata"
    if any(_CACHE.search(o) for o in origins):
        return "KV cache"
    if value.meta.get("layer_role") == "outside":
        return "embedding output" if any("embed" in o for o in origins) else "model-level value"
    if any(_INPUT.match(o) for o in origins):
        return "positions and masks"
    return "shared value"


def _origins(value: Value, limit: int = 64) -> list[str]:
    """Names of the weights, placeholders and ops upstream of ``value`` (nearest first)."""
    seen: set[Value] = set()
    out: list[str] = []
    stack = [value]
    while stack and len(out) < limit:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        out.append(v.name if not hasattr(v, "target") or v.target is None else f"{v.name} {v.target}")
        if hasattr(v, "inputs"):
            stack.extend(v.inputs)
    return out
