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
"""

from __future__ import annotations

import gzip
import re
from bisect import bisect_right
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from lark import Token, Transformer

from layerc.grammar._lark import build_parser, run_parser
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
    """Statements as small objects that keep their tokens (and so their positions)."""

    def start(self, c):
        c = [x for x in c if x is not None]
        i = 1 if c[0].type == "STRICT" else 0
        has_id = len(c) > i + 1 and isinstance(c[i + 1], Token)
        return DotGraph(c[i], c[i + 1] if has_id else None, c[i + 1 + has_id :])

    def stmt(self, c):
        return None

    def node_stmt(self, c):
        return DotNode(c[0], c[1] if len(c) > 1 else {})

    def edge_stmt(self, c):
        attrs = c[-1] if isinstance(c[-1], dict) else {}
        return DotEdge([t for t in c if isinstance(t, Token)], attrs)

    def attr_stmt(self, c):
        return ("default", c[0], c[1])

    def assign(self, c):
        return ("assign", c[0], c[1])

    def subgraph(self, c):
        c = [x for x in c if x is not None]
        has_id = len(c) > 1 and isinstance(c[1], Token)
        return DotSub(c[0], c[1] if has_id else None, c[1 + has_id :])

    def attrs(self, c):
        return {k.value: v for k, v in c}

    def attr(self, c):
        return (c[0], c[1])


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
    inner = 1 if tok.type in ("QUOTED", "HTML") else 0
    prefix = tok.value[: inner + offset]
    nl = prefix.rfind("\n")
    if nl < 0:
        return Location(tok.line, tok.column + len(prefix))
    return Location(tok.line + prefix.count("\n"), len(prefix) - nl)


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
_OP_LINE = re.compile(r"(?:\[(?P<id>\d+)\] )?(?:(?P<out>.+?) = )?(?P<op>[A-Za-z_][\w.$]*)\((?P<args>.*)\)")
_DEPTH = re.compile(r"(?:(?P<shape>.*), )?L(?P<depth>\d+)")
_EDGE_LABEL = re.compile(
    r'ch(?P<id>\d+)(?: B(?P<b>\d+))?(?:\\n\\"(?P<loc>.*)\\")?(?:\\n\((?P<kind>SMEM|TMEM)\)(?P<d> \[D\])?)?')
_INTERVAL = re.compile(r"\[(\d+)-(\d+)\)")
_ROW = re.compile(r"<TR>(.*?)</TR>", re.S | re.I)
_TAG = re.compile(r"<(/?)([A-Za-z]+)[^<>]*?(/?)>")
_CELL = re.compile(r"<TD>(.*?)</TD>", re.S | re.I)
_HEADER = {
    SMEM_GRAPH: ["Name", "BufferID", "Size", "Channels", "Liveness"],
    TMEM_GRAPH: ["Name", "Size", "Channels", "Liveness", "OperandD"],
}
EMPTY_LABELS = {"No SMEM allocations", "No TMEM allocations", "No liveness intervals"}


# -- reading ---------------------------------------------------------------------------------------
def read_ws_memory(path: str | Path) -> MemoryModule:
    """A dump directory or a debug log (``.gz`` too)."""
    p = Path(path)
    if p.is_dir():
        return read_dump_dir(p)
    if not p.exists():
        raise LayercError(f"no such file or directory: {path}", str(path))
    return read_log(p)


def read_dump_dir(directory: str | Path) -> MemoryModule:
    directory = Path(directory)
    found = []
    for kind, prefix in FILE_PREFIXES.items():
        for f in directory.glob(prefix + "*.dot"):
            suffix = f.name[len(prefix) : -len(".dot")]
            order = int(suffix) if suffix.isdigit() else float("inf")
            found.append((order, f.name, kind, f))
    if not found:
        raise LayercError(f"no smem_liveness_*.dot, combined_graph_*.dot or tmem_liveness_*.dot in {directory} "
                          "(is it the TRITON_DUMP_WS_GRAPHS directory?)", str(directory))
    found.sort(key=lambda x: (x[0], list(FILE_PREFIXES).index(x[2]), x[1]))
    reader = _Reader(MemoryModule(str(directory)))
    for _, _, kind, f in found:
        text = _read_text(f)
        graphs = reader.scan(str(f), text, bare_ok=True)
        if not graphs:
            raise ParseError(f"no {DIGRAPH_NAMES[kind]} graph in this file", str(f), Location(1, 1), source_line_at(text, 1))
        for g in graphs:
            if g.kind != kind:
                raise ParseError(f"the file is named like a {kind} dump but holds a {g.kind} graph", str(f), Location(g.line, 1),
                                 source_line_at(text, g.line))
            reader.add(g)
    return reader.finish()


def read_log(path: str | Path) -> MemoryModule:
    return read_log_text(_read_text(Path(path)), str(path))


def read_log_text(text: str, path: str = "<log>") -> MemoryModule:
    reader = _Reader(MemoryModule(path))
    graphs = reader.scan(path, text, bare_ok=True)
    if not graphs:
        named = _DUMPED.findall(text)
        hint = (f"; it names dump files (e.g. {named[0].strip()}): pass their directory" if named else
                " (run with TRITON_LLVM_DEBUG_ONLY=nvgpu-ws-memory-planner, or pass the TRITON_DUMP_WS_GRAPHS directory)")
        raise LayercError("no memory-planner graphs ('=== SMEM Buffer Liveness Graph ===' ...) in this log" + hint, path)
    funcs = [(m.start(), m.group(1)) for m in _FUNC.finditer(text)]
    positions = [p for p, _ in funcs]
    for g in graphs:
        i = bisect_right(positions, g.offset) - 1
        g.kernel_name = funcs[i][1] if i >= 0 else None
        reader.add(g)
    return reader.finish()


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise LayercError(f"cannot read {path}: {e.strerror}", str(path)) from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as e:
            raise LayercError(f"cannot read {path}: a broken gzip file ({e})", str(path)) from None
    return data.decode("utf-8", errors="replace")


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
            for m in _BARE.finditer(text):
                start_line = text.count("\n", 0, m.start()) + 1
                close = _find_line(text, "}", m.start(), len(text), indent=False)
                end = len(text) if close < 0 else close + 1
                kind = next(k for k, v in DIGRAPH_NAMES.items() if v == m.group(1))
                found.append(_Found(kind, path, file, text, m.start(), start_line, text[m.start() : end]))
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
            self.index, self.name or f"kernel {self.index}", self.graphs, Buffers(**self.buffers), Summary(**self.summary),
            ChannelNodes(**self.nodes), ChannelEdges(**self.edges), KeyOps(**self.ops), Partitions(**self.partitions),
            OpPartitions(**self.members), np.asarray(self.operands, np.int32),
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
        except ParseError as e:
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
                    raise self.error(self.at(st.id), f"unexpected node '{name}' outside the clusters of a {prefix.upper()} liveness graph")
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
                    self._buffer(st, kind, int(m.group(1)), prefix)
                else:
                    raise self.error(self.at(st.id or st.keyword), f"unexpected subgraph '{name}' (expected cluster_axis, "
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
                ticks = []
                for m in re.finditer(r"[^|]+", raw):
                    tick = m.group().strip()
                    if not tick.isdigit():
                        raise self.error(self.at(label, m.start()), f"axis tick '{tick}' is not an operation id")
                    ticks.append(int(tick))
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
            raise self.error(self.at(label), f"a {prefix.upper()} buffer label reads {form}, not '{raw}'")
        row = self._push(
            self.buffers, kind=kind, index=index, name=self.s(m["name"].replace('\\"', '"')),
            buffer_id=int(m["bid"]) if kind == SMEM else NONE, bytes=int(m["size"]) if kind == SMEM else NONE,
            rows=int(m["rows"]) if kind == TMEM and m["rows"] else NONE, cols=int(m["cols"]) if kind == TMEM and m["cols"] else NONE,
            start=int(m["start"]), end=int(m["end"]), operand_d=int(m["d"]) if kind == TMEM and m["d"] else 0,
            **self.where(self.at(label)),
        )
        channel_rx = _TMEM_CHANNEL if kind == TMEM else _SMEM_CHANNEL
        node_rx = re.compile(rf"{prefix}_{index}_(?:ch(\d+)|info)")
        for x in st.stmts:
            if not isinstance(x, DotNode):
                continue
            nid = text_of(x.id)
            nm = node_rx.fullmatch(nid)
            if nm is None:
                raise self.error(self.at(x.id), f"unexpected node '{nid}' in cluster {prefix}_{index} "
                                 f"(expected {prefix}_{index}_ch<id> or {prefix}_{index}_info)")
            nlabel = self._label(x, f"node {nid}")
            if nm.group(1) is None:
                if text_of(nlabel) != "no channels":
                    raise self.error(self.at(nlabel), f"node {nid} says 'no channels', not '{text_of(nlabel)}'")
                continue
            cm = channel_rx.fullmatch(raw_of(nlabel))
            if cm is None:
                form = "'ch<id> [D] (<src> to <dst>)'" if kind == TMEM else "'ch<id> (<src> to <dst>)'"
                raise self.error(self.at(nlabel), f"a channel node reads {form}, not '{raw_of(nlabel)}'")
            if cm["id"] != nm.group(1):
                raise self.error(self.at(nlabel), f"node {nid} is labelled ch{cm['id']}")
            self._push(self.nodes, id=int(cm["id"]), buffer=row, operand_d=int(bool(kind == TMEM and cm["d"])),
                       src_op=int(cm["src"]) if cm["src"] else NONE, dst_op=int(cm["dst"]) if cm["dst"] else NONE,
                       **self.where(self.at(x.id)))

    def _balanced(self, table, raw: str) -> None:
        """Graphviz HTML labels are XML: a tag left open or closed by another stops ``dot`` from
        drawing the graph, so it is an error here, where it can be located."""
        open_tags: list[tuple[str, int]] = []
        for m in _TAG.finditer(raw):
            closing, name, empty = m.group(1), m.group(2).upper(), m.group(3)
            if empty:
                continue
            if not closing:
                open_tags.append((name, m.start()))
            elif not open_tags or open_tags[-1][0] != name:
                expected = f"</{open_tags[-1][0]}>" if open_tags else "no closing tag"
                raise self.error(self.at(table, m.start()), f"the summary table has </{name}> where {expected} belongs")
            else:
                open_tags.pop()
        if open_tags:
            name, at = open_tags[-1]
            raise self.error(self.at(table, at), f"the summary table never closes <{name}>")

    def _summary(self, st: DotSub, kind: int) -> None:
        table = None
        for x in st.stmts:
            if isinstance(x, DotNode) and text_of(x.id) == "summary":
                table = self._label(x, "the summary")
        if table is None:
            raise self.error(self.at(st.id or st.keyword), "the summary cluster has no 'summary' node")
        raw = raw_of(table)
        self._balanced(table, raw)
        rows = list(_ROW.finditer(raw))
        header = _HEADER[SMEM_GRAPH if kind == SMEM else TMEM_GRAPH]
        if not rows:
            raise self.error(self.at(table), "the summary table has no <TR> rows")
        heads = [re.sub(r"</?B>", "", c.group(1), flags=re.I).strip() for c in _CELL.finditer(rows[0].group(1))]
        if heads != header:
            raise self.error(self.at(table, rows[0].start()), f"the summary header reads {' | '.join(header)}, not {' | '.join(heads)}")
        for r in rows[1:]:
            cells = list(_CELL.finditer(r.group(1)))
            base = r.start(1)
            if len(cells) != len(header):
                raise self.error(self.at(table, r.start()), f"a summary row has {len(cells)} cells, not {len(header)}")
            values = {h: (c.group(1), base + c.start(1)) for h, c in zip(header, cells)}
            row = {"kind": kind, "name": self.s(values["Name"][0]), **self.where(self.at(table, r.start()))}
            row["channels"] = self._int(table, *values["Channels"], "a channel count")
            lm = _INTERVAL.fullmatch(values["Liveness"][0])
            if lm is None:
                raise self.error(self.at(table, values["Liveness"][1]), f"liveness reads '[<start>-<end>)', not '{values['Liveness'][0]}'")
            row["start"], row["end"] = int(lm.group(1)), int(lm.group(2))
            if kind == SMEM:
                row["buffer_id"] = self._int(table, *values["BufferID"], "a buffer id")
                row["bytes"] = self._int(table, *values["Size"], "a size in bytes")
            else:
                size, pos = values["Size"]
                if size != "-":
                    sm = re.fullmatch(r"(\d+)x(\d+)", size)
                    if sm is None:
                        raise self.error(self.at(table, pos), f"a TMEM size reads '<rows>x<cols>' or '-', not '{size}'")
                    row["rows"], row["cols"] = int(sm.group(1)), int(sm.group(2))
                row["operand_d"] = self._int(table, *values["OperandD"], "an OperandD count")
            self._push(self.summary, **row)

    def _int(self, tok: Token, text: str, offset: int, what: str) -> int:
        if not text.strip().isdigit():
            raise self.error(self.at(tok, offset), f"expected {what}, not '{text}'")
        return int(text)

    def _combined(self, tree: DotGraph, graph: Graph) -> None:
        for st in tree.stmts:
            if isinstance(st, DotSub):
                name = text_of(st.id) if st.id is not None else ""
                m = _PARTITION_CLUSTER.fullmatch(name)
                if m is None:
                    raise self.error(self.at(st.id or st.keyword), f"unexpected subgraph '{name}' (expected cluster_partition_<id>)")
                self._partition(st, int(m.group(1)))
            elif isinstance(st, DotEdge):
                self._edge(st)
            elif isinstance(st, DotNode):
                raise self.error(self.at(st.id), f"node '{text_of(st.id)}' is outside every partition cluster")

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
                raise self.error(self.at(x.id), f"unexpected node '{nid}' (op nodes are op_op_<n>)")
            number = int(nm.group(1))
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
        m = _OP_LINE.fullmatch(lines[0])
        if m is None:
            raise self.error(self.at(label), f"an op label reads '[<id>] <out> = <op>(<args>)', not '{lines[0]}'")
        args = m["args"].split(", ") if m["args"] else []
        start = len(self.operands)
        self.operands += [self.s(a) for a in args]
        shape, depth = None, 0
        if len(lines) == 2:
            dm = _DEPTH.fullmatch(lines[1])
            shape, depth = (dm["shape"], int(dm["depth"])) if dm else (lines[1], 0)
        fill, border = x.attrs.get("fillcolor"), x.attrs.get("color")
        return self._push(
            self.ops, node=number, op_id=int(m["id"]) if m["id"] else NONE, name=self.s(m["out"]), op=self.s(m["op"]),
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
                raise self.error(self.at(tok), f"a channel edge joins op nodes (op_op_<n>), not '{text_of(tok)}'")
            ends.append(int(nm.group(1)))
        raw = raw_of(label)
        m = _EDGE_LABEL.fullmatch(raw)
        if m is None:
            raise self.error(self.at(label), f"a channel edge label reads 'ch<id> B<id>\\n\\\"<name>\\\"\\n(SMEM|TMEM) [D]', not '{raw}'")
        kind = {"SMEM": SMEM, "TMEM": TMEM}.get(m["kind"] or "", OTHER)
        color, style = st.attrs.get("color"), st.attrs.get("style")
        self._push(
            self.edges, id=int(m["id"]), src=ends[0], dst=ends[1], kind=kind, operand_d=int(bool(m["d"])),
            buffer_ref=int(m["b"]) if m["b"] else NONE, loc=self.s(m["loc"].replace('\\"', '"')) if m["loc"] is not None else NONE,
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
    lines = body.rstrip().split("\n")[keyword.line - 1 :]
    lines[0] = lines[0][keyword.column - 1 :]
    return "\n".join(lines) + "\n"
