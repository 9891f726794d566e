"""``layerc optrace SOURCE --entry CLASS``: the op execution tree of a model from its source,
each op's kernels with their call chains, and the cross-validation of seed 003 (automated).

SOURCE is a package directory, one ``.py`` file inside its package, or a wheel (read as a zip,
not installed). ``--dynamic --arch llama`` builds the tree from the installed transformers
``modeling_<arch>.py`` instead and checks it against a profiled CPU run of a tiny model.
The pipeline is ``trace-ops,cross-validate-kernels`` (``,profile-ops`` with ``--dynamic``);
every output is computed before any is written, and each is written atomically.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from layerc.tools.args import input_path, output_path, pipeline_options, printed_pipeline


def configure_parser(p: argparse.ArgumentParser) -> None:
    from layerc.passes.pyconst import PHASES, PLATFORMS
    from layerc.backends.synth.hf_export import ARCHES

    p.add_argument("source", type=input_path, nargs="?", metavar="PACKAGE_OR_FILE",
                   help="model source: a package directory, a .py file in its package, or a wheel")
    p.add_argument("--entry", metavar="CLASS", help="the model class whose forward is traced "
                   "(CLASS, or package.module:CLASS when the package has several)")
    p.add_argument("-o", "--output", type=output_path, metavar="FILE", help="write the op traces markdown here (default: stdout)")
    p.add_argument("--json", type=output_path, nargs="?", const="", metavar="FILE",
                   help="also write everything as JSON: to FILE, or beside -o with a .json suffix (stdout without -o)")
    p.add_argument("--kernel-traces", type=output_path, metavar="FILE", help="also write the kernel traces markdown (each kernel's call chains)")
    p.add_argument("--scope", metavar="PREFIX,...", help="module prefixes that are model code, expanded into sub-ops "
                   "(default: the entry module's package)")
    p.add_argument("--link-prefix", metavar="PREFIX", help="links are PREFIX + the file's path in the package "
                   "(default: the file relative to the report; inside a wheel, the path in the wheel)")
    p.add_argument("--title", help="report title (default: the entry class)")
    p.add_argument("--dynamic", action="store_true", help="check the tree against a profiled CPU run of a tiny HF model")
    p.add_argument("--arch", choices=ARCHES, metavar="ARCH", help="with --dynamic: the model type (llama, qwen3_moe, deepseek_v3, ...)")
    p.add_argument("--layers", type=int, default=2, metavar="N", help="with --dynamic: decoder layers of the tiny model (default 2)")
    p.add_argument("--min-agreement", type=float, metavar="PCT", help="with --dynamic: exit 1 when fewer aten ops agree")
    p.add_argument("--config", action="append", metavar="FILE|KEY=VALUE",
                   help="the model's configuration: an HF config.json, or key=value (JSON values: true, null, 1536); "
                   "repeatable. Branches on known keys are taken or pruned; without, every branch is kept and marked "
                   "conditional")
    p.add_argument("--attention-backend", metavar="NAME", help="the attention backend (a registry key: flashinfer, fa3, "
                   "triton, aiter; HF's sdpa, eager, flash_attention_2): the backends it does not select are pruned")
    p.add_argument("--quant", metavar="NAME", help="the quantization method (a registry key: fp8, awq, modelopt_fp4...)")
    p.add_argument("--platform", choices=PLATFORMS, help="the platform: platform checks are decided, and kernel "
                   "libraries of other platforms pruned")
    p.add_argument("--phase", choices=PHASES, help="the forward phase: forward-mode checks (is_decode, is_extend) are decided")
    p.add_argument("--werror", action="store_true", help="calls that cannot be resolved are errors (exit 1, nothing written)")
    pipeline_options(p)
    p.set_defaults(usage_error=p.error)


def _check_usage(args: argparse.Namespace) -> None:
    error = args.usage_error
    if args.dynamic:
        if args.source or args.entry:
            error("--dynamic builds the tree from the installed transformers source: give --arch, not SOURCE or --entry")
        if not args.arch:
            error("--dynamic needs --arch")
        if args.layers < 1:
            error("--layers takes a whole number of 1 or more")
    else:
        if not args.source:
            error("the following arguments are required: PACKAGE_OR_FILE (or --dynamic --arch ARCH)")
        if not args.entry:
            error("the following arguments are required: --entry")
        for flag in ("arch", "min_agreement"):
            if getattr(args, flag) is not None:
                error(f"--{flag.replace('_', '-')} goes with --dynamic")


def knowns(args: argparse.Namespace):
    """The configuration the tree is made under, from ``--config`` (files and key=value pairs,
    later ones win) and the named choices."""
    import os
    import re

    from layerc.grammar.config_files import read_json_config
    from layerc.passes.pyconst import Knowns, parse_config_value

    config: dict = {}
    for item in args.config or []:
        key, eq, value = item.partition("=")
        if eq and not os.path.exists(item):
            if not re.fullmatch(r"\w+(?:\.\w+)*", key.strip()):
                args.usage_error(f"--config {item!r}: give a config.json or key=value with a key of letters, digits, _ "
                                 "and dots (text_config.hidden_act)")
            *parents, last = key.strip().split(".")  # ``text_config.hidden_act=silu``: a nested key
            here = config
            for part in parents:
                if not isinstance(here.get(part), dict):
                    here[part] = {}
                here = here[part]
            here[last] = parse_config_value(value.strip())
            continue
        cf = read_json_config(item)
        if not isinstance(cf.doc, dict):
            raise cf.error("a model config holds a JSON object of keys and values")
        config.update(cf.doc)
    return Knowns(config, args.platform, args.phase, args.attention_backend, args.quant)


def _progress(message: str) -> None:
    if sys.stderr.isatty():
        sys.stderr.write(f"layerc: {message}\n")
        sys.stderr.flush()


def run(args: argparse.Namespace) -> int:
    from layerc.backends import optrace as report
    from layerc.backends.outputs import is_stream, write_atomic
    from layerc.grammar.pysource import SourceSet
    from layerc.ir.diagnostics import LayercError
    from layerc.passes.base import Context
    from layerc.passes.optrace_passes import CrossValidateKernels, OpTraceModule, TraceOps
    from layerc.passes.pipeline import PassManager, timing_report

    _check_usage(args)
    ctx = Context()
    passes = [TraceOps(), CrossValidateKernels()]
    if args.dynamic:
        from layerc.passes.optrace_dynamic import ProfileOps, modeling_file

        passes.append(ProfileOps(arch=args.arch, layers=args.layers))
    if printed_pipeline(args, passes):
        return 0
    if args.dynamic:
        _progress(f"building a tiny {args.arch} model")
        model, config = build_profiled_model(args.arch, args.layers)
        path, entry = modeling_file(model)
        ctx.inputs["model"] = (model, config)
        sources = SourceSet(path)
    else:
        sources, entry = SourceSet(args.source), args.entry
    scope = tuple(s.strip() for s in args.scope.split(",") if s.strip()) if args.scope else ()
    module = OpTraceModule(sources, entry, scope, knowns=knowns(args))

    from layerc.backends.registry import emitter

    manager = PassManager(passes, print_ir_after_all=args.print_ir_after_all, print_ir=emitter("optree"), ir_stream=sys.stderr)
    _progress(f"tracing {entry} in {sources.label}")
    manager.run(ctx, module)
    if args.timing:
        sys.stderr.write(timing_report(manager.timings))
    for d in ctx.diagnostics:
        sys.stderr.write(d.format() + "\n")
    if args.werror and module.unresolved:
        raise LayercError(f"{len(module.unresolved)} call(s) cannot be resolved (--werror); nothing written", sources.label)

    tree, v = module.tree, module.validation
    if tree is None or v is None:  # trace-ops and cross-validate-kernels always leave both
        raise LayercError("the op tree was not built", sources.label)
    # links are relative to where a report lands; from a stream (stdout, a FIFO) they are as from here
    out_dir = str(Path(args.output).resolve().parent) if args.output and not is_stream(args.output) else None
    link = report.linker(sources, out_dir, args.link_prefix)
    title = args.title or tree.entry.rsplit(".", 1)[-1]
    outputs: list[tuple[str | None, str | bytes]] = []
    if args.kernel_traces:
        k_dir = None if is_stream(args.kernel_traces) else str(Path(args.kernel_traces).resolve().parent)
        outputs.append((args.kernel_traces, report.kernel_traces_markdown(
            tree, report.linker(sources, k_dir, args.link_prefix), title)))
    markdown = report.op_traces_markdown(tree, v, link, title, args.kernel_traces, module.dynamic)
    json_path: str | None = args.json
    if json_path == "" and args.output:
        json_path = str(Path(args.output).with_suffix(".json"))
    if json_path is not None:
        from layerc.backends.json_encoding import to_json

        # compact: a DeepSeek tree has ~15,000 kernel chains, and indenting their index lists triples the file
        data = to_json(report.report_json(tree, v, module.dynamic)) + b"\n"
        outputs.append((json_path or None, data))
    if args.output or json_path is None:
        outputs.insert(0, (args.output, markdown))
    for target, body in outputs:
        if target:
            write_atomic(target, body)
        elif isinstance(body, bytes):
            sys.stdout.buffer.write(body)
        else:
            sys.stdout.write(body)
    sys.stderr.write(f"layerc: {title}: {sum(1 for n, _ in tree.nodes() if n.kind == 'op')} op call sites, "
                     f"{len(v.kernels)} kernels, {v.issues} cross-validation issues, {len(module.unresolved)} unresolved calls"
                     + (f", {module.pruned} branches pruned by the configuration" if tree.configuration else "")
                     + (f"; dynamic agreement {module.dynamic.percent:.1f}% of {module.dynamic.total} aten ops"
                        if module.dynamic is not None else "") + "\n")
    if module.dynamic is not None and args.min_agreement is not None and module.dynamic.percent < args.min_agreement:
        raise LayercError(f"dynamic agreement {module.dynamic.percent:.1f}% is below --min-agreement {args.min_agreement}")
    return 0


def build_profiled_model(arch: str, layers: int):
    """A tiny random model of ``arch`` (see ``tools.export_hf``) with its default attention
    implementation (what users run), and experts in their eager implementation where the model
    offers one, so the Python that runs is the source the tree was built from."""
    from importlib.util import find_spec

    from layerc.ir.diagnostics import LayercError

    if find_spec("torch") is None or find_spec("transformers") is None:  # pragma: no cover - environment
        raise LayercError("optrace --dynamic needs the [torch] extra: pip install 'layerc[torch]'")
    from layerc.backends.synth.hf_export import build_model

    model = build_model(arch, layers, attention=None)
    experts = "default"
    try:
        if model._can_set_experts_implementation():
            model.set_experts_implementation("eager")
            experts = "eager"
    except (AttributeError, ValueError):
        pass
    attention = getattr(model.config, "_attn_implementation", None) or "default"
    config = {"arch": arch, "layers": layers, "attn_implementation": attention, "experts_implementation": experts,
              "dtype": "float32", "device": "cpu"}
    return model, config
