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
