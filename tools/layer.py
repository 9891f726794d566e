"""``layerc layer DUMP N``: one decoder layer of a dump, as JSON, DOT, PNG and SVG.

The pipeline is ``tag-weights → slice-layer{layer=N} → infer-groups`` on the dump's main graph
(``--section`` to choose another), then ``bind-kernels`` with ``--trace``; outputs are ``<dump_stem>_layer<N>.<ext>`` beside the dump or
in ``-o OUTDIR``. Everything is computed before anything is written, and each file is written
atomically, so an error leaves no partial output.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from layerc.ir.diagnostics import warn
from layerc.tools.args import input_path, natural_int, output_directory, pipeline_options, printed_pipeline, strategy_option

FORMATS = ("json", "dot", "png", "svg")


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", type=input_path, help="dump file or dump directory (AD_DUMP_GRAPHS_DIR)")
    p.add_argument("layer", type=int, help="decoder layer number")
    p.add_argument("-o", "--outdir", type=output_directory, metavar="DIR", help="where to write (default: beside the dump)")
    p.add_argument("--format", default=",".join(FORMATS), metavar="LIST", help="comma list of json,dot,png,svg (default: all)")
    p.add_argument("--file", metavar="NAME|NNN", help="in a dump directory: the file to read (default: highest counter)")
    p.add_argument("--section", metavar="NAME", help="GraphModule section (default: monolithic.model, else the largest)")
    p.add_argument("--syntax", choices=("auto", "ad", "fx"), default="auto", help="input syntax (default: detect)")
    p.add_argument("--pattern", default="", metavar="REGEX", help="layer number in weight names (default: layers_N_, h_N_, blocks_N_)")
    p.add_argument("--trace", type=input_path, metavar="FILE", help="bind the kernels of this trace (nsys, Kineto; or a PyTorch profile of the exported model) to the layer's nodes")
    p.add_argument("--phase", choices=("auto", "decode", "prefill"), default="auto",
                   help="with --trace: a CUDA-graph replay (decode) or an eager pass (prefill) (default: decode when the trace has replays)")
    p.add_argument("--replay", type=natural_int, default=-1, metavar="K",
                   help="with --trace: which replay or eager pass (default: the first replay, or the first eager pass the profile holds whole)")
    p.add_argument("--match", choices=("auto", "kernels", "ops"), default="auto",
                   help="with --trace: bind GPU kernels by signature, or profiled aten ops by name and shape (default: decide from the trace)")
    strategy_option(p, "with --trace: ")
    pipeline_options(p)
    p.set_defaults(usage_error=p.error)


def run(args: argparse.Namespace) -> int:
    from layerc.grammar.dumps import load
    from layerc.passes.base import Context
    from layerc.passes.groups import InferGroups
    from layerc.passes.pipeline import PassManager, PassTiming, timing_report
    from layerc.passes.select_graph import SelectGraph
    from layerc.passes.slicing import SliceLayer
    from layerc.passes.tag_weights import TagWeights
    from layerc.backends.outputs import output_dir, write_atomic

    formats = [f.strip() for f in args.format.split(",") if f.strip()]
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        args.usage_error(f"--format takes a comma list of {', '.join(FORMATS)}; got '{args.format}'")
    if args.layer < 0:
        args.usage_error("the layer number must be 0 or more")

    passes = [SelectGraph(section=args.section or ""), TagWeights(pattern=args.pattern), SliceLayer(layer=args.layer), InferGroups()]
    if args.trace:
        from layerc.passes.bind_kernels import BindKernels

        passes.append(BindKernels(trace=args.trace, phase=args.phase, replay=args.replay, match=args.match,
                                  strategy=args.strategy))
    if printed_pipeline(args, passes):
        return 0
    phases: list[PassTiming] = []
    start = time.perf_counter()
    module = load(args.input, file=args.file, syntax=args.syntax)
    phases.append(PassTiming("Parser", time.perf_counter() - start))
    source = Path(module.source or args.input)
    outdir = output_dir(args.outdir) if args.outdir else source.parent

    from layerc.backends.registry import emitter

    pm = PassManager(passes, print_ir_after_all=args.print_ir_after_all, print_ir=emitter("graph"), ir_stream=sys.stderr)
    ctx = Context()
    pm.run(ctx, module)
    for w in ctx.warnings:
        warn(args, w, args.trace or args.input)
    phases.extend(pm.timings)

    start = time.perf_counter()
    outputs: dict[str, str | bytes] = {}
    for fmt in [f for f in formats if f in ("json", "dot")]:
        outputs[fmt] = emitter("graph", "layer-json" if fmt == "json" else fmt)(module)
    pictures = [f for f in ("png", "svg") if f in formats]
    if pictures:
        from layerc.backends import graphviz

        if not graphviz.available():
            warn(args, graphviz.MISSING)
            formats = [f for f in formats if f not in pictures]
            pictures = []
        with ThreadPoolExecutor(max_workers=2) as pool:  # Graphviz runs in two processes at once
            outputs.update(zip(pictures, pool.map(lambda f: emitter("graph", f)(module), pictures)))
    phases.append(PassTiming("Output", time.perf_counter() - start))

    stem = f"{source.stem}_layer{args.layer}"
    for fmt in formats:
        path = outdir / f"{stem}.{fmt}"
        write_atomic(path, outputs[fmt])
        sys.stdout.write(f"{path}\n")
    if args.timing:
        sys.stderr.write(timing_report(phases))
    return 0
