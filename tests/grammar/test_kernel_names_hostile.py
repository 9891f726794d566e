"""Kernel names built to make the classifier's regexes backtrack: every built-in pattern runs in
time linear in the name, and no name, however long, costs more than its first NAME_LIMIT
characters.

The adversaries come from each pattern's own text: the words it loops on, repeated alone, joined
with separators, in pairs, and followed by long runs; plus each entry's examples cut and repeated.
A pattern that backtracks super-linearly (``\\w*decode\\w*attention`` on ``DecodeDecode...``) takes
ten times longer per character when the name is ten times longer; a linear one does not.
"""

from __future__ import annotations

import os
import random
import re
import resource
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from layerc.passes import labels, trace_layers
from layerc.passes.kernel_tables import NAME_LIMIT, KernelTable, _read_dir, builtin_files

SEPARATORS = ("", "a", "_", "0", "<", "::", ", ", " ", "(", "\n")


@pytest.fixture(scope="module")
def table() -> KernelTable:
    return KernelTable(_read_dir(builtin_files()))


def words_of(pattern: str) -> list[str]:
    """The literal words a pattern looks for (escapes such as \\w and \\d removed)."""
    text = re.sub(r"\\[A-Za-z]", " ", pattern)
    return sorted({w for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*|::", text) if len(w) > 1})


def repeat_to(unit: str, n: int) -> str:
    return (unit * (n // max(len(unit), 1) + 1))[:n]


def adversaries(pattern: str, examples: tuple[str, ...], n: int) -> list[str]:
    """Names of length ``n`` that make a backtracking pattern rescan: its words repeated."""
    words = words_of(pattern)
    out = []
    for w in words:
        out += [repeat_to(w + sep, n) for sep in SEPARATORS]
        out.append(w + repeat_to("a", n - len(w)))
        out.append(w + "<" + repeat_to("::a", n - len(w) - 1))
    rng = random.Random(len(pattern))
    for _ in range(min(len(words) ** 2, 12)):
        a, b = rng.choice(words), rng.choice(words)
        out.append(repeat_to(a + b, n))
        out.append(repeat_to(a + "_" + b + "::", n))
    for x in examples:
        out.append(repeat_to(x, n))
        out.append(repeat_to(x[: len(x) // 2], n))
    out += [repeat_to(c, n) for c in ("a", "_", "<", ":", "0", "A")]
    return out


def _cost(rx: re.Pattern, names: list[str], loops: int) -> float:
    """Seconds for ``loops`` searches of every name, the least of three tries (noise only adds)."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(loops):
            for s in names:
                rx.search(s)
        best = min(best, time.perf_counter() - t0)
    return best


def _growth(rx: re.Pattern, examples: tuple[str, ...] = (), n: int = NAME_LIMIT) -> float:
    """Time per character on ``n``-long adversaries over that on ones a tenth as long: about 1
    for a linear pattern, about 10 for a quadratic one."""
    big = adversaries(rx.pattern, examples, n)
    small = adversaries(rx.pattern, examples, n // 10)
    return _cost(rx, big, 1) / max(_cost(rx, small, 10), 1e-6)


@pytest.mark.parametrize("old, new, n", [
    (r"nccl\w*AllReduce", r"(?<!\w)(?>\w*?nccl)\w*AllReduce", 1500),  # quadratic before
    (r"\w*[Dd]ecode\w*[Aa]ttention\w*", r"(?<!\w)(?>\w*?[Dd]ecode)\w*[Aa]ttention", 400),  # cubic before
])
def test_the_measure_tells_a_backtracking_pattern(old, new, n):
    """The old patterns grow super-linearly, their rewrites do not (short names: the old are slow)."""
    assert min(_growth(re.compile(old), n=n), _growth(re.compile(old), n=n)) > 5
    assert min(_growth(re.compile(new), n=n), _growth(re.compile(new), n=n)) < 4


def test_every_builtin_pattern_runs_in_linear_time(table, record_property):
    worst = []
    for e in table.entries:
        g = _growth(e.pattern, e.examples)
        if g >= 4:  # a second look before failing: a busy machine can slow one measurement
            g = min(g, _growth(e.pattern, e.examples))
        worst.append((g, e.source))
    worst.sort(reverse=True)
    record_property("kernel pattern growth, worst (10x name)", f"{worst[0][0]:.1f}x {worst[0][1]}")
    slow = [w for w in worst if w[0] >= 4]
    assert not slow, f"patterns slower per character on longer names (quadratic or worse): {slow}"


@pytest.mark.parametrize("rx", [labels._CACHE, labels._METADATA, labels._ROPE, labels._INPUT,
                                trace_layers.ACTIVATION, trace_layers._BINARY_ADD],
                         ids=lambda rx: rx.pattern[:24])
def test_other_name_patterns_run_in_linear_time(rx):
    assert min(_growth(rx), _growth(rx)) < 4


def test_a_name_longer_than_the_limit_is_classified_by_its_head(table):
    """Padding after the identity (argument types, junk) changes nothing; the pattern sees the head."""
    rng = random.Random(5)
    for e in table.entries:
        for x in e.examples:
            pad = "".join(rng.choice("ab_<>:, 0") for _ in range(NAME_LIMIT))
            assert table.match(x + pad) == table.match(x), e.source


_CHILD = textwrap.dedent("""
    import random, sys, time
    from layerc.passes.kernel_tables import KernelTable, _read_dir, builtin_files
    sys.path.insert(0, sys.argv[1])
    from test_kernel_names_hostile import adversaries

    entries = _read_dir(builtin_files())
    rng = random.Random(1)

    def names(n):
        out = ["".join(rng.choice("abcXYZ_0<>:, ()") for _ in range(n))]
        for e in entries:
            out += rng.sample(adversaries(e.pattern.pattern, e.examples, n), 3)
            out += [x + "<" + "float, " * (n // 7) + ">" for x in e.examples[:1]]
        return out

    def seconds(n):
        batch, table = names(n), KernelTable(entries)
        t0 = time.perf_counter()
        for s in batch:
            table.match(s)
        return time.perf_counter() - t0, len(batch)

    small, count = seconds(10_000)
    big, _ = seconds(100_000)
    print(f"{count} {small:.3f} {big:.3f}")
""")


def _limits():
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def test_100kb_names_classify_in_linear_time(record_property):
    """Every entry's adversaries and padded real names at 10 KB and 100 KB, the whole table over
    each, in a child that a hang cannot outlive."""
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, os.path.dirname(os.path.abspath(__file__))], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_limits, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("classifying 100 KB kernel names did not finish in 60 s")
    assert proc.returncode == 0, err
    count, small, big = out.split()
    small, big = float(small), float(big)
    record_property("classify 100 KB names", f"{count} names: {big:.2f} s (10 KB: {small:.2f} s)")
    assert big < 20 * small + 1.0
