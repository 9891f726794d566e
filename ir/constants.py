"""Constant arguments of ops, with the kind each one had in the model.

Arguments are plain Python values (int, float, bool, None, str, list, tuple, dict, slice) plus
the torch objects below, and IR values where a node or weight is referenced, as in torch.fx's
``node.args``. A ``str`` is a bare string such as ``NCCL``: the writer prints ``str(arg)``,
so strings have no quotes at the top level and keep them inside containers (``repr``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from layerc.ir.types import TORCH_DTYPES


@dataclass(frozen=True)
class TorchAttr:
    """A ``torch.<name>`` constant: memory formats, layouts (``torch.contiguous_format``)."""

    name: str

    def __str__(self) -> str:
        return f"torch.{self.name}"

    __repr__ = __str__


@dataclass(frozen=True)
class DType(TorchAttr):
    """``torch.bfloat16`` used as an argument (e.g. of ``aten.to.dtype``)."""


@dataclass(frozen=True)
class Device:
    """``cuda:0`` at the top level; ``device(type='cuda', index=0)`` inside a container."""

    type: str
    index: int | None = None

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        if self.index is None:
            return f"device(type='{self.type}')"
        return f"device(type='{self.type}', index={self.index})"


_INT = re.compile(r"-?(?:0|[1-9]\d*)\Z")
_DEVICE = re.compile(r"(cpu|cuda|meta|hip|xpu|mps|mtia|privateuseone)(?::(0|[1-9]\d*))?\Z")
_KEYWORDS = {"None": None, "True": True, "False": False}


def atom_value(text: str):
    """The constant a bare atom stands for; a bare string when it is nothing more specific.

    Only texts that print back exactly as they read are given a kind, so printing is lossless.
    """
    if text in _KEYWORDS:
        return _KEYWORDS[text]
    if _INT.match(text):
        return int(text)
    first = text[0]
    if first.isdigit() or first in "-.in":
        try:
            value = float(text)
        except ValueError:
            pass
        else:
            if repr(value) == text:
                return value
    if text.startswith("torch."):
        name = text[6:]
        if name in TORCH_DTYPES:
            return DType(name)
        if name.isidentifier():
            return TorchAttr(name)
    m = _DEVICE.match(text)
    if m:
        return Device(m.group(1), int(m.group(2)) if m.group(2) else None)
    return text


def same_constant(a, b) -> bool:
    """Equality that keeps kinds apart (``1``, ``1.0`` and ``True`` differ); IR values by identity."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_constant(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_constant(a[k], b[k]) for k in a)
    if isinstance(a, slice):
        return all(same_constant(x, y) for x, y in ((a.start, b.start), (a.stop, b.stop), (a.step, b.step)))
    if isinstance(a, float) and a != a:
        return b != b
    return a == b
