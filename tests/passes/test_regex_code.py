"""A regex made again from its kept compiled form is the regex ``re.compile`` makes."""

from __future__ import annotations

import re
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layerc.passes.kernel_tables import _read_dir, builtin_files
from layerc.passes.regex_code import compiled_parts, from_parts

ENTRIES = _read_dir(builtin_files())
#: the shapes the tables use, and more: named groups and references, flags, look-arounds, atomic
#: groups and possessive repeats, conditionals, classes, anchors
SHAPES = [e.match for e in ENTRIES] + [
    r"(?P<op>add|mul)_(?P=op)", r"(?i)gemm(?=_)", r"(?<!\w)(?>\w*?nccl)\w*+Recv", r"(a)?(?(1)b|c)", r"[^\W\d]{2,5}?\b",
    r"(?m:^)(?>.*?x).*?y$", r"(?s)a.b", r"\A(?:x|y){3}\Z", r"((?:ab)*+)c", r"[\u0100-\u017f]+", r"(?x) a # b\n c",
]


def _same(made: re.Pattern[str], want: re.Pattern[str], text: str) -> None:
    assert (made.pattern, made.flags, made.groups, made.groupindex) == (want.pattern, want.flags, want.groups, want.groupindex)
    got, expected = made.search(text), want.search(text)
    assert (got and (got.span(), got.groups())) == (expected and (expected.span(), expected.groups()))
    assert [m.span() for m in made.finditer(text)] == [m.span() for m in want.finditer(text)]


@settings(max_examples=300, deadline=None)
@given(shape=st.sampled_from(SHAPES), noise=st.text(alphabet=string.ascii_letters + string.digits + "_:<>, \n\u0101", max_size=40),
       example=st.sampled_from([x for e in ENTRIES for x in e.examples] + [""]), at=st.integers(0, 200))
def test_a_pattern_from_its_kept_parts_matches_as_the_compiled_one(shape, noise, example, at):
    parts = compiled_parts(shape)
    assert parts is not None
    made = from_parts(shape, parts)
    assert made is not None
    _same(made, re.compile(shape), example[:at] + noise + example[at:])


@pytest.mark.parametrize("spoil", ["cut", "garbage", "shape"])
def test_spoiled_parts_make_no_pattern(spoil):
    """The engine checks the code it is given: parts that are not a compiler's give None (and
    the caller compiles), never a pattern that matches otherwise."""
    flags, code, groups, groupindex, indexgroup = compiled_parts(r"(?<!\w)(?>\w*?nccl)\w*AllReduce")
    spoiled = {"cut": (flags, code[: len(code) // 2], groups, groupindex, indexgroup),
               "garbage": (flags, bytes(range(256)) * 2, groups, groupindex, indexgroup),
               "shape": (flags, code)}[spoil]
    assert from_parts("x", spoiled) is None  # type: ignore[arg-type]
