"""``trace --roofline``: the roofline chart of a trace with shapes (HF Qwen on an H100) is a PNG
(or an SVG, by the name); a trace without shapes is an error that writes nothing."""

from __future__ import annotations

import argparse

from tests.conftest import SHARED
from tests.layerc_cli import run_layerc

QWEN = SHARED / "data" / "traces" / "torch" / "hf_qwen1.5-0.5b_h100.json.gz"


def test_a_trace_with_shapes_draws_its_roofline(tmp_path, shared):
    rc, _, err = run_layerc("trace", QWEN, "--roofline", tmp_path / "r.png", "--json", tmp_path / "r.json")
    assert rc == 0, err
    assert (tmp_path / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rc, _, err = run_layerc("trace", QWEN, "--roofline", tmp_path / "r.svg")
    assert rc == 0, err
    assert b"<svg" in (tmp_path / "r.svg").read_bytes()[:400]


def test_a_trace_without_shapes_is_an_error_that_writes_nothing(tmp_path):
    from layerc.backends.synth.kineto import generate

    trace = tmp_path / "t.json.gz"
    generate(trace, model="llama", layers=2, prefill=1, decode=1)
    rc, _, err = run_layerc("trace", trace, "--roofline", tmp_path / "r.png", "--json", tmp_path / "r.json")
    assert rc == 1 and "record_shapes" in err and "Traceback" not in err
    assert not (tmp_path / "r.png").exists() and not (tmp_path / "r.json").exists()


def test_the_roofs_of_a_rocm_trace_whose_kernels_name_other_device_ids(shared):
    """SGLang on an MI300X: ROCm numbers the kernels' devices apart from the described device, and
    the chart's roofs are still the MI300X's."""
    from layerc.backends.roofline_chart import peaks
    from layerc.backends.trace_report import Analysis
    from layerc.tools.trace import analyze

    module = analyze(argparse.Namespace(trace=SHARED / "data" / "traces" / "torch" / "sglang_qwen3-8b_extend_mi300x.json.gz",
                                        kernel_tables=None, strategy="auto", split_half_layers=False, timing=False, stage="all"),
                     quiet=True)
    hw = peaks(Analysis.of(module))
    assert hw is not None and hw.key == "mi300x"
