"""argparse value types the commands share: a bad value is a usage error (exit 2) that says
what the option takes."""

from __future__ import annotations

import argparse
import math
import sys


def whole_number(minimum: int, maximum: int | None = None, why: str = ""):
    """An argparse type: a whole number from ``minimum`` to ``maximum`` (no upper bound when
    None); ``why`` says where the maximum comes from, in the usage message."""
    span = f"of {minimum} or more" if maximum is None else f"from {minimum} to {maximum}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:  # also past Python's 4300-digit limit
            value = None
        if value is None or value < minimum or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"takes a whole number {span}{why}, not {_quote(text)}")
        return value

    parse.__name__ = f"whole number {span}"
    return parse


def number(minimum: float, maximum: float, why: str = ""):
    """An argparse type: a finite number from ``minimum`` to ``maximum`` (never inf or nan)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except (ValueError, OverflowError):
            value = math.nan
        if not (math.isfinite(value) and minimum <= value <= maximum):
            raise argparse.ArgumentTypeError(f"takes a number from {_plain(minimum)} to {_plain(maximum)}{why}, "
                                             f"not {_quote(text)}")
        return value

    parse.__name__ = f"number from {_plain(minimum)} to {_plain(maximum)}"
    return parse


def _plain(x: float) -> str:
    """``1000000`` rather than ``1e+06``."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e16 else f"{x:g}"


def _quote(text: str) -> str:
    """The value as the user gave it, cut short when it is long (a 4000-digit number)."""
    return repr(text if len(text) <= 40 else text[:37] + "...")


def strategy_option(p: argparse.ArgumentParser, what: str = "") -> None:
    """``--strategy``: the same layer detection, with the same choices, in every command."""
    from layerc.passes.layer_strategies import HELP, STRATEGIES

    p.add_argument("--strategy", choices=STRATEGIES, default="auto", help=f"{what}{HELP}")


positive_int = whole_number(1)
natural_int = whole_number(0)


def fraction(text: str) -> float:
    """A probability: a number from 0 to 1."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"takes a number from 0 to 1, not {text!r}")
    return value


# -- paths ------------------------------------------------------------------------------------
# A command declares which arguments are inputs and which are outputs by their type; the driver
# finds them in the parsed arguments and refuses an output that is an input before anything is
# read (layerc.backends.outputs.check_paths).


class InputPath(str):
    """A file or directory the command reads."""


class OutputPath(str):
    """A file the command writes (``-``: standard output)."""


class OutputDir(str):
    """A directory the command writes files into (made with its parents when missing)."""


def input_path(text: str) -> InputPath:
    return InputPath(text)


def output_path(text: str) -> OutputPath:
    return OutputPath(text)


def output_directory(text: str) -> OutputDir:
    return OutputDir(text)


input_path.__name__, output_path.__name__, output_directory.__name__ = "input path", "output path", "output directory"


def size(text: str) -> int:
    """A size in bytes: ``512M``, ``20G``, ``0`` (no limit)."""
    from layerc.grammar.inputs import parse_size

    try:
        return parse_size(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes a size such as 512M, 20G or 0 (no limit), not {text!r}") from None


def paths_of(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The input and the output paths among parsed arguments (lists included)."""
    found: tuple[list[str], list[str]] = ([], [])
    for value in vars(args).values():
        for v in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(v, InputPath):
                found[0].append(str(v))
            elif isinstance(v, (OutputPath, OutputDir)):
                found[1].append(str(v))
    return found


def pipeline_options(p, print_ir: bool = True) -> None:
    """The instrumentation of every command that runs a pass pipeline, declared once."""
    if print_ir:
        p.add_argument("--print-ir-after-all", action="store_true", help="print the IR to stderr after every pass")
    p.add_argument("--timing", action="store_true", help="print an execution time report to stderr")
    p.add_argument("--print-pipeline", action="store_true",
                   help="print the pass pipeline this command runs (as `layerc opt -p` text) and exit")


def printed_pipeline(args: argparse.Namespace, passes: list) -> bool:
    """With ``--print-pipeline``: print the pipeline (the passes the flags chose) and say so."""
    if not getattr(args, "print_pipeline", False):
        return False
    sys.stdout.write(",".join(p.pipeline_text() for p in passes) + "\n")
    return True
