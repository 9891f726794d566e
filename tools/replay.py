"""``layerc replay TRACE``: the kernels of one CUDA-graph replay, by layer and stream, as the
per-layer kernel JSON of the layer visualizer (seed 000, Phase 5)."""

from __future__ import annotations

import argparse
import json
from layerc.ir.diagnostics import warn
from layerc.tools.args import input_path, output_path, strategy_option


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", type=input_path, help="nsys export (.sqlite, .nsys-rep) or PyTorch profiler trace (.json, .json.gz)")
    p.add_argument("--graph-id", type=int, metavar="G", help="the CUDA graph (default: the one with the most kernels)")
    p.add_argument("--replay", type=int, default=0, metavar="K", help="which replay of it (default: 0, the first)")
    p.add_argument("--layer", type=int, metavar="N", help="only this layer")
    strategy_option(p)
    p.add_argument("-o", "--output", type=output_path, metavar="FILE", help="kernels.json (default: stdout); written atomically")


def run(args: argparse.Namespace) -> int:
    from layerc.grammar.traces import read_trace
    from layerc.ir.diagnostics import LayercError
    from layerc.passes.kernel_tables import kernel_table
    from layerc.passes.replays import layers_of, pick_replay
    from layerc.backends.outputs import emit

    trace = read_trace(args.trace, kinds=frozenset({"kernels", "launches"}))
    for w in trace.warnings:
        warn(args, w, trace.source)
    chosen = pick_replay(trace, args.graph_id, args.replay)
    short, _ = kernel_table().kinds(trace)
    k = trace.kernels
    layers, split = {}, layers_of(trace, chosen.kernels, strategy=args.strategy)
    for n, idx in enumerate(split):
        if args.layer is not None and n != args.layer:
            continue
        dur = k.end[idx] - k.start[idx]
        streams = sorted({int(s) for s in k.stream[idx]})
        layers[str(n)] = {
            "layer": n,
            "num_streams": len(streams),
            "stream_ids": streams,
            "kernel_count": len(idx),
            "total_duration_ns": int(dur.sum()),
            "total_duration_us": round(float(dur.sum()) / 1000, 3),
            "kernels": [
                {
                    "index": int(i), "kernel": trace.strings[int(short[i])], "full_name": trace.strings[int(k.name[i])],
                    "duration_ns": int(d), "duration_us": round(float(d) / 1000, 3), "stream_id": int(k.stream[i]),
                }
                for i, d in zip(idx, dur)
            ],
        }
    if args.layer is not None and not layers:
        raise LayercError(f"no layer {args.layer} in the replay", trace.source)
    doc = {
        "source": args.trace, "graph_id": chosen.graph, "unique_graph_nodes": chosen.unique_nodes,
        "num_replays": chosen.replays, "replay_from": chosen.how, "num_layers_detected": len(split),
        "layers": layers,
    }
    emit(json.dumps(doc, indent=2) + "\n", args.output)
    return 0
