"""``layerc diff A B``: two traces (nsys or Kineto, any engine or GPU) compared layer by layer:
each run's layers found as ``layerc trace`` finds them, aligned (layer i with layer i of the same
stage, prologue with prologue), and the kernels inside each pair aligned by type and order, so a
kernel made slower, added, removed or fused shows as such, largest change first, and nothing
within the noise (``passes.trace_diff``)."""

from __future__ import annotations

import argparse

from layerc.ir.diagnostics import warn
from layerc.tools.args import input_path, output_path, strategy_option


def _share(text: str) -> float:
    try:
        value = float(text.rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes a percentage such as 5, not {text!r}") from None
    if not 0 <= value < 1000:
        raise argparse.ArgumentTypeError(f"takes a percentage from 0 to 1000, not {text!r}")
    return value / 100


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", type=input_path, metavar="A", help="the first trace (.json, .json.gz, .sqlite, .nsys-rep)")
    p.add_argument("b", type=input_path, metavar="B", help="the trace to compare with it")
    strategy_option(p)
    p.add_argument("--threshold", type=_share, default=None, metavar="PCT",
                   help="the least change reported, in %% of the time (default 5); a change must also exceed the noise")
    p.add_argument("--json", type=output_path, metavar="FILE", help="write the whole comparison as JSON")
    p.add_argument("--png", type=output_path, metavar="FILE", help="draw each layer's change per stage (a bar chart)")


def run(args: argparse.Namespace) -> int:
    from layerc.backends.outputs import write_atomic
    from layerc.backends.trace_diff_report import json_text, show, write_png
    from layerc.passes.trace_diff import THRESHOLD, diff_runs, run_of
    from layerc.tools.trace import analyze

    runs = []
    for path in (args.a, args.b):
        module = analyze(argparse.Namespace(trace=path, kernel_tables=None, strategy=args.strategy, split_half_layers=False,
                                            timing=False, stage="all"))
        for w in module.layers.warnings if module.layers else ():
            warn(args, w, path)
        runs.append(run_of(module))
    diff = diff_runs(runs[0], runs[1], THRESHOLD if args.threshold is None else args.threshold)
    if args.json:
        write_atomic(args.json, json_text(diff))
    if args.png:
        write_png(diff, args.png)
    show(diff)
    return 0
