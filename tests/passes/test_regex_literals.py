"""The literals any match of a pattern holds (``passes/regex_literals.py``) are a necessary
condition, never a wrong one: strings that match a pattern (hypothesis builds them from the
pattern itself) hold one of its literals, and a kernel table with its filters classifies every
name as it does without them."""

from __future__ import annotations

import re
import string

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from layerc.passes.kernel_tables import KernelTable, kernel_table
from layerc.passes.regex_literals import Literals, literals

#: the constructs the filter reads: runs, alternations, groups, repeats, lookarounds, case folding
PATTERNS = [
    r"paged_attention\w*",
    r"(?<!\w)(?>\w*?[Dd]ecode)\w*[Aa]ttention|(?<!\w)(?>\w*?[Aa]ttention)\w*[Dd]ecode",
    r"(?i)moe|expert_?(?:offsets|ids|count)|grouped_topk",
    r"(?i:gemm)_(?:sm\d+|tile)kernel",
    r"(?:abc){2,}x|zz(?=qqq)",
    r"ab?c(?:dex|fgh)+",
    r"(?:xyz)?foo|bar",
    r"^_fwd_kernel",
    r"(?m:^)(?>.*?(?<!\w)(?>\w*?elementwise_kernel)\w*+<).*?(?:FillFunctor|fill_)",
]


def _holds(found: Literals, text: str) -> bool:
    t = text.lower() if found.fold else text
    return any(n in t for n in found.needles)


@pytest.mark.parametrize("pattern", PATTERNS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_a_match_holds_a_literal(pattern, data):
    found = literals(pattern)
    assert found is not None, pattern
    text = data.draw(st.from_regex(re.compile(pattern), alphabet=st.characters(max_codepoint=127)))
    assert re.search(pattern, text)
    assert _holds(found, text), (pattern, text, found.needles)


def test_what_gives_no_literals():
    for pattern in (r"\w+", r"a|", r"(?:ab)*c?", r"[A-Z]{3}", r"x|yz", r"(a)\1"):
        assert literals(pattern) is None, pattern
    assert literals("not closed(") is None  # a tree the parser refuses: no filter, no error


@pytest.mark.parametrize("index", range(len(kernel_table().entries)))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_every_table_pattern_keeps_its_matches(index, data):
    """Every built-in entry: strings hypothesis builds to match its pattern hold its literals."""
    entry = kernel_table().entries[index]
    found = literals(entry.pattern.pattern, entry.pattern.flags)
    if found is None:
        return
    try:
        strategy = st.from_regex(entry.pattern, alphabet=st.characters(max_codepoint=127))
        text = data.draw(strategy)
    except Exception:  # a construct hypothesis cannot generate from (atomic groups, possessive repeats)
        assume(False)
    assume(entry.pattern.search(text))
    assert _holds(found, text), (entry.pattern.pattern, text)


_PIECES = sorted({x for e in kernel_table().entries for x in e.examples})


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.sampled_from(_PIECES), min_size=1, max_size=3),
       noise=st.text(alphabet=string.ascii_letters + string.digits + "_:<>,() " + "\u212a\u017f\u00e9", max_size=12),
       cut=st.integers(0, 400), flip=st.booleans(), at=st.integers(0, 500))
def test_the_filters_change_no_classification(parts, noise, cut, flip, at):
    """Kernel names made of the tables' examples, cut, joined, with noise put in (the Kelvin sign
    and the long s among it, which IGNORECASE matches to k and s) and their case flipped: the
    table with its literal filters gives each the entry and short name it gives without them."""
    name = " ".join(parts)
    name = name[: max(cut, 1)] if cut < len(name) else name
    name = name[:at] + noise + name[at:]
    if flip:
        name = name.swapcase()
    plain = KernelTable(kernel_table().entries)
    filtered = KernelTable(kernel_table().entries)
    filtered._filters = [literals(e.pattern.pattern, e.pattern.flags) for e in filtered.entries]
    assert filtered.match(name) == plain.match(name)


def test_every_table_pattern_has_literals():
    """The built-in tables are filtered whole: a pattern without literals would be searched in
    every name (a catch-all belongs last, as the tables order them, not without a literal)."""
    missing = [e.source for e in kernel_table().entries if literals(e.pattern.pattern, e.pattern.flags) is None]
    assert not missing
