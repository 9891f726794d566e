"""A kernel's stage from the shapes its launching op recorded (Kineto ``Input Dims``).

PyTorch's dense attention ops (``scaled_dot_product_attention`` and the flash, efficient and
cuDNN kernels behind it) take queries and keys first, as 4-d tensors (B, H, S, D) or (B, S, H, D).
A decode step asks one query per sequence against a cache of many keys: some axis holds 1 query
and more than 1 key. A prefill's queries span the prompt (or, chunked, a piece of it): no axis is
like that. Only 4-d pairs vote: varlen and paged ops take 3-d packed tokens or caches, or an
output first. A kernel's name, where it votes, still decides; shapes vote where names are silent
(cuDNN's and PyTorch's own attention kernels serve prefill and decode alike). Nothing is said
where shapes were not recorded, or in graph replays (no ops).
"""

from __future__ import annotations

import numpy as np

from layerc.ir.trace import Trace
from layerc.passes.kernel_tables import TYPES, Classification

PREFILL, DECODE, UNKNOWN = 0, 1, -1
_ATTENTION = TYPES.index("ATTENTION")


def query_key_stage(dims_text: str | None) -> int:
    """PREFILL, DECODE or UNKNOWN for one op's ``Input Dims`` (a JSON list of shapes)."""
    import msgspec  # the Kineto reader's decoder: no import of its own on that path

    try:
        dims = msgspec.json.decode(dims_text or "")
    except msgspec.DecodeError:
        return UNKNOWN
    if not isinstance(dims, list) or len(dims) < 2:
        return UNKNOWN
    q, k = dims[0], dims[1]
    if not (isinstance(q, list) and isinstance(k, list) and len(q) == len(k) == 4):
        return UNKNOWN
    if not all(type(x) is int and x > 0 for x in q + k):
        return UNKNOWN
    return DECODE if any(a == 1 < b for a, b in zip(q, k)) else PREFILL


def attention_shape_stages(trace: Trace, cls: Classification) -> np.ndarray:
    """Per kernel: the stage its launching op's query and key shapes say (attention kernels
    launched by an op with recorded shapes), else UNKNOWN. int8."""
    k, ops = trace.kernels, trace.cpu_ops
    out = np.full(len(k), UNKNOWN, np.int8)
    shaped = np.nonzero((ops.input_dims >= 0) & (ops.external_id >= 0))[0]
    attention = np.nonzero((cls.type == _ATTENTION) & (k.external_id >= 0))[0]
    if not len(shaped) or not len(attention):
        return out
    shaped = shaped[np.argsort(ops.external_id[shaped], kind="stable")]
    ids = ops.external_id[shaped]
    at = np.minimum(np.searchsorted(ids, k.external_id[attention]), len(ids) - 1)
    found = ids[at] == k.external_id[attention]
    kernels, dims = attention[found], ops.input_dims[shaped[at[found]]]
    distinct, inverse = np.unique(dims, return_inverse=True)
    votes = np.array([query_key_stage(trace.strings[int(d)]) for d in distinct], np.int8)
    out[kernels] = votes[inverse.reshape(-1)]
    return out


def stage_votes(trace: Trace, cls: Classification) -> np.ndarray:
    """Per kernel, the stage it votes for: what its name says, else what its op's shapes say."""
    if not (cls.stage < 0).any():
        return cls.stage.astype(np.int8)
    return np.where(cls.stage >= 0, cls.stage, attention_shape_stages(trace, cls)).astype(np.int8)
