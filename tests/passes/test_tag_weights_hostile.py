"""``tag-weights{pattern=...}`` on hostile patterns: the pattern is user input, so one that does not
compile (a regex error, groups nested too deep for the compiler, a repetition past its limit, too
long, no group) is a located error in the pipeline text that names the option, a group that
captures no layer number is an error at the weight, and a pattern that backtracks exponentially
over the weight names stops with an error rather than run for ever. Never an internal error.
"""

from __future__ import annotations

import re
import signal
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from layerc.grammar.dumps import load
from layerc.ir.diagnostics import LayercError, ParseError
from layerc.passes import tag_weights
from layerc.passes.base import Context
from layerc.passes.pipeline import build_pipeline
from layerc.passes.tag_weights import MAX_PATTERN, TagWeights
from tests import capped

MEMORY = 1 << 30  #: address space of a child run
TIMEOUT = 60  #: seconds a child run may take (a normal one takes under a second)
#: The error's first line: the pass's place in the pipeline text, the pass, the option.
LOCATED = re.compile(r"^<pipeline>:1:(\d+): error: tag-weights: pattern: ")


@pytest.fixture(scope="module")
def dump(tmp_path_factory) -> Path:
    from layerc.backends.synth.dump import write

    out = tmp_path_factory.mktemp("llama")
    write("llama", out, layers=2)
    return sorted(out.glob("*.txt"))[0]


def run_layerc(*args) -> tuple[int, str]:
    """``layerc ARGS`` in a capped child (tests/capped.py: RLIMIT_AS, its group killed past the time)."""
    done = capped.run(args, memory=MEMORY, timeout=TIMEOUT)
    return done.returncode, done.stderr


def assert_clean(rc: int, err: str) -> None:
    assert "internal error" not in err and "Traceback" not in err, err[-2000:]
    assert rc in (0, 1), err[-2000:]


def quoted(pattern: str) -> str:
    return f'"{pattern}"' if '"' not in pattern else f"'{pattern}'"


# -- patterns that do not compile, from each class ---------------------------------------------------

def nested_groups(depth: int, inner: str = r"\d") -> str:
    return "(" * depth + inner + ")" * depth


def nested_noncapturing(depth: int) -> str:
    return "(" + "(?:" * depth + r"\d" + ")" * (depth + 1)


def bad_patterns() -> list[tuple[str, str]]:
    """(pattern, what the message says) for each way a pattern fails to compile."""
    out = []
    for depth in (499, 600, 2_000, 20_000):  # past what the compiler's recursion follows, or past the length
        out.append((nested_groups(depth), "nest too deep" if 2 * depth + 2 <= MAX_PATTERN else "more than"))
    out.append((nested_noncapturing(300), "more than"))
    out += [("(" * n, "not a regular expression") for n in (1, 7, 400)]
    out += [(")", "not a regular expression"), ("[", "not a regular expression"), ("a**", "not a regular expression"),
            ("(?<=a+)(\\d)", "not a regular expression"), ("(?P<1>\\d)", "not a regular expression"), ("\\", "not a regular expression")]
    out += [(f"(\\d){{{n}}}", "does not compile") for n in (4294967296, 99999999999, 10**30)]
    out += [("x" * (MAX_PATTERN + 1), "more than"), ("(\\d)" * 400, "more than")]
    out += [("layers_", "needs a group"), ("", None)]  # "" is the default pattern: fine
    return out


@pytest.mark.parametrize("pattern,message", [p for p in bad_patterns() if p[1] is not None],
                         ids=lambda x: x[:24] if isinstance(x, str) else None)
def test_bad_patterns_are_located_errors_in_process(pattern, message):
    text = f"select-graph,tag-weights{{pattern={quoted(pattern)}}},slice-layers"
    with pytest.raises(ParseError) as info:
        build_pipeline(text)
    e = info.value
    first = e.format().splitlines()[0]
    m = LOCATED.match(first)
    assert m, first
    assert int(m.group(1)) == text.index("tag-weights") + 1  # the column of the pass that has the option
    assert message in first, first
    assert len(e.format()) < 2000


@pytest.mark.parametrize("depth", [100, 400, 499, 1_000, 5_000])
def test_deep_parentheses_on_the_command_line(dump, tmp_path, depth):
    """The reported case: ``tag-weights{pattern="((((...a...))))"}`` once gave an unlocated
    RecursionError; every depth is now a bounded answer or a located error naming the option."""
    pattern = nested_groups(depth)
    rc, err = run_layerc("opt", dump, "-p", f"tag-weights{{pattern={quoted(pattern)}}}", "-o", tmp_path / "o.txt")
    assert_clean(rc, err)
    if depth <= 100:  # compiles: every weight is tagged from group 1 (a digit)
        assert rc == 0, err
    elif rc == 1 or 2 * depth + 2 > MAX_PATTERN:  # how deep the compiler follows depends on the stack
        assert rc == 1 and LOCATED.match(err.splitlines()[0]), err[:500]


def test_recursion_while_compiling_is_located_at_any_stack_depth(monkeypatch):
    """Where the compiler runs out of stack depends on how deep the caller already is: the error
    is the same located one (the limit is lowered here to reach it with a short pattern)."""
    pattern = nested_groups(200, "7(\\d)")  # not one an earlier test compiled (re caches them)
    text = f"tag-weights{{pattern={quoted(pattern)}}}"
    limit = sys.getrecursionlimit()
    try:
        sys.setrecursionlimit(len(_stack()) + 150)
        with pytest.raises(ParseError) as info:
            build_pipeline(text)
    finally:
        sys.setrecursionlimit(limit)
    assert LOCATED.match(info.value.format()), info.value.format()
    assert "nest too deep" in info.value.message


def _stack() -> list:
    import traceback

    return traceback.extract_stack()


alphabet = st.sampled_from(["(", ")", "(?:", "(?P<n>", "[", "]", "{", "}", "{99999999999}", "*", "+", "?", "|",
                            "\\", "\\d", "\\1", "a", "_", "^", "$", ".", "-", "0", "(" * 300, ")" * 300])


@settings(max_examples=300, deadline=None)
@given(st.lists(alphabet, max_size=16).map("".join))
def test_any_pattern_builds_or_gives_a_located_error(pattern):
    text = f"tag-weights{{pattern={quoted(pattern)}}}"
    try:
        [p] = build_pipeline(text)
    except LayercError as e:
        assert e.path == "<pipeline>" and e.loc is not None, e.format()
        assert LOCATED.match(e.format()) or "tag-weights" not in e.message, e.format()
    else:
        assert isinstance(p, TagWeights)


# -- patterns that compile but match badly --------------------------------------------------------------

def test_a_group_that_captures_no_number_is_an_error_at_the_weight(dump, tmp_path):
    for pattern in ("(layers)", "layers_(\\d+_\\w+)", "(\\w+)"):
        rc, err = run_layerc("opt", dump, "-p", f"tag-weights{{pattern={quoted(pattern)}}}", "-o", tmp_path / "o.txt")
        assert_clean(rc, err)
        assert rc == 1
        first = err.splitlines()[0]
        assert re.match(rf"^{re.escape(str(dump))}:\d+:\d+: error: tag-weights: pattern: group 1 matched '", first), first


def test_an_optional_group_that_does_not_take_part_tags_nothing(dump):
    module = load(dump)
    TagWeights(pattern="(x)?layers_\\d+").apply(Context(), module)
    assert all(w.meta["layer"] is None for g in module.graphs for w in g.weights.values())


def test_exponential_backtracking_stops_with_an_error(dump, monkeypatch):
    monkeypatch.setattr(tag_weights, "MATCH_SECONDS", 0.3)
    module = load(dump)
    handler = signal.getsignal(signal.SIGALRM)
    with pytest.raises(LayercError, match="backtracks too much") as info:
        TagWeights(pattern="(\\w*)*X(\\d)").apply(Context(), module)
    assert info.value.loc is not None
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # the timer and the handler are put back
    assert signal.getsignal(signal.SIGALRM) == handler


def test_backtracking_on_the_command_line_ends(dump, tmp_path):
    rc, err = run_layerc("opt", dump, "-p", 'tag-weights{pattern="(\\w*)*X(\\d)"}', "-o", tmp_path / "o.txt")
    assert_clean(rc, err)
    assert rc == 1 and "backtracks too much" in err.splitlines()[0], err[:500]


def test_good_patterns_still_tag_layers(dump):
    for pattern in ("", "layers_(\\d+)_", "(?:^|_)layers_(\\d+)(?:_|$)"):
        module = load(dump)
        [p] = build_pipeline(f"tag-weights{{pattern={quoted(pattern)}}}" if pattern else "tag-weights")
        p.apply(Context(), module)
        layers = {w.meta["layer"] for g in module.graphs for w in g.weights.values()}
        assert {0, 1} <= layers, (pattern, layers)


def test_layer_command_pattern_option(dump, tmp_path):
    """``layerc layer --pattern`` makes the same pass: a bad pattern is an error, not a crash."""
    for pattern in (nested_groups(2_000), nested_groups(499), "(", "(layers)"):
        rc, err = run_layerc("layer", dump, "0", "--pattern", pattern, "-o", tmp_path, "--format", "json")
        assert_clean(rc, err)
        assert rc == 1 and "pattern: " in err.splitlines()[0], err[:500]
