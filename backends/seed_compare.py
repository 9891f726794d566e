"""Side by side: a scheduled Llama decoder layer and seed 004's simulated trace of the same layer.

The seed names its ops in English ("Q Projection", "Softmax - Find Max"); ``SEED_OPS`` says which
of our op labels each one is (the k-th event of a name maps to its k-th entry). Consecutive seed
events that map to the same ops (the three softmax stages) make one row. With fused attention
the seed's scores/softmax/values rows all map to the one ``attention`` op.

Besides the times, the seed's own schedule is checked against our graph's dataflow: an event
that starts before an op it reads has ended is a dependency violation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from layerc.backends.sim_trace import op_label
from layerc.grammar.seed_trace import SimulatedTrace
from layerc.ir.graph import OP, Graph, Node

#: seed event name → our labels, one entry per occurrence of the name, in order.
SEED_OPS: dict[str, tuple[tuple[str, ...], ...]] = {
    "RMSNorm (pre)": (("input_layernorm",),),
    "Q Projection": (("q_proj",),),
    "K Projection": (("k_proj",),),
    "V Projection": (("v_proj",),),
    "ROPE (Q)": (("rope_q",),),
    "ROPE (K)": (("rope_k",),),
    "KV Cache (K)": (("k_cache_write",),),
    "KV Cache (V)": (("v_cache_write",),),
    "Attention Weights (QK^T)": (("attn_qk",),),
    "Softmax - Find Max": (("attn_softmax",),),
    "Softmax - Exponentiation": (("attn_softmax",),),
    "Softmax - Normalize": (("attn_softmax",),),
    "Attention Output": (("attn_pv",),),
    "O Projection": (("o_proj",),),
    "Residual Connection": (("residual_attn",), ("residual_mlp",)),
    "RMSNorm (post)": (("post_attention_layernorm",),),
    "Gate Projection": (("gate_proj",),),
    "Up Projection": (("up_proj",),),
    "SiLU & Mult": (("act", "act_mul"),),
    "Down Projection": (("down_proj",),),
}
_EAGER_ATTENTION = {"attn_qk", "attn_softmax", "attn_pv"}


@dataclass
class Row:
    seed: list[str]  #: seed event names
    seed_us: float  #: the seed's duration (nominal µs, as its trace says)
    labels: tuple[str, ...]  #: our ops
    layerc_ns: float
    flops: int
    bytes: int
    bound: str


@dataclass
class Violation:
    op: str  #: the seed event that starts too early
    start: float
    reads: str  #: the seed event it reads
    end: float


@dataclass
class Comparison:
    rows: list[Row]
    violations: list[Violation]
    seed_makespan: float
    seed_engines: int
    unmatched: list[str] = field(default_factory=list)  #: seed events we have no op for


def compare(graph: Graph, seed: SimulatedTrace) -> Comparison:
    ops = {op_label(n): n for n in graph.nodes if n.kind == OP and "cost" in n.meta and n.meta["cost"].is_kernel}
    fused = "attention" in ops and not (_EAGER_ATTENTION & set(ops))
    seen: dict[str, int] = {}
    mapped: list[tuple[int, tuple[str, ...]]] = []
    unmatched = []
    for i, name in enumerate(seed.name):
        k = seen.get(name, 0)
        seen[name] = k + 1
        entries = SEED_OPS.get(name, ())
        labels = entries[k] if k < len(entries) else ()
        if fused and set(labels) <= _EAGER_ATTENTION and labels:
            labels = ("attention",)
        labels = tuple(lb for lb in labels if lb in ops)
        if labels:
            mapped.append((i, labels))
        else:
            unmatched.append(name)
    rows: list[Row] = []
    for i, labels in mapped:
        if rows and rows[-1].labels == labels:
            rows[-1].seed.append(seed.name[i])
            rows[-1].seed_us += float(seed.dur[i])
            continue
        costs = [ops[lb].meta["cost"] for lb in labels]
        main = max(costs, key=lambda c: c.time_ns)
        rows.append(Row([seed.name[i]], float(seed.dur[i]), labels, sum(c.time_ns for c in costs),
                        sum(c.flops for c in costs), sum(c.bytes for c in costs), main.bound))
    return Comparison(rows, _violations(graph, seed, mapped), seed.makespan, seed.engines, unmatched)


def _violations(graph: Graph, seed: SimulatedTrace, mapped: list[tuple[int, tuple[str, ...]]]) -> list[Violation]:
    """Seed events that start before an event whose op they read (through views) has ended."""
    reads = label_reads(graph)
    events_of: dict[str, list[int]] = {}
    for i, labels in mapped:
        for lb in labels:
            events_of.setdefault(lb, []).append(i)
    out = []
    for i, labels in mapped:
        for lb in labels:
            for producer in reads.get(lb, ()):
                for j in events_of.get(producer, ()):
                    if j != i and seed.start[i] < seed.end[j] - 1e-9:
                        out.append(Violation(seed.name[i], float(seed.start[i]), seed.name[j], float(seed.end[j])))
    return out


def label_reads(graph: Graph) -> dict[str, set[str]]:
    """For each kernel op's label, the labels of the kernel ops it reads, looking through views."""
    def sources(v, acc: set[str]) -> None:
        if not isinstance(v, Node) or v.kind != OP:
            return
        c = v.meta.get("cost")
        if c is not None and c.is_kernel:
            acc.add(op_label(v))
        else:
            for u in v.inputs:
                sources(u, acc)

    out: dict[str, set[str]] = {}
    for n in graph.nodes:
        c = n.meta.get("cost")
        if n.kind == OP and c is not None and c.is_kernel:
            acc: set[str] = set()
            for v in n.inputs:
                sources(v, acc)
            out[op_label(n)] = acc
    return out
