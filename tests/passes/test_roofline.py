"""measure-roofline: each kernel's FLOPs and bytes from the shapes its op recorded, its GPU's peaks
by the device's name. The GEMM FLOPs of a real H100 trace equal the closed form of the model's
shapes; the formulas hold for any shapes (against counting the products and the causal pairs
one by one); what is not modelled stays unknown."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layerc.passes.roofline import kernel_roofline, op_cost
from tests.conftest import SHARED, TESTS

TESTS_DATA = TESTS / "data"

QWEN = SHARED / "data" / "traces" / "torch" / "hf_qwen1.5-0.5b_h100.json.gz"


def _types(n: int, t: str = "c10::BFloat16") -> str:
    return json.dumps([t] * n)


def test_gemm_flops_of_the_hf_qwen_trace_equal_the_closed_form(shared):
    """Qwen1.5-0.5B (hidden 1024, intermediate 2816, 24 layers), 16 sequences of 559 tokens: per
    layer q, k, v (addmm, with bias), o (mm), gate and up (mm, 1024 → 2816), down (mm, 2816 → 1024);
    and the rotary embedding's one bmm of [1, 32, 1] by [1, 1, 559]."""
    from layerc.grammar.traces import read_trace
    from layerc.ir.trace import link

    trace = read_trace(QWEN)
    r = kernel_roofline(trace)
    op = link(trace.kernels.external_id, trace.cpu_ops.external_id)
    names = np.array([trace.strings[int(trace.cpu_ops.name[o])] if o >= 0 else "" for o in op.tolist()])
    gemm = np.isin(names, ["aten::mm", "aten::addmm", "aten::bmm"])
    tokens, hidden, inter, layers = 16 * 559, 1024, 2816, 24
    closed = layers * 2 * tokens * (4 * hidden * hidden + 3 * hidden * inter) + 2 * 32 * 559
    assert gemm.sum() == 24 * 7 + 1 and not np.isnan(r.flops[gemm]).any()
    assert r.flops[gemm].sum() == pytest.approx(closed, rel=1e-12)
    assert r.devices == {0: "h100"}


def test_the_report_gives_rates_per_type_and_layer(shared, tmp_path):
    from tests.layerc_cli import run_layerc

    rc, _, err = run_layerc("trace", QWEN, "--json", tmp_path / "t.json")
    assert rc == 0, err
    doc = json.loads((tmp_path / "t.json").read_text())
    linear = doc["roofline"]["types"]["LINEAR"]
    assert linear["tflops"] == pytest.approx(linear["flops"] / linear["time_ns"] / 1e3, rel=1e-3)
    assert 0 < linear["roofline_pct"] <= 100 and 0 < doc["roofline"]["all"]["covered_pct"] <= 100
    full = [row for row in doc["layers"] if not row["partial"]]
    assert full and all(row["flops"] > 0 and 0 < row["roofline_pct"] <= 100 for row in full)
    # a pass the profile began inside has no cpu ops recorded: its layers' costs are unknown, not zero
    cut = [row for row in doc["layers"] if row["partial"]]
    assert cut and all(row["flops"] is None and row["cost_covered_pct"] == 0 for row in cut)


dims = st.integers(1, 64)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from([1, 2, 3]), max_size=2), st.lists(st.sampled_from([1, 2, 3]), max_size=2), dims, dims, dims)
def test_matmul_flops_count_every_product(batch_a, batch_b, m, k, n):
    """2·K per output element, whatever the batch dimensions broadcast to (None where they do not)."""
    a, b = [*batch_a, m, k], [*batch_b, k, n]
    cost = op_cost("aten::matmul", json.dumps([a, b]), _types(2))
    try:
        batch = np.broadcast_shapes(tuple(batch_a), tuple(batch_b))
    except ValueError:
        assert cost is None
        return
    assert cost is not None and cost.flops == 2 * int(np.prod(batch)) * m * n * k and cost.bound == "compute"
    assert op_cost("aten::matmul", json.dumps([[*batch_a, m, k + 1], b]), _types(2)) is None  # shapes that cannot multiply


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(1, 8), st.integers(1, 40), st.integers(1, 40), st.sampled_from([32, 64, 128]),
       st.booleans())
def test_attention_flops_count_every_unmasked_pair(b, h, sq, sk, d, causal):
    mask = np.tril(np.ones((sq, sk), bool)) if causal else np.ones((sq, sk), bool)  # PyTorch's is_causal: top left
    expected = 2 * b * h * int(mask.sum()) * (d + d)
    q, kv = [b, h, sq, d], [b, h, sk, d]
    sdpa = op_cost("aten::_scaled_dot_product_flash_attention", json.dumps([q, kv, kv, [], [], [], []]), _types(3),
                   json.dumps(["", "", "", "0.", str(causal), "False", "0.125"]))
    flash = op_cost("aten::_flash_attention_forward", json.dumps([[b, sq, h, d], [b, sk, h, d], [b, sk, h, d], [], []]),
                    _types(3), json.dumps(["", "", "", "", "", str(sq), str(sk), "0.", str(causal), "False"]))
    assert sdpa is not None and flash is not None and sdpa.flops == flash.flops == expected


def test_what_is_not_modelled_or_not_recorded_is_unknown():
    kv = [2, 4, 16, 64]
    assert op_cost("aten::_scaled_dot_product_flash_attention", json.dumps([kv, kv, kv]), _types(3)) is None  # is_causal?
    assert op_cost("aten::mm", json.dumps([[4, 8], [8, 2]]), "") is None  # no Input type: no sizes
    assert op_cost("aten::my_custom_op", json.dumps([[4, 8]]), _types(1)) is None
    varlen = op_cost("aten::_flash_attention_forward", json.dumps([[96, 4, 64], [96, 4, 64], [96, 4, 64], [3], [3]]),
                     _types(5), json.dumps(["", "", "", "", "", "40", "40", "0.", "True", "False"]))
    assert varlen is None  # packed sequences: their lengths are not in the shapes


def test_a_lookup_moves_the_rows_it_picks_not_the_table():
    cost = op_cost("aten::index_select", json.dumps([[151936, 1024], [], [8944]]), '["c10::BFloat16", "Scalar", "long int"]',
                   json.dumps(["", "0", ""]))
    assert cost is not None and cost.bytes == 2 * 8944 * 1024 * 2 + 8944 * 8 and cost.bound == "memory"


@pytest.mark.parametrize("name,preset", [
    ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H100 PCIe", "h100_pcie"), ("NVIDIA H100 NVL", "h100_nvl"),
    ("NVIDIA H200", "h200"), ("NVIDIA B200", "b200"), ("NVIDIA GB200", "gb200"), ("NVIDIA A100-SXM4-80GB", "a100"),
    ("NVIDIA A100-PG509-200", "a100_40gb"), ("AMD Instinct MI300X", "mi300x"), ("AMD Instinct MI355X", "mi355x"),
    ("AMD Radeon Graphics", None), ("", None),
])
def test_devices_are_told_by_their_names(name, preset):
    from layerc.passes.hardware import device_preset

    hw = device_preset(name)
    assert (hw.key if hw else None) == preset


def test_a_trace_without_shapes_or_known_gpu_reports_nothing_as_known(shared, tmp_path):
    from tests.layerc_cli import run_layerc

    for path in (SHARED / "data" / "traces" / "nsys" / "nsysai_2gpu_1s_schema3.25.sqlite",
                 SHARED / "data" / "traces" / "torch" / "hta_minitoy_mi250.json.gz"):
        rc, _, err = run_layerc("trace", path, "--json", tmp_path / "t.json")
        assert rc == 0, err
        roof = json.loads((tmp_path / "t.json").read_text())["roofline"]
        if roof["all"]["kernels"]:  # costs known, but a GPU without peaks: no share of the roofline
            assert roof["all"]["roofline_pct"] is None and all(d["peaks"] is None for d in roof["devices"].values())
        else:
            assert roof["all"]["covered_pct"] == 0 and roof["all"]["tflops"] is None


MOE = TESTS_DATA / "gpu" / "hf_qwen3_moe_eager.json.gz"


def test_grouped_gemm_flops_of_the_hf_qwen3_moe_trace_equal_their_shapes():
    """transformers' grouped_mm experts (a real H100 capture): each aten::_grouped_mm of
    (tokens·top-k, K) rows by (experts, K, N) matrices costs 2·rows·K·N (every row meets one
    expert), read here from the trace's own args, apart from the reader."""
    import gzip

    from layerc.grammar.traces import read_trace
    from layerc.ir.trace import link

    events = json.loads(gzip.decompress(MOE.read_bytes()))["traceEvents"]
    closed = {}
    for e in events:
        if e.get("name") == "aten::_grouped_mm":
            (rows, k), (_, k2, n) = e["args"]["Input Dims"][:2]
            assert k == k2
            closed[e["args"]["External id"]] = 2 * rows * k * n
    trace = read_trace(MOE)
    r = kernel_roofline(trace)
    op = link(trace.kernels.external_id, trace.cpu_ops.external_id)
    names = np.array([trace.strings[int(trace.cpu_ops.name[o])] if o >= 0 else "" for o in op.tolist()])
    grouped = names == "aten::_grouped_mm"
    assert grouped.any() and not np.isnan(r.flops[grouped]).any()
    launched = {int(trace.cpu_ops.external_id[o]) for o in op[grouped].tolist()}
    assert r.flops[grouped].sum() == pytest.approx(sum(closed[x] for x in launched), rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 8), st.integers(1, 64), st.integers(1, 64), st.integers(1, 64), st.sampled_from(["2x3", "3x2", "2x2", "3x3"]))
def test_grouped_gemm_flops_count_every_product(g, m, k, n, form):
    """2·K per output element of each group's product, in each of _grouped_mm's four forms."""
    a, b, expected = {"2x3": ([m, k], [g, k, n], 2 * m * k * n), "3x2": ([g, m, k], [k, n], 2 * m * k * n),
                      "2x2": ([m, k], [k, n], 2 * m * k * n), "3x3": ([g, m, k], [g, k, n], 2 * g * m * k * n)}[form]
    cost = op_cost("aten::_grouped_mm", json.dumps([a, b, [g], [], []]), json.dumps(["c10::BFloat16", "c10::BFloat16", "int", "", ""]))
    assert cost is not None and cost.flops == expected and cost.bound == "compute"
