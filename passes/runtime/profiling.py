"""Profile one decoder layer: build the graph ``layerc simulate`` costs, run it with PyTorch op
by op (each op in a ``record_function`` range), check it against transformers' own layer, read
the profile back through the trace IR, and set the measured time of each op beside its cost."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from layerc.grammar.hf_config import ModelSpec
    from layerc.ir.graph import Graph
    from layerc.ir.trace import Trace
    from layerc.passes.cost import Hardware

#: device-name substrings → hardware presets (first match wins)
DEVICE_PRESETS = (("H200", "h200"), ("H100", "h100"), ("A100", "a100"), ("B200", "b200"), ("MI300X", "mi300x"))


class Result:
    """A profiled layer: the graph (costed), the trace, and per op the measured durations (ns)."""

    def __init__(self, spec: ModelSpec, graph: Graph, hardware: Hardware, trace: Trace, measured: dict[str, list[int]],
                 layer_ranges: list[tuple[int, int]], op_ranges: list[tuple[str, int, int]], check: dict[str, Any] | None,
                 device: str, dtype: str, args: argparse.Namespace) -> None:
        self.spec, self.graph, self.hardware, self.trace = spec, graph, hardware, trace
        self.measured, self.layer_ranges, self.op_ranges = measured, layer_ranges, op_ranges
        self.check, self.device, self.dtype, self.args = check, device, dtype, args

    def rows(self) -> list[dict[str, Any]]:
        from layerc.ir.graph import op_label

        rows: list[dict[str, Any]] = []
        for n in self.graph.ops:
            label = op_label(n)
            if label not in self.measured:
                continue
            c = n.meta["cost"]
            meas = statistics.median(self.measured[label]) / 1e3
            sim = c.time_ns / 1e3
            rows.append({"op": label, "type": c.kind, "shape": n.type.shape_text() if n.type.is_known else "?",
                         "flops": c.flops, "bytes": c.bytes, "bound": c.bound if c.is_kernel else "-",
                         "measured_us": round(meas, 3), "simulated_us": round(sim, 3),
                         "ratio": round(meas / sim, 3) if sim else None, "kernel": c.is_kernel})
        return rows

    def errors(self) -> dict[str, Any]:
        rows = [r for r in self.rows() if r["kernel"] and r["measured_us"] > 0]
        if not rows:
            return {}
        abs_err = [abs(r["simulated_us"] - r["measured_us"]) for r in rows]
        rel_err = [abs(r["simulated_us"] - r["measured_us"]) / r["measured_us"] for r in rows]
        layer = statistics.median(e - s for s, e in self.layer_ranges) / 1e3 if self.layer_ranges else 0.0
        return {"ops": len(rows), "median_abs_error_us": round(statistics.median(abs_err), 3),
                "median_abs_pct_error": round(100 * statistics.median(rel_err), 2),
                "measured_layer_us": round(layer, 3), "measured_ops_us": round(sum(r["measured_us"] for r in rows), 3),
                "simulated_layer_us": round(self.graph.meta["cost"]["time_ns"] / 1e3, 3)}

    def report(self) -> dict[str, Any]:
        meta = {k: v for k, v in self.graph.meta.items() if isinstance(v, (str, int, float))}
        hw = self.hardware
        return {"layer": meta, "device": self.device, "dtype": self.dtype, "repeat": self.args.repeat,
                "hardware": {"key": hw.key, "name": hw.name, "matrix_tflops": hw.matrix_tflops, "hbm_gbps": hw.hbm_gbps,
                             "vector_tflops": hw.vector_tflops, "launch_overhead_us": hw.launch_overhead_us},
                "check": self.check, "summary": self.errors(), "ops": self.rows()}


def profile_layer(spec: ModelSpec, args: argparse.Namespace, device: str, dtype: str, read_back: Callable[[Any], Any]) -> Result:
    """Build, check, warm up, profile, read back (``read_back(profiler)``: the profile as a
    ``Trace``), cost."""
    import torch

    from layerc.passes.runtime.torch_run import (GraphRunner, calibrate_host, layer_inputs, layer_weights, transformers_layer,
                                           transformers_output)
    from layerc.grammar.decoder_layer import LayerShape, build_layer
    from layerc.passes.base import Context
    from layerc.passes.cost import CostModel, load_hardware

    module = build_layer(spec, args.phase, args.n_tokens, args.batch, args.layer, args.attention, dtype)
    graph = module.graphs[0]
    check_fits(graph, device, torch)
    hardware = _hardware(args, device, dtype, load_hardware, calibrate_host)
    layer = graph.meta["layer"]
    ctx = Context(inputs={"hardware": hardware})
    CostModel().apply(ctx, module)
    _progress(f"building {spec.name} layer {layer} ({dtype}, {device})")
    block, rotary, config = transformers_layer(spec, layer, dtype, device)
    runner = GraphRunner(graph, layer_weights(graph, block))
    shape = LayerShape(args.phase, args.n_tokens, args.batch)
    inputs = layer_inputs(graph, spec, shape, rotary, dtype, device)
    check = None
    with torch.no_grad():
        if not args.no_check:
            ours = runner.run({k: v.clone() for k, v in inputs.items()})
            ref = transformers_output(block, config, spec, shape, {k: v.clone() for k, v in inputs.items()}, layer)
            err = float((ours.float() - ref.float()).abs().max())
            scale = float(ref.float().abs().max()) or 1.0
            tol = 1e-4 if dtype == "float32" else 3e-2
            check = {"max_abs_diff": err, "max_abs_ref": scale, "ok": err <= tol * scale}
            if not check["ok"]:
                sys.stderr.write(f"layerc: warning: the graph's output differs from transformers' by {err:.3g} "
                                 f"(max |output| {scale:.3g})\n")
        del block
        for _ in range(args.warmup):
            runner.run(inputs)
        _sync(torch, device)
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device.startswith("cuda"):
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        _progress(f"profiling {args.repeat} runs")
        with torch.profiler.profile(activities=activities, record_shapes=True) as prof:
            for r in range(args.repeat):
                with torch.profiler.record_function(f"layer {layer} ({args.phase}) run {r}"):
                    runner.run(inputs, annotate=True)
                _sync(torch, device)
    trace = read_back(prof)
    measured, layer_ranges, op_ranges = _measure(trace, graph, layer, args.phase, device)
    return Result(spec, graph, ctx.analyses["hardware"], trace, measured, layer_ranges, op_ranges, check, device, dtype, args)


def check_fits(graph: Graph, device: str, torch: Any) -> None:
    """Refuse a step whose tensors cannot fit the device before allocating any: the graph's
    weights, inputs and results (each op's, once) against the memory there is (physical memory
    and the address-space limit on cpu; the GPU's memory on cuda)."""
    from layerc.ir.diagnostics import LayercError
    from layerc.passes.cost import nbytes

    need = sum(nbytes(v) for v in (*graph.weights.values(), *graph.nodes))
    have = _device_memory(device, torch)
    if have and need > have:
        raise LayercError(f"the layer's tensors at --n-tokens {graph.meta['seq_len']}, --batch {graph.meta['batch']} take "
                          f"{need / 2**30:,.1f} GiB, more than the {have / 2**30:,.1f} GiB of {device}: give smaller sizes")


def _device_memory(device: str, torch: Any) -> int:
    """Bytes the run may use on ``device`` (0: unknown)."""
    if device.startswith("cuda"):
        return int(torch.cuda.get_device_properties(torch.device(device)).total_memory)
    import resource

    limits = [resource.getrlimit(resource.RLIMIT_AS)[0]]
    try:
        limits.append(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        pass
    known = [x for x in limits if x > 0]  # RLIM_INFINITY is -1
    return min(known) if known else 0


def _hardware(args: argparse.Namespace, device: str, dtype: str, load_hardware: Callable[[str], Hardware],
              calibrate_host: Callable[[str], Hardware]) -> Hardware:
    import torch

    name = args.hw
    if name is None and device.startswith("cuda"):
        props = torch.cuda.get_device_name(torch.device(device))
        name = next((key for sub, key in DEVICE_PRESETS if sub in props), None)
        if name is None:
            from layerc.ir.diagnostics import LayercError

            raise LayercError(f"no hardware preset for '{props}': give --hw (a preset or a TOML file)")
    if name in (None, "host"):
        if device != "cpu":
            args.usage_error("--hw host calibrates the CPU; name a preset for a GPU")
        _progress("calibrating the host")
        return calibrate_host(dtype)
    return load_hardware(name)


def _sync(torch: Any, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(torch.device(device))


def _progress(text: str) -> None:
    if sys.stderr.isatty():
        sys.stderr.write(f"layerc: {text}...\n")


def _measure(trace: Trace, graph: Graph, layer: int, phase: str,
             device: str) -> tuple[dict[str, list[int]], list[tuple[int, int]], list[tuple[str, int, int]]]:
    """Per op label, its duration in each run; the runs' layer ranges; each op range.

    On CPU an op's duration is its range's. On a GPU, what the cost model predicts is kernel
    time, so an op's is the summed duration of the kernels launched inside its host range (a
    range's GPU projection from first to last kernel would hold the idle gaps of a launch-bound
    eager run), and a run's layer range is the GPU span of the kernels it launched. A profile
    without kernels keeps the host ranges."""
    import numpy as np

    from layerc.ir.graph import op_label
    from layerc.ir.trace import ANNOTATION_USER

    ann = trace.annotations
    names = trace.strings.lookup(ann.name)
    host = np.nonzero(ann.kind == ANNOTATION_USER)[0]
    host = host[np.argsort(ann.start[host], kind="stable")]
    k = trace.kernels
    launched_at = trace.kernel_host()[0]
    on_gpu = device.startswith("cuda") and bool((launched_at >= 0).any())
    if on_gpu:
        order = np.argsort(launched_at, kind="stable")
        order = order[launched_at[order] >= 0]
        at = launched_at[order]
        busy = np.r_[0, np.cumsum(k.end[order] - k.start[order])]
    labels = {op_label(n) for n in graph.ops}
    prefix = f"layer {layer} ({phase}) run "
    measured: dict[str, list[int]] = {}
    layer_ranges: list[tuple[int, int]] = []
    op_ranges: list[tuple[str, int, int]] = []
    for i in host.tolist():
        name = names[i]
        start, end = int(ann.start[i]), int(ann.end[i])
        if not (name.startswith(prefix) or name in labels):
            continue
        if on_gpu:  # the kernels this range launched: a slice of the launch-ordered kernels
            lo, hi = np.searchsorted(at, start, "left"), np.searchsorted(at, end, "right")
            if hi <= lo:
                continue
            inside = order[lo:hi]
            span = (int(k.start[inside].min()), int(k.end[inside].max()))
            took = int(busy[hi] - busy[lo])
        else:
            span, took = (start, end), end - start
        if name.startswith(prefix):
            layer_ranges.append(span)
        else:
            measured.setdefault(name, []).append(took)
            op_ranges.append((name, *span))
    return measured, layer_ranges, op_ranges
