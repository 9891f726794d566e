"""Reader of torch.fx's own graph print (``print(gm.graph)``): text → Module.

Targets are stored in the IR's form (see ir/targets.py); the fx text of a target that does
not map back exactly is kept in ``node.meta["fx_target"]``. ``get_attr`` lines become Weights.
``[num_users=N]`` is checked against the graph once it is read.
"""

from __future__ import annotations

from functools import lru_cache

from layerc.grammar._constants import ConstantCallbacks, call_value, clip, loc_of, read_atom, read_int
from layerc.grammar._lark import COMMON_TERMINALS, build_parser, parse_piece, run_parser
from layerc.grammar.op_schemas import (
    Schema,
    end_of_constant,
    schema_arguments,
    schema_of,
    split_keywords,
    split_positional,
    str_value,
)
from layerc.ir.diagnostics import Location, ParseError
from layerc.ir.graph import OP, OUTPUT, PLACEHOLDER, Graph, Module, Node, Value
from layerc.ir.targets import from_fx_target, to_fx_target

DESCRIBE = COMMON_TERMINALS | {
    "HEADER": "'graph():'",
    "LHS": "a node line '    %name : [num_users=N] = ...'",
    "PLACEHOLDER": "'placeholder[target=...]'",
    "GET_ATTR": "'get_attr[target=...]'",
    "CALL_HEAD": "'call_function[target=...](args = '",
    "_KWARGS": "', kwargs = '",
    "RETURN": "'return ...'",
    "FX_KEY": "a keyword 'name: '",
    "FX_ATOM": "a constant",
    "SCHEMA_CALL": "'call_function[target=...](args = '",
    "COMPLEX": "a complex number",
}

_SCHEMA_HEAD = "call_function[target="
_ARGS = "](args = ("
_KWARGS = "), kwargs = {"


class _FxBuilder(ConstantCallbacks):
    def reset(self) -> None:
        super().reset()
        self.declared: dict[str, tuple[int, Location]] = {}

    def start(self, c):
        for name, (count, loc) in self.declared.items():
            value = self.graph.value(name)
            if value is not None and len(value.users) != count:
                raise ParseError(f"'%{clip(name)}' says num_users={count}, but {len(value.users)} nodes read it", loc=loc)

    def header(self, c):
        (tok,) = c
        self.module = Module(generation=3)
        self.graph = Graph("(root)")
        self.graph.loc = loc_of(tok)
        text = tok.value
        if " -> " in text:
            self.graph.meta["fx_return_type"] = text[text.index(" -> ") + 4 : -1]
        self.module.graphs.append(self.graph)

    # -- lines -----------------------------------------------------------------------------
    def _lhs(self, tok):
        """``\\n    %name : [type ][num_users=N] = `` → (name, fx type or None, location)."""
        text = tok.value[5:]
        colon = text.index(" : ")
        name = text[1:colon]
        rest = text[colon + 3 : text.rindex("[")]
        loc = Location(tok.line + 1, 5)
        users = text[text.rindex("=", 0, len(text) - 3) + 1 : text.rindex("]")]
        self.declared[name] = (read_int(users, loc), loc)
        if self.graph.value(name) is not None:
            raise ParseError(f"redefinition of '%{clip(name)}'", loc=loc)
        return name, rest[:-1] if rest else None, loc

    def placeholder(self, c):
        lhs, ph, *default = c
        name, fx_type, loc = self._lhs(lhs)
        node = Node(PLACEHOLDER, name, target=ph.value[len("placeholder[target=") : -1], args=tuple(default), loc=loc)
        if fx_type:
            node.meta["fx_type"] = fx_type
        self.graph.append(node)

    def default(self, c):
        return c[0]

    def get_attr(self, c):
        lhs, ga = c
        name, fx_type, loc = self._lhs(lhs)
        w = self.graph.weight(name, loc=loc)
        w.target = ga.value[len("get_attr[target=") : -1]
        w.meta["fx_index"] = len(self.graph.nodes)
        if fx_type:
            w.meta["fx_type"] = fx_type

    def call(self, c):
        lhs, head, args, kwargs = c
        text = head.value
        opcode = text[: text.index("[")]
        fx_target = text[text.index("[target=") + 8 : -len("](args = ")]
        self._call(lhs, opcode, fx_target, args, kwargs)

    def schema_call(self, c):
        """A call of an aten overload that takes a string: arguments split by its schema."""
        lhs, tok = c
        text, line, col = tok.value, tok.line, tok.column
        fx_target = text[len(_SCHEMA_HEAD) : text.index(_ARGS)]
        schema = schema_of(fx_target)
        begin = text.index(_ARGS) + len(_ARGS)
        kw_at = _kwargs_start(text, begin, schema)
        if kw_at is None:
            raise ParseError("expected '), kwargs = {...})' at the end of the line", loc=Location(line, col + len(text) - 1))
        kw_text = text[kw_at + len(_KWARGS) : -2]
        kw_spans = split_keywords(kw_text, schema)
        arg_text = text[begin:kw_at]
        given = frozenset(name for name, _, _ in kw_spans)
        if _one_tuple(arg_text, schema, given):
            arg_text = arg_text[:-1]
        runs = schema_arguments(arg_text, schema, given)
        args = []
        for s, e, param in runs:
            at = Location(line, col + begin + s)
            if param is not None:
                args.append(str_value(arg_text[s:e], param))
            else:
                args += parse_piece(_piece_parser(), arg_text[s:e], "some_fx", at, DESCRIBE)
        kwargs = {}
        for name, start, end in kw_spans:
            at = Location(line, col + kw_at + len(_KWARGS) + start)
            kwargs[name] = self._schema_value(kw_text[start:end], schema.params.get(name), at)
        self._call(lhs, "call_function", fx_target, tuple(args), kwargs)

    def _schema_value(self, piece: str, param, at: Location):
        if param is not None and param.is_str:
            return str_value(piece, param)
        (value,) = parse_piece(_piece_parser(), piece, "some_fx", at, DESCRIBE)
        return value

    def some_fx(self, c):
        return c

    def _call(self, lhs, opcode: str, fx_target: str, args: tuple, kwargs: dict) -> None:
        name, fx_type, loc = self._lhs(lhs)
        target = from_fx_target(fx_target)
        node = Node(OP, name, target, args, kwargs, loc=loc, opcode=opcode)
        if to_fx_target(target, opcode) != fx_target:
            node.meta["fx_target"] = fx_target
        if fx_type:
            node.meta["fx_type"] = fx_type
        assert self.graph is not None  # a graph is open while lines are read
        self.graph.append(node)

    def return_line(self, c):
        tok, result = c
        name, n = "output", 0
        while name in self.graph:
            n += 1
            name = f"output_{n}"
        self.graph.append(Node(OUTPUT, name, args=(self._element(result),), loc=Location(tok.line + 1, 5)))

    # -- fx-formatted arguments: %refs, str() for everything else --------------------------
    def fx_ref(self, c):
        (tok,) = c
        return self._resolve(tok.value[1:], loc_of(tok))

    def fx_atom(self, c):
        (tok,) = c
        text = tok.value
        if text[-1] == " ":
            raise ParseError("a constant cannot end with a space", loc=Location(tok.line, tok.column + len(text) - 1))
        return read_atom(text, loc_of(tok))

    def fx_list(self, c):
        return list(c)

    def fx_tuple(self, c):
        return tuple(c)

    def fx_empty_tuple(self, c):
        return ()

    def fx_dict(self, c):
        return dict(c)

    fx_kwargs = fx_dict

    def fx_item(self, c):
        key, value = c
        return (key.value[:-2], value)

    def fx_call(self, c):
        head, *args = c
        return call_value(head.value[:-1], args, {}, loc_of(head))

    call_const = ConstantCallbacks.call

    def _resolve(self, name: str, loc: Location) -> Value:
        assert self.graph is not None  # a graph is open while lines are read
        value = self.graph.value(name)
        if value is None:
            raise ParseError(f"use of undefined value '%{clip(name)}'", loc=loc)
        return value


def _one_tuple(arg_text: str, schema: Schema, given: frozenset) -> bool:
    """``(a,)``: one argument and fx's comma; a text that ends with "," otherwise ends with a string."""
    if not arg_text.endswith(","):
        return False
    body = arg_text[:-1]
    spans = split_positional(body, schema.positional, given)
    return len(spans) == 1 if spans is not None else bool(body) and end_of_constant(body, 0) == len(body)


def _kwargs_start(text: str, begin: int, schema: Schema) -> int | None:
    """Where ``), kwargs = {...})`` begins in a call line whose arguments may hold anything: of the
    last few such texts, the rightmost after which the keywords split by the schema and before
    which the arguments do too; else the rightmost after which the keywords split."""
    if not text.endswith("})"):
        return None
    fallback = None
    i = text.rfind(_KWARGS, begin)
    for _ in range(8):
        if i < 0:
            break
        spans = split_keywords(text[i + len(_KWARGS) : -2], schema)
        if spans is not None:
            given = frozenset(name for name, _, _ in spans)
            args = text[begin:i]
            if _one_tuple(args, schema, given) or split_positional(args, schema.positional, given) is not None:
                return i
            fallback = i if fallback is None else fallback
        i = text.rfind(_KWARGS, begin, i)
    return fallback


@lru_cache(maxsize=1)
def _parser():
    builder = _FxBuilder()
    return build_parser("fx.lark", ["start"], builder), builder


@lru_cache(maxsize=1)
def _piece_parser():
    """The fx grammar started at a run of arguments, building into the same graph as the file's parse."""
    return build_parser("fx.lark", ["some_fx"], _parser()[1])


def parse_fx(text: str, path: str | None = None) -> Module:
    """Parse the text of ``print(gm.graph)`` into a one-graph Module."""
    parser, builder = _parser()
    builder.reset()
    try:
        run_parser(parser, text, "start", path, DESCRIBE)
        module = builder.module
    finally:
        builder.reset()
    module.source = path
    return module
