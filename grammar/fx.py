"""Reader of torch.fx's own graph print (``print(gm.graph)``): text → Module.

Targets are stored in the IR's form (see ir/targets.py); the fx text of a target that does
not map back exactly is kept in ``node.meta["fx_target"]``. ``get_attr`` lines become Weights.
``[num_users=N]`` is checked against the graph once it is read.
"""

from __future__ import annotations

from functools import lru_cache


from layerc.grammar._constants import ConstantCallbacks, clip, loc_of, read_atom, read_int
from layerc.grammar._lark import COMMON_TERMINALS, build_parser, run_parser
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
}


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
        name, fx_type, loc = self._lhs(lhs)
        text = head.value
        opcode = text[: text.index("[")]
        fx_target = text[text.index("[target=") + 8 : -len("](args = ")]
        target = from_fx_target(fx_target)
        node = Node(OP, name, target, args, kwargs, loc=loc, opcode=opcode)
        if to_fx_target(target, opcode) != fx_target:
            node.meta["fx_target"] = fx_target
        if fx_type:
            node.meta["fx_type"] = fx_type
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
        if head.value == "slice(" and 1 <= len(args) <= 3:
            return slice(*args)
        raise ParseError(f"unsupported constant '{clip(head.value[:-1])}(...)'", loc=loc_of(head))

    call_const = ConstantCallbacks.call

    def _resolve(self, name: str, loc: Location) -> Value:
        value = self.graph.value(name)
        if value is None:
            raise ParseError(f"use of undefined value '%{clip(name)}'", loc=loc)
        return value


@lru_cache(maxsize=1)
def _parser():
    builder = _FxBuilder()
    return build_parser("fx.lark", ["start"], builder), builder


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
