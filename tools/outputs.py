"""Where a command's text goes: ``-o FILE`` (atomically) or stdout."""

from __future__ import annotations

import sys

from layerc.backends.files import write_atomic

__all__ = ["emit", "write_atomic"]


def emit(text: str, output: str | None) -> None:
    """``-o FILE`` writes atomically; no ``-o`` (or ``-``) writes to stdout."""
    if output in (None, "-"):
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        write_atomic(output, text)
