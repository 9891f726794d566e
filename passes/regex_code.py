"""A regular expression's compiled form, kept: what ``re``'s compiler hands the regex engine
(``_sre.compile``), so that a pattern kept in a cache is made again without its parse. The
kernel tables' 139 patterns took 30 ms to compile, and a small trace's 10 to 15 a tenth of the
time layerc spends beyond loading the file.

Like ``regex_literals``, this reads private parts of ``re`` (``_parser``, ``_compiler``,
``_sre``), whose form belongs to one Python version: a cache holding these parts is keyed by the
interpreter's version, and anything unexpected gives no parts (or no pattern from them), where
``re.compile`` runs as before.
"""

from __future__ import annotations

import re
import warnings
from array import array
from typing import Any

try:  # (private modules: their absence means no kept form, not an error)
    import _sre
    from re import _compiler  # type: ignore[attr-defined]
    from re import _parser
except ImportError:  # pragma: no cover - an interpreter without them
    _sre = None

#: what ``_sre.compile`` takes after the pattern text: flags, code (its words' bytes: a cache
#: reads bytes at once, a list of ints one at a time), groups, group index, index group
Parts = tuple[int, bytes, int, dict[str, int], tuple[Any, ...]]
#: the engine's code word (``SRE_CODE``, 32 bits unsigned)
_WORD = "I"


def compiled_parts(text: str) -> Parts | None:
    """What ``re.compile(text)`` passes the engine, or None where it cannot be known here."""
    if _sre is None:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = _parser.parse(text, 0)
            code = _compiler._code(tree, 0)
        groupindex = dict(tree.state.groupdict)
        indexgroup: list[Any] = [None] * tree.state.groups
        for name, i in groupindex.items():
            indexgroup[i] = name
        words = array(_WORD, code)
        if words.itemsize != 4:  # pragma: no cover - a platform whose unsigned int is not 32 bits
            return None
        return int(tree.state.flags), words.tobytes(), tree.state.groups - 1, groupindex, tuple(indexgroup)
    except Exception:  # noqa: BLE001 - a compiler of another shape than this reads: no parts
        return None


def from_parts(text: str, parts: Parts) -> re.Pattern[str] | None:
    """The pattern ``re.compile(text)`` makes, from its kept ``parts``; None where the engine
    takes them otherwise."""
    if _sre is None:
        return None
    try:
        flags, code, groups, groupindex, indexgroup = parts
        words = array(_WORD)
        words.frombytes(code)
        return _sre.compile(text, flags, words.tolist(), groups, groupindex, indexgroup)  # type: ignore[no-any-return]
    except Exception:  # noqa: BLE001 - another engine's signature or code: re.compile instead
        return None
