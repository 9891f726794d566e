"""Mutated memory-planner dumps: ``layerc mem`` answers with a result or an error at a place in the
input, never with an internal error, a hang, a memory blow-up, a changed input or a temporary file
left behind.

The mutator starts from what ``layerc gen-mem`` writes (a ``TRITON_DUMP_WS_GRAPHS`` directory of
three dumps, and the same kernel as a debug log) and applies byte flips, truncation, splicing,
line edits, numeric extremes, type swaps (a number where a quoted label stood, text where a number
did), deep nesting (subgraphs, braces, HTML tables) and huge labels, and gzips the log now and
then. The command-line checks run ``layerc mem`` in capped child processes (2 GB of address space,
a timeout, the process group killed past it); the same mutations run in-process, many more of
them. Targeted tests pin the fuzzer's findings: an interval bound of 2**31, a 20 MB label, nesting
100,000 deep, a gzip bomb, a graph Graphviz cannot draw, and pictures that hostile data would make
huge.
"""

from __future__ import annotations

import gzip
import io
import re
import struct
import subprocess
import tempfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from layerc.backends import graphviz, mem_chart, mem_combine
from layerc.grammar._lark import MAX_NESTING
from layerc.grammar.ws_memory import MAX_LABEL
from layerc.ir.memory import SMEM, TMEM, Buffers, Kernel, MemoryModule
from layerc.passes.base import Context
from layerc.passes.mem_liveness import MemLiveness

from tests.layerc_cli import run_layerc
from tests import capped
from tests.mutations import BASIC, basic, nth, replace_nth

MEMORY = 2 << 30  #: address space of a child layerc
TIMEOUT = 60  #: seconds a child may run (a clean run takes about one)
DUMPS = ("smem_liveness_0.dot", "combined_graph_1.dot", "tmem_liveness_2.dot")
needs_dot = pytest.mark.skipif(not graphviz.available(), reason="Graphviz 'dot' is not installed")


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> dict[str, bytes]:
    """The valid inputs the mutations start from: the log, and each file of the directory."""
    root = tmp_path_factory.mktemp("seeds")
    rc, _, err = run_layerc("gen-mem", root / "d")
    assert rc == 0, err
    rc, _, err = run_layerc("gen-mem", "--log", root / "r.log")
    assert rc == 0, err
    assert sorted(p.name for p in (root / "d").iterdir()) == sorted(DUMPS)
    return {"log": (root / "r.log").read_bytes(), **{name: (root / "d" / name).read_bytes() for name in DUMPS}}


# -- the mutator ---------------------------------------------------------------------------------

EXTREMES = [b"0", b"-1", b"", b"abc", b"1.5", b"2147483647", b"2147483648", str(2**63).encode(), str(10**100).encode(),
            b"9" * 5000, b"0" * 5000 + b"1", "\u0663".encode(), "\u00b2".encode()]
#: Where each kind of nesting is opened: braces after a line that opens one, tags inside a cell.
NESTS = {b"subgraph s {": (b"}", rb"\{\n"), b"{": (b"}", rb"\{\n"), b"<TABLE><TR><TD>": (b"</TD></TR></TABLE>", rb"<TD>"),
         b"<B>": (b"</B>", rb"<TD>")}
_NUMBER = re.compile(rb"\d+")
_QUOTED = re.compile(rb'"[^"\n]*"')
_LABEL = re.compile(rb'label="')

mutations = st.one_of(
    *BASIC.values(),
    st.tuples(st.just("number"), st.integers(0, 1 << 20), st.sampled_from(EXTREMES)),
    st.tuples(st.just("retype"), st.integers(0, 1 << 20), st.sampled_from([b"12", b"-7", b"1e999", b"<x>", b'""', b"a b"])),
    st.tuples(st.just("nest"), st.integers(0, 1 << 20), st.sampled_from(list(NESTS)),
              st.sampled_from([2, MAX_NESTING - 1, MAX_NESTING + 1, 5000, 100_000]), st.booleans()),
    st.tuples(st.just("huge"), st.integers(0, 1 << 20), st.sampled_from([b"a", b"9", b'\\"', b", x", b" = f(", b"<TR>", b"\\n", b"|"]),
              st.sampled_from([1000, 100_000, MAX_LABEL])),
)


def mutate(data: bytes, m: tuple) -> bytes:
    """One mutation (tests/mutations.py's, or one of a memory-planner dump's own)."""
    done = basic(data, m)
    if done is not None:
        return done
    kind, k, *rest = m
    n = max(len(data), 1)
    if kind in ("number", "retype"):
        return replace_nth(_NUMBER if kind == "number" else _QUOTED, data, k, rest[0])
    if kind == "nest":
        opener, depth, closed = rest
        closer, where = NESTS[opener]
        hit = nth(re.compile(where), data, k)
        at = hit.end() if hit else k % n
        return data[:at] + opener * depth + (closer * depth if closed else b"") + data[at:]
    if kind == "huge":
        unit, count = rest
        hit = nth(_LABEL, data, k)
        at = hit.end() if hit else k % n
        return data[:at] + unit * (count // len(unit) + 1) + data[at:]
    raise AssertionError(kind)


def mutated(data: bytes, ms: list[tuple]) -> bytes:
    for m in ms:
        data = mutate(data, m)
    return data


def write_inputs(root: Path, seeds: dict[str, bytes], ms: list[tuple], file: int, packing: str) -> dict[str, Path]:
    """The mutated log (``packing``: plain, gzipped, or gzipped and cut short) and the directory
    with its ``file``-th dump mutated, under ``root``."""
    log = mutated(seeds["log"], ms)
    if packing != "plain":
        log = gzip.compress(log, compresslevel=1)
        log = log[: len(log) // 2] if packing == "cut" else log
    paths = {"log": root / ("r.log" if packing == "plain" else "r.log.gz"), "dir": root / "d"}
    paths["log"].write_bytes(log)
    paths["dir"].mkdir()
    for i, name in enumerate(DUMPS):
        (paths["dir"] / name).write_bytes(mutated(seeds[name], ms) if i == file else seeds[name])
    return paths


def snapshot(path: Path) -> dict[str, bytes]:
    files = sorted(path.iterdir()) if path.is_dir() else [path]
    return {str(p): p.read_bytes() for p in files}


# -- running layerc on it --------------------------------------------------------------------------


def _start(argv: list[str]) -> subprocess.Popen:
    return capped.start(argv, memory=MEMORY)


def _finish(proc: subprocess.Popen, argv: list[str]) -> tuple[int, str, str]:
    done = capped.finish(proc, argv, TIMEOUT)
    return done.returncode, done.stdout, done.stderr


def check_answer(rc: int, out: str, err: str, input_path: Path, outdir: Path, argv: list[str]) -> None:
    """Exit 0 or 1; never an internal error; exit 1 always with an error that names the input
    (or, for a directory, one of its files) first on stderr, whether the input could not be read
    or the checks found errors (then the report says so too); no temporary file is left in the
    output directory."""
    shown = f"layerc {' '.join(argv)[:200]} -> {rc}\n{err[:2000]}"
    assert rc in (0, 1), shown
    assert "internal error" not in err + out and "Traceback" not in err, shown
    if rc == 1:
        inside = r"(/[^/:]+)?" if input_path.is_dir() else ""
        assert re.match(rf"^{re.escape(str(input_path))}{inside}(:\d+(:\d+)?)?: error: ", err), shown + out[-2000:]
        if re.search(r"^\d+ kernel\(s\); ", out, re.M):  # the input was read: the checks found errors
            assert re.search(r"^\d+ kernel\(s\); [1-9]\d* error\(s\)", out, re.M), shown + out[-2000:]
    if outdir.exists():
        left = [p.name for p in outdir.iterdir() if p.name.startswith(".") or p.name.endswith(".tmp")]
        assert not left, f"temporary files left in {outdir}: {left}\n{shown}"


def check_cli(paths: dict[str, Path], render: bool = False) -> None:
    """``layerc mem`` on the log and on the directory, side by side in capped children."""
    before = {kind: snapshot(p) for kind, p in paths.items()}
    runs = {kind: ["mem", str(p), "-o", str(p.parent / f"out_{kind}"), *([] if render else ["--no-render"])]
            for kind, p in paths.items()}
    procs = {kind: _start(argv) for kind, argv in runs.items()}
    for kind, proc in procs.items():
        rc, out, err = _finish(proc, runs[kind])
        check_answer(rc, out, err, paths[kind], paths[kind].parent / f"out_{kind}", runs[kind])
    assert {kind: snapshot(p) for kind, p in paths.items()} == before, "layerc changed its input"


def check_in_process(paths: dict[str, Path]) -> None:
    for kind, p in paths.items():
        outdir = p.parent / f"out_{kind}"
        argv = ["mem", p, "-o", outdir, "--no-render"]
        rc, out, err = run_layerc(*argv)
        check_answer(rc, out, err, p, outdir, list(map(str, argv)))


mutation_lists = st.lists(mutations, min_size=1, max_size=3)
packings = st.sampled_from(["plain", "plain", "plain", "gz", "cut"])


# -- the command line, on mutated inputs -----------------------------------------------------------


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ms=mutation_lists, file=st.integers(0, len(DUMPS) - 1), packing=packings)
def test_cli_answers_mutated_inputs(seeds, ms, file, packing):
    with tempfile.TemporaryDirectory() as tmp:
        check_cli(write_inputs(Path(tmp), seeds, ms, file, packing))


@needs_dot
@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ms=st.lists(mutations, min_size=1, max_size=2), file=st.integers(0, len(DUMPS) - 1))
def test_cli_renders_mutated_inputs(seeds, ms, file):
    """Graphviz and the chart on a mutated directory."""
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_inputs(Path(tmp), seeds, ms, file, "plain")
        check_cli({"dir": paths["dir"]}, render=True)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ms=st.lists(mutations, min_size=1, max_size=4), file=st.integers(0, len(DUMPS) - 1), packing=packings)
def test_in_process_answers_mutated_inputs(seeds, ms, file, packing):
    """The same checks on many more mutations, without the cost of a process each."""
    with tempfile.TemporaryDirectory() as tmp:
        check_in_process(write_inputs(Path(tmp), seeds, ms, file, packing))


# -- what the fuzzer found, pinned -----------------------------------------------------------------


def _run_one(path: Path, *extra: str) -> tuple[int, str, Path]:
    """``layerc mem PATH -o OUT EXTRA`` in a capped child, checked as above: (status, stderr,
    the output directory)."""
    outdir = path.parent / f"out_{path.name}"
    argv = ["mem", str(path), "-o", str(outdir), *extra]
    rc, out, err = _finish(_start(argv), argv)
    check_answer(rc, out, err, path, outdir, argv)
    return rc, err, outdir


def _edited(seed: bytes, *edits: tuple[bytes, bytes]) -> bytes:
    for old, new in edits:
        assert old in seed, old
        seed = seed.replace(old, new, 1)
    return seed


def test_an_interval_bound_past_2_31_is_an_error_at_its_digits(seeds, tmp_path):
    """[36-2147483648) took 16.8 GB (a live curve with a slot per operation id); now every number
    of a dump is below 2**31, and the curve is sparse below that."""
    path = tmp_path / "r.log"
    path.write_bytes(_edited(seeds["log"], (b'label="k B0 [36-77) size=32768"', b'label="k B0 [36-2147483648) size=32768"')))
    rc, err, _ = _run_one(path, "--no-render")
    first = err.splitlines()[0]
    assert rc == 1 and re.match(rf"{re.escape(str(path))}:\d+:21: error: 2147483648 is out of range for an operation id", first), err
    path.write_bytes(_edited(seeds["log"], (b"<TD>[49-67)</TD>", b"<TD>[49-" + b"9" * 5000 + b")</TD>")))
    rc, err, _ = _run_one(path, "--no-render")
    assert rc == 1 and "is out of range for an operation id" in err.splitlines()[0], err


@needs_dot
def test_the_widest_interval_is_drawn_sparse(seeds, tmp_path):
    """[36-2147483647) reads, and its curve, JSON, trace and chart stay small."""
    path = tmp_path / "r.log"
    path.write_bytes(_edited(seeds["log"], (b'label="k B0 [36-77) size=32768"', b'label="k B0 [36-2147483647) size=32768"')))
    rc, err, outdir = _run_one(path)  # rendered: Graphviz and the chart too
    # the summary row disagrees: a finding, in the report and first on stderr
    assert rc == 1 and re.match(rf"{re.escape(str(path))}:\d+:\d+: error: SMEM summary row of 'k' disagrees", err), err
    doc = __import__("json").loads((outdir / "memory.json").read_text())
    steps = doc["kernels"][0]["smem"]["steps"]
    assert steps[-1] == [2**31 - 1, 0] and len(steps) <= 2 * len(doc["kernels"][0]["buffers"])
    assert (outdir / "memory.pftrace").stat().st_size < 100_000
    (chart_path,) = outdir.glob("*.liveness.png")
    chart = Image.open(chart_path)
    assert chart.width * chart.height < 20_000_000


def test_a_huge_label_is_refused_in_bounded_memory(seeds, tmp_path):
    """A 10 MB DOT label (50 MB took 15.7 GB: the lexer's quoted-string expression kept a
    backtracking frame per character, so this one needed 3 GB) is an error at the label, in a
    child capped at 2 GB."""
    path = tmp_path / "d"
    path.mkdir()
    for name in DUMPS:
        (path / name).write_bytes(seeds[name])
    old = b'[label="[54] qkT = tc_gen5_mma(k, q)\\nL1"'
    (path / DUMPS[1]).write_bytes(_edited(seeds[DUMPS[1]], (old, old[:-5] + b", x" * 3_500_000 + b')\\nL1"')))
    rc, err, _ = _run_one(path, "--no-render")
    first = err.splitlines()[0]
    assert rc == 1 and re.match(rf"{re.escape(str(path / DUMPS[1]))}:\d+:\d+: error: an id or label of 10,5\d\d,\d\d\d characters "
                                rf"\(layerc reads up to {MAX_LABEL:,}\)", first), err
    assert len(err) < 2000, "the error quotes its input at length"


PATHOLOGICAL = {  # labels under the cap that made regular expressions scan again and again
    "op label": (b'[label="[54] qkT = tc_gen5_mma(k, q)\\nL1"', b'[label="[54] ' + b"a = f(" * 170_000 + b'x)\\nL1"'),
    "summary rows": (b"<TR><TD>dv</TD>", b"<TR><TD>dv</TD>" + b"<TR></TR >" * 90_000),
    "escaped quotes": (b'label="dv 128x128 [40-86) [2 OperandD]"', b'label="' + b'\\"' * 500_000 + b'"'),
    "an open comment": (b"  // Time axis\n", b"  /*" + b"*" * 5_000_000),
    "a kernel name": (b"tt.func public @_attn_bwd(", b"tt.func public @" + b"a" * 2_000_000 + b"("),
}


def test_pathological_text_is_read_in_linear_time(seeds, tmp_path):
    procs = []
    for i, (old, new) in enumerate(PATHOLOGICAL.values()):
        path = tmp_path / f"p{i}.log"
        path.write_bytes(_edited(seeds["log"], (old, new)))
        argv = ["mem", str(path), "-o", str(tmp_path / f"out{i}"), "--no-render"]
        procs.append((path, argv, _start(argv)))
    for i, (path, argv, proc) in enumerate(procs):
        rc, out, err = _finish(proc, argv)
        check_answer(rc, out, err, path, tmp_path / f"out{i}", argv)


@pytest.mark.parametrize("where, opener, closer, depth", [
    (b"  subgraph cluster_partition_0 {\n", b"subgraph s {", b"}", 100_000),
    (b"  subgraph cluster_partition_0 {\n", b"subgraph {", b"}", MAX_NESTING),
    (b"<TD>dv</TD>", b"<TABLE><TR><TD>", b"</TD></TR></TABLE>", 5000),
])
def test_deep_nesting_is_a_located_error(seeds, tmp_path, where, opener, closer, depth):
    name = DUMPS[1] if b"partition" in where else DUMPS[2]
    path = tmp_path / name
    text = _edited(seeds[name], (where, where + opener * depth + closer * depth))
    path.write_bytes(text)
    rc, _, err = run_layerc("mem", path, "--no-render")
    assert rc == 1 and re.match(rf"{re.escape(str(path))}:\d+:\d+: error: nesting deeper than {MAX_NESTING}\n", err), err


def test_nesting_under_the_limit_still_reads(seeds, tmp_path):
    path = tmp_path / DUMPS[1]  # the digraph and the partition cluster are two levels
    opened = b"  subgraph cluster_partition_0 {\n"
    path.write_bytes(_edited(seeds[DUMPS[1]], (opened, opened + b"subgraph {" * (MAX_NESTING - 2) + b"}" * (MAX_NESTING - 2))))
    rc, _, err = run_layerc("mem", path, "--no-render")
    assert rc == 0, err


def test_a_gzip_bomb_is_refused(seeds, tmp_path):
    """A 100 KB log.gz that inflates to 100 MB stops at the limit (set low, to be quick), in a
    capped child; the limit is on the stream, nothing past it is inflated."""
    path = tmp_path / "r.log.gz"
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    with open(path, "wb") as f:
        f.write(z.compress(seeds["log"]))
        for _ in range(100):
            f.write(z.compress(b" " * (1 << 20)))
        f.write(z.flush())
    rc, err, outdir = _run_one(path, "--no-render", "--max-decompressed", "8M")
    assert rc == 1 and re.match(rf"{re.escape(str(path))}: error: gzip data inflates past", err), err
    assert not outdir.exists()


@needs_dot
def test_a_graph_graphviz_cannot_draw_is_an_error_at_the_graph(seeds, tmp_path):
    """The reader leaves drawing attributes to Graphviz: a node 100,000 inches wide asks cairo for
    gigabytes; ``dot`` runs under a memory limit, and its failure names the graph."""
    path = tmp_path / "d"
    path.mkdir()
    for name in DUMPS:
        (path / name).write_bytes(seeds[name])
    old = b'fillcolor="lightblue", color=darkgreen];'
    (path / DUMPS[1]).write_bytes(_edited(seeds[DUMPS[1]], (old, old[:-2] + b", width=100000, height=100000];")))
    rc, err, outdir = _run_one(path)
    assert rc == 1 and re.match(rf"{re.escape(str(path / DUMPS[1]))}:\d+:1: error: Graphviz 'dot' failed rendering png", err), err
    assert not outdir.exists()


def test_reversed_intervals_everywhere_are_findings(seeds, tmp_path):
    """Every interval ends before it starts: findings, not an empty axis to index."""
    path = tmp_path / "r.log"
    path.write_bytes(re.sub(rb"\[(\d+)-(\d+)\)", rb"[\2-\1)", seeds["log"]))
    rc, out, err = run_layerc("mem", path, "--no-render", "-o", tmp_path / "out")
    assert rc == 1 and "error: liveness [77-36) of 'k' ends before it starts" in out
    first, source, caret, note = err.rstrip("\n").split("\n")
    assert first == f"{path}:38:12: error: liveness [77-36) of 'k' ends before it starts", err
    assert source[caret.index("^"):].startswith("k B0 [77-36)") and re.fullmatch(r" *\^", caret), err
    assert re.fullmatch(r"layerc mem: note: \d+ error\(s\) in all; the report lists every finding", note), err


# -- exit 1 always says why, on stderr ----------------------------------------------------------------
#
# The fuzzer's 'mem' cases that exited 1 with an empty stderr: deep nesting and flipped bytes that
# leave the input readable but make the checks find errors (a summary row that no longer agrees with
# its cluster). The findings were in the report on stdout only; now the first one that decides the
# exit status is also a located error, first on stderr, whatever stdout is (JSON, a pipe, a file).

#: A data row of a summary table (not its header) and its cells: what a flip or a nesting there
#: always turns into an error (the row disagrees with its cluster, or no longer reads).
_SUMMARY_ROW = re.compile(rb"<TR><TD>(?!<B>)(.*?)</TR>")
_CELL_TEXT = re.compile(rb"<TD>([^<]+)</TD>")
#: The fuzzer's nestings: brackets, parentheses, braces, JSON objects and angle brackets.
OPENERS = [(b"[", b"]"), (b"(", b")"), (b"{", b"}"), (b'{"a":', b"}"), (b"<", b">")]
SUMMARIES = ("log", DUMPS[0], DUMPS[2])  #: the inputs with summary tables (the combined graph has none)


def _cells(data: bytes) -> list[tuple[int, int]]:
    return [m.span(1) for row in _SUMMARY_ROW.finditer(data) for m in _CELL_TEXT.finditer(data, row.start(), row.end())]


def flip_in_cell(data: bytes, cell: int, at: int, bit: int) -> bytes:
    """One bit of one byte of a summary cell flipped (a NUL becomes \x01, as the fuzzer does)."""
    a, b = _cells(data)[cell % len(_cells(data))]
    pos = a + at % (b - a)
    return data[:pos] + bytes([(data[pos] ^ (1 << bit)) or 1]) + data[pos + 1 :]


def nest_in_cell(data: bytes, cell: int, at: int, opener: int, depth: int, closed: bool) -> bytes:
    """The fuzzer's deep nesting (DEPTH openers, a 1, the closers or none) inside a summary cell."""
    a, b = _cells(data)[cell % len(_cells(data))]
    pos = a + at % (b - a + 1)
    o, c = OPENERS[opener % len(OPENERS)]
    return data[:pos] + o * depth + b"1" + (c * depth if closed else b"") + data[pos:]


def nest_anywhere(data: bytes, at: int, opener: int, depth: int, closed: bool) -> bytes:
    pos = at % (len(data) + 1)
    o, c = OPENERS[opener % len(OPENERS)]
    return data[:pos] + o * depth + b"1" + (c * depth if closed else b"") + data[pos:]


def flip_anywhere(data: bytes, at: int, stride: int, bits: int) -> bytes:
    """The fuzzer's flip: 1 to 8 bytes near one place, one bit each."""
    out = bytearray(data)
    for i in range(1 + bits % 8):
        j = (at + i * stride) % len(out)
        out[j] = (out[j] ^ (1 << (bits + i) % 8)) or 1
    return bytes(out)


def _mutated_inputs(root: Path, seeds: dict[str, bytes], which: str, edit) -> Path:
    """The log, or the directory with dump ``which``, edited by ``edit`` (bytes -> bytes)."""
    if which == "log":
        path = root / "r.log"
        path.write_bytes(edit(seeds["log"]))
        return path
    path = root / "d"
    path.mkdir()
    for name in DUMPS:
        (path / name).write_bytes(edit(seeds[name]) if name == which else seeds[name])
    return path


def _located_first(err: str, path: Path, which: str) -> str:
    """stderr's first line, asserted to be ``FILE:LINE:COL: error: ...`` at the edited file."""
    edited = path if which == "log" else path / which
    first = err.splitlines()[0] if err else ""
    assert re.match(rf"{re.escape(str(edited))}:\d+:\d+: error: ", first), err[:2000]
    assert len(err) < 2000, f"the error quotes its input at length: {len(err):,} characters"
    return first


def _run_all(cases: list[tuple[Path, str]], *extra: str) -> list[tuple[int, str, str]]:
    """``layerc mem`` on each input, two capped children at a time; each answer checked."""
    answers = []
    for batch in range(0, len(cases), 2):
        runs = []
        for path, _ in cases[batch : batch + 2]:
            outdir = path.parent / f"out_{path.name}"
            argv = ["mem", str(path), "-o", str(outdir), "--no-render", *extra]
            runs.append((path, outdir, argv, _start(argv)))
        for path, outdir, argv, proc in runs:
            rc, out, err = _finish(proc, argv)
            check_answer(rc, out, err, path, outdir, argv)
            answers.append((rc, out, err))
    return answers


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(which=st.sampled_from(SUMMARIES), cell=st.integers(0, 1000), at=st.integers(0, 1000), bit=st.integers(0, 7),
       json=st.booleans())
def test_a_flipped_byte_in_a_summary_is_a_located_error(seeds, which, cell, at, bit, json):
    """A flipped bit in a summary cell of the log or of a DOT dump: exit 1, and the first line of
    stderr is an error at the edited file (also with ``--json``, where stdout is the JSON)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = _mutated_inputs(Path(tmp), seeds, which, lambda d: flip_in_cell(d, cell, at, bit))
        ((rc, _, err),) = _run_all([(path, which)], *(["--json"] if json else []))
        assert rc == 1
        _located_first(err, path, which)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(which=st.sampled_from(SUMMARIES), cell=st.integers(0, 1000), at=st.integers(0, 1000), opener=st.integers(0, 4),
       depth=st.sampled_from([MAX_NESTING + 1, 1000, 5000, 100_000]), closed=st.booleans())
def test_deep_nesting_in_a_summary_is_a_located_error(seeds, which, cell, at, opener, depth, closed):
    """1,000 to 100,000 openers in a summary cell: exit 1, an error at the edited file first on
    stderr, the nested name quoted in a few dozen characters."""
    with tempfile.TemporaryDirectory() as tmp:
        path = _mutated_inputs(Path(tmp), seeds, which, lambda d: nest_in_cell(d, cell, at, opener, depth, closed))
        ((rc, _, err),) = _run_all([(path, which)])
        assert rc == 1
        _located_first(err, path, which)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(which=st.sampled_from(("log", *DUMPS)), at=st.integers(0, 1 << 20), stride=st.integers(1, 997), bits=st.integers(0, 255),
       opener=st.integers(0, 4), depth=st.integers(1000, 100_000), closed=st.booleans())
def test_flips_and_nesting_anywhere_exit_1_only_with_a_located_error(seeds, which, at, stride, bits, opener, depth, closed):
    """The fuzzer's own flips and nestings, anywhere in the log or a dump: exit 0, or exit 1 with an
    error at the edited file first on stderr (``check_answer``)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "f").mkdir()
        (root / "n").mkdir()
        flipped = _mutated_inputs(root / "f", seeds, which, lambda d: flip_anywhere(d, at, stride, bits))
        nested = _mutated_inputs(root / "n", seeds, which, lambda d: nest_anywhere(d, at, opener, depth, closed))
        for rc, _, err in _run_all([(flipped, which), (nested, which)]):
            assert rc == 0 or len(err) < 2000, f"the error quotes its input at length: {len(err):,} characters"


#: What the fuzzer found, pinned: (which input, old, new, the first line of stderr after the path).
VERDICTS = {
    "a flip in the log": ("log", b"<TD>dpT</TD>", b"<TD>fpT</TD>",
                          ":355:9: error: TMEM summary row of 'dpT' disagrees with its cluster: name 'fpT' vs 'dpT'"),
    "a flip in a DOT dump": (DUMPS[2], b"<TD>[56-69)</TD>", b"<TD>[57-69)</TD>",
                             ":86:9: error: TMEM summary row of 'dpT' disagrees with its cluster: liveness [57-69) vs [56-69)"),
    "nesting in the log": ("log", b'label="dpT 128x128', b'label="dpT' + b"(" * 30_000 + b"1" + b")" * 30_000 + b" 128x128",
                           f":355:9: error: TMEM summary row of 'dpT{'(' * 76}… (60,004 characters)' disagrees with its cluster: "
                           f"name 'dpT' vs 'dpT{'(' * 76}… (60,004 characters)'"),
    "nesting in a DOT dump": (DUMPS[2], b"<TD>dpT</TD>", b"<TD>dpT" + b"[" * 5000 + b"1</TD>",
                              f":86:9: error: TMEM summary row of 'dpT' disagrees with its cluster: name 'dpT{'[' * 76}… (5,004 characters)' "
                              "vs 'dpT'"),
}


def test_the_fuzzers_silent_exits_now_say_why(seeds, tmp_path):
    """Each exited 1 with nothing on stderr: the input read, the checks found errors, and only the
    report on stdout said so. Now: the first error, its source line and a caret, then how many."""
    cases = []
    for i, (which, old, new, _) in enumerate(VERDICTS.values()):
        (tmp_path / str(i)).mkdir()
        cases.append((_mutated_inputs(tmp_path / str(i), seeds, which, lambda d, old=old, new=new: _edited(d, (old, new))), which))
    for (rc, out, err), (path, which), (_, _, _, want) in zip(_run_all(cases), cases, VERDICTS.values()):
        assert rc == 1 and re.search(r"^1 kernel\(s\); [1-9]\d* error\(s\)", out, re.M), out[-2000:]
        first = _located_first(err, path, which)
        assert first.startswith(str(path if which == "log" else path / which) + want), first
        lines = err.rstrip("\n").split("\n")
        assert lines[2].strip() == "^" and (len(lines) == 3 or lines[3].startswith("layerc mem: note: ")), err


def test_warnings_under_werror_are_a_located_error(seeds, tmp_path):
    """A warning only: exit 0 and a quiet stderr; with --werror, exit 1 and the warning first on
    stderr as an error, marked [--werror]."""
    path = _mutated_inputs(tmp_path, seeds, DUMPS[1], lambda d: _edited(d, (b'label="Partition 0"', b'label="Partition 1"')))
    rc, out, err = run_layerc("mem", path, "--no-render")
    assert rc == 0 and err == "" and "warning: cluster_partition_0 is labelled 'Partition 1'" in out, err
    rc, out, err = run_layerc("mem", path, "--no-render", "--werror")
    first, source, caret = err.rstrip("\n").split("\n")
    assert rc == 1 and first == f"{path / DUMPS[1]}:10:12: error: cluster_partition_0 is labelled 'Partition 1' [--werror]", err
    assert source[caret.index("^"):].startswith("cluster_partition_0 {"), err


def test_errors_without_a_place_name_the_input(seeds, tmp_path, monkeypatch):
    """Nesting past Python's stack, memory running out, a kernel the input lacks: the error names
    the input (never ``layerc: error:``, never an exit 1 with nothing said)."""
    import layerc.grammar.ws_memory as ws_memory

    path = tmp_path / "r.log"
    path.write_bytes(seeds["log"])
    rc, _, err = run_layerc("mem", path, "--kernel", "nope", "--no-render")
    assert rc == 1 and err.startswith(f"{path}: error: no kernel 'nope' (kernels: 0:_attn_bwd)"), err
    for exc, says in ((RecursionError, "the input nests deeper than layerc can follow"), (MemoryError, "out of memory reading the input")):
        def read(p, exc=exc):
            raise exc()
        monkeypatch.setattr(ws_memory, "read_ws_memory", read)
        rc, _, err = run_layerc("mem", path, "--no-render", "-o", tmp_path / "out")
        assert rc == 1 and err == f"{path}: error: {says}\n", err
        assert not (tmp_path / "out").exists()


def test_a_finding_quotes_a_huge_name_in_a_few_dozen_characters():
    from layerc.ir.memory import MAX_MESSAGE, MAX_QUOTED, quoted

    assert quoted("k") == "k" and quoted(None) == ""
    shown = quoted("a" * 1_000_000)
    assert shown == "a" * (MAX_QUOTED - 1) + "… (1,000,000 characters)"
    m = MemoryModule("x")
    k = Kernel(0, "k")
    f = m.add(k, "error", "c", "y" * 10 * MAX_MESSAGE)
    assert len(f.message) == MAX_MESSAGE
    assert m.diagnostic(f) == f"x: error: {f.message}"  # no file, no place: the input's name


# -- pictures never sized by the data ---------------------------------------------------------------


def test_the_chart_of_many_buffers_is_bounded(monkeypatch):
    monkeypatch.setattr(mem_chart, "MAX_ROWS", 10)  # the bound, small enough to draw quickly
    n = 1000
    m = MemoryModule("x")
    kind = np.arange(n) % 2
    start = np.arange(n, dtype=np.int64) * 400_000
    m.kernels = [Kernel(0, "k" * 100_000, buffers=Buffers.from_columns({
        "kind": kind, "index": np.arange(n), "name": [m.strings.intern("b" * 1000 + str(i)) for i in range(n)],
        "bytes": np.where(kind == SMEM, 4096, -1), "rows": np.where(kind == TMEM, 128, -1), "cols": np.where(kind == TMEM, 64, -1),
        "start": start, "end": start + 2**30, "operand_d": np.zeros(n)}))]
    MemLiveness().apply(Context(), m)
    chart = Image.open(io.BytesIO(mem_chart.liveness_chart(m, m.kernels[0])))
    assert chart.width <= 2000 and chart.height <= 1200


def _png_header(width: int, height: int) -> bytes:
    """A PNG that claims a size (its pixels are never read when it is too large to stack)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = lambda kind, data: struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))  # noqa: E731
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b"")


def test_stacking_is_bounded_by_pixels_not_by_pictures(monkeypatch):
    small = io.BytesIO()
    Image.new("RGB", (300, 300), "red").save(small, "PNG")
    page = Image.open(io.BytesIO(mem_combine.stack([("huge " * 1000, _png_header(100_000, 100_000)), ("ok", small.getvalue())])))
    assert page.width == mem_combine.WIDE + 2 * mem_combine.MARGIN or page.width < 2000
    assert page.width * page.height <= mem_combine.MAX_PIXELS
    monkeypatch.setattr(mem_combine, "MAX_PIXELS", 40_000)
    page = Image.open(io.BytesIO(mem_combine.stack([(f"p{i}", small.getvalue()) for i in range(60)])))
    assert page.width * page.height <= 40_000
