"""The ``layerc`` command: subcommands over the IR, the passes and the backends.

Exit status: 0 on success, 1 on an error in the input or a failed pass (printed as
``file:line:col: error: ...``), 2 on a usage error. Never a traceback, unless
``LAYERC_TRACEBACK=1`` asks for one.
"""

from __future__ import annotations

import argparse
import atexit
import os
import signal
import sys
TYPE_CHECKING = False  # (as typing's, without importing typing at start-up)

from layerc.tools.args import paths_of, size

if TYPE_CHECKING:
    from typing import Callable

#: subcommand → (module with configure_parser/run, help line); modules load only when used.
COMMANDS: dict[str, tuple[str, str]] = {
    "opt": ("layerc.tools.opt", "parse a dump, run a pass pipeline, print the IR"),
    "layer": ("layerc.tools.layer", "one decoder layer of a dump as JSON, DOT, PNG and SVG"),
    "trace": ("layerc.tools.trace", "kernels of a trace by type, stage and decoder layer; JSON, CSV and Perfetto outputs"),
    "replay": ("layerc.tools.replay", "the kernels of one CUDA-graph replay, by layer and stream, as JSON"),
    "diff": ("layerc.tools.diff", "two traces compared layer by layer: changed, added, removed and fused kernels, largest first"),
    "perfetto": ("layerc.tools.perfetto", "a trace as a Perfetto timeline (.pftrace or Chrome JSON), replays and layers as spans"),
    "gen-trace": ("layerc.tools.gen_trace", "generate a realistic Kineto trace of LLM serving with layer and stage truth"),
    "gen-nsys": ("layerc.tools.gen_nsys", "generate a realistic Nsight Systems SQLite export of LLM inference"),
    "export-hf": ("layerc.tools.export_hf", "export a tiny random HF model to an AutoDeploy dump (needs [torch])"),
    "fidelity": ("layerc.tools.fidelity", "grammars and slicer against nn_module_stack on every decoder-only HF architecture (needs [torch])"),
    "gen-dump": ("layerc.tools.gen_dump", "generate a realistic post-fusion AutoDeploy dump"),
    "gen-kernels": ("layerc.tools.gen_kernels", "generate a CUDA-graph replay of a dump's graph, with the node that launched each kernel"),
    "gen-mem": ("layerc.tools.gen_ws_mem", "generate Triton warp-specialization memory-planner dumps (a port of the planner's emitters)"),
    "mem": ("layerc.tools.mem", "Triton warp-specialization memory planner dumps: SMEM/TMEM liveness, checks, pictures"),
    "optrace": ("layerc.tools.optrace", "model source -> op execution tree, kernel call chains and op <-> kernel map"),
    "simulate": ("layerc.tools.simulate", "simulate a decoder layer on N engines (roofline cost, list schedule) as Perfetto"),
    "profile": ("layerc.tools.profile", "run one decoder layer under torch.profiler; measured vs simulated per op"),
}


class _Version(argparse.Action):
    """``layerc --version``: the installed distribution's version, looked up only when asked
    (importlib.metadata costs start-up time on every other path)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, help="print layerc's version and exit")

    def __call__(self, parser, namespace, values, option_string=None):
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("layerc")
        except PackageNotFoundError:
            found = "(not installed)"
        parser.exit(message=f"layerc {found}\n")


class _Formatter(argparse.HelpFormatter):
    """argparse's help layout, the terminal's width asked through ``os``: argparse makes a
    formatter for every argument it adds (to check its metavar), and its own asks through
    ``shutil``, whose import (with bz2's and lzma's) cost a small run 3 ms."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None):
        super().__init__(prog, indent_increment, max_help_position, _columns() - 2 if width is None else width)


def _columns() -> int:
    """The terminal's width as ``shutil.get_terminal_size`` gives it: ``COLUMNS``, else stdout's
    terminal, else 80."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


def build_parser() -> argparse.ArgumentParser:
    from importlib import import_module

    parser = argparse.ArgumentParser(prog="layerc", description="What your transformer model really does, layer by layer.",
                                     formatter_class=_Formatter)
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    chosen = sys.argv[1] if len(sys.argv) > 1 else None
    for name, (module, help_) in COMMANDS.items():
        # Configure only the subcommand being run: import costs stay off the other paths (the
        # others are names in the listing, without even their own -h, and only where a listing
        # may be printed: each parser costs a small run a third of a millisecond).
        if chosen in COMMANDS and name != chosen:
            continue
        p = sub.add_parser(name, help=help_, description=help_, add_help=name == chosen, formatter_class=_Formatter)
        if name == chosen:
            mod = import_module(module)
            mod.configure_parser(p)
            p.add_argument("--max-decompressed", type=size, metavar="SIZE",
                           help="most bytes one compressed input may inflate to, e.g. 20G; 0: no limit "
                                "(default: 100 times the file, at least 256M)")
            p.add_argument("--diagnostics-format", choices=("text", "json"), default="text",
                           help="errors (and, where the command routes them, warnings) as text or as one JSON document on stderr")
            p.set_defaults(run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    parser = build_parser()
    args = parser.parse_args()
    run: Callable[[argparse.Namespace], int] = args.run
    # SIGTERM unwinds like an error: staged outputs and temporary files are removed on the way out.
    try:
        previous = signal.signal(signal.SIGTERM, _terminated)
    except ValueError:  # not the main thread (a caller's worker): leave signals to the caller
        previous = None
    try:
        return _run(run, args)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _run(run: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    from layerc.ir.diagnostics import DiagnosticEngine

    # Every diagnostic of the run goes through one engine: text as it comes, or one JSON document.
    engine = args.diagnostics = DiagnosticEngine(sys.stderr, getattr(args, "diagnostics_format", "text"))
    try:
        return _run_command(run, args)
    finally:
        engine.finish()


def _run_command(run: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    from layerc.ir.diagnostics import LayercError  # here, not at the top: `layerc --help` loads no IR

    engine = args.diagnostics
    try:
        from layerc.backends import outputs
        from layerc.grammar import inputs

        inputs.set_max_decompressed(args.max_decompressed)
        read, written = paths_of(args)
        outputs.check_paths(read, written)
        stdout = sys.stdout
        if "-" in written:  # an output claims stdout: the command's own report goes to stderr
            sys.stdout = sys.stderr
        try:
            with outputs.transaction(stdout=stdout):
                return run(args) or 0
        finally:
            sys.stdout = stdout
    except LayercError as e:
        engine.emit(e.diagnostic())
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("layerc: interrupted\n")
        return 130
    except Terminated:
        sys.stderr.write("layerc: terminated\n")
        return 143
    except BrokenPipeError:
        _quiet_stdout()
        return 0
    except RecursionError:
        sys.stderr.write("layerc: error: the input nests deeper than layerc can follow\n")
        return 1
    except MemoryError:
        sys.stderr.write("layerc: error: out of memory reading the input\n")
        return 1
    except Exception as e:  # a bug in layerc: say so in one line, keep tracebacks for developers
        if _terminating:  # SIGTERM inside C code (an extension's import) comes out as that code's error
            sys.stderr.write("layerc: terminated\n")
            return 143
        if os.environ.get("LAYERC_TRACEBACK"):
            raise
        if isinstance(e, OSError) and e.errno is not None:  # the system's refusal (a full disk), not a bug
            where = f"{e.filename}: " if e.filename else ""
            sys.stderr.write(f"layerc: error: {where}{e.strerror or e}\n")
            return 1
        sys.stderr.write(f"layerc: internal error: {type(e).__name__}: {e} (set LAYERC_TRACEBACK=1 for details)\n")
        return 1


class Terminated(BaseException):
    """SIGTERM, raised where the program is so that every cleanup on the way out runs."""


_terminating = False  #: a SIGTERM came: whatever error follows, the run was terminated


def _terminated(signum, frame) -> None:
    global _terminating
    _terminating = True
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
    raise Terminated()


def _quiet_stdout() -> None:
    """After a closed pipe, stdout's last flush at exit would fail again: point it at /dev/null."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def entry() -> None:
    """The ``layerc`` command (and ``python -m layerc.tools.driver``): :func:`main`, then the
    process ends without the interpreter's teardown. Freeing every module and object one at a
    time at exit took a small run about 25 ms, a sixth of its time, for memory the operating
    system takes back at once. What an exit must do still happens, in the interpreter's order:
    the exit handlers run (staged outputs are removed), then the standard streams are flushed
    (a failed flush is an error, a closed pipe is not). Where another thread still runs, the
    process exits as usual."""
    _no_huge_pages()
    try:
        code = main()
    except SystemExit as e:  # argparse's --help and usage errors
        if e.code is None or isinstance(e.code, int):
            code = e.code or 0
        else:
            if sys.stderr is not None:
                sys.stderr.write(f"{e.code}\n")
            code = 1
    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)  # (CPython's; elsewhere: the usual exit)
    threading = sys.modules.get("threading")
    if run_exit_handlers is None or (threading is not None and threading.active_count() > 1):
        sys.exit(code)
    run_exit_handlers()
    os._exit(_flushed(code))


def _no_huge_pages() -> None:
    """numpy's transparent huge pages off for the process (``NUMPY_MADVISE_HUGEPAGE=0``, before
    numpy loads; where the environment says otherwise, as it says): a huge page is zeroed, and on
    a machine whose memory is fragmented first compacted, when first touched, and a large trace's
    analysis touches hundreds of fresh column-sized blocks, read in order, where huge pages save
    little. The 5M-kernel export took 7.2 s instead of 8.5, the 1M one 1.36 s against 1.43, a
    200K one the same, in one interleaved run. A setting of the whole process: the command
    makes it, a program that calls ``main`` keeps its own."""
    os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")


def _flushed(code: int) -> int:
    """The exit status once stdout and stderr are flushed (either may be None: closed when the
    process started): a stdout that cannot take the rest (a full disk) makes it an error."""
    out, err = sys.stdout, sys.stderr
    if out is not None:
        try:
            out.flush()
        except BrokenPipeError:
            _quiet_stdout()
        except (OSError, ValueError) as e:
            if err is not None:
                err.write(f"layerc: error: writing the standard output: {e}\n")
            code = code or 1
    if err is not None:
        try:
            err.flush()
        except (OSError, ValueError):
            pass
    return code


if __name__ == "__main__":
    entry()
