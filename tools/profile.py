"""``layerc profile``: one decoder layer run for real under torch.profiler, op by op, against the
simulation of the same graph (seed 004's real-time trace, automated and annotated).

The layer is the graph ``layerc simulate`` costs, built from a config (``--preset``, ``--config``,
or ``--arch`` alone: the tiny config ``export-hf`` uses), run with PyTorch on random weights taken
from the transformers decoder layer of that config (no download), after checking that the graph
computes what transformers computes. Each op runs inside ``record_function(label)``; the profile
is read back through the trace IR (``read_trace``), the per-op times (GPU time of the range on
CUDA, its CPU time otherwise; the median over ``--repeat`` runs) are set beside the cost pass's,
and a Perfetto trace gets the layer and op spans with both. On CPU the simulated machine is the
host, calibrated in a second (``--hw`` to name a preset instead); on CUDA, the preset matching
the device name.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

from layerc.tools.args import input_path, output_path, whole_number

#: device-name substrings → hardware presets (first match wins)
DEVICE_PRESETS = (("H200", "h200"), ("H100", "h100"), ("A100", "a100"), ("B200", "b200"), ("MI300X", "mi300x"))
#: The most profiled (or warm-up) runs: torch.profiler holds every event of every run in memory,
#: and medians settle long before this.
MAX_RUNS = 1000


def device(text: str) -> str:
    """``--device``: ``cpu``, ``cuda`` or ``cuda:N``."""
    import re

    if text == "cpu" or re.fullmatch(r"cuda(:[0-9]{1,4})?", text):
        return text
    shown = text if len(text) <= 40 else text[:37] + "..."
    raise argparse.ArgumentTypeError(f"takes cpu, cuda or cuda:N, not {shown!r}")


device.__name__ = "device"


def configure_parser(p: argparse.ArgumentParser) -> None:
    from layerc.grammar.hf_config import MAX_SIZE
    from layerc.grammar.hf_config import MODEL_TYPES as ARCHES  # the ones a decoder layer is built for
    from layerc.tools.simulate import _SIZES, hardware

    cpus = os.cpu_count() or 1
    src = p.add_argument_group("the layer")
    src.add_argument("--arch", choices=ARCHES, metavar="ARCH", help="model_type; alone: export-hf's tiny config of it")
    src.add_argument("--preset", metavar="NAME", help="a model preset (layerc simulate --list-presets)")
    src.add_argument("--config", type=input_path, metavar="FILE", help="a Hugging Face config.json")
    src.add_argument("--layer", type=whole_number(0, MAX_SIZE - 1), metavar="N",
                     help="which layer (default: 0; MoE models: the first MoE layer)")
    step = p.add_argument_group("the step")
    step.add_argument("--phase", choices=("prefill", "decode"), default="prefill",
                      help="prefill --n-tokens tokens (default), or decode one token over a cache of --n-tokens")
    step.add_argument("--n-tokens", type=whole_number(1, MAX_SIZE, _SIZES), default=512, metavar="N",
                      help="prompt length or KV cache length (default 512)")
    step.add_argument("--batch", type=whole_number(1, MAX_SIZE, _SIZES), default=1, metavar="N", help="sequences (default 1)")
    step.add_argument("--attention", choices=("fused", "eager"), default="fused", help="fused (SDPA) or eager attention")
    run = p.add_argument_group("the run")
    run.add_argument("--device", type=device, default="cpu", metavar="cpu|cuda[:N]", help="where to run (default cpu)")
    run.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), help="default: float32 on CPU, bfloat16 on CUDA")
    runs = " (the profiler keeps every run's events)"
    run.add_argument("--repeat", type=whole_number(1, MAX_RUNS, runs), default=5, metavar="N",
                     help=f"profiled runs, 1 to {MAX_RUNS}; per-op times are their median (default 5)")
    run.add_argument("--warmup", type=whole_number(0, MAX_RUNS, runs), default=2, metavar="N",
                     help=f"unprofiled runs first, 0 to {MAX_RUNS} (default 2)")
    run.add_argument("--threads", type=whole_number(1, cpus, " (this machine's CPUs)"), metavar="N",
                     help=f"CPU threads for torch, 1 to {cpus} (default: 1 on cpu: the profiler's per-op overhead with "
                          "several threads swamps small ops; torch's default on cuda)")
    run.add_argument("--hw", type=hardware, metavar="NAME|FILE|host",
                     help="simulated hardware (default: host on CPU, the device's preset on CUDA)")
    run.add_argument("--no-check", action="store_true", help="skip checking the graph's output against transformers")
    out = p.add_argument_group("outputs")
    out.add_argument("-o", "--output", type=output_path, metavar="FILE", help="layer-annotated Perfetto trace (.pftrace, or .json)")
    out.add_argument("--json", type=output_path, metavar="FILE", help="per-op measured and simulated times as JSON")
    out.add_argument("--png", type=output_path, metavar="FILE", help="measured against simulated time per op, as a bar chart")
    out.add_argument("--profile-json", type=output_path, metavar="FILE", help="also keep torch.profiler's own Chrome trace")
    p.set_defaults(usage_error=p.error)


def _spec(args: argparse.Namespace):
    from layerc.grammar.hf_config import MODEL_TYPES, load_config, load_preset, preset_names, spec_from_dict

    if args.preset and args.config:
        args.usage_error("give --preset or --config, not both")
    if args.preset:
        if args.preset.lower() not in preset_names():
            args.usage_error(f"unknown preset '{args.preset}' (presets: {', '.join(preset_names())})")
        spec = load_preset(args.preset)
    elif args.config:
        spec = load_config(args.config)
    elif args.arch:
        if args.arch not in MODEL_TYPES:
            args.usage_error(f"--arch {args.arch} has no decoder-layer graph (supported: {', '.join(MODEL_TYPES)})")
        from layerc.tools.export_hf import tiny_config

        spec = spec_from_dict({**tiny_config(args.arch), "model_type": args.arch, "num_hidden_layers": 4},
                              f"tiny {args.arch}")
    else:
        args.usage_error("give --preset, --config or --arch")
    if args.arch and spec.model_type != args.arch:
        args.usage_error(f"--arch {args.arch} but {spec.name} is a {spec.model_type} model")
    return spec


def run(args: argparse.Namespace) -> int:
    from layerc.backends.torch_run import require_torch

    spec = _spec(args)
    torch = require_torch()
    device = args.device
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            from layerc.ir.diagnostics import LayercError

            raise LayercError(f"--device {device}: this torch has no CUDA device")
        index = int(device.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            from layerc.ir.diagnostics import LayercError

            raise LayercError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    threads = args.threads or (1 if device == "cpu" else None)
    if threads:
        torch.set_num_threads(threads)
    dtype = args.dtype or ("float32" if device == "cpu" else "bfloat16")
    result = profile_layer(spec, args, device, dtype)
    if args.output:
        write_trace(result, args.output)
    if args.png:
        from layerc.backends.sim_png import render_profile_png

        e = result.errors()
        render_profile_png(result.rows(), args.png,
                           f"{spec.name} layer {result.graph.meta['layer']}, {args.phase} of {args.n_tokens} tokens, {dtype} on {device}\n"
                           f"simulated on {result.hardware.name}: median |error| {e.get('median_abs_pct_error', 0):.0f}%")
    if args.json:
        from layerc.backends.json_encoding import to_json
        from layerc.backends.outputs import write_atomic

        write_atomic(args.json, to_json(result.report(), indent=True, numpy=True) + b"\n")
    show(result)
    return 0


class Result:
    """A profiled layer: the graph (costed), the trace, and per op the measured durations (ns)."""

    def __init__(self, spec, graph, hardware, trace, measured, layer_ranges, op_ranges, check, device, dtype, args):
        self.spec, self.graph, self.hardware, self.trace = spec, graph, hardware, trace
        self.measured, self.layer_ranges, self.op_ranges = measured, layer_ranges, op_ranges
        self.check, self.device, self.dtype, self.args = check, device, dtype, args

    def rows(self) -> list[dict]:
        from layerc.backends.sim_trace import op_label

        rows = []
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

    def errors(self) -> dict:
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

    def report(self) -> dict:
        meta = {k: v for k, v in self.graph.meta.items() if isinstance(v, (str, int, float))}
        hw = self.hardware
        return {"layer": meta, "device": self.device, "dtype": self.dtype, "repeat": self.args.repeat,
                "hardware": {"key": hw.key, "name": hw.name, "matrix_tflops": hw.matrix_tflops, "hbm_gbps": hw.hbm_gbps,
                             "vector_tflops": hw.vector_tflops, "launch_overhead_us": hw.launch_overhead_us},
                "check": self.check, "summary": self.errors(), "ops": self.rows()}


def profile_layer(spec, args: argparse.Namespace, device: str, dtype: str) -> Result:
    """Build, check, warm up, profile, read back, cost."""
    import torch

    from layerc.backends.torch_run import (GraphRunner, calibrate_host, layer_inputs, layer_weights, transformers_layer,
                                           transformers_output)
    from layerc.grammar.decoder_layer import LayerShape, build_layer
    from layerc.grammar.traces import read_trace
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
    trace = _read_back(prof, args, read_trace)
    measured, layer_ranges, op_ranges = _measure(trace, graph, layer, args.phase, device)
    return Result(spec, graph, ctx.analyses["hardware"], trace, measured, layer_ranges, op_ranges, check, device, dtype, args)


def check_fits(graph, device: str, torch) -> None:
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


def _device_memory(device: str, torch) -> int:
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


def _hardware(args, device: str, dtype: str, load_hardware, calibrate_host):
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


def _sync(torch, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(torch.device(device))


def _progress(text: str) -> None:
    if sys.stderr.isatty():
        sys.stderr.write(f"layerc: {text}...\n")


def _read_back(prof, args, read_trace):
    """The profile through our trace IR (Kineto JSON written, then read like any trace)."""
    if args.profile_json:
        from layerc.backends.outputs import atomic_path

        with atomic_path(args.profile_json) as tmp:  # staged until the command succeeds: read it there
            prof.export_chrome_trace(str(tmp))
            return read_trace(tmp)
    fd, tmp = tempfile.mkstemp(prefix="layerc-profile-", suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(tmp)
        return read_trace(tmp)
    finally:
        os.unlink(tmp)


def _measure(trace, graph, layer: int, phase: str, device: str):
    """Per op label, its range's duration in each run (GPU time on CUDA when the profile has
    GPU projections of the ranges, CPU time otherwise); the runs' layer ranges; each op range."""
    import numpy as np

    from layerc.backends.sim_trace import op_label
    from layerc.ir.trace import ANNOTATION_GPU, ANNOTATION_USER

    ann = trace.annotations
    names = trace.strings.lookup(ann.name)
    gpu = ann.kind == ANNOTATION_GPU
    use = gpu if device.startswith("cuda") and gpu.any() else ann.kind == ANNOTATION_USER
    labels = {op_label(n) for n in graph.ops}
    prefix = f"layer {layer} ({phase}) run "
    measured: dict[str, list[int]] = {}
    layer_ranges, op_ranges = [], []
    order = np.nonzero(use)[0]
    order = order[np.argsort(ann.start[order], kind="stable")]
    for i in order.tolist():
        name = names[i]
        start, end = int(ann.start[i]), int(ann.end[i])
        if name.startswith(prefix):
            layer_ranges.append((start, end))
        elif name in labels:
            measured.setdefault(name, []).append(end - start)
            op_ranges.append((name, start, end))
    return measured, layer_ranges, op_ranges


# -- outputs ------------------------------------------------------------------------------------
def write_trace(result: Result, path: str) -> None:
    """The profile with layer spans (one per run), the measured op spans with both times, and the
    simulated schedule of each run laid from the run's start, on one device track group."""
    from layerc.backends.perfetto import Span, write_chrome_json, write_pftrace
    from layerc.backends.sim_trace import op_args, op_label

    g, hw = result.graph, result.hardware
    by_label = {op_label(n): n for n in g.ops}
    device = 0
    trace = result.trace
    if not trace.devices:
        trace.devices[device] = f"{hw.name}, profiled"
    if result.device == "cpu":
        trace.device_kinds[device] = "CPU"
    spans = []
    errors = result.errors()
    for r, (start, end) in enumerate(result.layer_ranges):
        spans.append(Span(f"layer {g.meta['layer']} ({g.meta['phase']}) run {r}", start, end, "layer", device,
                          {"model": g.meta["model"], "run": r, "measured (us)": round((end - start) / 1e3, 3),
                           "simulated serial (us)": errors.get("simulated_layer_us", 0.0)}))
    for name, start, end in result.op_ranges:
        n = by_label[name]
        args = {"measured (us)": round((end - start) / 1e3, 3), **op_args(n)}
        args["simulated (us)"] = args.pop("time (us)")
        spans.append(Span(name, start, end, "ops (measured)", device, args))
    for start, _ in result.layer_ranges:
        at = start
        for n in g.ops:
            c = n.meta["cost"]
            if c.is_kernel:
                spans.append(Span(op_label(n), at, at + max(1, round(c.time_ns)), "ops (simulated)", device, op_args(n)))
                at += max(1, round(c.time_ns))
    write = write_chrome_json if path.endswith((".json", ".json.gz")) else write_pftrace
    write(trace, path, spans=spans)


def show(result: Result) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)  # a file or pipe gets whole cells
    g, hw = result.graph, result.hardware
    con.print(f"[bold]{result.spec.name}[/] layer {g.meta['layer']}, {g.meta['phase']} ({g.meta['seq_len']} tokens, "
              f"batch {g.meta['batch']}, attention {g.meta['attention']}, {result.dtype}) on {result.device}; "
              f"simulated on [bold]{hw.name}[/] ({', '.join(f'{k} {v:.3g}' for k, v in hw.matrix_tflops.items())} TFLOP/s, "
              f"{hw.hbm_gbps:.3g} GB/s, {hw.launch_overhead_us:.3g} µs per op)")
    if result.check is not None:
        c = result.check
        mark = "[green]matches[/]" if c["ok"] else "[red]DIFFERS FROM[/]"
        con.print(f"the graph {mark} transformers' layer: max |Δ| {c['max_abs_diff']:.3g} (max |output| {c['max_abs_ref']:.3g})")
    tab = Table(title=f"measured (median of {result.args.repeat}) vs simulated", title_justify="left")
    for col in ("op", "type", "shape", "bound", "measured µs", "simulated µs", "measured/sim"):
        tab.add_column(col, justify="left" if col in ("op", "type", "shape", "bound") else "right")
    for r in result.rows():
        style = "" if r["kernel"] else "dim"
        ratio = f"{r['ratio']:.2f}" if r["ratio"] else "-"
        tab.add_row(r["op"], r["type"], r["shape"], r["bound"], f"{r['measured_us']:,.2f}", f"{r['simulated_us']:,.2f}", ratio,
                    style=style)
    con.print(tab)
    e = result.errors()
    if e:
        con.print(f"{e['ops']} ops: median absolute error {e['median_abs_error_us']:,.2f} µs "
                  f"({e['median_abs_pct_error']:.1f}%); layer {e['measured_layer_us']:,.2f} µs measured "
                  f"(ops {e['measured_ops_us']:,.2f} µs), {e['simulated_layer_us']:,.2f} µs simulated serially")
