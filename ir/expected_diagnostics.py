"""Expected diagnostics (``layerc opt --verify-diagnostics``, as ``mlir-opt -verify-diagnostics``):
``expected-warning@+1 {{text}}`` comments in an input, checked against what a run produced. Apart
from ``diagnostics``, which every command loads: only the check reads them."""

from __future__ import annotations

import re
from dataclasses import dataclass

from layerc.ir.diagnostics import Diagnostic, Location

_EXPECTED = re.compile(r"expected-(error|warning|note|remark)(?:@(above|below|[+-]\d+|\*))?\s*\{\{(.*?)\}\}")


@dataclass(frozen=True)
class Expected:
    """``expected-warning@+1 {{text}}`` in an input's comment: a diagnostic of that severity whose
    message contains the text, on the line it names (``@*``: anywhere, or with no place)."""

    severity: str
    text: str
    path: str
    line: int | None  #: None: any line
    at: Location  #: where the comment is


def expected_diagnostics(path: str, text: str) -> list[Expected]:
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for m in _EXPECTED.finditer(line):
            rel = m.group(2)
            target = None if rel == "*" else number + {None: 0, "above": -1, "below": 1}.get(rel, 0) + (
                int(rel) if rel not in (None, "above", "below") else 0)
            found.append(Expected(m.group(1), m.group(3), path, target, Location(number, m.start() + 1)))
    return found


def verify_diagnostics(expected: list[Expected], produced: list[Diagnostic]) -> list[Diagnostic]:
    """What does not match, as errors: each expected diagnostic that was not produced (at its
    comment), each produced one that was not expected (where it is)."""
    left = list(produced)
    problems = []
    for e in expected:
        hit = next((d for d in left if d.severity == e.severity and e.text in d.message and
                    (e.line is None or (d.loc is not None and d.loc.line == e.line and _same_file(d.path, e.path)))), None)
        if hit is None:
            where = "anywhere" if e.line is None else f"on line {e.line}"
            problems.append(Diagnostic("error", f"expected {e.severity} {{{{{e.text}}}}} {where} was not produced", e.path, e.at))
        else:
            left.remove(hit)
    for d in left:
        problems.append(Diagnostic("error", f"unexpected {d.severity}: {d.message}", d.path, d.loc, [], d.source_line))
    return problems


def _same_file(shown: str | None, comment_file: str) -> bool:
    """A diagnostic's file (as shown: maybe relative to the source root) is the comment's file."""
    import os

    if shown is None:
        return False
    return os.path.realpath(shown) == os.path.realpath(comment_file) or \
        os.path.realpath(comment_file).endswith(os.sep + os.path.normpath(shown))
