"""argparse value types the commands share: a bad value is a usage error (exit 2) that says
what the option takes."""

from __future__ import annotations

import argparse


def _whole(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"takes a whole number of {minimum} or more, not {text!r}")
        return value

    parse.__name__ = f"whole number >= {minimum}"
    return parse


positive_int = _whole(1)
natural_int = _whole(0)


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
