"""JSON outputs hold any integer an input can: orjson stops at 64 bits, the fallback does not."""

from __future__ import annotations

import json
import re

import numpy as np
from hypothesis import given, strategies as st

from layerc.backends.json_encoding import to_json
from tests.layerc_cli import run_layerc

big = st.one_of(st.integers(), st.integers(min_value=1 << 63, max_value=1 << 200), st.integers(max_value=-(1 << 64)))
docs = st.recursive(st.one_of(big, st.text(max_size=5), st.floats(allow_nan=False, allow_infinity=False), st.none()),
                    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=4), inner, max_size=4)),
                    max_leaves=12)


@given(doc=docs, indent=st.booleans())
def test_any_integer_is_written_exactly(doc, indent):
    assert json.loads(to_json(doc, indent=indent)) == doc


def test_numpy_values_in_the_fallback():
    doc = {"a": np.arange(3), "b": np.int64(7), "c": 10**30}
    assert json.loads(to_json(doc, numpy=True)) == {"a": [0, 1, 2], "b": 7, "c": 10**30}


def test_opt_emits_a_dump_whose_constants_pass_64_bits(tmp_path):
    """Every integer constant of a generated dump pushed past 64 bits (both signs): the JSON IR
    holds each one exactly."""
    run_layerc("gen-dump", "llama", tmp_path / "g")
    (path,) = (tmp_path / "g").glob("*_compile_model.txt")
    huge = iter([10**30, -(2**70)] * 10_000)
    lines, n = [], 0
    for line in path.read_text().splitlines(keepends=True):
        head, sep, tail = line.partition(") : ")  # the arguments, not the out-info's sizes
        if sep and " = " in head:
            head, k = re.subn(r"(?<=, )-?\d+(?=[,)\]]|$)", lambda m: str(next(huge)), head)
            n += k
        lines.append(head + sep + tail)
    assert n > 10
    path.write_text("".join(lines))
    rc, _, err = run_layerc("opt", path, "--emit", "json", "-o", tmp_path / "ir.json")
    assert rc == 0, err
    doc = json.loads((tmp_path / "ir.json").read_text())
    found = re.findall(r"-?\d{20,}", json.dumps(doc))
    assert {str(10**30), str(-(2**70))} <= set(found)
