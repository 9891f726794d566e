"""``layerc trace TRACE``: kernels by type, stage and decoder layer (seed 001, automated).

Classifies every kernel from the kernel tables, finds the layers (ground truth, boundary norms
or the repeating motif, whichever the trace supports), types and stages them, and prints the
tables an engineer reads first; ``--json``, ``--csv`` and ``--perfetto`` write the same facts.
"""

from __future__ import annotations

import argparse
import sys


from typing import TYPE_CHECKING, Any

from layerc.ir.diagnostics import warn
from layerc.tools.args import input_path, output_directory, output_path, pipeline_options, positive_int, printed_pipeline, strategy_option

if TYPE_CHECKING:
    from layerc.passes.trace_passes import TraceModule


def _layer_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes layer numbers such as 0,1,2, not {text!r}") from None


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", type=input_path, help="PyTorch profiler trace (.json, .json.gz) or nsys export (.sqlite, .nsys-rep); "
                                                 "a directory, or several traces: every rank of a job, compared")
    p.add_argument("more", type=input_path, nargs="*", metavar="TRACE", help="the other ranks' traces")
    p.add_argument("--jobs", type=positive_int, metavar="N", help="ranks analysed at once, each in its own process (default: the CPUs)")
    p.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="analyse the ranks as tasks on a Ray cluster (ADDRESS, or RAY_ADDRESS; else a local Ray "
                        "started for the run); the traces' paths must be readable by its workers; needs layerc[cluster]")
    p.set_defaults(usage_error=p.error)
    p.add_argument("-v", "--verbose", action="store_true", help="also the top kernels and the orphan kernels")
    strategy_option(p)
    p.add_argument("--split-half-layers", action="store_true", help="keep each layer's attention and FFN halves apart (every strategy)")
    p.add_argument("--debug-layers", type=_layer_list, metavar="N,N,...", help="list the kernels of these layers (first pass of each stage)")
    p.add_argument("--show-layer-terminal", action="store_true", help="one row per layer instead of one per layer kind")
    p.add_argument("--stage", choices=("prefill", "decode", "all"), default="all", help="only kernels of this stage")
    p.add_argument("--top-n", type=positive_int, default=15, metavar="N", help="rows of the top-kernels table (default 15)")
    p.add_argument("--num-layers", type=positive_int, metavar="N", help="the model's num_hidden_layers, to check each pass against")
    p.add_argument("--model-config", type=input_path, metavar="config.json",
                   help="the model's Hugging Face config.json: its num_hidden_layers (a VLM's text_config's) is the --num-layers check")
    p.add_argument("--kernel-tables", type=input_path, metavar="DIR", help="extra kernel-table TOML files, tried before the built-in ones")
    pipeline_options(p)
    p.add_argument("--json", type=output_path, metavar="FILE", help="write the totals and the layers as JSON")
    p.add_argument("--csv", type=output_path, metavar="FILE", help="write one row per layer as CSV")
    p.add_argument("--perfetto", type=output_path, metavar="FILE", help="write a Perfetto timeline (.pftrace, or .json) with passes and layers as spans")
    p.add_argument("--png", type=output_path, metavar="FILE",
                   help="several traces: each layer's compute per rank against the median, stragglers boxed, and each "
                        "rank's communication and waiting (a picture)")
    p.add_argument("--roofline", type=output_path, metavar="FILE",
                   help="draw the roofline (.png, or .svg): each kind of kernel at its FLOPs per byte and TFLOP/s, under the "
                        "GPU's peaks (needs shapes: Kineto's record_shapes)")
    p.add_argument("--parquet", type=output_directory, metavar="DIR",
                   help="write kernels, layers, stages, types and passes as Parquet tables under DIR, partitioned by rank "
                        "(DIR/kernels/rank=0/part-0.parquet; DuckDB, pandas and Spark read each folder as one table)")


def trace_passes(args: argparse.Namespace) -> list:
    """The trace-pass pipeline the flags ask for."""
    from layerc.passes.trace_passes import trace_pipeline

    return trace_pipeline(args.kernel_tables, args.strategy, merge=not args.split_half_layers)


def analyze(args: argparse.Namespace, quiet: bool = False) -> TraceModule:
    """The trace read and run through ``trace_passes``: a module the trace emitters take."""
    from layerc.backends.trace_ir import print_trace
    from layerc.grammar import inputs
    from layerc.grammar.traces import RELEASE_FROM, read_trace
    from layerc.passes.base import Context
    from layerc.passes.pipeline import PassManager, timing_report
    from layerc.passes.trace_passes import TraceModule

    manager = PassManager(trace_passes(args), print_ir_after_all=getattr(args, "print_ir_after_all", False), print_ir=print_trace,
                          ir_stream=sys.stderr)
    trace = read_trace(args.trace, geometry=getattr(args, "geometry", True))  # (launch geometry: for outputs that show it)
    if len(trace.kernels) >= RELEASE_FROM:
        # the process's allocator policy, which a command sets (a library leaves it to its caller)
        inputs.reuse_freed()
    for w in trace.warnings if not quiet else ():  # (quiet: a worker's caller says them)
        warn(args, w, trace.source)
    module = TraceModule(trace)
    manager.run(Context(), module)
    if args.timing:
        sys.stderr.write(timing_report(manager.timings))
    return module


def perfetto_format(path: str | None, fmt: str | None = None) -> str:
    """The timeline emitter for ``path``: Chrome JSON for ``.json``/``.json.gz``, else Perfetto
    protobuf (``fmt``, pftrace or json, decides where given)."""
    json_out = fmt == "json" if fmt else bool(path) and str(path).endswith((".json", ".json.gz"))
    return "chrome-json" if json_out else "pftrace"


def config_layers(path: str) -> int:
    """``num_hidden_layers`` of a Hugging Face config (a vision-language model's language model
    keeps it in ``text_config``), a located error where it is missing or not a count."""
    from layerc.grammar.config_files import read_json_config, shown

    cfg = read_json_config(path)
    for table in (cfg.doc, cfg.doc.get("text_config"), cfg.doc.get("llm_config")):
        if isinstance(table, dict) and "num_hidden_layers" in table:
            n = table["num_hidden_layers"]
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise cfg.error(f"num_hidden_layers must be a whole number of 1 or more, not {shown(n)}", "num_hidden_layers")
            return n
    raise cfg.error("the config has no num_hidden_layers (at its top or in text_config) to check the layers against")


#: the files a directory of traces holds (PyTorch and vLLM write one per rank; nsys one per process)
TRACE_FILES = (".json", ".json.gz", ".sqlite", ".nsys-rep")


def trace_files(directory: str) -> list[str]:
    """A directory's trace files (``TRACE_FILES``), sorted."""
    import os

    return sorted(os.path.join(directory, f) for f in os.listdir(directory) if f.endswith(TRACE_FILES)
                  and os.path.isfile(os.path.join(directory, f)))


def traces_of(args: argparse.Namespace) -> list[str]:
    """The traces the command line names: files as given, a directory's trace files (sorted)."""
    import os

    from layerc.ir.diagnostics import LayercError

    found: list[str] = []
    for path in (args.trace, *args.more):
        if os.path.isdir(path):
            inside = trace_files(path)
            if not inside:
                raise LayercError(f"no trace in {path} (files ending in {', '.join(TRACE_FILES)})", path)
            found += inside
        else:
            found.append(path)
    return found


def _rank_job(path: str, strategy: str, stage: str, kernels: bool = False,
              blocks: bool = False) -> tuple[int | None, dict, list[str], Any]:
    """One rank, in a worker process: its trace analysed, its tables (Arrow) and warnings back;
    the kernels' table only where it is written (``kernels``): it is most of what would travel;
    with ``blocks``, also its layers' kernels as ``layerc diff`` aligns them (a ``Run``)."""
    from layerc.passes.ranks import module_rank, rank_tables

    module = analyze(argparse.Namespace(trace=path, kernel_tables=None, strategy=strategy, split_half_layers=False,
                                        timing=False, stage=stage, geometry=kernels), quiet=True)
    said = module.layers.warnings if module.layers else []
    tables = rank_tables(module, module_rank(module) or 0, stage)
    if not kernels:
        del tables["kernels"]
    run = None
    if blocks:
        from layerc.passes.trace_diff import run_of

        run = run_of(module)
    return module_rank(module), tables, [*module.trace.warnings, *said], run


def analyse_ranks(args: argparse.Namespace, paths: list[str], kernels: bool = False,
                  blocks: bool = False) -> list[tuple[int, str, dict, Any]]:
    """Every rank's ``_rank_job``, in parallel processes (``--jobs``) or Ray tasks (``--ray``):
    (rank, path, tables, run) in rank order. The rank is the one each trace names
    (``distributedInfo``), else the order of the files (a warning says so)."""
    import os
    from concurrent.futures import ProcessPoolExecutor

    jobs = min(getattr(args, "jobs", None) or os.cpu_count() or 1, len(paths))
    if getattr(args, "ray", None) is not None:
        results = _on_ray(args.ray, paths, args.strategy, args.stage, kernels, blocks)
    elif jobs > 1:
        with ProcessPoolExecutor(jobs) as pool:
            n = len(paths)
            results = list(pool.map(_rank_job, paths, [args.strategy] * n, [args.stage] * n, [kernels] * n, [blocks] * n))
    else:
        results = [_rank_job(p, args.strategy, args.stage, kernels, blocks) for p in paths]
    said = [r[0] for r in results]
    if all(r is not None for r in said) and len(set(said)) == len(said):
        ranks = [int(r) for r in said if r is not None]
    else:
        ranks = list(range(len(paths)))
        warn(args, "the traces do not each name a rank of their own (distributedInfo): ranks are numbered by the "
                   "order of the files", paths[0])
    for path, (_, _, warnings, _) in zip(paths, results):
        for w in warnings:
            warn(args, w, path)
    ordered = sorted(zip(ranks, paths, results), key=lambda x: x[0])
    return [(rank, path, _relabelled(result[1], rank), result[3]) for rank, path, result in ordered]


def run_ranks(args: argparse.Namespace, paths: list[str]) -> int:
    """Every rank's trace analysed in parallel (``analyse_ranks``), then compared."""
    from layerc.backends.ranks_report import json_text, show_ranks, write_parquet_ranks
    from layerc.passes.ranks import compare_ranks

    tables = [(rank, path, t) for rank, path, t, _ in analyse_ranks(args, paths, kernels=bool(args.parquet))]
    comparison = compare_ranks(tables)
    if args.json:
        from layerc.backends.outputs import write_atomic

        write_atomic(args.json, json_text(comparison))
    if args.parquet:
        write_parquet_ranks(tables, args.parquet)
    if args.png:
        from layerc.backends.ranks_report import write_png

        write_png(comparison, args.png)
    show_ranks(comparison)
    return 0


def _on_ray(address: str, paths: list[str], strategy: str, stage: str, kernels: bool, blocks: bool = False) -> list:
    """Each rank's ``_rank_job`` as a Ray task (one CPU each), on the cluster at ``address`` (or
    RAY_ADDRESS's, or a local one started here and stopped after); only the Arrow tables and the
    warnings come back, in the order of ``paths``."""
    import logging
    import os

    from layerc.ir.diagnostics import LayercError

    try:
        import ray
    except ImportError:
        raise LayercError("--ray needs Ray: pip install 'layerc[cluster]'") from None
    started = not ray.is_initialized()
    if started:
        try:
            ray.init(address=address or None, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR,
                     configure_logging=False)
        except (ConnectionError, ValueError, RuntimeError) as e:
            raise LayercError(f"--ray {address or '(local)'}: {e}") from None
    try:
        task = ray.remote(num_cpus=1)(_rank_job)
        return ray.get([task.remote(os.path.abspath(p), strategy, stage, kernels, blocks) for p in paths])
    finally:
        if started:
            ray.shutdown()


def _relabelled(tables: dict, rank: int) -> dict:
    """A rank's tables with its rank column set to ``rank`` (numbered by file order, where needed)."""
    import pyarrow as pa

    out = {}
    for name, t in tables.items():
        i = t.schema.get_field_index("rank")
        out[name] = t.set_column(i, "rank", pa.array([rank] * t.num_rows, pa.int32())) if i >= 0 else t
    return out


_SINGLE = ("perfetto", "csv", "roofline", "debug_layers", "show_layer_terminal", "print_ir_after_all", "model_config", "num_layers",
           "kernel_tables", "split_half_layers", "timing")


def run(args: argparse.Namespace) -> int:
    from layerc.backends.trace_report import Analysis, mismatched_passes, show

    if printed_pipeline(args, trace_passes(args)):
        return 0
    paths = traces_of(args)
    if len(paths) > 1:
        given = [f"--{name.replace('_', '-')}" for name in _SINGLE if getattr(args, name, None)]
        if given:
            args.usage_error(f"{', '.join(given)}: for one trace, not {len(paths)} (the ranks take --json, --parquet, "
                             "--strategy, --stage, --jobs and --ray)")
        return run_ranks(args, paths)
    given = [flag for flag, value in (("--png", args.png), ("--ray", args.ray)) if value is not None]
    if given:
        args.usage_error(f"{', '.join(given)}: for several traces (every rank of a job), not one")
    args.trace = paths[0]
    if getattr(args, "model_config", None):
        from_config = config_layers(args.model_config)
        if args.num_layers and args.num_layers != from_config:
            warn(args, f"--num-layers {args.num_layers} but {args.model_config} says {from_config}; "
                       "checking against --num-layers", args.trace)
        args.num_layers = args.num_layers or from_config
    args.geometry = bool(args.perfetto or args.parquet)  # the outputs that show kernels' launch geometry
    module = analyze(args)
    a = Analysis.of(module, args.stage)
    for w in a.layers.warnings:
        warn(args, w, args.trace)
    if args.num_layers and (off := mismatched_passes(a, args.num_layers)):
        counts = ", ".join(f"pass {q}: {a.layers.layers_per_pass[q]}" for q in off[:6]) + (" ..." if len(off) > 6 else "")
        warn(args, f"--num-layers {args.num_layers}, but {len(off)} complete pass(es) have another count ({counts}); "
             "the layers found are reported as they are", args.trace)
    for path, fmt in ((args.json, "json"), (args.csv, "csv"), (args.perfetto, perfetto_format(args.perfetto)),
                      (args.parquet, "parquet"), (args.roofline, "roofline-png")):
        if path:
            from layerc.backends.registry import emitter

            options = {"num_layers": args.num_layers} if fmt == "json" else {}
            emitter("trace", fmt).write(module, path, stage=args.stage, **options)
    show(a, args)
    return 0


