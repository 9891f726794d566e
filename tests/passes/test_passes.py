"""Pass infrastructure: pipeline text, option types, registry, verification between passes,
and the built-in passes run without the CLI."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import ClassVar

import pytest

from tests.conftest import DATA
from layerc.backends.autodeploy import print_module
from layerc.grammar.dumps import load, parse_and_verify
from layerc.ir import LayercError, Node, VerifyError
from layerc.passes.base import Context, ModulePass
from layerc.passes.dce import DeadCodeElimination, StripUnusedWeights
from layerc.passes.pipeline import PassManager, build_pipeline, make_pass, timing_report
from layerc.passes.pipeline_text import parse_pipeline_text
from layerc.passes.registry import get_all_passes
from layerc.passes.select_graph import SelectGraph

BANNER = "=" * 80


def test_pipeline_syntax():
    specs = parse_pipeline_text("dce, select-graph{section=monolithic.model},x{a=1,2,3 b=\"q r\", c=4}")
    assert [s.name for s in specs] == ["dce", "select-graph", "x"]
    assert specs[1].options == {"section": ("monolithic.model",)}
    assert specs[2].options == {"a": ("1", "2", "3"), "b": ("q r",), "c": ("4",)}
    assert [s.name for s in parse_pipeline_text("builtin.module(dce,strip-unused-weights)")] == ["dce", "strip-unused-weights"]
    assert parse_pipeline_text("") == []


@dataclass(frozen=True)
class Typed(ModulePass):
    """A pass with one option of each kind."""

    name: ClassVar[str] = "typed"
    n: int = 0
    x: float = 1.0
    flag: bool = False
    label: str = ""
    layers: tuple[int, ...] = ()
    maybe: int | None = None

    def apply(self, ctx, module):
        pass


def test_options_convert_to_field_types_and_print_back():
    p = make_pass(Typed, {"n": ("5",), "x": ("2.5",), "flag": ("true",), "label": ("a b",), "layers": ("1", "2"), "maybe": ("none",)})
    assert p == Typed(5, 2.5, True, "a b", (1, 2), None)
    assert p.pipeline_text() == 'typed{n=5 x=2.5 flag=true label="a b" layers=1,2}'
    spec = parse_pipeline_text(p.pipeline_text())[0]
    assert make_pass(Typed, spec.options) == p
    for bad, msg in [({"n": ("five",)}, "expects int"), ({"n": ("1", "2")}, "one value"), ({"zz": ("1",)}, "unknown option 'zz'")]:
        with pytest.raises(LayercError, match=msg):
            make_pass(Typed, bad)


def test_unknown_passes_fail_before_any_work():
    with pytest.raises(LayercError) as e:
        build_pipeline("dce,no-such-pass,dce")
    assert e.value.loc.column == 5 and "unknown pass 'no-such-pass'" in e.value.message
    assert e.value.format().startswith("<pipeline>:1:5: error:")


def test_registry_is_lazy_and_complete():
    """One registry for every IR: each pass loads under its name and runs on the IR it is
    registered for; each IR's view holds exactly its passes."""
    from layerc.passes.registry import IRS, pass_ir

    passes = get_all_passes()
    assert {"dce", "select-graph", "strip-unused-weights", "classify-kernels", "mem-check", "trace-ops"} <= set(passes)
    assert len(passes) == 21
    for name, factory in passes.items():
        cls = factory()
        assert cls.name == name and cls.ir == pass_ir(name) and cls.ir in IRS
    assert sorted(n for ir in IRS for n in get_all_passes(ir)) == sorted(passes)


def _module(*lines):
    text = "# Transform: t\n# Stage: compile\n# GraphModules found: 1\n\n" + f"\n{BANNER}\n# GraphModule: m\n{BANNER}\n\n" + "".join(line + "\n" for line in lines)
    return parse_and_verify(text)


def test_dce_removes_dead_pure_ops_only():
    m = _module(
        "%x : 8 : torch.float32",
        "%a = aten.neg.default(%x : 8 : torch.float32) : 8 : torch.float32",
        "%b = aten.neg.default(%a : 8 : torch.float32) : 8 : torch.float32",
        "%c = auto_deploy.trtllm_dist_all_reduce.default(%x : 8 : torch.float32, NCCL) : 8 : torch.float32",
        "%d = aten.add_.Tensor(%x : 8 : torch.float32, %w : 8 : torch.float32) : 8 : torch.float32",
        "%e = aten.mul.Tensor(%x : 8 : torch.float32, %w2 : 8 : torch.float32) : 8 : torch.float32",
        "output %x",
    )
    DeadCodeElimination().apply(Context(), m)  # as another compiler would run it: no CLI
    g = m.graphs[0]
    assert [n.name for n in g.nodes] == ["x", "c", "d", "output"]
    assert not g.weights["w2"].users
    StripUnusedWeights().apply(Context(), m)
    assert list(g.weights) == ["w"]
    m.verify()


def test_select_graph():
    m = load(DATA / "084_compile_compile_model.txt")
    SelectGraph().apply(Context(), m)
    assert [g.name for g in m.graphs] == ["monolithic.model"]
    with pytest.raises(LayercError, match="no GraphModule section 'zz'"):
        SelectGraph(section="zz").apply(Context(), m)


@dataclass(frozen=True)
class Breaker(ModulePass):
    """Appends a node that reads a value from outside the graph."""

    name: ClassVar[str] = "breaker"

    def apply(self, ctx, module):
        from layerc.ir import Graph

        other = Graph("other")
        stray = other.append(Node("placeholder", "stray"))
        module.graphs[0].nodes.insert(0, Node("op", "bad", "aten.neg.default", (stray,)))


def test_pass_manager_verifies_prints_and_times():
    m = _module("%x : 8 : torch.float32", "%a = aten.neg.default(%x : 8 : torch.float32) : 8 : torch.float32", "output %x")
    stream = io.StringIO()
    pm = PassManager([DeadCodeElimination()], print_ir_after_all=True, print_ir=print_module, ir_stream=stream)
    pm.run(Context(), m)
    assert stream.getvalue().startswith("// -----// IR Dump After dce //----- //\n# Transform: t")
    assert [t.name for t in pm.timings] == ["dce", "(verify)"]
    report = timing_report(pm.timings)
    assert "Total" in report and "dce" in report
    with pytest.raises(VerifyError, match="IR is invalid after pass 'breaker'"):
        PassManager([Breaker()]).run(Context(), _module("%x : 8 : torch.float32"))
