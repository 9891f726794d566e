"""A memory module as a Perfetto trace (``.pftrace``, TrackEvent protobuf).

Time is the operation id: one operation is drawn as one microsecond. Each kernel is a process
(``<kernel> memory``) whose child tracks are, in order: ``SMEM live bytes`` and ``TMEM live
columns`` counters, one track per buffer holding one slice over its liveness (``SMEM k``,
``TMEM dv``; size, buffer id, channels and OperandD as arguments), then, when the dump has
operation ids, one track per partition with its key ops as one-operation slices and each channel
as a flow from its source op to its destination op.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from layerc.backends.outputs import write_atomic
from layerc.ir.diagnostics import LayercError
from layerc.ir.memory import KIND_NAMES, SMEM, Kernel, MemoryModule, interval_text

#: Nanoseconds per operation id.
NS_PER_OP = 1000
SEQUENCE_ID = 0x6D65
_UUID_BASE = 0x6D65 << 40
_BEGIN, _END, _COUNTER = 1, 2, 4  # TrackEvent.Type
_EXPLICIT = 3  # TrackDescriptor.ChildTracksOrdering.EXPLICIT
_BYTES, _COUNT = 3, 2  # CounterDescriptor.Unit


def write_memory_pftrace(module: MemoryModule, path: str | os.PathLike) -> dict[str, int]:
    """Write the trace; returns counts (``tracks``, ``slices``, ``counters``, ``flows``, ``bytes``)."""
    try:
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    except ImportError:  # pragma: no cover - a declared dependency
        raise LayercError("writing a .pftrace needs the 'perfetto' package (pip install perfetto)") from None
    w = _Writer(pb)
    for k in module.kernels:
        w.kernel(module, k)
    trace = pb.Trace()
    trace.packet.extend(w.descriptors)
    for _, _, packet in sorted(w.events, key=lambda e: (e[0], e[1])):
        trace.packet.append(packet)
    return {**w.stats, "bytes": write_atomic(path, trace.SerializeToString())}


class _Writer:
    def __init__(self, pb: Any) -> None:  # the perfetto_trace_pb2 module
        self.pb = pb
        self.next_uuid = _UUID_BASE
        self.next_flow = 0
        self.descriptors: list = []
        self.events: list[tuple[int, int, object]] = []  #: (ts, order: ends, counters, begins), packet
        self.stats = {"tracks": 0, "slices": 0, "counters": 0, "flows": 0}
        self.first = True

    def track(self, name: str, parent: int | None = None, rank: int = 0, pid: int | None = None, unit: int | None = None) -> int:
        self.next_uuid += 1
        p = self.pb.TracePacket()
        if self.first:
            p.first_packet_on_sequence = True
            self.first = False
        p.trusted_packet_sequence_id = SEQUENCE_ID
        td = p.track_descriptor
        td.uuid = self.next_uuid
        if pid is not None:
            td.process.pid = pid
            td.process.process_name = name
            td.child_ordering = _EXPLICIT
        else:
            td.name = name
            td.sibling_order_rank = rank
        if parent is not None:
            td.parent_uuid = parent
        if unit is not None:
            td.counter.unit = unit
        self.descriptors.append(p)
        self.stats["tracks"] += 1
        return self.next_uuid

    def event(self, ts: int, kind: int, track: int, name: str | None = None, args: dict | None = None,
              value: int | None = None, flows=(), ends=()) -> None:
        p = self.pb.TracePacket()
        p.timestamp = ts * NS_PER_OP
        p.trusted_packet_sequence_id = SEQUENCE_ID
        e = p.track_event
        e.type = kind
        e.track_uuid = track
        if name is not None:
            e.name = name
        if value is not None:
            e.counter_value = value
        for key, v in (args or {}).items():
            a = e.debug_annotations.add()
            a.name = key
            if isinstance(v, str):
                a.string_value = v
            else:
                a.int_value = int(v)
        e.flow_ids.extend(flows)
        e.terminating_flow_ids.extend(ends)
        self.events.append((ts, {_END: 0, _COUNTER: 1, _BEGIN: 2}[kind], p))

    def kernel(self, m: MemoryModule, k: Kernel) -> None:
        proc = self.track(f"{k.name} memory", pid=k.index + 1)
        rank = 0
        for mem, label, unit in (("smem", "SMEM live bytes", _BYTES), ("tmem", "TMEM live columns", _COUNT)):
            live = k.liveness.get(mem)
            if live is None or not len(live.live):
                continue
            t = self.track(label, proc, rank, unit=unit)
            rank += 1
            for op, value in zip(live.ops.tolist(), live.live.tolist()):  # a step where the amount changes; the last is 0
                self.event(op, _COUNTER, t, value=value)
            self.stats["counters"] += len(live.ops)
        b = k.buffers
        counts = np.bincount(k.channel_nodes.buffer, minlength=len(b)) if len(k.channel_nodes) else np.zeros(len(b), int)
        for i in np.lexsort((b.start, b.kind)).tolist():
            if b.end[i] <= b.start[i]:
                continue
            kind, name = int(b.kind[i]), m.text(b.name[i])
            t = self.track(f"{KIND_NAMES[kind]} {name}", proc, rank)
            rank += 1
            args = {"liveness": interval_text(b.start[i], b.end[i]), "channels": int(counts[i])}
            if kind == SMEM:
                args.update(bytes=int(b.bytes[i]), buffer_id=int(b.buffer_id[i]))
            else:
                if b.rows[i] >= 0:
                    args.update(rows=int(b.rows[i]), columns=int(b.cols[i]))
                args["operand_d"] = int(b.operand_d[i])
            self.event(int(b.start[i]), _BEGIN, t, name, args)
            self.event(int(b.end[i]), _END, t)
            self.stats["slices"] += 1
        self._partitions(m, k, proc, rank)

    def _partitions(self, m: MemoryModule, k: Kernel, proc: int, rank: int) -> None:
        ops = k.key_ops
        if not len(ops) or (ops.op_id < 0).all():
            return
        flows_out: dict[int, list[int]] = {}
        flows_in: dict[int, list[int]] = {}
        ch = k.channels()
        for src, dst in zip(k.node_rows(ch.src).tolist(), k.node_rows(ch.dst).tolist()):
            if src >= 0 and dst >= 0 and ops.op_id[src] >= 0 and ops.op_id[dst] >= 0:
                self.next_flow += 1  # unique in the trace, whatever ids the dump gives its channels
                flows_out.setdefault(src, []).append(self.next_flow)
                flows_in.setdefault(dst, []).append(self.next_flow)
                self.stats["flows"] += 1
        members = k.partition_members()
        for pid in k.partitions.id.tolist():
            t = self.track(f"partition {pid}", proc, rank)
            rank += 1
            for r in sorted(set(members.get(pid, ())), key=lambda r: int(ops.op_id[r])):
                if ops.op_id[r] < 0 or ops.partition[r] != pid:
                    continue
                op_id = int(ops.op_id[r])
                args = {"op": m.text(ops.op[r]), "operands": ", ".join(k.operands_of(r, m.strings)), "loop_depth": int(ops.depth[r])}
                if ops.shape[r] >= 0:
                    args["shape"] = m.text(ops.shape[r])
                name = m.text(ops.name[r])
                label = f"{name} = {m.text(ops.op[r])}" if name is not None else m.text(ops.op[r])
                self.event(op_id, _BEGIN, t, label, args, flows=flows_out.get(r, ()), ends=flows_in.get(r, ()))
                self.event(op_id + 1, _END, t)
                self.stats["slices"] += 1
