"""Traces that are not in this repository, measured side by side (issue 20's last acceptance line):
for each PyTorch profiler trace given, its floor (numpy + gzip + orjson), the seed-001 analyzer,
HolisticTraceAnalysis's load where it is installed (timed in its process after its imports,
as ``tests.bench.traces`` times it), and whole ``layerc trace`` and ``perfetto``
processes, each the best of ``--repeat`` runs in the same run; then the ratios, and which
traces miss a target (``layerc trace`` over 1.5x its floor, or slower than seed-001).

    python -m tests.bench.unseen [--repeat N] TRACE_OR_FOLDER ...

A folder stands for every ``*.json`` and ``*.json.gz`` in it, recursively. A run that fails is
reported with its exit code and last line: a trace layerc refuses is a finding, not a crash of
the benchmark.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.bench.process import ENV, JSON_FLOOR, LAYERC, ROOT
from tests.bench.traces import _best as load_best
from tests.bench.traces import _has

#: what issue 20 asks of each small trace: at most this many times its floor
FLOOR_TARGET = 1.5


def traces(paths: list[str]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        out += sorted(q for q in p.rglob("*") if q.name.endswith((".json", ".json.gz"))) if p.is_dir() else [p]
    return out


def timed(argv: list[str], repeat: int) -> tuple[float, int, str]:
    """The best of ``repeat`` runs' seconds, and the last run's exit code and last stderr line."""
    best, code, last = float("inf"), 0, ""
    for _ in range(repeat):
        start = time.perf_counter()
        r = subprocess.run(argv, capture_output=True, text=True, env=ENV)
        best = min(best, time.perf_counter() - start)
        code, last = r.returncode, (r.stderr.strip().splitlines() or [""])[-1][-160:]
    return best, code, last


def measure(path: Path, repeat: int, hta: bool, tmp: Path) -> dict:
    timeline = tmp / "out.pftrace"
    row: dict = {"file": path.name, "mb": path.stat().st_size / 1e6}
    for what, argv in (("floor", [sys.executable, "-c", JSON_FLOOR, str(path)]),
                       ("seed", [sys.executable, str(ROOT / "tests" / "bench" / "seed001.py"), str(path)]),
                       ("trace", [*LAYERC, "trace", str(path)]),
                       ("perfetto", [*LAYERC, "perfetto", str(path), "-o", str(timeline)])):
        row[what], code, last = timed(argv, repeat)
        if code:
            row.setdefault("failed", []).append(f"{what} exited {code}: {last}")
    if hta:
        folder = tmp / "hta"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        shutil.copy(path, folder / ("rank0.json.gz" if path.name.endswith(".gz") else "rank0.json"))
        got = load_best("hta", str(folder), repeat)
        row["hta"] = got.get("seconds") or f"failed ({got.get('error', '?')})"
    return row


def report(rows: list[dict]) -> str:
    has_hta = any("hta" in r for r in rows)
    head = "| trace | MB | floor | seed-001 | `trace` | / floor | / seed-001 | `perfetto` / `trace` |" + (" HTA load |" if has_hta else "")
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        line = (f"| {r['file']} | {r['mb']:.2f} | {r['floor'] * 1e3:.0f} ms | {r['seed'] * 1e3:.0f} ms | {r['trace'] * 1e3:.0f} ms | "
                f"{r['trace'] / r['floor']:.2f}x | {r['trace'] / r['seed']:.2f}x | {r['perfetto'] / r['trace']:.2f}x |")
        if has_hta:
            hta = r.get("hta")
            line += f" {hta * 1e3:.0f} ms |" if isinstance(hta, float) else f" {hta or '-'} |"
        out.append(line)
    ok = [r for r in rows if "failed" not in r]
    over = [r["trace"] for r in ok if r["trace"] / r["floor"] > FLOOR_TARGET]
    slower = [r["trace"] for r in ok if r["trace"] > r["seed"]]
    out += ["", f"{len(rows)} traces, {len(rows) - len(ok)} with a failed run; `trace` / floor "
            f"{min((r['trace'] / r['floor'] for r in ok), default=0):.2f}x to {max((r['trace'] / r['floor'] for r in ok), default=0):.2f}x, "
            f"over {FLOOR_TARGET}x on {len(over)}; slower than seed-001 on {len(slower)}; `perfetto` / `trace` "
            f"{min((r['perfetto'] / r['trace'] for r in ok), default=0):.2f}x to {max((r['perfetto'] / r['trace'] for r in ok), default=0):.2f}x"
            + (f"; HTA's load failed on {sum(isinstance(r.get('hta'), str) for r in rows)}." if has_hta else ".")]
    out += [f"- {r['file']}: {'; '.join(r['failed'])}" for r in rows if "failed" in r]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.bench.unseen", description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", help="PyTorch profiler traces, or folders of them")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each process; the best counts (default 3)")
    args = ap.parse_args(argv)
    files = traces(args.paths)
    if not files:
        ap.error("no *.json or *.json.gz traces in the paths given")
    hta = _has("hta")
    with tempfile.TemporaryDirectory(prefix="layerc-bench-unseen-") as tmp:
        rows = [measure(p, args.repeat, hta, Path(tmp)) for p in files]
    sys.stdout.write(report(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
