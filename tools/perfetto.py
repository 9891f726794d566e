"""``layerc perfetto TRACE -o OUT.pftrace``: a trace as a Perfetto timeline: its forward passes
and CUDA-graph replays, and inside them its layers drawn as spans over the kernels. The layers
are ``layerc trace``'s (the same ``--strategy``, the same passes, eager ones included): this
command writes what ``layerc trace --perfetto`` writes."""

from __future__ import annotations

import argparse
import sys

from layerc.ir.diagnostics import warn
from layerc.tools.args import input_path, output_path, strategy_option


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", type=input_path, help="nsys export (.sqlite, .nsys-rep) or PyTorch profiler trace (.json, .json.gz)")
    p.add_argument("-o", "--output", type=output_path, required=True, metavar="FILE",
                   help="OUT.pftrace (Perfetto protobuf; .pftrace.gz compresses) or OUT.json for Chrome JSON")
    p.add_argument("--format", choices=("pftrace", "json"), help="default: from the output's extension")
    strategy_option(p)


def run(args: argparse.Namespace) -> int:
    from layerc.backends.registry import emitter
    from layerc.tools.trace import analyze, perfetto_format

    module = analyze(argparse.Namespace(trace=args.trace, kernel_tables=None, strategy=args.strategy, split_half_layers=False,
                                        timing=False, stage="all"))
    for w in module.layers.warnings if module.layers else ():
        warn(args, w, args.trace)
    stats = emitter("trace", perfetto_format(args.output, args.format)).write(module, args.output)
    sys.stdout.write(f"{args.output}: {len(module.trace.kernels):,} kernels, {stats['spans']:,} spans, {stats.get('bytes', 0):,} bytes\n")
    return 0
