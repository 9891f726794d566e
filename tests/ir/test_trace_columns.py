"""Column helpers of the trace IR against their numpy definitions."""

from __future__ import annotations

import numpy as np
from hypothesis import given, strategies as st

from layerc.ir.trace import distinct, first_rows, group_then_start, isin, last_rows, link, median, unique, unique_inverse

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


def test_unique_inverse_wide_dense_range_is_np_unique():
    """Each of its tables: a range the caches hold (int64 ranks), a wider one (int32 ranks),
    and one too sparse for a table (a search)."""
    rng = np.random.default_rng(7)
    for span, n in ((5_000, 20_000), (3 << 20, 1 << 20), (1 << 40, 1_000)):
        v = rng.integers(-(span // 3), span - span // 3, n)
        ids, inverse = unique_inverse(v)
        want_ids, want_inverse = np.unique(v, return_inverse=True)
        assert np.array_equal(ids, want_ids) and np.array_equal(inverse, want_inverse.reshape(-1)) and inverse.dtype == np.int64


@given(COLUMNS)
def test_distinct_is_the_sorted_non_negative_values(values):
    v = np.array(values, np.int64)
    assert distinct(v).tolist() == sorted({x for x in values if x >= 0})


@given(st.lists(st.integers(-(1 << 62), 1 << 62), max_size=200), st.lists(st.integers(-5, 5), max_size=30),
       st.sampled_from([np.int64, np.int32, np.int8]))
def test_the_numpy_ma_free_helpers_are_numpy(values, small, dtype):
    """``unique``, ``isin`` and ``median`` (which spare a small run numpy.ma's import) give what
    np.unique, np.isin and np.median give, on wide and narrow integer columns, empty ones too."""
    wide = np.array(values, np.int64)
    narrow = np.array(small, dtype)
    for v in (wide, narrow, np.concatenate([narrow.astype(np.int64), wide])):
        assert np.array_equal(unique(v), np.unique(v)) and unique(v).dtype == v.dtype
        assert np.array_equal(isin(v, narrow), np.isin(v, narrow))
        assert np.array_equal(isin(narrow, v), np.isin(narrow, v))
        if len(v):
            assert median(v) == float(np.median(v))
    big = np.arange(1 << 17) % 977  # past the length where unique leaves the work to np.unique
    assert np.array_equal(unique(big), np.arange(977)) and np.isnan(median(np.zeros(0)))
    assert np.array_equal(isin(big, [3, 976, 2000]), np.isin(big, [3, 976, 2000])) and median(big) == np.median(big)


@given(st.lists(st.integers(0, 9), max_size=60), st.integers(10, 12))
def test_first_and_last_rows_of_each_id(ids, n):
    """Each id's first and last row, -1 for an id that no row holds, as a scan finds them."""
    column = np.array(ids, np.int64)
    first, last = first_rows(column, n), last_rows(column, n)
    for i in range(n):
        rows = [r for r, v in enumerate(ids) if v == i]
        assert first[i] == (rows[0] if rows else -1) and last[i] == (rows[-1] if rows else -1)


@given(COLUMNS, COLUMNS, st.integers(0, 1 << 40))
def test_link_finds_each_keys_first_target(keys, targets, shift):
    """Each key's first equal target (-1 for none, and for a negative key), as a scan finds it:
    dense targets through the table of their range, sparse ones through the search, either
    shifted far from zero (process keys: the pid above the correlation id)."""
    for k, t in ((keys, targets), ([x + shift for x in keys], [x + shift if x >= 0 else x for x in targets])):
        got = link(np.array(k, np.int64), np.array(t, np.int64))
        want = [next((i for i, y in enumerate(t) if y == x), -1) if x >= 0 else -1 for x in k]
        assert got.tolist() == want


def test_every_tables_columns_are_its_fields_in_order():
    """``COLUMNS`` (name -> dtype) is what a table's methods walk: it names the dataclass's
    fields, all of them, in their order."""
    from dataclasses import fields

    from layerc.ir import trace

    tables = [c for c in vars(trace).values() if isinstance(c, type) and issubclass(c, trace.Table) and c is not trace.Table]
    assert len(tables) >= 6
    for cls in tables:
        assert [f.name for f in fields(cls)] == list(cls.COLUMNS), cls.__name__



@given(st.lists(st.tuples(st.integers(0, 5) | st.integers(0, 1 << 20), st.integers(0, 50)), max_size=80), st.booleans())
def test_group_then_start_is_lexsort(rows, in_start_order):
    """Rows by group then start, as ``np.lexsort`` orders them: the stable sort by group alone
    where the rows come in start order, groups narrow or wide; both keys otherwise."""
    if in_start_order:
        rows.sort(key=lambda r: r[1])
    group = np.array([g for g, _ in rows], np.int64)
    start = np.array([s for _, s in rows], np.int64)
    assert group_then_start(group, start).tolist() == np.lexsort((start, group)).tolist()


@given(st.lists(st.tuples(st.integers(-1, 3), st.integers(0, 1 << 40)), max_size=30), st.data())
def test_constant_columns_are_held_once_and_read_as_before(rows, data):
    """``compact`` holds a column of one value once (a one-GPU trace's device, an absent field);
    every row reads as before, a selection, a slice or a join keeps what is constant constant,
    and a write into one raises instead of changing every row."""
    import pytest

    from layerc.ir.trace import Kernels, is_constant

    k = Kernels.from_columns({"start": np.array([t for _, t in rows], np.int64), "device": np.array([d for d, _ in rows], np.int32),
                              "stream": np.full(len(rows), 7, np.int64)})
    before = {c: getattr(k, c).copy() for c in k.COLUMNS}
    k.compact()
    for c in k.COLUMNS:
        col = getattr(k, c)
        assert col.dtype == before[c].dtype and np.array_equal(col, before[c])
        assert is_constant(col) == (len(rows) > 1 and len(set(before[c].tolist())) == 1)
    if len(rows) > 1:
        assert is_constant(k.graph_id) and is_constant(k.stream) and k.stream.nbytes == 8 * len(rows)  # (nbytes counts rows)
        assert k.stream.base is not None and k.stream.base.nbytes == 8
        with pytest.raises(ValueError):
            k.stream[0] = 1
    pick = data.draw(st.sampled_from(["mask", "index", "slice"]))
    index = (np.array(data.draw(st.lists(st.booleans(), min_size=len(rows), max_size=len(rows))), bool) if pick == "mask" else
             np.array(data.draw(st.lists(st.integers(0, max(len(rows) - 1, 0)), max_size=10 if rows else 0)), np.int64) if pick == "index" else
             slice(data.draw(st.integers(0, 5)), data.draw(st.integers(0, 40))))
    taken = k.take(index)
    for c in k.COLUMNS:
        assert np.array_equal(getattr(taken, c), before[c][index]) and getattr(taken, c).dtype == before[c].dtype
    joined = k.concat(taken)
    for c in k.COLUMNS:
        assert np.array_equal(getattr(joined, c), np.concatenate([before[c], before[c][index]]))
        a, b = getattr(k, c), getattr(taken, c)
        if is_constant(a) and is_constant(b) and a[0] == b[0]:
            assert is_constant(getattr(joined, c))


def test_a_read_trace_holds_its_constant_columns_once():
    """A one-GPU Kineto capture: its device, and the graph ids Kineto does not record, are
    held once after reading; what varies is not."""
    from pathlib import Path

    from layerc.grammar.traces import read_trace
    from layerc.ir.trace import is_constant

    k = read_trace(Path(__file__).parents[1] / "data" / "gpu" / "hf_llama_eager.json.gz").kernels
    assert len(k) > 1000
    assert is_constant(k.device) and is_constant(k.graph_id) and is_constant(k.graph_node_id)
    assert not is_constant(k.start) and not is_constant(k.name) and not is_constant(k.correlation)
