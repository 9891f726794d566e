"""Regular expressions users write (a pass option, a kernel-table entry), compiled in one place:
Python's own FutureWarnings about them ("possible nested set") kept off the user's screen, and
one that cannot compile (bad syntax, groups nested past the compiler's stack, a repetition count
past its range) a LayercError that says why."""

from __future__ import annotations

import re
import warnings

from layerc.ir.diagnostics import LayercError


def compile_user_regex(text: str, limit: int | None = None) -> re.Pattern[str]:
    """``re.compile(text)``; a LayercError (the caller names the option) when it is longer than
    ``limit`` characters or does not compile."""
    if limit is not None and len(text) > limit:
        raise LayercError(f"{len(text)} characters, more than the {limit} a pattern may have")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return re.compile(text)
    except re.error as e:
        raise LayercError(f"not a regular expression: {e}") from None
    except RecursionError:
        raise LayercError("groups nest too deep for the regex compiler") from None
    except (OverflowError, ValueError, TypeError, MemoryError) as e:  # a{99999999999}: "the repetition number is too large"
        raise LayercError(f"does not compile: {e}") from None
