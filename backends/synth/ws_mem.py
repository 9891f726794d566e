"""Generate Triton warp-specialization memory-planner dumps, as the planner writes them.

``dumpSmemBufferLiveness``, ``dumpTmemBufferLiveness`` and ``dumpCombinedGraph``
(facebookexperimental/triton, ``CodePartitionUtility.cpp``) are ported line for line in
``emit_smem``, ``emit_tmem`` and ``emit_combined``; ``doMemoryPlanner`` (``WSMemoryPlanner.cpp``)
decides which run and in what order, and ``write_dump_dir`` / ``debug_log`` reproduce the two ways
a user gets them:

* ``TRITON_DUMP_WS_GRAPHS=DIR``: one file per dump, numbered by a process-global counter
  (``smem_liveness_N.dot``, ``combined_graph_N+1.dot``, ``tmem_liveness_N+2.dot`` with SMEM
  allocator 0; ``combined_graph_N.dot``, ``tmem_liveness_N+1.dot`` with allocator 1, the default,
  which dumps no SMEM graph), marker lines included. Without ``LLVM_DEBUG`` no op carries an
  ``operation_id``: labels lose their ``[id]`` and ``(a to b)``, nodes are ``op_op_<address % 100000>``.
* ``TRITON_LLVM_DEBUG_ONLY=nvgpu-ws-memory-planner MLIR_ENABLE_DUMP=1``: the same graphs on
  stderr, each after its ``[MemoryPlanner] ...:`` line, among IR dumps and debug lines.

A kernel (``KernelSpec``) is a list of ops in program order (ids in post-order, as
``buildOperationIdMap`` numbers them), SMEM and TMEM allocs, and channels between ops of
partitions. ``flash_attention_backward()`` builds the FA-backward kernel of the planner's own
documentation; ``random_kernel(rng)`` builds varied ones for property tests; ``expected(spec)``
says what a reader must get back (as ``tests/grammar/test_mem_reader.describe`` reads it).
``layerc gen-mem`` writes either form.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from layerc.backends.outputs import output_dir, write_atomic

#: Palettes, as in the emitters.
PARTITION_COLORS = ("lightblue", "lightgreen", "lightsalmon", "lightyellow", "lightpink", "lightcyan", "lavender", "wheat")
SMEM_COLORS = ("lightblue", "lightgreen", "lightyellow", "lightcoral", "lightsalmon", "lightcyan", "lavender", "peachpuff")
TMEM_COLORS = ("lightpink", "lavender", "peachpuff", "thistle", "lightyellow", "lightcyan", "wheat", "lightgreen")

#: The ops ``isKeyOp`` keeps (dialect prefix stripped); ``STORES`` render as ``op(src)``.
KEY_OPS = (
    "tc_gen5_mma", "descriptor_load", "load", "tmem_load", "local_load", "descriptor_store", "store", "tmem_store",
    "local_store", "descriptor_reduce", "addf", "subf", "mulf", "divf", "maxnumf", "minnumf", "truncf", "exp", "exp2",
    "log", "log2", "sqrt", "rsqrt", "tanh",
)
STORES = ("descriptor_store", "store", "tmem_store", "local_store", "descriptor_reduce")
LOADS = ("descriptor_load", "load", "tmem_load", "local_load")


# -- the kernel model ---------------------------------------------------------------------------
@dataclass(eq=False)
class Op:
    """An operation: ``loc`` is what ``getNamedLoc`` returns (a NameLoc name or ``file.py:LINE``;
    None: no location), ``operands`` the locs of the operands the label shows (None: ``?``)."""

    op_id: int
    name: str
    loc: str | None = None
    operands: tuple[str | None, ...] = ()
    shape: str = ""
    depth: int = 0
    tasks: tuple[int, ...] = ()
    has_result: bool = True
    key: bool = True
    address: int = 0


@dataclass(eq=False)
class SmemAlloc:
    """An SMEM buffer of ``Allocation``: its id, bytes, liveness, owner's loc, ``buffer.id``."""

    buffer_id: int
    size: int
    start: int = 0
    end: int = 0
    loc: str | None = None
    has_owner: bool = True
    buffer_attr: int = -1
    fixed: bool = False  #: the interval is given, not taken from the channels


@dataclass(eq=False)
class TmemAlloc:
    rows: int
    cols: int
    start: int = 0
    end: int = 0
    loc: str | None = None
    has_size: bool = True
    has_interval: bool = True
    buffer_attr: int = -1
    fixed: bool = False


@dataclass(eq=False)
class Channel:
    uid: int
    kind: str  #: "SMEM", "TMEM" or "other"
    alloc: SmemAlloc | TmemAlloc | None
    src: Op | None
    dst: Op | None
    producer: int
    consumers: tuple[int, ...]
    operand_d: bool = False
    users: tuple[Op, ...] = ()  #: the other consumers (``getDstOps``): they keep the buffer live


@dataclass
class KernelSpec:
    name: str
    ops: list[Op] = field(default_factory=list)  #: program order = post-order walk
    smem: list[SmemAlloc] = field(default_factory=list)  #: ``bufferInfo`` order
    tmem: list[TmemAlloc] = field(default_factory=list)  #: ``allocs`` order (after the planner's sort)
    channels: list[Channel] = field(default_factory=list)
    algo: int = 0  #: SMEM allocator: 0 dumps the SMEM graph, 1 (the default since 2026-06) does not
    debug: bool = True  #: LLVM_DEBUG on: ops carry operation_id attributes


# -- emitters (CodePartitionUtility.cpp) -----------------------------------------------------------
def simplify_name(name: str) -> str:
    """``simplifyName``: ``file.py:123`` becomes ``L123``."""
    colon = name.rfind(":")
    if colon >= 0 and colon + 1 < len(name):
        after = name[colon + 1 :]
        if after.isdigit() and after.isascii():
            return "L" + after
    return name


def _op_id(op: Op | None, k: KernelSpec) -> int:
    return op.op_id if (op is not None and k.debug) else -1


def node_id(op: Op, k: KernelSpec) -> str:
    """``"op_" + getNodeId(op)``."""
    n = _op_id(op, k)
    return f"op_op_{n}" if n >= 0 else f"op_op_{op.address % 100000}"


def key_op_label(op: Op, k: KernelSpec) -> str:
    """``getKeyOpLabel``."""
    label = f"[{op.op_id}] " if k.debug else ""
    out = simplify_name(op.loc) if op.loc else "?"
    shown = lambda loc: simplify_name(loc) if loc else "?"  # noqa: E731
    args = ", ".join(shown(a) for a in op.operands)
    label += f"{out} = {op.name}({args})" if assigns(op) else f"{op.name}({args})"
    second = op.shape
    if op.depth > 0:
        second = (second + ", " if second else "") + f"L{op.depth}"
    if second:
        label += "\\n" + second
    return label


def assigns(op: Op) -> bool:
    """Whether the label reads ``out = op(...)``: MMAs and loads always, stores never, other ops
    when they have a result."""
    if op.name == "tc_gen5_mma" or op.name in LOADS:
        return True
    return op.name not in STORES and op.has_result


def _channels_of(k: KernelSpec, kind: str) -> dict[int, list[Channel]]:
    by: dict[int, list[Channel]] = {}
    for ch in k.channels:
        if ch.kind == kind and ch.alloc is not None:
            by.setdefault(id(ch.alloc), []).append(ch)
    return by


def _axis(lo: int, hi: int) -> str:
    step = max((hi - lo) // 10, 1)
    ticks = []
    i = lo
    while i <= hi:
        ticks.append(str(i) + ("  |  " if i + step <= hi else ""))
        i += step
    return "".join(ticks)


def _channel_node_label(ch: Channel, k: KernelSpec, tmem: bool) -> str:
    label = f"ch{ch.uid}" + (" [D]" if tmem and ch.operand_d else "")
    if ch.src is not None and ch.dst is not None:
        s, d = _op_id(ch.src, k), _op_id(ch.dst, k)
        if s >= 0 and d >= 0:
            label += f" ({s} to {d})"
    return label


def _shown(a: SmemAlloc | TmemAlloc) -> bool:
    """Whether a liveness graph shows ``a``: a TMEM alloc with an interval, an SMEM buffer not [0-0)."""
    return a.has_interval if isinstance(a, TmemAlloc) else not (a.start == 0 and a.end == 0)


def _alloc_channels(a: SmemAlloc | TmemAlloc, by_alloc: dict[int, list[Channel]]) -> list[Channel]:
    """The channels a liveness graph lists under ``a``: none under an SMEM buffer without an owner."""
    return by_alloc.get(id(a), []) if (isinstance(a, TmemAlloc) or a.has_owner) else []


def _liveness_graph(k: KernelSpec, tmem: bool) -> str:
    """The skeleton both liveness dumps share (they differ in names, labels and the summary)."""
    kind, title = ("TMEM", "Tmem") if tmem else ("SMEM", "Smem")
    end = f"=== End {kind} Buffer Liveness Graph ===\n"
    w = [f"=== {kind} Buffer Liveness Graph ===\n", f"digraph {title}BufferLiveness {{\n", "  rankdir=LR;\n",
         "  node [shape=record, fontsize=9];\n", "  edge [style=invis];\n\n"]
    allocs = k.tmem if tmem else k.smem
    if not allocs:
        return "".join(w + [f'  empty [label="No {kind} allocations"];\n', "}\n", end])
    by_alloc = _channels_of(k, kind)
    shown = [a for a in allocs if _shown(a)]
    if not shown:
        return "".join(w + ['  empty [label="No liveness intervals"];\n', "}\n", end])
    lo, hi = min(a.start for a in shown), max(a.end for a in shown)
    w += ["  // Time axis\n", "  subgraph cluster_axis {\n", '    label="Operation ID";\n', "    style=invis;\n",
          f'    axis [shape=none, label="{_axis(lo, hi)}"];\n', "  }\n\n"]
    palette, prefix = (TMEM_COLORS, "tmem") if tmem else (SMEM_COLORS, "smem")
    prev_tail = ""
    for idx, a in enumerate(shown):
        node = f"{prefix}_{idx}"
        name = _buffer_name(a, idx)
        chans = _alloc_channels(a, by_alloc)
        if isinstance(a, TmemAlloc):
            n_d = sum(ch.operand_d for ch in chans)
            label = name + (f" {a.rows}x{a.cols}" if a.has_size else "") + f" [{a.start}-{a.end})"
            label += f" [{n_d} OperandD]" if n_d > 0 else ""
            w.append(f"  // TMEM Alloc: {name}\n")
        else:
            label = f"{name} B{a.buffer_id} [{a.start}-{a.end}) size={a.size}"
            w.append(f"  // SMEM Buffer: {name}\n")
        w += [f"  subgraph cluster_{node} {{\n", f'    label="{label}";\n', "    style=filled;\n",
              f'    fillcolor="{palette[idx % len(palette)]}";\n', "    color=black;\n\n"]
        prev = ""
        for ch in chans:
            ch_node = f"{node}_ch{ch.uid}"
            w.append(f'    {ch_node} [label="{_channel_node_label(ch, k, tmem)}", style=filled, fillcolor=white];\n')
            if prev:
                w.append(f"    {prev} -> {ch_node} [style=invis];\n")
            prev = ch_node
        if not chans:
            prev = f"{node}_info"
            w.append(f'    {prev} [label="no channels", style=filled, fillcolor=white];\n')
        w.append("  }\n\n")
        if prev_tail:
            first = f"{node}_ch{chans[0].uid}" if chans else f"{node}_info"
            w.append(f"  {prev_tail} -> {first} [style=invis];\n")
        prev_tail = prev
    w += ["\n  // Summary table\n", "  subgraph cluster_summary {\n",
          f'    label="{"TMEM Allocation Summary" if tmem else "SMEM Buffer Summary"}";\n', "    style=filled;\n",
          "    fillcolor=white;\n", "    summary [shape=none, label=<\n",
          '      <TABLE BORDER="0" CELLBORDER="1" CELLSPACING="0">\n']
    if tmem:
        w.append("        <TR><TD><B>Name</B></TD><TD><B>Size</B></TD><TD><B>Channels</B></TD><TD><B>"
                 "Liveness</B></TD><TD><B>OperandD</B></TD></TR>\n")
    else:
        w.append("        <TR><TD><B>Name</B></TD><TD><B>BufferID</B></TD><TD><B>"
                 "Size</B></TD><TD><B>Channels</B></TD><TD><B>Liveness</B></TD></TR>\n")
    for idx, a in enumerate(shown):
        chans = _alloc_channels(a, by_alloc)
        if isinstance(a, TmemAlloc):
            size = f"{a.rows}x{a.cols}" if a.has_size else "-"
            w.append(f"        <TR><TD>{a.loc or 'alloc'}</TD><TD>{size}</TD><TD>{len(chans)}</TD><TD>[{a.start}-{a.end})"
                     f"</TD><TD>{sum(ch.operand_d for ch in chans)}</TD></TR>\n")
        else:
            w.append(f"        <TR><TD>{_buffer_name(a, idx)}</TD><TD>{a.buffer_id}</TD><TD>{a.size}</TD><TD>{len(chans)}"
                     f"</TD><TD>[{a.start}-{a.end})</TD></TR>\n")
    w += ["      </TABLE>\n", "    >];\n", "  }\n", "}\n", end]
    return "".join(w)


def _buffer_name(a: SmemAlloc | TmemAlloc, idx: int) -> str:
    """The cluster's name: the owner's loc, else ``alloc<idx>`` (an SMEM buffer may have no owner)."""
    has_owner = getattr(a, "has_owner", True)
    return (a.loc if has_owner else None) or f"alloc{idx}"


def emit_smem(k: KernelSpec) -> str:
    """``dumpSmemBufferLiveness``: buffers with interval [0-0) are left out."""
    return _liveness_graph(k, tmem=False)


def emit_tmem(k: KernelSpec) -> str:
    """``dumpTmemBufferLiveness``: allocs without an interval are left out."""
    return _liveness_graph(k, tmem=True)


def partition_ops(k: KernelSpec) -> dict[int, list[Op]]:
    """``dumpCombinedGraph``'s partitions: channel ends under the producer / each consumer, then
    every key op under its first task id; each sorted by operation id."""
    parts: dict[int, list[Op]] = {}

    def put(p: int, op: Op) -> None:
        ops = parts.setdefault(p, [])
        if op not in ops:
            ops.append(op)

    for ch in k.channels:
        if ch.src is not None:
            put(ch.producer, ch.src)
        for c in ch.consumers:
            if ch.dst is not None:
                put(c, ch.dst)
    for op in k.ops:
        if op.key and op.tasks:
            put(op.tasks[0], op)
    for ops in parts.values():
        ops.sort(key=lambda o: _op_id(o, k))
    return dict(sorted(parts.items()))


def border_color(op: Op, k: KernelSpec) -> str:
    color = "black"
    for ch in k.channels:
        if ch.src is op or ch.dst is op:
            if ch.kind == "TMEM":
                return "red"
            if ch.kind == "SMEM":
                color = "darkgreen"
    return color


def edge_label(ch: Channel) -> str:
    label = f"ch{ch.uid}"
    if ch.alloc is not None and ch.alloc.buffer_attr >= 0:
        label += f" B{ch.alloc.buffer_attr}"
    loc = ch.src.loc if ch.src is not None and ch.src.loc else (ch.alloc.loc if ch.alloc is not None else None)
    if loc:
        label += f'\\n\\"{loc}\\"'
    if ch.kind == "TMEM":
        label += "\\n(TMEM)" + (" [D]" if ch.operand_d else "")
    elif ch.kind == "SMEM":
        label += "\\n(SMEM)"
    return label


def emit_combined(k: KernelSpec) -> str:
    """``dumpCombinedGraph``."""
    w = ["\n=== Combined Key Ops + Channel Graph (DOT format) ===\n", "// Render with: dot -Tpng <file>.dot -o graph.png\n",
         "digraph CombinedGraph {\n", "  rankdir=TB;\n", "  compound=true;\n", "  node [shape=box, style=filled, fontsize=9];\n",
         "  edge [fontsize=7];\n\n"]
    for p, ops in partition_ops(k).items():
        fill = PARTITION_COLORS[p % len(PARTITION_COLORS)]
        w += [f"  subgraph cluster_partition_{p} {{\n", f'    label="Partition {p}";\n', "    style=filled;\n",
              f'    fillcolor="{fill}";\n', "    color=blue;\n"]
        prev = ""
        for op in ops:
            nid = node_id(op, k)
            w.append(f'    {nid} [label="{key_op_label(op, k)}", fillcolor="{fill}", color={border_color(op, k)}];\n')
            if prev:
                w.append(f"    {prev} -> {nid} [style=invis];\n")
            prev = nid
        w.append("  }\n\n")
    w.append("  // Channel edges\n")
    for ch in k.channels:
        if ch.src is None or ch.dst is None:
            continue
        color = {"TMEM": "red", "SMEM": "darkgreen"}.get(ch.kind, "black")
        style = "bold" if ch.kind == "TMEM" and ch.operand_d else "solid"
        w.append(f'  {node_id(ch.src, k)} -> {node_id(ch.dst, k)} [label="{edge_label(ch)}", color={color}, style={style}];\n')
    w += ["}\n", "=== End Combined Graph ===\n"]
    return "".join(w)


# -- doMemoryPlanner: which dumps, in which order ---------------------------------------------------
PREFIX = {
    "smem": "\n[MemoryPlanner] SMEM buffer liveness:\n",
    "combined": "\n[doMemoryPlanner] Combined visualization:\n",
    "tmem": "\n[MemoryPlannerTmem] TMEM buffer liveness:\n",
}
FILE_PREFIX = {"smem": "smem_liveness_", "combined": "combined_graph_", "tmem": "tmem_liveness_"}
DUMPED = {"smem": "Dumped SMEM liveness to: ", "combined": "Dumped combined graph to: ", "tmem": "Dumped TMEM liveness to: "}
EMIT = {"smem": emit_smem, "combined": emit_combined, "tmem": emit_tmem}


def dumps_of(k: KernelSpec) -> list[str]:
    """The dumps one kernel produces, in order (none when it has no channel)."""
    if not k.channels:
        return []
    return (["smem"] if k.algo == 0 else []) + ["combined", "tmem"]


def write_dump_dir(kernels: list[KernelSpec], directory: str | Path, first_index: int = 0) -> list[Path]:
    """The files ``TRITON_DUMP_WS_GRAPHS=directory`` leaves after compiling ``kernels`` in one
    process (the counter starts at ``first_index``)."""
    directory = output_dir(directory)
    paths, counter = [], first_index
    for k in kernels:
        for kind in dumps_of(k):
            path = directory / f"{FILE_PREFIX[kind]}{counter}.dot"
            write_atomic(path, EMIT[kind](k))
            paths.append(path)
            counter += 1
    return paths


def debug_log(kernels: list[KernelSpec], noise: bool = True, dump_dir: str | None = None) -> str:
    """Stderr of a run under ``TRITON_LLVM_DEBUG_ONLY=nvgpu-ws-memory-planner MLIR_ENABLE_DUMP=1``:
    each kernel's IR dump (naming its ``tt.func``), planner debug lines, the graphs."""
    out: list[str] = []
    counter = 0
    for k in kernels:
        if noise:
            out += _ir_dump(k)
        for kind in dumps_of(k):
            if noise and kind == "combined":
                out.append(f"  tt.func public @{k.name}(%arg0: !tt.tensordesc<tensor<128x128xbf16>>) attributes {{noinline = false}} {{\n"
                           "  } loc(#loc)\n")
            out.append(PREFIX[kind])
            out.append(EMIT[kind](k))
            if dump_dir is not None:
                out.append(f"{DUMPED[kind]}{dump_dir}/{FILE_PREFIX[kind]}{counter}.dot\n")
                counter += 1
            if noise and kind == "smem":
                out.append("[nvgpu-ws-memory-planner]: buffer id 0 innermost\n")
    return "".join(out)


def _ir_dump(k: KernelSpec) -> list[str]:
    lines = ["// -----// IR Dump Before NVGPUWarpSpecialization (nvgpu-warp-specialization) ('builtin.module' operation) //----- //\n",
             '#loc = loc("/work/tritonbench/attention.py":412:0)\n',
             'module attributes {"ttg.num-warps" = 4 : i32, ttg.target = "cuda:100"} {\n',
             f"  tt.func public @{k.name}(%arg0: !tt.tensordesc<tensor<128x128xbf16>>) attributes {{noinline = false}} {{\n"]
    for op in k.ops[:6]:
        lines.append(f'    %{op.op_id} = ttng.{op.name} : () -> () loc(#loc{op.op_id})\n')
    lines += ["    tt.return loc(#loc)\n", "  } loc(#loc)\n", "} loc(#loc)\n", "\n"]
    for ch in k.channels[:3]:
        lines.append(f"[nvgpu-ws-memory-planner]: \nchannel with allocOp: {1 if ch.kind == 'TMEM' else 0} {ch.uid} \n")
    return lines


# -- what a reader must get back ---------------------------------------------------------------------
def expected(k: KernelSpec) -> dict:
    """The facts the dumps of ``k`` hold: buffers, summary rows, channel nodes and edges, key ops
    and partitions, as sorted tuples."""
    out: dict = {"buffers": [], "summary": [], "channel_nodes": [], "channel_edges": [], "key_ops": [], "partitions": []}
    kinds = dumps_of(k)
    for tmem, graph in ((False, "smem"), (True, "tmem")):
        if graph not in kinds:
            continue
        allocs = k.tmem if tmem else k.smem
        shown = [a for a in allocs if _shown(a)]
        by_alloc = _channels_of(k, "TMEM" if tmem else "SMEM")
        for idx, a in enumerate(shown):
            chans = _alloc_channels(a, by_alloc)
            n_d = sum(ch.operand_d for ch in chans) if tmem else 0
            name = _buffer_name(a, idx)
            if isinstance(a, TmemAlloc):  # -1: what the dump does not show
                size, buffer_id, nbytes = ((a.rows, a.cols) if a.has_size else (-1, -1)), -1, -1
            else:
                size, buffer_id, nbytes = (-1, -1), a.buffer_id, a.size
            out["buffers"].append(("TMEM" if tmem else "SMEM", idx, name, buffer_id, nbytes, *size, a.start, a.end, n_d))
            out["summary"].append(("TMEM" if tmem else "SMEM", (a.loc or "alloc") if tmem else name, buffer_id, nbytes,
                                   *size, len(chans), a.start, a.end, n_d if tmem else -1))
            for ch in chans:
                s = _op_id(ch.src, k) if ch.src is not None and ch.dst is not None else -1
                d = _op_id(ch.dst, k) if ch.src is not None and ch.dst is not None else -1
                if s < 0 or d < 0:
                    s = d = -1
                out["channel_nodes"].append((ch.uid, "TMEM" if tmem else "SMEM", idx, bool(tmem and ch.operand_d), s, d))
    if "combined" in kinds:
        number = lambda op: int(node_id(op, k)[len("op_op_"):])  # noqa: E731
        for ch in k.channels:
            if ch.src is None or ch.dst is None:
                continue
            loc = ch.src.loc if ch.src.loc else (ch.alloc.loc if ch.alloc is not None else None)
            bref = ch.alloc.buffer_attr if ch.alloc is not None else -1
            kind = ch.kind if ch.kind in ("SMEM", "TMEM") else "other"
            out["channel_edges"].append((ch.uid, number(ch.src), number(ch.dst), kind, bool(kind == "TMEM" and ch.operand_d),
                                         bref, loc))
        seen: dict[int, tuple] = {}
        members: dict[int, list[int]] = {}
        for p, ops in partition_ops(k).items():
            out["partitions"].append((p, f"Partition {p}", PARTITION_COLORS[p % len(PARTITION_COLORS)]))
            for op in ops:
                n = number(op)
                members.setdefault(n, []).append(p)
                if n not in seen:
                    out_name = (simplify_name(op.loc) if op.loc else "?") if assigns(op) else None
                    seen[n] = (n, _op_id(op, k), out_name, op.name, tuple(simplify_name(a) if a else "?" for a in op.operands),
                               op.shape or None, op.depth, border_color(op, k))
        out["key_ops"] = [seen[n] + (tuple(members[n]),) for n in sorted(seen)]
    out["partitions"].sort()
    for key in ("buffers", "summary", "channel_nodes", "channel_edges"):
        out[key].sort(key=repr)
    return out


# -- kernels ----------------------------------------------------------------------------------------------
class _Builder:
    """Ops in program order with post-order ids; intervals from the channels' ends."""

    def __init__(self, name: str, rng: random.Random, *, algo: int = 0, debug: bool = True):
        self.k = KernelSpec(name, algo=algo, debug=debug)
        self.rng = rng
        self.next_id = 0
        self.used_addresses: set[int] = set()

    def op(self, name: str, loc: str | None = None, operands=(), shape: str = "", depth: int = 0, task: int | None = None,
           has_result: bool = True, key: bool | None = None) -> Op:
        while True:  # addresses of distinct ops, distinct mod 100000 (a clash is tested on its own)
            address = 0x55D0_0000_0000 + 8 * self.rng.randrange(1 << 24)
            if address % 100000 not in self.used_addresses:
                self.used_addresses.add(address % 100000)
                break
        op = Op(self.next_id, name, loc, tuple(operands), shape, depth, () if task is None else (task,), has_result,
                name in KEY_OPS if key is None else key, address)
        self.k.ops.append(op)
        self.next_id += 1
        return op

    def skip(self, n: int = 1) -> None:
        """Ops the graphs do not show (converts, scf.yield, the loop op itself)."""
        self.next_id += n

    def channel(self, kind: str, alloc, src: Op | None, dst: Op | None, consumers=None, operand_d: bool = False,
                users: tuple[Op, ...] = ()) -> Channel:
        producer = src.tasks[0] if src is not None and src.tasks else 0
        if consumers is None:
            consumers = dst.tasks if dst is not None and dst.tasks else (0,)
        ch = Channel(len(self.k.channels), kind, alloc, src, dst, producer, tuple(consumers), operand_d, tuple(users))
        self.k.channels.append(ch)
        return ch

    def finish(self, tmem_order: str = "planner") -> KernelSpec:
        allocs: list[SmemAlloc | TmemAlloc] = [*self.k.smem, *self.k.tmem]
        for alloc in allocs:
            ends = [op.op_id for ch in self.k.channels if ch.alloc is alloc for op in (ch.src, ch.dst, *ch.users) if op is not None]
            if ends and not alloc.fixed:
                alloc.start, alloc.end = min(ends), max(ends) + 1
        if tmem_order == "planner":
            self.k.tmem = planner_tmem_order(self.k)
        return self.k


def planner_tmem_order(k: KernelSpec) -> list[TmemAlloc]:
    """``collectTMemAllocsAndLiveness``'s sort: allocs with a channel first, OperandD first, then
    by size (more columns, more rows, more cells) and earlier start."""
    first_channel: dict[int, Channel] = {}
    for ch in k.channels:
        if ch.kind == "TMEM" and ch.alloc is not None:
            first_channel.setdefault(id(ch.alloc), ch)

    def key(a: TmemAlloc):
        ch = first_channel.get(id(a))
        if ch is None:
            return (1,)
        return (0, not ch.operand_d, -a.rows * a.cols, -a.cols, -a.rows, a.start)

    return sorted(k.tmem, key=key)


def flash_attention_backward(name: str = "_attn_bwd", *, algo: int = 0, debug: bool = True, seed: int = 7,
                             head_dim: int = 128, block: int = 128) -> KernelSpec:
    """FA backward on Blackwell as the planner documentation shows it: partition 0 loads (TMA),
    1 issues the MMAs, 4 and 5 compute, 3 stores; K, V, Q, dO, LSE and Delta in SMEM, dsT staged
    in SMEM; QK^T, dP^T and dQ in TMEM, dK and dV accumulate in TMEM (OperandD)."""
    rng = random.Random(seed)
    b = _Builder(name, rng, algo=algo, debug=debug)
    bf16 = f"{block}x{head_dim}xbf16"
    tile32 = f"{block}x{block}xf32"
    sm = lambda loc, size, bid: SmemAlloc(bid, size, loc=loc)  # noqa: E731
    k_s, v_s = sm("k", block * head_dim * 2, 0), sm("v", block * head_dim * 2, 1)
    q_s, do_s = sm("q", block * head_dim * 2, 2), sm("do", block * head_dim * 2, 3)
    m_s, di_s = sm("m", block * 4, 4), sm("Di", block * 4, 5)
    ds_s = sm("dsT", block * block * 2, 6)
    b.k.smem = [k_s, v_s, q_s, do_s, m_s, di_s, ds_s]
    # buffer.id as allocator 0 gives it: the innermost-loop tiles of one element type share an id
    for alloc, attr in ((k_s, 1), (v_s, 2), (q_s, 0), (do_s, 0), (ds_s, 0), (m_s, 3), (di_s, 4)):
        alloc.buffer_attr = attr
    tm = lambda loc, cols: TmemAlloc(block, cols, loc=loc)  # noqa: E731
    qkT, dpT, dq, dv, dk = tm("qkT", block), tm("dpT", block), tm("dq", head_dim), tm("dv", head_dim), tm("dk", head_dim)
    b.k.tmem = [qkT, dpT, dq, dv, dk]

    b.skip(36)  # program ids, offsets, descriptors
    ld_k = b.op("descriptor_load", "k", shape=bf16, task=0)
    ld_v = b.op("descriptor_load", "v", shape=bf16, task=0)
    b.skip(2)
    zero_dv = b.op("tmem_store", "attn.py:301", ("dv_init",), shape=f"{block}x{head_dim}xf32", task=4)
    zero_dk = b.op("tmem_store", "attn.py:302", ("dk_init",), shape=f"{block}x{head_dim}xf32", task=4)
    b.skip(6)  # the loop bounds
    # the loop over the query blocks (depth 1)
    ld_q = b.op("descriptor_load", "q", shape=bf16, depth=1, task=0)
    ld_do = b.op("descriptor_load", "do", shape=bf16, depth=1, task=0)
    ld_m = b.op("descriptor_load", "m", shape=f"{block}xf32", depth=1, task=0)
    ld_di = b.op("descriptor_load", "Di", shape=f"{block}xf32", depth=1, task=0)
    b.skip(2)
    mma_qk = b.op("tc_gen5_mma", "qkT", ("k", "q"), depth=1, task=1)
    b.skip(1)
    mma_dp = b.op("tc_gen5_mma", "dpT", ("v", "do"), depth=1, task=1)
    b.skip(2)
    ld_qk = b.op("tmem_load", "qkT", ("qkT",), shape=tile32, depth=1, task=4)
    m_l = b.op("local_load", "m", ("m",), shape=f"{block}xf32", depth=1, task=4)
    b.op("subf", "attn.py:318", ("qkT", "m"), shape=tile32, depth=1, task=4)
    b.op("exp2", "pT", ("attn.py:318",), shape=tile32, depth=1, task=4)
    b.op("truncf", "ppT", ("pT",), shape=f"{block}x{block}xbf16", depth=1, task=4)
    st_p = b.op("tmem_store", "attn.py:322", ("ppT",), shape=f"{block}x{block}xbf16", depth=1, task=4)
    b.skip(1)
    mma_dv = b.op("tc_gen5_mma", "dv", ("ppT", "do"), depth=1, task=1)
    b.skip(1)
    ld_dp = b.op("tmem_load", "dpT", ("dpT",), shape=tile32, depth=1, task=5)
    di_l = b.op("local_load", "Di", ("Di",), shape=f"{block}xf32", depth=1, task=5)
    b.op("subf", "attn.py:331", ("dpT", "Di"), shape=tile32, depth=1, task=5)
    b.op("mulf", "dsT", ("pT", "attn.py:331"), shape=tile32, depth=1, task=5)
    b.op("truncf", "attn.py:333", ("dsT",), shape=f"{block}x{block}xbf16", depth=1, task=5)
    st_ds = b.op("local_store", "attn.py:334", ("attn.py:333",), shape=f"{block}x{block}xbf16", depth=1, task=5)
    b.skip(1)
    mma_dk = b.op("tc_gen5_mma", "dk", ("dsT", "q"), depth=1, task=1)
    mma_dq = b.op("tc_gen5_mma", "dq", ("dsT", "k"), depth=1, task=1)
    b.skip(2)
    ld_dq = b.op("tmem_load", "dq", ("dq",), shape=f"{block}x{head_dim}xf32", depth=1, task=3)
    b.op("mulf", "attn.py:342", ("dq",), shape=f"{block}x{head_dim}xf32", depth=1, task=3)
    b.op("descriptor_reduce", None, ("attn.py:342",), shape=f"{block}x{head_dim}xf32", depth=1, task=3, has_result=False)
    b.skip(3)  # scf.yield, scf.for
    # epilogue
    ld_dv = b.op("tmem_load", "dv", ("dv",), shape=f"{block}x{head_dim}xf32", task=3)
    b.op("truncf", "attn.py:350", ("dv",), shape=bf16, task=3)
    b.op("descriptor_store", None, ("attn.py:350",), shape=bf16, task=3, has_result=False)
    ld_dk = b.op("tmem_load", "dk", ("dk",), shape=f"{block}x{head_dim}xf32", task=3)
    b.op("mulf", "attn.py:353", ("dk",), shape=f"{block}x{head_dim}xf32", task=3)
    b.op("truncf", "attn.py:354", ("attn.py:353",), shape=bf16, task=3)
    b.op("descriptor_store", None, ("attn.py:354",), shape=bf16, task=3, has_result=False)
    b.skip(2)

    # channels, in collectPostChannels order: TMEM first, then SMEM
    b.channel("TMEM", qkT, mma_qk, ld_qk)
    b.channel("TMEM", dpT, mma_dp, ld_dp)
    b.channel("TMEM", dq, mma_dq, ld_dq)
    b.channel("TMEM", dv, zero_dv, mma_dv, operand_d=True)
    b.channel("TMEM", dv, mma_dv, ld_dv, operand_d=True)
    b.channel("TMEM", dk, zero_dk, mma_dk, operand_d=True)
    b.channel("TMEM", dk, mma_dk, ld_dk, operand_d=True)
    b.channel("TMEM", qkT, st_p, mma_dv)  # P^T goes back through TMEM as the A operand
    b.channel("SMEM", k_s, ld_k, mma_qk)
    b.channel("SMEM", v_s, ld_v, mma_dp)
    b.channel("SMEM", q_s, ld_q, mma_qk, users=(mma_dk,))
    b.channel("SMEM", do_s, ld_do, mma_dp, users=(mma_dv,))
    b.channel("SMEM", m_s, ld_m, m_l)
    b.channel("SMEM", di_s, ld_di, di_l)
    b.channel("SMEM", ds_s, st_ds, mma_dk, users=(mma_dq,))
    b.channel("SMEM", k_s, ld_k, mma_dq)
    return b.finish()


_NAMES = ("q", "k", "v", "do", "acc", "p", "s", "lse", "m", "l", "o", "dq", "dk", "dv", "qk", "ds", "x", "w", "y", "bias")
_FILES = ("attention.py", "matmul.py", "/work/kernels/fused_moe.py")


def random_kernel(rng: random.Random, name: str = "kernel", *, algo: int | None = None, debug: bool | None = None,
                  max_ops: int = 60) -> KernelSpec:
    """A varied warp-specialized kernel: 1-6 partitions (any task ids below 8), loads, MMAs,
    element-wise ops and stores over loops up to depth 2, SMEM and TMEM allocs with 0-3 channels,
    OperandD chains, allocs without names, owners or sizes, and [0-0) SMEM buffers."""
    algo = rng.choice((0, 1)) if algo is None else algo
    debug = rng.random() < 0.7 if debug is None else debug
    b = _Builder(name, rng, algo=algo, debug=debug)
    parts = sorted(rng.sample(range(8), rng.randint(1, 6)))

    def loc() -> str | None:
        r = rng.random()
        if r < 0.6:
            return rng.choice(_NAMES) + ("" if rng.random() < 0.7 else str(rng.randint(0, 9)))
        if r < 0.85:
            return f"{rng.choice(_FILES).rsplit('/', 1)[-1]}:{rng.randint(10, 900)}"
        return None

    n_ops = rng.randint(3, max_ops)
    depth = 0
    for _ in range(n_ops):
        if rng.random() < 0.1:
            depth = max(0, min(2, depth + rng.choice((-1, 1))))
        b.skip(rng.choice((0, 0, 1, 2)))
        op_name = rng.choice(KEY_OPS + ("async_tma_copy_global_to_local", "tc_gen5_commit"))
        shape = rng.choice(("", "128x128xf32", "128x64xbf16", "64x256xf8E4M3FN", "128xf32", "!tt.ptr<f16>"))
        if op_name == "tc_gen5_mma":
            shape = ""
        n_args = 2 if op_name == "tc_gen5_mma" else rng.randint(0, 3)
        task = rng.choice(parts) if rng.random() < 0.95 else None
        b.op(op_name, loc(), [loc() for _ in range(n_args)], shape, depth, task,
             has_result=op_name not in STORES and rng.random() < 0.95)
    ops = b.k.ops
    sizes = (512, 1024, 8192, 16384, 32768, 65536)
    buffer_id = rng.randint(0, 3)
    for i in range(rng.randint(0, 10)):
        a = SmemAlloc(buffer_id, rng.choice(sizes), loc=loc())
        buffer_id += rng.choice((1, 1, 2))
        a.has_owner = rng.random() < 0.95
        a.buffer_attr = rng.choice((-1, i, i, 0))
        if rng.random() < 0.15:
            a.start, a.end = (0, 0) if rng.random() < 0.5 else sorted(rng.sample(range(b.next_id + 2), 2))
            a.fixed = True
        b.k.smem.append(a)
    for _ in range(rng.randint(0, 6)):
        t = TmemAlloc(rng.choice((64, 128)), rng.choice((1, 32, 64, 128, 256)), loc=loc())
        t.has_size = rng.random() < 0.95
        t.has_interval = rng.random() < 0.95
        t.buffer_attr = rng.choice((-1, -1, -1, rng.randint(0, 9)))
        if rng.random() < 0.15:
            t.start, t.end = sorted(rng.sample(range(b.next_id + 2), 2))
            t.fixed = True
        b.k.tmem.append(t)
    allocs: list[SmemAlloc | TmemAlloc] = [*b.k.smem, *b.k.tmem]
    for alloc in rng.sample(allocs, len(allocs)):
        tmem = isinstance(alloc, TmemAlloc)
        for _ in range(rng.choice((0, 1, 1, 1, 2, 3))):
            src: Op | None = rng.choice(ops)
            dst = rng.choice(ops)
            if rng.random() < 0.05:
                src = None
            consumers = tuple(sorted(rng.sample(parts, rng.randint(1, min(2, len(parts))))))
            b.channel("TMEM" if tmem else "SMEM", alloc, src, dst, consumers, operand_d=tmem and rng.random() < 0.4)
    if rng.random() < 0.1 and len(ops) > 1:  # a channel of neither memory (drawn black)
        b.channel("other", None, rng.choice(ops), rng.choice(ops))
    rng.shuffle(b.k.channels)
    for uid, ch in enumerate(b.k.channels):
        ch.uid = uid + rng.choice((0, 0, 0, 5))
    _unique_uids(b.k)
    return b.finish(tmem_order=rng.choice(("planner", "as-is")))


def _unique_uids(k: KernelSpec) -> None:
    seen: set[int] = set()
    for ch in k.channels:
        while ch.uid in seen:
            ch.uid += 1
        seen.add(ch.uid)


def build_kernels(example: str, n: int, algo: int, debug: bool, seed: int) -> list[KernelSpec]:
    rng = random.Random(seed)
    if example == "fa-bwd":
        return [flash_attention_backward(f"_attn_bwd_{i}" if n > 1 else "_attn_bwd", algo=algo, debug=debug, seed=seed + i)
                for i in range(n)]
    return [random_kernel(rng, f"kernel_{i}", algo=algo, debug=debug) for i in range(n)]
