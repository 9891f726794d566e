"""``layerc opt INPUT -p PIPELINE``: read any input into the module of its IR (chosen from the
content: a dump, a trace, a memory-planner dump, model source), run a pass pipeline of that IR,
print the module.

As ``mlir-opt``/``xdsl-opt``: ``-p 'a,b{k=v}'``, ``--emit FORMAT`` (the IR's formats), ``-o``,
``--print-ir-after-all``, ``--timing``, ``--list-passes``; the IR is verified after every pass,
and the passes a pass requires run before it.
"""

from __future__ import annotations

import argparse
import sys
import time

from layerc.ir.diagnostics import LayercError
from layerc.tools.args import input_path, output_path, pipeline_options, printed_pipeline


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", type=input_path, nargs="?",
                   help="a dump (file, AD_DUMP_GRAPHS_DIR or torch.fx print), a trace (Kineto JSON, nsys export), "
                        "a TRITON_DUMP_WS_GRAPHS directory or log, or model source (with --entry)")
    p.add_argument("-p", "--passes", default="", metavar="PIPELINE", help="pass pipeline, e.g. 'dce,select-graph{section=monolithic.model}'")
    p.add_argument("--emit", metavar="FORMAT",
                   help="output format of the input's IR (--list-passes lists them; the first is the default). "
                        "dumps: ad, fx, json, meta, and one layer's layer-json, dot, png, svg; traces: text, json, csv, "
                        "table, pftrace, chrome-json; memory plans: text, json, pftrace; op trees: text. The passes a "
                        "format reads run last unless the pipeline has them")
    p.add_argument("-o", "--output", type=output_path, metavar="FILE", help="output file (default: stdout); written atomically")
    p.add_argument("--file", metavar="NAME|NNN", help="in a dump directory: the file to read (default: highest counter)")
    p.add_argument("--section", metavar="NAME", help="keep only this GraphModule section")
    p.add_argument("--syntax", choices=("auto", "ad", "fx"), default="auto", help="input syntax (default: detect)")
    p.add_argument("--entry", metavar="CLASS", help="model source: the entry class (Class or package.module:Class)")
    pipeline_options(p)
    p.add_argument("--disable-verify", action="store_true", help="do not verify the IR after each pass")
    p.add_argument("--werror", action="store_true", help="warnings are errors (exit 1)")
    p.add_argument("--verify-diagnostics", action="store_true",
                   help="check the diagnostics against expected-error/-warning {{text}} comments in the input "
                        "(@+N, @-N, @above, @below: another line; @*: anywhere); exit 1 on any mismatch")
    p.add_argument("--dump-pass-pipeline", action="store_true", help="print the pipeline that will run, to stderr")
    p.add_argument("--list-passes", action="store_true", help="list the available passes and exit")
    p.set_defaults(usage_error=p.error)


def run(args: argparse.Namespace) -> int:
    from layerc.backends.registry import all_formats, emitter, formats
    from layerc.passes.base import Context
    from layerc.passes.pipeline import PassManager, PassTiming, build_pipeline, timing_report
    from layerc.passes.readers import ReadOptions, read_module
    from layerc.passes.registry import get_all_passes

    if args.list_passes:
        return _list_passes()
    if args.input is None:
        args.usage_error("the following arguments are required: input")  # exits 2
    if args.emit and args.emit not in all_formats():
        args.usage_error(f"--emit {args.emit}: no such format (formats: {', '.join(all_formats())})")
    phases: list[PassTiming] = []
    start = time.perf_counter()
    ir, module = read_module(args.input, ReadOptions(args.file, args.syntax, args.entry))
    phases.append(PassTiming("Parser", time.perf_counter() - start))
    if ir != "graph" and (args.section or args.file):
        args.usage_error(f"--{'section' if args.section else 'file'} applies to a dump, and {args.input} is a {ir} input")
    # Everything the command line names is checked before any pass runs.
    passes = build_pipeline(args.passes, get_all_passes(ir))  # (and the package's unlisted passes of that IR)
    if args.section:
        from layerc.passes.select_graph import SelectGraph

        passes.insert(0, SelectGraph(section=args.section))
    if args.emit and args.emit not in formats(ir):
        args.usage_error(f"--emit {args.emit}: the {ir} IR is written as {', '.join(formats(ir))}")
    printer = emitter(ir, args.emit)
    for name in printer.requires:  # what the output reads, run last unless the pipeline has it
        if all(p.name != name for p in passes):
            passes.append(build_pipeline(name, get_all_passes(ir))[0])
    if printed_pipeline(args, passes):
        return 0

    pm = PassManager(
        passes,
        verify_each=not args.disable_verify,
        print_ir_after_all=args.print_ir_after_all,
        print_ir=printer if printer.output == "text" else emitter(ir),
        ir_stream=sys.stderr,
    )
    if args.dump_pass_pipeline:
        sys.stderr.write(f"Pass Manager with {len(passes)} passes:\n{pm.pipeline_text}\n")
    ctx = Context()
    if ir == "optree":  # profile-ops checks the tree against a tiny model it builds on demand
        from layerc.tools.optrace import build_profiled_model

        ctx.inputs["build_model"] = build_profiled_model
    if args.verify_diagnostics:
        return verify(args, pm, ctx, module)
    engine = args.diagnostics
    engine.werror = args.werror
    pm.run(ctx, module)
    for d in _reported(ctx, module):
        engine.emit(d)
    phases.extend(pm.timings)
    if engine.errors:  # warnings under --werror: nothing is written
        return 1

    start = time.perf_counter()
    if args.output is None and printer.output == "text":
        from layerc.backends.outputs import emit

        emit(printer(module), None)
    else:
        printer.write(module, args.output or "-")
    phases.append(PassTiming("Output", time.perf_counter() - start))
    if args.timing:
        sys.stderr.write(timing_report(phases))
    return 0


def _reported(ctx, module) -> list:
    """What the passes reported: the context's diagnostics and the module's own findings (a
    memory plan's checks)."""
    own = getattr(module, "diagnostics", None)
    return ctx.diagnostics + (own() if callable(own) else [])


def verify(args: argparse.Namespace, pm, ctx, module) -> int:
    """``--verify-diagnostics``: run, gather every diagnostic (a raised error too), and compare
    them with the expected-diagnostic comments of the input's files; only mismatches print."""
    from layerc.grammar.input_kinds import commented_files
    from layerc.grammar.inputs import read_text
    from layerc.ir.expected_diagnostics import expected_diagnostics, verify_diagnostics

    try:
        pm.run(ctx, module)
        raised = []
    except LayercError as e:
        raised = [e.diagnostic()]
    expected = [x for path in commented_files(args.input) for x in expected_diagnostics(str(path), read_text(path))]
    problems = verify_diagnostics(expected, _reported(ctx, module) + raised)
    for d in problems:
        args.diagnostics.emit(d)
    return 1 if problems else 0


def _list_passes() -> int:
    """Every registered pass, by the IR it runs on (and the command whose pipeline runs it),
    with its options and the first line of its docstring."""
    import dataclasses
    import typing

    from layerc.passes.registry import IRS, get_pass_class, pass_ir, with_discovered

    names = sorted(with_discovered(), key=lambda n: (list(IRS).index(pass_ir(n)) if pass_ir(n) in IRS else len(IRS), n))
    shown = None
    for name in names:
        ir = pass_ir(name)
        if ir != shown:
            sys.stdout.write(f"{'' if shown is None else chr(10)}{ir} IR (layerc {IRS.get(ir, 'opt')}):\n")
            shown = ir
        cls = get_pass_class(name)
        hints = typing.get_type_hints(cls)
        opts = " ".join(
            f"{f.name.replace('_', '-')}={getattr(hints[f.name], '__name__', str(hints[f.name]))}"
            for f in dataclasses.fields(cls)
        )
        doc = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""
        needs = f"\n      requires: {', '.join(cls.requires)}" if cls.requires else ""
        sys.stdout.write(f"  {name}{'{' + opts + '}' if opts else ''}\n      {doc}{needs}\n")
    from layerc.backends.registry import EMITTERS

    sys.stdout.write("\noutputs (--emit; the first of an IR is its default):\n")
    for e in EMITTERS:
        needs = f" (after {', '.join(e.requires)})" if e.requires else ""
        sys.stdout.write(f"  {e.ir} {e.format}: {e.summary}{needs}\n")
    return 0


__all__ = ["configure_parser", "run", "LayercError"]
