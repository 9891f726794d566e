"""A fuzz campaign over every reader: ``python -m tests.fuzz.campaign --cases N``.

Hypothesis draws the cases (a target, one of its command lines, one to three mutations); they
run ``--jobs`` at a time, each in a capped child (tests/fuzz/harness.py). The figures per target
and per mutation class are printed; every failing case is kept under ``--keep`` with its
command, to replay. Exit status 1 when any check failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, seed as hypothesis_seed, settings, strategies as st

from tests.fuzz.harness import BIG_MEMORY_MB, SLOW, Result, run_case
from tests.fuzz.mutators import mutations
from tests.fuzz.targets import BY_NAME, ROOT, TARGETS, Target, make_samples


def draw_cases(n: int, seed: int, names: list[str]) -> list[tuple[Target, tuple[str, ...], tuple]]:
    """``n`` cases spread evenly over the targets, each target's drawn by hypothesis from its
    command lines and mutation classes; interleaved, so a short budget still meets every reader."""
    per_target = []
    for k, name in enumerate(names):
        target = BY_NAME[name]
        want = n // len(names) + (k < n % len(names))
        if want:
            per_target.append(_draw(target, want, seed + k))
    return [c for row in zip(*(_cycle(cases, max(map(len, per_target))) for cases in per_target)) for c in row][:n] \
        if per_target else []


def _draw(target: Target, n: int, seed: int) -> list:
    cases: list = []
    strategy = st.tuples(st.just(target), st.sampled_from(target.commands), mutations(target.classes))

    @hypothesis_seed(seed)
    @settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(c):
        cases.append(c)

    collect()
    return cases[:n]


def _cycle(cases: list, n: int) -> list:
    """``cases`` repeated to length ``n`` (hypothesis may draw fewer than asked from a small space)."""
    return [cases[i % len(cases)] for i in range(n)] if cases else []


def run_campaign(n: int, jobs: int, seed: int, names: list[str], work: Path, keep: Path | None,
                 log: Path | None = None) -> list[Result]:
    samples = make_samples(work / "samples")
    other = {name: (p.read_bytes() if p.is_file() else b"") for name, p in samples.items()}
    cases = draw_cases(n, seed, names)

    def one(i_case):
        i, (target, command, ms) = i_case
        case_dir = work / "cases" / f"{i:05d}"
        donor = other["kineto_json" if target.name != "kineto_json" else "autodeploy_dump"]
        result = run_case(target, command, samples[target.name], ms, case_dir, samples["autodeploy_dump"], donor)
        if result.failures and keep is not None:
            saved = keep / f"{i:05d}-{target.name}"
            shutil.copytree(case_dir, saved, dirs_exist_ok=True)
            (saved / "case.json").write_text(json.dumps({**asdict(result), "argv": list(command),
                                                         "mutations": [str(m) for m in ms]}, indent=1))
        shutil.rmtree(case_dir, ignore_errors=True)
        if log is not None:  # one line a case, as it ends: a long campaign can be read while it runs
            with open(log, "a") as f:
                f.write(json.dumps(asdict(result)) + "\n")
        return result

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, enumerate(cases)))


def figures(results: list[Result]) -> str:
    """The campaign as tables: per target, per mutation class, and every distinct failure."""
    lines = [f"{len(results)} mutated inputs, {sum(1 for r in results if r.failures)} failing"]
    for key, title in ((lambda r: r.target, "target"), (lambda r: r.classes.split("+")[0], "first mutation")):
        groups: dict[str, list[Result]] = defaultdict(list)
        for r in results:
            groups[key(r)].append(r)
        lines.append(f"\n{title:<22} {'cases':>6} {'exit0':>6} {'exit1':>6} {'exit2':>6} {'internal':>8} "
                     f"{'>10s':>5} {'>1GB':>5} {'max s':>7} {'max MB':>7} {'failing':>7}")
        for name in sorted(groups):
            rs = groups[name]
            lines.append(
                f"{name:<22} {len(rs):>6} {sum(r.exit == 0 for r in rs):>6} {sum(r.exit == 1 for r in rs):>6} "
                f"{sum(r.exit == 2 for r in rs):>6} {sum('internal error' in r.failures for r in rs):>8} "
                f"{sum(r.seconds > SLOW and r.input_bytes <= 1 << 20 for r in rs):>5} "
                f"{sum(r.peak_mb > BIG_MEMORY_MB for r in rs):>5} {max(r.seconds for r in rs):>7.2f} "
                f"{max(r.peak_mb for r in rs):>7.0f} {sum(bool(r.failures) for r in rs):>7}")
    distinct: dict[tuple, Result] = {}
    for r in results:
        for f in r.failures:
            distinct.setdefault((r.target, f, r.first_line[:80]), r)
    if distinct:
        lines.append("\nfailures:")
        for (target, failure, first), r in sorted(distinct.items()):
            lines.append(f"  {target} [{r.classes}] {r.command}: {failure}: {first}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.fuzz.campaign", description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=4200, help="mutated inputs to run (default 4200)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="cases at once (default: the CPU count)")
    p.add_argument("--seed", type=int, default=0, help="hypothesis seed (default 0)")
    p.add_argument("--target", action="append", choices=sorted(BY_NAME), help="only these targets (repeatable)")
    p.add_argument("--work", type=Path, help="where samples and cases go (default: a temporary directory)")
    p.add_argument("--keep", type=Path, default=ROOT / "out" / "fuzz-failures", help="failing cases are kept here")
    p.add_argument("--json", type=Path, help="every case's record as JSON")
    p.add_argument("--log", type=Path, help="append each case's record to this file (JSON lines) as it ends")
    p.add_argument("--summarize", type=Path, metavar="LOG", help="print the figures of a --log file and exit")
    args = p.parse_args(argv)
    if args.summarize:
        results = [Result(**json.loads(line)) for line in args.summarize.read_text().splitlines() if line.strip()]
        print(figures(results))
        return 1 if any(r.failures for r in results) else 0
    work = args.work or Path(tempfile.mkdtemp(prefix="layerc-fuzz-"))
    t0 = time.perf_counter()
    try:
        results = run_campaign(args.cases, args.jobs, args.seed, args.target or [t.name for t in TARGETS], work, args.keep,
                               args.log)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print(figures(results))
    print(f"\n{time.perf_counter() - t0:.0f} s wall, {args.jobs} jobs")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    return 1 if any(r.failures for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
