"""``layerc gen-kernels DUMP -o trace.json.gz``: a CUDA-graph decode replay of a dump's graph,
kernel by kernel, with the truth of which node launched each kernel.

Binding needs (graph, trace) pairs whose answer is known. Every op of the main graph, in program
order, becomes the kernels the signature table says it launches (``launches`` in
``passes/data/bindings.toml``), with what real replays add around them: a GEMM without its
split-K reduction, adjacent pointwise ops fused into one Triton kernel (its truth names both
nodes), ops of the aux-stream regions on a second stream running beside the main one, fill and
copy kernels, and kernels no table knows. Kernels of the same node carry one truth.

Beside the trace, ``<stem>_truth.json`` lists every kernel in start order, keyed by start (ns)
and stream, as ``read_kineto`` reads them, with ``nodes`` (the names of the nodes it runs, empty
for noise), ``layer`` and ``op``.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import orjson

from layerc.backends.outputs import write_atomic
from layerc.ir.graph import OP, Graph
from layerc.ir.targets import op_name
from layerc.passes.binding import signature_table

#: (kernel, µs) of the noise a replay carries besides the graph's ops.
NOISE = (
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)", 1.5),
    ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda(c10::BFloat16)#1} const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda(c10::BFloat16)#1} const&)::{lambda(int)#1})", 2.0),
)
UNKNOWN = "user_kernel_{hex}"
#: typical µs by what the kernel's name says it is
_DURATION = (("fmha", 28.0), ("mla", 28.0), ("Attention", 24.0), ("bmm_", 30.0), ("nvjet", 11.0), ("gemm", 12.0),
             ("allreduce", 14.0), ("AllReduce", 14.0), ("AllGather", 12.0), ("moe", 6.0), ("Norm", 4.0), ("ssm", 9.0),
             ("chunk", 6.0), ("conv1d", 3.0), ("delta_rule", 12.0))


def _digest(target: str) -> str:
    """The hex part of a generated kernel's name: the op's own hash where it has one
    (``mlir_fused_19c9086ffd4685b8``), so that every layer runs the same kernel."""
    tail = target.rsplit("_", 1)[-1]
    return tail if len(tail) == 16 and all(c in "0123456789abcdef" for c in tail) else hashlib.sha256(target.encode()).hexdigest()[:16]


def _duration(name: str, rng: random.Random) -> float:
    base = next((us for key, us in _DURATION if key in name), 3.0)
    return base * rng.uniform(0.85, 1.2)


def kernels_of_graph(graph: Graph, seed: int = 0, noise: float = 0.06, fuse: float = 0.3) -> list[dict]:
    """The kernels a replay of ``graph`` runs, in launch order: ``name``, ``aux`` (second
    stream), ``nodes`` (truth), ``layer``, ``op``.

    Choices are made per op role (op and shapes), not per occurrence: as in a real deployment,
    the same GEMM shape gets the same cuBLAS kernel and the same pointwise pair the same fusion
    in every layer, so the layers repeat. Noise is drawn per kernel: a fill or a copy follows any
    kernel at the rate ``noise``."""
    from layerc.passes.groups import aux_regions

    table = signature_table()
    every = [n for n in graph.nodes if n.kind == OP]
    aux = aux_regions(every, set(every))
    ops = [n for n in every if not table.is_view(op_name(n.target or ""))]
    fused = fused_roles(ops, aux, seed, fuse)
    noisy = random.Random(f"{seed}:noise")  # the same draws in every replay: a CUDA graph repeats
    out: list[dict] = []
    i = 0
    while i < len(ops):
        n = ops[i]
        name = op_name(n.target or "")
        sig = table.lookup(name)
        nodes = [n, ops[i + 1]] if i + 1 < len(ops) and _pair_role(n, ops[i + 1]) in fused and _fusible(n, ops[i + 1], aux) else [n]
        i += len(nodes)
        role = random.Random(f"{seed}:{_role(n)}")
        if len(nodes) > 1:
            kind = "poi" if table.lookup(op_name(nodes[1].target or "")) is sig else "red"
            launches = [f"triton_{kind}_fused_" + "_".join(op_name(m.target or "") for m in nodes) + "_0"]
        elif sig is None:
            launches = [f"void at::native::vectorized_elementwise_kernel<4, at::native::{name}_kernel_cuda, std::array<char*, 2ul> >(int, at::native::{name}_kernel_cuda, std::array<char*, 2ul>)"]
        else:
            launches = list(sig.launches)
            if launches and "splitKreduce" in launches[-1] and role.random() < 0.5:
                launches.pop()  # cuBLASLt chose a kernel without split-K for this shape
        for text in launches:
            text = text.replace("{fill}", _digest(n.target or name)).replace("{Op}", name.capitalize())
            out.append({"name": text, "aux": bool(aux.get(n)), "nodes": [m.name for m in nodes],
                        "layer": n.meta.get("layer"), "op": name})
            if noisy.random() < noise:
                out.append({"name": _noise_kernel(noisy), "aux": bool(aux.get(n)), "nodes": [], "layer": n.meta.get("layer"), "op": None})
    return out


def _role(n) -> str:
    return f"{n.target}:{n.type.shape_text()}:{[v.type.shape_text() for v in n.inputs]}"


def _pair_role(a, b) -> str:
    return f"{_role(a)}|{_role(b)}"


def _reads(b, a) -> bool:
    """Whether ``b`` reads ``a``'s output, directly or through views."""
    table = signature_table()
    todo, seen = list(b.inputs), set()
    while todo:
        v = todo.pop()
        if v is a:
            return True
        if v not in seen and getattr(v, "kind", None) == OP and table.is_view(op_name(v.target or "")):
            seen.add(v)
            todo.extend(v.inputs)
    return False


def _fusible(a, b, aux: dict) -> bool:
    """A pointwise op and the next op, pointwise or a norm, that reads it in the same layer and
    on the same stream (a compiler does not fuse across a layer's start)."""
    table = signature_table()
    sa, sb = table.lookup(op_name(a.target or "")), table.lookup(op_name(b.target or ""))
    return (sa is not None and sa.fusible and sb is not None and (sb.fusible or "NORM" in sb.types)
            and a.meta.get("layer") == b.meta.get("layer") and bool(aux.get(a)) == bool(aux.get(b)) and _reads(b, a))


def fused_roles(ops: list, aux: dict, seed: int, fuse: float) -> set[str]:
    """The (op, next op) roles a compiler fuses into one Triton kernel: a pointwise op and the
    next launching op of its layer and stream that reads it, pointwise too (``triton_poi``) or
    a norm (``triton_red``). A share ``fuse`` of the roles, at least one where there is any."""
    roles = {_pair_role(a, b) for a, b in zip(ops, ops[1:]) if _fusible(a, b, aux)}
    if not roles:
        return set()
    return set(random.Random(f"{seed}:fuse").sample(sorted(roles), max(1, round(fuse * len(roles)))))


def _noise_kernel(rng: random.Random) -> str:
    """A fill, a copy or a kernel no table knows (three in ten)."""
    if rng.random() < 0.3:
        return UNKNOWN.format(hex=f"{rng.getrandbits(32):08x}")
    return rng.choice(NOISE)[0]


def generate(dump: str | Path, path: str | Path, *, seed: int = 0, replays: int = 1, noise: float = 0.06) -> dict:
    """Write a Kineto trace of ``replays`` decode replays of the dump's main graph to ``path`` and
    its truth beside it; return the truth."""
    from layerc.backends.synth.kineto import KinetoWriter, truth_path
    from layerc.grammar.dumps import load
    from layerc.passes.pipeline import run_passes
    from layerc.passes.select_graph import SelectGraph
    from layerc.passes.slicing import SliceLayers

    module = load(str(dump))
    run_passes([SelectGraph(), SliceLayers()], module)
    graph = module.graphs[0]
    rng = random.Random(seed)
    w = KinetoWriter("deepseek_v3", "cuda", 1, seed, "layers")  # the model only names layer spans, which replays lack
    rows = []
    for r in range(replays):
        kernels = kernels_of_graph(graph, seed, noise=noise)
        w.gpu = max(w.gpu, w.cpu) + w.ns(rng.uniform(50, 200))
        corr = w.graph_launch()
        w.aux = w.gpu
        first = None
        for kern in kernels:
            dur = w.ns(_duration(kern["name"], rng))
            gap = w.ns(rng.uniform(0.8, 2.5))
            if kern["aux"]:
                start = max(w.aux, w.fork) + gap
                w.aux = start + dur
                stream = w.aux_stream
            else:
                start = w.gpu + gap
                w.gpu = w.fork = start + dur
                stream = w.main_stream
            first = start if first is None else first
            w.events.append(w.kernel_event(kern["name"], start, dur, stream, corr, None, [132, 1, 1], [256, 1, 1]))
            rows.append({"start": start, "stream": stream, "replay": r, "nodes": kern["nodes"], "layer": kern["layer"],
                         "op": kern["op"], "name": kern["name"]})
        assert first is not None, "a replay without kernels"
        w.flow(corr, w.cpu + w.ns(8), first, w.main_stream)
        end = max(w.gpu, w.aux)
        w.gpu = w.aux = end
        w.cpu = end + w.ns(rng.uniform(100, 300))
    path = Path(path)
    write_atomic(path, orjson.dumps(w.document()))
    rows.sort(key=lambda k: (k["start"], k["stream"]))
    truth = {"path": str(path), "dump": str(module.source), "seed": seed, "replays": replays,
             "layers": graph.meta.get("layers", []), "kernels": rows}
    if (beside := truth_path(path)) is not None:
        truth["truth"] = str(beside)
        write_atomic(beside, json.dumps(truth, separators=(",", ":")) + "\n")
    return truth
