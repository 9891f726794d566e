"""CUDA-graph replays in a trace: which graph, one replay of it, and its kernels by layer.

A graph is known by ``graphId`` (nsys ≥ 3.25), else by the graph-node ids its kernels carry,
else (PyTorch traces) by the sequence of kernel names its launches run. A replay is the kernels
of one ``cudaGraphLaunch``/``hipGraphLaunch`` (they share its correlation id); without launch
rows, the first execution of each graph node. Layers are those of ``detect-layers``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from layerc.ir.diagnostics import LayercError
from layerc.ir.trace import Trace, unique


@dataclass
class Replay:
    graph: int  #: the graph's id (or a stable key when the trace has none)
    kernels: np.ndarray  #: kernel indices of one replay, in start order
    replays: int  #: how many replays of this graph the trace holds
    unique_nodes: int  #: distinct graph nodes (or kernels per replay)
    how: str  #: "launch correlation" or "first execution of each graph node"


def graph_replays(trace: Trace) -> dict[int, list[np.ndarray]]:
    """Graph key → its replays (kernel index arrays, in launch order)."""
    k = trace.kernels
    by_launch = trace.replays()
    graphs: dict[int, list[np.ndarray]] = {}
    signatures: dict[tuple[object, ...], int] = {}
    for corr in sorted(by_launch, key=lambda c: k.start[by_launch[c][0]]):
        idx = by_launch[corr]
        if (k.graph_id[idx] >= 0).any():
            key = int(np.bincount(k.graph_id[idx][k.graph_id[idx] >= 0]).argmax())
        elif (k.graph_node_id[idx] >= 0).any():
            key = int(k.graph_node_id[idx][k.graph_node_id[idx] >= 0].min())
        else:
            sig = tuple(k.name[idx].tolist())
            key = signatures.setdefault(sig, len(signatures))
        graphs.setdefault(key, []).append(idx)
    if graphs:
        return graphs
    # No graph-launch rows (e.g. a trimmed export): group graph-node kernels by graph id alone.
    nodes = np.nonzero(k.graph_node_id >= 0)[0]
    if not len(nodes):
        return {}
    keys = np.where(k.graph_id[nodes] >= 0, k.graph_id[nodes], 0)
    return {int(g): [nodes[keys == g]] for g in unique(keys)}


def pick_replay(trace: Trace, graph: int | None = None, replay: int = 0) -> Replay:
    """One replay of ``graph`` (default: the graph with the most kernels)."""
    graphs = graph_replays(trace)
    if not graphs:
        if trace.meta.get("cuda_graph_mode") == "graph":
            raise LayercError("no replayed kernels in this trace: " + trace.warnings[0], trace.source)
        raise LayercError("the trace has no CUDA/HIP graph replays (no graph launches, no graph-node kernels)", trace.source)
    if graph is None:
        graph = max(graphs, key=lambda g: (sum(len(r) for r in graphs[g]), len(graphs[g][0])))
    elif graph not in graphs:
        raise LayercError(f"no graph {graph} in the trace (graphs: {', '.join(map(str, sorted(graphs)))})", trace.source)
    runs = graphs[graph]
    k = trace.kernels
    nodes = k.graph_node_id[runs[0]]
    if len(runs) == 1 and len(unique(nodes[nodes >= 0])) < len(nodes[nodes >= 0]):
        # Every replay in one group (no launch rows): the first execution of each graph node.
        idx = runs[0]
        order = np.lexsort((k.start[idx], k.graph_node_id[idx]))
        node_sorted = k.graph_node_id[idx][order]
        first = order[np.r_[True, node_sorted[1:] != node_sorted[:-1]]]
        chosen = np.sort(idx[first], kind="stable")
        chosen = chosen[np.argsort(k.start[chosen], kind="stable")]
        count = int(round(len(idx) / max(len(chosen), 1)))
        return Replay(graph, chosen, count, len(chosen), "first execution of each graph node")
    if not 0 <= replay < len(runs):
        raise LayercError(f"graph {graph} has {len(runs)} replays; --replay takes 0..{len(runs) - 1}", trace.source)
    idx = runs[replay]
    distinct_nodes = len(unique(nodes[nodes >= 0])) if (nodes >= 0).any() else len(idx)
    return Replay(graph, idx, len(runs), distinct_nodes, "launch correlation")


def layers_of(trace: Trace, kernels: np.ndarray, layer: np.ndarray | None = None, strategy: str = "auto") -> list[np.ndarray]:
    """Kernels (in start order) split by decoder layer, as ``detect_layers`` finds them by
    ``strategy`` (pass its ``layer`` column when splitting many replays); kernels before the
    first layer join it."""
    if layer is None:
        from layerc.passes.trace_layers import detect_layers

        layer = detect_layers(trace, strategy).layer
    own = layer[kernels]
    ids = unique(own[own >= 0])
    if not len(ids):
        return [kernels]
    first = np.nonzero(own == ids[0])[0][0]
    own = own.copy()
    own[:first] = ids[0]
    return [kernels[own == i] for i in ids.tolist()]