"""``mem-check``: hold the parts of a kernel's dumps against each other, and its buffers against
their neighbours in time and space. Each finding points at the line it is about.

* summary tables agree with the clusters they sum up (name, buffer id, size, channel count,
  liveness, OperandD count), row for row;
* intervals are well formed (``start < end``), channels run inside their buffer's liveness, and
  each time axis spans the intervals it is drawn for;
* channels: one node and one edge per id; an edge of the combined graph for each liveness channel
  that names its ends; same kind, OperandD and ends in both views; edge ends that a partition
  declares; colours and styles as the emitter derives them (red TMEM, darkgreen SMEM, bold [D]);
* partitions: labels, program order inside a partition, node ids that are the operation id,
  ``op_op_<address % 100000>`` ids that two different ops share (Graphviz draws them as one);
* overlap in time and space: two clusters of one Allocation buffer id live at once (error);
  buffers whose channels carry the same ``buffer.id`` live at once: a note when all their
  channels sit in the kernel's innermost loop (the planner pools those into one multi-buffered
  allocation on purpose), a warning otherwise (space reused while still live).

Running it alone: ``MemCheck().apply(Context(), module)``; the findings are in ``module.findings``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, ClassVar, Iterator, Protocol, SupportsInt, cast

import numpy as np

from layerc.ir.memory import (
    COMBINED_GRAPH, KIND_NAMES, OTHER, SMEM, SMEM_GRAPH, TMEM, TMEM_GRAPH, Buffers, Kernel, MemoryModule, interval_text, quoted,
)
from layerc.passes.base import Context, ModulePass
from layerc.passes.registry import get_all_passes

EDGE_COLORS = {SMEM: "darkgreen", TMEM: "red", OTHER: "black"}


class _Located(Protocol):
    """A table whose rows say where in the dump they were written."""

    @property
    def file(self) -> np.ndarray: ...
    @property
    def line(self) -> np.ndarray: ...
    @property
    def column(self) -> np.ndarray: ...
_AXIS_STEPS = 10


def axis_ticks(lo: int, hi: int) -> list[int]:
    """The tick labels the emitters draw for intervals spanning ``[lo, hi)``."""
    step = max((hi - lo) // _AXIS_STEPS, 1)
    return list(range(lo, hi + 1, step))


@dataclass(frozen=True)
class MemCheck(ModulePass[MemoryModule]):
    """Consistency of summaries, intervals, channels and partitions; buffers that overlap in time
    and space."""

    name: ClassVar[str] = "mem-check"
    ir: ClassVar[str] = "mem"

    def apply(self, ctx: Context, module: MemoryModule) -> None:
        module.findings = [f for f in module.findings if f.code.startswith("capacity")]
        for k in module.kernels:
            _Checker(module, k).run()


class _Checker:
    def __init__(self, module: MemoryModule, kernel: Kernel):
        self.m, self.k = module, kernel
        self.b = kernel.buffers
        self.name: Callable[[SupportsInt], str | None] = lambda i: module.text(int(i))  # noqa: E731
        #: a name as a message quotes it
        self.shown: Callable[[SupportsInt], str] = lambda i: quoted(module.text(int(i)))  # noqa: E731

    def add(self, severity: str, code: str, message: str, table: _Located, row: int) -> None:
        self.m.add(self.k, severity, code, message, int(table.file[row]), int(table.line[row]), int(table.column[row]))

    def run(self) -> None:
        for kind, graph in ((SMEM, SMEM_GRAPH), (TMEM, TMEM_GRAPH)):
            if graph in self.k.graphs:
                self.summaries(kind)
                self.axis(kind, graph)
        self.intervals()
        self.channels()
        self.partitions()
        self.overlaps()

    # summary tables ---------------------------------------------------------------------------------
    def summaries(self, kind: int) -> None:
        b, s, nodes = self.b, self.k.summary, self.k.channel_nodes
        clusters = [int(i) for i in np.nonzero(b.kind == kind)[0]]
        rows = [int(i) for i in np.nonzero(s.kind == kind)[0]]
        mem = KIND_NAMES[kind]
        node_count = np.bincount(nodes.buffer, minlength=len(b)) if len(nodes) else np.zeros(len(b), np.int64)
        d_count = np.bincount(nodes.buffer, weights=nodes.operand_d, minlength=len(b)) if len(nodes) else np.zeros(len(b))
        pairs = list(zip(clusters, rows)) if len(clusters) == len(rows) else self._pair_by_name(clusters, rows, kind)
        for c, r in pairs:
            if c is None:  # a row alone: a pair holds a cluster, a row or both
                self.add("warning", "summary-extra", f"{mem} summary row '{self.shown(s.name[r])}' sums up no buffer cluster", s,
                         cast(int, r))
                continue
            if r is None:
                self.add("warning", "summary-missing", f"{mem} buffer '{self.shown(b.name[c])}' has no row in the summary table", b, c)
                continue
            diffs = []
            if not self._same_name(c, r, kind):
                diffs.append(f"name '{self.shown(s.name[r])}' vs '{self.shown(b.name[c])}'")
            if kind == SMEM:
                if s.buffer_id[r] != b.buffer_id[c]:
                    diffs.append(f"buffer id {s.buffer_id[r]} vs B{b.buffer_id[c]}")
                if s.bytes[r] != b.bytes[c]:
                    diffs.append(f"size {s.bytes[r]} vs {b.bytes[c]}")
            else:
                if (s.rows[r], s.cols[r]) != (b.rows[c], b.cols[c]):
                    diffs.append(f"size {_size(s.rows[r], s.cols[r])} vs {_size(b.rows[c], b.cols[c])}")
                if s.operand_d[r] != b.operand_d[c]:
                    diffs.append(f"OperandD {s.operand_d[r]} vs {b.operand_d[c]}")
            if (s.start[r], s.end[r]) != (b.start[c], b.end[c]):
                diffs.append(f"liveness {interval_text(s.start[r], s.end[r])} vs {interval_text(b.start[c], b.end[c])}")
            if s.channels[r] != node_count[c]:
                diffs.append(f"{s.channels[r]} channels vs {node_count[c]} in the cluster")
            if diffs:
                self.add("error", "summary-mismatch", f"{mem} summary row of '{self.shown(b.name[c])}' disagrees with its cluster: "
                         + "; ".join(diffs), s, r)
            if kind == TMEM and b.operand_d[c] != d_count[c]:
                self.add("error", "operand-d-count", f"TMEM buffer '{self.shown(b.name[c])}' says {b.operand_d[c]} OperandD "
                         f"but {int(d_count[c])} of its channel nodes are [D]", b, c)

    def _same_name(self, c: int, r: int, kind: int) -> bool:
        cluster, row = self.name(self.b.name[c]), self.name(self.k.summary.name[r])
        # TMEM's summary writes a nameless alloc as "alloc", its cluster as "alloc<index>"
        return cluster == row or (kind == TMEM and row == "alloc" and cluster == f"alloc{self.b.index[c]}")

    def _pair_by_name(self, clusters: list[int], rows: list[int], kind: int) -> list[tuple[int | None, int | None]]:
        """Each cluster with the first free summary row of its name (a nameless TMEM alloc's row
        reads "alloc"); rows left over pair with nothing. One pass each way, by name."""
        free: dict[str | None, list[int]] = defaultdict(list)  # by name (None: nameless)
        for r in reversed(rows):
            free[self.name(self.k.summary.name[r])].append(r)  # popped from the end: first row first
        taken: set[int] = set()
        pairs: list[tuple[int | None, int | None]] = []
        for c in clusters:
            name = self.name(self.b.name[c])
            names = [name] + (["alloc"] if kind == TMEM and name == f"alloc{self.b.index[c]}" else [])
            match = next((free[n].pop() for n in names if free.get(n)), None)
            if match is not None:
                taken.add(match)
            pairs.append((c, match))
        return pairs + [(None, r) for r in rows if r not in taken]

    def axis(self, kind: int, graph_kind: str) -> None:
        g = self.k.graphs[graph_kind]
        if g.axis is None:
            return
        b = self.b
        mine = np.nonzero(b.kind == kind)[0]
        if not len(mine):
            return
        lo, hi = int(b.start[mine].min()), int(b.end[mine].max())
        want = axis_ticks(lo, hi)
        if g.axis.tolist() != want:
            got = g.axis.tolist()
            self.m.add(self.k, "warning", "axis", f"the {KIND_NAMES[kind]} time axis reads {_ticks(got)} but the intervals span "
                       f"{interval_text(lo, hi)} (ticks {_ticks(want)})", g.file, g.axis_line, g.axis_column)

    # intervals ------------------------------------------------------------------------------------------
    def intervals(self) -> None:
        b, nodes = self.b, self.k.channel_nodes
        for i in range(len(b)):
            iv = interval_text(b.start[i], b.end[i])
            if b.end[i] < b.start[i]:
                self.add("error", "interval", f"liveness {iv} of '{self.shown(b.name[i])}' ends before it starts", b, i)
            elif b.end[i] == b.start[i]:
                self.add("warning", "interval-empty", f"'{self.shown(b.name[i])}' has an empty liveness {iv}: it is never live", b, i)
        for j in range(len(nodes)):
            r = int(nodes.buffer[j])
            ends = [int(x) for x in (nodes.src_op[j], nodes.dst_op[j]) if x >= 0]
            outside = [x for x in ends if not b.start[r] <= x < b.end[r]]
            if outside and b.end[r] > b.start[r]:
                self.add("warning", "channel-outside", f"channel ch{nodes.id[j]} ({nodes.src_op[j]} to {nodes.dst_op[j]}) uses "
                         f"'{self.shown(b.name[r])}' outside its liveness {interval_text(b.start[r], b.end[r])}", nodes, j)

    # channels ---------------------------------------------------------------------------------------------
    def channels(self) -> None:
        k, nodes, edges = self.k, self.k.channel_nodes, self.k.channel_edges
        for table, what in ((nodes, "liveness graphs show"), (edges, "combined graph draws")):
            seen: dict[int, int] = {}
            for i, cid in enumerate(table.id.tolist()):
                if cid in seen:
                    self.add("error", "channel-duplicate", f"the {what} channel ch{cid} twice (first at line {table.line[seen[cid]]})", table, i)
                else:
                    seen[cid] = i
        has_combined = COMBINED_GRAPH in k.graphs
        edge_of = {cid: i for i, cid in reversed(list(enumerate(edges.id.tolist())))}
        node_of = {cid: i for i, cid in reversed(list(enumerate(nodes.id.tolist())))}
        declared = set(k.key_ops.node.tolist())
        src_op, dst_op = k.op_id_of_nodes(edges.src), k.op_id_of_nodes(edges.dst)  # once, not once per channel
        for j, cid in enumerate(nodes.id.tolist()):
            e = edge_of.get(cid)
            kind = int(self.b.kind[nodes.buffer[j]])
            if e is None:
                if has_combined and nodes.src_op[j] >= 0:
                    self.add("warning", "channel-no-edge", f"channel ch{cid} ({nodes.src_op[j]} to {nodes.dst_op[j]}) has no edge in "
                             "the combined graph", nodes, j)
                continue
            if edges.kind[e] != kind:
                self.add("error", "channel-kind", f"channel ch{cid} is {KIND_NAMES[kind]} in the liveness graph but "
                         f"{KIND_NAMES[edges.kind[e]]} in the combined graph", edges, e)
            if bool(edges.operand_d[e]) != bool(nodes.operand_d[j]):
                self.add("error", "channel-operand-d", f"channel ch{cid} is {'' if nodes.operand_d[j] else 'not '}OperandD in the "
                         f"liveness graph but {'' if edges.operand_d[e] else 'not '}in the combined graph", edges, e)
            ops = (int(src_op[e]), int(dst_op[e]))
            if nodes.src_op[j] >= 0 and min(ops) >= 0 and ops != (nodes.src_op[j], nodes.dst_op[j]):
                self.add("error", "channel-ends", f"channel ch{cid} runs {nodes.src_op[j]} to {nodes.dst_op[j]} in the liveness "
                         f"graph but {ops[0]} to {ops[1]} in the combined graph", edges, e)
        for e, cid in enumerate(edges.id.tolist()):
            for end in (int(edges.src[e]), int(edges.dst[e])):
                if end not in declared:
                    self.add("error", "channel-dangling", f"channel ch{cid} ends at op_op_{end}, which no partition declares", edges, e)
            kind = int(edges.kind[e])
            mem_graph = {SMEM: SMEM_GRAPH, TMEM: TMEM_GRAPH}.get(kind)
            if cid not in node_of and mem_graph in k.graphs and k.graphs[mem_graph].empty is None:
                self.add("note", "channel-no-node", f"{KIND_NAMES[kind]} channel ch{cid} is under no buffer of the "
                         f"{KIND_NAMES[kind]} liveness graph (its alloc has no interval there)", edges, e)
            want_color = EDGE_COLORS[kind]
            want_style = "bold" if kind == TMEM and edges.operand_d[e] else "solid"
            color, style = self.name(edges.color[e]), self.name(edges.style[e])
            if (color, style) != (want_color, want_style):
                self.add("warning", "edge-style", f"channel ch{cid} ({KIND_NAMES[kind]}{' [D]' if edges.operand_d[e] else ''}) is "
                         f"drawn {quoted(color)}/{quoted(style)}, not {want_color}/{want_style}", edges, e)
        self.borders()

    def borders(self) -> None:
        """A node's border is red if a TMEM channel starts or ends there, else darkgreen for an
        SMEM channel, else black. A channel without a source is not drawn but still colours its
        destination, so only a border weaker than the drawn edges make it is a finding."""
        edges, ops = self.k.channel_edges, self.k.key_ops
        touch: dict[int, set[int]] = defaultdict(set)
        for e in range(len(edges)):
            for end in (int(edges.src[e]), int(edges.dst[e])):
                touch[end].add(int(edges.kind[e]))
        for i in range(len(ops)):
            kinds = touch.get(int(ops.node[i]), set())
            want = "red" if TMEM in kinds else "darkgreen" if SMEM in kinds else "black"
            got = self.name(ops.border[i])
            rank: dict[str | None, int] = {"black": 0, "darkgreen": 1, "red": 2}
            if rank.get(got, -1) < rank[want]:
                self.add("warning", "border", f"op_op_{ops.node[i]} has a {quoted(got)} border but its channels make it {want}", ops, i)

    # partitions -----------------------------------------------------------------------------------------
    def partitions(self) -> None:
        parts, ops, members = self.k.partitions, self.k.key_ops, self.k.op_partitions
        seen: dict[int, int] = {}
        for i, pid in enumerate(parts.id.tolist()):
            if pid in seen:
                self.add("error", "partition-duplicate", f"partition {pid} has two clusters", parts, i)
            seen.setdefault(pid, i)
            label = self.name(parts.label[i])
            if label != f"Partition {pid}":
                self.add("warning", "partition-label", f"cluster_partition_{pid} is labelled '{quoted(label)}'", parts, i)
        for i in range(len(ops)):
            if ops.op_id[i] >= 0 and ops.op_id[i] != ops.node[i]:
                self.add("error", "node-id", f"node op_op_{ops.node[i]} is labelled operation {ops.op_id[i]}", ops, i)
        by_node: dict[int, list[int]] = defaultdict(list)
        for i, n in enumerate(ops.node.tolist()):
            by_node[n].append(i)
        for n, rows in by_node.items():
            for i in rows[1:]:
                self.add("warning", "node-clash", f"op_op_{n} stands for two different ops (its id is an address mod 100000 and "
                         f"two addresses met): Graphviz draws them as one node", ops, i)
        last: dict[int, tuple[int, int]] = {}
        for j in range(len(members)):
            p, op = int(members.partition[j]), int(members.op[j])
            oid = int(ops.op_id[op])
            prev = last.get(p)
            if oid >= 0 and prev is not None and prev[0] > oid:
                self.add("warning", "partition-order", f"operation {oid} comes after operation {prev[0]} in partition {p}: the "
                         "emitter lists a partition's ops in program order", members, j)
            if oid >= 0:
                last[p] = (oid, j)

    # overlap in time and space -----------------------------------------------------------------------------
    def overlaps(self) -> None:
        b = self.b
        smem = [int(i) for i in np.nonzero(b.kind == SMEM)[0]]
        by_id: dict[int, list[int]] = defaultdict(list)
        for i in smem:
            by_id[int(b.buffer_id[i])].append(i)
        for bid, rows in by_id.items():
            for x, y, both in _overlaps(b, rows):
                if both is not None:
                    self.add("error", "buffer-clash", f"'{self.shown(b.name[x])}' and '{self.shown(b.name[y])}' are both SMEM buffer "
                             f"B{bid} and both live over {interval_text(*both)}", b, y)
                else:
                    self.add("warning", "buffer-id-twice", f"SMEM buffer id B{bid} names two clusters ('{self.shown(b.name[x])}' "
                             f"and '{self.shown(b.name[y])}')", b, y)
        self.shared_buffer_ids()

    def shared_buffer_ids(self) -> None:
        """Buffers whose channels' edges carry one ``buffer.id`` share its space."""
        k, b, nodes, edges, ops = self.k, self.b, self.k.channel_nodes, self.k.channel_edges, self.k.key_ops
        edge_of = {cid: i for i, cid in reversed(list(enumerate(edges.id.tolist())))}
        src_row, dst_row = k.node_rows(edges.src).tolist(), k.node_rows(edges.dst).tolist()
        refs: dict[int, set[int]] = defaultdict(set)
        depths: dict[int, list[int]] = defaultdict(list)
        for j, cid in enumerate(nodes.id.tolist()):
            e = edge_of.get(cid)
            if e is None or edges.buffer_ref[e] < 0:
                continue
            r = int(nodes.buffer[j])
            refs[r].add(int(edges.buffer_ref[e]))
            depths[r] += [int(ops.depth[x]) for x in (src_row[e], dst_row[e]) if x >= 0]
        for r, ids in refs.items():
            if len(ids) > 1:
                self.add("warning", "buffer-ref", f"the channels of '{self.shown(b.name[r])}' name different buffer.ids "
                         f"({', '.join('B' + str(i) for i in sorted(ids))})", b, r)
        innermost = int(ops.depth.max()) if len(ops) else 0
        sharing: dict[tuple[int, int], list[int]] = defaultdict(list)
        for r, ids in refs.items():
            sharing[(int(b.kind[r]), min(ids))].append(r)
        for (kind, bid), rows in sharing.items():
            for x, y, both in _overlaps(b, sorted(rows)):
                if both is None:
                    continue
                pooled = innermost > 0 and all(d == innermost for r in (x, y) for d in depths[r])
                what = (f"'{self.shown(b.name[x])}' and '{self.shown(b.name[y])}' share {KIND_NAMES[kind]} buffer.id B{bid} "
                        f"and are both live over {interval_text(*both)}")
                if pooled:
                    self.add("note", "shared-pool", what + ": fine for a multi-buffered innermost-loop pool", b, y)
                else:
                    self.add("warning", "shared-overlap", what + ": the space is reused while still live", b, y)


def _overlaps(b: Buffers, rows: list[int]) -> Iterator[tuple[int, int, tuple[int, int] | None]]:
    """``(x, y, span)`` for each row ``y`` but the first to start: ``x`` is the row started before
    it that ends last, ``span`` what they are both live over (None when ``y`` overlaps no earlier
    row). One finding per row, in one sort: every pair would be quadratic in a hostile dump."""
    last = None  # of the rows seen, the one that ends last
    for y in sorted(rows, key=lambda r: (int(b.start[r]), r)):
        if last is not None:
            yield last, y, _overlap(b, last, y)
        if last is None or b.end[y] > b.end[last]:
            last = y


def _overlap(b: Buffers, x: int, y: int) -> tuple[int, int] | None:
    lo, hi = max(int(b.start[x]), int(b.start[y])), min(int(b.end[x]), int(b.end[y]))
    return (lo, hi) if lo < hi else None


def _size(rows: int, cols: int) -> str:
    return f"{rows}x{cols}" if rows >= 0 else "-"


def _ticks(ticks: list[int]) -> str:
    return " | ".join(map(str, ticks[:4])) + (" ... " + str(ticks[-1]) if len(ticks) > 4 else "")


#: name → factory of the memory passes (the graph passes are in ``registry``).
MEM_PASSES = get_all_passes("mem")  #: the one registry's memory-plan view
