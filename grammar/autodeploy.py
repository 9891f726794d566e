"""Reader of AutoDeploy graph dumps: text → Module, built inline while Lark parses.

Names resolve as the writer defines them: a ``%name`` that no earlier line defined is a weight
or buffer (the writer gives ``get_attr`` nodes no line); inside containers, bare names are
references. A use's ``shape : dtype`` must agree with the value's definition; the first use
of a weight gives its type.
"""

from __future__ import annotations

from functools import lru_cache

from layerc.grammar._constants import Bare, ConstantCallbacks, clip, loc_of, read_atom, read_int
from layerc.grammar._lark import COMMON_TERMINALS, build_parser, parse_piece, run_parser, terminal_regex
from layerc.grammar.op_schemas import schema_arguments, schema_of, str_value
from layerc.ir.diagnostics import Location, ParseError
from layerc.ir.graph import OP, OUTPUT, PLACEHOLDER, Graph, Module, Node, Value, Weight
from layerc.ir.types import (
    UNKNOWN,
    TupleType,
    element_from_texts,
    split_top_level,
    type_from_texts,
)

#: How the parser names each terminal in "expected ..." messages.
DESCRIBE = COMMON_TERMINALS | {
    "TRANSFORM": "'# Transform: <name>'",
    "STAGE": "'# Stage: <stage>'",
    "FOUND": "'# GraphModules found: <N>'",
    "BANNER": "a line of 80 '='",
    "GM_NAME": "'# GraphModule: <name>'",
    "OUTPUT_KW": "'output'",
    "PLACEHOLDER_LINE": "a placeholder '%name : shape : dtype'",
    "PLACEHOLDER1_LINE": "a placeholder '%name : dtype'",
    "OP_HEAD": "an op line '%name = target(...) : shape : dtype'",
    "OP_LINE": "an op line '%name = target(...) : shape : dtype'",
    "SCHEMA_OP_LINE": "an op line '%name = target(...) : shape : dtype'",
    "COMPLEX": "a complex number",
    "REF_ARG": "an argument '%name : shape : dtype'",
    "OUT_INFO": "') : shape : dtype'",
    "OUT1_INFO": "') : dtype'",
    "TARGET": "an op target",
    "SHAPE": "a shape such as '8x7168', 'scalar' or '?'",
    "DTYPE": "a dtype such as 'torch.bfloat16'",
    "NAME_LIST": "a list",
    "INT_LIST": "a list",
    "_TSEP": "' : '",
}


class _Builder(ConstantCallbacks):
    """Lark callbacks that build the Module while the LALR parser reduces rules, in file order."""

    def reset(self) -> None:
        super().reset()
        self._typed: set[str] = set()  # names whose type a use has already fixed (tuple/list, weights)

    # -- structure -------------------------------------------------------------------------
    def header3(self, c):
        self._start_module(c[0], c[1], 3)
        found = c[2].value[len("# GraphModules found: ") : -1]
        if not found.isdigit():
            raise ParseError(f"'{clip(found)}' is not a count of GraphModules", loc=Location(c[2].line, 23))
        self.module.declared_graph_count = read_int(found, Location(c[2].line, 23))

    def header12(self, c):
        self._start_module(c[0], c[1], self.generation)
        self._start_graph(None, Location(3, 1))

    def _start_module(self, transform, stage, generation: int) -> None:
        self.module = Module(transform.value[len("# Transform: ") : -1], stage.value[len("# Stage: ") : -1], generation)

    def section_head(self, c):
        graphs = self.module.graphs
        if graphs and graphs[-1].name is None:
            graphs.pop()  # the unnamed graph a section-less v2 header would have held
        self._start_graph(c[1].value[len("# GraphModule: ") : -1], loc_of(c[1]))

    def _start_graph(self, name: str | None, loc: Location) -> None:
        self.graph = Graph(name)
        self.graph.loc = loc
        self._typed = set()
        assert self.module is not None  # the header started it
        self.module.graphs.append(self.graph)

    # -- lines -----------------------------------------------------------------------------
    def placeholder(self, c):
        (tok,) = c
        name, shape, dtype = tok.value[1:-1].split(" : ")
        self._define(Node(PLACEHOLDER, name, type=type_from_texts(shape, dtype), loc=loc_of(tok)))

    def placeholder1(self, c):
        (tok,) = c
        name, dtype = tok.value[1:-1].split(" : ")
        self._define(Node(PLACEHOLDER, name, type=type_from_texts("?", dtype), loc=loc_of(tok)))

    def op_line(self, c):
        (tok,) = c
        text = tok.value
        eq = text.index(" = ")
        lp = text.index("(", eq)
        close = text.index(") : ", lp)  # plain arguments hold no ')'
        args = []
        if close > lp + 1:
            col = tok.column + lp + 1
            pieces = iter(text[lp + 1 : close].split(", "))
            for piece in pieces:
                if piece[0] == "%":
                    args.append(self._use(piece, tok.line, col))
                elif piece[0] == "[":  # a flat list of ints: its elements are the next pieces
                    ints = [piece[1:]]
                    while ints[-1][-1] != "]":
                        ints.append(next(pieces))
                    ints[-1] = ints[-1][:-1]
                    args.append([read_int(w, Location(tok.line, col)) for w in ints])
                    piece = ", ".join(ints) + "[]"  # its width
                else:
                    value = read_atom(piece, Location(tok.line, col))
                    if type(value) is str and piece[-1] == " ":
                        raise ParseError("a constant cannot end with a space", loc=Location(tok.line, col + len(piece) - 1))
                    args.append(value)
                col += len(piece) + 2
        out = _out_type_text(text[close + 4 :], tok.line, tok.column + close + 4)
        self._define(Node(OP, text[1:eq], text[eq + 3 : lp], tuple(args), type=out, loc=loc_of(tok)))

    def op(self, c):
        head, *args, out = c
        name, target = _split_head(head)
        self._define(Node(OP, name, target, _top(args), type=_out_type(out), loc=loc_of(head)))

    def op1(self, c):
        head, *args, out = c
        name, target = _split_head(head)
        self._define(Node(OP, name, target, _top(args), type=_dtype_only(out.value[4:-1]), loc=loc_of(head)))

    # -- an op whose schema takes a string: split by the schema, each argument parsed alone ----
    def schema_op(self, c):
        self._schema_line(c[0], 2)

    def schema_op1(self, c):
        self._schema_line(c[0], 1)

    def _schema_line(self, tok, generation: int) -> None:
        text, line, col = tok.value, tok.line, tok.column
        eq = text.index(" = ")
        lp = text.index("(", eq)
        target = text[eq + 3 : lp]
        close = _out_info_start(text, lp + 1, generation)
        if close is None:
            want = DESCRIBE["OUT1_INFO" if generation == 1 else "OUT_INFO"]
            raise ParseError(f"expected {want} at the end of the op line", loc=Location(line, col + len(text) - 1))
        start = "some_args1" if generation == 1 else "some_args"
        args = []
        for begin, end, param in schema_arguments(text[lp + 1 : close], schema_of(target)):
            piece = text[lp + 1 + begin : lp + 1 + end]
            if param is not None:
                args.append(str_value(piece, param))
            else:
                at = Location(line, col + lp + 1 + begin)
                args += parse_piece(_piece_parser(), piece, start, at, DESCRIBE)
        out = text[close + 4 :]
        t = _dtype_only(out[:-1]) if generation == 1 else _out_type_text(out, line, col + close + 4)
        self._define(Node(OP, text[1:eq], target, tuple(args), type=t, loc=loc_of(tok)))

    def some_args(self, c):
        return _top(c)

    some_args1 = some_args

    def output(self, c):
        kw, *items = c
        name = "output"
        n = 0
        while name in self.graph:
            n += 1
            name = f"output_{n}"
        self._define(Node(OUTPUT, name, args=(output_result(_top(items)),), loc=loc_of(kw)))

    def _define(self, node: Node) -> None:
        assert self.graph is not None  # a graph is open while lines are read
        prior = self.graph.value(node.name)
        if prior is None:
            self.graph.append(node)
            return
        assert prior.loc is not None  # the reader places every value it makes
        if isinstance(prior, Weight):
            raise ParseError(
                f"'%{clip(node.name)}' is defined here but used earlier, at line {prior.loc.line}",
                loc=node.loc,
            )
        raise ParseError(f"redefinition of '%{clip(node.name)}' (first defined at line {prior.loc.line})", loc=node.loc)

    # -- references ------------------------------------------------------------------------
    def ref_arg(self, c):
        (tok,) = c
        return self._use(tok.value, tok.line, tok.column)

    def _use(self, text: str, line: int, column: int) -> Value:
        """``%name : shape : dtype`` where a value is read: check it against what is known."""
        name, shape, dtype = text[1:].split(" : ")
        try:
            used = type_from_texts(shape, dtype)  # cached: equal texts give the same object
        except ParseError as e:  # a size past 64 bits
            e.loc = Location(line, column + len(name) + 4)
            raise
        assert self.graph is not None  # a graph is open while lines are read
        value = self.graph.value(name)
        if value is None:
            self._typed.add(name)
            return self.graph.weight(name, used, Location(line, column))
        if isinstance(value, Weight) and name not in self._typed:
            value.type = used  # first annotated use (earlier ones were bare names in a list)
            self._typed.add(name)
            return value
        t = value.type
        if used is t or used == t:
            return value
        if isinstance(t, TupleType) and shape == "?":
            if dtype == t.container:
                return value
            if dtype in ("tuple", "list") and name not in self._typed:
                value.type = TupleType(t.elements, dtype)  # the first use tells the container kind
                self._typed.add(name)
                return value
        raise ParseError(
            f"'%{clip(name)}' is used as '{clip(shape)} : {clip(dtype)}' but is '{clip(t.shape_text())} : {clip(t.dtype_text())}'"
            + (f" (line {value.loc.line})" if value.loc else ""),
            loc=Location(line, column + len(name) + 4),
        )

    def bare_ref(self, c):
        (ref,) = c
        return self._resolve(ref.value[1:], loc_of(ref))

    def _resolve(self, name: str, loc: Location) -> Value:
        assert self.graph is not None  # a graph is open while lines are read
        value = self.graph.value(name)
        return value if value is not None else self.graph.weight(name, UNKNOWN, loc)


def _split_head(tok) -> tuple[str, str]:
    """``%name = target(`` → (name, target)."""
    text = tok.value
    eq = text.index(" = ")
    return text[1:eq], text[eq + 3 : -1]


def _out_info_start(text: str, start: int, generation: int) -> int | None:
    """Where ``) : out-info`` begins in an op line whose arguments may hold anything: the ``) : ``
    after which the line is an out-info. It is one of the last few (a multi-output one holds two,
    a shape such as ``Max(1, s0)`` one more)."""
    rx = terminal_regex("autodeploy.lark", "OUT1_INFO" if generation == 1 else "OUT_INFO")
    i = text.rfind(") : ", start)
    for _ in range(4):
        if i < 0:
            break
        if rx.fullmatch(text, i):
            return i
        i = text.rfind(") : ", start, i)
    return None


def _dtype_only(dtype: str):
    """The type a generation-1 op line gives after ``) : ``."""
    return UNKNOWN if dtype == "N/A" else type_from_texts("?", dtype)


def _out_type(tok):
    return _out_type_text(tok.value[4:], tok.line, tok.column + 4)


def _out_type_text(text: str, line: int, column: int):
    """The type an op's own line gives after ``) : ``: single, multi-output, or none (``? : N/A``)."""
    text = text[:-1]  # the newline
    if text[0] != "(":
        shape, dtype = text.split(" : ")
        return UNKNOWN if shape == "?" and dtype == "N/A" else type_from_texts(shape, dtype)
    mid = text.index(") : (")
    shapes = split_top_level(text[1:mid])
    dtypes = text[mid + 5 : -1].split(", ")
    if len(shapes) != len(dtypes):
        raise ParseError(
            f"{len(shapes)} shapes but {len(dtypes)} dtypes in a multi-output annotation",
            loc=Location(line, column),
        )
    return TupleType(tuple(element_from_texts(s, d) for s, d in zip(shapes, dtypes)))


def output_result(items: tuple):
    """The fx output value behind ``output a, b``: the writer prints a tuple's items, or one item."""
    if len(items) == 1 and not isinstance(items[0], (list, tuple)):
        return items[0]
    return items


def _top(args: list) -> tuple:
    """At the top level a bare word is a constant: a plain string, or a size such as ``s0``."""
    return tuple(a.value if type(a) is Bare else a for a in args)


class _Pinpoint:
    """Finds where inside a composite terminal (a placeholder line, ``%y = target(``, an
    annotated argument, ``) : out-info``) the text stops matching, using the grammar's own
    sub-terminal regexes."""

    def __init__(self):
        def rx(name):
            return terminal_regex("autodeploy.lark", name)

        self.name, self.shape, self.dtype, self.target = rx("NAME"), rx("SHAPE"), rx("DTYPE"), rx("TARGET")

    def __call__(self, line: str, column: int):
        pos = column - 1
        if pos >= len(line):
            return None
        if line.startswith("%", pos):
            if pos == 0 and " = " in line[: line.find(" : ") if " : " in line else len(line)]:
                steps = [("%", "'%'"), (self.name, "a name"), (" = ", "' = '"), (self.target, DESCRIBE["TARGET"]), ("(", "'('")]
                return self._walk(line, pos, steps, end=False)
            sep = "' : ' (a placeholder) or ' = ' (an op)" if pos == 0 else "' : '"
            steps = [("%", "'%'"), (self.name, "a name"), (" : ", sep), (self.shape, DESCRIBE["SHAPE"]), (" : ", "' : '"), (self.dtype, DESCRIBE["DTYPE"])]
            return self._walk(line, pos, steps, end=pos == 0)
        if line.startswith(")", pos):
            steps = [(") : ", "' : ' after ')'")]
            if line.startswith(") : (", pos):
                return self._walk_multi(line, pos + 5)
            steps += [(self.shape, DESCRIBE["SHAPE"]), (" : ", "' : '"), (self.dtype, DESCRIBE["DTYPE"])]
            return self._walk(line, pos, steps, end=True)
        return None

    def _walk(self, line: str, pos: int, steps, end: bool):
        for want, what in steps:
            if isinstance(want, str):
                if not line.startswith(want, pos):
                    return pos + 1, f"expected {what}"
                pos += len(want)
            else:
                m = want.match(line, pos)
                if m is None or m.end() == pos:
                    return pos + 1, f"expected {what}"
                pos = m.end()
        if end and pos < len(line):
            return pos + 1, f"unexpected '{line[pos:pos + 20]}' after the dtype"
        return None

    def _walk_multi(self, line: str, pos: int):
        for rx, what, close in ((self.shape, DESCRIBE["SHAPE"], ") : ("), (self.dtype, DESCRIBE["DTYPE"], ")")):
            while True:
                m = rx.match(line, pos)
                if m is None or m.end() == pos:
                    return pos + 1, f"expected {what}"
                pos = m.end()
                if line.startswith(", ", pos):
                    pos += 2
                    continue
                if not line.startswith(close, pos):
                    return pos + 1, f"expected ', ' or '{close}'"
                pos += len(close)
                break
        if pos < len(line):
            return pos + 1, f"unexpected '{line[pos:pos + 20]}' after the dtypes"
        return None


@lru_cache(maxsize=1)
def _parser():
    builder = _Builder()
    # An op line's own parenthesis and the output line open the argument list, as fx's "(args = (" does.
    nesting = {"openers": ("OP_HEAD", "OUTPUT_KW"), "closers": ("OUT_INFO", "OUT1_INFO", "_NL")}
    return build_parser("autodeploy.lark", ["start_v3", "start_v2", "start_v1"], builder, **nesting), builder


@lru_cache(maxsize=1)
def _piece_parser():
    """The dump grammar started at a run of arguments, building into the same graph as the file's parse."""
    return build_parser("autodeploy.lark", ["some_args", "some_args1"], _parser()[1])


@lru_cache(maxsize=1)
def _pinpointer() -> _Pinpoint:
    return _Pinpoint()


def _refine(line: str, column: int):
    return _pinpointer()(line, column)


def detect_generation(text: str) -> int:
    """3 when the header counts GraphModules; else 2 if annotations carry shapes, 1 if not."""
    head = text[:400].split("\n", 3)
    if len(head) > 2 and head[2].startswith("# GraphModules found:"):
        return 3
    for line in text.split("\n", 200)[:200]:
        if line.startswith("%"):
            return 2 if line.count(" : ") >= 2 else 1
    return 2


def parse_autodeploy(text: str, path: str | None = None) -> Module:
    """Parse one dump file's text into a Module (not yet verified)."""
    if text and not text.endswith("\n"):
        text += "\n"
    generation = detect_generation(text)
    parser, builder = _parser()
    builder.reset()
    builder.generation = generation
    try:
        run_parser(parser, text, f"start_v{generation}", path, DESCRIBE, _refine)
        module = builder.module
    finally:
        builder.reset()
    if module is None:  # pragma: no cover - the grammar always reduces a header first
        raise ParseError("empty dump", path, Location(1, 1))
    module.source = path
    return module
