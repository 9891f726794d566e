"""Mutated AutoDeploy dumps, torch.fx prints and pass pipelines: layerc answers with a result or
an error at a place in the input, never with an internal error, a hang, a memory blow-up or a
changed input.

The mutator starts from small valid inputs (``gen-dump llama --layers 2``, the same with
``--symbolic``, and that dump printed by torch.fx's rules; for the parser alone also the dump with
``--constants`` in both syntaxes, whose strings are split by op schemas) and applies byte flips, truncation,
splicing, numeric extremes, deep nesting, huge tokens and huge shapes. The command-line checks run
``layerc opt FILE`` and ``layerc layer FILE 0`` in capped child processes; the parser alone, and
the pipeline parser, run in-process on many more mutations.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests import capped
from tests.mutations import BASIC, basic, nth, replace_nth
from layerc.grammar.dumps import decode, parse_and_verify
from layerc.grammar._lark import MAX_NESTING
from layerc.ir.diagnostics import LayercError
from layerc.passes.pipeline import build_pipeline
from layerc.passes.registry import get_all_passes

from tests.layerc_cli import run_layerc

MEMORY = 2 << 30  #: address space of a child layerc
TIMEOUT = 60  #: seconds a child may run (a clean run takes a fraction of one)
KINDS = ("ad", "ad_symbolic", "fx")
#: Seeds the parser alone is mutated from: every constant class, and ops whose schema takes a string.
PARSER_KINDS = (*KINDS, "ad_constants", "fx_constants")


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> dict[str, bytes]:
    """The valid inputs the mutations start from."""
    root = tmp_path_factory.mktemp("seeds")
    out = {}
    for kind, extra in (("ad", ()), ("ad_symbolic", ("--symbolic",)), ("ad_constants", ("--symbolic", "--constants"))):
        rc, _, err = run_layerc("gen-dump", "llama", root / kind, "--layers", "2", *extra)
        assert rc == 0, err
        (dump,) = (root / kind).glob("*_compile_model.txt")
        out[kind] = dump.read_bytes()
    for kind, ad in (("fx", "ad"), ("fx_constants", "ad_constants")):
        fx = root / f"{kind}.fx"
        rc, _, err = run_layerc("opt", root / ad, "--emit", "fx", "-o", fx)
        assert rc == 0, err
        out[kind] = fx.read_bytes()
    return out


# -- the mutator ---------------------------------------------------------------------------------

EXTREMES = [b"0", b"-1", b"-0", b"00", str(2**63 - 1).encode(), str(2**63).encode(), str(2**64).encode(),
            str(10**100).encode(), b"9" * 5000, b"1e999", b"-" + b"9" * 40, b"nan", b"inf"]
#: Where nesting is inserted: after an argument list opens or after a separator, where a
#: constant may stand.
_ARG_START = re.compile(rb"\(|, |: |\[")
_NUMBER = re.compile(rb"\d+")
#: (Anchored at word starts and possessive: the mutator's own patterns must not backtrack on the
#: megabyte-long words it makes.)
_SHAPE = re.compile(rb"\b\d+(?:x\d+)++|\bs\d+(?:x\w+)*+")
_NAME = re.compile(rb"%\w++|\b\w++(?=\()")

mutations = st.one_of(
    *BASIC.values(),
    st.tuples(st.just("number"), st.integers(0, 1 << 20), st.sampled_from(EXTREMES)),
    st.tuples(st.just("nest"), st.integers(0, 1 << 20), st.sampled_from([b"[", b"(", b"{", b"f(", b"{1: "]),
              st.sampled_from([2, MAX_NESTING - 1, MAX_NESTING, MAX_NESTING + 1, 5000, 100_000]), st.booleans()),
    st.tuples(st.just("huge"), st.integers(0, 1 << 20), st.sampled_from([b"a", b"9", b"x1", b"'", b"(", b"\xff"]),
              st.sampled_from([1000, 100_000, 1_000_000])),
    st.tuples(st.just("dims"), st.integers(0, 1 << 20), st.sampled_from([8, 100, 10_000, 1_000_000])),
)


#: matches a mutation looks among (a mutated input may hold millions)
AMONG = 4096


def mutate(data: bytes, m: tuple) -> bytes:
    """One mutation (tests/mutations.py's, or one of a dump's own)."""
    done = basic(data, m)
    if done is not None:
        return done
    kind, k, *rest = m
    n = max(len(data), 1)
    if kind == "number":
        return replace_nth(_NUMBER, data, k, rest[0], AMONG)
    if kind == "nest":
        opener, depth, closed = rest
        closer = {b"[": b"]", b"{": b"}", b"{1: ": b"}"}.get(opener, b")")
        hit = nth(_ARG_START, data, k, AMONG)
        at = hit.end() if hit else k % n
        return data[:at] + opener * depth + b"1" + (closer * depth if closed else b"") + data[at:]
    if kind == "huge":
        unit, count = rest
        hit = nth(_NAME, data, k, AMONG)
        at = hit.end() if hit else k % n
        return data[:at] + unit * count + data[at:]
    if kind == "dims":
        return replace_nth(_SHAPE, data, k, b"x".join([b"3"] * rest[0]), AMONG)
    raise AssertionError(kind)


def mutated(data: bytes, ms: list[tuple]) -> bytes:
    for m in ms:
        data = mutate(data, m)
    return data


# -- running layerc on it --------------------------------------------------------------------------


def _start(argv: list[str]) -> subprocess.Popen:
    return capped.start(argv, memory=MEMORY, stdout=subprocess.DEVNULL)


def _finish(proc: subprocess.Popen, argv: list[str]) -> tuple[int, str]:
    done = capped.finish(proc, argv, TIMEOUT)
    return done.returncode, done.stderr


def check_answer(rc: int, err: str, where: str, argv: list[str]) -> None:
    """Exit 0, 1 or 2; never an internal error; an error names the input first."""
    shown = f"layerc {' '.join(argv)[:200]} -> {rc}\n{err[:2000]}"
    assert rc in (0, 1, 2), shown
    assert "internal error" not in err, shown
    assert "Traceback" not in err, shown
    if rc == 1:
        first = err.splitlines()[0] if err else ""
        assert re.match(rf"^{re.escape(where)}(:\d+(:\d+)?)?: error: ", first), shown


def check_cli(data: bytes, name: str) -> None:
    """``layerc opt`` and ``layerc layer`` on ``data``, side by side in capped children."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        outdir = Path(tmp) / "out"
        outdir.mkdir()
        runs = [["opt", str(path)], ["layer", str(path), "0", "--format", "json", "-o", str(outdir)]]
        procs = [_start(argv) for argv in runs]
        for proc, argv in zip(procs, runs):
            rc, err = _finish(proc, argv)
            check_answer(rc, err, str(path), argv)
        assert path.read_bytes() == data, "layerc changed its input"


def _file_name(kind: str) -> str:
    return "g.fx" if kind == "fx" else "081_compile_compile_model.txt"


# -- the command line, on mutated inputs -----------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ms=st.lists(mutations, min_size=1, max_size=3))
def test_cli_answers_mutated_inputs(seeds, kind, ms):
    check_cli(mutated(seeds[kind], ms), _file_name(kind))


HOSTILE = {
    "lists 100,000 deep": [("nest", 7, b"[", 100_000, True)],
    "parentheses 100,000 deep": [("nest", 7, b"(", 100_000, True)],
    "calls 5,000 deep, unclosed": [("nest", 3, b"f(", 5000, False)],
    "nesting at the limit": [("nest", 7, b"[", MAX_NESTING, True)],
    "an int of 10**100 in a shape": [("dims", 0, 1), ("number", 40, str(10**100).encode())],
    "a negative dim": [("number", 30, b"-8")],
    "a shape with 10**6 dims": [("dims", 5, 1_000_000)],
    "a 1 MB name": [("huge", 9, b"a", 1_000_000)],
    "a 5,000-digit constant": [("number", 120, b"9" * 5000)],
    "truncated mid-line": [("truncate", 2000)],
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", list(HOSTILE), ids=list(HOSTILE))
def test_cli_answers_hostile_inputs(seeds, kind, case):
    check_cli(mutated(seeds[kind], HOSTILE[case]), _file_name(kind))


def with_constant(data: bytes, kind: str, constant: str) -> bytes:
    """The seed with ``constant`` as an argument: of the first getitem (AutoDeploy) or as the
    first call's keyword argument (fx)."""
    text = data.decode()
    if kind == "fx":
        return text.replace("kwargs = {}", f"kwargs = {{a: {constant}}}", 1).encode()
    line = next(ln for ln in text.splitlines() if ln.startswith("%getitem = "))
    return text.replace(line, line.replace(", 0)", f", {constant})", 1)).encode()


def nested(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


@pytest.mark.parametrize("depth", [MAX_NESTING, 100_000])
@pytest.mark.parametrize("kind", KINDS)
def test_nesting_past_the_limit_is_a_located_error(seeds, tmp_path, kind, depth):
    """The argument list is the first level: a constant MAX_NESTING deep in it is one too many."""
    path = tmp_path / _file_name(kind)
    path.write_bytes(with_constant(seeds[kind], kind, nested(depth)))
    rc, _, err = run_layerc("opt", path)
    assert rc == 1
    assert re.match(rf"{re.escape(str(path))}:\d+:\d+: error: nesting deeper than {MAX_NESTING}\n", err), err


@pytest.mark.parametrize("kind", KINDS)
def test_nesting_at_the_limit_still_reads(seeds, tmp_path, kind):
    """The limit refuses only what is deeper: the deepest constant it allows round-trips."""
    path = tmp_path / _file_name(kind)
    path.write_bytes(with_constant(seeds[kind], kind, nested(MAX_NESTING - 1)))
    rc, out, err = run_layerc("opt", path, "--emit", kind[:2])
    assert rc == 0, err
    assert nested(MAX_NESTING - 1) in out


# -- the parser alone, on many more mutations ------------------------------------------------------


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(kind=st.sampled_from(PARSER_KINDS), ms=st.lists(mutations, min_size=1, max_size=4))
@example(kind="ad", ms=[("nest", 0, b"{1: ", 200, True)])
@example(kind="ad_constants", ms=[("huge", 0, b"(", 1_000_000)])
def test_parser_gives_located_errors_only(seeds, kind, ms):
    data = mutated(seeds[kind], ms)
    try:
        parse_and_verify(decode(data, "m.txt"), "m.txt")
    except LayercError as e:
        assert e.loc is not None, e.format()
        assert e.format().startswith(f"m.txt:{e.loc.line}:{e.loc.column}: error: "), e.format()
        assert len(e.format()) < 2000, "a message quotes its input at length"


# -- pass pipelines (-p) ---------------------------------------------------------------------------

_PASSES = sorted(get_all_passes())
_WORDS = [*_PASSES, "builtin.module(", "layer", "section", "pattern", "trace", "phase", "hw", "kv-len", "tp",
          "engines", "=", ",", "{", "}", "(", ")", " ", "\n", "'", '"', "-1", "1e999", "nan", "none", "true",
          "9" * 5000, "x" * 100_000, "{" * 1000, "(" * 1000, "\x00", "é"]
pipelines = st.lists(st.sampled_from(_WORDS), max_size=12).map("".join)


@settings(max_examples=500, deadline=None)
@given(pipelines)
@example("{" * 100_000)
@example("builtin.module(" * 10_000)
@example("slice-layer{layer=" + "9" * 100_000 + "}")
@example("dce,\nslice-layer{layer=1,\n layer=2}")
def test_pipeline_strings_give_located_errors_only(text):
    try:
        build_pipeline(text)
    except LayercError as e:
        assert e.path == "<pipeline>" and e.loc is not None, e.format()
        assert len(e.format()) < 2000, "a message quotes its input at length"


@pytest.mark.parametrize("pipeline", ["dce{" * 20_000, "slice-layer{layer=" + "9" * 50_000 + "}", "nope" * 10_000,
                                      "tag-weights{pattern=1}{", "dce,\n  slice-layer{layer=one}", "select-graph{section}"])
def test_cli_answers_hostile_pipelines(seeds, tmp_path, pipeline):
    path = tmp_path / "d.txt"
    path.write_bytes(seeds["ad"])
    argv = ["opt", str(path), "-p", pipeline]
    rc, err = _finish(_start(argv), argv)
    check_answer(rc, err, "<pipeline>", argv)
    assert rc == 1
    assert path.read_bytes() == seeds["ad"]
