"""Layer facts computed over columns: each vectorised step agrees with its plain definition."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from layerc.passes.layer_facts import UNKNOWN, _propagate


def _propagate_by_definition(pass_index: np.ndarray, stage: np.ndarray) -> np.ndarray:
    """Pass by pass, row by row: an unknown stage takes the one before it in its pass; leading
    unknowns take the pass's first known stage."""
    out = stage.copy()
    for q in sorted(set(pass_index.tolist())):
        rows = [r for r in range(len(stage)) if pass_index[r] == q]
        known = [int(out[r]) for r in rows if out[r] != UNKNOWN]
        last = known[0] if known else UNKNOWN
        for r in rows:
            if out[r] == UNKNOWN:
                out[r] = last
            last = out[r]
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.sampled_from([UNKNOWN, 0, 1])), max_size=60), st.booleans())
def test_unknown_stages_take_their_neighbours_in_the_pass(rows, ordered):
    pass_index = np.array([q for q, _ in rows], np.int64)
    if ordered:  # the layer table's order; the function must not rely on it
        pass_index = np.sort(pass_index)
    stage = np.array([s for _, s in rows], np.int8)
    got = _propagate(pass_index, stage)
    assert got.dtype == stage.dtype
    assert got.tolist() == _propagate_by_definition(pass_index, stage).tolist()
