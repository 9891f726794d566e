"""``layerc diff A B``: two runs or two graphs compared layer by layer.

- Two traces (nsys or Kineto, any engine or GPU): each run's layers found as ``layerc trace``
  finds them, aligned (layer i with layer i of the same stage, prologue with prologue), and the
  kernels inside each pair aligned by type and order, so a kernel made slower, added, removed or
  fused shows as such, largest change first, and nothing within the noise (``passes.trace_diff``).
- Two runs of a job, every rank of each (two directories of per-rank traces): rank r of A with
  rank r of B, the changes merged over the ranks that have them, and the stragglers each run
  has, with those B has and A had not (``passes.trace_diff.diff_jobs``).
- Two graph dumps (two AutoDeploy transform stages, or two models): nodes matched through the
  weights they read and the dataflow, never their names; fused, replaced, added and removed nodes
  reported per layer, and one layer drawn side by side (``passes.graph_diff``).
"""

from __future__ import annotations

import argparse
import os

from layerc.ir.diagnostics import warn
from layerc.tools.args import input_path, natural_int, output_path, positive_int, strategy_option


def _share(text: str) -> float:
    try:
        value = float(text.rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes a percentage such as 5, not {text!r}") from None
    if not 0 <= value < 1000:
        raise argparse.ArgumentTypeError(f"takes a percentage from 0 to 1000, not {text!r}")
    return value / 100


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", type=input_path, metavar="A", help="the first trace (.json, .json.gz, .sqlite, .nsys-rep) or graph dump")
    p.add_argument("b", type=input_path, metavar="B", help="the trace or dump to compare with it")
    strategy_option(p, "traces: ")
    p.add_argument("--threshold", type=_share, default=None, metavar="PCT",
                   help="traces: the least change reported, in %% of the time (default 5); a change must also exceed the noise")
    p.add_argument("--jobs", type=positive_int, metavar="N",
                   help="two directories of per-rank traces: ranks analysed at once, each in its own process (default: the CPUs)")
    p.add_argument("--section", metavar="NAME", help="dumps: the GraphModule section of both (default: monolithic.model, else the largest)")
    p.add_argument("--layer", type=natural_int, default=None, metavar="N",
                   help="dumps: the layer --png draws (default: the layer that changed most)")
    p.add_argument("--json", type=output_path, metavar="FILE", help="write the whole comparison as JSON")
    p.add_argument("--png", type=output_path, metavar="FILE",
                   help="traces: each layer's change per stage (a bar chart); dumps: one layer of each side by side")
    p.set_defaults(usage_error=p.error)


def _kind(path: str) -> str:
    """What ``path`` is: ``input_kind``'s answer, or ``job`` for a directory of per-rank traces
    (a dump directory is a graph, whatever else it holds: its ``_truth.json`` beside the dumps)."""
    from layerc.grammar.input_kinds import input_kind
    from layerc.ir.diagnostics import LayercError
    from layerc.tools.trace import trace_files

    try:
        return input_kind(path)
    except LayercError:
        if os.path.isdir(path) and trace_files(path):
            return "job"
        raise


def run(args: argparse.Namespace) -> int:
    ka, kb = _kind(args.a), _kind(args.b)
    if ka == kb == "job":
        from layerc.tools.trace import trace_files

        return _jobs(args, trace_files(args.a), trace_files(args.b))
    if args.jobs is not None:
        args.usage_error("--jobs: for two directories of per-rank traces")
    if ka == kb == "graph":
        if args.layer is not None and args.png is None:
            args.usage_error("--layer chooses the layer --png draws: give --png too")
        if args.threshold is not None:
            args.usage_error("--threshold: for two traces, not two graph dumps")
        return _graphs(args)
    if not ka == kb == "trace":
        said = {"job": "directory of per-rank traces"}
        args.usage_error(f"A and B must be two traces, two graph dumps or two directories of per-rank traces, "
                         f"not a {said.get(ka, ka)} and a {said.get(kb, kb)}")
    given = [flag for flag, value in (("--section", args.section), ("--layer", args.layer)) if value is not None]
    if given:
        args.usage_error(f"{', '.join(given)}: for two graph dumps, not two traces")
    return _traces(args)


def _traces(args: argparse.Namespace) -> int:
    from layerc.backends.outputs import write_atomic
    from layerc.backends.trace_diff_report import json_text, show, write_png
    from layerc.passes.trace_diff import THRESHOLD, diff_runs, run_of
    from layerc.tools.trace import analyze

    runs = []
    for path in (args.a, args.b):
        module = analyze(argparse.Namespace(trace=path, kernel_tables=None, strategy=args.strategy, split_half_layers=False,
                                            timing=False, stage="all", geometry=False))
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


def _jobs(args: argparse.Namespace, a: list[str], b: list[str]) -> int:
    from layerc.backends.outputs import write_atomic
    from layerc.backends.trace_diff_report import json_text, show_jobs
    from layerc.ir.diagnostics import LayercError
    from layerc.passes.ranks import compare_ranks
    from layerc.passes.trace_diff import THRESHOLD, diff_jobs
    from layerc.tools.trace import analyse_ranks

    given = [flag for flag, value in (("--section", args.section), ("--layer", args.layer), ("--png", args.png)) if value is not None]
    if given:
        args.usage_error(f"{', '.join(given)}: not for two directories of per-rank traces")
    args.stage = "all"
    sides = [analyse_ranks(args, paths, blocks=True) for paths in (a, b)]
    ranks = [[r for r, *_ in side] for side in sides]
    if ranks[0] != ranks[1]:
        raise LayercError(f"A has ranks {ranks[0]} and B ranks {ranks[1]}: a job's runs are compared rank by rank", args.b)
    compared = [compare_ranks([(r, p, t) for r, p, t, _ in side]) for side in sides]
    runs_a, runs_b = ([(r, run) for r, _, _, run in side] for side in sides)
    diff = diff_jobs(runs_a, runs_b, compared[0], compared[1], THRESHOLD if args.threshold is None else args.threshold)
    if args.json:
        write_atomic(args.json, json_text(diff))
    show_jobs(diff)
    return 0


def _graphs(args: argparse.Namespace) -> int:
    from layerc.backends import graph_diff_report as report
    from layerc.backends.outputs import write_atomic
    from layerc.grammar.dumps import load
    from layerc.passes.base import Context
    from layerc.passes.graph_diff import diff_graphs
    from layerc.passes.pipeline import PassManager
    from layerc.passes.select_graph import SelectGraph
    from layerc.passes.slicing import SliceLayers
    from layerc.passes.tag_weights import TagWeights

    graphs = []
    for path in (args.a, args.b):
        module = load(path)
        ctx = Context()
        PassManager([SelectGraph(section=args.section or ""), TagWeights(), SliceLayers()]).run(ctx, module)
        for w in ctx.warnings:
            warn(args, w, path)
        graphs.append(module.main_graph())
    diff = diff_graphs(graphs[0], graphs[1], str(args.a), str(args.b))
    outputs: dict = {}
    if args.json:
        outputs[args.json] = report.json_text(diff)
    if args.png:
        layers = sorted({*diff.layers_a, *diff.layers_b})
        layer = args.layer if args.layer is not None else report.busiest_layer(diff)
        if layer is None and layers:
            layer = layers[0]
        if layer is None or layer not in layers:
            return args.usage_error(f"--layer {layer}: neither dump has that layer" if layer is not None
                                    else "--png draws a layer, and neither dump has one")
        from layerc.backends import graphviz

        if graphviz.available():
            outputs[args.png] = report.render(diff, layer, "png")
        else:
            warn(args, graphviz.MISSING)
    for path, data in outputs.items():
        write_atomic(path, data)
    report.show(diff)
    return 0
