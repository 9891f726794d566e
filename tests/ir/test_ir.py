"""The IR's own invariants: use-def links, verification, targets, types."""

from __future__ import annotations

import pytest

from layerc.ir import Graph, Module, Node, TensorType, UNKNOWN, VerifyError
from layerc.ir.targets import from_fx_target, op_name, op_namespace, to_fx_target
from layerc.ir.types import SymDim, element_bytes, split_dims, type_from_texts


def _graph():
    g = Graph("g")
    x = g.append(Node("placeholder", "x", type=TensorType((8,), "torch.float32")))
    w = g.weight("w", TensorType((8,), "torch.float32"))
    a = g.append(Node("op", "a", "aten.add.Tensor", (x, [w, x], 1.0)))
    b = g.append(Node("op", "b", "aten.mul.Tensor", (a, a)))
    g.append(Node("output", "output", args=((b,),)))
    return g, x, w, a, b


def test_use_def_links_both_ways():
    g, x, w, a, b = _graph()
    assert a.inputs == (x, w) and list(x.users) == [a] and list(a.users) == [b]
    assert b.inputs == (a,)  # distinct values
    c = g.append(Node("op", "c", "aten.neg.default", (x,)))
    a.replace_all_uses_with(c)
    assert b.args == (c, c) and not a.users and list(c.users) == [b]
    g.nodes.remove(c)
    g.nodes.insert(1, c)
    g.erase(a)
    g.verify()
    with pytest.raises(VerifyError, match="still has users"):
        g.erase(c)


def test_verify_catches_broken_invariants():
    g, x, w, a, b = _graph()
    g.nodes.reverse()
    with pytest.raises(VerifyError, match="output must be the last node"):
        g.verify()
    g, x, w, a, b = _graph()
    g.nodes[1], g.nodes[2] = g.nodes[2], g.nodes[1]
    with pytest.raises(VerifyError, match="defined after its use"):
        g.verify()
    g, x, w, a, b = _graph()
    del x.users[a]
    with pytest.raises(VerifyError, match="use-list of 'x' misses"):
        g.verify()
    m = Module("t", "s", graphs=[_graph()[0]])
    m.declared_graph_count = 2
    with pytest.raises(VerifyError, match="header says 2"):
        m.verify()


def test_targets_between_syntaxes():
    for ad, fx in [
        ("aten.add.Tensor", "torch.ops.aten.add.Tensor"),
        ("<built-in function getitem>", "operator.getitem"),
        ("auto_deploy.trtllm_moe_fused", "torch.ops.auto_deploy.trtllm_moe_fused"),
        ("torch.functional.split", "torch.functional.split"),
    ]:
        assert to_fx_target(ad) == fx and from_fx_target(fx) == ad
    assert to_fx_target("view", "call_method") == "view"
    assert to_fx_target("<function begin_aux_stream_passthrough at 0x7f2a1c0b3d90>") == "begin_aux_stream_passthrough"
    assert op_name("aten.add.Tensor") == "add"
    assert op_name("auto_deploy.trtllm_moe_fused") == "trtllm_moe_fused"
    assert op_name("auto_deploy.flashinfer_rms_norm.default") == "flashinfer_rms_norm"
    assert op_name("<built-in function getitem>") == "getitem"
    assert op_name("<function begin_aux_stream_passthrough at 0x7f2a1c0b3d90>") == "begin_aux_stream_passthrough"
    assert op_name("view") == "view"
    assert op_namespace("dist.trtllm_fused_allreduce_residual_rmsnorm.default") == "dist"
    assert op_namespace("<built-in function getitem>") is None


def test_types():
    t = type_from_texts("s72xs70x2048", "torch.float32")
    assert t.shape == (SymDim("s72"), SymDim("s70"), 2048) and t.numel is None and t.rank == 3
    assert type_from_texts("8x7168", "torch.bfloat16").numel == 8 * 7168
    assert type_from_texts("?", "unknown") is UNKNOWN
    assert split_dims("Max(1, s0)xs0 + 1x4") == ["Max(1, s0)", "s0 + 1", "4"]
    assert SymDim("s70*s72").symbols == ("s70", "s72")
    assert element_bytes("torch.bfloat16") == 2 and element_bytes("torch.float8_e4m3fn") == 1
