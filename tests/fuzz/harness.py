"""One fuzz case: a mutated input, a command on it in a capped child process, and the checks.

The child runs in its own session with an address-space cap (RLIMIT_AS) and a CPU-time cap; on
the wall-clock timeout its whole process group is killed. Its peak memory and CPU time come from
``os.wait4`` (that child's own rusage). Checks: exit 0, 1 or 2; no internal error and no
traceback; on exit 1 the first stderr line is ``file[:line[:col]]: error: ...``; every input is
byte-identical afterwards; no temporary file is left (beside the inputs, in the output directory,
in the child's TMPDIR); time and memory within bounds. ``layerc: error: ...`` (an error that
names no file) is allowed, and reported as a finding.
"""

from __future__ import annotations

import hashlib
import os
import re
import resource
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.fuzz.mutators import Mutation, apply, apply_packed, apply_sqlite
from tests.fuzz.targets import LAYERC, ROOT, Target

MEMORY_CAP = 4 << 30  #: address space of a child: a runaway allocation fails, it cannot take the machine
WALL_LIMIT = 60.0  #: a child still running then is killed (and counted as a hang)
SLOW = 10.0  #: the acceptance bound, in CPU seconds, on inputs of 1 MB or less
SMALL_INPUT = 1 << 20  #: "inputs of 1 MB or less"
BIG_MEMORY_MB = 1024  #: the acceptance bound on peak memory
ARG_MAX = 100_000  #: one command-line argument (Linux takes at most 128 KB)
#: The issue's form of a located error: ``file[:line[:col]]: error: ``.
ERROR_LINE = re.compile(r"^(?P<file>[^:\n]+)(:\d+(:\d+)?)?: error: ")


@dataclass
class Case:
    """What to run: drawn by the campaign, enough to replay it."""
    target: Target
    command: tuple[str, ...]
    mutations: tuple[Mutation, ...]
    sample: int = 0  #: which of the target's samples (modulo their number)
    member: int = 0  #: in a directory sample, which matching file (modulo their number)
    donor: int = 0  #: which sample of all targets is spliced from (modulo their number)


@dataclass
class Result:
    target: str
    command: str
    classes: str
    input_bytes: int
    exit: int | None
    first_line: str
    seconds: float
    cpu_seconds: float
    peak_mb: float
    sample: str = ""
    argv: str = ""
    failures: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    where: str = ""  #: of an internal error: the innermost layerc frame, ``file:line in function``
    reproducer: str = ""


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


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else path.stat().st_size


def _copy(src: Path, dst_dir: Path, stem: str) -> Path:
    """``src`` (a file, keeping its suffixes, or a directory) copied into ``dst_dir``."""
    if src.is_dir():
        dst = dst_dir / stem
        shutil.copytree(src, dst)
    else:
        dst = dst_dir / (stem + _suffix(src))
        shutil.copyfile(src, dst)
    return dst


def _suffix(path: Path) -> str:
    """``.json``, ``.json.gz``, ``.sqlite``: what tells a reader the format, nothing more."""
    suffixes = path.suffixes[-2:] if path.suffix in (".gz", ".bz2", ".xz", ".zst") else path.suffixes[-1:]
    return "".join(suffixes)


def prepare(case: Case, sample: Path, case_dir: Path, other: bytes = b"") -> tuple[Path, str | None]:
    """The mutated input inside ``case_dir`` (a file, or a copied directory with one member
    mutated); for an argument target, the mutated text instead (the input path is the sample's copy)."""
    target, ms = case.target, case.mutations
    case_dir.mkdir(parents=True, exist_ok=True)
    copy = _copy(sample, case_dir, "input")
    if target.argument:
        text = apply(sample.read_bytes(), ms, other).replace(b"\0", b"")
        return copy, text[:ARG_MAX].decode("utf-8", "ignore")
    if target.member:
        members = sorted(p for p in copy.glob(target.member) if p.is_file())
        victim = members[case.member % len(members)]
        victim.write_bytes(apply(victim.read_bytes(), ms, other))
    elif target.sqlite:
        apply_sqlite(str(copy), ms)
    elif target.packed:
        copy.write_bytes(apply_packed(sample.read_bytes(), ms, other))
    else:
        copy.write_bytes(apply(sample.read_bytes(), ms, other))
    return copy, None


def run_case(case: Case, sample: Path, case_dir: Path, companion: Path | None = None, other: bytes = b"") -> Result:
    """Prepare the case's input, run its command in a capped child, and check what it did."""
    target = case.target
    path, text = prepare(case, sample, case_dir, other)
    inputs = [path] + ([_copy(companion, case_dir, "with")] if companion is not None else [])
    out, tmp = case_dir / "out", case_dir / "tmp"
    out.mkdir(exist_ok=True)
    tmp.mkdir(exist_ok=True)
    fields = {"in": str(path), "out": str(out), "with": str(inputs[-1]), "text": text or ""}
    argv = [a.format(**fields) for a in case.command]
    before = [_digest(p) for p in inputs]
    size = len(text.encode()) if text is not None else _size(path)
    if text is not None:
        (case_dir / "argument.txt").write_text(text)
    run = _run(argv, case_dir, tmp)
    first = run.stderr.splitlines()[0] if run.stderr.strip() else ""
    result = Result(target.name, case.command[0], "+".join(m.kind for m in case.mutations), size,
                    run.exit, first[:300], round(run.seconds, 3), round(run.cpu, 3), round(run.peak_kb / 1024, 1),
                    sample=sample.name, argv=_shown(argv, case_dir, text))
    _check(result, run, inputs, before, out, tmp, case_dir)
    if "internal error" in result.failures:
        result.where = _where(_run(argv, case_dir, tmp, traceback=True).stderr)
    return result


_FRAME = re.compile(r'File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')


def _where(stderr: str) -> str:
    """The innermost frame of layerc's own code in a traceback (``LAYERC_TRACEBACK=1``)."""
    frames = [m for m in _FRAME.finditer(stderr) if m.group("path").startswith(str(ROOT) + "/")
              and "/tests/" not in m.group("path") and "/.venv/" not in m.group("path")]
    if not frames:
        return ""
    m = frames[-1]
    return f"{Path(m.group('path')).relative_to(ROOT)}:{m.group('line')} in {m.group('func')}"


@dataclass
class _Run:
    exit: int | None  #: None: killed at the wall-clock limit
    stderr: str
    stdout: str
    seconds: float
    cpu: float
    peak_kb: int


def _run(argv: list[str], case_dir: Path, tmp: Path, program: tuple[str, ...] = LAYERC, traceback: bool = False) -> _Run:
    """``program ARGV`` in a capped child; with ``traceback``, ``LAYERC_TRACEBACK=1`` (its output
    goes to ``traceback.txt``, the first run's files stay)."""
    err_path, out_path = (case_dir / "traceback.txt", case_dir / "traceback.out") if traceback else \
        (case_dir / "stderr.txt", case_dir / "stdout.txt")
    env = {**os.environ, "COLUMNS": "120", "TMPDIR": str(tmp)}
    env.pop("LAYERC_TRACEBACK", None)
    if traceback:
        env["LAYERC_TRACEBACK"] = "1"
    parent_peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    with open(err_path, "wb") as err_file, open(out_path, "wb") as out_file:
        proc = subprocess.Popen([*program, *argv], stdout=out_file, stderr=err_file, stdin=subprocess.DEVNULL,
                                cwd=ROOT, start_new_session=True, preexec_fn=_limits, env=env)
    polled = [0]
    try:
        status, usage = _wait4(proc.pid, t0, polled, WALL_LIMIT)
        timed_out = False
    except TimeoutError:
        os.killpg(proc.pid, signal.SIGKILL)
        _, status, usage = os.wait4(proc.pid, 0)
        timed_out = True
    seconds = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return _Run(None if timed_out else proc.returncode, _head(err_path), _head(out_path), seconds,
                usage.ru_utime + usage.ru_stime, _peak_kb(usage.ru_maxrss, parent_peak_kb, polled[0]))


def _head(path: Path) -> str:
    with open(path, "rb") as f:
        return f.read(1 << 20).decode("utf-8", "replace")


def _peak_kb(maxrss_kb: int, parent_peak_kb: int, polled_kb: int) -> int:
    """The child's own peak resident memory. Its ``ru_maxrss`` counts from the fork, when it still
    mapped this process's pages: above this process's own peak it can only be the child's; at or
    below it, the child's peak is at most that, and the VmHWM read while it ran (which starts
    afresh at exec) is the figure. Either way a peak over the bound is never missed."""
    return maxrss_kb if maxrss_kb > parent_peak_kb else max(polled_kb, 0)


def _wait4(pid: int, t0: float, polled: list[int], wall_limit: float):
    """``os.wait4`` with the wall-clock limit, reading the child's VmHWM while it runs."""
    status_file = f"/proc/{pid}/status"
    while True:
        try:
            with open(status_file) as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        polled[0] = max(polled[0], int(line.split()[1]))
                        break
        except (OSError, ValueError):
            pass
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            return status, usage
        if time.perf_counter() - t0 > wall_limit:
            raise TimeoutError
        time.sleep(0.005)


def _check(result: Result, run: _Run, inputs: list[Path], before: list[str], out: Path, tmp: Path,
           case_dir: Path) -> None:
    f = result.failures
    if run.exit is None:
        f.append(f"hang: killed after {WALL_LIMIT:.0f} s")
    elif run.exit not in (0, 1, 2):
        f.append(f"exit {run.exit}" + (" (killed by a signal)" if run.exit < 0 else ""))
    if "internal error" in run.stderr or "Traceback (most recent call last)" in run.stderr:
        f.append("internal error")
    elif run.exit == 1:
        _check_error_line(result, run)
    for p, digest in zip(inputs, before):
        if _digest(p) != digest:
            f.append(f"an input changed: {p.name}")
    left = sorted({str(p.relative_to(case_dir)) for p in case_dir.rglob("*") if p.name.endswith(".tmp")}
                  | {str(p.relative_to(case_dir)) for p in tmp.iterdir()})
    if left:
        f.append(f"temporary files left: {left[:3]}")
    if result.input_bytes <= SMALL_INPUT and run.cpu > SLOW:
        f.append(f"slow: {run.cpu:.1f} CPU s ({run.seconds:.1f} s wall) on {result.input_bytes} bytes")
    if result.peak_mb > BIG_MEMORY_MB:
        f.append(f"memory: {result.peak_mb:.0f} MB peak")


def _check_error_line(result: Result, run: _Run) -> None:
    """Exit 1 must come with a located error on stderr. Two forms are allowed and reported as
    findings: ``layerc: error:`` (names no file) and warnings printed before the located error.
    An exit 1 with nothing on stderr fails, even where a report on stdout holds the errors."""
    m = ERROR_LINE.match(result.first_line)
    later = next((line for line in run.stderr.splitlines()[1:] if ERROR_LINE.match(line)), None)
    if m and m.group("file") == "layerc":
        result.findings.append("an error that names no file ('layerc: error:')")
    elif m:
        return
    elif later and all(": warning: " in line or line.startswith(" ") for line in
                       run.stderr.splitlines()[: run.stderr.splitlines().index(later)]):
        result.findings.append("warnings before the error: its first line is a warning")
    else:
        result.failures.append("exit 1 without a 'file[:line[:col]]: error:' first line")


def _shown(argv: list[str], case_dir: Path, text: str | None) -> str:
    """The command line as a shell would take it, paths relative to the case's directory, the
    pipeline text read back from argument.txt."""
    words = ["layerc"] + [a.replace(str(case_dir) + "/", "") for a in argv]
    shown = " ".join(shlex.quote(w) for w in words)
    return shown.replace(shlex.quote(text), '"$(cat argument.txt)"') if text else shown
