"""``layerc gen-dump``: the command line of ``layerc.backends.synth.dump`` (Generate realistic AutoDeploy graph dumps with known layer ground truth)."""

from __future__ import annotations

import argparse

from layerc.backends.synth.dump import ARCHES, write
from layerc.ir.diagnostics import LayercError
from layerc.tools.args import output_directory


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("arch", choices=ARCHES, help="model architecture")
    p.add_argument("outdir", type=output_directory, help="directory to write the dump and its _truth.json into")
    p.add_argument("--layers", type=int, default=None, metavar="N", help="decoder layers (default: the model's)")
    p.add_argument("--tokens", type=int, default=8, metavar="T", help="batch of decode tokens (default 8)")
    p.add_argument("--symbolic", action="store_true", help="print symbolic token dims (s72, s70*s72)")
    p.add_argument("--seed", type=int, default=None, metavar="S", help="permute the names of generic ops")
    p.add_argument("--shuffle", action="store_true", help="also reorder independent nodes within each layer")
    p.add_argument("--piecewise", action="store_true",
                   help="add the piecewise CUDA graph sections (piecewise.split_gm and its submod_N pieces)")
    p.add_argument("--constants", action="store_true",
                   help="add ops that print every constant class (einsum equations, assertion messages, "
                        "inf/nan, complex, Ellipsis, slices, devices, layouts, symbolic sizes)")
    p.add_argument("--variant", type=int, default=0, metavar="V",
                   help="eager: which structures the graph has (norms, masks, hybrids, MoE tails, side "
                        "states...; 0 is the plainest)")


def run(args: argparse.Namespace) -> int:
    try:
        print(write(args.arch, args.outdir, args.layers, args.tokens, args.symbolic, args.seed, args.shuffle,
                    piecewise=args.piecewise, constants=args.constants, variant=args.variant))
    except ValueError as e:
        raise LayercError(str(e)) from None
    return 0
