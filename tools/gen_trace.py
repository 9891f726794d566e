"""``layerc gen-trace``: the command line of ``layerc.backends.synth.kineto`` (Generate realistic PyTorch-profiler (Kineto) Chrome traces of LLM inference, with ground truth)."""

from __future__ import annotations

import argparse

from layerc.backends.synth.kineto import GENERATIONS, GRAPHS, MODELS, MODULES, STYLES, VENDORS, generate
from layerc.ir.diagnostics import LayercError
from layerc.tools.args import output_path, positive_int


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("out", type=output_path, metavar="OUT.json.gz", help="trace to write (its ground truth goes beside, as <stem>_truth.json)")
    p.add_argument("--model", choices=tuple(MODELS), default="llama", help="model (default llama)")
    p.add_argument("--vendor", choices=VENDORS, default="cuda", help="kernel names of which stack (default cuda)")
    p.add_argument("--tp", type=int, default=1, choices=(1, 2, 4, 8), help="tensor parallel size (default 1)")
    p.add_argument("--prefill", type=int, default=1, metavar="P", help="eager prefill passes (default 1)")
    p.add_argument("--decode", type=int, default=2, metavar="D", help="graph-replayed decode passes (default 2)")
    p.add_argument("--layers", type=int, default=None, metavar="L", help="decoder layers (default: the model's)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="random seed (default 0)")
    p.add_argument("--spans", action="store_true", help="add nn.Module DecoderLayer spans to eager passes (--modules layers)")
    p.add_argument("--modules", choices=MODULES, default=None,
                   help="nn.Module spans around eager ops: none, the decoder layers, or the whole module tree")
    p.add_argument("--fused-allreduce", action="store_true",
                   help="with --tp > 1: each all-reduce fused with the RMSNorm after it (TensorRT-LLM / SGLang all-reduce fusion)")
    p.add_argument("--kineto", choices=GENERATIONS, default="today",
                   help="the Kineto generation whose category names (and time precision) the trace uses (default today)")
    p.add_argument("--workload", choices=("inference", "training", "hpc"), default="inference",
                   help="LLM serving (default), training steps of a small Llama (forward and backward passes), "
                        "or an HPC stencil code with no layers (--layers, --steps, --seed, --modules apply)")
    p.add_argument("--steps", type=positive_int, default=3, metavar="N", help="training steps or HPC time steps (default 3)")
    p.add_argument("--requests", type=positive_int, default=1, metavar="R",
                   help="run the prefill and decode passes R times over, one request after the other (default 1)")
    p.add_argument("--style", choices=STYLES, default="engine",
                   help="a serving engine's fused kernels (default), or a transformers model run eagerly (hf_eager: "
                        "decomposed norms and rope, cuDNN attention, grouped-GEMM experts; llama, qwen3, qwen3_moe on cuda)")
    p.add_argument("--graphs", choices=GRAPHS, default="full",
                   help="CUDA graphs: full-graph decode (default), piecewise (split at attention) for every pass, "
                        "piecewise prefill with full-graph decode, or none")


def run(args: argparse.Namespace) -> int:
    if args.workload != "inference":
        from layerc.backends.synth import kineto_workloads as gen_trace_workloads

        try:
            truth = gen_trace_workloads.generate(args.out, workload=args.workload, layers=args.layers or 4, steps=args.steps,
                                                 seed=args.seed, modules=args.modules or "none")
        except ValueError as e:
            raise LayercError(str(e)) from None
        t = truth["totals"]
        print(f"{truth['path']}: {args.workload}, {args.steps} steps, {t['passes']} passes, {t['layers']} layers, "
              f"{t['kernels']} kernels, {truth['bytes']} bytes, {truth['seconds']} s")
        return 0
    try:
        truth = generate(args.out, model=args.model, vendor=args.vendor, tp=args.tp, prefill=args.prefill,
                         decode=args.decode, layers=args.layers, seed=args.seed, ground_truth_spans=args.spans,
                         modules=args.modules, graphs=args.graphs, fused_allreduce=args.fused_allreduce, kineto=args.kineto,
                         style=args.style, requests=args.requests)
    except ValueError as e:
        raise LayercError(str(e)) from None
    t = truth["totals"]
    print(f"{truth['path']}: {truth['model']} on {truth['vendor']} tp{truth['tp']}, {t['passes']} passes "
          f"({t['prefill_passes']} prefill, {t['decode_passes']} decode), {t['layers_per_pass']} layers each, "
          f"{t['kernels']} kernels, {truth['bytes']} bytes, {truth['seconds']} s")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gen_trace", description=__doc__.splitlines()[0])
    configure_parser(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
