"""A short fuzz campaign over every reader (``make fuzz`` runs the long one): no internal error,
no hang, no input changed, no temporary file, errors located, time and memory within bounds. And
the campaign's own parts: every mutator changes its input, the harness catches what it checks."""

from __future__ import annotations

import gzip
import hashlib
import json
import sqlite3
import sys

import pytest

from tests.fuzz import harness
from tests.fuzz.campaign import draw_cases, figures, run_campaign
from tests.fuzz.harness import Result, _check_error_line, _Run
from tests.fuzz.mutators import (ARGUMENT_CLASSES, SQLITE_CLASSES, TEXT_CLASSES, Mutation, apply, apply_packed,
                                 apply_sqlite)
from tests.fuzz.targets import TARGETS

#: cases per target in `make test` (about 1 s each, two at a time)
PER_TARGET = 3
SAMPLE = json.dumps({"traceEvents": [{"ph": "X", "name": f"k{i}", "ts": 12.5 + i, "dur": 3, "id": i % 7,
                                      "args": {"stream": 7, "correlation": 1000 + i}} for i in range(40)]},
                    indent=1).encode()
DRAWS = ((0.1, 0.2, 1), (0.5, 0.7, 2), (0.9, 0.1, 3), (0.3, 0.9, 4))


def test_a_short_campaign_over_every_reader_finds_nothing(tmp_path, record_property):
    results = run_campaign(PER_TARGET * len(TARGETS), 2, 20261125, [t.name for t in TARGETS], tmp_path,
                           tmp_path / "failing")
    assert {r.target for r in results} == {t.name for t in TARGETS}
    record_property("fuzz cases (make test)", len(results))
    assert not [r for r in results if r.failures], figures(results)


def test_cases_are_drawn_the_same_way_from_the_same_seed():
    names = [t.name for t in TARGETS]
    first, again = draw_cases(40, 7, names), draw_cases(40, 7, names)
    assert [(c.target.name, c.command, c.mutations) for c in first] == \
           [(c.target.name, c.command, c.mutations) for c in again]
    assert {c.target.name for c in first} == set(names)
    assert len({(c.target.name, c.mutations) for c in first}) == len(first)
    assert len({c.mutations for c in first}) >= len(first) - 1  # the simplest example once, not once per target


@pytest.mark.parametrize("kind", sorted(set(TEXT_CLASSES) | set(ARGUMENT_CLASSES)))
def test_every_text_mutation_changes_its_input(kind):
    """A mutator that returns its input unchanged would make the campaign test nothing."""
    changed = [apply(SAMPLE, (Mutation(kind, a, b, n),), b"other text") != SAMPLE for a, b, n in DRAWS]
    assert all(changed) if kind != "lines" else any(changed)


@pytest.mark.parametrize("kind", ["flip", "extreme", "huge_id", "type_swap", "gz_flip", "gz_truncate"])
def test_a_packed_sample_is_mutated_inside_or_damaged_outside(kind):
    packed = gzip.compress(SAMPLE, mtime=0)
    mutated = apply_packed(packed, (Mutation(kind, 0.4, 0.3, 5),))
    assert mutated != packed and mutated.startswith(b"\x1f\x8b")
    if not kind.startswith("gz_"):
        assert gzip.decompress(mutated) != SAMPLE


def test_a_huge_id_is_changed_everywhere_it_occurs_and_nowhere_else():
    sample = b'{"id": 17, "refs": [17, 17], "other": 170, "ts": 17.5}'
    mutated = apply(sample, (Mutation("huge_id", 0.0, 0.5, 0),))
    assert mutated == b'{"id": 9223372036854775807, "refs": [9223372036854775807, 9223372036854775807], ' \
                      b'"other": 170, "ts": 17.5}'


def test_a_bomb_is_small_and_inflates_past_the_limit():
    bomb = apply(SAMPLE, (Mutation("bomb", 0.5, 0.5, 1),))
    assert len(bomb) < 1 << 20
    assert len(gzip.decompress(bomb)) > 256 << 20


@pytest.mark.parametrize("kind", SQLITE_CLASSES)
def test_every_sqlite_mutation_changes_the_database(tmp_path, kind):
    def digest(p):
        return hashlib.sha256(p.read_bytes()).hexdigest()

    changed = []
    for a, b, n in DRAWS:
        db_path = tmp_path / f"{kind}{n}.sqlite"
        db = sqlite3.connect(db_path)
        db.execute("CREATE TABLE kernels (start INTEGER, end INTEGER, name TEXT, stream INTEGER)")
        db.execute("CREATE TABLE strings (id INTEGER, value TEXT)")
        db.executemany("INSERT INTO kernels VALUES (?, ?, ?, ?)", [(i, i + 5, f"k{i}", 7) for i in range(50)])
        db.executemany("INSERT INTO strings VALUES (?, ?)", [(i, f"s{i}") for i in range(50)])
        db.commit()
        db.close()
        before = digest(db_path)
        apply_sqlite(str(db_path), (Mutation(kind, a, b, n),))
        changed.append(digest(db_path) != before)
    assert any(changed)


def _result(first: str) -> Result:
    return Result("t", "c", "flip", 10, 1, first, 0.1, 0.1, 10.0)


@pytest.mark.parametrize("stderr, stdout, failing, finding", [
    ("in.json:3:14: error: expected a value\n", "", False, False),
    ("in.json: error: not a trace\n", "", False, False),
    ("<pipeline>:1:5: error: unknown pass\n", "", False, False),
    ("layerc: error: the input nests deeper than layerc can follow\n", "", False, True),
    ("in.sqlite: warning: odd\nin.sqlite: error: no kernels\n", "", False, True),
    ("", "in.dot:4:2: error: channel ends nowhere\n", True, False),  # errors on stdout only: the user sees no error
    ("layerc: internal error: KeyError: 'x'\n", "", True, False),
    ("", "", True, False),
    ("something went wrong\n", "", True, False),
])
def test_the_error_line_check(stderr, stdout, failing, finding):
    result = _result(stderr.splitlines()[0] if stderr else "")
    _check_error_line(result, _Run(1, stderr, stdout, 0.1, 0.1, 1000))
    assert bool(result.failures) == failing and bool(result.findings) == finding


def test_the_harness_kills_a_hang_and_its_group(tmp_path, monkeypatch):
    """A child that hangs (and forks a grandchild that hangs) is killed at the wall limit, group and all."""
    monkeypatch.setattr(harness, "WALL_LIMIT", 1.5)
    code = "import os, time; os.fork(); time.sleep(60)"
    run = harness._run(["-c", code], tmp_path, tmp_path, program=(sys.executable,))
    assert run.exit is None and run.seconds < 10


def test_the_harness_measures_the_childs_own_peak_memory(tmp_path):
    code = "import time; b = bytearray(300 << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(0.3)"
    big = harness._run(["-c", code], tmp_path, tmp_path, program=(sys.executable,))
    small = harness._run(["-c", "pass"], tmp_path, tmp_path, program=(sys.executable,))
    assert big.exit == 0 and 300 <= big.peak_kb / 1024 < 400
    assert small.peak_kb / 1024 < 100


def test_the_harness_caps_the_address_space(tmp_path):
    code = "b = bytearray(6 << 30)"
    run = harness._run(["-c", code], tmp_path, tmp_path, program=(sys.executable,))
    assert run.exit == 1 and "MemoryError" in run.stderr


def test_an_internal_error_is_placed_at_layercs_innermost_frame():
    tb = (f'Traceback (most recent call last):\n  File "{harness.ROOT}/tools/driver.py", line 90, in main\n'
          f'  File "{harness.ROOT}/grammar/nsys.py", line 252, in _memops\n'
          f'  File "{harness.ROOT}/.venv/lib/python3.11/site-packages/numpy/core/x.py", line 3, in f\n'
          "ValueError: invalid literal\n")
    assert harness._where(tb) == "grammar/nsys.py:252 in _memops"

