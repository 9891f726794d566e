"""mem-liveness against a brute-force recount; mem-check's findings on clean and on broken dumps,
each at the line it is about; both passes through pipelines and on their own."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layerc.grammar.ws_memory import read_log_text
from layerc.ir.diagnostics import ParseError
from layerc.ir.memory import SMEM, TMEM, Buffers, Kernel, MemoryModule
from layerc.passes.base import Context
from layerc.passes.mem_check import MEM_PASSES, MemCheck, axis_ticks
from layerc.passes.mem_liveness import CAPACITY, MemLiveness, live_curve
from layerc.passes.pipeline import PassManager, build_pipeline
from layerc.backends.synth import ws_mem as gen


def brute_force(start, end, amount) -> dict[int, int]:
    """Live amount at every operation id, one buffer and one op at a time."""
    live: dict[int, int] = {}
    for s, e, a in zip(start, end, amount):
        for t in range(s, e):
            live[t] = live.get(t, 0) + a
    return live


def check_curve(ops: np.ndarray, curve: np.ndarray, start, end, amount) -> None:
    """The step function (a step only where the amount changes, ending at 0) equals the brute-force
    count at every operation id."""
    want = brute_force(start, end, amount)
    ops, curve = ops.tolist(), curve.tolist()
    assert ops == sorted(set(ops)) and len(ops) == len(curve)
    assert all(a != b for a, b in zip(curve, curve[1:])) and (not curve or curve[-1] == 0)
    if not want:
        assert set(curve) <= {0}
        return
    steps, value = dict(zip(ops, curve)), 0
    for t in range(min(want) - 1, max(want) + 2):
        value = steps.get(t, value)
        assert value == want.get(t, 0)


intervals = st.lists(st.tuples(st.integers(0, 300), st.integers(0, 60), st.integers(-1, 1 << 17), st.sampled_from([SMEM, TMEM])),
                     max_size=40)


@settings(max_examples=150)
@given(intervals)
def test_liveness_equals_brute_force(rows):
    n = len(rows)
    start = np.array([r[0] for r in rows], np.int64)
    end = start + np.array([r[1] for r in rows], np.int64)
    size = np.array([r[2] for r in rows], np.int64)
    kind = np.array([r[3] for r in rows], np.int8)
    cols = np.where(size >= 0, size % 513, -1).astype(np.int32)
    m = MemoryModule("x")
    names = [m.strings.intern(f"b{i}") for i in range(n)]
    k = Kernel(0, "k", buffers=Buffers.from_columns({
        "kind": kind, "index": np.arange(n), "name": names, "bytes": np.where(kind == SMEM, size, -1),
        "rows": np.where(kind == TMEM, 128, -1), "cols": np.where(kind == TMEM, cols, -1), "start": start, "end": end,
        "operand_d": np.zeros(n)}))
    m.kernels = [k]
    MemLiveness().apply(Context(), m)
    m.verify()
    for mem, kind_, amount in (("smem", SMEM, size), ("tmem", TMEM, cols.astype(np.int64))):
        sel = (kind == kind_) & (amount >= 0)
        live = k.liveness[mem]
        check_curve(live.ops, live.live, start[sel], end[sel], amount[sel])
        want = brute_force(start[sel], end[sel], amount[sel])
        peak = max(want.values(), default=0)
        assert live.peak == peak
        if peak > 0:
            assert live.peak_at == min(t for t, v in want.items() if v == peak)
        else:
            assert live.peak_at == -1
        assert live.unknown == int(((kind == kind_) & (amount < 0)).sum())
    assert m.arch == ("sm100" if (kind == TMEM).any() else "sm90")


@settings(max_examples=25)
@given(st.integers(0, 2**31))
def test_liveness_of_generated_kernels(seed):
    """Through the reader: the figures equal a recount from the generator's own allocs."""
    rng = random.Random(seed)
    spec = gen.random_kernel(rng, "k", max_ops=40)
    if not gen.dumps_of(spec):
        return
    m = read_log_text(gen.debug_log([spec], noise=False))
    MemLiveness(arch="sm100").apply(Context(), m)
    k = m.kernels[0]
    smem = [a for a in spec.smem if not (a.start == 0 and a.end == 0)] if spec.algo == 0 else []
    tmem = [a for a in spec.tmem if a.has_interval and a.has_size]
    for mem, allocs, amount in (("smem", smem, lambda a: a.size), ("tmem", tmem, lambda a: a.cols)):
        live = k.liveness[mem]
        check_curve(live.ops, live.live, [a.start for a in allocs], [a.end for a in allocs], [amount(a) for a in allocs])
        assert live.peak == max(brute_force([a.start for a in allocs], [a.end for a in allocs], [amount(a) for a in allocs]).values(),
                                default=0)


def test_live_curve_edges():
    assert live_curve([], [], [])[1].size == 0
    ops, live = live_curve([5, 5, 9], [5, 4, 10], [1, 1, 7])  # empty and reversed intervals hold nothing
    assert (ops.tolist(), live.tolist()) == ([9, 10], [7, 0])
    ops, live = live_curve([36, 40], [2**31 - 1, 50], [32768, 512])  # sparse: one step per start and end
    assert (ops.tolist(), live.tolist()) == ([36, 40, 50, 2**31 - 1], [32768, 33280, 32768, 0])


# -- capacity --------------------------------------------------------------------------------------
def _module(spec=None, text_edit=None) -> tuple[MemoryModule, str]:
    text = gen.debug_log([spec or gen.flash_attention_backward()])
    if text_edit is not None:
        old, new = text_edit
        assert old in text, old
        text = text.replace(old, new, 1)
    return read_log_text(text, "run.log"), text


def _run(m: MemoryModule, pipeline: str = "mem-liveness,mem-check") -> None:
    PassManager(build_pipeline(pipeline, MEM_PASSES)).run(Context(), m)


def test_fa_backward_figures_and_capacity():
    m, text = _module()
    _run(m)
    k = m.kernels[0]
    assert m.arch == "sm100"
    assert (k.liveness["smem"].peak, k.liveness["smem"].peak_at) == (4 * 32768 + 2 * 512, 51)
    assert (k.liveness["tmem"].peak, k.liveness["tmem"].peak_at) == (512, 56)  # dv, dk, qkT, dpT: exactly full
    assert k.liveness["smem"].capacity == CAPACITY["sm100"].smem_per_block == 227 * 1024
    assert {f.severity for f in m.findings} == {"note"}  # the q/do/dsT pool sharing buffer.id B0


def test_over_capacity_is_an_error_at_the_graph():
    m, text = _module(gen.flash_attention_backward(head_dim=256))
    _run(m)
    lines = text.split("\n")
    errors = {f.code: f for f in m.findings if f.severity == "error"}
    assert set(errors) == {"capacity-smem", "capacity-tmem"}
    assert lines[errors["capacity-smem"].line - 1].startswith("digraph SmemBufferLiveness")
    assert "TMEM peaks at 768 columns" in errors["capacity-tmem"].message
    assert "SMEM peaks at 263,168 bytes at operation 51" in errors["capacity-smem"].message
    m, _ = _module()
    _run(m, "mem-liveness{arch=sm90}")
    assert [f.code for f in m.findings] == ["capacity-tmem"] and "sm90 has none" in m.findings[0].message


def test_pipeline_options_are_checked():
    with pytest.raises(ParseError, match="arch must be one of"):
        build_pipeline("mem-liveness{arch=sm70}", MEM_PASSES)
    with pytest.raises(ParseError, match=r"passes here: mem-check, mem-liveness\)"):
        build_pipeline("mem-liveness,dce", MEM_PASSES)
    assert [p.pipeline_text() for p in build_pipeline("mem-liveness{arch=sm103},mem-check", MEM_PASSES)] == \
           ["mem-liveness{arch=sm103}", "mem-check"]


@pytest.mark.parametrize("algo", [0, 1])
@pytest.mark.parametrize("debug", [True, False])
def test_clean_dumps_have_no_warnings(algo, debug):
    m, _ = _module(gen.flash_attention_backward(algo=algo, debug=debug))
    MemCheck().apply(Context(), m)  # on its own, without liveness
    assert {f.code for f in m.findings} <= {"shared-pool"}


def test_axis_ticks_follow_the_emitter():
    spec = gen.flash_attention_backward()
    axis = gen.emit_smem(spec).split('axis [shape=none, label="')[1].split('"')[0]
    lo = min(a.start for a in spec.smem)
    hi = max(a.end for a in spec.smem)
    assert [int(x) for x in axis.split("|")] == axis_ticks(lo, hi)


# -- broken dumps ---------------------------------------------------------------------------------------
BROKEN = [
    # (edits, code, severity, text on the finding's line)
    ([("<TD>[37-57)</TD>", "<TD>[37-58)</TD>")], "summary-mismatch", "error", "<TD>v</TD>"),
    ([("        <TR><TD>m</TD><TD>4</TD><TD>512</TD><TD>1</TD><TD>[50-61)</TD></TR>\n", "")], "summary-missing", "warning",
     'label="m B4'),
    ([('label="dv 128x128 [40-86) [2 OperandD]"', 'label="dv 128x128 [40-86) [1 OperandD]"')], "operand-d-count", "error",
     'label="dv 128x128'),
    ([('label="v B1 [37-57) size=32768"', 'label="v B1 [57-37) size=32768"'), ("<TD>[37-57)</TD>", "<TD>[57-37)</TD>")],
     "interval", "error", 'label="v B1'),
    ([('axis [shape=none, label="36  |', 'axis [shape=none, label="30  |')], "axis", "warning", 'axis [shape=none, label="30'),
    ([('label="ch9 B2\\n\\"v\\"\\n(SMEM)"', 'label="ch9 B2\\n\\"v\\"\\n(TMEM)"')], "channel-kind", "error", "op_op_37 -> op_op_56"),
    ([('label="ch9 B2\\n\\"v\\"\\n(SMEM)"', 'label="ch9 B2\\n\\"v\\"\\n(TMEM)"')], "edge-style", "warning", "op_op_37 -> op_op_56"),
    ([("op_op_37 -> op_op_56 [label=", "op_op_37 -> op_op_999 [label=")], "channel-dangling", "error", "op_op_999"),
    ([('smem_5_ch13 [label="ch13', 'smem_5_ch12 [label="ch12')], "channel-duplicate", "error", "smem_5_ch12"),
    ([('[label="ch12 (50 to 60)"', '[label="ch12 (50 to 59)"')], "channel-ends", "error", "op_op_50 -> op_op_60"),
    ([('[label="ch12 (50 to 60)"', '[label="ch12 (50 to 66)"')], "channel-outside", "warning", 'label="ch12 (50 to 66)"'),
    ([('    label="Partition 5";', '    label="Partition 6";')], "partition-label", "warning", "subgraph cluster_partition_5"),
    ([('op_op_54 [label="[54] qkT', 'op_op_54 [label="[55] qkT')], "node-id", "error", "op_op_54 [label="),
    ([('label="v B1 [37-57) size=32768"', 'label="v B0 [37-57) size=32768"'), ("<TD>v</TD><TD>1</TD>", "<TD>v</TD><TD>0</TD>")],
     "buffer-clash", "error", 'label="v B0'),
    ([('label="ch9 B2\\n', 'label="ch9 B1\\n')], "shared-overlap", "warning", 'label="v B1'),
    ([('(TMEM) [D]", color=red, style=bold]', '(TMEM) [D]", color=red, style=solid]')], "edge-style", "warning", "op_op_40 -> op_op_66"),
    ([('op_op_54 [label="[54] qkT = tc_gen5_mma(k, q)\\nL1", fillcolor="lightgreen", color=red]',
       'op_op_54 [label="[54] qkT = tc_gen5_mma(k, q)\\nL1", fillcolor="lightgreen", color=black]')], "border", "warning", "op_op_54"),
    ([('  op_op_36 -> op_op_54 [label="ch8 B1\\n\\"k\\"\\n(SMEM)", color=darkgreen, style=solid];\n', "")], "channel-no-edge", "warning",
     'smem_0_ch8 [label="ch8 (36 to 54)"'),
]


@pytest.mark.parametrize("edits, code, severity, where", BROKEN, ids=[f"{b[1]}-{i}" for i, b in enumerate(BROKEN)])
def test_broken_dumps_are_found_where_they_are(edits, code, severity, where):
    text = gen.debug_log([gen.flash_attention_backward()])
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    m = read_log_text(text, "run.log")
    _run(m)
    hits = [f for f in m.findings if f.code == code]
    assert hits, [(f.code, f.message) for f in m.findings]
    f = hits[0]
    assert f.severity == severity
    line = text.split("\n")[f.line - 1]
    assert where in line, (m.diagnostic(f), where)
    shown = m.diagnostic(f).split("\n")
    assert shown[0].startswith(f"run.log:{f.line}:{f.column}: {severity}: ")
    assert shown[1] == line and shown[2].endswith("^")


def test_order_and_address_clash():
    text = gen.debug_log([gen.flash_attention_backward()])
    a = '    op_op_48 [label="[48] q = descriptor_load()\\n128x128xbf16, L1", fillcolor="lightblue", color=darkgreen];\n'
    b = '    op_op_49 [label="[49] do = descriptor_load()\\n128x128xbf16, L1", fillcolor="lightblue", color=darkgreen];\n'
    assert a in text and b in text
    text = text.replace(a, "@@").replace(b, a).replace("@@", b)
    m = read_log_text(text)
    _run(m)
    assert "partition-order" in {f.code for f in m.findings}
    spec = gen.flash_attention_backward(debug=False)
    ops = [op for op in spec.ops if op.tasks]
    ops[1].address = ops[0].address + 100000 * 3
    m = read_log_text(gen.debug_log([spec]))
    _run(m)
    assert [f.code for f in m.findings if f.code == "node-clash"] == ["node-clash"]
