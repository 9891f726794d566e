"""Whole-process figures, each beside its floor in the same run (issue 20): start-up against the
bare interpreter, ``layerc trace`` on each small real trace against a numpy + gzip + orjson load
and against the seed-001 analyzer (``tests/bench/seed001.py``),
the Kineto reader against a typed msgspec decode, an nsys export of 1M and 5M kernels against a
bare sqlite3 scan, ``perfetto`` against ``trace``, and peak memory per GB of input.

    python -m tests.bench.process [--quick] [--no-million]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.bench.traces import SHARED

ROOT = Path(__file__).resolve().parents[2]
LAYERC = [sys.executable, "-m", "layerc.tools.driver"]
#: processes run as an installed package runs: from compiled bytecode (pip writes it at install;
#: a PYTHONDONTWRITEBYTECODE checkout would compile every module at every start)
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

#: the floor of a trace load: the interpreter, numpy, and the file's JSON parsed by orjson
JSON_FLOOR = "import gzip, sys, numpy, orjson; p = sys.argv[1]; orjson.loads(gzip.open(p).read() if p.endswith('.gz') else open(p, 'rb').read())"
#: the floor of an nsys load: a bare scan of the kernel table's start, end and name into numpy
SQLITE_FLOOR = ("import sqlite3, sys, numpy as np; c = sqlite3.connect(sys.argv[1]); "
                "np.array(c.execute('SELECT start, end, shortName FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchall(), np.int64)")


def run(argv: list[str]) -> tuple[float, float]:
    """Seconds and peak resident MB of one process (its own, from wait4)."""
    start = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, argv))} exited {p.returncode}")
    return time.perf_counter() - start, usage.ru_maxrss / 1024


def best(argv: list[str], repeat: int) -> tuple[float, float]:
    runs = [run(argv) for _ in range(repeat)]
    return min(t for t, _ in runs), max(m for _, m in runs)


def startup(repeat: int) -> dict:
    bare = statistics.median(run([sys.executable, "-c", "pass"])[0] for _ in range(repeat))
    helped = statistics.median(run([*LAYERC, "--help"])[0] for _ in range(repeat))
    return {"python_s": bare, "help_s": helped, "ratio": helped / bare}


def small_traces(repeat: int) -> list[dict]:
    rows = []
    for path in sorted((SHARED / "data" / "traces" / "torch").glob("*.json*")):
        floor, _ = best([sys.executable, "-c", JSON_FLOOR, str(path)], repeat)
        seed, _ = best([sys.executable, str(ROOT / "tests" / "bench" / "seed001.py"), str(path)], repeat)
        whole, peak = best([*LAYERC, "trace", str(path)], repeat)
        rows.append({"trace": path.name, "floor_s": floor, "seed_s": seed, "trace_s": whole, "ratio": whole / floor,
                     "seed_ratio": whole / seed, "peak_mb": peak})
    return rows


def reader(repeat: int) -> list[dict]:
    """The Kineto reader in-process against msgspec decoding the same events into typed structs."""
    import gc
    import gzip

    import msgspec

    from layerc.grammar.kineto import _Event, read_kineto

    doc = msgspec.defstruct("Doc", [("traceEvents", list[_Event], [])])  # the events the reader keeps, typed
    decode = msgspec.json.Decoder(doc).decode
    rows = []
    for path in sorted((SHARED / "data" / "traces" / "torch").glob("*.json*")):
        def typed() -> None:
            decode(gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes())

        times = {}
        for name, fn in (("msgspec", typed), ("layerc", lambda: read_kineto(path))):
            spent = []
            for _ in range(repeat):
                gc.collect()
                start = time.perf_counter()
                fn()
                spent.append(time.perf_counter() - start)
            times[name] = min(spent)
        rows.append({"trace": path.name, "msgspec_s": times["msgspec"], "reader_s": times["layerc"],
                     "ratio": times["layerc"] / times["msgspec"]})
    return rows


def million(kernels: tuple[int, ...], repeat: int) -> list[dict]:
    """The nsys exports of each size, the floor, ``trace`` and ``perfetto`` on each. The floors
    come first, then layerc's runs in rounds (every size in every round): a slow spell of a shared
    machine falls on all sizes, not on one size's runs, which would tilt the ratio between them;
    and no layerc run comes right after a floor (5M kernels took 10% longer after one: the
    floor's 800 MB of small Python objects, freed, leave the next run's large pages to be
    compacted)."""
    with tempfile.TemporaryDirectory(prefix="layerc-bench-") as tmp:
        paths = {n: Path(tmp) / f"n{n}.sqlite" for n in kernels}
        for n, path in paths.items():
            run([*LAYERC, "gen-nsys", "--kernels", str(n), str(path)])
        runs: dict[tuple[int, str], list[tuple[float, float]]] = {}
        for n, path in paths.items():
            runs[n, "floor"] = [run([sys.executable, "-c", SQLITE_FLOOR, str(path)]) for _ in range(repeat)]
        timeline = Path(tmp) / "out.pftrace"
        for _ in range(repeat):
            for what in ("trace", "perfetto"):
                for n, path in paths.items():
                    argv = [*LAYERC, "trace", str(path)] if what == "trace" else [*LAYERC, "perfetto", str(path), "-o", str(timeline)]
                    runs.setdefault((n, what), []).append(run(argv))
                    if timeline.exists():  # its hundreds of MB written back now, not during the next run's clock
                        timeline.unlink()
                        os.sync()
        rows = []
        for n, path in paths.items():
            (floor, floor_mb), (whole, peak), (timeline_s, timeline_mb) = (
                (min(t for t, _ in runs[n, what]), max(m for _, m in runs[n, what])) for what in ("floor", "trace", "perfetto"))
            size_gb = path.stat().st_size / 1e9
            rows.append({"kernels": n, "input_gb": size_gb, "floor_s": floor, "trace_s": whole, "ratio": whole / floor,
                         "peak_mb": peak, "floor_peak_mb": floor_mb, "perfetto_s": timeline_s, "perfetto_peak_mb": timeline_mb,
                         "perfetto_ratio": timeline_s / whole, "gb_per_gb": peak / 1024 / size_gb})
    return rows


def kineto_memory(decodes: tuple[int, ...]) -> list[dict]:
    """Peak memory of ``layerc trace`` on generated Kineto traces of growing size (DeepSeek-V3,
    61 layers, ``decodes`` graph-replayed decode passes), per GB of the file and of its JSON."""
    import gzip

    rows = []
    with tempfile.TemporaryDirectory(prefix="layerc-bench-kineto-") as tmp:
        for d in decodes:
            path = Path(tmp) / f"d{d}.json.gz"
            run([*LAYERC, "gen-trace", str(path), "--model", "deepseek_v3", "--prefill", "2", "--decode", str(d)])
            with gzip.open(path) as f:
                text = sum(len(chunk) for chunk in iter(lambda: f.read(1 << 24), b""))
            seconds, peak = best([*LAYERC, "trace", str(path)], 1)
            rows.append({"decodes": d, "file_gb": path.stat().st_size / 1e9, "json_gb": text / 1e9, "trace_s": seconds, "peak_mb": peak})
    return rows


def commands(repeat: int) -> list[dict]:
    """Whole ``mem``, ``trace`` and ``perfetto`` processes on generated inputs (``layer`` and
    ``opt`` on the dumps are ``tests.bench.run``'s, in the same ``make bench``)."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="layerc-bench-commands-") as tmp:
        plans, kineto = Path(tmp) / "plans", Path(tmp) / "serving.json.gz"
        run([*LAYERC, "gen-mem", str(plans)])
        run([*LAYERC, "gen-trace", str(kineto), "--model", "deepseek_v3", "--tp", "8"])
        out = Path(tmp) / "out"
        for what, argv in (
            ("`mem` (a flash-attention-backward memory plan: checks, JSON, Perfetto, pictures)", ["mem", str(plans), "-o", str(out / "mem")]),
            ("`trace` (DeepSeek-V3 TP8 serving trace, Kineto)", ["trace", str(kineto)]),
            ("`perfetto` (the same trace)", ["perfetto", str(kineto), "-o", str(out / "serving.pftrace")]),
        ):
            seconds, peak = best([*LAYERC, *argv], repeat)
            rows.append({"what": what, "input_mb": _size(argv[1]) / 1e6, "seconds": seconds, "peak_mb": peak})
    return rows


def _size(path: str) -> int:
    p = Path(path)
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else p.stat().st_size


def report(figures: dict) -> str:
    s = figures["startup"]
    out = [f"`layerc --help`: {s['help_s'] * 1e3:.0f} ms against {s['python_s'] * 1e3:.0f} ms for `python -c pass` "
           f"({s['ratio']:.2f}x)", "",
           "| trace | floor (numpy + gzip + orjson) | seed-001 analyzer | `layerc trace` | / floor | / seed-001 | peak MB |",
           "|---|---|---|---|---|---|---|"]
    out += [f"| {r['trace']} | {r['floor_s'] * 1e3:.0f} ms | {r['seed_s'] * 1e3:.0f} ms | {r['trace_s'] * 1e3:.0f} ms | {r['ratio']:.2f}x | "
            f"{r['seed_ratio']:.2f}x | {r['peak_mb']:.0f} |" for r in figures["small"]]
    out += ["", "| trace | typed msgspec decode | layerc Kineto reader | ratio |", "|---|---|---|---|"]
    out += [f"| {r['trace']} | {r['msgspec_s'] * 1e3:.1f} ms | {r['reader_s'] * 1e3:.1f} ms | {r['ratio']:.2f}x |" for r in figures["reader"]]
    if figures.get("million"):
        out += ["", "| nsys kernels | input | sqlite3 scan | `layerc trace` | ratio | `perfetto` | perfetto / trace | peak MB (perfetto) | peak GB per GB of input |",
                "|---|---|---|---|---|---|---|---|---|"]
        out += [f"| {r['kernels']:,} | {r['input_gb'] * 1e3:.0f} MB | {r['floor_s']:.2f} s | {r['trace_s']:.2f} s | {r['ratio']:.2f}x | "
                f"{r['perfetto_s']:.2f} s | {r['perfetto_ratio']:.2f}x | {r['peak_mb']:.0f} ({r['perfetto_peak_mb']:.0f}) | {r['gb_per_gb']:.2f} |"
                for r in figures["million"]]
        if len(figures["million"]) > 1:
            a, b = figures["million"][0], figures["million"][-1]
            growth = (b["peak_mb"] - a["peak_mb"]) / 1024 / (b["input_gb"] - a["input_gb"])
            out.append(f"\n{b['kernels']:,} kernels take {b['trace_s'] / a['trace_s']:.2f}x the time of {a['kernels']:,}; "
                       f"peak memory grows by {growth:.2f} GB per GB of input between them.")
    if figures.get("commands"):
        out += ["", "| command (generated input) | input | time | peak MB |", "|---|---|---|---|"]
        out += [f"| {r['what']} | {r['input_mb']:.1f} MB | {r['seconds']:.2f} s | {r['peak_mb']:.0f} |" for r in figures["commands"]]
    if figures.get("kineto"):
        out += ["", "| Kineto trace (DeepSeek-V3, 2 prefill + N decode passes) | file | JSON | `layerc trace` | peak MB |", "|---|---|---|---|---|"]
        out += [f"| N = {r['decodes']} | {r['file_gb'] * 1e3:.0f} MB | {r['json_gb'] * 1e3:.0f} MB | {r['trace_s']:.2f} s | {r['peak_mb']:.0f} |"
                for r in figures["kineto"]]
        a, b = figures["kineto"][0], figures["kineto"][-1]
        grow = (b["peak_mb"] - a["peak_mb"]) / 1024
        out.append(f"\nPeak memory grows by {grow / (b['json_gb'] - a['json_gb']):.2f} GB per GB of JSON "
                   f"({grow / (b['file_gb'] - a['file_gb']):.2f} GB per GB of the gzipped file) between them.")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.bench.process", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions, 1M kernels only")
    ap.add_argument("--no-million", action="store_true", help="skip the generated nsys exports")
    args = ap.parse_args(argv)
    repeat = 3 if args.quick else 5
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "layerc"), *(str(ROOT / d) for d in
                    ("ir", "grammar", "passes", "backends", "tools"))], env=ENV, check=False)  # the bytecode, once
    # Children's peaks come from wait4, and a forked child's peak starts at its parent's size: the
    # in-process reader timing (which loads traces here) runs last.
    figures = {"startup": startup(15), "small": small_traces(repeat), "commands": commands(3 if args.quick else 5)}
    if not args.no_million:
        figures["million"] = million((1_000_000,) if args.quick else (1_000_000, 5_000_000), 1 if args.quick else 3)
        figures["kineto"] = kineto_memory((25, 100) if args.quick else (50, 400, 1400))  # 1400: about 1 GB of JSON
    figures["reader"] = reader(repeat)
    sys.stdout.write(report(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
