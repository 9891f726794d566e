"""``layerc simulate``: one decoder layer on N engines, as tables and a Perfetto timeline
(seed 004's simulated trace, automated and corrected).

The layer comes from a Hugging Face config (``--config config.json``), a preset (``--preset
llama-3.2-1b``), or a dump (``--dump DIR --layer N``: the layer sliced from a real graph). The
pipeline is ``cost{hw=...},schedule{engines=...}``; ``--engines auto`` sweeps N.
``--compare-seed TRACE`` puts the seed's simulated trace of the same layer beside ours.

A dump is any graph layerc writes with shapes: ``gen-dump`` (plain, ``--symbolic``,
``--piecewise``), ``export-hf``'s dump, what ``layerc opt`` prints (``--emit ad``). Symbolic
sizes (``s72``, ``s70*s72``) get values before the cost pass (``specialize-shapes``): ``--sym
NAME=N`` for any symbol; the token dims (the leading dims of the activation the first weight
GEMM reads) default to a decode step — the batch dim ``--batch`` (default 1), the tokens per
sequence 1. A size the cost needs whose symbol has no value is an error that names the symbol.
A graph with no shapes at all (torch.fx's own print, ``export-hf``'s ``fx_graph.txt``) is an
error that says so.

Every number is checked where it enters: options at parse time (finite, in range: sizes up to
2**31-1, as kernels take them), config and hardware values at their keys, and the cost pass's
counts against 64-bit limits (2**63 bytes or FLOPs per op, 2**62 ns).
"""

from __future__ import annotations

import argparse
import sys

from layerc.ir.diagnostics import warn
from layerc.tools.args import InputPath, input_path, number, output_path, pipeline_options, printed_pipeline, whole_number

#: Why sizes stop at 2**31-1 (grammar.hf_config.MAX_SIZE), in usage messages.
_SIZES = " (kernels take sizes as 32-bit ints)"


def engines(text: str) -> str:
    """``--engines``: a whole number >= 1 or ``auto`` (a number past the layer's kernel ops is
    clamped to them by the schedule, with a note: they could never all be busy)."""
    from layerc.passes.schedule import parse_engines

    try:
        n = parse_engines(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes a whole number of 1 or more or 'auto', not {_short(text)}") from None
    return "auto" if n is None else str(n)


def hardware(text: str) -> str:
    """``--hw``: a preset name, or a TOML file (an input: no output may overwrite it)."""
    return InputPath(text) if text.endswith(".toml") else text


def symbol_value(text: str) -> str:
    """``--sym NAME=N``: a value for a symbolic size of a dump."""
    from layerc.passes.cost import parse_symbol_values

    try:
        (name, value), = parse_symbol_values([text]).items()
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes NAME=N (a symbol of the dump's sizes and a whole number), "
                                         f"not {_short(text)}") from None
    return f"{name}={value}"


def _short(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:37] + "...")


engines.__name__, hardware.__name__, symbol_value.__name__ = "engines", "hardware", "symbol value"


def configure_parser(p: argparse.ArgumentParser) -> None:
    from layerc.grammar.hf_config import MAX_SIZE
    from layerc.passes.cost import MAX_LAUNCH_US, MAX_TP

    src = p.add_argument_group("the layer (one of)")
    src.add_argument("--config", type=input_path, metavar="FILE", help="a Hugging Face config.json")
    src.add_argument("--preset", metavar="NAME", help="a model preset (--list-presets)")
    src.add_argument("--dump", type=input_path, metavar="PATH",
                     help="a graph dump (file or AD_DUMP_GRAPHS_DIR, with shapes): simulate one of its layers")
    shape = p.add_argument_group("the step")
    shape.add_argument("--phase", choices=("decode", "prefill"),
                       help="decode (default): one new token over a KV cache of --seq-len; prefill: --seq-len new tokens")
    shape.add_argument("--seq-len", type=whole_number(1, MAX_SIZE, _SIZES), default=256, metavar="N",
                       help="KV cache length (decode; with --dump, of its paged attention) or prompt length (prefill); "
                            "default 256")
    shape.add_argument("--batch", type=whole_number(1, MAX_SIZE, _SIZES), metavar="N",
                       help="sequences per step (default 1; with --dump, the value of a symbolic batch dim)")
    shape.add_argument("--layer", type=whole_number(0, MAX_SIZE - 1), metavar="N",
                       help="which layer (default: 0; MoE models: the first MoE layer)")
    shape.add_argument("--sym", type=symbol_value, action="append", default=[], metavar="NAME=N",
                       help="with --dump: the value of a symbolic size (repeatable). Without it, a dump's symbolic "
                            "token dims are a decode step: the batch dim --batch (default 1), the tokens per sequence 1; "
                            "any other symbol an op's cost needs must be given")
    shape.add_argument("--attention", choices=("fused", "eager"),
                       help="fused (default): one flash-attention op; eager: scores, softmax, values as transformers' eager path")
    shape.add_argument("--dtype", choices=("model", "bfloat16", "float16", "float32", "fp8"),
                       help="weights and activations dtype (default: the config's; fp8: fp8 weights and GEMMs, bf16 activations)")
    hw = p.add_argument_group("the machine")
    hw.add_argument("--hw", type=hardware, default="h100", metavar="NAME|FILE",
                    help="hardware preset (a100 h100 h200 b200 mi300x) or a TOML file (default h100)")
    hw.add_argument("--engines", type=engines, default="1", metavar="N|auto",
                    help="engines to schedule on, or auto (default 1); more than the layer's kernel ops are clamped to them")
    hw.add_argument("--launch-overhead", type=number(0, MAX_LAUNCH_US), metavar="US",
                    help=f"per-kernel overhead in µs, 0 to {MAX_LAUNCH_US:,.0f} (default: the preset's)")
    hw.add_argument("--mode", choices=("roofline", "no-overlap"), default="roofline", help="max of compute and memory time, or their sum")
    hw.add_argument("--tp", type=whole_number(1, MAX_TP, " (devices in one tensor-parallel group)"), default=1, metavar="N",
                    help="tensor-parallel size, for collectives in dumps (default 1)")
    out = p.add_argument_group("outputs")
    out.add_argument("-o", "--output", type=output_path, metavar="FILE", help="Perfetto timeline: .pftrace (protobuf) or .json (Chrome)")
    out.add_argument("--json", type=output_path, metavar="FILE", help="per-op costs and the schedule as JSON")
    out.add_argument("--png", type=output_path, metavar="FILE", help="the schedule as a Gantt chart (with the seed's below it, with --compare-seed)")
    out.add_argument("--compare-seed", type=input_path, metavar="TRACE", help="seed 004's simulated Chrome trace: compare op by op")
    pipeline_options(out)
    out.add_argument("--list-presets", action="store_true", help="list model and hardware presets and exit")
    p.set_defaults(usage_error=p.error)


def load_module(args: argparse.Namespace):
    """The layer graph the flags name (a usage error when they name none or several)."""
    from layerc.grammar.decoder_layer import build_layer
    from layerc.grammar.hf_config import load_config, load_preset, preset_names

    given = [k for k in ("config", "preset", "dump") if getattr(args, k, None)]
    if len(given) != 1:
        args.usage_error("give exactly one of --config, --preset, --dump")
    if args.preset and args.preset.lower() not in preset_names():
        args.usage_error(f"unknown preset '{_short(args.preset)}' (presets: {', '.join(preset_names())})")
    step = {"phase": "decode", "batch": 1, "attention": "fused", "dtype": "model"}
    if args.dump:
        given = [f"--{k}" for k in step if k != "batch" and getattr(args, k) is not None]
        if given:
            args.usage_error(f"{', '.join(given)} describe a layer built from a config; a dump's shapes say them")
        return _dump_layer(args)
    if args.sym:
        args.usage_error("--sym gives values to a dump's symbolic sizes; a config's layer has none")
    for k, v in step.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    spec = load_config(args.config) if args.config else load_preset(args.preset)
    return build_layer(spec, args.phase, args.seq_len, args.batch, args.layer, args.attention, args.dtype)


def _dump_layer(args: argparse.Namespace):
    from layerc.grammar.dumps import load
    from layerc.ir.diagnostics import LayercError
    from layerc.passes.pipeline import run_passes
    from layerc.passes.select_graph import SelectGraph
    from layerc.passes.slicing import SliceLayer
    from layerc.passes.tag_weights import TagWeights

    module = load(args.dump)
    layer = args.layer if args.layer is not None else 0
    try:
        run_passes([SelectGraph(), TagWeights(), SliceLayer(layer=layer)], module)
    except LayercError as e:  # about this dump: say which
        e.path = e.path or module.source
        raise
    module.meta.update(model=str(args.dump), phase="dump", layer=layer, seq_len=args.seq_len)
    module.meta["symbols"] = " ".join(dump_symbols(args, module.graphs[0]))
    module.graphs[0].meta.update(module.meta)
    return module


def dump_symbols(args: argparse.Namespace, graph) -> list[str]:
    """``NAME=N`` for the dump's symbolic sizes: ``--sym`` values, then the token dims' defaults —
    a decode step, the batch dim ``--batch`` (default 1) and the tokens per sequence 1 (a flattened
    token dim: their product). A usage error for ``--batch`` when the dump's shapes say the batch."""
    from layerc.ir.types import SymDim
    from layerc.passes.cost import token_dims

    given = dict(item.split("=", 1) for item in args.sym)
    dims = token_dims(graph)
    batch = args.batch or 1
    roles = list(zip(dims[:2], (batch, 1))) if len(dims) >= 2 else [(d, batch) for d in dims]
    if args.batch is not None and not (roles and isinstance(roles[0][0], SymDim)):
        args.usage_error("--batch gives a value to a dump's symbolic batch dim; this dump's shapes say the batch")
    values = dict(given)
    for dim, value in roles:
        if isinstance(dim, SymDim) and dim.symbols == (dim.expr.strip(),) and dim.expr.strip() not in values:
            values[dim.expr.strip()] = str(value)
    return [f"{k}={v}" for k, v in values.items()]


def check_engines(args: argparse.Namespace) -> None:
    """``--engines``' value, checked again for callers that build the namespace themselves."""
    try:
        args.engines = engines(str(args.engines))
    except argparse.ArgumentTypeError as e:
        args.usage_error(f"argument --engines: {e}")


def run(args: argparse.Namespace) -> int:
    from layerc.backends.registry import emitter
    from layerc.passes.base import Context
    from layerc.passes.cost import CostModel, SpecializeShapes, load_hardware
    from layerc.passes.pipeline import PassManager, PassTiming, timing_report
    from layerc.passes.schedule import ListSchedule
    import time

    if args.list_presets:
        from layerc.backends.sim_report import list_presets

        return list_presets()
    check_engines(args)
    hardware = load_hardware(args.hw)  # checked before any work
    seed = None
    if args.compare_seed:
        from layerc.grammar.seed_trace import read_simulated_trace

        seed = read_simulated_trace(args.compare_seed)
    start = time.perf_counter()
    module = load_module(args)
    phases = [PassTiming("Build layer", time.perf_counter() - start)]
    cost = CostModel(hw=args.hw, launch_overhead_us=-1.0 if args.launch_overhead is None else args.launch_overhead,
                     kv_len=args.seq_len if args.dump else 0, tp=args.tp, mode=args.mode)
    passes = [cost, ListSchedule(engines=args.engines)]
    if args.dump:
        passes.insert(0, SpecializeShapes(tuple(module.meta["symbols"].split())))
    if printed_pipeline(args, passes):
        return 0
    pm = PassManager(passes, print_ir_after_all=args.print_ir_after_all, print_ir=emitter("graph", "ad"), ir_stream=sys.stderr)
    ctx = Context()
    pm.run(ctx, module)
    phases.extend(pm.timings)
    for w in ctx.warnings:
        warn(args, w)
    hardware = ctx.analyses.get("hardware", hardware)
    graph = module.graphs[0]
    comparison = None
    if seed is not None:
        from layerc.backends.seed_compare import compare

        comparison = compare(graph, seed)

    start = time.perf_counter()
    if args.output:
        from layerc.backends.sim_trace import write_schedule_trace

        s = graph.meta["schedule"]
        write_schedule_trace(graph, args.output, f"{hardware.name} (simulated, {s.engines} engine{'s' if s.engines > 1 else ''})")
    if args.png:
        from layerc.backends.sim_png import render_schedule_png

        render_schedule_png(graph, args.png, f"layerc on {hardware.name}", seed,
                            comparison.violations if comparison is not None else ())
    from layerc.backends.sim_report import report, show

    if args.json:
        from layerc.backends.json_encoding import to_json
        from layerc.backends.outputs import write_atomic

        write_atomic(args.json, to_json(report(graph, hardware, comparison), indent=True) + b"\n")
    phases.append(PassTiming("Output", time.perf_counter() - start))
    show(graph, hardware, comparison)
    if args.timing:
        sys.stderr.write(timing_report(phases))
    return 0


