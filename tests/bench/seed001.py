"""The seed-001 trace analyzer, as its guide (``shared/seeds/001``) describes it, for ``make bench``
to time layerc beside: ``json`` load, then a Python loop over the kernel events with regex tables
(``KernelClassifier``: type, stage, short name; ``LayerDetector``: a layer starts where a layer-start
norm follows an all-reduce, or at the first norm), layer types from the kernels seen, stage
votes, half-layer merge and stage propagation. Its tables are the guide's examples; what is timed
is the shape of the work (a regex pass per kernel, per-layer Python objects), not its answers.

    python -m tests.bench.seed001 TRACE.json[.gz] [-v]
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from collections import Counter
from dataclasses import dataclass, field

TYPE_PATTERNS = [(re.compile(p, re.I), t) for p, t in [
    (r"allreduce|all_reduce|cross_device_reduce|nccl|rccl|all_gather|reduce_scatter", "COMMUNICATION"),
    (r"mla|flash|fmha|attention|attn|paged|decode_attention|extend_attention|set_mla_kv_buffer", "ATTENTION"),
    (r"moe|topk|expert|fused_gate|MoeSorting|kernel_moe_gemm", "MOE"),
    (r"quant|fp8|mxfp4|scaled", "QUANTIZATION"),
    (r"gemm|gemv|matmul|cublas|cutlass|hipblaslt|Cijk|nvjet|sm90_xmma|splitk", "LINEAR"),
    (r"memcpy|memset|copy|fill|cat|index|gather|scatter", "MEMORY"),
    (r"rmsnorm|layernorm|layer_norm|rms_norm|Rmsnorm2dFwd|norm", "NORM"),
    (r"act_and_mul|silu|gelu|swiglu|activation", "ACTIVATION"),
    (r"rotary|rope", "ROPE"),
    (r"elementwise|vectorized|reduce|softmax|add|mul", "ELEMENTWISE"),
]]
STAGE_PATTERNS = [(re.compile(p, re.I), s) for p, s in [
    (r"qseqlen1\b|_decode_|decode_attention|paged_attention|splitkv|flash_decoding|mla_decode|gemv", "decode"),
    (r"qseqlen\d{2,}|_prefill_|extend_attention|varlen_fwd|flash_fwd|fmha_fwd|mla_prefill", "prefill"),
]]
SIMPLIFY_PATTERNS = [(re.compile(p, re.I), s) for p, s in [
    (r"fused_dual_residual_rmsnorm", "dual_rmsnorm"), (r"rmsnorm|rms_norm|Rmsnorm2dFwd", "rmsnorm"),
    (r"allreduce|all_reduce", "allreduce"), (r"flash|fmha", "flash_attn"), (r"moe", "moe"),
    (r"gemm|cublas|cutlass|nvjet|Cijk", "gemm"), (r"act_and_mul|silu", "act"),
]]
LAYER_START = re.compile(r"fused_rmsnorm_kernel|fused_dual_residual_rmsnorm_kernel|Rmsnorm2dFwd|_fused_rms_mxfp4_quant|"
                         r"_fused_rms_fp8|rmsnorm|rms_norm|layernorm|layer_norm", re.I)
MLA = re.compile(r"mla_a8w8|set_mla_kv_buffer|mla", re.I)
MOE_MARKERS = re.compile(r"MoeSorting|moe_fused_gate|kernel_moe_gemm|moe|topk", re.I)
FC_MARKERS = re.compile(r"act_and_mul_kernel|silu_kernel|gelu_and_mul_kernel|silu|gelu", re.I)


@dataclass
class Kernel:
    name: str
    ts: float
    dur: float
    type: str
    stage: str
    short: str


@dataclass
class Layer:
    kernels: list[Kernel] = field(default_factory=list)
    type: str = "UNKNOWN"
    stage: str = "UNKNOWN"


def classify(name: str, ts: float, dur: float) -> Kernel:
    kind = next((t for rx, t in TYPE_PATTERNS if rx.search(name)), "OTHER")
    stage = next((s for rx, s in STAGE_PATTERNS if rx.search(name)), "UNKNOWN")
    short = next((s for rx, s in SIMPLIFY_PATTERNS if rx.search(name)), name.split("<")[0][:40])
    return Kernel(name, ts, dur, kind, stage, short)


def layer_type(layer: Layer) -> str:
    names = [k.name for k in layer.kernels]
    attention = any(k.type == "ATTENTION" for k in layer.kernels)
    mla = any(MLA.search(n) for n in names)
    moe = any(MOE_MARKERS.search(n) for n in names)
    fc = any(FC_MARKERS.search(n) for n in names)
    if attention:
        head = "MLA" if mla else "MHA"
        return f"{head}_MOE" if moe else f"{head}_FC" if fc else "ATTN"
    return "MOE" if moe else "FC" if fc else "UNKNOWN"


def vote(layer: Layer) -> str:
    votes = Counter(k.stage for k in layer.kernels if k.stage != "UNKNOWN")
    if not votes or (len(votes) > 1 and votes["prefill"] == votes["decode"]):
        return "UNKNOWN"
    return votes.most_common(1)[0][0]


def detect_layers(kernels: list[Kernel]) -> list[Layer]:
    layers: list[Layer] = []
    current = Layer()
    previous = None
    for k in kernels:
        starts = LAYER_START.search(k.name) and (previous is None or previous.type == "COMMUNICATION" or not layers)
        if starts and current.kernels:
            layers.append(current)
            current = Layer()
        current.kernels.append(k)
        previous = k
    if current.kernels:
        layers.append(current)
    for layer in layers:
        layer.type, layer.stage = layer_type(layer), vote(layer)
    merged: list[Layer] = []
    for layer in layers:  # half-layer merge: Attn followed by MoE/FC
        if merged and merged[-1].type == "ATTN" and layer.type in ("MOE", "FC"):
            both = Layer(merged[-1].kernels + layer.kernels)
            both.type, both.stage = layer_type(both), vote(both)
            merged[-1] = both
        else:
            merged.append(layer)
    for before, layer in zip(merged, merged[1:]):  # stage propagation
        if layer.stage == "UNKNOWN":
            layer.stage = before.stage
    for layer in merged:
        for k in layer.kernels:
            k.stage = layer.stage
    return merged


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.bench.seed001")
    ap.add_argument("trace")
    ap.add_argument("-v", action="store_true")
    args = ap.parse_args(argv)
    opener = gzip.open if args.trace.endswith(".gz") else open
    with opener(args.trace, "rt") as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    kernels = sorted((classify(e["name"], float(e["ts"]), float(e.get("dur", 0))) for e in events
                      if e.get("ph") == "X" and str(e.get("cat", "")).lower() == "kernel"), key=lambda k: k.ts)
    layers = detect_layers(kernels)
    by_type: Counter = Counter()
    by_stage: Counter = Counter()
    for k in kernels:
        by_type[k.type] += k.dur
        by_stage[k.stage] += k.dur
    print(f"{len(kernels)} kernels, {len(layers)} layers")
    for name, total in by_type.most_common():
        print(f"  {name:14s} {total:12.1f} us")
    for name, total in by_stage.most_common():
        print(f"  {name:14s} {total:12.1f} us")
    if args.v:
        for i, layer in enumerate(layers):
            print(f"layer {i}: {layer.type} {layer.stage} {len(layer.kernels)} kernels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
