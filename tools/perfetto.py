"""``layerc perfetto TRACE -o OUT.pftrace``: a trace as a Perfetto timeline, with its CUDA-graph
replays and, inside each, its layers drawn as spans over the kernels."""

from __future__ import annotations

import argparse
import sys
from layerc.tools.args import input_path, output_path


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", type=input_path, help="nsys export (.sqlite, .nsys-rep) or PyTorch profiler trace (.json, .json.gz)")
    p.add_argument("-o", "--output", type=output_path, required=True, metavar="FILE",
                   help="OUT.pftrace (Perfetto protobuf; .pftrace.gz compresses) or OUT.json for Chrome JSON")
    p.add_argument("--format", choices=("pftrace", "json"), help="default: from the output's extension")


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from layerc.backends.perfetto import Span, write_chrome_json, write_pftrace
    from layerc.grammar.traces import read_trace
    from layerc.passes.replays import graph_replays, layers_of
    from layerc.passes.trace_layers import detect_layers

    trace = read_trace(args.trace)
    for w in trace.warnings:
        sys.stderr.write(f"{trace.source}: warning: {w}\n")
    k = trace.kernels
    spans, layer_of = [], np.full(len(k), -1, np.int64)
    detected = detect_layers(trace).layer
    for graph, runs in graph_replays(trace).items():
        for n, idx in enumerate(runs):
            device = int(k.device[idx[0]])
            spans.append(Span(f"graph {graph} replay {n}", int(k.start[idx].min()), int(k.end[idx].max()), "graph replays", device))
            for layer, part in enumerate(layers_of(trace, idx, detected)):
                layer_of[part] = layer
                spans.append(Span(f"layer {layer}", int(k.start[part].min()), int(k.end[part].max()), "layers", device,
                                  {"layer": layer, "kernels": len(part)}))
    fmt = args.format or ("json" if args.output.endswith((".json", ".json.gz")) else "pftrace")
    write = write_chrome_json if fmt == "json" else write_pftrace
    stats = write(trace, args.output, spans=spans, layer_of=layer_of)
    sys.stdout.write(f"{args.output}: {len(k):,} kernels, {len(spans):,} spans, {stats.get('bytes', 0):,} bytes\n")
    return 0
