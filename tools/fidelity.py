"""``layerc fidelity``: the command line of ``layerc.backends.fidelity`` (how right the dump
grammars and the layer slicer are on every decoder-only HF architecture, against torch's own
``nn_module_stack``): the architectures to run, the JSON record and the Markdown table
(``--table``, ``--readme``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from layerc.backends.outputs import output_dir, write_atomic
from layerc.backends.fidelity import LAYERS, decoder_architectures, measure, run_child, spliced, summary, table
from layerc.ir.diagnostics import LayercError
from layerc.tools.args import output_directory, output_path, whole_number




def configure_parser(p: argparse.ArgumentParser) -> None:
    from layerc.backends.synth.hf_export import model_type

    p.add_argument("--arch", action="append", type=model_type, metavar="MODEL_TYPE",
                   help="only this architecture (repeatable; default: every decoder-only one)")
    p.add_argument("--layers", type=whole_number(1, 64), default=LAYERS, metavar="N", help=f"decoder layers per model (default {LAYERS})")
    p.add_argument("--json", type=output_path, help="write every record as JSON")
    p.add_argument("--table", type=output_path, help="write the Markdown table")
    p.add_argument("--readme", type=output_path, help="put the table in this Markdown file, between its fidelity markers")
    p.add_argument("--keep", type=output_directory, metavar="DIR", help="keep each export in DIR/ARCH-LAYERS and reuse one already there")
    p.add_argument("--child", help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    if args.child:
        print(json.dumps(measure(args.child, args.layers, args.keep)), flush=True)
        return 0
    if args.readme:  # before the long run, not after it: a README without the markers stops here
        spliced(_read_readme(args.readme), "")
    if args.keep:  # likewise: a file where the directory should be stops here
        output_dir(args.keep)
    archs, left_out = decoder_architectures()
    if args.arch:
        archs, left_out = [a for a in archs if a in args.arch], {a: w for a, w in left_out.items() if a in args.arch}
    records = []
    for i, arch in enumerate(archs, 1):
        r = run_child(arch, args.layers, args.keep)
        records.append(r)
        state = r.get("export_error") or r.get("parse_error") or r.get("slice_error") or \
            f"recall {r.get('all_recall')} precision {r.get('all_precision')}"
        print(f"[{i}/{len(archs)}] {arch}: {state}", file=sys.stderr, flush=True)
    if args.json:
        write_atomic(args.json, json.dumps(records, indent=1) + "\n")
    text = f"{summary(records)}\n\n{table(records, left_out)}"
    if args.table:
        write_atomic(args.table, text)
    if args.readme:
        write_atomic(args.readme, spliced(_read_readme(args.readme), text))
    print(summary(records))
    return 0


def _read_readme(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as e:
        raise LayercError(f"cannot read {path}: {e.strerror}") from None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="layerc fidelity", description=__doc__.splitlines()[0])
    configure_parser(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
