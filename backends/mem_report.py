"""A memory module as a report: the JSON document, the terminal summary (rich), and the plain IR
text ``--print-ir-after-all`` prints.

The JSON document has, per kernel, its dumps, buffers (kind, name, ids, size, liveness, channel
count, OperandD, where in the input), channels (merged from both views), partitions with their
ops, the SMEM and TMEM peaks with the operation id where each happens and the buffers live there,
the live amount as ``steps`` (``[operation id, amount from there on]`` where it changes, the last 0),
and the findings (severity, code, message, file, line, column).
"""

from __future__ import annotations

import numpy as np

from layerc.ir.memory import KIND_NAMES, SMEM, TMEM, Kernel, Liveness, MemoryModule, interval_text
from layerc.passes.mem_liveness import CAPACITY, TMEM_LANES, live_at

SEVERITIES = ("error", "warning", "note")
#: The terminal summary lists this many buffers and partitions of a kernel (JSON has them all), and
#: this many characters of a name.
SHOW_ROWS = 200
SHOW_NAME = 60
SHOW_NAMES = 20  #: buffers named on a peak's line


def buffer_size(module: MemoryModule, k: Kernel, i: int) -> str:
    b = k.buffers
    if b.kind[i] == SMEM:
        return human_bytes(int(b.bytes[i]))
    return f"{b.rows[i]}x{b.cols[i]}" if b.rows[i] >= 0 else "?"


def human_bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    return f"{n / 1024:,.1f} KiB".replace(".0 KiB", " KiB")


def counts(module: MemoryModule) -> dict[str, int]:
    out = {s: 0 for s in SEVERITIES}
    for f in module.findings:
        out[f.severity] += 1
    return out


# -- JSON -----------------------------------------------------------------------------------------------
def report(module: MemoryModule) -> dict:
    cap = CAPACITY.get(module.arch or "")
    return {
        "source": module.source,
        "arch": module.arch,
        "capacity": None if cap is None else {
            "smem_bytes_per_sm": cap.smem_per_sm, "smem_bytes_per_block": cap.smem_per_block,
            "tmem_lanes": TMEM_LANES if cap.tmem_columns else 0, "tmem_columns": cap.tmem_columns,
        },
        "kernels": [_kernel(module, k) for k in module.kernels],
        "findings": counts(module),
    }


def _kernel(m: MemoryModule, k: Kernel) -> dict:
    b, ops = k.buffers, k.key_ops
    node_count = np.bincount(k.channel_nodes.buffer, minlength=len(b)) if len(k.channel_nodes) else np.zeros(len(b), int)
    ch = k.channels()
    edges = k.channel_edges
    out = {
        "name": k.name,
        "index": k.index,
        "graphs": {kind: {"file": m.files[g.file], "line": g.line, "empty": g.empty} for kind, g in k.graphs.items()},
    }
    for mem, kind in (("smem", SMEM), ("tmem", TMEM)):
        live = k.liveness.get(mem)
        key = "peak_smem_bytes" if mem == "smem" else "peak_tmem_columns"
        out[key] = None if live is None else live.peak
        out[key.replace("bytes", "at").replace("columns", "at")] = None if live is None or live.peak_at < 0 else live.peak_at
        out[mem] = None if live is None else _liveness(m, k, kind, live)
    out["buffers"] = [
        {
            "kind": KIND_NAMES[b.kind[i]], "name": m.text(b.name[i]),
            "buffer_id": _opt(b.buffer_id[i]), "bytes": _opt(b.bytes[i]), "rows": _opt(b.rows[i]), "cols": _opt(b.cols[i]),
            "start": int(b.start[i]), "end": int(b.end[i]), "channels": int(node_count[i]), "operand_d": int(b.operand_d[i]),
            "file": m.files[int(b.file[i])], "line": int(b.line[i]),
        }
        for i in range(len(b))
    ]
    out["channels"] = [
        {
            "id": int(ch.id[i]), "kind": KIND_NAMES[ch.kind[i]],
            "buffer": m.text(b.name[ch.buffer[i]]) if ch.buffer[i] >= 0 else None, "operand_d": bool(ch.operand_d[i]),
            "src_op": _opt(ch.src_op[i]), "dst_op": _opt(ch.dst_op[i]),
            "src_node": f"op_op_{ch.src[i]}" if ch.src[i] >= 0 else None, "dst_node": f"op_op_{ch.dst[i]}" if ch.dst[i] >= 0 else None,
            "buffer_ref": _opt(edges.buffer_ref[ch.edge_row[i]]) if ch.edge_row[i] >= 0 else None,
            "loc": m.text(edges.loc[ch.edge_row[i]]) if ch.edge_row[i] >= 0 else None,
        }
        for i in range(len(ch))
    ]
    members = k.partition_members()
    out["partitions"] = [{"id": int(pid), "ops": [_op(m, k, r) for r in members.get(pid, ())]} for pid in k.partitions.id.tolist()]
    out["key_ops"] = len(ops)
    out["findings"] = [
        {"severity": f.severity, "code": f.code, "message": f.message, "file": m.files[f.file] if f.file >= 0 else None,
         "line": f.line or None, "column": f.column or None}
        for f in m.findings if f.kernel == k.index
    ]
    return out


def _liveness(m: MemoryModule, k: Kernel, kind: int, live: Liveness) -> dict:
    rows = live_at(k, kind, live.peak_at).tolist() if live.peak_at >= 0 else []
    return {"peak": live.peak, "at": live.peak_at if live.peak_at >= 0 else None, "unit": live.unit, "capacity": live.capacity,
            "live_at_peak": [m.text(k.buffers.name[r]) for r in rows], "unknown_size": live.unknown,
            "steps": [[op, amount] for op, amount in zip(live.ops.tolist(), live.live.tolist())]}


def _op(m: MemoryModule, k: Kernel, r: int) -> dict:
    ops = k.key_ops
    return {"node": f"op_op_{ops.node[r]}", "op_id": _opt(ops.op_id[r]), "name": m.text(ops.name[r]), "op": m.text(ops.op[r]),
            "operands": k.operands_of(r, m.strings), "shape": m.text(ops.shape[r]), "loop_depth": int(ops.depth[r])}


def _opt(v) -> int | None:
    v = int(v)
    return v if v >= 0 else None


# -- plain IR text -----------------------------------------------------------------------------------------
def json_text(module: MemoryModule) -> str:
    """``memory.json``: the report of every kernel, with the findings."""
    import orjson

    return (orjson.dumps(report(module), option=orjson.OPT_INDENT_2) + b"\n").decode()


def ir_text(m: MemoryModule) -> str:
    """One block per kernel, a line per buffer, channel and partition (for --print-ir-after-all)."""
    lines = []
    for k in m.kernels:
        lines.append(f'kernel "{k.name}" {{  // {", ".join(k.graphs)}')
        b = k.buffers
        for i in range(len(b)):
            d = f" operand_d={b.operand_d[i]}" if b.operand_d[i] else ""
            bid = f" B{b.buffer_id[i]}" if b.buffer_id[i] >= 0 else ""
            lines.append(f"  {KIND_NAMES[b.kind[i]].lower()} {m.text(b.name[i])}{bid} {buffer_size(m, k, i)} "
                         f"{interval_text(b.start[i], b.end[i])}{d}")
        ch = k.channels()
        for i in range(len(ch)):
            buf = m.text(b.name[ch.buffer[i]]) if ch.buffer[i] >= 0 else "-"
            ends = f"{_id(ch.src_op[i])} -> {_id(ch.dst_op[i])}"
            lines.append(f"  channel ch{ch.id[i]} {KIND_NAMES[ch.kind[i]]}{' [D]' if ch.operand_d[i] else ''} {buf}: {ends}")
        members = k.partition_members()
        for pid in k.partitions.id.tolist():
            rows = members.get(pid, [])
            lines.append(f"  partition {pid}: " + ", ".join(f"{m.text(k.key_ops.op[r])}@{_id(k.key_ops.op_id[r])}" for r in rows))
        for mem, live in k.liveness.items():
            lines.append(f"  liveness {mem}: peak {live.peak} {live.unit} at {_id(live.peak_at)} of {live.capacity}")
        lines.append("}")
    for f in m.findings:
        lines.append(f"// {f.severity}: {m.kernels[f.kernel].name}: {f.code}: {f.message}")
    return "\n".join(lines) + "\n"


def _id(v) -> str:
    return str(int(v)) if v >= 0 else "?"


# -- terminal ------------------------------------------------------------------------------------------------
def show(m: MemoryModule, console, written: list[str] | None = None, timeline_width: int = 32) -> None:
    """The terminal summary: per kernel its peaks, a buffer table with a liveness strip, its
    partitions and channels; then every finding as a compiler prints it."""
    from rich.table import Table
    from rich.text import Text

    for k in m.kernels:
        files = ", ".join(sorted({str(m.files[g.file]).rsplit("/", 1)[-1] for g in k.graphs.values()}))
        console.print(Text.assemble((_cut(k.name), "bold"), f"  ({files}; {m.arch or 'no arch'})"))
        for mem in ("smem", "tmem"):
            live = k.liveness.get(mem)
            if live is None or (mem == "tmem" and not (k.buffers.kind == TMEM).any() and "tmem" not in k.graphs):
                continue
            console.print("  " + _peak_line(m, k, mem, live))
        b = k.buffers
        if len(b):
            lo, hi = int(b.start.min()), int(max(b.end.max(), b.start.min() + 1))
            tab = Table(box=None, pad_edge=False, show_header=True, header_style="bold")
            for col, right in (("", False), ("buffer", False), ("size", True), ("liveness", True), ("channels", True),
                               (f"ops {lo}..{hi - 1}", False)):
                tab.add_column(col, justify="right" if right else "left")
            counts_ = np.bincount(k.channel_nodes.buffer, minlength=len(b)) if len(k.channel_nodes) else np.zeros(len(b), int)
            for i in np.lexsort((b.start, b.kind))[:SHOW_ROWS].tolist():
                kind = KIND_NAMES[b.kind[i]]
                d = f" ({b.operand_d[i]} [D])" if b.operand_d[i] else ""
                tab.add_row(kind, _cut(m.text(b.name[i])), buffer_size(m, k, i), interval_text(b.start[i], b.end[i]),
                            f"{counts_[i]}{d}", Text(_strip(int(b.start[i]), int(b.end[i]), lo, hi, timeline_width),
                                                     style="blue" if b.kind[i] == SMEM else "red"))
            console.print(tab)
            if len(b) > SHOW_ROWS:
                console.print(f"  ... and {len(b) - SHOW_ROWS:,} more buffers (the JSON report lists them all)")
        members = k.partition_members()
        pids = k.partitions.id.tolist()
        parts = ", ".join(f"{pid} ({len(members.get(pid, ()))} ops)" for pid in pids[:SHOW_ROWS])
        parts += f", ... ({len(pids):,} partitions)" if len(pids) > SHOW_ROWS else ""
        ch = k.channels()
        if len(ch) or parts:
            kinds = ", ".join(f"{int((ch.kind == c).sum())} {KIND_NAMES[c]}" for c in (SMEM, TMEM, 2) if (ch.kind == c).any())
            console.print(f"  partitions {parts or '-'}; {len(ch)} channels ({kinds or 'none'}, {int(ch.operand_d.sum())} OperandD)")
        console.print()
    for f in m.findings:
        color = {"error": "red", "warning": "yellow", "note": "cyan"}[f.severity]
        console.print(Text(m.diagnostic(f), style=color if f.severity == "error" else ""))
    c = counts(m)
    console.print(f"{len(m.kernels)} kernel(s); {c['error']} error(s), {c['warning']} warning(s), {c['note']} note(s)")
    for path in written or ():
        console.print(f"wrote {path}", highlight=False)


def _cut(text: str | None) -> str:
    text = text or ""
    return text if len(text) <= SHOW_NAME else text[: SHOW_NAME - 1] + "…"


def _peak_line(m: MemoryModule, k: Kernel, mem: str, live: Liveness) -> str:
    kind = SMEM if mem == "smem" else TMEM
    if live.peak_at < 0:
        return f"{mem.upper()}: nothing live"
    rows = live_at(k, kind, live.peak_at).tolist()
    names = [_cut(m.text(k.buffers.name[r])) for r in rows[:SHOW_NAMES]]
    names += [f"{len(rows) - SHOW_NAMES:,} more"] if len(rows) > SHOW_NAMES else []
    if mem == "smem":
        amount = f"{human_bytes(live.peak)} ({live.peak:,} B)"
        of = f"of {human_bytes(live.capacity)}"
    else:
        amount, of = f"{live.peak} columns", f"of {live.capacity}"
    share = f" ({100 * live.peak / live.capacity:.0f}%)" if live.capacity else ""
    unknown = f"; {live.unknown} of unknown size left out" if live.unknown else ""
    return f"{mem.upper()} peak {amount} at op {live.peak_at} {of}{share}: {', '.join(names)}{unknown}"


def _strip(start: int, end: int, lo: int, hi: int, width: int) -> str:
    """A buffer's liveness as a strip of blocks over ``[lo, hi)`` in ``width`` characters."""
    if end <= start:
        return ""
    scale = width / max(hi - lo, 1)
    a = int((start - lo) * scale)
    z = max(int(np.ceil((end - lo) * scale)), a + 1)
    return " " * a + "█" * (z - a)
