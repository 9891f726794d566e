"""The column encoder writes what the protobuf library writes: random packets, built both ways,
are byte-identical (field order, varint sizes up to ten bytes, negative ints, fixed64 flows,
repeated fields, embedded messages, already-encoded fields, absent fields)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from layerc.backends.pb_columns import Rows, varint_rows, varint_size

INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
UINT = st.one_of(st.integers(0, 300), st.integers(0, (1 << 63) - 1))
ANNOTATION = st.tuples(st.integers(1, 200), st.one_of(st.tuples(st.just("int"), INT64), st.tuples(st.just("iid"), UINT)))
EVENT = st.fixed_dictionaries({
    "ts": UINT, "begin": st.booleans(), "track": UINT, "name": UINT,
    "annotations": st.lists(ANNOTATION, max_size=4), "ends": st.lists(UINT, max_size=2),
    "flows": st.lists(UINT, max_size=3), "span_arg": st.one_of(st.none(), st.tuples(st.text(max_size=8), INT64)),
})


def _by_library(events: list[dict]) -> bytes:
    trace = pb.Trace()
    for e in events:
        p = trace.packet.add()
        p.timestamp = e["ts"]
        p.trusted_packet_sequence_id = 7
        te = p.track_event
        te.type = 1 if e["begin"] else 2
        te.track_uuid = e["track"]
        if e["begin"]:
            te.name_iid = e["name"]
            p.sequence_flags = 2
        for iid, (kind, value) in e["annotations"]:
            if kind == "int":
                te.debug_annotations.add(name_iid=iid, int_value=value)
            else:
                te.debug_annotations.add(name_iid=iid, string_value_iid=value)
        if e["span_arg"] is not None:
            te.debug_annotations.add(name=e["span_arg"][0], int_value=e["span_arg"][1])
        te.flow_ids.extend(e["flows"])
        te.terminating_flow_ids.extend(e["ends"])
    return trace.SerializeToString()


def _i64(values) -> np.ndarray:
    """Python ints, signed or up to 2**64 - 1, as the int64 columns that hold their bits."""
    return np.array([v & ((1 << 64) - 1) for v in values], np.uint64).view(np.int64)


def _by_columns(events: list[dict]) -> bytes:
    n = len(events)
    col = lambda key: _i64(e[key] for e in events)  # noqa: E731
    begin = np.array([e["begin"] for e in events], bool)
    te = Rows(pb.TrackEvent.DESCRIPTOR, n)
    for j in range(max((len(e["annotations"]) for e in events), default=0)):  # the j-th annotation of each event
        has = np.array([len(e["annotations"]) > j for e in events], bool)
        picked = [e["annotations"][j] if len(e["annotations"]) > j else (0, ("none", 0)) for e in events]
        iids = np.array([iid for iid, _ in picked], np.int64)
        values = _i64(v for _, (_, v) in picked)
        for kind, field in (("int", "int_value"), ("iid", "string_value_iid")):
            mine = has & np.array([k == kind for _, (k, _) in picked], bool)
            sub = Rows(pb.DebugAnnotation.DESCRIPTOR, n).varint("name_iid", iids).varint(field, values)
            te.message("debug_annotations", sub, mine)  # one field: added in the order the library adds them
    blobs, which = [], np.full(n, -1, np.int64)
    for i, e in enumerate(events):
        if e["span_arg"] is not None:
            one = pb.TrackEvent()
            one.debug_annotations.add(name=e["span_arg"][0], int_value=e["span_arg"][1])
            which[i] = len(blobs)
            blobs.append(one.SerializeToString())
    te.encoded(pb.TrackEvent.DESCRIPTOR.fields_by_name["debug_annotations"].number, blobs, which)
    te.varint("type", np.where(begin, 1, 2))
    te.varint("name_iid", col("name"), begin)
    te.varint("track_uuid", col("track"))
    te.repeated_fixed64("flow_ids", _i64(f for e in events for f in e["flows"]),
                        np.array([len(e["flows"]) for e in events], np.int64))
    for j in range(max((len(e["ends"]) for e in events), default=0)):
        has = np.array([len(e["ends"]) > j for e in events], bool)
        te.fixed64("terminating_flow_ids", _i64(e["ends"][j] if len(e["ends"]) > j else 0 for e in events), has)
    packets = Rows(pb.TracePacket.DESCRIPTOR, n)
    packets.varint("sequence_flags", 2, begin)  # added first: written in field-number order all the same
    packets.varint("timestamp", col("ts"))
    packets.varint("trusted_packet_sequence_id", 7)
    packets.message("track_event", te)
    return Rows(pb.Trace.DESCRIPTOR, n).message("packet", packets).tobytes()


@settings(max_examples=300, deadline=None)
@given(st.lists(EVENT, max_size=12))
def test_rows_encode_as_the_protobuf_library_does(events):
    assert _by_columns(events) == _by_library(events)


@given(st.lists(INT64, max_size=50))
def test_varints_match_the_library(values):
    """Each value's varint (byte k of every value a row of ``varint_rows``), its own bytes only."""
    v = np.array(values, np.int64)
    size = varint_size(v)
    rows = varint_rows(v, size)
    got = rows.T[np.arange(len(rows)) < size[:, None]] if len(v) else np.zeros(0, np.uint8)
    assert got.tobytes() == b"".join(pb.DebugAnnotation(int_value=x).SerializeToString()[1:] for x in values)


def test_a_field_of_another_type_or_count_is_refused():
    import pytest

    rows = Rows(pb.TrackEvent.DESCRIPTOR, 3)
    with pytest.raises(TypeError):
        rows.varint("debug_annotations", 1)
    sints = [f for f in pb.TestConfig.DummyFields.DESCRIPTOR.fields if f.type in (17, 18)]  # zigzag varints: not written
    assert sints
    with pytest.raises(TypeError):
        Rows(pb.TestConfig.DummyFields.DESCRIPTOR, 1).varint(sints[0].name, -1)
    with pytest.raises(ValueError):
        rows.varint("track_uuid", np.arange(2))
    with pytest.raises(ValueError):
        rows.message("debug_annotations", Rows(pb.DebugAnnotation.DESCRIPTOR, 2))
    with pytest.raises(ValueError):  # a presence column of another length
        rows.varint("track_uuid", 1, np.ones(2, bool))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=20), min_size=1, max_size=40), st.data())
def test_pieces_are_put_together_alike_by_numpy_and_by_arrow(blobs, data):
    """``take`` joins pieces in any order, repeated or left out, the same way on both of its paths
    (numpy for small buffers, Arrow's take for large ones)."""
    import layerc.backends.pb_columns as pbc

    order = np.array(data.draw(st.lists(st.integers(0, len(blobs) - 1), max_size=60)), np.int64)
    buffer = np.frombuffer(b"".join(blobs) or b"\0", np.uint8)[: sum(map(len, blobs))]
    offsets = np.concatenate([[0], np.cumsum([len(b) for b in blobs])]).astype(np.int64)
    want = b"".join(blobs[i] for i in order)
    small = pbc._SMALL
    try:
        for pbc._SMALL, arrow in ((1 << 20, False), (7, False), (1, False), (1 << 20, True)):  # (numpy a few bytes at a time too)
            assert bytes(pbc.take(buffer, offsets, order, arrow)) == want
    finally:
        pbc._SMALL = small


def test_rows_of_several_groups_are_joined_in_order():
    """``join`` interleaves the rows of several encodings (a kind's BEGINs, all ENDs...) back in
    event order; one with a repeated field has more pieces per row than one without."""
    from layerc.backends.pb_columns import join

    def events(ts, flows):
        n = len(ts)
        te = Rows(pb.TrackEvent.DESCRIPTOR, n).varint("track_uuid", np.arange(n) + 7)
        te.repeated_fixed64("flow_ids", np.arange(sum(flows)), np.array(flows, np.int64))
        packets = Rows(pb.TracePacket.DESCRIPTOR, n).varint("timestamp", np.array(ts)).message("track_event", te)
        return Rows(pb.Trace.DESCRIPTOR, n).message("packet", packets)

    a, b = events([10, 30, 50], [0, 2, 1]), events([20, 40], [0, 0])
    group = np.array([0, 1, 0, 1, 0])
    row = np.array([0, 0, 1, 1, 2])
    joined = pb.Trace.FromString(bytes(join([a.pieces(), b.pieces()], group, row)))
    assert [p.timestamp for p in joined.packet] == [10, 20, 30, 40, 50]
    assert [list(p.track_event.flow_ids) for p in joined.packet] == [[], [], [0, 1], [], [2]]
    assert bytes(join([a.pieces(), b.pieces()], group, row)) == b"".join(_one(a if g == 0 else b, r) for g, r in zip(group, row))


def _one(rows: Rows, r: int) -> bytes:
    """Row ``r`` of ``rows`` alone, by joining only it."""
    from layerc.backends.pb_columns import join

    return bytes(join([rows.pieces()], np.array([0]), np.array([r])))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), INT64, st.text(max_size=70)), max_size=20), st.integers(1, 1 << 20))
def test_small_messages_laid_out_as_one_block_encode_as_the_library_does(rows, iid):
    """An embedded message whose fields lie side by side with no gap (a constant name id, then
    one value of any size: the writer's debug annotations) is laid out as one block, under 128
    bytes; one of 128 or more (a long name), or absent from some rows, is encoded all the same."""
    n = len(rows)
    has = np.array([h for h, _, _ in rows], bool)
    values = np.array([v for _, v, _ in rows], np.int64)
    te = Rows(pb.TrackEvent.DESCRIPTOR, n)
    te.message("debug_annotations", Rows(pb.DebugAnnotation.DESCRIPTOR, n).varint("name_iid", iid).varint("int_value", values), has)
    te.message("debug_annotations", Rows(pb.DebugAnnotation.DESCRIPTOR, n).varint("int_value", values))
    blobs = [pb.TrackEvent(debug_annotations=[pb.DebugAnnotation(name=t)]).SerializeToString() for _, _, t in rows]
    te.encoded(pb.TrackEvent.DESCRIPTOR.fields_by_name["debug_annotations"].number, blobs, np.arange(n))
    te.varint("track_uuid", values)
    want = pb.Trace()
    for h, v, t in rows:
        e = want.packet.add().track_event
        if h:
            e.debug_annotations.add(name_iid=iid, int_value=v)
        e.debug_annotations.add(int_value=v)
        e.debug_annotations.add(name=t)
        e.track_uuid = v & ((1 << 64) - 1)
    got = Rows(pb.Trace.DESCRIPTOR, n).message("packet", Rows(pb.TracePacket.DESCRIPTOR, n).message("track_event", te)).tobytes()
    assert got == want.SerializeToString()
