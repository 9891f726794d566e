"""``make bench``: how fast layerc reads dumps, beside a plain regex line scanner in the same run.

The regex scanner is the floor for Python: one regex per line, arguments split on commas, as
the public ad_perf_analysis ``graph_dump.py`` does. It builds no graph, checks nothing and gets
commas inside lists wrong; layerc builds the typed, verified IR. Ratios compare the two on the
same bytes, so they hold across machines better than seconds do.

    python -m tests.bench.run [--quick] [--json FILE]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CALL_RE = re.compile(r"^%(?P<name>\S+) = (?P<target>.+?)\((?P<inputs>.*)\) : (?P<output>.+)$")
PLACEHOLDER_RE = re.compile(r"^%(?P<name>\S+) : (?P<output>.+)$")
OUTPUT_RE = re.compile(r"^output (?P<value>.+)$")
GRAPH_MODULE_RE = re.compile(r"^# GraphModule: (?P<name>.+)$")


def regex_scan(text: str) -> list[dict]:
    """The floor: what a regex line scanner extracts (names, targets, raw inputs, outputs)."""
    nodes = []
    for line in text.splitlines():
        m = CALL_RE.match(line)
        if m:
            nodes.append({"name": m["name"], "target": m["target"], "inputs": [a.strip() for a in m["inputs"].split(",")], "output": m["output"]})
            continue
        m = PLACEHOLDER_RE.match(line)
        if m:
            nodes.append({"name": m["name"], "output": m["output"]})
            continue
        if OUTPUT_RE.match(line) or GRAPH_MODULE_RE.match(line):
            continue
    return nodes


#: The issue's "61-layer DeepSeek-V3-sized dump (about 6,000 op lines)": the compile-stage dump
#: with piecewise CUDA graphs, whose sections repeat the model split into pieces.
BIG = "DeepSeek-V3, 61 layers + piecewise CUDA-graph sections"


def _best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def _progress(msg: str) -> None:
    if sys.stderr.isatty():
        sys.stderr.write(f"\r\033[K{msg}")
        sys.stderr.flush()


def bench_files(quick: bool) -> list[dict]:
    from layerc.backends.autodeploy import print_module
    from layerc.grammar.autodeploy import parse_autodeploy
    from layerc.backends.synth.dump import generate

    cases = [
        ("DeepSeek-V3, 1 layer", "deepseek_v3", 1, False),
        ("DeepSeek-V3, 8 layers", "deepseek_v3", 8, False),
        ("DeepSeek-V3, 61 layers", "deepseek_v3", 61, False),
        (BIG, "deepseek_v3", 61, True),
        ("DeepSeek-V3 pre-fusion (256-expert lists), 61 layers", "deepseek_v3_prefusion", 61, False),
    ]
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="layerc-bench-"))
    repeat = 3 if quick else 7
    for label, arch, layers, piecewise in cases:
        _progress(f"generating {label}")
        text = print_module(generate(arch, layers=layers, piecewise=piecewise))
        path = tmp / f"{arch}_{layers}{'_piecewise' if piecewise else ''}.txt"
        path.write_text(text)
        parse_autodeploy(text)  # build the parser once, outside the timing
        _progress(f"timing {label}")
        module = parse_autodeploy(text)
        module.verify()
        nodes = sum(len(g.nodes) for g in module.graphs)
        ops = sum(len(g.ops) for g in module.graphs)
        t_layerc = _best(lambda: parse_autodeploy(text), repeat)
        t_verify = _best(module.verify, repeat)
        t_regex = _best(lambda: regex_scan(text), repeat)
        mb = len(text.encode()) / 1e6
        rows.append({
            "file": label, "path": str(path), "bytes": len(text.encode()), "lines": text.count("\n"), "nodes": nodes, "op_lines": ops,
            "layerc_s": t_layerc, "verify_s": t_verify, "regex_s": t_regex,
            "layerc_mb_s": mb / t_layerc, "layerc_nodes_s": nodes / t_layerc, "regex_mb_s": mb / t_regex,
            "ratio": t_layerc / t_regex,
        })
    _progress("")
    return rows


def bench_process(*args: str) -> float:
    """Seconds for a whole ``layerc`` process, start-up included."""
    cmd = [sys.executable, "-m", "layerc.tools.driver", *args]
    return _best(lambda: subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL), 3)


def bench_layers(path: str, repeat: int) -> dict:
    """Slicing every layer of a parsed dump, and the whole ``layerc layer`` process."""
    from layerc.grammar.dumps import load
    from layerc.passes.pipeline import run_passes
    from layerc.passes.slicing import SliceLayers

    modules = [load(path) for _ in range(repeat)]
    it = iter(modules)
    slice_all = _best(lambda: run_passes([SliceLayers()], next(it)), repeat)
    layers = len(modules[0].main_graph().meta["layers"])
    out = Path(tempfile.mkdtemp(prefix="layerc-bench-layer-"))
    return {
        "layers": layers,
        "slice_all_s": slice_all,
        "layer_process_s": bench_process("layer", path, "5", "-o", str(out)),
        "layer_process_json_s": bench_process("layer", path, "5", "-o", str(out), "--format", "json"),
    }


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import lark

    from importlib.util import find_spec

    accel = ", lark-cython" if find_spec("lark_cython") else ""
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, lark {lark.__version__}{accel}"


def report(rows: list[dict], whole: float | None, layer: dict | None = None) -> str:
    out = [f"Machine: {machine()}", "", "| dump | size | op lines | layerc parse | layerc MB/s | layerc nodes/s | regex scan | layerc / regex |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(
            f"| {r['file']} | {r['bytes'] / 1e6:.2f} MB | {r['op_lines']:,} | {r['layerc_s'] * 1e3:.1f} ms | {r['layerc_mb_s']:.1f} | {r['layerc_nodes_s']:,.0f} | {r['regex_s'] * 1e3:.1f} ms | {r['ratio']:.1f}x |"
        )
    out.append("")
    out.append("Parse = text to verified-ready IR (the Lark LALR parse with inline IR building); verify adds "
               + ", ".join(f"{r['verify_s'] * 1e3:.0f} ms" for r in rows) + ".")
    if whole is not None:
        out.append(f"Whole process, `layerc opt` on the {BIG} dump (start-up, parse, verify, print): {whole:.2f} s.")
    if layer is not None:
        out.append(
            f"Slicing all {layer['layers']} layers of the 61-layer dump after parsing (`slice-layers`): "
            f"{layer['slice_all_s'] * 1e3:.0f} ms. Whole process, `layerc layer` on it for layer 5: "
            f"{layer['layer_process_s']:.2f} s with JSON, DOT, PNG and SVG, {layer['layer_process_json_s']:.2f} s for JSON alone."
        )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.bench.run", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = ap.parse_args(argv)
    rows = bench_files(args.quick)
    big = next(r for r in rows if r["file"] == BIG)
    whole = bench_process("opt", big["path"], "-o", os.devnull)
    _progress("timing layer slicing")
    layer = bench_layers(next(r for r in rows if r["file"] == "DeepSeek-V3, 61 layers")["path"], 3 if args.quick else 5)
    _progress("timing trace loading beside HolisticTraceAnalysis")
    from tests.bench.traces import SHARED, bench_nsys_million, bench_traces
    from tests.bench.traces import report as trace_report

    traces = bench_traces(SHARED, 3 if args.quick else 5)
    million = bench_nsys_million()
    _progress("")
    sys.stdout.write(report(rows, whole, layer))
    sys.stdout.write("\nTrace loading (each load in a fresh process; peak = max RSS, load = its growth during the load):\n\n")
    sys.stdout.write(trace_report(traces, million))
    if args.json:
        from layerc.backends.outputs import write_atomic

        write_atomic(args.json, json.dumps({"machine": machine(), "files": rows, "layerc_opt_process_s": whole, "layer": layer,
                                            "traces": traces, "nsys_million": million}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
