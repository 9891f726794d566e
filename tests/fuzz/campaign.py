"""A fuzz campaign over every reader: ``python -m tests.fuzz.campaign --cases N``.

Hypothesis draws the cases (a target, one of its command lines, one of its samples, one to three
mutations); they run ``--jobs`` at a time, each in a capped child (tests/fuzz/harness.py). The
figures per target and per mutation class are printed, then every distinct failure with its
command and the directory that reproduces it (``sh DIR/repro.sh``). Exit status 1 when any check
failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, seed as hypothesis_seed, settings, strategies as st

from tests.fuzz.harness import BIG_MEMORY_MB, SLOW, SMALL_INPUT, Case, Result, run_case
from tests.fuzz.mutators import mutations
from tests.fuzz.targets import BY_NAME, ROOT, TARGETS, Target, make_samples

#: Donor samples (spliced from) are the file samples of every target up to this size.
DONOR_LIMIT = 4 << 20


def draw_cases(n: int, seed: int, names: list[str]) -> list[Case]:
    """``n`` cases spread evenly over the targets, each target's drawn by hypothesis; interleaved,
    so a short budget still meets every reader."""
    per_target = []
    for k, name in enumerate(names):
        want = n // len(names) + (k < n % len(names))
        if want:  # hypothesis's first example is its simplest (a flip of the first byte): one target keeps it
            per_target.append(_draw(BY_NAME[name], want + (k > 0), seed + k)[k > 0:])
    longest = max(map(len, per_target), default=0)
    return [c for row in zip(*(_cycle(cases, longest) for cases in per_target)) for c in row][:n]


def case_strategy(target: Target) -> st.SearchStrategy[Case]:
    index = st.integers(0, 1 << 16)
    return st.builds(Case, st.just(target), st.sampled_from(target.commands), mutations(target.classes),
                     index, index, index)


def _draw(target: Target, n: int, seed: int) -> list[Case]:
    cases: list[Case] = []

    @hypothesis_seed(seed)
    @settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case_strategy(target))
    def collect(case):
        cases.append(case)

    collect()
    return cases[:n]


def _cycle(cases: list, n: int) -> list:
    """``cases`` repeated to length ``n`` (hypothesis may draw fewer than asked from a small space)."""
    return [cases[i % len(cases)] for i in range(n)] if cases else []


def run_campaign(n: int, jobs: int, seed: int, names: list[str], work: Path, keep: Path | None,
                 log: Path | None = None) -> list[Result]:
    samples = make_samples(work / "samples")
    donors = [p.read_bytes() for name in sorted(samples) for p in samples[name]
              if p.is_file() and p.stat().st_size <= DONOR_LIMIT]
    cases = draw_cases(n, seed, names)

    def one(i_case: tuple[int, Case]) -> Result:
        i, case = i_case
        case_dir = work / "cases" / f"{i:05d}"
        shutil.rmtree(case_dir, ignore_errors=True)
        target = case.target
        sample = samples[target.name][case.sample % len(samples[target.name])]
        companion = samples[target.companion][0] if target.companion else None
        result = run_case(case, sample, case_dir, companion, donors[case.donor % len(donors)])
        if result.failures and keep is not None:
            _keep(case, result, case_dir, keep / f"s{seed}-{i:05d}-{target.name}")
        shutil.rmtree(case_dir, ignore_errors=True)
        if log is not None:  # one line a case, as it ends: a long campaign can be read while it runs
            with open(log, "a") as f:
                f.write(json.dumps(dataclasses.asdict(result)) + "\n")
        return result

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, enumerate(cases)))


def _keep(case: Case, result: Result, case_dir: Path, saved: Path) -> None:
    """The failing case's directory (input, companion, stderr, outputs) with ``repro.sh`` and
    ``case.json``."""
    shutil.rmtree(saved, ignore_errors=True)
    shutil.copytree(case_dir, saved)
    result.reproducer = str(saved)
    (saved / "case.json").write_text(json.dumps({**dataclasses.asdict(result), "mutations": [str(m) for m in case.mutations],
                                                 "case": {"sample": case.sample, "member": case.member,
                                                          "donor": case.donor}}, indent=1))
    (saved / "repro.sh").write_text(
        f"#!/bin/sh\n# {result.target} [{result.classes}] on {result.sample}: {'; '.join(result.failures)}\n"
        f"# LAYERC_TRACEBACK=1 sh repro.sh shows where an internal error was raised\n"
        f'cd "$(dirname "$0")" && rm -rf out tmp && mkdir -p out tmp && exec {_layerc_words(result.argv)}\n')


def _layerc_words(shown: str) -> str:
    """``layerc ...`` run with the Python that runs this campaign (works without the venv on PATH)."""
    return f"{sys.executable} -m layerc.tools.driver{shown[len('layerc'):]}"


# -- figures -----------------------------------------------------------------------------------
_COLUMNS = ("cases", "exit0", "exit1", "exit2", "other", "internal", ">10s", ">1GB", "max s", "max cpu", "max MB",
            "findings", "failing")


def _row(name: str, rs: list[Result]) -> str:
    values = (len(rs), sum(r.exit == 0 for r in rs), sum(r.exit == 1 for r in rs), sum(r.exit == 2 for r in rs),
              sum(r.exit not in (0, 1, 2) for r in rs), sum("internal error" in r.failures for r in rs),
              sum(r.cpu_seconds > SLOW and r.input_bytes <= SMALL_INPUT for r in rs),
              sum(r.peak_mb > BIG_MEMORY_MB for r in rs), f"{max(r.seconds for r in rs):.2f}",
              f"{max(r.cpu_seconds for r in rs):.2f}", f"{max(r.peak_mb for r in rs):.0f}",
              sum(bool(r.findings) for r in rs), sum(bool(r.failures) for r in rs))
    return f"{name:<22}" + "".join(f"{v:>9}" for v in values)


def figures(results: list[Result]) -> str:
    """The campaign as tables (per target; per mutation class, a case counted under each class it
    applied) and every distinct failure and finding, with a reproducer."""
    failing = sum(1 for r in results if r.failures)
    lines = [f"{len(results)} mutated inputs, {failing} failing, "
             f"{sum(r.input_bytes <= SMALL_INPUT for r in results)} of 1 MB or less; "
             f">10s: CPU seconds on inputs of 1 MB or less; >1GB: peak resident memory"]
    for title, keys in (("target", lambda r: [r.target]), ("mutation class", lambda r: sorted(set(r.classes.split("+"))))):
        groups: dict[str, list[Result]] = defaultdict(list)
        for r in results:
            for k in keys(r):
                groups[k].append(r)
        lines.append("")
        lines.append(f"{title:<22}" + "".join(f"{c:>9}" for c in _COLUMNS))
        lines += [_row(name, groups[name]) for name in sorted(groups)]
        if title == "target" and results:
            lines.append(_row("all", results))
    lines += _distinct(results, "failures", "failures")
    lines += _distinct(results, "findings", "findings (allowed, reported)")
    return "\n".join(lines)


def _distinct(results: list[Result], attr: str, title: str) -> list[str]:
    """One line per kind: where layerc raised it (internal errors), the target, the check, the
    first stderr line with its numbers, bytes and quoted values blurred; how many cases; one
    reproducer. Sorted by where, so a function's failures stand together."""
    kinds: dict[tuple, list[Result]] = defaultdict(list)
    for r in results:
        for f in getattr(r, attr):
            kinds[(r.where if attr == "failures" else "", r.target, _blur(f), _blur(r.first_line)[:90])].append(r)
    if not kinds:
        return []
    lines = ["", f"{title}:"]
    for (where, target, check, first), rs in sorted(kinds.items()):
        r = rs[0]
        lines.append(f"  {target} [{r.classes}] x{len(rs)}: {check}: {first}" + (f"\n      raised at {where}" if where else ""))
        lines.append(f"      {r.argv[:200]}" + (f"\n      reproducer: {r.reproducer}/repro.sh" if r.reproducer else ""))
    return lines


def _blur(text: str) -> str:
    text = re.sub(r"/\S+/(input|with)", r"\1", text)
    text = re.sub(r"0x[0-9a-fA-F]+|'[^']*'", lambda m: "0xN" if m.group().startswith("0x") else "'…'", text)
    return re.sub(r"\d+\.\d+|\d{2,}", "N", text)


def load_log(path: Path) -> list[Result]:
    names = {f.name for f in dataclasses.fields(Result)}
    results = []
    for line in path.read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            record.setdefault("cpu_seconds", record.get("seconds", 0.0))
            results.append(Result(**{k: v for k, v in record.items() if k in names}))
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.fuzz.campaign", description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=4200, help="mutated inputs to run (default 4200)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="cases at once (default: the CPU count)")
    p.add_argument("--seed", type=int, default=0, help="hypothesis seed (default 0)")
    p.add_argument("--target", action="append", choices=sorted(BY_NAME), help="only these targets (repeatable)")
    p.add_argument("--work", type=Path, help="where samples and cases go (default: a temporary directory, removed)")
    p.add_argument("--keep", type=Path, default=ROOT / "out" / "fuzz-failures", help="failing cases are kept here")
    p.add_argument("--json", type=Path, help="write every case's record as JSON")
    p.add_argument("--log", type=Path, help="append each case's record to this file (JSON lines) as it ends")
    p.add_argument("--summarize", type=Path, metavar="LOG", help="print the figures of a --log file and exit")
    args = p.parse_args(argv)
    if args.summarize:
        results = load_log(args.summarize)
        print(figures(results))
        return 1 if any(r.failures for r in results) else 0
    work = args.work or Path(tempfile.mkdtemp(prefix="layerc-fuzz-"))
    names = args.target or [t.name for t in TARGETS]
    print(f"fuzzing {', '.join(names)}: {args.cases} cases, seed {args.seed}, {args.jobs} jobs", flush=True)
    t0 = time.perf_counter()
    try:
        results = run_campaign(args.cases, args.jobs, args.seed, names, work, args.keep, args.log)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print(figures(results))
    print(f"\n{time.perf_counter() - t0:.0f} s wall, {args.jobs} jobs")
    if args.json:
        args.json.write_text(json.dumps([dataclasses.asdict(r) for r in results], indent=1))
    return 1 if any(r.failures for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
