"""One fuzz case: a mutated input, a command on it in a capped child process, and the checks.

The child runs in its own session with an address-space cap (RLIMIT_AS) and a CPU-time cap; on
the wall-clock timeout its whole process group is killed. Its peak memory comes from
``os.wait4`` (that child's own ``ru_maxrss``). Checks: exit 0, 1 or 2; no internal error and no
traceback; on exit 1 the first stderr line is ``file[:line[:col]]: error: ...``; the input is
byte-identical afterwards; no temporary file is left; time and memory within bounds.
"""

from __future__ import annotations

import hashlib
import os
import re
import resource
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.fuzz.mutators import Mutation, apply, apply_sqlite
from tests.fuzz.targets import LAYERC, ROOT, Target

MEMORY_CAP = 4 << 30  #: address space of a child: a runaway allocation fails, it cannot take the machine
WALL_LIMIT = 60.0  #: a child still running then is killed (and counted as a hang)
SLOW = 10.0  #: the acceptance bound on inputs of 1 MB or less
BIG_MEMORY_MB = 1024  #: the acceptance bound on peak memory
ARG_MAX = 100_000  #: one command-line argument (Linux takes at most 128 KB)
_ERROR_LINE = re.compile(r"^(?P<file>[^\n]+?)(?::\d+(?::\d+)?)?: error: ")


@dataclass
class Result:
    target: str
    command: str
    classes: str
    input_bytes: int
    exit: int | None
    first_line: str
    seconds: float
    peak_mb: float
    failures: list[str] = field(default_factory=list)


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))
    resource.setrlimit(resource.RLIMIT_CPU, (int(WALL_LIMIT) + 5, int(WALL_LIMIT) + 10))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")) if path.is_dir() else [path]:
        if p.is_file():
            h.update(str(p.relative_to(path) if path.is_dir() else p.name).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def prepare(target: Target, sample: Path, ms: tuple[Mutation, ...], case_dir: Path, other: bytes = b"") -> tuple[Path, str | None]:
    """The mutated input inside ``case_dir`` (a file, or a copied directory with one member
    mutated); for an argument target, the mutated text instead."""
    case_dir.mkdir(parents=True, exist_ok=True)
    if target.argument:
        text = apply(sample.read_bytes(), ms, other).replace(b"\0", b"")
        return sample, text[:ARG_MAX].decode("utf-8", "ignore")
    if target.member:
        copy = case_dir / "input"
        shutil.copytree(sample, copy)
        member = sorted(copy.glob(target.member))[0]
        member.write_bytes(apply(member.read_bytes(), ms, other))
        return copy, None
    copy = case_dir / ("input" + "".join(sample.suffixes))
    if target.sqlite:
        shutil.copy(sample, copy)
        apply_sqlite(str(copy), ms)
    else:
        copy.write_bytes(apply(sample.read_bytes(), ms, other))
    return copy, None


def run_case(target: Target, command: tuple[str, ...], sample: Path, ms: tuple[Mutation, ...], case_dir: Path,
             dump: Path, other: bytes = b"") -> Result:
    path, text = prepare(target, sample, ms, case_dir, other)
    out = case_dir / "out"
    out.mkdir(exist_ok=True)
    argv = [a.format(**{"in": str(path), "out": str(out), "dump": str(dump), "text": text or ""}) for a in command]
    before = _digest(path)
    size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else path.stat().st_size
    t0 = time.perf_counter()
    err_path = case_dir / "stderr.txt"
    with open(err_path, "wb") as err_file:
        proc = subprocess.Popen([*LAYERC, *argv], stdout=subprocess.DEVNULL, stderr=err_file, stdin=subprocess.DEVNULL,
                                cwd=ROOT, start_new_session=True, preexec_fn=_limits, env={**os.environ, "COLUMNS": "120"})
    timed_out, usage, peak = False, None, [0]
    try:
        _, status, usage = _wait4(proc.pid, t0, peak)
    except TimeoutError:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    stderr = err_path.read_bytes()[: 1 << 20].decode("utf-8", "replace")
    first = stderr.splitlines()[0] if stderr.strip() else ""
    result = Result(target.name, " ".join(command[:1]), "+".join(m.kind for m in ms), size,
                    None if timed_out else proc.returncode, first[:300], round(seconds, 3),
                    round(peak[0] / 1024, 1))
    f = result.failures
    if timed_out:
        f.append(f"hang: killed after {WALL_LIMIT:.0f} s")
    elif proc.returncode not in (0, 1, 2):
        f.append(f"exit {proc.returncode}" + (" (killed: out of memory?)" if proc.returncode < 0 else ""))
    if "internal error" in stderr or "Traceback (most recent call last)" in stderr:
        f.append("internal error")
    if proc.returncode == 1 and not (m := _ERROR_LINE.match(first)):
        f.append("exit 1 without a 'file[:line[:col]]: error:' first line")
    elif proc.returncode == 1 and m and m.group("file") == "layerc" and not target.argument:
        f.append("an error that names no file")
    if _digest(path) != before:
        f.append("the input changed")
    left = [p.name for p in list(out.rglob("*")) + list(case_dir.rglob("*")) if p.name.endswith(".tmp")]
    if left:
        f.append(f"temporary files left: {left[:3]}")
    if size <= 1 << 20 and seconds > SLOW:
        f.append(f"slow: {seconds:.1f} s on {size} bytes")
    if result.peak_mb > BIG_MEMORY_MB:
        f.append(f"memory: {result.peak_mb:.0f} MB peak")
    return result


def _wait4(pid: int, t0: float, peak: list[int]):
    """``os.wait4`` with the wall-clock limit, noting the child's peak resident memory (kB) as it
    runs: its own VmHWM, which starts afresh at exec (``ru_maxrss`` would also count the pages it
    shared with this process when it was forked)."""
    status_file = f"/proc/{pid}/status"
    while True:
        try:
            with open(status_file) as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        peak[0] = max(peak[0], int(line.split()[1]))
                        break
        except OSError:
            pass
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            return done, status, usage
        if time.perf_counter() - t0 > WALL_LIMIT:
            raise TimeoutError
        time.sleep(0.003)
