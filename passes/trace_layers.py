"""Which decoder layer each kernel of a trace belongs to.

Strategies, best first:

1. **ground truth**: ``nn.Module: *DecoderLayer_N`` / ``*Block_N`` spans (PyTorch traces with
   modules) or NVTX ranges naming ``layers.N``; a kernel is in the span that holds its launch.
2. **motif**: a decoder stack repeats the same kernel sequence once per layer. The period is
   read off the gaps between repeats of each kernel name (a name that runs once per layer repeats
   every period), checked by how much of the sequence it predicts, and the layer boundary is put
   where a norm starts the repeating unit (the norm before the attention kernels). No pattern
   table is needed; it works with or without all-reduce, on CUDA and ROCm, in graph replays.

The kernels are cut into passes first — each CUDA-graph replay, and each run of eagerly launched
kernels — because layers repeat within a pass, not across passes.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from layerc.ir.trace import Trace
from layerc.passes.kernel_tables import TYPES, kernel_table

_LAYER_SPAN = re.compile(r"^nn\.Module: \w*?(DecoderLayer|Block|Layer)_(\d+)$")
_NVTX_LAYER = re.compile(r"(?:^|[.\s/])(?:layers|h|blocks)[.\[_](\d+)(?:[.\]\s]|$)")
NORM, ATTENTION = TYPES.index("NORM"), TYPES.index("ATTENTION")


@dataclass
class LayerResult:
    layer: np.ndarray  #: per kernel: the layer index within its pass, or -1
    pass_of: np.ndarray  #: per kernel: the pass index
    strategy: str
    confidence: float
    period: int | None = None
    layers_per_pass: list[int] = field(default_factory=list)


def passes(trace: Trace) -> np.ndarray:
    """Per kernel, its pass: each graph replay is one; eager kernels between two replays are one
    (they may run interleaved with a replay on other streams without splitting it)."""
    k = trace.kernels
    out = np.full(len(k), -1, np.int64)
    replays = sorted(trace.replays().values(), key=lambda idx: k.start[idx].min())
    starts = np.array([k.start[idx].min() for idx in replays], np.int64)
    for n, idx in enumerate(replays):
        out[idx] = 2 * n + 1
    eager = out < 0
    out[eager] = 2 * np.searchsorted(starts, k.start[eager], side="right")
    _, dense = np.unique(out, return_inverse=True)
    return dense.reshape(-1)


def from_spans(trace: Trace) -> np.ndarray | None:
    """Layer of each kernel from nn.Module or NVTX layer spans, or None when there are none."""
    k = trace.kernels
    spans = []
    for tbl, rx, group in ((trace.modules, _LAYER_SPAN, 2), (trace.annotations, _NVTX_LAYER, 1)):
        for i in range(len(tbl)):
            m = rx.search(trace.strings[int(tbl.name[i])] or "")
            if m:
                spans.append((int(tbl.start[i]), int(tbl.end[i]), int(tbl.tid[i]), int(m.group(group))))
        if spans:
            break
    if not spans:
        return None
    launch = trace.kernel_launch()
    have = launch >= 0
    when = np.where(have, trace.launches.start[np.where(have, launch, 0)], -1)
    tid = np.where(have, trace.launches.tid[np.where(have, launch, 0)], -1)
    layer = np.full(len(k), -1, np.int64)
    spans.sort()
    starts = np.array([s[0] for s in spans])
    for i in np.nonzero(have)[0]:
        j = np.searchsorted(starts, when[i], side="right") - 1
        # the innermost layer span holding the launch, on the launching thread
        while j >= 0:
            s, e, t, n = spans[j]
            if s <= when[i] <= e and (t == tid[i] or t < 0):
                layer[i] = n
                break
            j -= 1
    return layer


def find_period(tokens: np.ndarray, lo: int = 3) -> tuple[int, float]:
    """The period of a repeating sequence and the share of positions it predicts."""
    n = len(tokens)
    if n < 2 * lo:
        return 0, 0.0
    gaps: Counter = Counter()
    last: dict[int, int] = {}
    for i, t in enumerate(tokens.tolist()):
        if t in last:
            gaps[i - last[t]] += 1
        last[t] = i
    best, score = 0, 0.0
    for p, _ in gaps.most_common(12):
        if p < lo or p > n // 2:
            continue
        s = float(np.mean(tokens[p:] == tokens[:-p]))
        if s > score + 1e-9 or abs(s - score) < 1e-9 and p < best:
            best, score = p, s
    # a multiple of the true period predicts as well: keep the smallest that does
    for d in range(2, 9):
        if best and best % d == 0 and best // d >= lo:
            q = best // d
            s = float(np.mean(tokens[q:] == tokens[:-q]))
            if s >= score - 0.02:
                best, score = q, s
    return best, score


def motif_layers(tokens: np.ndarray, kinds: np.ndarray) -> tuple[np.ndarray, int, float]:
    """Layer index per position of one pass (-1 before the first and after the last layer)."""
    n = len(tokens)
    layer = np.full(n, -1, np.int64)
    period, score = find_period(tokens)
    if not period or score < 0.5:
        return layer, 0, score
    # Where the repeating unit starts: the most regular region's first full unit.
    match = np.r_[tokens[period:] == tokens[:-period], np.zeros(period, bool)]
    start = int(np.argmax(match))
    unit = kinds[start : start + period]
    # The layer starts at the norm before the unit's first attention kernel (wrapping around).
    att = np.nonzero(unit == ATTENTION)[0]
    offset = 0
    if len(att):
        before = [j for j in range(att[0] - 1, att[0] - period, -1) if unit[j % period] == NORM]
        offset = before[0] % period if before else int(att[0])
    anchor = start + offset
    while anchor - period >= 0 and _similar(tokens, anchor - period, anchor, period):
        anchor -= period  # earlier layers that look the same (first dense layers may differ)
    signature = tuple(tokens[anchor : anchor + min(4, period)].tolist())
    starts = [i for i in range(n - len(signature) + 1) if tuple(tokens[i : i + len(signature)].tolist()) == signature]
    if not starts:
        return layer, period, score
    lengths = np.diff(starts)
    typical = int(np.median(lengths)) if len(lengths) else period
    for n_layer, s in enumerate(starts):
        end = starts[n_layer + 1] if n_layer + 1 < len(starts) else min(n, s + typical)
        layer[s:end] = n_layer
    return layer, period, score


def _similar(tokens: np.ndarray, a: int, b: int, period: int) -> bool:
    return float(np.mean(tokens[a : a + period] == tokens[b : b + period])) >= 0.6


def detect_layers(trace: Trace, strategy: str = "auto") -> LayerResult:
    """Layers of every kernel, by ``strategy`` (``auto``, ``ground-truth`` or ``motif``)."""
    k = trace.kernels
    pass_of = passes(trace)
    if strategy in ("auto", "ground-truth"):
        truth = from_spans(trace)
        if truth is not None and (truth >= 0).mean() > 0.5:
            per = [len(set(truth[(pass_of == p) & (truth >= 0)].tolist())) for p in np.unique(pass_of)]
            return LayerResult(truth, pass_of, "ground-truth", float((truth >= 0).mean()), None, per)
        if strategy == "ground-truth":
            raise ValueError("the trace has no nn.Module or NVTX layer spans")
    _, kinds = kernel_table().kinds(trace)
    tokens = k.name  # full names: short names merge distinct kernels (every elementwise functor)
    layer = np.full(len(k), -1, np.int64)
    per, scores, periods = [], [], []
    for p in np.unique(pass_of):
        idx = np.nonzero(pass_of == p)[0]
        idx = idx[np.argsort(k.start[idx], kind="stable")]
        got, period, score = motif_layers(tokens[idx], kinds[idx])
        layer[idx] = got
        per.append(int(got.max()) + 1 if len(got) else 0)
        if period:
            scores.append(score * len(idx))
            periods.append(period)
    confidence = float(sum(scores) / max(len(k), 1))
    period = Counter(periods).most_common(1)[0][0] if periods else None
    return LayerResult(layer, pass_of, "motif", confidence, period, per)
