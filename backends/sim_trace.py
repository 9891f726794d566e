"""A scheduled layer graph as a Perfetto timeline, through the trace writer of ``perfetto.py``.

One device process named after the simulated hardware, with child tracks: ``layer`` (one span
for the whole layer: model, phase, makespan, critical path), ``critical path`` (the ops of one
longest chain) and ``engine 0..N-1`` (each op where the schedule put it). Every op span carries
its label, op type, target, shape, FLOPs, bytes, arithmetic intensity, bound and the terms of
its time. A ``.json`` path gives Chrome JSON instead of ``.pftrace`` protobuf.
"""

from __future__ import annotations

import os

from layerc.backends.perfetto import Span, write_chrome_json, write_pftrace
from layerc.ir.graph import Graph, Node, op_label
from layerc.ir.trace import Kernels, Strings, Trace


def op_args(node: Node) -> dict:
    """What a slice of this op says: the cost pass's facts, in units people read."""
    c = node.meta["cost"]
    args = {"op type": c.kind, "target": node.target, "FLOPs": int(c.flops), "bytes": int(c.bytes),
            "arithmetic intensity (FLOP/B)": round(c.intensity, 3), "bound": c.bound,
            "time (us)": round(c.time_ns / 1e3, 3), "compute (us)": round(c.compute_ns / 1e3, 3),
            "memory (us)": round(c.memory_ns / 1e3, 3), "launch overhead (us)": round(c.overhead_ns / 1e3, 3)}
    shape = getattr(node.type, "shape_text", None)
    if shape is not None and node.type.is_known:
        args["shape"] = f"{node.type.shape_text()} : {node.type.dtype_text()}"
    if node.meta.get("module"):
        args["module"] = node.meta["module"]
    return args


def schedule_spans(graph: Graph, device: int = 0, offset_ns: int = 0) -> list[Span]:
    """The layer span, the critical-path track and one track per engine, in that order."""
    s = graph.meta["schedule"]
    meta = graph.meta
    title = f"layer {meta.get('layer', '?')} ({meta.get('phase', '?')}, {meta.get('model', 'graph')})"
    layer_args: dict[str, object] = {k: meta[k] for k in ("model", "phase", "seq_len", "batch", "attention", "dtype") if k in meta}
    layer_args.update({"engines": s.engines, "makespan (us)": round(s.makespan / 1e3, 3),
                       "critical path (us)": round(s.critical_path / 1e3, 3), "utilization": round(s.utilization, 4)})
    spans = [Span(title, offset_ns, offset_ns + s.makespan, "layer", device, layer_args)]
    ops = [n for n in graph.nodes if "schedule" in n.meta and n.meta["cost"].is_kernel]
    chain = _one_critical_chain(ops)
    spans += [Span(op_label(n), offset_ns + n.meta["schedule"]["start"], offset_ns + n.meta["schedule"]["end"],
                   "critical path", device, op_args(n)) for n in chain]
    by_engine = sorted(ops, key=lambda n: (n.meta["schedule"]["engine"], n.meta["schedule"]["start"]))
    spans += [Span(op_label(n), offset_ns + n.meta["schedule"]["start"], offset_ns + n.meta["schedule"]["end"],
                   f"engine {n.meta['schedule']['engine']}", device, op_args(n)) for n in by_engine]
    return spans


def _one_critical_chain(ops: list[Node]) -> list[Node]:
    """Critical ops that chain end to start (several longest chains may exist: show one)."""
    crit = [n for n in ops if n.meta["schedule"]["critical"]]
    crit.sort(key=lambda n: n.meta["schedule"]["start"])
    chain: list[Node] = []
    for n in crit:
        if not chain or n.meta["schedule"]["start"] >= chain[-1].meta["schedule"]["end"]:
            chain.append(n)
    return chain


def write_schedule_trace(graph: Graph, path: str | os.PathLike, device_name: str) -> dict[str, int]:
    """Write the scheduled ``graph`` to ``path`` (``.pftrace``, or Chrome ``.json``)."""
    trace = Trace(str(path), "simulated", Strings(), Kernels.empty(), devices={0: device_name})
    write = write_chrome_json if str(path).endswith((".json", ".json.gz")) else write_pftrace
    return write(trace, path, spans=schedule_spans(graph))
