"""Value types of the graph IR.

A dump describes each value by two texts, a shape and a dtype (``8x1x7168 : torch.bfloat16``).
The types below keep what those texts mean, so passes can ask for dimensions and dtypes,
while ``shape_text``/``dtype_text`` give back exactly what the AutoDeploy writer prints.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Callable, ClassVar, Union, cast

from layerc.ir.diagnostics import ParseError

#: One dimension: a concrete size, or a symbolic expression kept as sympy prints it.
Dim = Union[int, "SymDim"]


@dataclass(frozen=True)
class SymDim:
    """A symbolic dimension such as ``s72``, ``s70*s72`` or ``2048*s72``."""

    expr: str

    def __str__(self) -> str:
        return self.expr

    @property
    def symbols(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(_SYMBOL.findall(self.expr)))


_SYMBOL = re.compile(r"[a-z]+\d+")


#: The largest size a dim may have: torch sizes are 64-bit, and arrays of sizes are int64.
MAX_DIM = 2**63 - 1
_MAX_DIM_DIGITS = len(str(MAX_DIM))


def parse_dim(text: str) -> Dim:
    # The writer prints str(int(d)) when str(d).isdigit(), else the sympy string.
    if not text.isdigit():
        return SymDim(text)
    digits = text.lstrip("0") or "0"
    if len(digits) > _MAX_DIM_DIGITS or int(digits) > MAX_DIM:
        raise ParseError(f"size {text[:30]}{'...' if len(text) > 30 else ''} does not fit in 64 bits")
    return int(digits)


class Type:
    """Base of all value types."""

    __slots__ = ()

    #: Text before and after the ``:`` when a *use* of the value is printed.
    def shape_text(self) -> str:
        raise NotImplementedError

    def dtype_text(self) -> str:
        raise NotImplementedError

    @property
    def is_known(self) -> bool:
        return True


@dataclass(frozen=True)
class TensorType(Type):
    """A tensor: ``shape`` is a tuple of dims (``()`` is a 0-d ``scalar``), ``dtype`` a torch dtype name.

    ``shape`` is None when the writer knew the dtype but printed no shape (generation-1 dumps).
    """

    shape: tuple[Dim, ...] | None
    dtype: str  # e.g. "torch.bfloat16"

    def shape_text(self) -> str:
        if self.shape is None:
            return "?"
        return "x".join(str(d) for d in self.shape) if self.shape else "scalar"

    def dtype_text(self) -> str:
        return self.dtype

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def numel(self) -> int | None:
        """Element count when every dim is concrete."""
        if self.shape is None or any(not isinstance(d, int) for d in self.shape):
            return None
        n = 1
        for d in cast("tuple[int, ...]", self.shape):  # every dim is an int (checked above)
            n *= d
        return n


@dataclass(frozen=True)
class OpaqueType(Type):
    """A non-tensor Python value, known only by its type name (``SymInt``, ``int``, ``NoneType``,
    ``tuple`` when a multi-output value is used as a whole, ``None`` for a missing tuple element)."""

    pytype: str

    def shape_text(self) -> str:
        return "?"

    def dtype_text(self) -> str:
        return self.pytype


@dataclass(frozen=True)
class TupleType(Type):
    """The value of a multi-output op; each element is a TensorType or OpaqueType.

    ``container`` is ``tuple`` or ``list``: the writer shows it only where the value is used.
    """

    elements: tuple[Type, ...]
    container: str = "tuple"

    def shape_text(self) -> str:
        return "?"

    def dtype_text(self) -> str:
        return self.container


@dataclass(frozen=True)
class UnknownType(Type):
    """No metadata: the writer prints ``? : unknown`` (``? : N/A`` on an op's own line)."""

    MARK: ClassVar[str] = "unknown"

    def shape_text(self) -> str:
        return "?"

    def dtype_text(self) -> str:
        return self.MARK

    @property
    def is_known(self) -> bool:
        return False


UNKNOWN = UnknownType()

#: Dtype names the torch writer may print after ``torch.``.
TORCH_DTYPES = frozenset(
    """float32 float float64 double float16 half bfloat16 complex32 complex64 complex128 cfloat cdouble
    uint8 uint16 uint32 uint64 int8 int16 int32 int64 short int long bool qint8 quint8 qint32 quint4x2
    quint2x4 float8_e4m3fn float8_e4m3fnuz float8_e5m2 float8_e5m2fnuz float8_e8m0fnu float4_e2m1fn_x2
    bits1x8 bits2x4 bits4x2 bits8 bits16 int1 int2 int3 int4 int5 int6 int7 uint1 uint2 uint3 uint4 uint5
    uint6 uint7""".split()
)

_ELEMENT_BYTES = {
    "float32": 4, "float": 4, "float64": 8, "double": 8, "float16": 2, "half": 2, "bfloat16": 2,
    "complex64": 8, "complex128": 16, "uint8": 1, "int8": 1, "int16": 2, "short": 2, "int32": 4, "int": 4,
    "int64": 8, "long": 8, "bool": 1, "uint16": 2, "uint32": 4, "uint64": 8, "float8_e4m3fn": 1,
    "float8_e4m3fnuz": 1, "float8_e5m2": 1, "float8_e5m2fnuz": 1, "float8_e8m0fnu": 1,
    "float4_e2m1fn_x2": 1,
}


def element_bytes(dtype: str) -> int | None:
    """Bytes per element of a ``torch.<dtype>`` name, None when unknown."""
    return _ELEMENT_BYTES.get(dtype.removeprefix("torch."))


def type_from_texts(shape: str, dtype: str) -> Type:
    """The type that the writer would print as ``shape : dtype`` at a use or placeholder.

    Types are immutable, so one object serves every value with the same texts.
    """
    key = (shape, dtype)
    t = _TYPE_CACHE.get(key)
    if t is None:
        if len(_TYPE_CACHE) > 100_000:
            _TYPE_CACHE.clear()
        t = _TYPE_CACHE[key] = _type_from_texts(str(shape), sys.intern(str(dtype)))
    return t


_TYPE_CACHE: dict[tuple[str, str], Type] = {}


def _type_from_texts(shape: str, dtype: str) -> Type:
    if shape == "?":
        if dtype in ("unknown", "N/A"):
            return UNKNOWN
        if dtype.startswith("torch."):
            return TensorType(None, dtype)
        return OpaqueType(dtype)
    if shape == "scalar":
        return TensorType((), dtype)
    return TensorType(tuple(parse_dim(d) for d in split_dims(shape)), dtype)


def element_from_texts(shape: str, dtype: str) -> Type:
    """One element of a multi-output ``(s1, s2) : (d1, d2)`` annotation."""
    shape, dtype = str(shape), sys.intern(str(dtype))
    if shape == "?":
        return TensorType(None, dtype) if dtype.startswith("torch.") else OpaqueType(dtype)
    return type_from_texts(shape, dtype)


_DIM_SPLIT = re.compile(r"x(?=[\d\-a-zA-Z(])")


def split_dims(shape: str) -> list[str]:
    """Split ``s72xs70x1x4096`` on the ``x`` separators, never inside a symbol or call (``Max(...)``)."""
    if "(" not in shape:
        return _DIM_SPLIT.split(shape)
    return split_top_level(shape, "x", lambda text, i: i > 0 and not text[i - 1].isalpha())


def split_top_level(text: str, sep: str = ", ", accept: Callable[[str, int], bool] | None = None) -> list[str]:
    """Split on ``sep`` outside parentheses (a dim may be ``Max(1, s0)``); ``accept(text, i)``
    may veto a separator at ``i``."""
    if "(" not in text:
        return text.split(sep)
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        ch = text[i]
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif depth == 0 and text.startswith(sep, i) and (accept is None or accept(text, i)):
            parts.append(text[start:i])
            i += len(sep)
            start = i
            continue
        i += 1
    parts.append(text[start:])
    return parts
