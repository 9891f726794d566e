"""JSON bytes for every document layerc writes: orjson (fast), and where a value is an integer past
64 bits (a dump constant of 10**30 is a valid Python int) the standard library, which writes any
integer exactly. One place, so that no output meets an input orjson cannot encode."""

from __future__ import annotations

import json

import numpy as np
import orjson


def to_json(doc, *, indent: bool = False, numpy: bool = False) -> bytes:
    """``doc`` as JSON bytes (2-space indent with ``indent``; numpy arrays and scalars with ``numpy``)."""
    option = (orjson.OPT_INDENT_2 if indent else 0) | (orjson.OPT_SERIALIZE_NUMPY if numpy else 0)
    try:
        return orjson.dumps(doc, option=option)
    except orjson.JSONEncodeError as e:
        if "Integer exceeds" not in str(e):
            raise
    return json.dumps(doc, indent=2 if indent else None, separators=None if indent else (",", ":"),
                      ensure_ascii=False, default=_numpy if numpy else None).encode()


def _numpy(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")
