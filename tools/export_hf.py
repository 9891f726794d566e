"""``layerc export-hf``: the command line of ``layerc.backends.synth.hf_export`` (Export a tiny random-weight Hugging Face causal LM to an AutoDeploy-style graph dump)."""

from __future__ import annotations

import argparse

from layerc.backends.synth.hf_export import ARCHES, DTYPES, EXPERTS_IMPLEMENTATIONS, _require_torch, export, model_type
from layerc.tools.args import output_directory


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--arch", required=True, type=model_type, metavar="MODEL_TYPE",
                   help=f"model architecture: any causal-LM model_type of transformers; tested: {', '.join(ARCHES)}")
    p.add_argument("--layers", type=int, default=2, metavar="N", help="number of decoder layers (default 2)")
    p.add_argument(
        "--experts",
        choices=EXPERTS_IMPLEMENTATIONS,
        default=None,
        help="MoE experts implementation (default: transformers' default, grouped_mm)",
    )
    p.add_argument("--dtype", choices=DTYPES, default="float32", help="parameter dtype (default float32)")
    p.add_argument("outdir", type=output_directory, help="directory to write the dump, fx_graph.txt and layers.json into")


def run(args: argparse.Namespace) -> int:
    _require_torch()
    result = export(
        args.arch,
        args.layers,
        args.outdir,
        experts=getattr(args, "experts", None),
        dtype=getattr(args, "dtype", "float32"),
    )
    for key in ("dump", "fx_graph", "layers"):
        print(result[key])
    return 0
