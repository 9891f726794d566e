"""Every rank of a job at once: each rank's trace analysed on its own (in its own process: only
its Arrow tables travel back), then compared. Per layer (stage, stack, index): each rank's
median time over its complete passes, the straggler (the slowest rank) and the spread across
ranks. Per rank: its share of kernel time in communication, and the time it waited in
collectives: a collective ends on every rank when the last one arrives, so a rank's time in the
k-th collective of a layer beyond the fastest rank's time in it is time spent waiting for the
others (the collectives are matched across ranks by pass, layer and order in the layer; those
not found on every rank are left out and counted).

A rank is Kineto's ``distributedInfo.rank`` where every trace says one and no two say the same;
else each file's place in the order given (a warning says so)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from layerc.passes.kernel_tables import TYPES
from layerc.passes.trace_tables import rank_of, trace_tables

if TYPE_CHECKING:
    import pyarrow as pa

    from layerc.passes.trace_passes import TraceModule

_COMMUNICATION = TYPES.index("COMMUNICATION")


def rank_tables(module: TraceModule, rank: int, stage: str = "all") -> dict[str, pa.Table]:
    """One rank's tables (``trace_tables``) and its collectives: per communication kernel in a
    layer, its pass, layer, order in the layer and time."""
    import pyarrow as pa

    tables = trace_tables(module, stage, rank)
    k, cls, layers = module.trace.kernels, module.classification, module.layers
    assert cls is not None and layers is not None
    mine = (cls.type == _COMMUNICATION) & (layers.layer >= 0) & (layers.pass_of >= 0)
    idx = np.flatnonzero(mine)
    idx = idx[np.lexsort((k.start[idx], layers.layer[idx], layers.pass_of[idx]))]
    key = layers.pass_of[idx].astype(np.int64) * (1 << 32) + layers.layer[idx]
    first = np.r_[True, key[1:] != key[:-1]] if len(key) else np.zeros(0, bool)
    starts = np.flatnonzero(first)
    order = np.arange(len(idx)) - np.repeat(starts, np.diff(np.r_[starts, len(idx)])) if len(idx) else np.zeros(0, np.int64)
    tables["collectives"] = pa.table({"rank": pa.array(np.full(len(idx), rank, np.int32)), "pass": layers.pass_of[idx],
                                      "layer": layers.layer[idx], "order": order, "duration_ns": (k.end - k.start)[idx]})
    return tables


def module_rank(module: TraceModule) -> int | None:
    """The rank the trace says it is (``distributedInfo``), None where it says none."""
    info = module.trace.meta.get("distributedInfo")
    return rank_of(module.trace) if isinstance(info, dict) and "rank" in info else None


def compare_ranks(ranks: list[tuple[int, str, dict[str, pa.Table]]]) -> dict[str, Any]:
    """The comparison of every rank's tables ((rank, path, tables), in rank order)."""
    rows, waits, skipped = [], _waits(ranks), 0
    for rank, path, t in ranks:
        types = {str(n): int(v) for n, v in zip(t["types"]["type"].to_pylist(), t["types"]["time_ns"].to_pylist())}
        total = sum(types.values())
        comm = types.get("COMMUNICATION", 0)
        wait = int(waits["per_rank"].get(rank, 0))
        rows.append({"rank": rank, "trace": path, "kernels": int(sum(t["types"]["kernels"].to_pylist())), "time_ns": total,
                     "communication_ns": comm, "communication_pct": _pct(comm, total), "wait_ns": wait,
                     "wait_pct_of_communication": _pct(wait, comm),
                     "layers_per_pass": t["passes"]["layers"].to_pylist()})
    skipped = waits["unmatched"]
    return {"ranks": rows, "layers": _layers(ranks, waits["per_layer"]),
            "collectives": {"matched": waits["matched"], "unmatched": skipped},
            "same_passes": len({tuple(r["layers_per_pass"]) for r in rows}) == 1}


def _pct(x: float, whole: float) -> float | None:
    return round(100 * x / whole, 2) if whole > 0 else None


def _layers(ranks: list[tuple[int, str, dict[str, pa.Table]]], wait: dict[tuple[Any, ...], dict[int, float]]) -> list[dict[str, Any]]:
    """Per (stage, stack, layer): each rank's median over its complete passes of the layer's time
    and of its compute (the time outside collectives, which absorb the waits for the others), the
    straggler (the rank with the most compute, where the ranks differ by more than 3 standard
    errors of the noise: the spread of a rank's passes, and never less than the stage's layers'
    relative spread, so a single pass has a noise too) and the spread of compute across ranks
    ((most - least) / the median rank)."""
    compute: dict[tuple[Any, ...], dict[int, list[float]]] = {}
    whole: dict[tuple[Any, ...], dict[int, float]] = {}
    for rank, _, t in ranks:
        lay, col = t["layers"], t["collectives"]
        comm: dict[tuple[int, int], float] = {}
        for q, i, d in zip(col["pass"].to_pylist(), col["layer"].to_pylist(), col["duration_ns"].to_pylist()):
            comm[(q, i)] = comm.get((q, i), 0.0) + d
        groups: dict[tuple[Any, ...], list[tuple[float, float]]] = {}
        for q, s, st, i, cut, d in zip(*(lay[c].to_pylist() for c in ("pass", "stage", "stack", "layer", "partial", "duration_ns"))):
            if not cut:
                groups.setdefault((str(s), st if st is not None else 0, i), []).append((d, d - comm.get((q, i), 0.0)))
        for key, values in groups.items():
            compute.setdefault(key, {})[rank] = [c for _, c in values]
            whole.setdefault(key, {})[rank] = float(np.median([d for d, _ in values]))
    # a stage's relative noise: its layers do the same work, so their spread (per rank, over
    # layers and passes) is noise; it stands in where a rank has too few passes to measure its own
    relative: dict[tuple[Any, ...], float] = {}
    for stage_stack in {k[:2] for k in compute}:
        rels = []
        for rank in {r for k, per in compute.items() if k[:2] == stage_stack for r in per}:
            samples = np.array([c for k, per in compute.items() if k[:2] == stage_stack for c in per.get(rank, [])])
            if len(samples) >= 3 and np.median(samples) > 0:
                rels.append(1.4826 * float(np.median(np.abs(samples - np.median(samples)))) / float(np.median(samples)))
        relative[stage_stack] = float(np.median(rels)) if rels else 0.0
    out = []
    order = {"prefill": 0, "decode": 1}
    for key in sorted(compute, key=lambda k: (order.get(k[0], 2), k[1], k[2])):
        per = compute[key]
        if len(per) < 2:
            continue
        medians = {r: float(np.median(v)) for r, v in per.items()}
        ranked = np.array(list(medians.values()))
        middle = float(np.median(ranked))
        # the noise of one rank's median: the spread of its passes (MAD), pooled over the ranks
        sigma = max(1.4826 * float(np.median([np.median(np.abs(np.array(v) - np.median(v))) for v in per.values()])),
                    relative[key[:2]] * middle)
        passes = min(len(v) for v in per.values())
        se = 1.2533 * sigma * float(np.sqrt(2.0 / passes))
        gap = float(ranked.max() - ranked.min())
        straggler = max(medians, key=lambda r: medians[r]) if gap > max(3 * se, 0.01 * middle, 200.0) else None
        out.append({"stage": key[0], "stack": key[1], "layer": key[2], "ranks": len(per),
                    "median_ns": round(float(np.median(list(whole[key].values())))), "compute_median_ns": round(middle),
                    "compute_ns": {str(r): round(v) for r, v in sorted(medians.items())},
                    "straggler": straggler, "spread_pct": _pct(gap, middle),
                    "wait_ns": {str(r): round(w) for r, w in sorted(wait.get(key, {}).items())}})
    return out


def _waits(ranks: list[tuple[int, str, dict[str, pa.Table]]]) -> dict[str, Any]:
    """Each rank's time waiting in collectives, in all and per (stage, stack, layer) (median over
    passes of the layer's sum); the collectives matched on every rank, and those not."""
    import pyarrow as pa

    if len(ranks) < 2:
        return {"per_rank": {}, "per_layer": {}, "matched": 0, "unmatched": 0}
    tables = [t["collectives"] for _, _, t in ranks]
    both = pa.concat_tables(tables)
    key = (both["pass"].to_numpy().astype(np.int64) << 40) + (both["layer"].to_numpy().astype(np.int64) << 20) + both["order"].to_numpy()
    rank = both["rank"].to_numpy()
    dur = both["duration_ns"].to_numpy().astype(np.float64)
    keys, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
    everywhere = counts[inverse] == len(ranks)
    fastest = np.full(len(keys), np.inf)
    np.minimum.at(fastest, inverse[everywhere], dur[everywhere])
    waited = np.where(everywhere, dur - fastest[inverse], 0.0)
    per_rank = {int(r): float(waited[rank == r].sum()) for r in np.unique(rank).tolist()}
    stage_of = _layer_stages(ranks[0][2])
    per_layer: dict[tuple[Any, ...], dict[int, float]] = {}
    passes = (key >> 40).astype(np.int64)
    layer = ((key >> 20) & ((1 << 20) - 1)).astype(np.int64)
    for r in np.unique(rank).tolist():
        mine = (rank == r) & everywhere
        sums: dict[tuple[Any, ...], dict[int, float]] = {}
        for q, i, w in zip(passes[mine].tolist(), layer[mine].tolist(), waited[mine].tolist()):
            where = stage_of.get((q, i))
            if where is not None:
                sums.setdefault(where, {}).setdefault(q, 0.0)
                sums[where][q] += w
        for where, by_pass in sums.items():
            per_layer.setdefault(where, {})[int(r)] = float(np.median(list(by_pass.values())))
    matched = int(everywhere.sum()) // len(ranks)
    return {"per_rank": per_rank, "per_layer": per_layer, "matched": matched, "unmatched": int((~everywhere).sum())}


def _layer_stages(t: dict[str, pa.Table]) -> dict[tuple[int, int], tuple[Any, ...]]:
    """(pass, layer) → (stage, stack, layer) of one rank's layer table (complete passes only)."""
    lay = t["layers"]
    out = {}
    for q, i, s, st, cut in zip(*(lay[c].to_pylist() for c in ("pass", "layer", "stage", "stack", "partial"))):
        if not cut:
            out[(q, i)] = (str(s), st if st is not None else 0, i)
    return out
