"""Column helpers of the trace IR against their numpy definitions."""

from __future__ import annotations

import numpy as np
from hypothesis import given, strategies as st

from layerc.ir.trace import distinct, unique_inverse

COLUMNS = st.one_of(st.lists(st.integers(-5, 60)),  # ids: a dense range, the table path
                    st.lists(st.integers(-(1 << 62), 1 << 62)))  # sparse keys: the search path


@given(COLUMNS | st.tuples(st.lists(st.integers(-128, 127)), st.sampled_from([np.int8, np.int16, np.uint8, np.int32])))
def test_unique_inverse_is_np_unique(values):
    values, dtype = values if isinstance(values, tuple) else (values, np.int64)  # narrow types must not wrap
    v = np.array(values, np.int64).astype(dtype)
    ids, inverse = unique_inverse(v)
    want_ids, want_inverse = np.unique(v, return_inverse=True)
    assert ids.tolist() == want_ids.tolist() and ids.dtype == v.dtype
    assert inverse.tolist() == want_inverse.reshape(-1).tolist()


@given(COLUMNS)
def test_distinct_is_the_sorted_non_negative_values(values):
    v = np.array(values, np.int64)
    assert distinct(v).tolist() == sorted({x for x in values if x >= 0})
