"""Reader of a simulated schedule written as Chrome-trace JSON complete events — the format of seed
004's ``llama-3.2-1b_layer0_simulated.json``: ``ph: "X"`` events with ``ts``/``dur`` in nominal µs,
``tid`` the engine, ``args.op_type``. (``read_kineto`` keeps only profiler categories; these
events have none.) Times must be finite, within :data:`MAX_US` of zero, durations not negative.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from layerc.grammar import inputs
from layerc.grammar.config_files import finite_number, parse_json
from layerc.ir.diagnostics import LayercError, Location, ParseError, source_line_at
from layerc.ir.trace import unique

#: The largest time a simulated trace may give, in its µs: the trace IR's bound of 2**62 ns.
MAX_US = 2**62 / 1e3


@dataclass
class SimulatedTrace:
    """One row per complete event, in file order; times as written (µs), relative to the first start."""

    path: str
    name: list[str]
    op_type: list[str]
    start: np.ndarray
    dur: np.ndarray
    engine: np.ndarray

    @property
    def end(self) -> np.ndarray:
        return self.start + self.dur

    @property
    def makespan(self) -> float:
        return float(self.end.max()) if len(self.dur) else 0.0

    @property
    def engines(self) -> int:
        return len(unique(self.engine))

    def __len__(self) -> int:
        return len(self.name)


def read_simulated_trace(path: str | Path) -> SimulatedTrace:
    p = Path(path)
    text = inputs.read_text(p)
    doc = parse_json(text, p)
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise ParseError("not a Chrome trace: no 'traceEvents' array", str(p), Location(1, 1), source_line_at(text, 1))
    rows = []
    for i, ev in enumerate(events):
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        ts, dur = _time(ev.get("ts")), _time(ev.get("dur", 0))
        if ts is None or dur is None or dur < 0:
            name = str(ev.get("name"))
            raise LayercError(f"event {i} ('{name if len(name) <= 40 else name[:37] + '...'}') needs a 'ts' and a "
                              f"non-negative 'dur', numbers within +-{MAX_US:.3g} µs", str(p))
        ev_args = ev.get("args")
        args = ev_args if isinstance(ev_args, dict) else {}
        rows.append((str(ev.get("name", "")), str(args.get("op_type", "")), ts, dur, ev.get("tid", 0)))
    if not rows:
        raise ParseError("the trace has no complete ('ph': 'X') events", str(p))
    names, types, ts_all, dur_all, tid = zip(*rows)
    if max(ts_all) - min(ts_all) + max(dur_all) > MAX_US:
        raise LayercError(f"the trace spans more than {MAX_US:.3g} µs", str(p))
    start = np.asarray(ts_all, np.float64)
    _, engine = np.unique(np.asarray([str(t) for t in tid]), return_inverse=True)
    return SimulatedTrace(str(p), list(names), list(types), start - start.min(), np.asarray(dur_all, np.float64),
                          engine.reshape(-1).astype(np.int32))


def _time(value) -> float | None:
    """A ``ts`` or ``dur`` as a float: a finite number within :data:`MAX_US` of zero, else None."""
    x = finite_number(value)
    return x if x is not None and abs(x) <= MAX_US else None
