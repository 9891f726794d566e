"""``layerc trace``'s report: terminal tables capped, consecutive alike passes on one row, and
every row still counted (the JSON keeps them all)."""

from __future__ import annotations

import re

import orjson
import pytest

from layerc.backends.trace_report import TABLE_ROWS
from tests.layerc_cli import run_layerc


@pytest.fixture(scope="module")
def replays(tmp_path_factory):
    """A llama serving run: one eager prefill and 60 decode replays of 4 layers each."""
    path = tmp_path_factory.mktemp("replays") / "run.sqlite"
    rc, _, err = run_layerc("gen-nsys", "--model", "llama", "--mode", "node", "--replays", "60", "--layers", "4", path)
    assert rc == 0, err
    return path


def _table(out: str, title: str) -> list[str]:
    """The row lines of a plain-text table (its title, a header, rows, maybe a caption, a blank line)."""
    lines = out.splitlines()
    start = lines.index(title)
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].strip())
    return [line for line in lines[start + 2:end] if not line.startswith("…")]


def test_alike_passes_share_a_row_and_every_pass_is_counted(replays, tmp_path):
    rc, out, err = run_layerc("trace", replays, "--json", tmp_path / "t.json")
    assert rc == 0, err
    doc = orjson.loads((tmp_path / "t.json").read_bytes())
    rows = _table(out, "layers per pass")
    covered = 0
    for row in rows:
        cells = re.split(r"\s{2,}", row.strip())
        span = re.fullmatch(r"(\d+)-(\d+) \((\d+)\)", cells[0])
        first, last = (int(span[1]), int(span[2])) if span else (int(cells[0]), int(cells[0]))
        assert first == covered, "rows follow the passes in order, none skipped"
        if span:
            assert int(span[3]) == last - first + 1
        assert all(n == int(cells[4]) for n in doc["layers_per_pass"][first:last + 1])
        covered = last + 1
    left = re.search(r"… (\d+) more passes", out)
    assert covered + (int(left[1]) if left else 0) == len(doc["layers_per_pass"]) == 61
    assert len(rows) <= TABLE_ROWS < 61


def test_the_layer_table_is_capped_with_a_count_of_the_rest(replays):
    rc, out, err = run_layerc("trace", replays, "--show-layer-terminal")
    assert rc == 0, err
    rows = _table(out, "layers")
    assert len(rows) == TABLE_ROWS
    assert f"… {61 * 4 - TABLE_ROWS} more layers (--json and --csv have every one)" in out
