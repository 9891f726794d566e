"""The public Python API: ``import layerc`` (every name of ``__all__`` resolves, nothing heavy
imports before it is asked for) and ``layerc.testing`` (strategies other projects draw from)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import example, given, settings

import layerc
from layerc.testing import MemoryPlanSpec, memory_plan_specs, trace_specs


def test_every_public_name_resolves():
    assert layerc.__all__ == sorted(layerc.__all__)
    for name in layerc.__all__:
        assert getattr(layerc, name) is not None, name
    assert set(layerc.__all__) <= set(dir(layerc))


def test_import_layerc_is_cheap():
    code = "import sys, layerc; print(sorted(m for m in ('numpy', 'lark', 'rich', 'orjson') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_name_layerc_lacks_is_an_attribute_error():
    try:
        layerc.no_such_thing
    except AttributeError as e:
        assert "no_such_thing" in str(e)
    else:
        raise AssertionError("no AttributeError")


def test_read_any_input_through_the_facade(tmp_path):
    rc = subprocess.run([sys.executable, "-m", "layerc.tools.driver", "gen-mem", str(tmp_path / "ws")], capture_output=True)
    assert rc.returncode == 0
    ir, module = layerc.read(tmp_path / "ws")
    assert ir == "mem" and module.kernels
    ctx = layerc.run_passes(layerc.build_pipeline("mem-liveness", layerc.get_all_passes(ir)), module)
    assert isinstance(ctx, layerc.Context)
    assert layerc.emitter(ir)(module).startswith('kernel "')
    assert layerc.formats("graph")[:4] == ["ad", "fx", "json", "meta"]
    assert {"png", "svg", "dot"} <= set(layerc.formats("graph")) and "pftrace" in layerc.formats("trace")
    out = tmp_path / "memory.json"
    assert isinstance(layerc.emitter(ir, "json"), layerc.Emitter)
    layerc.emitter(ir, "json").write(module, out)
    assert out.read_text().startswith("{") and '"kernels"' in out.read_text()


@settings(max_examples=4, deadline=None)
@given(trace_specs())
def test_trace_specs_write_traces_layerc_reads(tmp_path_factory, spec):
    path = tmp_path_factory.mktemp("t") / "trace.json.gz"
    truth = spec.write(path)
    trace = layerc.read_trace(path)
    assert len(trace.kernels) == truth["totals"]["kernels"]


@settings(max_examples=4, deadline=None)
@given(memory_plan_specs())
@example(MemoryPlanSpec(1, 4, 0))  # one kernel that dumps nothing
def test_memory_plan_specs_write_plans_layerc_reads(tmp_path_factory, spec):
    folder = tmp_path_factory.mktemp("m")
    written = spec.write(folder)
    # a random kernel may have nothing the planner dumps (no SMEM, no TMEM, no channel): it writes no
    # file, and a folder where no kernel wrote one is not a memory plan (MemoryPlanSpec(1, 4, 0))
    if not written:
        with pytest.raises(layerc.LayercError, match="no smem_liveness"):
            layerc.read_memory_plan(folder)
        return
    kernels = layerc.read_memory_plan(folder).kernels
    assert 1 <= len(kernels) <= spec.kernels
    assert all(k.graphs for k in kernels)
