"""Reader of the Triton warp-specialization memory-planner dumps → ``MemoryModule``.

Two inputs (reference/seed-origins.md §1):

* a ``TRITON_DUMP_WS_GRAPHS`` directory: ``smem_liveness_N.dot``, ``combined_graph_N.dot``,
  ``tmem_liveness_N.dot`` found by prefix with any ``N`` (the counter is process-global and the
  documented numbering is wrong); files keep their marker lines, or may have been cleaned to the
  bare ``digraph``;
* a debug log (stderr of ``TRITON_LLVM_DEBUG_ONLY=nvgpu-ws-memory-planner MLIR_ENABLE_DUMP=1``,
  plain or ``.gz``): the graphs between their ``=== ... ===`` markers, among IR dumps and debug
  lines; the ``tt.func`` last named before a graph names its kernel.

Dumps come in planner order per kernel (SMEM with allocator 0, combined, TMEM), so a new SMEM
graph, a second combined graph, a second TMEM graph or another ``tt.func`` name starts the next
kernel. Each graph's DOT text is parsed by ``ws_dot.lark`` (positions kept) and read into the
kernel's tables: clusters become buffers, channel nodes and summary rows; partition clusters, op
nodes and channel edges become partitions, key ops and channel edges. Text that breaks the
emitters' format is a ``ParseError`` at its line and column; disagreements between parts that
are each well formed are left to ``mem-check``.

Hostile text stays cheap: files are read through ``layerc.grammar.inputs`` (regular files only,
decompression within its limit, a bad UTF-8 byte a located error); an id or label longer than
``MAX_LABEL`` characters, an <HTML> label nested deeper than ``MAX_NESTING`` tags (or ``{ }`` and
``[ ]`` nested deeper, which the shared token watch refuses) and a number of ``MAX_NUMBER`` or more
(the planner's ids, operation ids, counts and sizes are 32-bit; no GPU has 2 GiB of SMEM) are
located errors, so nothing later is sized by what the input claims.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from lark import Token, Transformer

from layerc.grammar._lark import MAX_NESTING, build_parser, run_parser
from layerc.grammar.inputs import check_file, read_text
from layerc.ir.diagnostics import LayercError, Location, ParseError, source_line_at
from layerc.ir.memory import (
    COMBINED_GRAPH, OTHER, SMEM, SMEM_GRAPH, TMEM, TMEM_GRAPH, Buffers, ChannelEdges, ChannelNodes, Graph, Kernel,
    KeyOps, MemoryModule, OpPartitions, Partitions, Summary,
)
from layerc.ir.trace import NONE

#: begin marker → (graph kind, end marker); the ``digraph`` name each kind must carry.
MARKERS = {
    "=== SMEM Buffer Liveness Graph ===": (SMEM_GRAPH, "=== End SMEM Buffer Liveness Graph ==="),
    "=== TMEM Buffer Liveness Graph ===": (TMEM_GRAPH, "=== End TMEM Buffer Liveness Graph ==="),
    "=== Combined Key Ops + Channel Graph (DOT format) ===": (COMBINED_GRAPH, "=== End Combined Graph ==="),
}
DIGRAPH_NAMES = {SMEM_GRAPH: "SmemBufferLiveness", TMEM_GRAPH: "TmemBufferLiveness", COMBINED_GRAPH: "CombinedGraph"}
FILE_PREFIXES = {SMEM_GRAPH: "smem_liveness_", COMBINED_GRAPH: "combined_graph_", TMEM_GRAPH: "tmem_liveness_"}

_BEGIN = re.compile(r"^[ \t]*(" + "|".join(re.escape(m) for m in MARKERS) + r")[ \t\r]*$", re.M)
_BARE = re.compile(r"^digraph[ \t]+(" + "|".join(DIGRAPH_NAMES.values()) + r")\b", re.M)
_FUNC = re.compile(r"\btt\.func\s+(?:(?:public|private|nested)\s+)?@([\w$.\-]+)")
_DUMPED = re.compile(r"^Dumped (?:SMEM liveness|TMEM liveness|combined graph) to: (.*)$", re.M)

DESCRIBE = {
    "STRICT": "'strict'", "GRAPH_KIND": "'digraph'", "ATTR_KIND": "'node', 'edge' or 'graph'", "SUBGRAPH": "'subgraph'",
    "NAME": "a name", "NUMERAL": "a number", "QUOTED": "a quoted string", "HTML": "an <HTML> label",
    "_ARROW": "'->'", "_COMMA": "','", "_SEMI": "';'", "LBRACE": "'{'", "RBRACE": "'}'", "LSQB": "'['", "RSQB": "']'",
    "EQUAL": "'='",
}


#: The longest id or label read, in characters. A summary table of a few hundred buffers is tens of
#: KB; a longer text is refused before a regular expression, Graphviz or a picture works on it.
MAX_LABEL = 1 << 20
#: Every number in a dump is below this: ids, operation ids and counts are 32-bit in the planner,
#: and no GPU has 2 GiB of shared memory, so nothing later is sized by a larger claim.
MAX_NUMBER = 2**31


# -- the DOT tree (ws_dot.lark) --------------------------------------------------------------------
@dataclass
class DotNode:
    id: Token
    attrs: dict[str, Token]


@dataclass
class DotEdge:
    ids: list[Token]
    attrs: dict[str, Token]


@dataclass
class DotSub:
    keyword: Token
    id: Token | None
    stmts: list


@dataclass
class DotGraph:
    keyword: Token
    id: Token | None
    stmts: list


class _DotTree(Transformer):
    """Statements as small objects that keep their tokens (and so their positions); every id is
    :func:`checked` as its statement is built."""

    def start(self, c):
        c = [checked(x) if isinstance(x, Token) else x for x in c if x is not None]
        i = 1 if c[0].type == "STRICT" else 0
        has_id = len(c) > i + 1 and isinstance(c[i + 1], Token)
        return DotGraph(c[i], c[i + 1] if has_id else None, c[i + 1 + has_id :])

    def stmt(self, c):
        return None

    def node_stmt(self, c):
        return DotNode(checked(c[0]), c[1] if len(c) > 1 else {})

    def edge_stmt(self, c):
        attrs = c[-1] if isinstance(c[-1], dict) else {}
        return DotEdge([checked(t) for t in c if isinstance(t, Token)], attrs)

    def attr_stmt(self, c):
        return ("default", c[0], c[1])

    def assign(self, c):
        return ("assign", checked(c[0]), checked(c[1]))

    def subgraph(self, c):
        c = [x for x in c if x is not None]
        has_id = len(c) > 1 and isinstance(c[1], Token)
        return DotSub(c[0], checked(c[1]) if has_id else None, c[1 + has_id :])

    def attrs(self, c):
        return {k.value: v for k, v in c}

    def attr(self, c):
        return (checked(c[0]), checked(c[1]))


def checked(tok: Token) -> Token:
    """``tok`` once it is at most MAX_LABEL characters long and, an <HTML> string, well nested."""
    if len(tok.value) > MAX_LABEL:
        raise ParseError(f"an id or label of {len(tok.value):,} characters (layerc reads up to {MAX_LABEL:,})", loc=position(tok))
    if tok.type == "HTML":
        _check_tags(tok)
    return tok


def _check_tags(tok: Token) -> None:
    """Graphviz HTML labels are XML: a tag left open or closed by another stops ``dot`` from
    drawing the graph, and tags nested past MAX_NESTING make its HTML parser recurse that deep;
    both are errors here, where they can be located."""
    raw = raw_of(tok)
    open_tags: list[tuple[str, int]] = []
    for m in _TAG.finditer(raw):
        closing, name, empty = m.group(1), m.group(2).upper(), m.group(3)
        if empty:
            continue
        if not closing:
            open_tags.append((name, m.start()))
            if len(open_tags) > MAX_NESTING:
                raise ParseError(f"nesting deeper than {MAX_NESTING}", loc=position(tok, m.start()))
        elif not open_tags or open_tags[-1][0] != name:
            expected = f"</{_shown(open_tags[-1][0])}>" if open_tags else "no closing tag"
            raise ParseError(f"this HTML label has </{_shown(name)}> where {expected} belongs", loc=position(tok, m.start()))
        else:
            open_tags.pop()
    if open_tags:
        name, at = open_tags[-1]
        raise ParseError(f"this HTML label never closes <{_shown(name)}>", loc=position(tok, at))


def _shown(text: str, limit: int = 80) -> str:
    """Input text quoted in a message: cut to ``limit`` characters."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


@lru_cache(maxsize=1)
def _parser():
    return build_parser("ws_dot.lark", ["start"], _DotTree())


def text_of(tok: Token) -> str:
    """An id's value: quotes and ``\\"`` escapes removed, <HTML> brackets removed."""
    v = tok.value
    if tok.type == "QUOTED":
        return v[1:-1].replace('\\"', '"')
    if tok.type == "HTML":
        return v[1:-1]
    return v


def raw_of(tok: Token) -> str:
    """An id's text inside its quotes, escapes kept (labels are matched on this, so that an
    offset in it is an offset in the file)."""
    v = tok.value
    return v[1:-1] if tok.type in ("QUOTED", "HTML") else v


def position(tok: Token, offset: int = 0) -> Location:
    """Where character ``offset`` of ``raw_of(tok)`` stands in the parsed text."""
    assert tok.line is not None and tok.column is not None  # the lexer places every token
    at = (1 if tok.type in ("QUOTED", "HTML") else 0) + offset
    newlines = _newlines(tok.value) if "\n" in tok.value else ()
    before = bisect_left(newlines, at)  # the newlines before character ``at``
    if before == 0:
        return Location(tok.line, tok.column + at)
    return Location(tok.line + before, at - newlines[before - 1])


@lru_cache(maxsize=8)
def _newlines(text: str) -> list[int]:
    """Offsets of the newlines in a multi-line token, once per token: a summary table locates
    each of its rows in it."""
    return [m.start() for m in re.finditer("\n", text)]


# -- label formats ---------------------------------------------------------------------------------
_SMEM_CLUSTER = re.compile(r"cluster_smem_(\d+)")
_TMEM_CLUSTER = re.compile(r"cluster_tmem_(\d+)")
_PARTITION_CLUSTER = re.compile(r"cluster_partition_(-?\d+)")
_SMEM_LABEL = re.compile(r"(?P<name>.*) B(?P<bid>\d+) \[(?P<start>\d+)-(?P<end>\d+)\) size=(?P<size>\d+)")
_TMEM_LABEL = re.compile(
    r"(?P<name>.*?)(?: (?P<rows>\d+)x(?P<cols>\d+))? \[(?P<start>\d+)-(?P<end>\d+)\)(?: \[(?P<d>\d+) OperandD\])?")
_SMEM_CHANNEL = re.compile(r"ch(?P<id>\d+)(?: \((?P<src>\d+) to (?P<dst>\d+)\))?")
_TMEM_CHANNEL = re.compile(r"ch(?P<id>\d+)(?P<d> \[D\])?(?: \((?P<src>\d+) to (?P<dst>\d+)\))?")
_OP_NODE = re.compile(r"op_op_(\d+)")
_CHANNEL_NODE = re.compile(r"(?P<mem>smem|tmem)_(?P<index>\d+)_(?:ch(?P<ch>\d+)|info)")
# ``args`` runs to the line's last character (a ')', checked first): ``(?s:.*)`` jumps there at
# once, where ``.*`` would scan the line again for every ' = ' in it
_OP_LINE = re.compile(r"(?:\[(?P<id>\d+)\] )?(?:(?P<out>.+?) = )?(?P<op>[A-Za-z_][\w.$]*)\((?P<args>(?s:.*))\)")
_DEPTH = re.compile(r"(?:(?P<shape>.*), )?L(?P<depth>\d+)")
_EDGE_LABEL = re.compile(
    r'ch(?P<id>\d+)(?: B(?P<b>\d+))?(?:\\n\\"(?P<loc>.*)\\")?(?:\\n\((?P<kind>SMEM|TMEM)\)(?P<d> \[D\])?)?')
_INTERVAL = re.compile(r"\[(\d+)-(\d+)\)")
# a row or cell ends at the first tag that _TAG reads as its closing tag (``</TR>``, ``</tr >``),
# so that, the table being balanced, no search runs on past its own row
_ROW = re.compile(r"<TR>(.*?)</TR(?![A-Za-z])[^<>]*>", re.S | re.I)
_TAG = re.compile(r"<(/?)([A-Za-z]+)[^<>]*?(/?)>")
_CELL = re.compile(r"<TD>(.*?)</TD(?![A-Za-z])[^<>]*>", re.S | re.I)
_HEADER = {
    SMEM_GRAPH: ["Name", "BufferID", "Size", "Channels", "Liveness"],
    TMEM_GRAPH: ["Name", "Size", "Channels", "Liveness", "OperandD"],
}
EMPTY_LABELS = {"No SMEM allocations", "No TMEM allocations", "No liveness intervals"}


# -- reading ---------------------------------------------------------------------------------------
def holds_graphs(text: str) -> bool:
    """Whether ``text`` holds a planner graph (a marked section or a bare ``digraph``)."""
    return bool(_BEGIN.search(text) or _BARE.search(text))


def read_ws_memory(path: str | Path) -> MemoryModule:
    """A dump directory or a debug log (``.gz`` too)."""
    p = check_file(path, directory=True, what="file or directory")
    if p.is_dir():
        return read_dump_dir(p)
    return read_log(p)


def read_dump_dir(directory: str | Path) -> MemoryModule:
    directory = check_file(directory, directory=True, what="directory")
    found = []
    for kind, prefix in FILE_PREFIXES.items():
        for f in directory.glob(prefix + "*.dot"):
            found.append((_dump_order(f.name[len(prefix) : -len(".dot")]), f.name, kind, f))
    if not found:
        raise LayercError(f"no smem_liveness_*.dot, combined_graph_*.dot or tmem_liveness_*.dot in {directory} "
                          "(is it the TRITON_DUMP_WS_GRAPHS directory?)", str(directory))
    found.sort(key=lambda x: (x[0], list(FILE_PREFIXES).index(x[2]), x[1]))
    reader = _Reader(MemoryModule(str(directory)))
    for _, _, kind, f in found:
        text = read_text(f)
        graphs = reader.scan(str(f), text, bare_ok=True)
        if not graphs:
            raise ParseError(f"no {DIGRAPH_NAMES[kind]} graph in this file", str(f), Location(1, 1), source_line_at(text, 1))
        for g in graphs:
            if g.kind != kind:
                raise ParseError(f"the file is named like a {kind} dump but holds a {g.kind} graph", str(f), Location(g.line, 1),
                                 source_line_at(text, g.line))
            reader.add(g)
    return reader.finish()


def _dump_order(suffix: str) -> tuple[int, int, str]:
    """Dump files sort by the process-global counter in their names (compared as digit strings,
    so that any count of digits orders), those without one last."""
    if suffix.isascii() and suffix.isdigit():
        digits = suffix.lstrip("0") or "0"
        return (0, len(digits), digits)
    return (1, 0, "")


def read_log(path: str | Path) -> MemoryModule:
    return read_log_text(read_text(path), str(path))


def read_log_text(text: str, path: str = "<log>") -> MemoryModule:
    reader = _Reader(MemoryModule(path))
    graphs = reader.scan(path, text, bare_ok=True)
    if not graphs:
        named = _DUMPED.findall(text)
        hint = (f"; it names dump files (e.g. {_shown(named[0].strip())}): pass their directory" if named else
                " (run with TRITON_LLVM_DEBUG_ONLY=nvgpu-ws-memory-planner, or pass the TRITON_DUMP_WS_GRAPHS directory)")
        raise LayercError("no memory-planner graphs ('=== SMEM Buffer Liveness Graph ===' ...) in this log" + hint, path)
    funcs = list(_FUNC.finditer(text))
    positions = [m.start() for m in funcs]
    for g in graphs:
        i = bisect_right(positions, g.offset) - 1
        g.kernel_name = _kernel_name(funcs[i], text, path) if i >= 0 else None
        reader.add(g)
    return reader.finish()


def _kernel_name(m: re.Match, text: str, path: str) -> str:
    """The ``tt.func`` name that names the graphs after it; one longer than MAX_LABEL is an error
    at its place (it would name files, titles and tracks)."""
    name = m.group(1)
    if len(name) > MAX_LABEL:
        line = text.count("\n", 0, m.start(1)) + 1
        column = m.start(1) - (text.rfind("\n", 0, m.start(1)) + 1) + 1
        raise ParseError(f"a kernel name of {len(name):,} characters (layerc reads up to {MAX_LABEL:,})", path,
                         Location(line, column), source_line_at(text, line))
    return name


@dataclass
class _Found:
    """A graph located in a text, not yet parsed."""

    kind: str
    path: str
    file: int
    text: str
    offset: int  #: where the graph's block starts in the text
    line: int  #: the first line of the DOT body (1-based)
    body: str
    kernel_name: str | None = None


class _Reader:
    def __init__(self, module: MemoryModule):
        self.m = module
        self.pending: list[_Found] = []

    # locating graphs ----------------------------------------------------------------------------
    def scan(self, path: str, text: str, bare_ok: bool) -> list[_Found]:
        file = self.m.files.intern(path)
        self.m.texts[file] = text
        found: list[_Found] = []
        line, counted = 1, 0
        begins = list(_BEGIN.finditer(text))
        for i, m in enumerate(begins):
            line += text.count("\n", counted, m.start())
            counted = m.start()
            kind, end_marker = MARKERS[m.group(1)]
            body_start = text.find("\n", m.end())
            body_start = len(text) if body_start < 0 else body_start + 1
            limit = begins[i + 1].start() if i + 1 < len(begins) else len(text)
            end = _find_line(text, end_marker, body_start, limit)
            if end < 0:
                raise ParseError(f"no '{end_marker}' line after this graph (a cut-off log?)", path,
                                 Location(line, m.start(1) - m.start() + 1), source_line_at(text, line))
            found.append(_Found(kind, path, file, text, m.start(), line + 1, text[body_start:end]))
        if not begins and bare_ok:
            bare = list(_BARE.finditer(text))
            for i, m in enumerate(bare):
                line += text.count("\n", counted, m.start())
                counted = m.start()
                limit = bare[i + 1].start() if i + 1 < len(bare) else len(text)  # each search stops at the next graph
                close = _find_line(text, "}", m.start(), limit, indent=False)
                end = limit if close < 0 else close + 1
                kind = next(k for k, v in DIGRAPH_NAMES.items() if v == m.group(1))
                found.append(_Found(kind, path, file, text, m.start(), line, text[m.start() : end]))
        return found

    def add(self, g: _Found) -> None:
        self.pending.append(g)

    # building kernels ----------------------------------------------------------------------------
    def finish(self) -> MemoryModule:
        kernel: _KernelRows | None = None
        kernels: list[_KernelRows] = []
        for g in self.pending:
            new = (
                kernel is None
                or g.kind == SMEM_GRAPH
                or g.kind in kernel.kinds
                or (g.kind == COMBINED_GRAPH and TMEM_GRAPH in kernel.kinds)
                or (g.kernel_name is not None and kernel.name is not None and g.kernel_name != kernel.name)
            )
            if new:
                kernel = _KernelRows(self.m, len(kernels), g.kernel_name)
                kernels.append(kernel)
            assert kernel is not None
            kernel.name = kernel.name or g.kernel_name
            kernel.read(g)
        self.m.kernels = [k.build() for k in kernels]
        return self.m


def _find_line(text: str, line: str, start: int, limit: int, indent: bool = True) -> int:
    """Offset of the first line in ``text[start:limit]`` that is ``line`` (trailing blanks allowed,
    leading ones with ``indent``)."""
    rx = re.compile((r"^[ \t]*" if indent else "^") + re.escape(line) + r"[ \t\r]*$", re.M)
    m = rx.search(text, start, limit)
    return m.start() if m else -1


class _KernelRows:
    """One kernel's rows while its graphs are read."""

    def __init__(self, module: MemoryModule, index: int, name: str | None):
        self.m = module
        self.index = index
        self.name = name
        self.kinds: set[str] = set()
        self.graphs: dict[str, Graph] = {}
        self.buffers: dict[str, list] = {k: [] for k in Buffers.COLUMNS}
        self.summary: dict[str, list] = {k: [] for k in Summary.COLUMNS}
        self.nodes: dict[str, list] = {k: [] for k in ChannelNodes.COLUMNS}
        self.edges: dict[str, list] = {k: [] for k in ChannelEdges.COLUMNS}
        self.ops: dict[str, list] = {k: [] for k in KeyOps.COLUMNS}
        self.partitions: dict[str, list] = {k: [] for k in Partitions.COLUMNS}
        self.members: dict[str, list] = {k: [] for k in OpPartitions.COLUMNS}
        self.operands: list[int] = []
        self.op_row: dict[tuple[int, str], int] = {}

    def build(self) -> Kernel:
        return Kernel(
            self.index, self.name or f"kernel {self.index}", self.graphs, Buffers.from_columns(self.buffers),
            Summary.from_columns(self.summary), ChannelNodes.from_columns(self.nodes), ChannelEdges.from_columns(self.edges),
            KeyOps.from_columns(self.ops), Partitions.from_columns(self.partitions), OpPartitions.from_columns(self.members),
            np.asarray(self.operands, np.int32),
        )

    # helpers ---------------------------------------------------------------------------------------
    def s(self, text: str | None) -> int:
        return self.m.strings.intern(text)

    def where(self, loc: Location) -> dict[str, int]:
        return {"file": self.g.file, "line": loc.line + self.g.line - 1, "column": loc.column}

    def error(self, loc: Location, message: str) -> ParseError:
        line = loc.line + self.g.line - 1
        return ParseError(message, self.g.path, Location(line, loc.column), source_line_at(self.g.text, line))

    def at(self, tok: Token, offset: int = 0) -> Location:
        return position(tok, offset)

    def num(self, tok: Token, m: re.Match, group: str | int, what: str, base: int = 0) -> int:
        """Group ``group`` of a match on ``raw_of(tok)[base:]`` as a number (NONE when the
        group did not take part)."""
        text = m.group(group)
        return NONE if text is None else self._int(tok, text, base + m.start(group), what)

    def _int(self, tok: Token, text: str, offset: int, what: str, signed: bool = False) -> int:
        """``text``, at ``offset`` in ``tok``'s label, as a number of at most MAX_NUMBER - 1:
        ASCII digits (``-`` first where ``signed``); anything else is an error at its place."""
        digits = text.strip()
        offset += len(text) - len(text.lstrip())
        negative = signed and digits.startswith("-")
        magnitude = digits[1:] if negative else digits
        if not (magnitude.isascii() and magnitude.isdigit()):
            raise self.error(self.at(tok, offset), f"expected {what}, not '{_shown(text)}'")
        significant = magnitude.lstrip("0") or "0"  # int() refuses thousands of digits, zeros too
        if len(significant) > len(str(MAX_NUMBER)) or int(significant) >= MAX_NUMBER:
            raise self.error(self.at(tok, offset), f"{_shown(digits)} is out of range for {what} (the planner's ids, "
                             "operation ids, counts and sizes are below 2**31)")
        return -int(significant) if negative else int(significant)

    @staticmethod
    def _push(table: dict[str, list], **row) -> int:
        n = len(next(iter(table.values())))
        for key, col in table.items():
            col.append(row.get(key, NONE))
        return n

    # one graph ---------------------------------------------------------------------------------------
    def read(self, g: _Found) -> None:
        self.g = g
        try:
            tree: DotGraph = run_parser(_parser(), g.body, "start", g.path, DESCRIBE)
        except LayercError as e:
            if e.loc is not None:
                opened = _unclosed_quote(g.body, e.loc.line)
                if opened is not None:  # the emitters never break a string: say where it opened
                    e.message, e.loc = "this quoted string is not closed on its line", opened
                line = e.loc.line + g.line - 1
                e.loc = Location(line, e.loc.column)
                e.source_line = source_line_at(g.text, line)
            raise
        want = DIGRAPH_NAMES[g.kind]
        if tree.id is None or text_of(tree.id) != want:
            tok = tree.id or tree.keyword
            raise self.error(self.at(tok), f"expected 'digraph {want}' for a {g.kind} graph")
        assert tree.keyword.line is not None and tree.keyword.column is not None  # the lexer places it
        graph = Graph(g.kind, g.file, g.line + tree.keyword.line - 1, tree.keyword.column,
                      g.line + g.body.rstrip().count("\n"), _clean(g.body, tree.keyword))
        self.graphs[g.kind] = graph
        self.kinds.add(g.kind)
        if g.kind == COMBINED_GRAPH:
            self._combined(tree, graph)
        else:
            self._liveness(tree, graph, TMEM if g.kind == TMEM_GRAPH else SMEM)

    def _liveness(self, tree: DotGraph, graph: Graph, kind: int) -> None:
        cluster_rx = _TMEM_CLUSTER if kind == TMEM else _SMEM_CLUSTER
        prefix = "tmem" if kind == TMEM else "smem"
        summaries = 0
        for st in tree.stmts:
            if isinstance(st, DotNode):
                name = text_of(st.id)
                if name != "empty":
                    raise self.error(self.at(st.id), f"unexpected node '{_shown(name)}' outside the clusters of a "
                                     f"{prefix.upper()} liveness graph")
                label = st.attrs.get("label")
                if label is None or text_of(label) not in EMPTY_LABELS:
                    raise self.error(self.at(label or st.id), "an 'empty' node says 'No ... allocations' or 'No liveness intervals'")
                graph.empty = text_of(label)
            elif isinstance(st, DotSub):
                name = text_of(st.id) if st.id is not None else ""
                m = cluster_rx.fullmatch(name)
                if name == "cluster_axis":
                    self._axis(st, graph)
                elif name == "cluster_summary":
                    self._summary(st, kind)
                    summaries += 1
                elif m:
                    assert st.id is not None  # an unnamed subgraph matches no cluster name
                    self._buffer(st, kind, self.num(st.id, m, 1, "a cluster number"), prefix)
                else:
                    raise self.error(self.at(st.id or st.keyword), f"unexpected subgraph '{_shown(name)}' (expected cluster_axis, "
                                     f"cluster_{prefix}_<n> or cluster_summary)")
        has_buffers = graph.empty is None
        if has_buffers and summaries != 1:
            raise self.error(self.at(tree.keyword), f"a {prefix.upper()} liveness graph with buffers has one summary table, not {summaries}")

    def _axis(self, st: DotSub, graph: Graph) -> None:
        for x in st.stmts:
            if isinstance(x, DotNode) and text_of(x.id) == "axis":
                label = x.attrs.get("label")
                if label is None:
                    raise self.error(self.at(x.id), "the axis node has no label")
                raw = raw_of(label)
                ticks = [self._int(label, m.group(), m.start(), "an operation id as an axis tick") for m in re.finditer(r"[^|]+", raw)]
                graph.axis = np.asarray(ticks, np.int64)
                loc = self.at(label)
                graph.axis_line, graph.axis_column = loc.line + self.g.line - 1, loc.column

    def _label(self, st: DotSub | DotNode, what: str) -> Token:
        if isinstance(st, DotSub):
            for x in st.stmts:
                if isinstance(x, tuple) and x[0] == "assign" and text_of(x[1]) == "label":
                    return x[2]
            raise self.error(self.at(st.id or st.keyword), f"{what} has no label")
        label = st.attrs.get("label")
        if label is None:
            raise self.error(self.at(st.id), f"{what} has no label")
        return label

    def _buffer(self, st: DotSub, kind: int, index: int, prefix: str) -> None:
        label = self._label(st, "a buffer cluster")
        raw = raw_of(label)
        m = (_TMEM_LABEL if kind == TMEM else _SMEM_LABEL).fullmatch(raw)
        if m is None:
            form = "'<name> <rows>x<cols> [<start>-<end>) [<n> OperandD]'" if kind == TMEM else "'<name> B<id> [<start>-<end>) size=<bytes>'"
            raise self.error(self.at(label), f"a {prefix.upper()} buffer label reads {form}, not '{_shown(raw)}'")
        smem, tmem = kind == SMEM, kind == TMEM
        row = self._push(
            self.buffers, kind=kind, index=index, name=self.s(m["name"].replace('\\"', '"')),
            buffer_id=self.num(label, m, "bid", "a buffer id") if smem else NONE,
            bytes=self.num(label, m, "size", "a size in bytes") if smem else NONE,
            rows=self.num(label, m, "rows", "a row count") if tmem else NONE,
            cols=self.num(label, m, "cols", "a column count") if tmem else NONE,
            start=self.num(label, m, "start", "an operation id"), end=self.num(label, m, "end", "an operation id"),
            operand_d=self.num(label, m, "d", "an OperandD count") if tmem and m["d"] else 0,
            **self.where(self.at(label)),
        )
        channel_rx = _TMEM_CHANNEL if kind == TMEM else _SMEM_CHANNEL
        for x in st.stmts:
            if not isinstance(x, DotNode):
                continue
            nid = text_of(x.id)
            nm = _CHANNEL_NODE.fullmatch(nid)
            if nm is not None and (nm["mem"], nm["index"]) != (prefix, str(index)):
                nm = None
            if nm is None:
                raise self.error(self.at(x.id), f"unexpected node '{_shown(nid)}' in cluster {prefix}_{index} "
                                 f"(expected {prefix}_{index}_ch<id> or {prefix}_{index}_info)")
            nlabel = self._label(x, f"node {_shown(nid)}")
            if nm["ch"] is None:
                if text_of(nlabel) != "no channels":
                    raise self.error(self.at(nlabel), f"node {nid} says 'no channels', not '{_shown(text_of(nlabel))}'")
                continue
            cm = channel_rx.fullmatch(raw_of(nlabel))
            if cm is None:
                form = "'ch<id> [D] (<src> to <dst>)'" if kind == TMEM else "'ch<id> (<src> to <dst>)'"
                raise self.error(self.at(nlabel), f"a channel node reads {form}, not '{_shown(raw_of(nlabel))}'")
            if cm["id"] != nm["ch"]:
                raise self.error(self.at(nlabel), f"node {_shown(nid)} is labelled ch{_shown(cm['id'])}")
            self._push(self.nodes, id=self.num(nlabel, cm, "id", "a channel id"), buffer=row, operand_d=int(bool(kind == TMEM and cm["d"])),
                       src_op=self.num(nlabel, cm, "src", "an operation id"), dst_op=self.num(nlabel, cm, "dst", "an operation id"),
                       **self.where(self.at(x.id)))

    def _summary(self, st: DotSub, kind: int) -> None:
        table = None
        for x in st.stmts:
            if isinstance(x, DotNode) and text_of(x.id) == "summary":
                table = self._label(x, "the summary")
        if table is None:
            raise self.error(self.at(st.id or st.keyword), "the summary cluster has no 'summary' node")
        raw = raw_of(table)
        _check_tags(table)  # a "quoted" table too: rows are found in it by its tags
        rows = list(_ROW.finditer(raw))
        header = _HEADER[SMEM_GRAPH if kind == SMEM else TMEM_GRAPH]
        if not rows:
            raise self.error(self.at(table), "the summary table has no <TR> rows")
        heads = [re.sub(r"</?B>", "", c.group(1), flags=re.I).strip() for c in _CELL.finditer(rows[0].group(1))]
        if heads != header:
            raise self.error(self.at(table, rows[0].start()),
                             f"the summary header reads {' | '.join(header)}, not {_shown(' | '.join(heads))}")
        for r in rows[1:]:
            cells = list(_CELL.finditer(r.group(1)))
            base = r.start(1)
            if len(cells) != len(header):
                raise self.error(self.at(table, r.start()), f"a summary row has {len(cells)} cells, not {len(header)}")
            values = {h: (c.group(1), base + c.start(1)) for h, c in zip(header, cells)}
            row = {"kind": kind, "name": self.s(values["Name"][0]), **self.where(self.at(table, r.start()))}
            row["channels"] = self._int(table, *values["Channels"], "a channel count")
            liveness, pos = values["Liveness"]
            lm = _INTERVAL.fullmatch(liveness)
            if lm is None:
                raise self.error(self.at(table, pos), f"liveness reads '[<start>-<end>)', not '{_shown(liveness)}'")
            row["start"], row["end"] = (self.num(table, lm, g, "an operation id", pos) for g in (1, 2))
            if kind == SMEM:
                row["buffer_id"] = self._int(table, *values["BufferID"], "a buffer id")
                row["bytes"] = self._int(table, *values["Size"], "a size in bytes")
            else:
                size, pos = values["Size"]
                if size != "-":
                    sm = re.fullmatch(r"(\d+)x(\d+)", size)
                    if sm is None:
                        raise self.error(self.at(table, pos), f"a TMEM size reads '<rows>x<cols>' or '-', not '{_shown(size)}'")
                    row["rows"], row["cols"] = self.num(table, sm, 1, "a row count", pos), self.num(table, sm, 2, "a column count", pos)
                row["operand_d"] = self._int(table, *values["OperandD"], "an OperandD count")
            self._push(self.summary, **row)

    def _combined(self, tree: DotGraph, graph: Graph) -> None:
        for st in tree.stmts:
            if isinstance(st, DotSub):
                name = text_of(st.id) if st.id is not None else ""
                m = _PARTITION_CLUSTER.fullmatch(name)
                if m is None:
                    raise self.error(self.at(st.id or st.keyword),
                                     f"unexpected subgraph '{_shown(name)}' (expected cluster_partition_<id>)")
                assert st.id is not None  # an unnamed subgraph matches no partition name
                self._partition(st, self._int(st.id, m.group(1), m.start(1), "a partition id", signed=True))
            elif isinstance(st, DotEdge):
                self._edge(st)
            elif isinstance(st, DotNode):
                raise self.error(self.at(st.id), f"node '{_shown(text_of(st.id))}' is outside every partition cluster")

    def _partition(self, st: DotSub, pid: int) -> None:
        attrs = {text_of(x[1]): x[2] for x in st.stmts if isinstance(x, tuple) and x[0] == "assign"}
        label = attrs.get("label")
        fill = attrs.get("fillcolor")
        self._push(self.partitions, id=pid, label=self.s(text_of(label)) if label is not None else NONE,
                   fill=self.s(text_of(fill)) if fill is not None else NONE, **self.where(self.at(st.id or st.keyword)))
        for x in st.stmts:
            if not isinstance(x, DotNode):
                continue
            nid = text_of(x.id)
            nm = _OP_NODE.fullmatch(nid)
            if nm is None:
                raise self.error(self.at(x.id), f"unexpected node '{_shown(nid)}' (op nodes are op_op_<n>)")
            number = self.num(x.id, nm, 1, "a node number")
            label = self._label(x, f"node {nid}")
            key = (number, raw_of(label))
            row = self.op_row.get(key)
            if row is None:
                row = self.op_row[key] = self._op(number, label, x, pid)
            self._push(self.members, op=row, partition=pid, **self.where(self.at(x.id)))

    def _op(self, number: int, label: Token, x: DotNode, pid: int) -> int:
        raw = raw_of(label)
        lines = raw.split("\\n")
        if len(lines) > 2:
            raise self.error(self.at(label), "an op label has two lines at most ('[id] out = op(args)' and 'shape, L<depth>')")
        call = lines[0].endswith(")") and "\n" not in lines[0]  # what _OP_LINE's args assume
        m = _OP_LINE.fullmatch(lines[0]) if call else None
        if m is None:
            raise self.error(self.at(label), f"an op label reads '[<id>] <out> = <op>(<args>)', not '{_shown(lines[0])}'")
        args = m["args"].split(", ") if m["args"] else []
        start = len(self.operands)
        self.operands += [self.s(a) for a in args]
        shape, depth = None, 0
        if len(lines) == 2:
            dm = _DEPTH.fullmatch(lines[1])
            shape, depth = (dm["shape"], self.num(label, dm, "depth", "a loop depth", len(lines[0]) + 2)) if dm else (lines[1], 0)
        fill, border = x.attrs.get("fillcolor"), x.attrs.get("color")
        return self._push(
            self.ops, node=number, op_id=self.num(label, m, "id", "an operation id"), name=self.s(m["out"]), op=self.s(m["op"]),
            operand_start=start, operand_count=len(args), shape=self.s(shape), depth=depth, partition=pid,
            fill=self.s(text_of(fill)) if fill is not None else NONE, border=self.s(text_of(border)) if border is not None else NONE,
            **self.where(self.at(x.id)),
        )

    def _edge(self, st: DotEdge) -> None:
        label = st.attrs.get("label")
        if label is None:
            style = st.attrs.get("style")
            if style is not None and text_of(style) == "invis":
                return  # an ordering edge
            raise self.error(self.at(st.ids[0]), "a channel edge has no label 'ch<id> ...'")
        if len(st.ids) != 2:
            raise self.error(self.at(st.ids[2]), "a channel edge joins two op nodes")
        ends = []
        for tok in st.ids:
            nm = _OP_NODE.fullmatch(text_of(tok))
            if nm is None:
                raise self.error(self.at(tok), f"a channel edge joins op nodes (op_op_<n>), not '{_shown(text_of(tok))}'")
            ends.append(self.num(tok, nm, 1, "a node number"))
        raw = raw_of(label)
        m = _EDGE_LABEL.fullmatch(raw)
        if m is None:
            raise self.error(self.at(label),
                             f"a channel edge label reads 'ch<id> B<id>\\n\\\"<name>\\\"\\n(SMEM|TMEM) [D]', not '{_shown(raw)}'")
        kind = {"SMEM": SMEM, "TMEM": TMEM}.get(m["kind"] or "", OTHER)
        color, style = st.attrs.get("color"), st.attrs.get("style")
        self._push(
            self.edges, id=self.num(label, m, "id", "a channel id"), src=ends[0], dst=ends[1], kind=kind, operand_d=int(bool(m["d"])),
            buffer_ref=self.num(label, m, "b", "a buffer id"), loc=self.s(m["loc"].replace('\\"', '"')) if m["loc"] is not None else NONE,
            color=self.s(text_of(color)) if color is not None else NONE, style=self.s(text_of(style)) if style is not None else NONE,
            **self.where(self.at(st.ids[0])),
        )


def _unclosed_quote(body: str, upto: int) -> Location | None:
    """The first line up to ``upto`` with an odd number of unescaped quotes: where its last
    quote stands."""
    for n, line in enumerate(body.split("\n", upto)[:upto], 1):
        quotes = [m.start() for m in re.finditer(r'(?<!\\)"', line)]
        if len(quotes) % 2:
            return Location(n, quotes[-1] + 1)
    return None


def _clean(body: str, keyword: Token) -> str:
    """The DOT text alone, from ``digraph`` to the closing brace (what ``sed -n '/^digraph/,/^}$/p'``
    keeps)."""
    assert keyword.line is not None and keyword.column is not None  # the lexer places every token
    lines = body.rstrip().split("\n")[keyword.line - 1 :]
    lines[0] = lines[0][keyword.column - 1 :]
    return "\n".join(lines) + "\n"
