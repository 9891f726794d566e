"""``layerc gen-ws-mem``: the command line of ``layerc.backends.synth.ws_mem`` (Generate Triton warp-specialization memory-planner dumps, as the planner writes them)."""

from __future__ import annotations

import argparse

from layerc.backends.outputs import write_atomic
from layerc.backends.synth.ws_mem import build_kernels, debug_log, write_dump_dir
from layerc.tools.args import output_path


# -- the command ---------------------------------------------------------------------------------------------
def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("output", type=output_path, help="a directory (TRITON_DUMP_WS_GRAPHS files) or, with --log, a log file")
    p.add_argument("--log", action="store_true", help="write a debug log (stderr of TRITON_LLVM_DEBUG_ONLY=nvgpu-ws-memory-planner)")
    p.add_argument("--example", choices=("fa-bwd", "random"), default="fa-bwd", help="the kernel(s) (default fa-bwd)")
    from layerc.tools.args import positive_int

    p.add_argument("--kernels", type=positive_int, default=1, metavar="N", help="kernels compiled by the one process (default 1)")
    p.add_argument("--smem-alloc-algo", type=int, choices=(0, 1), default=0,
                   help="SMEM allocator: 0 dumps the SMEM graph, 1 (Triton's default) does not (default 0)")
    p.add_argument("--no-operation-ids", action="store_true", help="as without LLVM_DEBUG: no operation_id on the ops")
    p.add_argument("--seed", type=int, default=0)


def run(args: argparse.Namespace) -> int:
    import sys

    kernels = build_kernels(args.example, args.kernels, args.smem_alloc_algo, not args.no_operation_ids, args.seed)
    if args.log:
        write_atomic(args.output, debug_log(kernels))
        sys.stdout.write(f"{args.output}: {len(kernels)} kernel(s)\n")
    else:
        paths = write_dump_dir(kernels, args.output)
        sys.stdout.write(f"{args.output}: {len(paths)} files\n")
    return 0

