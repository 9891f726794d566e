"""The memory IR of a Triton warp-specialized kernel: what its memory planner dumped.

One ``MemoryModule`` per input (a ``TRITON_DUMP_WS_GRAPHS`` directory or a debug log) holds one
``Kernel`` per compiled kernel. A kernel's facts are numpy columns (``Table``), one row each:

* ``buffers``: SMEM buffers (name, Allocation buffer id, bytes) and TMEM allocations (name,
  rows x columns), each with its liveness ``[start, end)`` in operation ids and OperandD count,
  from the clusters of the two liveness graphs;
* ``summary``: the rows of each liveness graph's summary table, kept apart so that
  ``mem-check`` can hold them against the clusters;
* ``channel_nodes``: channels as the liveness graphs show them (under their buffer, with the
  source and destination operation ids when the dump had them); ``channel_edges``: channels as the
  combined graph draws them (between two key-op nodes, kind, OperandD, the alloc's ``buffer.id``);
  ``channels()`` merges the two by channel id;
* ``key_ops``: the nodes of the combined graph (operation id, output name, op, operands, shape,
  loop depth) and ``op_partitions`` every partition cluster that declares one (an op that two
  partitions consume is declared in both); ``partitions``: the clusters (async task ids).

Strings are interned once per module (``MemoryModule.strings``); every row keeps the file, line
and column it was read from, so each finding points into the input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TypeVar, dataclass_transform

import numpy as np

from layerc.ir.diagnostics import Diagnostic, Location, VerifyError
from layerc.ir.trace import NONE, Strings, Table

#: Buffer and channel kinds. A combined-graph channel of neither memory (a register channel)
#: is ``OTHER``.
SMEM, TMEM, OTHER = 0, 1, 2
KIND_NAMES = ("SMEM", "TMEM", "other")

#: The three dumps, in the order a kernel's planner writes them (SMEM only with allocator 0).
SMEM_GRAPH, COMBINED_GRAPH, TMEM_GRAPH = "smem", "combined", "tmem"
GRAPH_KINDS = (SMEM_GRAPH, COMBINED_GRAPH, TMEM_GRAPH)

_I8, _I32, _I64 = "int8", "int32", "int64"

_T = TypeVar("_T", bound=Table)


@dataclass_transform()
def _table(cls: type[_T]) -> type[_T]:
    """A ``Table`` dataclass whose fields are its ``COLUMNS`` (the class annotates the same names,
    in the same order, for the type checker)."""
    cls.__annotations__ = {name: np.ndarray for name in cls.COLUMNS}
    return dataclass(cls)


_WHERE = {"file": _I32, "line": _I32, "column": _I32}


@_table
class Buffers(Table):
    """One row per buffer cluster. ``index`` is the cluster's number (``cluster_smem_<index>``);
    SMEM rows have ``buffer_id`` and ``bytes``, TMEM rows ``rows`` and ``cols`` (-1: unknown)."""

    COLUMNS = {
        "kind": _I8, "index": _I32, "name": _I32, "buffer_id": _I32, "bytes": _I64, "rows": _I32, "cols": _I32,
        "start": _I64, "end": _I64, "operand_d": _I32, **_WHERE,
    }
    kind: np.ndarray
    index: np.ndarray
    name: np.ndarray
    buffer_id: np.ndarray
    bytes: np.ndarray
    rows: np.ndarray
    cols: np.ndarray
    start: np.ndarray
    end: np.ndarray
    operand_d: np.ndarray
    file: np.ndarray
    line: np.ndarray
    column: np.ndarray


@_table
class Summary(Table):
    """One row per data row of a summary table (SMEM: Name, BufferID, Size, Channels, Liveness;
    TMEM: Name, Size, Channels, Liveness, OperandD). Absent cells are -1."""

    COLUMNS = {
        "kind": _I8, "name": _I32, "buffer_id": _I32, "bytes": _I64, "rows": _I32, "cols": _I32, "channels": _I32,
        "start": _I64, "end": _I64, "operand_d": _I32, **_WHERE,
    }
    kind: np.ndarray
    name: np.ndarray
    buffer_id: np.ndarray
    bytes: np.ndarray
    rows: np.ndarray
    cols: np.ndarray
    channels: np.ndarray
    start: np.ndarray
    end: np.ndarray
    operand_d: np.ndarray
    file: np.ndarray
    line: np.ndarray
    column: np.ndarray


@_table
class ChannelNodes(Table):
    """A channel node of a liveness graph: ``ch<id> [D] (<src_op> to <dst_op>)`` inside the
    cluster of ``buffer`` (a row of ``Buffers``)."""

    COLUMNS = {"id": _I32, "buffer": _I32, "operand_d": _I8, "src_op": _I64, "dst_op": _I64, **_WHERE}
    id: np.ndarray
    buffer: np.ndarray
    operand_d: np.ndarray
    src_op: np.ndarray
    dst_op: np.ndarray
    file: np.ndarray
    line: np.ndarray
    column: np.ndarray


@_table
class ChannelEdges(Table):
    """A channel edge of the combined graph between key-op nodes ``src`` and ``dst`` (the ``n`` of
    ``op_op_<n>``), its kind, OperandD, the ``buffer.id`` of its alloc (``B<id>``, -1 when absent),
    the quoted source name, and the drawn colour and style."""

    COLUMNS = {
        "id": _I32, "src": _I64, "dst": _I64, "kind": _I8, "operand_d": _I8, "buffer_ref": _I32, "loc": _I32,
        "color": _I32, "style": _I32, **_WHERE,
    }
    id: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    kind: np.ndarray
    operand_d: np.ndarray
    buffer_ref: np.ndarray
    loc: np.ndarray
    color: np.ndarray
    style: np.ndarray
    file: np.ndarray
    line: np.ndarray
    column: np.ndarray


@_table
class KeyOps(Table):
    """A node of the combined graph. ``node`` is the ``n`` of ``op_op_<n>`` (the operation id when
    the IR had one, else the op's address mod 100000); ``op_id`` -1 when the label has none;
    ``name`` -1 for the ``op(src)`` form (stores, ops without results); operands are
    ``operands[operand_start : operand_start + operand_count]``; ``depth`` counts enclosing
    ``scf.for``; ``partition`` is the first cluster that declares the node."""

    COLUMNS = {
        "node": _I64, "op_id": _I64, "name": _I32, "op": _I32, "operand_start": _I32, "operand_count": _I32,
        "shape": _I32, "depth": _I32, "partition": _I32, "fill": _I32, "border": _I32, **_WHERE,
    }
    node: np.ndarray
    op_id: np.ndarray
    name: np.ndarray
    op: np.ndarray
    operand_start: np.ndarray
    operand_count: np.ndarray
    shape: np.ndarray
    depth: np.ndarray
    partition: np.ndarray
    fill: np.ndarray
    border: np.ndarray
    file: np.ndarray
    line: np.ndarray
    column: np.ndarray


@_table
class Partitions(Table):
    """A partition cluster (``cluster_partition_<id>``, an async task id) of the combined graph."""

    COLUMNS = {"id": _I32, "label": _I32, "fill": _I32, **_WHERE}
    id: np.ndarray
    label: np.ndarray
    fill: np.ndarray
    file: np.ndarray
    line: np.ndarray
    column: np.ndarray


@_table
class OpPartitions(Table):
    """Every declaration of a key op inside a partition cluster: ``op`` (row of ``KeyOps``) in
    partition ``partition`` (an id)."""

    COLUMNS = {"op": _I32, "partition": _I32, **_WHERE}
    op: np.ndarray
    partition: np.ndarray
    file: np.ndarray
    line: np.ndarray
    column: np.ndarray


@_table
class Channels(Table):
    """Channels merged from both views, one row per channel id (see ``Kernel.channels``)."""

    COLUMNS = {
        "id": _I32, "kind": _I8, "buffer": _I32, "operand_d": _I8, "src_op": _I64, "dst_op": _I64,
        "src": _I64, "dst": _I64, "node_row": _I32, "edge_row": _I32,
    }
    id: np.ndarray
    kind: np.ndarray
    buffer: np.ndarray
    operand_d: np.ndarray
    src_op: np.ndarray
    dst_op: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    node_row: np.ndarray
    edge_row: np.ndarray


@dataclass
class Graph:
    """One dump as read: its kind, where its text is, what it said when it held no buffers, and
    the tick labels of its time axis (liveness graphs)."""

    kind: str
    file: int
    line: int  #: the ``digraph`` line
    column: int
    end_line: int  #: the closing ``}``
    dot: str  #: the clean DOT text (``digraph ... }``), as dumped
    empty: str | None = None  #: "No SMEM allocations", "No liveness intervals", ...
    axis: np.ndarray | None = None
    axis_line: int = 0
    axis_column: int = 0


@dataclass
class Finding:
    """A check's result, located in the input; ``severity`` is error, warning or note."""

    severity: str
    code: str
    message: str
    kernel: int
    file: int = NONE
    line: int = 0
    column: int = 0


@dataclass
class Liveness:
    """What ``mem-liveness`` computes for one memory: the live amount as a step function
    (``live[i]`` from operation ``ops[i]`` up to ``ops[i + 1]``; the last step, where the last
    buffer ends, is 0), its peak, the first operation id where the peak holds, and the capacity it
    is held against (``unit``: bytes or columns). Only the operations where the amount changes are
    kept: the curve grows with the number of buffers, never with the span of their operation ids."""

    unit: str
    ops: np.ndarray  #: ascending operation ids where the live amount changes
    live: np.ndarray  #: the amount live from each of ``ops`` on
    peak: int
    peak_at: int  #: -1 when nothing is live
    capacity: int
    unknown: int = 0  #: buffers left out because their size is unknown


@dataclass
class Kernel:
    """One kernel's dumps (``graphs`` by kind) and the tables read from them."""

    index: int
    name: str
    graphs: dict[str, Graph] = field(default_factory=dict)
    buffers: Buffers = field(default_factory=Buffers.empty)
    summary: Summary = field(default_factory=Summary.empty)
    channel_nodes: ChannelNodes = field(default_factory=ChannelNodes.empty)
    channel_edges: ChannelEdges = field(default_factory=ChannelEdges.empty)
    key_ops: KeyOps = field(default_factory=KeyOps.empty)
    partitions: Partitions = field(default_factory=Partitions.empty)
    op_partitions: OpPartitions = field(default_factory=OpPartitions.empty)
    operands: np.ndarray = field(default_factory=lambda: np.empty(0, np.int32))  #: string ids
    liveness: dict[str, Liveness] = field(default_factory=dict)  #: "smem"/"tmem", by mem-liveness

    def channels(self) -> Channels:
        """Each channel id once: its liveness node (buffer, [D], op ids) and combined edge (ends,
        kind) side by side; op ids come from the node, else from the edge's key ops."""
        nodes, edges = self.channel_nodes, self.channel_edges
        ids = np.union1d(nodes.id, edges.id).astype(np.int32)
        node_row = _first_row(nodes.id, ids)
        edge_row = _first_row(edges.id, ids)
        has_node, has_edge = node_row >= 0, edge_row >= 0
        buffer = np.where(has_node, nodes.buffer[node_row.clip(0)] if len(nodes) else NONE, NONE)
        kind = np.where(has_edge, edges.kind[edge_row.clip(0)] if len(edges) else OTHER, OTHER).astype(np.int8)
        if len(self.buffers):
            kind = np.where(buffer >= 0, self.buffers.kind[buffer.clip(0)], kind).astype(np.int8)

        def pick(col_n: np.ndarray, col_e: np.ndarray) -> np.ndarray:
            return (
                np.where(has_node, col_n[node_row.clip(0)] if len(nodes) else 0, 0)
                | np.where(has_edge, col_e[edge_row.clip(0)] if len(edges) else 0, 0)
            )

        operand_d = pick(nodes.operand_d, edges.operand_d).astype(np.int8)
        src = np.where(has_edge, edges.src[edge_row.clip(0)] if len(edges) else NONE, NONE)
        dst = np.where(has_edge, edges.dst[edge_row.clip(0)] if len(edges) else NONE, NONE)
        src_op = np.where(has_node, nodes.src_op[node_row.clip(0)] if len(nodes) else NONE, NONE)
        dst_op = np.where(has_node, nodes.dst_op[node_row.clip(0)] if len(nodes) else NONE, NONE)
        op_of = self.op_id_of_nodes
        src_op = np.where(src_op >= 0, src_op, op_of(src))
        dst_op = np.where(dst_op >= 0, dst_op, op_of(dst))
        return Channels(ids, kind, buffer, operand_d, src_op, dst_op, src, dst, node_row, edge_row)

    def op_id_of_nodes(self, nodes: np.ndarray) -> np.ndarray:
        """The operation id of each combined-graph node number (-1: no such node, or no id)."""
        rows = self.node_rows(nodes)
        ops = self.key_ops.op_id
        return np.where(rows >= 0, ops[rows.clip(0)] if len(ops) else NONE, NONE)

    def node_rows(self, nodes: np.ndarray) -> np.ndarray:
        """The ``key_ops`` row of each node number, -1 where the graph declares no such node."""
        return _first_row(self.key_ops.node, np.asarray(nodes, np.int64))

    def partition_members(self) -> dict[int, list[int]]:
        """Each partition id's declared ``key_ops`` rows, in the order declared, in one pass over
        ``op_partitions`` (not one per partition: a dump may hold very many)."""
        groups: dict[int, list[int]] = {}
        for op, pid in zip(self.op_partitions.op.tolist(), self.op_partitions.partition.tolist()):
            groups.setdefault(pid, []).append(op)
        return groups

    def operands_of(self, row: int, strings: Strings) -> list[str]:
        k = self.key_ops
        s, n = int(k.operand_start[row]), int(k.operand_count[row])
        return [strings.values[i] for i in self.operands[s : s + n].tolist()]

    def verify(self) -> None:
        n_buf, n_ops = len(self.buffers), len(self.key_ops)
        if len(self.buffers) and not np.isin(self.buffers.kind, (SMEM, TMEM)).all():
            raise VerifyError(f"kernel {self.name}: a buffer of unknown kind")
        if len(self.channel_nodes) and ((self.channel_nodes.buffer < 0) | (self.channel_nodes.buffer >= n_buf)).any():
            raise VerifyError(f"kernel {self.name}: a channel node under no buffer")
        k = self.key_ops
        if n_ops and ((k.operand_start < 0) | (k.operand_start + k.operand_count > len(self.operands))).any():
            raise VerifyError(f"kernel {self.name}: key-op operands out of range")
        if len(self.op_partitions) and ((self.op_partitions.op < 0) | (self.op_partitions.op >= n_ops)).any():
            raise VerifyError(f"kernel {self.name}: a partition member that is no key op")
        for kind, live in self.liveness.items():
            if live.peak != (int(live.live.max()) if len(live.live) else 0):
                raise VerifyError(f"kernel {self.name}: {kind} peak {live.peak} is not the maximum of its live curve")
            if len(live.ops) != len(live.live) or (np.diff(live.ops) <= 0).any() or (len(live.live) and live.live[-1] != 0):
                raise VerifyError(f"kernel {self.name}: {kind} live curve is not a step function that ends at 0")


@dataclass
class MemoryModule:
    """Everything read from one input, and the findings of the passes run on it."""

    source: str
    kernels: list[Kernel] = field(default_factory=list)
    strings: Strings = field(default_factory=Strings)
    files: Strings = field(default_factory=Strings)  #: file paths, by the ``file`` columns
    texts: dict[int, str] = field(default_factory=dict)  #: file id -> its text, to quote lines
    findings: list[Finding] = field(default_factory=list)
    arch: str | None = None  #: the capacity table entry the liveness was held against
    _newlines: dict[int, list[int]] = field(default_factory=dict, repr=False, compare=False)

    def verify(self) -> None:
        for k in self.kernels:
            k.verify()
        for f in self.findings:
            if f.severity not in ("error", "warning", "note"):
                raise VerifyError(f"finding with unknown severity '{f.severity}'")

    def text(self, i: int) -> str | None:
        return None if i < 0 else self.strings.values[int(i)]

    def where(self, file: int, line: int, column: int) -> str:
        path = self.files[file] or self.source
        return f"{path}:{line}:{column}" if line > 0 else path

    def diagnostic(self, f: Finding, severity: str | None = None, suffix: str = "") -> str:
        """A finding as a compiler prints it: ``file:line:col: severity: message``, the source
        line and a caret (``severity``: another than the finding's, as ``--werror`` makes a
        warning an error; ``suffix``: after the message)."""
        return self.to_diagnostic(f, severity, suffix).format()

    def to_diagnostic(self, f: Finding, severity: str | None = None, suffix: str = "") -> Diagnostic:
        path = self.files[f.file] or self.source
        loc = Location(f.line, max(f.column, 1)) if f.line > 0 else None
        line = self.source_line(f.file, f.line) if loc is not None else None
        return Diagnostic(severity or f.severity, f.message + suffix, path, loc, [], line)

    def diagnostics(self) -> list[Diagnostic]:
        """Every finding, as the diagnostic engine takes it."""
        return [self.to_diagnostic(f) for f in self.findings]

    def source_line(self, file: int, line: int) -> str | None:
        """Line ``line`` (1-based) of file ``file``'s text; the file's newlines are found once, so
        that quoting many findings costs no more than reading the file."""
        text = self.texts.get(file)
        if text is None or line < 1:
            return None
        if file not in self._newlines:
            self._newlines[file] = [m.start() for m in re.finditer("\n", text)]
        newlines = self._newlines[file]
        if line - 1 > len(newlines):
            return None
        start = newlines[line - 2] + 1 if line > 1 else 0
        end = newlines[line - 1] if line - 1 < len(newlines) else len(text)
        return text[start:end]

    def add(self, kernel: Kernel, severity: str, code: str, message: str, file: int = NONE, line: int = 0, column: int = 0) -> Finding:
        if len(message) > MAX_MESSAGE:  # what it quotes is cut already; this bounds the rest
            message = message[: MAX_MESSAGE - 3] + "..."
        f = Finding(severity, code, message, kernel.index, int(file), int(line), int(column))
        self.findings.append(f)
        return f


def _first_row(column: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """For each key, the first row of ``column`` that holds it, else -1."""
    keys = np.asarray(keys)
    if not len(column) or not len(keys):
        return np.full(len(keys), NONE, np.int64)
    order = np.argsort(column, kind="stable")
    sorted_col = column[order]
    pos = np.searchsorted(sorted_col, keys).clip(0, len(column) - 1)
    return np.where(sorted_col[pos] == keys, order[pos], NONE).astype(np.int64)


#: Characters of a name or label that a finding quotes (a label may be a megabyte long).
MAX_QUOTED = 80
#: Characters of a finding's message, whatever it quotes.
MAX_MESSAGE = 2000


def quoted(text: str | None) -> str:
    """``text`` as a finding quotes it: cut to MAX_QUOTED characters, with how long it is."""
    text = text or ""
    return text if len(text) <= MAX_QUOTED else f"{text[:MAX_QUOTED - 1]}… ({len(text):,} characters)"


def interval_text(start: int, end: int) -> str:
    """Liveness as the dumps write it: ``[start-end)``."""
    return f"[{start}-{end})"

