"""Reader of a simulated schedule written as Chrome-trace JSON complete events — the format of seed
004's ``llama-3.2-1b_layer0_simulated.json``: ``ph: "X"`` events with ``ts``/``dur`` in nominal µs,
``tid`` the engine, ``args.op_type``. (``read_kineto`` keeps only profiler categories; these
events have none.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from layerc.ir.diagnostics import LayercError, Location, ParseError, source_line_at


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
        return len(np.unique(self.engine))

    def __len__(self) -> int:
        return len(self.name)


def read_simulated_trace(path: str | Path) -> SimulatedTrace:
    p = Path(path)
    if not p.is_file():
        raise LayercError(f"no such file: {p}", str(p))
    text = p.read_text(encoding="utf-8", errors="replace")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ParseError(f"invalid JSON: {e.msg}", str(p), Location(e.lineno, e.colno), source_line_at(text, e.lineno)) from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise ParseError("not a Chrome trace: no 'traceEvents' array", str(p), Location(1, 1), source_line_at(text, 1))
    rows = []
    for i, ev in enumerate(events):
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        ts, dur = ev.get("ts"), ev.get("dur", 0)
        if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)) or dur < 0:
            raise LayercError(f"event {i} ('{ev.get('name')}') needs a numeric 'ts' and a non-negative 'dur'", str(p))
        args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
        rows.append((str(ev.get("name", "")), str(args.get("op_type", "")), float(ts), float(dur), ev.get("tid", 0)))
    if not rows:
        raise ParseError("the trace has no complete ('ph': 'X') events", str(p))
    names, types, ts, dur, tid = zip(*rows)
    start = np.asarray(ts, np.float64)
    _, engine = np.unique(np.asarray([str(t) for t in tid]), return_inverse=True)
    return SimulatedTrace(str(p), list(names), list(types), start - start.min(), np.asarray(dur, np.float64),
                          engine.reshape(-1).astype(np.int32))
