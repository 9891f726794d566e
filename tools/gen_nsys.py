"""``layerc gen-nsys``: the command line of ``layerc.backends.synth.nsys`` (Generate realistic Nsight Systems SQLite exports of LLM inference, with their ground truth)."""

from __future__ import annotations

import argparse

from layerc.backends.synth.nsys import MODELS, MODES, SCHEMAS, generate
from layerc.ir.diagnostics import LayercError
from layerc.tools.args import output_path


# =================================================================================================
# CLI
# =================================================================================================
def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("out", type=output_path, metavar="OUT.sqlite", help="file to write (its ground truth goes beside, as <stem>_truth.json)")
    p.add_argument("--schema", choices=SCHEMAS, default="3.25", help="export schema version (default 3.25)")
    p.add_argument("--mode", choices=MODES, default="node", help="--cuda-graph-trace mode (default node)")
    p.add_argument("--model", choices=MODELS, default="deepseek_v3", help="workload (default deepseek_v3)")
    p.add_argument("--layers", type=int, default=4, metavar="N", help="decoder layers (default 4)")
    p.add_argument("--replays", type=int, default=3, metavar="R", help="decode CUDA-graph replays per device (default 3)")
    p.add_argument("--eager-steps", type=int, default=1, metavar="E", help="eager prefill steps per device (default 1)")
    p.add_argument("--kernels", type=int, default=None, metavar="N",
                   help="scale layers and replays to about N executed kernels in total")
    p.add_argument("--devices", type=int, default=1, metavar="D", help="GPUs, one process each (default 1)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="random seed (default 0)")


def run(args: argparse.Namespace) -> int:
    try:
        truth = generate(args.out, schema=args.schema, mode=args.mode, model=args.model, layers=args.layers,
                         replays=args.replays, eager_steps=args.eager_steps, kernels=args.kernels, devices=args.devices,
                         seed=args.seed)
    except ValueError as e:
        raise LayercError(str(e)) from None
    print(f"{truth['path']}: schema {truth['schema']}, {truth['mode']} mode, {truth['kernel_rows']} kernel rows "
          f"({truth['kernels_executed']} executed), {truth['graph_launches']} graph launches, "
          f"{truth['bytes']} bytes, {truth['seconds']} s")
    return 0
