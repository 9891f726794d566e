"""The op schemas, where an op line's text alone cannot say where its arguments end.

Writers print a string argument with ``str()``, unquoted, so its text may hold anything a line
can: ``aten.einsum.default(bclhn,bcshn->bclsh, [a, b])``, ``aten._assert_scalar.default(%eq_1,
Runtime assertion failed for expression Eq(u0 + u1, 32) on node 'eq_1')``. For the aten overloads
that take a string, the readers split the arguments by the schema: a string runs up to the first
separator after which the remaining arguments fit their types (to the end when it is the last
parameter). The schemas are data (``data/aten_str_schemas.json``, written by
``tools/gen_op_schemas.py``): parsing never imports torch.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from layerc.grammar._lark import MAX_NESTING
from layerc.ir.constants import Device, DType, TorchAttr, atom_value, complex_value
from layerc.ir.types import SymDim

DATA = "data/aten_str_schemas.json"
#: Split attempts one line may cost, each of which may scan the rest of the line: at most 64, and
#: at most about 4 M characters scanned in all, which bounds the work on hostile input.
MAX_ATTEMPTS = 64
MAX_SCANNED = 4_000_000


@dataclass(frozen=True)
class Param:
    type: str  # as the schema writes it: "str", "str?", "Tensor[]", "SymInt[1]?"
    name: str
    has_default: bool = False  # a printed call may leave it out

    @property
    def is_str(self) -> bool:
        return self.type in ("str", "str?")


@dataclass(frozen=True)
class Schema:
    positional: tuple[Param, ...]
    params: dict[str, Param]  # every parameter by name: fx kwargs may name positional ones too


@lru_cache(maxsize=1)
def _table() -> dict[str, str]:
    raw = resources.files("layerc.grammar").joinpath(DATA).read_text(encoding="utf-8")
    return json.loads(raw)["schemas"]


@lru_cache(maxsize=None)
def schema_of(target: str) -> Schema | None:
    """The schema of ``aten.einsum.default`` (also fx's ``torch.ops.aten.einsum.default``)."""
    key = target.removeprefix("torch.ops.").removeprefix("aten.")
    text = _table().get(key) if len(key) < len(target) else None
    if text is None:
        return None
    positional, params, keyword = [], {}, False
    for arg in text.split(", "):
        if arg == "*":
            keyword = True
            continue
        type_, name = arg.split(" ")
        name, eq, _ = name.partition("=")
        params[name] = p = Param(type_, name, bool(eq))
        if not keyword:
            positional.append(p)
    return Schema(tuple(positional), params)


def target_pattern() -> str:
    """A regex for ``aten.<op>.<overload>`` of every schema: a trie, so a line whose target is not
    one of them fails after a character or two."""
    trie: dict = {}
    for key in _table():
        node = trie
        for ch in "aten." + key:
            node = node.setdefault(ch, {})
        node[""] = {}
    return _trie_regex(trie)


def _trie_regex(node: dict) -> str:
    branches = []
    for ch, child in sorted(node.items()):
        if not ch:
            continue
        text = ch
        while len(child) == 1 and "" not in child:  # a chain: one literal
            (ch, child), = child.items()
            text += ch
        branches.append(re.escape(text) + _trie_regex(child))
    if not branches:
        return ""
    body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
    if "" in node:
        return "(?:" + body + ")?"
    return body


# -- where a constant ends -----------------------------------------------------------------------
_SCAN = re.compile(r"""[\[\](){}'"]|, """)
_SCAN_INSIDE = re.compile(r"""[\[\](){}'"]""")  # inside brackets a ", " ends nothing


def end_of_constant(text: str, pos: int) -> int | None:
    """Where the constant starting at ``pos`` ends: at the next ``, `` outside brackets and quoted
    strings, or at the end; None when its brackets or quotes do not balance, or nest deeper than
    a constant may (MAX_NESTING)."""
    depth = 0
    i = pos
    while True:
        m = (_SCAN_INSIDE if depth else _SCAN).search(text, i)
        if m is None:
            return len(text) if depth == 0 else None
        ch = m.group()
        if ch == ", ":
            return m.start()
        if ch in "'\"":
            close = _close_quote(text, m.end(), ch)
            if close is None:
                return None
            i = close + 1
            continue
        if ch in "[({":
            depth += 1
            if depth > MAX_NESTING:
                return None
        else:
            depth -= 1
            if depth < 0:
                return None
        i = m.end()


def _close_quote(text: str, i: int, quote: str) -> int | None:
    while True:
        j = text.find(quote, i)
        if j < 0:
            return None
        k = j
        while k > i and text[k - 1] == "\\":
            k -= 1
        if (j - k) % 2 == 0:
            return j
        i = j + 1


# -- what a type accepts ---------------------------------------------------------------------------
_NUMBER = (int, float, SymDim)
_KINDS: dict[str, tuple] = {
    "int": (int, SymDim), "SymInt": (int, SymDim),
    "float": _NUMBER, "SymFloat": _NUMBER,
    "bool": (bool,), "SymBool": (bool,),
    "Scalar": (int, float, bool, complex, SymDim),
    "Tensor": (int, float, bool, complex),  # export passes Python numbers for Tensor parameters too
    "ScalarType": (DType, int), "Layout": (TorchAttr, int), "MemoryFormat": (TorchAttr, int),
    "Device": (Device, str),
}


def fits(piece: str, type_: str) -> bool:
    """Whether the printed ``piece`` can be an argument of schema type ``type_`` (a node can be
    anything; a type the table does not know takes anything)."""
    if type_.endswith("?"):
        if piece == "None":
            return True
        type_ = type_[:-1]
    if piece[:1] == "%":
        return True
    if type_.endswith("]"):  # T[] or T[N]; T[N] also takes one T
        base = type_[: type_.index("[")]
        if piece[:1] in "[(":
            return True
        return not type_.endswith("[]") and fits(piece, base)
    kinds = _KINDS.get(type_)
    if kinds is None:  # str, and types no printed text tells apart
        return True
    if not piece:
        return False
    if piece[0] == "(":
        return complex in kinds and complex_value(piece) is not None
    if piece.startswith("device("):
        return Device in kinds
    try:
        value = atom_value(piece)
    except ValueError:  # an int too long to convert: an int
        return int in kinds
    return type(value) in kinds


def _starts_like(text: str, pos: int, param: Param) -> bool:
    """A cheap first look before a split is tried: can an argument of ``param`` start at ``pos``?"""
    if param.is_str:
        return True
    ch = text[pos : pos + 1]
    if not ch or ch == " " or ch in ")]}":
        return False
    if ch in "[(":  # a list, a tuple, a complex number
        return param.type.rstrip("?").endswith("]") or param.type.startswith(("Scalar", "Tensor"))
    return ch != "{"


# -- splitting -------------------------------------------------------------------------------------
def split_positional(text: str, params: tuple[Param, ...], given=frozenset()) -> list[tuple[int, int]] | None:
    """The spans of the printed positional arguments in ``text`` (what lies between an op's
    parentheses), each fitting its parameter, none required left out (``given``: the names
    passed as keywords); None when no split fits."""
    n = len(text)
    required = [i for i, p in enumerate(params) if not p.has_default and p.name not in given]
    last_required = required[-1] if required else -1
    if n == 0 and last_required < 0:
        return []  # (an empty text with a string required is that string, empty)
    memo: dict[tuple[int, int], list | None] = {}
    attempts = [max(2, min(MAX_ATTEMPTS, MAX_SCANNED // (n + 1)))]

    def go(pos: int, i: int):
        """Spans for the arguments from ``pos`` on, the first one of ``params[i]``."""
        key = (pos, i)
        if key in memo:
            return memo[key]
        memo[key] = None
        found = None
        if i < len(params):
            found = _string(pos, i) if params[i].is_str else _other(pos, i)
        memo[key] = found
        return found

    def _rest(pos: int, end: int, i: int):
        if end == n:
            return [(pos, n)] if i >= last_required else None
        if attempts[0] <= 0:
            return None
        attempts[0] -= 1
        rest = go(end + 2, i + 1)
        return None if rest is None else [(pos, end), *rest]

    def _other(pos: int, i: int):
        end = end_of_constant(text, pos)
        if end is None or not fits(text[pos:end], params[i].type):
            return None
        return _rest(pos, end, i)

    def _string(pos: int, i: int):
        if i + 1 < len(params):  # the shortest string after which the rest fits
            nxt = params[i + 1]
            sep = text.find(", ", pos)
            while sep >= 0 and attempts[0] > 0:
                if _starts_like(text, sep + 2, nxt):
                    found = _rest(pos, sep, i)
                    if found is not None:
                        return found
                sep = text.find(", ", sep + 1)
        return _rest(pos, n, i)

    return go(0, 0)


_KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_]*): ")


def split_keywords(text: str, schema: Schema) -> list[tuple[str, int, int]] | None:
    """fx's keyword arguments ``name: value, ...`` (inside the braces) as (name, start, end) of
    each value. A string value runs up to the next ``, name: `` that names another parameter."""
    out: list[tuple[str, int, int]] = []
    n, pos = len(text), 0
    while pos < n:
        m = _KEY.match(text, pos)
        if m is None:
            return None
        name, start = m.group(1), m.end()
        param = schema.params.get(name)
        if param is not None and param.is_str:
            end = n
            sep = text.find(", ", start)
            while sep >= 0:
                k = _KEY.match(text, sep + 2)
                if k is not None and k.group(1) in schema.params and k.group(1) != name:
                    end = sep
                    break
                sep = text.find(", ", sep + 1)
        else:
            const_end = end_of_constant(text, start)
            if const_end is None:
                return None
            end = const_end
        out.append((name, start, end))
        pos = end + 2 if end < n else n
    return out


def schema_arguments(text: str, schema: Schema | None, given=frozenset()) -> list[tuple[int, int, Param | None]]:
    """The printed positional arguments of ``text`` as (start, end, parameter) runs: a string
    parameter's text, or (parameter None) a run of other arguments for one parse. Split by the
    schema where it fits, else the whole text is one run, as if no argument were a string."""
    spans = None if schema is None else split_positional(text, schema.positional, given)
    if spans is None:
        return [(0, len(text), None)] if text else []
    assert schema is not None  # spans come from a schema
    runs: list[tuple[int, int, Param | None]] = []
    for (start, end), p in zip(spans, schema.positional):
        if p.is_str:
            runs.append((start, end, p))
        elif runs and runs[-1][2] is None:
            runs[-1] = (runs[-1][0], end, None)
        else:
            runs.append((start, end, None))
    return runs


def str_value(piece: str, param: Param) -> str | None:
    """A string parameter's argument: the text itself (``None`` where the type is ``str?``)."""
    return None if piece == "None" and param.type == "str?" else piece
