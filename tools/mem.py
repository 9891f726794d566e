"""``layerc mem DIR_OR_LOG [-o OUT/]``: the Triton warp-specialization memory planner's dumps
(seed 002, automated), read, checked and drawn.

Reads a ``TRITON_DUMP_WS_GRAPHS`` directory or a ``TRITON_LLVM_DEBUG_ONLY=nvgpu-ws-memory-planner``
log, runs ``mem-liveness`` and ``mem-check`` (or ``--passes``), prints a summary per kernel and
every finding, and with ``-o`` writes per kernel: the clean DOT of each graph and its pictures
(Graphviz), a liveness chart, with ``--combine`` all of them stacked into one PNG (and, when the
input has several kernels, every kernel's into ``all.png``); for the whole input a JSON report and
a Perfetto trace. Exit status 1 when a check reports an error (with
``--werror``, a warning too); then the first such finding is also on stderr, as a located error
(``file:line:col: error: ...``, the source line, a caret), and so is every other failure: an exit 1
never comes with an empty stderr.
"""

from __future__ import annotations

import argparse
import sys
from layerc.tools.args import input_path, output_directory, pipeline_options, printed_pipeline

DEFAULT_PASSES = "mem-liveness,mem-check"


def _formats(text: str) -> tuple[str, ...]:
    out = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [x for x in out if x not in ("png", "svg")]
    if bad or not out:
        raise argparse.ArgumentTypeError(f"takes png, svg or png,svg, not {text!r}")
    return out


def configure_parser(p: argparse.ArgumentParser) -> None:
    from layerc.passes.mem_liveness import ARCHS

    p.add_argument("input", type=input_path, help="TRITON_DUMP_WS_GRAPHS directory, or a debug log (stderr of "
                                 "TRITON_LLVM_DEBUG_ONLY=nvgpu-ws-memory-planner MLIR_ENABLE_DUMP=1; .gz too)")
    p.add_argument("-o", "--output", type=output_directory, metavar="DIR", help="write DOT, pictures, chart, memory.json and memory.pftrace here")
    p.add_argument("--arch", choices=ARCHS, default="auto",
                   help="capacity to hold the peaks against (default auto: sm100 when there is TMEM, else sm90)")
    p.add_argument("--kernel", action="append", metavar="NAME|INDEX", help="only these kernels (repeatable)")
    p.add_argument("--format", type=_formats, default=("png",), metavar="png,svg", help="picture formats (default png)")
    p.add_argument("--combine", action="store_true",
                   help="also stack each kernel's pictures, labelled, into <kernel>.all.png, and with several kernels all of them into all.png")
    p.add_argument("--no-render", action="store_true", help="write DOT, JSON and Perfetto only (no Graphviz, no chart)")
    p.add_argument("--json", action="store_true", help="print the JSON report instead of the summary")
    p.add_argument("--werror", action="store_true", help="exit 1 on warnings too")
    p.add_argument("--passes", default=DEFAULT_PASSES, metavar="PIPELINE",
                   help=f"memory passes to run (default {DEFAULT_PASSES}; options as mem-liveness{{arch=sm90}})")
    pipeline_options(p)


def run(args: argparse.Namespace) -> int:
    """Every way ``mem`` fails prints a located error first on stderr: an error in the input (the
    reader's, raised), a check's error (or with ``--werror`` a warning) that decides the exit
    status (the first one, then how many; the report on stdout lists them all), and input that
    nests deeper than Python's stack or needs more memory than there is (at the input)."""
    from layerc.ir.diagnostics import LayercError

    try:
        return _run(args)
    except RecursionError:
        raise LayercError("the input nests deeper than layerc can follow", str(args.input)) from None
    except MemoryError:
        raise LayercError("out of memory reading the input", str(args.input)) from None


def _run(args: argparse.Namespace) -> int:
    from layerc.backends.mem_report import counts
    from layerc.grammar.ws_memory import read_ws_memory

    manager = _pipeline(args)
    if printed_pipeline(args, manager.passes):
        return 0
    _progress(f"reading {args.input}")
    module = read_ws_memory(args.input)
    if args.kernel:
        module.kernels = _select(module, args.kernel)
    _run_passes(manager, module, args)
    from layerc.backends.mem_outputs import write_outputs

    written = write_outputs(module, args) if args.output else []
    if args.json:
        from layerc.backends.mem_report import json_text

        sys.stdout.buffer.write(json_text(module).encode())
    else:
        from rich.console import Console

        from layerc.backends.mem_report import show

        show(module, Console(highlight=False, soft_wrap=True), written)
    c = counts(module)
    failed = c["error"] or (args.werror and c["warning"])
    if failed:
        _verdict(module, args.werror, c)
    return 1 if failed else 0


def _verdict(module, werror: bool, c: dict[str, int]) -> None:
    """The exit status is 1 because of the checks' findings: say so on stderr, the first finding
    that decides it as a located error (``file:line:col: error: ...``, its source line and a
    caret), then how many there are. (The findings are part of the report, on stdout, which a
    caller may send elsewhere or read as JSON: an exit 1 never comes with an empty stderr.)"""
    severity = "error" if c["error"] else "warning"
    first = next(f for f in module.findings if f.severity == severity)
    sys.stdout.flush()  # the report first, where both streams are one terminal
    sys.stderr.write(module.diagnostic(first, "error", "" if severity == "error" else " [--werror]") + "\n")
    failing = c["error"] + (c["warning"] if werror else 0)
    if failing > 1:
        kinds = f"{c['error']} error(s)" + (f" and {c['warning']} warning(s) (--werror)" if werror and c["warning"] else "")
        sys.stderr.write(f"layerc mem: note: {kinds} in all; the report lists every finding\n")


def _pipeline(args: argparse.Namespace):
    from layerc.passes.mem_check import MEM_PASSES
    from layerc.passes.mem_liveness import MemLiveness
    from layerc.passes.pipeline import PassManager, build_pipeline

    passes = build_pipeline(args.passes, MEM_PASSES)
    if args.arch != "auto":  # --arch sets the option of a mem-liveness the pipeline did not configure
        passes = [MemLiveness(args.arch) if isinstance(p, MemLiveness) and p.arch == "auto" else p for p in passes]
    return PassManager(passes)


def _run_passes(manager, module, args: argparse.Namespace) -> None:
    from layerc.backends.mem_report import ir_text
    from layerc.passes.base import Context
    from layerc.passes.pipeline import timing_report

    manager.print_ir_after_all = args.print_ir_after_all
    manager.print_ir = ir_text
    manager.ir_stream = sys.stderr
    manager.run(Context(), module)
    if args.timing:
        sys.stderr.write(timing_report(manager.timings))


def _select(module, wanted: list[str]) -> list:
    from layerc.ir.diagnostics import LayercError

    chosen = []
    for w in wanted:
        hits = [k for k in module.kernels if k.name == w or (w.isdigit() and k.index == int(w))]
        if not hits:
            names = ", ".join(f"{k.index}:{k.name[:80]}" for k in module.kernels[:20]) + (", ..." if len(module.kernels) > 20 else "")
            raise LayercError(f"no kernel '{w[:80]}' (kernels: {names})", module.source)
        chosen += [k for k in hits if k not in chosen]
    return chosen


def _progress(message: str) -> None:
    if sys.stderr.isatty():
        sys.stderr.write(f"layerc mem: {message}\n")
