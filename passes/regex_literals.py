"""What any match of a regular expression must contain: a set of literal strings, at least one of
which is in every string the pattern matches. A substring test (``in``, in C) rules out most
patterns for a name in a fraction of the time of the search it spares, where a trace holds
thousands of distinct kernel names (Inductor names each fused kernel) and a table 140 patterns.

The pattern is read by the ``re`` module's own parser (``re._parser``, which ``re.compile``
runs): its tree is a private format, so anything unexpected in it gives no literals (the search
runs, as without a filter) rather than a wrong set.
"""

from __future__ import annotations

import re
from typing import Any

try:  # the parser re.compile runs (a private module: its absence means no filter, not an error)
    from re import _constants as _c
    from re import _parser
except ImportError:  # pragma: no cover - an interpreter without them
    _parser = None

#: a literal shorter than this rules out too little to be worth a test
SHORTEST = 3


class Literals:
    """A necessary condition of a pattern's match: one of ``needles`` is in the name, in the
    name lowercased where ``fold`` (the pattern ignores case somewhere). Only for an ASCII name:
    under IGNORECASE, ``re`` matches some letters (the Kelvin sign, the long s) that lowercasing
    does not map to their ASCII partners, so a non-ASCII name is searched whatever it holds."""

    __slots__ = ("needles", "fold")

    def __init__(self, needles: tuple[str, ...], fold: bool):
        self.needles, self.fold = needles, fold


def literals(pattern: str, flags: int = 0) -> Literals | None:
    """The literals any match of ``pattern`` holds, or None where no useful set is known."""
    if _parser is None:
        return None
    try:
        tree = _parser.parse(pattern, flags)
        fold = bool(tree.state.flags & re.IGNORECASE) or _folds(tree)
        found = _required(list(tree))
    except Exception:  # noqa: BLE001 - a tree of another shape than this reads: no filter
        return None
    if found is None or min(map(len, found)) < SHORTEST:
        return None
    needles = tuple(sorted({s.lower() for s in found} if fold else found))
    if not all(n.isascii() for n in needles):
        return None
    return Literals(needles, fold)


def _folds(items: Any) -> bool:
    """Whether a group anywhere in the tree turns IGNORECASE on (``(?i:...)``)."""
    for op, av in items:
        if op is _c.SUBPATTERN:
            if av[1] & re.IGNORECASE or _folds(av[3]):
                return True
        elif op is _c.BRANCH:
            if any(_folds(b) for b in av[1]):
                return True
        elif op in (_c.MAX_REPEAT, _c.MIN_REPEAT, _c.POSSESSIVE_REPEAT):
            if _folds(av[2]):
                return True
        elif op is _c.ATOMIC_GROUP:
            if _folds(av):
                return True
        elif op in (_c.ASSERT, _c.ASSERT_NOT):
            if _folds(av[1]):
                return True
        elif op is _c.GROUPREF_EXISTS:
            if _folds(av[1]) or (av[2] is not None and _folds(av[2])):
                return True
    return False


def _required(items: list[tuple[Any, Any]]) -> set[str] | None:
    """For a sequence of tree items: a set of strings one of which every match of the sequence
    holds (the most selective of those its parts give), or None."""
    options: list[set[str]] = []
    run: list[str] = []

    def close() -> None:
        if run:
            options.append({"".join(run)})
            run.clear()

    for op, av in items:
        if op is _c.LITERAL:
            run.append(chr(av))
            continue
        close()
        got: set[str] | None = None
        if op is _c.SUBPATTERN:
            got = _required(list(av[3]))
        elif op is _c.ATOMIC_GROUP:
            got = _required(list(av))
        elif op is _c.BRANCH:
            each = [_required(list(b)) for b in av[1]]
            got = set().union(*each) if all(e is not None for e in each) else None  # type: ignore[arg-type]
        elif op in (_c.MAX_REPEAT, _c.MIN_REPEAT, _c.POSSESSIVE_REPEAT):
            if av[0] >= 1:
                got = _required(list(av[2]))
        elif op is _c.ASSERT and av[0] == 1:  # a lookahead's text is in the string too
            got = _required(list(av[1]))
        if got:
            options.append(got)
    close()
    options = [o for o in options if "" not in o]
    if not options:
        return None
    return max(options, key=lambda o: (min(map(len, o)), -len(o)))
