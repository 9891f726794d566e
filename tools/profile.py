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
import tempfile

from layerc.tools.args import input_path, output_path, whole_number

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
        from layerc.backends.synth.hf_export import tiny_config

        spec = spec_from_dict({**tiny_config(args.arch), "model_type": args.arch, "num_hidden_layers": 4},
                              f"tiny {args.arch}")
    else:
        args.usage_error("give --preset, --config or --arch")
    if args.arch and spec.model_type != args.arch:
        args.usage_error(f"--arch {args.arch} but {spec.name} is a {spec.model_type} model")
    return spec


def run(args: argparse.Namespace) -> int:
    from layerc.passes.runtime.torch_run import require_torch

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
    from layerc.backends.profile_report import show, write_trace
    from layerc.passes.runtime.profiling import profile_layer

    result = profile_layer(spec, args, device, dtype, lambda prof: read_back(prof, args))
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


def read_back(prof, args: argparse.Namespace):
    """The profile through our trace IR (Kineto JSON written, then read like any trace; kept where
    ``--profile-json`` asks, staged until the command succeeds)."""
    from layerc.grammar.traces import read_trace

    if args.profile_json:
        from layerc.backends.outputs import atomic_path

        with atomic_path(args.profile_json) as tmp:  # staged until the command succeeds: read it there
            prof.export_chrome_trace(str(tmp))
            return read_trace(tmp)
    fd, name = tempfile.mkstemp(prefix="layerc-profile-", suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(name)
        return read_trace(name)
    finally:
        os.unlink(name)
