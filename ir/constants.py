"""Constant arguments of ops, with the kind each one had in the model.

Arguments are plain Python values (int, float, complex, bool, None, Ellipsis, str, list, tuple,
dict, slice) plus the torch objects below, symbolic sizes (``SymDim``: ``s0``, ``2*s77``), and IR
values where a node or weight is referenced, as in torch.fx's ``node.args``. A ``str`` is a bare
string such as ``NCCL``: the writer prints ``str(arg)``, so strings have no quotes at the top level
and keep them inside containers (``repr``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import EllipsisType
from typing import Any, Union

from layerc.ir.types import TORCH_DTYPES, SymDim


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
#: What a bare atom can stand for (see ``atom_value``).
Atom = Union[None, bool, EllipsisType, int, float, complex, SymDim, TorchAttr, Device, str]

_KEYWORDS: dict[str, Atom] = {"None": None, "True": True, "False": False, "Ellipsis": Ellipsis}
#: A sympy size as torch prints a SymInt: ints and symbols (s0 for sizes, u0 for unbacked values)
#: joined by operators. Other words with digits (bf16, fp8, int4) stay strings.
_SYM_TERM = r"(?:\d+|[su]\d+)"
_SYM_EXPR = re.compile(rf"-?{_SYM_TERM}(?:(?:\*\*|//|[*/%]| [+\-] )-?{_SYM_TERM})*+\Z")
#: sympy functions a size may be printed with (``Max(1, s0)``), read back as a SymDim.
SYM_FUNCTIONS = frozenset({"Max", "Min", "FloorDiv", "CeilDiv", "Mod", "PythonMod", "Abs"})


def is_symbol(word: str) -> bool:
    """``s0``, ``u12``: a size symbol (a node of that name, where one is defined, comes first)."""
    return len(word) > 1 and word[0] in "su" and word[1:].isdigit() and word.isascii()


def atom_value(text: str) -> Atom:
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
            value = complex(text) if text[-1] == "j" else float(text)
        except ValueError:
            pass
        else:
            if repr(value) == text:
                return value
    if first in "su-" or first.isdigit():
        if _SYM_EXPR.match(text) and ("s" in text or "u" in text):
            return SymDim(text)
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


def complex_value(text: str) -> complex | None:
    """``(1+2j)`` as repr() prints a complex with a real part; None unless it prints back the same."""
    try:
        value = complex(text)
    except ValueError:
        return None
    return value if repr(value) == text else None


def same_constant(a: Any, b: Any) -> bool:
    """Equality that keeps kinds apart (``1``, ``1.0`` and ``True`` differ); IR values by identity."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_constant(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_constant(a[k], b[k]) for k in a)
    if isinstance(a, slice):
        return all(same_constant(x, y) for x, y in ((a.start, b.start), (a.stop, b.stop), (a.step, b.step)))
    if isinstance(a, (float, complex)) and a != a:
        return repr(a) == repr(b)
    equal: bool = a == b
    return equal
