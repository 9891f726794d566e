"""``schedule``: list scheduling of a costed layer graph on N identical engines.

An op may start once every op it reads has ended — the graph's true dataflow, nothing more
(the seed placed barriers by hand and still let the post-attention norm start before the
residual add it reads had ended). Views and other aliases launch nothing: they take no engine
and no time. Whenever an engine is free, it takes the ready op with the longest path to the end
of the graph (its bottom level: HLFET list scheduling), ties in program order.

The critical path — the longest chain of dependent op times — bounds the makespan from below,
whatever N; ``engines=auto`` sweeps N = 1, 2, ... and keeps the smallest N whose makespan reaches
that bound. More engines than the graph has kernel ops can never all be busy: a larger N is
clamped to that count (the pass notes it), so nothing is ever sized by N itself.
Results: ``meta['schedule']`` on each op (start, end, engine, critical),
``meta['schedule']`` on the graph (a Schedule), ``meta['engine_sweep']`` for ``auto``.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import ClassVar, Sequence

import numpy as np

from layerc.ir.diagnostics import LayercError
from layerc.ir.graph import OP, Graph, Module, Node
from layerc.passes.base import Context, ModulePass

#: ``engines=auto`` never tries more engines than this (or than the graph has ops).
MAX_AUTO_ENGINES = 64


def parse_engines(text: str) -> int | None:
    """``engines``' text: a whole number >= 1, or ``auto`` (None); ValueError otherwise."""
    if text == "auto":
        return None
    try:
        n = int(text)
    except ValueError:  # not a number, or past Python's 4300-digit limit
        n = 0
    if n < 1:
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise ValueError(f"engines must be a whole number >= 1 or 'auto', not '{shown}'")
    return n


def usable_engines(engines: int, tasks: int) -> int:
    """The engines a schedule of ``tasks`` engine tasks can keep busy: never more than the tasks."""
    return max(1, min(engines, tasks))


@dataclass
class Schedule:
    """Where and when each task runs; times are integer ns. ``engine`` is -1 for tasks that
    need none (aliases)."""

    engines: int
    duration: np.ndarray
    start: np.ndarray
    end: np.ndarray
    engine: np.ndarray
    critical_path: int  #: the longest dependent chain (the makespan's lower bound)
    critical: np.ndarray  #: per task: on a longest chain
    sweep: list[tuple[int, int, float]] = field(default_factory=list)  #: (N, makespan, utilization) for auto

    @property
    def makespan(self) -> int:
        return int(self.end.max()) if len(self.end) else 0

    @property
    def busy(self) -> np.ndarray:
        """Busy ns per engine."""
        on = self.engine >= 0
        return np.bincount(self.engine[on], weights=self.duration[on], minlength=self.engines).astype(np.int64)

    @property
    def utilization(self) -> float:
        """Busy time over engines × makespan."""
        span = self.makespan
        return float(self.busy.sum()) / (self.engines * span) if span else 0.0

    @property
    def reaches_bound(self) -> bool:
        return self.makespan == self.critical_path


def longest_paths(duration: np.ndarray, preds: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(earliest finish, bottom level) of every task; tasks are in topological order (each
    task's predecessors come before it)."""
    n = len(duration)
    finish = np.zeros(n, np.int64)
    for i in range(n):
        ready = max((finish[p] for p in preds[i]), default=0)
        finish[i] = ready + duration[i]
    bottom = duration.astype(np.int64).copy()
    for i in range(n - 1, -1, -1):
        for p in preds[i]:
            if bottom[i] + duration[p] > bottom[p]:
                bottom[p] = bottom[i] + duration[p]
    return finish, bottom


def list_schedule(duration: Sequence[int] | np.ndarray, preds: Sequence[Sequence[int]], engines: int,
                  needs_engine: Sequence[bool] | np.ndarray | None = None) -> Schedule:
    """Schedule tasks ``0..n-1`` (topologically ordered, ``preds[i]`` all ``< i``) on ``engines``
    (clamped to the tasks that need one: a larger N leaves engines idle and changes nothing)."""
    if engines < 1:
        raise LayercError(f"engines must be at least 1, not {engines}")
    dur = np.asarray(duration, np.int64)
    n = len(dur)
    if (dur < 0).any():
        raise LayercError("op durations must not be negative")
    uses = np.ones(n, bool) if needs_engine is None else np.asarray(needs_engine, bool)
    engines = usable_engines(engines, int(uses.sum()))
    for i, ps in enumerate(preds):
        if any(not 0 <= p < i for p in ps):
            raise LayercError(f"task {i} depends on a task that does not come before it")
    finish, bottom = longest_paths(dur, preds)
    cp = int(finish.max()) if n else 0
    top = finish - dur
    critical = (top + bottom == cp) & (n > 0)

    succs: list[list[int]] = [[] for _ in range(n)]
    missing = np.zeros(n, np.int64)
    for i, ps in enumerate(preds):
        distinct = set(ps)
        missing[i] = len(distinct)
        for p in distinct:
            succs[p].append(i)
    start = np.zeros(n, np.int64)
    end = np.zeros(n, np.int64)
    engine = np.full(n, -1, np.int32)
    ready_at = np.zeros(n, np.int64)
    waiting: list[tuple[int, int]] = []  # (data-ready time, task) of tasks whose inputs are all scheduled
    runnable: list[tuple[int, int]] = []  # (-bottom level, task) of waiting tasks whose data is ready by now
    free = [(0, e) for e in range(engines)]  # (free at, engine)

    def release(i: int) -> None:
        """Task ``i``'s inputs are all scheduled: queue it, or pass an alias straight through."""
        stack = [i]
        while stack:
            j = stack.pop()
            if uses[j]:
                heapq.heappush(waiting, (int(ready_at[j]), j))
                continue
            start[j], end[j] = ready_at[j], ready_at[j] + dur[j]
            for s in succs[j]:
                ready_at[s] = max(ready_at[s], end[j])
                missing[s] -= 1
                if missing[s] == 0:
                    stack.append(s)

    for i in np.nonzero(missing == 0)[0].tolist():  # the sources, found before releasing any
        release(i)
    scheduled, to_schedule = 0, int(uses.sum())
    now = 0  # never goes back: every task released from here on is ready at or after it
    while scheduled < to_schedule:
        at, e = heapq.heappop(free)
        at = now = max(at, now)
        if not runnable and waiting[0][0] > at:
            at = now = waiting[0][0]  # the engine idles until the next op's inputs are ready
        while waiting and waiting[0][0] <= at:
            r, j = heapq.heappop(waiting)
            heapq.heappush(runnable, (-int(bottom[j]), j))
        _, j = heapq.heappop(runnable)
        start[j], end[j], engine[j] = at, at + dur[j], e
        heapq.heappush(free, (int(end[j]), e))
        scheduled += 1
        for s in succs[j]:
            ready_at[s] = max(ready_at[s], end[j])
            missing[s] -= 1
            if missing[s] == 0:
                release(s)
    return Schedule(engines, dur, start, end, engine, cp, critical)


def sweep_engines(duration: Sequence[int] | np.ndarray, preds: Sequence[Sequence[int]],
                  needs_engine: Sequence[bool] | np.ndarray | None = None, limit: int = MAX_AUTO_ENGINES) -> Schedule:
    """The schedule with the fewest engines whose makespan equals the critical path (or with
    ``limit`` engines), its ``sweep`` listing every N tried."""
    tasks = int(np.asarray(needs_engine if needs_engine is not None else np.ones(len(duration)), bool).sum())
    tried = []
    for n in range(1, max(1, min(limit, tasks)) + 1):
        s = list_schedule(duration, preds, n, needs_engine)
        tried.append((n, s.makespan, s.utilization))
        if s.reaches_bound:
            break
    s.sweep = tried
    return s


# -- the pass -------------------------------------------------------------------------------------
def graph_tasks(graph: Graph) -> tuple[list[Node], np.ndarray, list[list[int]], np.ndarray]:
    """The ops of a costed graph as tasks: (ops, integer ns durations, predecessors, needs engine)."""
    ops = [n for n in graph.nodes if n.kind == OP]
    index = {n: i for i, n in enumerate(ops)}
    dur = np.zeros(len(ops), np.int64)
    uses = np.zeros(len(ops), bool)
    preds: list[list[int]] = []
    for i, n in enumerate(ops):
        cost = n.meta.get("cost")
        if cost is None:
            raise LayercError(f"'{n.name}' has no cost: run the cost pass before schedule (pipeline 'cost,schedule')", loc=n.loc)
        uses[i] = cost.is_kernel
        dur[i] = max(1, round(cost.time_ns)) if cost.is_kernel else 0
        preds.append([index[v] for v in n.inputs if v in index])
    return ops, dur, preds, uses


@dataclass(frozen=True)
class ListSchedule(ModulePass[Module]):
    """List-schedule every graph's ops on N engines (``auto``: the fewest that reach the critical path)."""

    name: ClassVar[str] = "schedule"

    engines: str = "1"

    def __post_init__(self) -> None:
        parse_engines(self.engines)  # a ValueError: the pipeline's option error

    def apply(self, ctx: Context, module: Module) -> None:
        asked = parse_engines(self.engines)
        for graph in module.graphs:
            ops, dur, preds, uses = graph_tasks(graph)
            if asked is None:
                s = sweep_engines(dur, preds, uses)
            else:
                s = list_schedule(dur, preds, asked, uses)
                if s.engines < asked:
                    ctx.warn(f"schedule: {_count(asked)} engines asked for, but '{graph.name}' has {int(uses.sum())} kernel "
                             f"op{'s' if uses.sum() != 1 else ''}: scheduled on {s.engines} (more could never be busy)")
            for i, n in enumerate(ops):
                n.meta["schedule"] = {"start": int(s.start[i]), "end": int(s.end[i]), "engine": int(s.engine[i]),
                                      "critical": bool(s.critical[i])}
            graph.meta["schedule"] = s


def _count(n: int) -> str:
    """A number for a message, shortened when it is long."""
    text = str(n)
    return text if len(text) <= 20 else f"{text[:6]}...({len(text)} digits)"


__all__ = ["parse_engines", "usable_engines", "ListSchedule", "Schedule", "list_schedule", "sweep_engines", "longest_paths",
           "graph_tasks"]
