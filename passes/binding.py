"""Kernel binding's two parts that know nothing of graphs or traces: the op → kernel signature
table (``data/bindings.toml``) and the order-preserving alignments.

Both alignments are dynamic programs over (nodes in topological order) × (events in time order)
that keep order: if node a comes before node b, a's events come before b's. ``align_many`` lets
a node take several events (a fused MoE op launches five kernels); ``align_one`` pairs at most one
event with a node (an aten op of a profile with the graph node it became). Rows are computed with
numpy: the recurrence along a row is a running maximum, so each row is a few vector operations.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

import numpy as np

from layerc.ir.diagnostics import LayercError

BUILTIN = Path(__file__).with_name("data") / "bindings.toml"


@dataclass(frozen=True)
class Signature:
    op: re.Pattern[str]
    kernels: re.Pattern[str]  #: any of the entry's kernel regexes (searched)
    types: frozenset[str]
    launches: tuple[str, ...]
    fusible: bool = False  #: pointwise: a compiler may fuse it with its neighbours into one kernel
    exclude: re.Pattern[str] | None = None  #: names that look like the op's kernels but are not (a fill is no add)
    follows: re.Pattern[str] | None = None  #: kernels that only follow another of the op's (split-K reduce): never its first

    def starts(self, kernel: str) -> bool:
        """Whether the kernel may be the first the op launches."""
        return self.follows is None or self.follows.search(kernel) is None

    def names(self, kernel: str) -> bool:
        """Whether the kernel's name is one this op launches."""
        return self.kernels.search(kernel) is not None and (self.exclude is None or self.exclude.search(kernel) is None)


class SignatureTable:
    def __init__(self, views: re.Pattern[str], entries: list[Signature], source: str):
        self.views = views
        self.entries = entries
        self.source = source
        self._memo: dict[str, Signature | None] = {}

    def is_view(self, op: str) -> bool:
        """An op that launches nothing (a view, a getitem, a stream marker)."""
        return self.views.fullmatch(op) is not None

    def lookup(self, op: str) -> Signature | None:
        if op not in self._memo:
            self._memo[op] = next((e for e in self.entries if e.op.fullmatch(op)), None)
        return self._memo[op]


@lru_cache(maxsize=4)
def signature_table(path: str | None = None) -> SignatureTable:
    """The table at ``path`` (default: the one shipped in the package)."""
    file = Path(path) if path else BUILTIN
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except OSError as e:
        raise LayercError(f"cannot read the signature table: {e.strerror}", str(file)) from None
    except tomllib.TOMLDecodeError as e:
        raise LayercError(f"invalid TOML: {e}", str(file)) from None
    views = _regex(file, "views.ops", "".join((data.get("views") or {}).get("ops", "(?!)").split()))
    entries = []
    for i, spec in enumerate(data.get("op") or []):
        where = f"op[{i}]"
        if not isinstance(spec, dict) or not isinstance(spec.get("op"), str) or not isinstance(spec.get("kernels"), list):
            raise LayercError(f"{where}: an entry needs 'op' (a regex) and 'kernels' (a list of regexes)", str(file))
        kernels = "|".join(f"(?:{k})" for k in spec["kernels"]) or "(?!)"
        exclude = _regex(file, f"{where}.exclude", "|".join(f"(?:{x})" for x in spec["exclude"])) if spec.get("exclude") else None
        follows = _regex(file, f"{where}.follows", "|".join(f"(?:{x})" for x in spec["follows"])) if spec.get("follows") else None
        entries.append(Signature(_regex(file, f"{where}.op", spec["op"]), _regex(file, f"{where}.kernels", kernels),
                                 frozenset(spec.get("types", ())), tuple(spec.get("launches", ())), bool(spec.get("fusible", False)),
                                 exclude, follows))
    return SignatureTable(views, entries, str(file))


def _regex(file: Path, where: str, text: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as e:
        raise LayercError(f"{where}: bad regex: {e}", str(file)) from None


# -- alignment --------------------------------------------------------------------------------------
NO = -np.inf  #: a score that forbids a pairing


def _running_argmax(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Running maximum of ``values`` and, at each position, an index where it was reached."""
    best = np.maximum.accumulate(values)
    at = np.where(values >= best, np.arange(len(values)), 0)
    return best, np.maximum.accumulate(at)


def align_many(rows: int, events: int, score: Callable[[int], np.ndarray], bonus: np.ndarray | Callable[[int], np.ndarray],
               unbound: np.ndarray) -> tuple[np.ndarray, float]:
    """Per event, the row (node) it is bound to, or -1; and the total score of that assignment.

    ``score(i)`` gives row i's score for every event (``NO`` where it cannot take it), ``bonus[i]``
    what row i earns for taking at least one event (so that like nodes share like kernels instead
    of one taking them all); a callable ``bonus(i)`` gives it per event, as the run's first
    event (a split-K reduction never starts a GEMM's run). ``unbound[j]`` is the score of
    leaving event j to no node. A node's
    events form one run: its first event is bound, later ones in the run are bound where that
    scores better than leaving them unbound. The total score is maximal.
    """
    u_cum = np.concatenate(([0.0], np.cumsum(unbound)))
    prev = u_cum.copy()  # no rows: every event unbound
    starts = np.zeros((rows, events + 1), np.int32)
    for i in range(rows):
        s = score(i)
        w_cum = np.concatenate(([0.0], np.cumsum(np.maximum(unbound, s))))
        b = bonus(i) if callable(bonus) else bonus[i]
        first = np.where(s > NO, prev[:-1] + b + s - w_cum[1:], NO)  # run starts at event m (0-based)
        best, at = _running_argmax(first)
        through_run = w_cum[1:] + best
        take = through_run > prev[1:]
        cur = prev.copy()
        cur[1:] = np.where(take, through_run, prev[1:])
        starts[i, 1:] = np.where(take, at + 1, 0)
        prev = cur
    owner = np.full(events, -1, np.int64)
    j = events
    for i in range(rows - 1, -1, -1):
        m = int(starts[i, j])
        if m == 0:
            continue
        s = score(i)  # again, for the rows that took events: cheaper than keeping every row
        owner[m - 1] = i
        run = np.arange(m, j)
        owner[run[s[run] > unbound[run]]] = i
        j = m - 1
    return owner, float(prev[-1])


def align_one(rows: int, events: int, score: Callable[[int], np.ndarray], unbound: np.ndarray) -> tuple[np.ndarray, float]:
    """Per event, the row it is paired with (one event per row at most), or -1, and the total
    score, which is maximal; order kept."""
    u_cum = np.concatenate(([0.0], np.cumsum(unbound)))
    prev = u_cum.copy()
    back = np.zeros((rows, events + 1), np.int32)
    diag = np.zeros((rows, events + 1), bool)
    for i in range(rows):
        s = score(i)
        paired = np.concatenate(([NO], prev[:-1] + s))
        cand = np.maximum(prev, paired)
        best, at = _running_argmax(cand - u_cum)
        back[i] = at
        diag[i] = paired > prev
        prev = best + u_cum
    owner = np.full(events, -1, np.int64)
    j = events
    for i in range(rows - 1, -1, -1):
        k = int(back[i, j])
        if diag[i, k]:
            owner[k - 1] = i
            j = k - 1
        else:
            j = k
    return owner, float(prev[-1])
