"""The roofline in the Perfetto timeline: per device, counter tracks of each layer's achieved
TFLOP/s, GB/s and share of the roofline over the layer's span, the same figures as the JSON's
layer rows; a trace without shapes gets no counter track."""

from __future__ import annotations

import json

import pytest

from tests.conftest import SHARED
from tests.layerc_cli import run_layerc

QWEN = SHARED / "data" / "traces" / "torch" / "hf_qwen1.5-0.5b_h100.json.gz"


def _packets(path):
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    trace = pb.Trace()
    trace.ParseFromString(path.read_bytes())
    return trace.packet


def _counters(path) -> dict[str, list[tuple[int, float]]]:
    packets = _packets(path)
    names = {p.track_descriptor.uuid: p.track_descriptor.name for p in packets
             if p.HasField("track_descriptor") and p.track_descriptor.HasField("counter")}
    out: dict[str, list[tuple[int, float]]] = {n: [] for n in names.values()}
    for p in packets:
        if p.HasField("track_event") and p.track_event.track_uuid in names:
            assert p.track_event.type == 4  # TYPE_COUNTER
            out[names[p.track_event.track_uuid]].append((p.timestamp, p.track_event.double_counter_value))
    return out


def test_layer_counters_hold_the_json_figures(tmp_path, shared):
    rc, _, err = run_layerc("trace", QWEN, "--json", tmp_path / "t.json", "--perfetto", tmp_path / "t.pftrace")
    assert rc == 0, err
    doc = json.loads((tmp_path / "t.json").read_text())
    counters = _counters(tmp_path / "t.pftrace")
    assert set(counters) == {"layer TFLOP/s", "layer GB/s", "layer % of roofline"}
    known = sorted((r for r in doc["layers"] if r["flops"] is not None), key=lambda r: r["start_ns"])
    rises = [(ts, v) for ts, v in counters["layer TFLOP/s"] if v > 0]
    assert [ts for ts, _ in rises] == [r["start_ns"] for r in known]
    for (_, v), r in zip(rises, known):
        assert v == pytest.approx(r["flops"] / r["duration_ns"] / 1e3, rel=1e-9)
    share = [v for _, v in counters["layer % of roofline"] if v > 0]
    assert share == pytest.approx([r["roofline_pct"] for r in known], rel=1e-9)
    assert all(v == 0 for _, v in counters["layer GB/s"][1::2])  # each value ends with its layer


def test_a_trace_without_shapes_has_no_counter_track(tmp_path, shared):
    trace = SHARED / "data" / "traces" / "torch" / "sglang_qwen3-8b_decode_mi300x.json.gz"
    rc, _, err = run_layerc("perfetto", trace, "-o", tmp_path / "t.pftrace")
    assert rc == 0, err
    assert _counters(tmp_path / "t.pftrace") == {}
