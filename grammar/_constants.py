"""Callbacks for constant arguments, shared by the readers of both syntaxes.

Constants read as Python prints them: ``str()`` at the top level of an AutoDeploy argument
list, ``repr()`` inside containers, where a bare word names a node or weight. A reader decides
what a bare word at the top level means; ``_resolve`` turns a word into a value.
"""

from __future__ import annotations

import ast
import warnings
from typing import Callable

from lark import Transformer

from layerc.ir.constants import SYM_FUNCTIONS, Device, atom_value, complex_value, is_symbol
from layerc.ir.diagnostics import Location, ParseError, clip
from layerc.ir.graph import Graph, Module, Value
from layerc.ir.types import SymDim


class Bare(str):
    """A bare word: a constant at the top level (``value``: a string, or a size such as ``s0``),
    a reference inside a container (a size symbol only where no node has its name)."""

    loc: Location | None = None
    value: str | SymDim


def bare(text: str, loc: Location, value=None) -> Bare:
    word = Bare(text)
    word.loc = loc
    word.value = text if value is None else value
    return word


def loc_of(tok) -> Location:
    return Location(tok.line, tok.column)


def _too_long(text: str, loc: Location) -> ParseError:
    return ParseError(f"a number of {len(text)} digits is longer than layerc reads", loc=loc)


def read_int(text: str, loc: Location) -> int:
    """``int(text)``; Python refuses more than ``sys.get_int_max_str_digits()`` digits (the
    conversion is quadratic), and so does layerc, at ``loc``."""
    try:
        return int(text)
    except ValueError:
        raise _too_long(text, loc) from None


def read_atom(text: str, loc: Location):
    """``atom_value(text)``, with a located error for an integer too long to convert."""
    try:
        return atom_value(text)
    except ValueError:  # only int() raises there: float() failures mean "not a float"
        raise _too_long(text, loc) from None


def read_string(text: str, loc: Location) -> str:
    """A quoted string as Python's repr() wrote it; an escape Python cannot read is an error."""
    if "\\" not in text:
        return text[1:-1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an unknown escape such as \d reads as itself
        try:
            return ast.literal_eval(text)
        except (SyntaxError, ValueError) as e:
            why = e.msg if isinstance(e, SyntaxError) else str(e)
            raise ParseError(f"bad string constant: {why}", loc=loc) from None


#: Words that mean a constant even inside a container.
NON_NAMES = frozenset({"None", "True", "False", "inf", "nan", "infj", "nanj", "Ellipsis"})


class _Kw:
    __slots__ = ("name", "value")

    def __init__(self, name, value):
        self.name, self.value = name, value


def call_value(fn: str, pos: list, kws: dict, loc: Location):
    """The constant a printed call stands for: ``slice(None, 64, None)``, ``device(type='cuda',
    index=0)``, a size such as ``Max(1, s0)``."""
    if fn == "slice" and not kws and len(pos) in (1, 2, 3):
        return slice(*pos)
    if fn == "device" and not pos and set(kws) <= {"type", "index"} and isinstance(kws.get("type"), str):
        index = kws.get("index")
        if index is None or isinstance(index, int):
            return Device(kws["type"], index)
    if fn in SYM_FUNCTIONS and not kws and pos and all(type(a) in (int, SymDim) for a in pos):
        return SymDim(f"{fn}({', '.join(map(str, pos))})")
    raise ParseError(f"unsupported constant '{clip(fn)}(...)'", loc=loc)


class ConstantCallbacks(Transformer):
    """Base of the readers' inline transformers: the module being built, and the callbacks
    for the ``const`` rules; a reader provides ``_resolve(name, loc)``."""

    _resolve: Callable[[str, Location], Value]  #: the node or weight a word names (the reader's method)

    def __init__(self):
        super().__init__(visit_tokens=False)
        self.reset()

    def reset(self) -> None:
        self.module: Module | None = None
        self.graph: Graph | None = None

    def atom(self, c):
        (tok,) = c
        text = tok.value
        if text[-1] == " ":
            raise ParseError("a constant cannot end with a space", loc=Location(tok.line, tok.column + len(text) - 1))
        value = read_atom(text, loc_of(tok))
        if type(value) is str or (type(value) is SymDim and is_symbol(text)):
            return bare(text, loc_of(tok), value)
        return value

    def complex_const(self, c):
        (tok,) = c
        value = complex_value(tok.value)
        if value is None:
            raise ParseError(f"'{clip(tok.value)}' is not a complex number as Python prints one", loc=loc_of(tok))
        return value

    def string(self, c):
        (tok,) = c
        return read_string(tok.value, loc_of(tok))

    def name_list(self, c):
        (tok,) = c
        loc = loc_of(tok)
        resolve, word = self._resolve, self._word  # (weight lists run to 10**5 names: the cheap test first)
        return [atom_value(w) if w in NON_NAMES else word(w, loc) if w[0] in "su" else resolve(w, loc)
                for w in tok.value[1:-1].split(", ")]

    def int_list(self, c):
        (tok,) = c
        return [read_int(w, loc_of(tok)) for w in tok.value[1:-1].split(", ")]

    def list(self, c):
        return [self._element(x) for x in c]

    def empty_tuple(self, c):
        return ()

    def tuple(self, c):
        return tuple(self._element(x) for x in c)

    def dict(self, c):
        out = {}
        for k, v in c:
            key, value = self._element(k), self._element(v)
            try:
                out[key] = value
            except TypeError:  # a list or dict as a key: no Python dict held that
                raise ParseError(f"a {type(key).__name__} cannot be a dict key") from None
        return out

    def pair(self, c):
        return (c[0], c[1])

    def kwarg(self, c):
        kw, value = c
        return _Kw(kw.value[:-1], self._element(value))

    def call(self, c):
        head, *args = c
        pos = [self._element(a) for a in args if not isinstance(a, _Kw)]
        kws = {a.name: a.value for a in args if isinstance(a, _Kw)}
        return call_value(head.value[:-1], pos, kws, loc_of(head))

    def _element(self, x):
        """Inside a container a bare word names a node or weight."""
        return self._word(str(x), x.loc) if type(x) is Bare else x

    def _word(self, name: str, loc: Location):
        """A node or weight; a size symbol (``s0``) that no node is called is the size."""
        if is_symbol(name) and self.graph is not None and self.graph.value(name) is None:
            return SymDim(name)
        return self._resolve(name, loc)
