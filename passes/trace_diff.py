"""Two runs compared layer by layer: the layers of one aligned with the other's (layer i with
layer i of the same stage and stack, prologue with prologue, epilogue with epilogue), then the
kernels inside each aligned pair by type and order (a sequence alignment: an inserted kernel is
``added``, two kernels that became one are ``fused``, one that changed its kind is ``replaced``).

Times are medians over the complete passes of a stage (a pass the profile cut is left out where
complete ones exist), so one slow step does not read as a change. A difference is reported when
it is above the noise: more than ``threshold`` of the time (default 5%) and more than ``SIGMAS``
standard errors of the two medians, the spread of a kernel measured over every layer that runs it
at the same place (so a single pass has a spread too). A change that every layer of a stage has
(an extra all-reduce per layer) is one change with its layers listed, not one per layer.
"""

from __future__ import annotations

import difflib
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from layerc.passes.kernel_tables import TYPES
from layerc.passes.layer_facts import STAGES, pass_stages
from layerc.passes.trace_layers import by_pass

if TYPE_CHECKING:
    from layerc.passes.trace_passes import TraceModule

#: standard errors a difference must exceed
SIGMAS = 3.0
#: the default share of the time a difference must exceed
THRESHOLD = 0.05
#: no difference under this is reported, whatever the spread (ns): below a clock's resolution
FLOOR_NS = 200.0
_MAD = 1.4826  # MAD → standard deviation (normal)
_MEDIAN_SE = 1.2533  # a median's standard error over a mean's
_POOL = 3  #: the fewest samples a spread is measured from (else the run's typical relative spread)


@dataclass
class Block:
    """A layer (or the prologue or epilogue) of a stage, as each complete pass of one run ran it:
    its kernels' tokens (type, short name) in the commonest order, and per position the kernels'
    times over the passes that ran it in that order."""

    stage: str
    where: tuple[Any, ...]  #: ("layer", stack, index), ("prologue",) or ("epilogue",)
    tokens: list[tuple[str, str]]
    times: np.ndarray  #: (instances, positions) ns
    totals: np.ndarray  #: per instance (every instance, any order): its kernels' time, ns

    def label(self) -> str:
        if self.where[0] == "layer":
            stack = f" (stack {self.where[1]})" if self.where[1] else ""
            return f"{self.stage} layer {self.where[2]}{stack}"
        return f"{self.stage} {self.where[0]}"


@dataclass
class Run:
    """What one run's analysis gives the diff: its blocks, and per stage its passes' time in all
    and per kernel type (per complete pass)."""

    path: str
    blocks: dict[tuple[Any, ...], Block] = field(default_factory=dict)
    stage_time: dict[str, np.ndarray] = field(default_factory=dict)  #: stage → per pass ns
    type_time: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)  #: stage → type → per pass ns
    spread: dict[tuple[Any, ...], float] = field(default_factory=dict)  #: (stage, kind, token, position) → sigma ns


def run_of(module: TraceModule) -> Run:
    """The blocks of a module after ``type-layers``."""
    t, layers, cls, table = module.trace, module.layers, module.classification, module.table
    assert layers is not None and cls is not None and table is not None
    k = t.kernels
    dur = (k.end - k.start).astype(np.float64)
    shorts = t.strings.values
    n_pass = len(layers.layers_per_pass)
    stage_of_pass = pass_stages(table, n_pass)
    stack = layers.stack if layers.stack is not None else np.zeros(len(k), np.int64)
    complete = [q for q in range(n_pass) if not (layers.partial[q] if q < len(layers.partial) else False)]
    out = Run(t.source)
    instances: dict[tuple[Any, ...], list[np.ndarray]] = defaultdict(list)
    per_pass: dict[str, list[np.ndarray]] = defaultdict(list)
    for q, idx in enumerate(by_pass(layers.pass_of, k.start)):
        if not len(idx) or layers.pass_of[idx[0]] < 0:
            continue
        q = int(layers.pass_of[idx[0]])
        code = int(stage_of_pass[q]) if q < n_pass else -1
        stage = STAGES[code] if code >= 0 else "unknown"
        if complete and q not in complete and any(int(stage_of_pass[c]) == code for c in complete):
            continue  # a cut pass where complete ones of its stage exist
        per_pass[stage].append(idx)
        inside = layers.layer[idx] >= 0
        if inside.any():
            first, last = np.flatnonzero(inside)[[0, -1]]
            instances[(stage, "prologue")].append(idx[:first])
            instances[(stage, "epilogue")].append(idx[last + 1:])
            lay = idx[inside]
            key = stack[lay].astype(np.int64) * (1 << 32) + layers.layer[lay]
            order = np.argsort(key, kind="stable")
            cuts = np.flatnonzero(np.diff(key[order])) + 1
            for part in np.split(lay[order], cuts):
                instances[(stage, "layer", int(stack[part[0]]), int(layers.layer[part[0]]))].append(part)
        else:
            instances[(stage, "prologue")].append(idx)

    def tokens_of(idx: np.ndarray) -> list[tuple[str, str]]:
        return [(TYPES[int(cls.type[i])], shorts[int(cls.short[i])] if cls.short[i] >= 0 else "?") for i in idx.tolist()]

    for key, runs in instances.items():
        seqs = [tuple(tokens_of(idx)) for idx in runs]
        common = max(set(seqs), key=lambda s: (seqs.count(s), -len(s)))
        same = [idx for idx, s in zip(runs, seqs) if s == common]
        times = np.array([dur[idx] for idx in same]) if common else np.zeros((len(same), 0))
        totals = np.array([dur[idx].sum() for idx in runs])
        out.blocks[key] = Block(key[0], key[1:] if key[1] != "layer" else ("layer", key[2], key[3]), list(common), times, totals)
    for stage, passes in per_pass.items():
        out.stage_time[stage] = np.array([dur[idx].sum() for idx in passes])
        codes = [cls.type[idx] for idx in passes]
        out.type_time[stage] = {TYPES[c]: np.array([dur[idx][tc == c].sum() for idx, tc in zip(passes, codes)])
                                for c in np.unique(np.concatenate(codes)).tolist()}
    out.spread = _spreads(out.blocks)
    return out


def _spreads(blocks: dict[tuple[Any, ...], Block]) -> dict[tuple[Any, ...], float]:
    """The spread (sigma, ns) of each kernel: a robust scale (MAD) of its times in every pass and
    every layer of its stage that runs the same kernel at the same place (so a stage of one pass
    has a spread: its layers vary as the passes would); the same of each kind of block's total.
    No spread is taken under the run's median relative spread (measured where ``_POOL`` samples
    or more exist) times the kernel's time: a prologue of a few passes says little of its noise."""
    pooled: dict[tuple[Any, ...], list[np.ndarray]] = defaultdict(list)
    for b in blocks.values():
        for p, token in enumerate(b.tokens):
            pooled[(b.stage, b.where[0], token, p)].append(b.times[:, p])
    for b in blocks.values():  # and the blocks' totals, pooled over the layers of a stage
        pooled[(b.stage, b.where[0], "total")].append(b.totals)
    out, relative = {}, []
    for key, parts in pooled.items():
        values = np.concatenate(parts)
        if len(values) >= _POOL:
            middle = float(np.median(values))
            out[key] = _MAD * float(np.median(np.abs(values - middle)))
            if middle > 0:
                relative.append(out[key] / middle)
    rel = float(np.median(relative)) if relative else 0.0
    for key, parts in pooled.items():  # never under the run's typical relative spread (a prologue has few samples)
        out[key] = max(out.get(key, 0.0), rel * float(np.median(np.concatenate(parts))))
    return out


# -- comparing ----------------------------------------------------------------------------------
@dataclass
class Change:
    """One difference between the runs, in one or more blocks."""

    what: str  #: slower, faster, added, removed, fused, split, replaced; layer added / removed
    stage: str
    where: list[str]  #: the blocks (``decode layer 7``), several for a change every layer has
    kernels_a: list[str]
    kernels_b: list[str]
    a_ns: float  #: per pass, summed over ``where``
    b_ns: float

    @property
    def delta_ns(self) -> float:
        return self.b_ns - self.a_ns

    def as_dict(self) -> dict[str, Any]:
        return {"what": self.what, "stage": self.stage, "where": self.where, "kernels_a": self.kernels_a,
                "kernels_b": self.kernels_b, "a_ns": round(self.a_ns), "b_ns": round(self.b_ns),
                "delta_ns": round(self.delta_ns), "delta_pct": _pct(self.delta_ns, self.a_ns)}


def _pct(delta: float, base: float) -> float | None:
    return round(100 * delta / base, 2) if base > 0 else None


def _median(x: np.ndarray) -> float:
    return float(np.median(x)) if len(x) else 0.0


def _significant(a: float, b: float, se: float, threshold: float) -> bool:
    return abs(b - a) > max(SIGMAS * se, threshold * max(a, b), FLOOR_NS)


def _se(sigma_a: float, n_a: int, sigma_b: float, n_b: int) -> float:
    return _MEDIAN_SE * float(np.sqrt(sigma_a ** 2 / max(n_a, 1) + sigma_b ** 2 / max(n_b, 1)))


def _name(token: tuple[str, str]) -> str:
    return f"{token[1]} ({token[0]})"


def compare_blocks(a: Run, b: Run, ka: Block, kb: Block, threshold: float) -> list[Change]:
    """The kernel-level changes inside one aligned pair of blocks."""
    out = []
    label = ka.label()
    ops = difflib.SequenceMatcher(None, ka.tokens, kb.tokens, autojunk=False).get_opcodes()
    ma = np.median(ka.times, 0) if len(ka.times) else np.zeros(len(ka.tokens))
    mb = np.median(kb.times, 0) if len(kb.times) else np.zeros(len(kb.tokens))
    absorbed = _absorbed(ops, ma, mb)
    for tag, i1, i2, j1, j2 in ops:
        if tag == "delete" and (i1, i2) in absorbed:
            p, q = absorbed[(i1, i2)]
            lo, hi = min(p, i1), max(p + 1, i2)
            out.append(Change("fused", ka.stage, [label], [_name(t) for t in ka.tokens[lo:hi]], [_name(kb.tokens[q])],
                              float(ma[lo:hi].sum()), float(mb[q])))
            continue
        if tag == "equal":
            for p, q in zip(range(i1, i2), range(j1, j2)):
                if p in {x for x, _ in absorbed.values()}:
                    continue  # the kernel that took in its neighbours: said as the fusion
                token = ka.tokens[p]
                sa = a.spread.get((ka.stage, ka.where[0], token, p), 0.0)
                sb = b.spread.get((kb.stage, kb.where[0], token, q), 0.0)
                se = _se(sa, len(ka.times), sb, len(kb.times))
                if _significant(float(ma[p]), float(mb[q]), se, threshold):
                    out.append(Change("slower" if mb[q] > ma[p] else "faster", ka.stage, [label], [_name(token)], [_name(token)],
                                      float(ma[p]), float(mb[q])))
            continue
        what = {"insert": "added", "delete": "removed"}.get(tag)
        if what is None:
            what = "fused" if i2 - i1 > j2 - j1 else "split" if i2 - i1 < j2 - j1 else "replaced"
        out.append(Change(what, ka.stage, [label], [_name(t) for t in ka.tokens[i1:i2]], [_name(t) for t in kb.tokens[j1:j2]],
                          float(ma[i1:i2].sum()), float(mb[j1:j2].sum())))
    return out


def _absorbed(ops: Sequence[tuple[str, int, int, int, int]], ma: np.ndarray, mb: np.ndarray) -> dict[tuple[int, int], tuple[int, int]]:
    """Kernels of A removed beside a kernel that both runs share and that grew in B by at least
    half their time: fused into it (a GEMM and its activation become a GEMM with an epilogue,
    which keeps one of the two names). (i1, i2) of the removed → (p, q) of the kernel in A and B."""
    out = {}
    for k, (tag, i1, i2, j1, j2) in enumerate(ops):
        if tag != "delete":
            continue
        removed = float(ma[i1:i2].sum())
        beside = []
        if k and ops[k - 1][0] == "equal":
            beside.append((i1 - 1, j1 - 1))
        if k + 1 < len(ops) and ops[k + 1][0] == "equal":
            beside.append((i2, j1))
        grown = [(float(mb[q] - ma[p]), p, q) for p, q in beside]
        if grown and max(grown)[0] >= 0.5 * removed > 0:
            _, p, q = max(grown)
            out[(i1, i2)] = (p, q)
    return out


def diff_runs(a: Run, b: Run, threshold: float = THRESHOLD) -> dict[str, Any]:
    """The whole comparison: changes (largest first), blocks side by side, stages and types."""
    changes: list[Change] = []
    blocks = []
    for key in sorted(set(a.blocks) | set(b.blocks), key=_block_order):
        ka, kb = a.blocks.get(key), b.blocks.get(key)
        ta, tb = (_median(k.totals) if k is not None else 0.0 for k in (ka, kb))
        either = ka or kb
        assert either is not None  # the key is one of a run's blocks
        row = {"stage": key[0], "block": either.label(), "a_ns": round(ta), "b_ns": round(tb), "delta_ns": round(tb - ta),
               "delta_pct": _pct(tb - ta, ta), "kernels_a": len(ka.tokens) if ka else 0, "kernels_b": len(kb.tokens) if kb else 0}
        if ka is None or kb is None:
            one = ka or kb
            assert one is not None
            changes.append(Change("block added" if ka is None else "block removed", key[0], [one.label()],
                                  [] if ka is None else [_name(t) for t in one.tokens], [] if kb is None else [_name(t) for t in one.tokens],
                                  ta, tb))
            row["significant"] = True
        else:
            found = compare_blocks(a, b, ka, kb, threshold)
            changes += found
            sa, sb = a.spread.get((ka.stage, ka.where[0], "total"), 0.0), b.spread.get((kb.stage, kb.where[0], "total"), 0.0)
            row["significant"] = bool(found) or _significant(ta, tb, _se(sa, len(ka.totals), sb, len(kb.totals)), threshold)
        blocks.append(row)
    merged = _merged(changes)
    return {
        "a": a.path, "b": b.path, "threshold_pct": round(100 * threshold, 2), "sigmas": SIGMAS,
        "changes": [c.as_dict() for c in sorted(merged, key=lambda c: -abs(c.delta_ns))],
        "stages": {s: _side_by_side(a.stage_time.get(s), b.stage_time.get(s), threshold)
                   for s in sorted(set(a.stage_time) | set(b.stage_time))},
        "types": {s: {t: _side_by_side(a.type_time.get(s, {}).get(t), b.type_time.get(s, {}).get(t), threshold)
                      for t in sorted(set(a.type_time.get(s, {})) | set(b.type_time.get(s, {})))}
                  for s in sorted(set(a.type_time) | set(b.type_time))},
        "blocks": blocks,
    }


def _side_by_side(x: np.ndarray | None, y: np.ndarray | None, threshold: float) -> dict[str, Any]:
    """Per-pass medians of two runs and whether they differ above the noise."""
    xa, yb = (np.zeros(0) if v is None else v for v in (x, y))
    ma, mb = _median(xa), _median(yb)
    sa = _MAD * float(np.median(np.abs(xa - ma))) if len(xa) else 0.0
    sb = _MAD * float(np.median(np.abs(yb - mb))) if len(yb) else 0.0
    return {"a_ns": round(ma), "b_ns": round(mb), "delta_ns": round(mb - ma), "delta_pct": _pct(mb - ma, ma),
            "significant": _significant(ma, mb, _se(sa, len(xa), sb, len(yb)), threshold)}


def _block_order(key: tuple[Any, ...]) -> tuple[Any, ...]:
    stage = STAGES.index(key[0]) if key[0] in STAGES else len(STAGES)
    kind = {"prologue": 0, "layer": 1, "epilogue": 2}[key[1]]
    return (stage, kind, *key[2:])


def _merged(changes: list[Change]) -> list[Change]:
    """Changes of the same kind, kernels and stage in several blocks, as one listing them."""
    groups: dict[tuple[Any, ...], list[Change]] = defaultdict(list)
    for c in changes:
        groups[(c.what, c.stage, tuple(c.kernels_a), tuple(c.kernels_b))].append(c)
    out = []
    for (what, stage, ka, kb), found in groups.items():
        out.append(Change(what, stage, list(dict.fromkeys(w for c in found for w in c.where)), list(ka), list(kb),
                          sum(c.a_ns for c in found), sum(c.b_ns for c in found)))
    return out


def diff_jobs(a: list[tuple[int, Run]], b: list[tuple[int, Run]], ranks_a: dict[str, Any], ranks_b: dict[str, Any],
              threshold: float = THRESHOLD) -> dict[str, Any]:
    """Two runs of one job, every rank of each (rank r of A with rank r of B, each pair compared as
    :func:`diff_runs` compares two runs): the changes merged over the ranks that have them (a
    change on every rank is one row; one that a rank alone has names it), largest first; and the
    stragglers of each run (``compare_ranks``'s ``ranks_a`` and ``ranks_b``), with those B has
    and A had not (``new``) and the reverse (``gone``)."""
    per_rank = {r: diff_runs(ra, rb, threshold) for (r, ra), (_, rb) in zip(a, b)}
    found: dict[tuple[Any, ...], list[tuple[int, dict[str, Any]]]] = defaultdict(list)
    for r, d in per_rank.items():
        for c in d["changes"]:
            found[(c["what"], c["stage"], tuple(c["where"]), tuple(c["kernels_a"]), tuple(c["kernels_b"]))].append((r, c))
    changes = []
    for same in found.values():
        a_ns, b_ns = (float(np.median([c[k] for _, c in same])) for k in ("a_ns", "b_ns"))
        changes.append({**same[0][1], "ranks": [r for r, _ in same], "a_ns": round(a_ns), "b_ns": round(b_ns),
                        "delta_ns": round(b_ns - a_ns), "delta_pct": _pct(b_ns - a_ns, a_ns)})
    changes.sort(key=lambda c: -abs(c["delta_ns"]) * len(c["ranks"]))
    stragglers = {side: {(x["stage"], x["stack"], x["layer"]): x["straggler"] for x in c["layers"] if x["straggler"] is not None}
                  for side, c in (("a", ranks_a), ("b", ranks_b))}

    def listed(found: dict[tuple[Any, ...], int]) -> list[dict[str, Any]]:
        return [{"stage": s, "stack": st, "layer": i, "rank": r} for (s, st, i), r in sorted(found.items(), key=lambda kv: _block_order((kv[0][0], "layer", *kv[0][1:])))]

    return {
        "a": [r["trace"] for r in ranks_a["ranks"]], "b": [r["trace"] for r in ranks_b["ranks"]],
        "ranks": [r for r, _ in a], "threshold_pct": round(100 * threshold, 2), "sigmas": SIGMAS,
        "stragglers": {"a": listed(stragglers["a"]), "b": listed(stragglers["b"]),
                       "new": listed({k: r for k, r in stragglers["b"].items() if stragglers["a"].get(k) != r}),
                       "gone": listed({k: r for k, r in stragglers["a"].items() if stragglers["b"].get(k) != r})},
        "changes": changes,
        "per_rank": {str(r): d for r, d in per_rank.items()},
    }
