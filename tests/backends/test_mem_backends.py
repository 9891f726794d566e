"""The memory backends: JSON and terminal summary (golden files), Graphviz pictures, the liveness
chart, the Perfetto trace (read back) and the stacked PNG."""

from __future__ import annotations

import io
import os

import numpy as np
import orjson
import pytest
from PIL import Image

from tests.conftest import TESTS
from layerc.backends import mem_combine
from layerc.backends.mem_chart import liveness_chart
from layerc.backends.graphviz import render_dot
from layerc.backends.mem_perfetto import NS_PER_OP, write_memory_pftrace
from layerc.backends.mem_report import ir_text, report, show
from layerc.grammar.ws_memory import read_log_text
from layerc.ir.diagnostics import LayercError
from layerc.passes.base import Context
from layerc.passes.mem_check import MEM_PASSES
from layerc.passes.pipeline import PassManager, build_pipeline
from layerc.backends.synth import ws_mem as gen

GOLDEN = TESTS / "golden" / "mem"
PNG = b"\x89PNG\r\n\x1a\n"


def _module(*specs):
    m = read_log_text(gen.debug_log(list(specs) or [gen.flash_attention_backward()]), "fa_bwd.log")
    PassManager(build_pipeline("mem-liveness,mem-check", MEM_PASSES)).run(Context(), m)
    return m


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("LAYERC_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8")


def test_json_report_golden():
    m = _module()
    doc = report(m)
    _golden("fa_bwd.json", orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode() + "\n")
    k = doc["kernels"][0]
    assert (k["peak_smem_bytes"], k["peak_smem_at"], k["peak_tmem_columns"], k["peak_tmem_at"]) == (132096, 51, 512, 56)
    assert len(k["buffers"]) == 12 and len(k["channels"]) == 16 and [p["id"] for p in k["partitions"]] == [0, 1, 3, 4, 5]
    assert sorted(k["tmem"]["live_at_peak"]) == ["dk", "dpT", "dv", "qkT"]
    assert doc["capacity"]["tmem_columns"] == 512 and doc["findings"] == {"error": 0, "warning": 0, "note": 2}
    assert {f["code"] for f in k["findings"]} == {"shared-pool"}


def test_terminal_summary_golden():
    from rich.console import Console

    m = _module()
    buf = io.StringIO()
    show(m, Console(file=buf, width=120, color_system=None, highlight=False, soft_wrap=True), ["out/x.png"])
    _golden("fa_bwd.txt", buf.getvalue())


def test_ir_text():
    m = _module()
    text = ir_text(m)
    assert text.startswith('kernel "_attn_bwd" {')
    assert "  smem k B0 32 KiB [36-77)" in text and "  tmem dv 128x128 [40-86) operand_d=2" in text
    assert "  channel ch3 TMEM [D] dv: 40 -> 66" in text
    assert "  liveness tmem: peak 512 columns at 56 of 512" in text


def test_graphviz_pictures():
    m = _module()
    k = m.kernels[0]
    for g in k.graphs.values():
        assert render_dot(g.dot, "png").startswith(PNG)
    svg = render_dot(k.graphs["combined"].dot, "svg").decode()
    assert "Partition 4" in svg and "tc_gen5_mma" in svg
    with pytest.raises(LayercError, match="Graphviz 'dot' failed"):
        render_dot("digraph { a -> }", "png")
    with pytest.raises(LayercError, match="png or svg"):
        render_dot("digraph {}", "pdf")


def test_liveness_chart():
    m = _module()
    png = liveness_chart(m, m.kernels[0], "png")
    im = Image.open(io.BytesIO(png))
    assert png.startswith(PNG) and im.width >= 1500 and im.height >= 1000
    assert liveness_chart(m, m.kernels[0], "svg").startswith(b"<?xml")
    hopper = gen.flash_attention_backward("hopper")
    hopper.tmem, hopper.channels = [], [ch for ch in hopper.channels if ch.kind == "SMEM"]
    m2 = _module(hopper)
    im2 = Image.open(io.BytesIO(liveness_chart(m2, m2.kernels[0], "png")))
    assert im2.height < im.height  # no TMEM panel, fewer rows


def test_perfetto_trace_reads_back(tmp_path):
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace

    m = _module(gen.flash_attention_backward(), gen.flash_attention_backward("_attn_bwd_nodebug", debug=False))
    stats = write_memory_pftrace(m, tmp_path / "m.pftrace")
    trace = Trace.FromString((tmp_path / "m.pftrace").read_bytes())
    tracks = {p.track_descriptor.uuid: p.track_descriptor for p in trace.packet if p.HasField("track_descriptor")}
    assert stats["tracks"] == len(tracks)
    procs = {t.process.process_name: t.uuid for t in tracks.values() if t.HasField("process")}
    assert set(procs) == {"_attn_bwd memory", "_attn_bwd_nodebug memory"}
    name = {u: t.name for u, t in tracks.items()}
    events = [p for p in trace.packet if p.HasField("track_event")]
    assert [p.timestamp for p in events] == sorted(p.timestamp for p in events)
    for k in m.kernels:
        proc = procs[f"{k.name} memory"]
        mine = {u for u, t in tracks.items() if t.parent_uuid == proc}
        b = k.buffers
        for i in range(len(b)):
            track = next(u for u in mine if name[u] == f"{'SMEM' if b.kind[i] == 0 else 'TMEM'} {m.text(b.name[i])}")
            times = [(p.track_event.type, p.timestamp) for p in events if p.track_event.track_uuid == track]
            assert times == [(1, int(b.start[i]) * NS_PER_OP), (2, int(b.end[i]) * NS_PER_OP)]
        for mem, label in (("smem", "SMEM live bytes"), ("tmem", "TMEM live columns")):
            live = k.liveness[mem]
            track = next(u for u in mine if name[u] == label)
            steps = [(p.timestamp // NS_PER_OP, p.track_event.counter_value) for p in events if p.track_event.track_uuid == track]
            assert steps == list(zip(live.ops.tolist(), live.live.tolist())) and steps[-1][1] == 0
        partitions = [u for u in mine if name[u].startswith("partition ")]
        assert len(partitions) == (len(k.partitions) if (k.key_ops.op_id >= 0).any() else 0)
    flows = [f for p in events for f in p.track_event.flow_ids]
    ends = [f for p in events for f in p.track_event.terminating_flow_ids]
    assert sorted(flows) == sorted(ends) and len(flows) == stats["flows"] == 16  # the debug kernel's channels


def test_stack_labels_and_scales(monkeypatch):
    def png(w, h, color):
        buf = io.BytesIO()
        Image.new("RGB", (w, h), color).save(buf, "PNG")
        return buf.getvalue()

    out = Image.open(io.BytesIO(mem_combine.stack([("a", png(800, 300, "red")), ("b", png(1000, 200, "blue"))])))
    bar = mem_combine.TITLE_SIZE + 18
    assert out.width == 1000 + 2 * mem_combine.MARGIN
    assert out.height == 300 + 200 + 2 * (bar + mem_combine.MARGIN) + mem_combine.MARGIN
    arr = np.asarray(out)
    assert (arr[mem_combine.MARGIN + bar + 10, mem_combine.MARGIN + 10] == [255, 0, 0]).all()
    wide = Image.open(io.BytesIO(mem_combine.stack([("a", png(500, 100, "red")), ("b", png(9000, 100, "blue"))])))
    # scaled towards the other pictures' width, but never below MIN_SCALE (text stays legible)
    assert wide.width == round(9000 * mem_combine.MIN_SCALE) + 2 * mem_combine.MARGIN
    fits = Image.open(io.BytesIO(mem_combine.stack([("a", png(500, 100, "red")), ("b", png(3000, 100, "blue"))])))
    assert fits.width == mem_combine.WIDE + 2 * mem_combine.MARGIN
    monkeypatch.setattr(mem_combine, "MAX_PIXELS", 200_000)
    capped = Image.open(io.BytesIO(mem_combine.stack([("a", png(800, 600, "red"))])))
    assert capped.width * capped.height <= 200_000
    with pytest.raises(ValueError):
        mem_combine.stack([])
