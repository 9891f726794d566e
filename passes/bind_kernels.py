"""``bind-kernels``: put the kernels that really ran onto the graph nodes of a layer (seed 000,
Phases 5–6, which a person does today by reading a kernel list beside a graph).

Two kinds of trace, chosen by ``match`` (``auto`` decides from the trace):

``kernels``
    A GPU trace of the deployed model (nsys or Kineto, usually CUDA-graph replays). The layer's
    kernels come from one replay (``phase=decode``) or one eager pass (``prefill``), cut into
    layers by ``detect-layers``. Nodes are matched with the op → kernel signature table
    (``data/bindings.toml``) by ``binding.align_many``: order kept, several kernels per node,
    the main stream against the main graph and the other streams against the aux-stream regions.
``ops``
    A PyTorch profile (CPU or GPU) of the model the graph was exported from: each outermost
    ``aten::*`` op is paired with the ``aten.*`` node it became (``binding.align_one``; name,
    then ``Input Dims`` against the node's input shapes, order kept). A node's kernels are those
    its op launched; on a CPU profile the op itself and the ops nested in it are listed, and only
    the outermost one counts towards time.

Every bound event carries ``confidence`` and ``evidence``; what stays unbound (kernels, and nodes
that should have launched something) is listed in ``graph.meta["trace_unbound"]``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Iterable, cast

import numpy as np
import orjson

from layerc.ir.diagnostics import LayercError
from layerc.ir.graph import OP, Graph, Module, Node, Value
from layerc.ir.targets import op_name, op_namespace
from layerc.ir.trace import Trace, distinct, link
from layerc.ir.types import TensorType
from layerc.passes.base import Context, ModulePass
from layerc.passes.binding import NO, Signature, SignatureTable, align_many, align_one, signature_table
from layerc.passes.kernel_tables import Classification

if TYPE_CHECKING:
    from layerc.passes.trace_layers import LayerResult

PHASES = ("auto", "decode", "prefill")
MATCHES = ("auto", "kernels", "ops")

#: scores of the kernel alignment: a name that the op's signature names, a kernel type it may
#: launch, anything (for ops the table does not know), and what a node earns for its first kernel.
SIGNATURE, TYPE, ORDER, FIRST = 3.0, 1.0, 0.25, 2.0
#: what a signature hit adds where the kernel's name also names the op (``MulFunctor`` for ``mul``,
#: ``triton_poi_fused_mul_silu`` for ``silu``): pointwise ops share one signature, not one kernel
OWN_NAME = 1.0
CONFIDENCE = {"name+shape": 0.95, "name": 0.75}
#: a kernel binding's confidence is its evidence's strength, less where a neighbouring op's
#: signature would take the kernel too (AMBIGUOUS), scaled by how well the layer fits: the share
#: of its kernels that signatures name and of its launching nodes that got one (full at FIT)
STRENGTH = {"signature": 1.0, "type": 0.6, "order": 0.3}
AMBIGUOUS, FIT = 0.75, 0.8


@dataclass(frozen=True)
class BindKernels(ModulePass[Module]):
    """Bind a trace's kernels (or profiled aten ops) to the nodes of the module's first graph.

    ``trace``: the trace file (or ``ctx.inputs["trace"]``, a loaded ``Trace``); ``phase``: which
    pass of the trace; ``layer``: the trace layer (default: the layer ``slice-layer`` cut);
    ``replay``: which replay (decode) or eager pass (prefill), default (-1) the first replay or
    the first complete eager pass (a pass cut by the profile's start lacks its first layers);
    ``table``: another signature table.
    """

    name: ClassVar[str] = "bind-kernels"
    trace: str = ""
    phase: str = "auto"
    layer: int = -1
    replay: int = -1
    match: str = "auto"
    table: str = ""
    strategy: str = "auto"

    def __post_init__(self) -> None:
        from layerc.passes.layer_strategies import STRATEGIES

        if self.strategy not in STRATEGIES:
            raise LayercError(f"bind-kernels: strategy must be one of {', '.join(STRATEGIES)}, not '{self.strategy}'")
        if self.phase not in PHASES:
            raise LayercError(f"bind-kernels: phase must be one of {', '.join(PHASES)}, not '{self.phase}'")
        if self.match not in MATCHES:
            raise LayercError(f"bind-kernels: match must be one of {', '.join(MATCHES)}, not '{self.match}'")

    def apply(self, ctx: Context, module: Module) -> None:
        graph = module.graphs[0]
        trace = load_trace(ctx, self.trace)
        layer = self.layer if self.layer >= 0 else graph.meta.get("layer")
        match = self.match if self.match != "auto" else guess_match(graph, trace)
        table = signature_table(self.table or None)
        if match == "kernels":
            result = bind_trace_kernels(graph, trace, layer, self.phase, self.replay, table, self.strategy)
        else:
            result = bind_profile_ops(graph, trace, layer)
        result.write(graph)
        for w in result.warnings:
            ctx.warn(w)
        ctx.analyses["binding"] = result


def load_trace(ctx: Context, path: str) -> Trace:
    given = ctx.inputs.get("trace")
    if isinstance(given, Trace) and (not path or path == given.source):
        return given
    if not path:
        raise LayercError("bind-kernels needs a trace: bind-kernels{trace=FILE} or --trace FILE")
    cached = ctx.analyses.get(("trace", path))
    if cached is None:
        from layerc.grammar.traces import read_trace

        cached = ctx.analyses[("trace", path)] = read_trace(path)
    return cached


def guess_match(graph: Graph, trace: Trace) -> str:
    """``ops`` for a profile without graph replays whose ops are aten ops, as the graph's are."""
    ops = [n for n in graph.nodes if n.kind == OP]
    aten_graph = sum(op_namespace(n.target or "") == "aten" for n in ops) >= 0.6 * max(len(ops), 1)
    names = trace.strings.lookup(trace.cpu_ops.name) if len(trace.cpu_ops) else np.array([], object)
    aten_trace = len(names) and np.char.startswith(names.astype(str), "aten::").mean() >= 0.5
    return "ops" if aten_graph and aten_trace and not trace.replays() else "kernels"


# -- the result ------------------------------------------------------------------------------------
@dataclass
class Binding:
    """What binding found: per node its bound events, plus what stayed unbound."""

    events: dict[Node, list[dict[str, Any]]] = field(default_factory=dict)
    unbound_events: list[dict[str, Any]] = field(default_factory=list)
    unbound_nodes: list[str] = field(default_factory=list)
    unbound_ops: list[dict[str, Any]] = field(default_factory=list)  #: profiled ops no node took that launched no kernel
    warnings: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    bound_index: dict[int, Node] = field(default_factory=dict)  #: event index (kernel or cpu op) → node

    def write(self, graph: Graph) -> None:
        for n in graph.nodes:
            n.meta.pop("trace_kernels", None)
        for n, events in self.events.items():
            n.meta["trace_kernels"] = events
        graph.meta["trace_summary"] = self.summary
        graph.meta["trace_unbound"] = {"kernels": self.unbound_events, "nodes": self.unbound_nodes, "ops": self.unbound_ops}


def _us(ns: float) -> float:
    return round(float(ns) / 1000, 3)


# -- kernels of a GPU trace --------------------------------------------------------------------------
def pass_layers(trace: Trace, phase: str, replay: int, cls: Classification | None = None,
                strategy: str = "auto") -> tuple[list[np.ndarray], dict[str, Any]]:
    """The kernels of one replay (decode) or one eager pass (prefill), split into decoder layers
    by ``detect-layers`` (start order; ``cls``: the trace's classification, when made already),
    and how they were chosen."""
    from layerc.passes.replays import layers_of, pick_replay
    from layerc.passes.trace_layers import by_pass, detect_layers

    k = trace.kernels
    if not len(k):
        raise LayercError("the trace has no kernels to bind", trace.source)
    layers = detect_layers(trace, strategy, cls=cls)
    if phase == "auto":
        phase = "decode" if trace.replays() else "prefill"
    if phase == "decode":
        replay = max(replay, 0)
        chosen = pick_replay(trace, None, replay)
        split = layers_of(trace, chosen.kernels, layers.layer)
        how = {"phase": "decode", "replay": replay, "graph_id": chosen.graph, "replay_from": chosen.how}
    else:
        eager = eager_passes(trace, by_pass(layers.pass_of, k.start))
        if not eager:
            raise LayercError(f"no eager (prefill) pass in {trace.source}: all {len(k)} kernels ran in CUDA-graph replays; "
                              "try --phase decode", trace.source)
        layered = [idx for idx in eager if (layers.layer[idx] >= 0).any()]
        if not layered and layers.strategy != "none":
            raise LayercError(f"no eager (prefill) pass in {trace.source} has decoder layers; try --phase decode", trace.source)
        # no layer structure anywhere (a foreign trace): each pass is aligned whole, and the fit says how poorly
        eager = layered or eager
        if replay < 0:
            replay = first_complete(eager, layers)
        if not 0 <= replay < len(eager):
            raise LayercError(f"the trace has {len(eager)} eager passes; --replay takes 0..{len(eager) - 1}", trace.source)
        split = layers_of(trace, eager[replay], layers.layer)
        how = {"phase": "prefill", "pass": replay}
    how.update(strategy=layers.strategy, layers_found=len(split))
    return split, how


def first_complete(eager: list[np.ndarray], layers: LayerResult) -> int:
    """The first of the ``eager`` passes that ``detect-layers`` did not find cut by the profile
    (a leading partial pass lacks its first layers, so its layer N is not the graph's), else 0."""
    partial = layers.partial
    return next((i for i, idx in enumerate(eager) if not partial[int(layers.pass_of[idx[0]])]), 0)


def eager_passes(trace: Trace, passes: list[np.ndarray]) -> list[np.ndarray]:
    """The passes whose kernels mostly ran outside graph replays (pass numbers cannot tell: they
    are renumbered per device and there may be no replay between two eager passes)."""
    replayed = trace.replayed() | (trace.kernels.graph_node_id >= 0)
    return [idx for idx in passes if len(idx) and replayed[idx].mean() < 0.5]


class _KernelAligner:
    """Scores and alignment of graph ops against kernels of one trace (evidence memoised per
    signature)."""

    def __init__(self, trace: Trace, table: SignatureTable):
        from layerc.passes.kernel_tables import TYPES, kernel_table

        self.trace, self.table = trace, table
        self.cls = kernel_table().classify(trace)
        k = trace.kernels
        self.names = trace.strings.lookup(k.name).astype(str)
        self.types = np.asarray(TYPES, object)[self.cls.type]
        self._hits: dict[int, np.ndarray] = {}
        self._typed: dict[int, np.ndarray] = {}
        self._own: dict[str, np.ndarray] = {}
        self._starts: dict[int, np.ndarray | None] = {}

    def signature(self, n: Node) -> Signature | None:
        return self.table.lookup(op_name(n.target or ""))

    def evidence(self, sig: Signature, events: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(name hits, type hits) of ``sig`` on kernel indices ``events``."""
        key = id(sig)
        hit = self._hits.setdefault(key, np.zeros(len(self.names), np.int8))  # 0 unknown, 1 no, 2 yes
        todo = events[hit[events] == 0]
        if len(todo):
            hit[todo] = [2 if sig.names(self.names[j]) else 1 for j in todo]
        if key not in self._typed:
            self._typed[key] = np.isin(self.types, list(sig.types))
        return hit[events] == 2, self._typed[key][events]

    def starters(self, sig: Signature, events: np.ndarray) -> np.ndarray:
        """Whether each kernel may be the first of a run of ``sig``'s op."""
        key = id(sig)
        if key not in self._starts:
            self._starts[key] = np.ones(len(self.names), bool) if sig.follows is None else None
        starts = self._starts[key]
        if starts is None:
            starts = self._starts[key] = np.fromiter((sig.starts(n) for n in self.names), bool, len(self.names))
        return cast(np.ndarray, starts[events])

    def own_name(self, op: str, events: np.ndarray) -> np.ndarray:
        """Whether each kernel's name names ``op`` as a word (``Sub`` in ``SubFunctor``, ``_sub_``)."""
        own = self._own.setdefault(op, np.zeros(len(self.names), np.int8))  # 0 unknown, 1 no, 2 yes
        todo = events[own[events] == 0]
        if len(todo):
            word = re.compile(rf"(?<![A-Za-z])(?:{re.escape(op)}|{re.escape(op.capitalize())})(?![a-z])")
            own[todo] = [2 if word.search(self.names[j]) else 1 for j in todo]
        return cast(np.ndarray, own[events] == 2)

    def align(self, ops: list[Node], kernels: np.ndarray, aux: set[Node] | None = None) -> dict[int, Node]:
        """Kernel index → node, for ``kernels`` in start order: the main stream against the main
        graph and the other streams against the aux-stream regions (``aux``, default: the nodes
        ``infer-groups`` marked), or all against all, whichever explains the kernels better."""
        k = self.trace.kernels
        kernels = kernels[np.argsort(k.start[kernels], kind="stable")]
        sigs = [self.signature(n) for n in ops]
        streams = k.stream[kernels]
        values, counts = np.unique(streams, return_counts=True)
        plans = [[(list(range(len(ops))), kernels)]]
        aux_rows = [r for r, n in enumerate(ops) if (n in aux if aux is not None else n.meta.get("aux_stream"))]
        if len(values) > 1 and aux_rows:
            main = values[np.argmax(counts)]
            on_aux = set(aux_rows)
            plans.append([([r for r in range(len(ops)) if r not in on_aux], kernels[streams == main]),
                          (aux_rows, kernels[streams != main])])
        best: tuple[tuple[int, float], dict[int, Node]] = ((-1, NO), {})
        for plan in plans:
            total, owner_of = 0.0, {}
            for rows, events in plan:
                t, owner = self._run([sigs[r] for r in rows], [op_name(ops[r].target or "") for r in rows], events)
                total += t
                owner_of.update({int(e): ops[rows[o]] for e, o in zip(events, owner) if o >= 0})
            # the plan whose kernels the signatures name most wins; the score breaks ties
            named = sum(self.kind(n, j) == "signature" for j, n in owner_of.items())
            if (named, total) > best[0]:
                best = ((named, total), owner_of)
        return best[1]

    def _run(self, sigs: list[Signature | None], names: list[str], events: np.ndarray) -> tuple[float, np.ndarray]:
        def score(i: int) -> np.ndarray:
            if sigs[i] is None:
                return np.full(len(events), ORDER)
            hit, typed = self.evidence(cast(Signature, sigs[i]), events)  # a signature: checked above
            return np.where(hit, SIGNATURE + OWN_NAME * self.own_name(names[i], events), np.where(typed, TYPE, NO))

        def bonus(i: int) -> np.ndarray:
            return FIRST * self.starters(cast(Signature, sigs[i]), events) if sigs[i] is not None else np.zeros(len(events))

        owner, total = align_many(len(sigs), len(events), score, bonus, np.zeros(len(events)))
        return total, owner

    def kind(self, n: Node, kernel: int) -> str:
        sig = self.signature(n)
        if sig is None:
            return "order"
        return "signature" if self.evidence(sig, np.array([kernel]))[0][0] else "type"


def with_model_ops(full: Graph | None, ops: list[Node], table: SignatureTable) -> list[Node]:
    """``ops`` with the model-level ops (no layer) just before and after them in ``full``: the
    embedding before the first layer, the final norm and lm_head after the last, whose kernels
    ``detect-layers`` leaves in the edge layers. Aligned with the layer, they take those kernels
    instead of pulling the layer's nodes off theirs."""
    if full is None or not ops:
        return ops
    every = [n for n in full.nodes if n.kind == OP and not table.is_view(op_name(n.target or ""))]
    names = {n.name for n in ops}
    at = [i for i, n in enumerate(every) if n.name in names]
    if not at:
        return ops
    lo, hi = at[0], at[-1] + 1
    while lo > 0 and every[lo - 1].meta.get("layer") is None:
        lo -= 1
    while hi < len(every) and every[hi].meta.get("layer") is None:
        hi += 1
    return every[lo:at[0]] + ops + every[at[-1] + 1:hi]


def bind_trace_kernels(graph: Graph, trace: Trace, layer: int | None, phase: str, replay: int,
                       table: SignatureTable, strategy: str = "auto") -> Binding:
    """Bind the kernels of the layer's pass to the layer's ops. When ``detect-layers`` cuts the pass
    into as many layers as the graph has, the layer's own kernels are aligned with the layer's ops;
    otherwise (hybrid models whose blocks do not repeat) the whole graph is aligned with the whole
    pass and the layer keeps what its ops got."""
    aligner = _KernelAligner(trace, table)
    split, how = pass_layers(trace, phase, replay, aligner.cls, strategy)
    k = trace.kernels
    ops = [n for n in graph.nodes if n.kind == OP and not table.is_view(op_name(n.target or ""))]
    full = graph.meta.get("sliced_from")
    graph_layers = len(full.meta.get("layers", ())) if full is not None else None
    if layer is None or full is None or len(split) == graph_layers:
        if layer is not None and not 0 <= layer < len(split):
            raise LayercError(f"the {how['phase']} pass has {len(split)} layers; there is no layer {layer}", trace.source)
        idx = np.concatenate(split) if layer is None else split[layer]
        mine = set(ops)
        owner_of = aligner.align(with_model_ops(full, ops, table) if layer is not None else ops, idx)
        idx = np.array([j for j in idx.tolist() if owner_of.get(j, ops[0]) in mine], np.int64)
        owner_of = {j: n for j, n in owner_of.items() if n in mine}
        how["layer_from"] = "detect-layers" if layer is not None else "whole pass"
    else:
        assert graph_layers is not None  # counted: ``full`` is given here
        if not 0 <= layer < graph_layers:
            raise LayercError(f"the graph has {graph_layers} layers; there is no layer {layer}", trace.source)
        everything = np.concatenate(split)
        from layerc.passes.groups import aux_regions

        every_op = [n for n in full.nodes if n.kind == OP]
        full_ops = [n for n in every_op if not table.is_view(op_name(n.target or ""))]
        by_name = {n.name: n for n in ops}
        aligned = aligner.align(full_ops, everything, set(aux_regions(every_op, set(every_op))))
        owner_of = {j: by_name[n.name] for j, n in aligned.items() if n.name in by_name}
        if owner_of:
            first, last = min(owner_of, key=lambda j: k.start[j]), max(owner_of, key=lambda j: k.end[j])
            inside = (k.start[everything] >= k.start[first]) & (k.end[everything] <= k.end[last])
            idx = everything[inside]
        else:
            idx = everything[:0]
        how["layer_from"] = f"whole-graph alignment (detect-layers found {len(split)} layers, the graph has {graph_layers})"

    result = Binding()
    idx = idx[np.argsort(k.start[idx], kind="stable")]
    for kernel in idx.tolist():
        dur = int(k.end[kernel] - k.start[kernel])
        item = {"kernel": trace.strings[int(aligner.cls.short[kernel])], "full_name": aligner.names[kernel],
                "duration_us": _us(dur), "stream_id": int(k.stream[kernel]), "index": kernel}
        node = owner_of.get(kernel)
        if node is None:
            item["type"] = aligner.types[kernel]
            result.unbound_events.append(item)
            continue
        item["evidence"] = aligner.kind(node, kernel)
        result.events.setdefault(node, []).append(item)
        result.bound_index[kernel] = node
    result.unbound_nodes = [n.name for n in ops if aligner.signature(n) is not None and n not in result.events]
    fit = _confidences(aligner, ops, result, len(idx))
    if fit < FIT:
        result.warnings.append(f"bind-kernels: the trace fits layer {layer} poorly (fit {fit:.2f}: the share of its "
                               "kernels that the ops' signatures name, or of its launching nodes that got a kernel); "
                               "is the trace of this model? Confidences are scaled down")
    dur = k.end[idx] - k.start[idx]
    bound = np.array([j in owner_of for j in idx.tolist()], bool)
    result.summary = {
        "total_duration_us": _us(dur.sum()), "kernel_count": int(len(idx)), "num_streams": int(len(distinct(k.stream[idx]))),
        "bound_kernels": int(bound.sum()), "unbound_kernels": int((~bound).sum()), "bound_duration_us": _us(dur[bound].sum()),
        "layer": layer, "match": "kernels", "fit": round(fit, 3), **how,
    }
    return result


def _confidences(aligner: _KernelAligner, ops: list[Node], result: Binding, kernels: int) -> float:
    """Set each bound kernel's confidence (see STRENGTH) and return the layer's fit."""
    launching = [n for n in ops if aligner.signature(n) is not None]
    named = sum(e["evidence"] == "signature" for v in result.events.values() for e in v)
    got = sum(n in result.events for n in launching)
    fit = min(named / max(kernels, 1), got / max(len(launching), 1)) if kernels else 0.0
    position = {n: r for r, n in enumerate(ops)}
    for node, events in result.events.items():
        r = position[node]
        neighbours = [aligner.signature(ops[x]) for x in (r - 1, r + 1) if 0 <= x < len(ops)]
        for e in events:
            j = np.array([e["index"]])
            rival = any(sig is not None and (aligner.evidence(sig, j)[0][0] or e["evidence"] != "signature" and aligner.evidence(sig, j)[1][0])
                        for sig in neighbours)
            e["confidence"] = round(STRENGTH[e["evidence"]] * (AMBIGUOUS if rival else 1.0) * min(1.0, fit / FIT), 3)
    return fit


# -- ops of a PyTorch profile ------------------------------------------------------------------------
def outermost_ops(trace: Trace, start: int | None = None, end: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the cpu ops that no other cpu op (of the same thread) contains, in start order,
    and for every cpu op the outermost op that contains it (itself when it is outermost)."""
    c = trace.cpu_ops
    order = np.lexsort((-c.end, c.start, c.tid))
    parent = np.full(len(c), -1, np.int64)
    stack: list[int] = []
    for i in order.tolist():
        while stack and (c.tid[stack[-1]] != c.tid[i] or c.end[stack[-1]] <= c.start[i]):
            stack.pop()
        parent[i] = stack[0] if stack else i
        stack.append(i)
    top = np.nonzero(parent == np.arange(len(c)))[0]
    if start is not None:
        top = top[(c.start[top] >= start) & (c.end[top] <= end)]
    return top[np.argsort(c.start[top], kind="stable")], parent


def _dims(text: str) -> tuple[tuple[int, ...], ...]:
    try:
        dims = orjson.loads(text) if text else []
    except orjson.JSONDecodeError:
        return ()
    return tuple(tuple(d) for d in dims if isinstance(d, list) and d and all(isinstance(x, int) for x in d))


def _node_dims(n: Node) -> tuple[tuple[int, ...], ...]:
    shapes: list[tuple[int, ...]] = []
    for v in _flat_values(n.args):
        t = v.type
        if isinstance(t, TensorType) and t.shape and all(isinstance(d, int) for d in t.shape):
            shapes.append(tuple(cast("tuple[int, ...]", t.shape)))  # every dim an int: checked
    return tuple(shapes)


def _flat_values(args: Iterable[object]) -> list[Value]:
    """The values among ``args`` with repeats kept, as ``Input Dims`` lists them (``Node.inputs``
    holds each value once)."""
    out: list[Value] = []
    for a in args:
        if isinstance(a, Value):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out.extend(_flat_values(a))
    return out


def layer_span(trace: Trace, layer: int) -> tuple[int, int]:
    """The time span of decoder layer ``layer`` from the profile's ``nn.Module`` spans."""
    m = trace.modules
    names = trace.strings.lookup(m.name).astype(str) if len(m) else np.array([], str)
    rx = re.compile(rf"nn\.Module: \w*(?:DecoderLayer|Block|Layer)_{layer}$")
    hit = [i for i, s in enumerate(names) if rx.match(s)]
    if not hit:
        raise LayercError(f"the profile has no nn.Module span of decoder layer {layer} (profile with_modules=True or with_stack=True), "
                          "or bind the whole graph: run bind-kernels before slice-layer", trace.source)
    return int(m.start[hit[0]]), int(m.end[hit[0]])


def bind_profile_ops(graph: Graph, trace: Trace, layer: int | None) -> Binding:
    c = trace.cpu_ops
    if not len(c):
        raise LayercError("the profile has no cpu ops (aten::*) to bind; record it with the CPU activity on", trace.source)
    full = graph.meta.get("sliced_from")
    whole = layer is not None and full is not None  # align the whole program, keep the layer's part
    span = layer_span(trace, layer) if layer is not None and not whole else (None, None)
    top, parent = outermost_ops(trace, *span)
    names = trace.strings.lookup(c.name).astype(str)
    base = np.array([s.rsplit("::", 1)[-1] for s in names[top]], object)
    dims_text = trace.strings.lookup(c.input_dims[top]) if len(top) else np.array([], object)
    ops = [n for n in (cast(Graph, full) if whole else graph).nodes if n.kind == OP and op_namespace(n.target or "") is not None]
    node_names = [op_name(n.target or "") for n in ops]
    vocab = {s: i for i, s in enumerate(sorted(set(base.tolist()) | set(node_names)))}
    op_ids = np.array([vocab[s] for s in base], np.int64)
    dim_vocab: dict[tuple[tuple[int, ...], ...], int] = {}
    op_dims = np.array([dim_vocab.setdefault(_dims(str(t) if t is not None else ""), len(dim_vocab)) for t in dims_text], np.int64)
    node_ids = [vocab[s] for s in node_names]
    node_dims = [dim_vocab.get(_node_dims(n), -2) for n in ops]

    def score(i: int) -> np.ndarray:
        same = op_ids == node_ids[i]
        return np.where(same, 1.0 + (op_dims == node_dims[i]), NO)

    owner, _ = align_one(len(ops), len(top), score, np.zeros(len(top)))
    if whole:  # back to the slice's own nodes: the ops from its first to its last bound one
        mine = {n.name: n for n in graph.nodes if n.kind == OP}
        keep = [r for r, n in enumerate(ops) if n.name in mine]
        inside = np.nonzero(np.isin(owner, keep))[0]
        window = np.zeros(len(top), bool)
        if len(inside):
            window[inside[0]:inside[-1] + 1] = True
        top, op_dims = top[window], op_dims[window]
        row_of = {r: i for i, r in enumerate(keep)}
        owner = np.array([row_of.get(int(o), -1) for o in owner[window]], np.int64)
        ops = [mine[ops[r].name] for r in keep]
        node_dims = [node_dims[r] for r in keep]

    kernels_of = launched_kernels(trace, parent)
    children: dict[int, list[int]] = {}
    for i in np.nonzero(parent != np.arange(len(c)))[0]:
        children.setdefault(int(parent[i]), []).append(int(i))

    gpu = len(trace.kernels) > 0
    result = Binding()
    for pos, op in enumerate(top.tolist()):
        row = int(owner[pos])
        item = {"kernel": names[op], "duration_us": _us(c.end[op] - c.start[op]), "index": op}
        launched = [_kernel_item(trace, j, names[op]) for j in kernels_of.get(op, [])]
        if row < 0:  # its kernels are unbound kernels; an op that ran none is an unbound op
            (result.unbound_events if launched or not gpu else result.unbound_ops).extend(launched or [item])
            continue
        node = ops[row]
        kind = "name+shape" if op_dims[pos] == node_dims[row] else "name"
        if launched:  # a GPU profile: the node's kernels are the ones its op launched
            entries = [dict(e, confidence=CONFIDENCE[kind], evidence=kind) for e in launched]
        elif gpu:  # ran on the host only (a view): listed, but no GPU time
            entries = [dict(item, confidence=CONFIDENCE[kind], evidence=kind, cpu_only=True)]
        else:
            entries = [dict(item, confidence=CONFIDENCE[kind], evidence=kind)]
            entries += [{"kernel": names[ch], "duration_us": _us(c.end[ch] - c.start[ch]), "index": ch, "nested": True}
                        for ch in sorted(children.get(op, []), key=lambda x: c.start[x])]
        result.events.setdefault(node, []).extend(entries)
        result.bound_index[op] = node
    result.unbound_nodes = [n.name for n in ops if n not in result.events]
    result.summary = {**_profile_totals(trace, result, gpu), "bound_ops": len(result.bound_index),
                      "unbound_ops": int((owner < 0).sum()), "layer": layer, "match": "ops", "phase": "profile"}
    return result


def launching_ops(trace: Trace) -> np.ndarray:
    """Per kernel, the cpu op that launched it (kernel → launch by correlation → cpu op by
    External id; the kernel's own External id where no launch is recorded), or -1."""
    k = trace.kernels
    own = link(k.external_id, trace.cpu_ops.external_id)
    if not len(trace.launches):
        return own
    launch = trace.kernel_launch()
    via = np.where(launch >= 0, trace.launch_cpu_op()[np.maximum(launch, 0)], -1)
    return np.where(via >= 0, via, own)


def launched_kernels(trace: Trace, parent: np.ndarray) -> dict[int, list[int]]:
    """Outermost cpu op → the kernels it (or an op nested in it) launched, in start order."""
    op = launching_ops(trace)
    out: dict[int, list[int]] = {}
    for j in np.nonzero(op >= 0)[0][np.argsort(trace.kernels.start[op >= 0], kind="stable")].tolist():
        out.setdefault(int(parent[op[j]]), []).append(j)
    return out


def _kernel_item(trace: Trace, j: int, op: str) -> dict[str, Any]:
    k = trace.kernels
    return {"kernel": trace.strings[int(k.short[j])], "full_name": trace.strings[int(k.name[j])],
            "duration_us": _us(k.end[j] - k.start[j]), "stream_id": int(k.stream[j]), "index": int(j), "op": op}


def _profile_totals(trace: Trace, result: Binding, gpu: bool) -> dict[str, Any]:
    """GPU profile: the kernels of the window's ops, bound or not (host-only ops have no GPU
    time); CPU profile: the outermost bound ops, on no stream."""
    if not gpu:
        c, ops = trace.cpu_ops, list(result.bound_index)
        return {"total_duration_us": _us((c.end[ops] - c.start[ops]).sum()), "kernel_count": len(ops), "num_streams": 0}
    bound = [e for v in result.events.values() for e in v if not e.get("cpu_only")]
    every = bound + result.unbound_events
    return {"total_duration_us": round(sum(e["duration_us"] for e in every), 3), "kernel_count": len(every),
            "num_streams": len({e["stream_id"] for e in every if e["stream_id"] >= 0}),
            "bound_kernels": len(bound), "unbound_kernels": len(result.unbound_events),
            "bound_duration_us": round(sum(e["duration_us"] for e in bound), 3)}
