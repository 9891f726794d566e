"""``layerc gen-kernels``: the command line of ``layerc.backends.synth.kernels`` (``layerc gen-kernels DUMP -o trace.json.gz``: a CUDA-graph decode replay of a dump's graph,)."""

from __future__ import annotations

import argparse
import sys

from layerc.tools.args import fraction, input_path, output_path, positive_int


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("dump", type=input_path, help="dump file or directory (e.g. from `layerc gen-dump`)")
    p.add_argument("-o", "--output", type=output_path, required=True, metavar="FILE", help="the trace to write (.json or .json.gz)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--replays", type=positive_int, default=1, metavar="N", help="decode replays to write (default 1)")
    p.add_argument("--noise", type=fraction, default=0.06, metavar="P", help="chance of a fill/copy/unknown kernel after each kernel (default 0.06)")


def run(args: argparse.Namespace) -> int:
    from layerc.backends.synth.kernels import generate

    truth = generate(args.dump, args.output, seed=args.seed, replays=args.replays, noise=args.noise)
    sys.stdout.write(f"{args.output}\n" + (f"{truth['truth']}\n" if "truth" in truth else ""))
    return 0
