"""Trace loading, layerc beside HolisticTraceAnalysis (HTA) on the same files in the same run.

Each load runs in a fresh subprocess, so peak memory is that process's own high-water mark
(``VmHWM``); the load's share is its growth after the imports. HTA reads
PyTorch profiler traces only; nsys exports are timed for layerc alone, with a generated
1,000,000-kernel export.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

_CHILD = r"""
import json, sys, time, logging

def hwm_kb():  # the process's own peak RSS (ru_maxrss would carry the forking parent's across exec)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])

which, path = sys.argv[1], sys.argv[2]
logging.disable(logging.WARNING)
if which == "layerc":  # the readers imported before the clock starts, as HTA's are
    from layerc.grammar.traces import read_trace
    import layerc.grammar.kineto, layerc.grammar.nsys
    base = hwm_kb()
    t = time.perf_counter()
    trace = read_trace(path)
    seconds = time.perf_counter() - t
    kernels = len(trace.kernels)
else:
    import warnings; warnings.simplefilter("ignore")
    from hta.trace_analysis import TraceAnalysis
    base = hwm_kb()
    t = time.perf_counter()
    ta = TraceAnalysis(trace_dir=path)
    df = ta.t.get_trace(0)
    seconds = time.perf_counter() - t
    kernels = int((df["cat"] == ta.t.symbol_table.sym_index.get("kernel", -1)).sum()) if "cat" in df else -1
peak = hwm_kb()
print(json.dumps({"seconds": seconds, "peak_mb": peak / 1024, "load_mb": (peak - base) / 1024, "kernels": kernels}))
"""


def _child(which: str, path: str) -> dict:
    r = subprocess.run([sys.executable, "-c", _CHILD, which, path], capture_output=True, text=True)
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or ["failed"])[-1][:200]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def _best(which: str, path: str, repeat: int) -> dict:
    runs = [_child(which, path) for _ in range(repeat)]
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return runs[0]
    best = min(ok, key=lambda r: r["seconds"])
    best["load_mb"] = min(r["load_mb"] for r in ok)
    return best


def bench_traces(shared: Path, repeat: int = 5) -> list[dict]:
    if not (shared / "data" / "traces" / "torch").is_dir():  # an empty table would look like a measurement
        raise SystemExit(f"no real traces in {shared}/data/traces/torch: set LAYERC_SHARED to the shared folder")
    rows = []
    have_hta = shutil.which(sys.executable) and _has("hta")
    tmp = Path(tempfile.mkdtemp(prefix="layerc-bench-traces-"))
    for path in sorted((shared / "data" / "traces" / "torch").glob("*.json.gz")):
        row = {"file": path.name, "mb": path.stat().st_size / 1e6, "layerc": _best("layerc", str(path), repeat)}
        if have_hta:
            d = tmp / path.stem
            d.mkdir()
            shutil.copy(path, d / "rank0.json.gz")  # HTA reads a directory of per-rank traces
            row["hta"] = _best("hta", str(d), repeat)
        rows.append(row)
    return rows


def bench_nsys_million(repeat: int = 2) -> dict:
    from layerc.backends.synth.nsys import generate

    tmp = Path(tempfile.mkdtemp(prefix="layerc-bench-nsys-"))
    path = tmp / "million.sqlite"
    truth = generate(path, kernels=1_000_000)
    result = _best("layerc", str(path), repeat)
    result["kernel_rows"] = truth["kernel_rows"]
    result["mb"] = path.stat().st_size / 1e6
    result["analysis"] = bench_analysis(path, repeat + 1)
    return result


def bench_analysis(path: Path, repeat: int) -> dict:
    """Classification (tables loaded anew: regexes run cold) + layer detection + layer types and
    stages of a loaded trace, best of ``repeat``."""
    import time

    from layerc.grammar.traces import read_trace
    from layerc.passes.kernel_tables import kernel_table
    from layerc.passes.layer_facts import kernel_stages, layer_table
    from layerc.passes.stage_shapes import stage_votes
    from layerc.passes.trace_layers import detect_layers

    trace = read_trace(path)
    best: dict = {}
    for _ in range(repeat):
        t0 = time.perf_counter()
        cls = kernel_table().classify(trace)
        t1 = time.perf_counter()
        layers = detect_layers(trace, "auto", cls)
        t2 = time.perf_counter()
        votes = stage_votes(trace, cls)
        table = layer_table(trace, cls, layers, votes)
        kernel_stages(trace, cls, layers, table, votes)
        t3 = time.perf_counter()
        if not best or t3 - t0 < best["seconds"]:
            best = {"seconds": t3 - t0, "classify_s": t1 - t0, "detect_s": t2 - t1, "facts_s": t3 - t2,
                    "kernels": len(trace.kernels), "layers": len(table), "strategy": layers.strategy}
    return best


def _has(module: str) -> bool:
    r = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True)
    return r.returncode == 0


def report(rows: list[dict], million: dict | None) -> str:
    out = ["| trace | size | kernels | layerc load | HTA load | speed-up | layerc peak (load) | HTA peak (load) | memory ratio |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        l, h = r["layerc"], r.get("hta", {})
        if "error" in h or not h:
            hta_t, ratio_t, hta_m, ratio_m = "—", "—", "—", "—"
        else:
            hta_t = f"{h['seconds'] * 1e3:.0f} ms"
            ratio_t = f"{h['seconds'] / l['seconds']:.1f}x"
            hta_m = f"{h['peak_mb']:.0f} MB ({h['load_mb']:.0f})"
            ratio_m = f"{l['load_mb'] / max(h['load_mb'], 1e-9):.2f}"
        out.append(f"| {r['file']} | {r['mb']:.1f} MB | {l['kernels']:,} | {l['seconds'] * 1e3:.0f} ms | {hta_t} | {ratio_t} | {l['peak_mb']:.0f} MB ({l['load_mb']:.0f}) | {hta_m} | {ratio_m} |")
    if million:
        out.append("")
        out.append(f"Generated Nsight Systems export with {million['kernel_rows']:,} kernel rows ({million['mb']:.0f} MB): "
                   f"layerc loads it in {million['seconds']:.2f} s, peak {million['peak_mb']:.0f} MB.")
        a = million.get("analysis")
        if a:
            out.append(f"Classifying its {a['kernels']:,} kernels and finding their layers ({a['layers']:,} layers by {a['strategy']}, "
                       f"with types and stages) takes {a['seconds']:.2f} s: classify {a['classify_s']:.2f} s, detect-layers "
                       f"{a['detect_s']:.2f} s, types and stages {a['facts_s']:.2f} s.")
    return "\n".join(out) + "\n"


#: the project's shared folder beside the checkout (``../shared``), or ``LAYERC_SHARED``
SHARED = Path(os.environ.get("LAYERC_SHARED", Path(__file__).resolve().parents[2].parent / "shared"))


def main() -> int:
    rows = bench_traces(SHARED)
    million = bench_nsys_million()
    sys.stdout.write(report(rows, million))
    return 0


if __name__ == "__main__":
    sys.exit(main())
