"""Every command's every output option against special files, its own inputs, and SIGTERM.

A special output (``/dev/null``, ``-``, a FIFO, ``>(cat)``) receives the bytes a regular file
would and stays what it was; an output that is an input (directly, by symlink, by hard link) is
refused before anything is read; SIGTERM in the middle of writing several files leaves all of
them or none, and no temporary file. Run as root and, where the tests run as root, again as an
unprivileged user.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT

PKG = ROOT / "tests" / "optrace_pkg"
LAYERC = [sys.executable, "-m", "layerc.tools.driver"]
NOBODY = 65534
TORCH = shutil.which("python3") is not None and __import__("importlib").util.find_spec("torch") is not None


def layerc(*args, user: int | None = None, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*LAYERC, *map(str, args)], capture_output=True, timeout=timeout, cwd=cwd,
                          user=user, env={**os.environ, "COLUMNS": "200"})


@pytest.fixture(scope="module")
def samples(tmp_path_factory) -> dict[str, Path]:
    """Inputs every command can read, made once; readable by everyone (the unprivileged runs)."""
    d = tmp_path_factory.mktemp("samples")
    d.chmod(0o755)
    for p in d.parents:
        if str(p).startswith(("/tmp/", "/var/tmp/")) and p.stat().st_mode & 0o005 != 0o005 and os.geteuid() == 0:
            p.chmod(p.stat().st_mode | 0o005)
    assert layerc("gen-trace", d / "t.json.gz", "--layers", "2").returncode == 0
    assert layerc("gen-dump", "llama", d / "dump", "--layers", "2").returncode == 0
    dump = next((d / "dump").glob("*.txt"))
    cfg = d / "config.json"
    cfg.write_text('{"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,'
                   ' "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 128, "head_dim": 16}\n')
    for p in d.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return {"trace": d / "t.json.gz", "dump": dump, "config": cfg, "dir": d}


@dataclass(frozen=True)
class Command:
    """A command line whose outputs are the options in ``outputs``; ``{name}`` places samples."""

    name: str
    argv: tuple[str, ...]
    outputs: tuple[str, ...]  #: options that take one output file; "" for a positional output
    slow: bool = False


COMMANDS = [
    Command("opt", ("opt", "{dump}"), ("-o",)),
    Command("replay", ("replay", "{trace}"), ("-o",)),
    Command("perfetto", ("perfetto", "{trace}"), ("-o",)),
    Command("trace", ("trace", "{trace}"), ("--json", "--csv", "--perfetto")),
    Command("optrace", ("optrace", str(PKG), "--entry", "tinyllm.models.tiny:TinyForCausalLM", "--link-prefix", "https://src/"),
            ("-o", "--json", "--kernel-traces")),
    Command("simulate", ("simulate", "--config", "{config}", "--engines", "2"), ("-o", "--json", "--png")),
    Command("gen-trace", ("gen-trace", "--layers", "2"), ("",)),
    Command("gen-kernels", ("gen-kernels", "{dump}"), ("-o",)),
    Command("gen-nsys", ("gen-nsys", "--layers", "2", "--replays", "1"), ("",)),
    Command("gen-mem", ("gen-mem", "--log"), ("",)),
    Command("profile", ("profile", "--arch", "llama", "--n-tokens", "8", "--repeat", "1", "--warmup", "0", "--threads", "1",
                        "--no-check"), ("-o", "--json", "--png", "--profile-json"), slow=True),
]
KINDS = ("devnull", "stdout", "fifo", "procsub")


def argv_for(cmd: Command, samples: dict[str, Path], targets: dict[str, str]) -> list[str]:
    out = [a.format(**samples) for a in cmd.argv]
    for option, target in targets.items():
        out += [target] if option == "" else [option, target]
    return out


def _regular(cmd: Command, samples, tmp: Path) -> dict[str, bytes]:
    """Each output's bytes when it is a regular file: what a special file must receive."""
    files = {o: tmp / f"ref{i}{_ext(o, cmd)}" for i, o in enumerate(cmd.outputs)}
    r = layerc(*argv_for(cmd, samples, {o: str(p) for o, p in files.items()}), cwd=tmp)
    assert r.returncode == 0, r.stderr.decode()
    return {o: p.read_bytes() for o, p in files.items()}


def _ext(option: str, cmd: Command) -> str:
    return {"--json": ".json", "--csv": ".csv", "--png": ".png", "--profile-json": ".json", "--kernel-traces": ".md"}.get(
        option, ".sqlite" if cmd.name == "gen-nsys" else ".json" if cmd.name == "gen-trace" else "")


#: Outputs whose bytes depend on the run (timings, wall clocks): only their presence is compared.
#: optrace's report names where the kernel traces went, which differs from run to run here.
VARIABLE = {("profile", "-o"), ("profile", "--json"), ("profile", "--png"), ("profile", "--profile-json"),
            ("optrace", "-o")}


def _rotations(cmd: Command) -> list[dict[str, str]]:
    """Each output option meets each special kind once, in as few runs as there are kinds;
    at most one option is ``-`` per run (one stdout)."""
    return [{o: KINDS[(run + i) % len(KINDS)] for i, o in enumerate(cmd.outputs)} for run in range(len(KINDS))]


def _run_special(cmd: Command, samples, tmp: Path, kinds: dict[str, str], user: int | None):
    """Run with each option on its special kind; the bytes each received, and the command's result."""
    targets, readers, received = {}, [], {}
    for i, (option, kind) in enumerate(kinds.items()):
        if kind == "devnull":
            targets[option] = "/dev/null"
        elif kind == "stdout":
            targets[option] = "-"
        elif kind == "fifo":
            fifo, got = tmp / f"fifo{i}", tmp / f"fifo{i}.got"
            os.mkfifo(fifo)
            if user is not None:
                os.chown(fifo, user, user)
            readers.append(subprocess.Popen(f"cat {shlex.quote(str(fifo))} > {shlex.quote(str(got))}", shell=True))
            targets[option], received[option] = str(fifo), got
        else:
            got = tmp / f"procsub{i}.got"
            targets[option], received[option] = f">(cat > {shlex.quote(str(got))})", got
    argv = argv_for(cmd, samples, targets)
    line = " ".join(a if a.startswith(">(") else shlex.quote(a) for a in [*LAYERC, *argv]) + " > stdout.bin"
    r = subprocess.run(["bash", "-c", line], capture_output=True, timeout=180, cwd=tmp, user=user,
                       env={**os.environ, "COLUMNS": "200"})
    time.sleep(0.2)  # process substitutions finish after bash
    for reader in readers:
        try:
            reader.wait(timeout=10)
        except subprocess.TimeoutExpired:
            reader.kill()
    out = {o: (received[o].read_bytes() if o in received else None) for o in kinds}
    for o, kind in kinds.items():
        if kind == "stdout":
            out[o] = (tmp / "stdout.bin").read_bytes()
    return r, out


def _cases():
    for cmd in COMMANDS:
        for n, kinds in enumerate(_rotations(cmd)[: 1 if cmd.slow else None]):  # profile: one run is long enough
            marks = [pytest.mark.skipif(not TORCH, reason="needs torch")] if cmd.slow else []
            yield pytest.param(cmd, kinds, id=f"{cmd.name}-{n}", marks=marks)


@pytest.mark.parametrize("cmd,kinds", list(_cases()))
def test_special_outputs_receive_the_bytes_and_stay_special(cmd, kinds, samples, tmp_path):
    null_before = os.stat("/dev/null")
    (tmp_path / "ref").mkdir()
    ref = _regular(cmd, samples, tmp_path / "ref")
    r, got = _run_special(cmd, samples, tmp_path, kinds, None)
    assert r.returncode == 0, r.stderr.decode()
    assert b"internal error" not in r.stderr
    null_after = os.stat("/dev/null")
    assert stat.S_ISCHR(null_after.st_mode) and null_after.st_rdev == null_before.st_rdev
    for option, kind in kinds.items():
        if kind == "devnull":
            continue
        if kind == "fifo":
            assert stat.S_ISFIFO(os.stat(tmp_path / f"fifo{list(kinds).index(option)}").st_mode)
        data = got[option]
        assert data, f"{cmd.name} {option or 'OUT'} -> {kind}: nothing received"
        if (cmd.name, option) not in VARIABLE:
            assert data == ref[option], f"{cmd.name} {option or 'OUT'} -> {kind}: other bytes than a regular file's"
    # nothing else appeared: no temporary file, no companion of a special output
    left = {p.name for p in tmp_path.iterdir()} - {"ref", "stdout.bin"}
    assert all(n.startswith(("fifo", "procsub")) for n in left), left


#: Runs ``layerc`` as an unprivileged user: warmed up as root first (one run to regular files:
#: the interpreter's own library may sit where only root reads, e.g. under /root/.pyenv), then
#: with root's rights dropped for good, the run under test. Argument lists split at "--then".
AS_NOBODY = f"""
import os, sys
from layerc.tools.driver import main
cut = sys.argv.index("--then")
warm, real = sys.argv[1:cut], sys.argv[cut + 1:]
if main(warm) != 0:
    sys.exit("warm-up failed")
os.setgroups([]); os.setgid({NOBODY}); os.setuid({NOBODY})
sys.exit(main(real))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="runs the commands as an unprivileged user: needs root to switch")
@pytest.mark.parametrize("cmd", [c for c in COMMANDS if not c.slow], ids=lambda c: c.name)
def test_special_outputs_as_an_unprivileged_user(cmd, samples, tmp_path):
    """/dev/null, ``-`` and a FIFO of the user's own, written by a user who may not make files in
    /dev: bytes received, specials unchanged."""
    warm_dir = tmp_path / "warm"
    warm_dir.mkdir()
    with tempfile.TemporaryDirectory(prefix="layerc-nobody-") as real:  # pytest's base directory is root's only
        real_dir = Path(real)
        real_dir.chmod(0o777)
        _as_nobody(cmd, samples, warm_dir, real_dir)


def _as_nobody(cmd: Command, samples, warm_dir: Path, real_dir: Path) -> None:
    kinds = ("devnull", "stdout", "fifo")
    warm = argv_for(cmd, samples, {o: str(warm_dir / f"w{i}{_ext(o, cmd)}") for i, o in enumerate(cmd.outputs)})
    targets, fifo, got = {}, real_dir / "fifo", real_dir / "fifo.got"
    os.mkfifo(fifo)
    os.chown(fifo, NOBODY, NOBODY)
    chosen = {o: kinds[i % len(kinds)] for i, o in enumerate(cmd.outputs)}
    for o, kind in chosen.items():
        targets[o] = {"devnull": "/dev/null", "stdout": "-", "fifo": str(fifo)}[kind]
    reader = subprocess.Popen(f"cat {shlex.quote(str(fifo))} > {shlex.quote(str(got))}", shell=True) \
        if "fifo" in chosen.values() else None
    r = subprocess.run([sys.executable, "-c", AS_NOBODY, *warm, "--then", *argv_for(cmd, samples, targets)],
                       capture_output=True, timeout=180, cwd=real_dir, env={**os.environ, "COLUMNS": "200"})
    if reader is not None:
        try:
            reader.wait(timeout=10)
        except subprocess.TimeoutExpired:
            reader.kill()
    assert r.returncode == 0, r.stderr.decode()
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode) and stat.S_ISFIFO(os.stat(fifo).st_mode)
    if "stdout" in chosen.values():
        assert r.stdout
    if reader is not None:
        assert got.read_bytes()
    assert not [p for p in real_dir.iterdir() if p.name not in ("fifo", "fifo.got")]


# -- an output that is an input ------------------------------------------------------------

#: (command line, the input it reads, the output options to point at it)
SAME_FILE = [
    (("opt", "{dump}"), "dump", ("-o",)),
    (("replay", "{trace}"), "trace", ("-o",)),
    (("perfetto", "{trace}"), "trace", ("-o",)),
    (("trace", "{trace}"), "trace", ("--json", "--csv", "--perfetto")),
    (("gen-kernels", "{dump}"), "dump", ("-o",)),
    (("simulate", "--config", "{config}"), "config", ("-o", "--json", "--png")),
    (("simulate", "--dump", "{dump}"), "dump", ("--json",)),
    (("optrace", "{src}", "--entry", "TinyForCausalLM"), "src", ("-o", "--json", "--kernel-traces")),
    (("profile", "--config", "{config}"), "config", ("--json",)),
]


def _same_file_cases():
    for argv, what, options in SAME_FILE:
        for option in options:
            for how in ("direct", "symlink", "hardlink"):
                yield pytest.param(argv, what, option, how, id=f"{argv[0]}-{option}-{how}")


@pytest.mark.parametrize("argv,what,option,how", list(_same_file_cases()))
def test_an_output_that_is_an_input_is_refused(argv, what, option, how, samples, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    if what == "src":
        shutil.copytree(PKG, src / "pkg")
        original = src / "pkg" / "tinyllm" / "models" / "tiny.py"
    else:
        original = src / samples[what].name
        shutil.copy(samples[what], original)
    before = original.read_bytes()
    target = {"direct": original, "symlink": tmp_path / "link", "hardlink": tmp_path / "hard"}[how]
    if how == "symlink":
        target.symlink_to(original)
    elif how == "hardlink":
        os.link(original, target)
    args = [a.format(**{**samples, what: original}) for a in argv] + [option, str(target)]
    r = layerc(*args)
    assert r.returncode == 1, r.stderr.decode()
    first = r.stderr.decode().splitlines()[0]
    assert first == f"{target}: error: refusing to write {target}: it is an input of this command" or \
        (first.startswith(f"{target}: error: refusing to write") and "input" in first), first
    assert original.read_bytes() == before and not os.path.islink(original)
    if how == "symlink":
        assert os.readlink(target) == str(original)
    assert not [p for p in tmp_path.rglob("*.tmp")]


def test_an_output_inside_an_input_directory_is_refused_when_it_is_a_file_read(samples, tmp_path):
    """A dump directory's file is an input once read: an output landing on it is refused then,
    and the input stays as it was."""
    d = tmp_path / "dump"
    shutil.copytree(samples["dump"].parent, d)
    dump = next(d.glob("*.txt"))
    before = dump.read_bytes()
    r = layerc("opt", d, "-o", dump)
    assert r.returncode == 1 and "refusing to write" in r.stderr.decode()
    assert dump.read_bytes() == before


def test_two_outputs_that_are_one_file_are_refused(samples, tmp_path):
    out = tmp_path / "o.json"
    out.write_text("old\n")
    os.link(out, tmp_path / "same.json")
    r = layerc("trace", samples["trace"], "--json", out, "--csv", tmp_path / "same.json")
    assert r.returncode == 1 and "two outputs name the same file" in r.stderr.decode()
    assert out.read_text() == "old\n"


# -- inputs that are not regular files -------------------------------------------------------

@pytest.mark.parametrize("argv", [("trace", "{x}"), ("opt", "{x}"), ("mem", "{x}"), ("perfetto", "{x}", "-o", "{out}")])
def test_a_special_input_is_a_clear_error(argv, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for x, says in (("/dev/null", "a character device, not a regular file"), (str(fifo), "a FIFO (named pipe), not a regular file")):
        r = layerc(*[a.format(x=x, out=tmp_path / "o.pftrace") for a in argv], timeout=30)
        assert r.returncode == 1, r.stderr.decode()
        assert r.stderr.decode().startswith(f"{x}: error: {says}"), r.stderr.decode()
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_an_unreadable_input_is_a_clear_error(samples, tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads every file")
    f = tmp_path / "t.json.gz"
    shutil.copy(samples["trace"], f)
    f.chmod(0)
    r = layerc("trace", f)
    assert r.returncode == 1 and r.stderr.decode().startswith(f"{f}: error: cannot read: permission denied")


# -- SIGTERM while writing several files ------------------------------------------------------

def test_sigterm_leaves_all_outputs_or_none_and_no_temporary_file(tmp_path):
    big = tmp_path / "big.json.gz"
    assert layerc("gen-trace", big, "--model", "deepseek_v3", "--decode", "4").returncode == 0
    names = ("o.json", "o.csv", "o.pftrace")
    delays = [0.05 * i for i in range(1, 40, 3)]
    outcomes = set()
    for n, delay in enumerate(delays):
        out = tmp_path / f"run{n}"
        out.mkdir()
        p = subprocess.Popen([*LAYERC, "trace", str(big), "--json", str(out / names[0]), "--csv", str(out / names[1]),
                              "--perfetto", str(out / names[2])], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             start_new_session=True)
        time.sleep(delay)
        p.send_signal(signal.SIGTERM)
        try:
            _, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            raise
        present = sorted(q.name for q in out.iterdir())
        assert present in ([], sorted(names)), (delay, present, err.decode())
        assert b"internal error" not in err
        outcomes.add((p.returncode, bool(present)))
    assert (143, False) in outcomes  # some runs were cut short, and left nothing


# -- without Graphviz --------------------------------------------------------------------------

def test_without_graphviz_json_and_dot_are_written_and_one_warning_says_how_to_install(samples, tmp_path):
    bare = tmp_path / "bin"  # a PATH with no 'dot' on it
    bare.mkdir()
    out = tmp_path / "out"
    r = subprocess.run([*LAYERC, "layer", str(samples["dump"]), "1", "-o", str(out)], capture_output=True, timeout=120,
                       env={**os.environ, "PATH": str(bare)})
    assert r.returncode == 0, r.stderr.decode()
    assert sorted(p.suffix for p in out.iterdir()) == [".dot", ".json"]
    warnings = [line for line in r.stderr.decode().splitlines() if "warning" in line]
    assert len(warnings) == 1 and "Graphviz" in warnings[0] and "apt-get install graphviz" in warnings[0]


def test_sigterm_inside_c_code_is_reported_as_terminated(monkeypatch, capsys):
    """A SIGTERM that lands inside C code (numpy's extension importing a module, say) comes out as
    that code's own error (an ImportError): the run still ends as terminated, not as a bug."""
    import argparse
    import signal

    from layerc.ir.diagnostics import DiagnosticEngine
    from layerc.tools import driver

    def run(args):
        try:
            driver._terminated(signal.SIGTERM, None)
        except driver.Terminated as e:
            raise ImportError("PyCapsule_Import could not import module \"datetime\"") from e

    monkeypatch.setattr(driver, "_terminating", False)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        args = argparse.Namespace(max_decompressed=None, diagnostics=DiagnosticEngine(sys.stderr, "text"))
        assert driver._run_command(run, args) == 143
    finally:
        signal.signal(signal.SIGTERM, previous)
    err = capsys.readouterr().err
    assert "terminated" in err and "internal error" not in err


@pytest.mark.parametrize("same", ["new.json", "-"])
def test_two_outputs_on_one_new_path_or_both_on_stdout_are_refused(samples, tmp_path, same):
    """Not only a file that exists: two outputs naming one new file, or both stdout, would write
    one over (or into) the other."""
    out = same if same == "-" else str(tmp_path / same)
    r = layerc("trace", samples["trace"], "--json", out, "--csv", out)
    assert r.returncode == 1 and "two outputs name the same file" in r.stderr.decode()
    assert not (tmp_path / "new.json").exists()
