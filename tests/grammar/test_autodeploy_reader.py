"""The AutoDeploy reader and printer on real fragments, every writer generation, and bad input."""

from __future__ import annotations


import pytest

from tests.conftest import DATA
from layerc.backends.autodeploy import print_module
from layerc.grammar.dumps import load, parse_and_verify, parse_dump_name, resolve_dump
from layerc.ir import Device, DType, LayercError, OpaqueType, SymDim, TensorType, TupleType, Weight
from layerc.ir.types import UNKNOWN

FIXTURES = sorted(DATA.glob("*.txt"))
BANNER = "=" * 80


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_fixtures_round_trip_byte_identical(path):
    text = path.read_text()
    module = parse_and_verify(text, str(path))
    assert print_module(module) == text


def test_deepseek_v4_fragments_mean_what_they_say():
    m = load(DATA / "084_compile_compile_model.txt")
    assert m.counter == 84 and m.transform == "compile_model" and m.stage == "compile" and m.generation == 3
    g = m.main_graph()
    assert g.name == "monolithic.model"
    router = g.value("triton_deepseek_v4_router_default")
    assert router.type == TupleType((TensorType((SymDim("s70*s72"), 6), "torch.int64"), TensorType((SymDim("s70*s72"), 6), "torch.float32")))
    assert router.args[3:] == (6, 1.5, True)
    assert isinstance(router.args[1], Weight) and router.args[1].type == TensorType((129280, 6), "torch.int64")
    assert g.value("layers_0_attn_all_reduce").args[1] == "NCCL"
    assert g.value("layers_0_attn_indexer_clamp_1").type.shape == (SymDim("2048*s72"), 4, 32)
    assert g.value("empty_kv").type == TensorType((0, 0), "torch.bfloat16")
    score = g.value("layers_1_attn_score")
    assert score.args[3:] == (128, 0, None, 1e-06, 64)
    assert [u.name for u in g.value("layers_0_attn_all_reduce").users][:2] == [
        "layers_0_attn_indexer_compressor_wkv_torch_linear_simple_1",
        "layers_1_attn_score",
    ]
    assert g.output.args == ((g.value("rope"), g.value("getitem"), g.value("empty_kv")),)


def test_generation_one_and_two():
    v1 = load(DATA / "001_export_export_to_gm.v1.txt")
    assert v1.generation == 1 and v1.graphs[0].name is None
    g = v1.graphs[0]
    assert g.value("input_ids").type == TensorType(None, "torch.int64")
    assert g.value("position_ids").type is UNKNOWN
    assert g.value("sym_size_int").type == OpaqueType("SymInt")
    assert g.value("view").type is UNKNOWN
    assert g.value("view").args[1] == [1, g.value("sym_size_int"), -1]
    v2 = load(DATA / "066_cache_init_insert_cached_attention.v2.txt")
    g = v2.graphs[0]
    assert v2.generation == 2
    assert g.value("split").type.container == "list"
    assert g.value("sort").type.elements[1] == OpaqueType("None")
    assert g.value("zeros").args == ([], DType("float32"), None, Device("cpu"), False)
    assert g.value("zeros").type == TensorType((), "torch.float32")
    assert g.value("noop").type == OpaqueType("NoneType")
    assert g.value("index").args[1] == [None, g.value("cache_loc")]
    assert g.output.args == ((),)


def test_nvidia_fixture_without_count_line():
    text = (
        "# Transform: export\n# Stage: final\n\n"
        f"{BANNER}\n# GraphModule: (root)\n{BANNER}\n\n"
        "%input_ids : 4x1 : torch.int32\n"
        "%qkv = trtllm_qkv_gemm(%input_ids : 4x1 : torch.int32) : 4x64 : torch.bfloat16\n"
        "%attn = trtllm_attention_kernel(%qkv : 4x64 : torch.bfloat16) : 4x64 : torch.bfloat16\n"
        "%moe = trtllm_moe_fc1(%attn : 4x64 : torch.bfloat16) : 4x64 : torch.bfloat16\n"
        "output %moe\n"
    )
    m = parse_and_verify(text)
    assert [g.name for g in m.graphs] == ["(root)"] and len(m.graphs[0]) == 5
    assert print_module(m) == text


def _v3(*lines: str, sections=("monolithic.model",)) -> str:
    out = f"# Transform: t\n# Stage: compile\n# GraphModules found: {len(sections)}\n\n"
    for s in sections:
        out += f"\n{BANNER}\n# GraphModule: {s}\n{BANNER}\n\n" + "".join(line + "\n" for line in lines)
    return out


def test_several_sections_and_main_graph():
    text = _v3("%x : 2 : torch.float32", "output %x", sections=("(root)", "monolithic.model", "piecewise.split_gm"))
    m = parse_and_verify(text)
    assert [g.name for g in m.graphs] == ["(root)", "monolithic.model", "piecewise.split_gm"]
    assert m.main_graph().name == "monolithic.model"
    assert print_module(m) == text


def test_long_expert_lists_and_weights_in_lists():
    experts = ", ".join(f"model_layers_5_mlp_experts_{i}_gate_proj_weight" for i in range(256))
    text = _v3(
        "%x : 8x7168 : torch.bfloat16",
        f"%moe = auto_deploy.torch_moe.default(%x : 8x7168 : torch.bfloat16, [{experts}], %model_layers_5_mlp_experts_0_gate_proj_weight : 2048x7168 : torch.bfloat16) : 8x7168 : torch.bfloat16",
        "output %moe",
    )
    m = parse_and_verify(text)
    g = m.main_graph()
    assert len(g.weights) == 256
    # The first, bare reference is in the list; the annotated one gives the type.
    assert g.weights["model_layers_5_mlp_experts_0_gate_proj_weight"].type == TensorType((2048, 7168), "torch.bfloat16")
    assert g.weights["model_layers_5_mlp_experts_7_gate_proj_weight"].type is UNKNOWN
    assert print_module(m) == text


def test_symbolic_and_function_dims():
    text = _v3(
        "%x : Max(1, s0)xs0 + 1x4 : torch.float32",
        "%y = aten.mul.Tensor(%x : Max(1, s0)xs0 + 1x4 : torch.float32, 2) : (Max(1, s0)x4, ?) : (torch.float32, SymInt)",
        "output %y",
    )
    m = parse_and_verify(text)
    g = m.main_graph()
    assert g.value("x").type.shape == (SymDim("Max(1, s0)"), SymDim("s0 + 1"), 4)
    assert g.value("y").type.elements == (TensorType((SymDim("Max(1, s0)"), 4), "torch.float32"), OpaqueType("SymInt"))
    assert print_module(m) == text


def _error(text: str) -> LayercError:
    with pytest.raises(LayercError) as info:
        parse_and_verify(text, "d.txt")
    return info.value


@pytest.mark.parametrize(
    "line, col, message",
    [
        ("%x = aten.add.Tensor(%a : 8x : torch.float32) : 8 : torch.float32", 28, "expected ' : '"),
        ("%x = aten.add.Tensor(%a : 8 : torch.float32) : 8", 49, "expected ' : '"),
        ("%x : 8x4 : torch.float32 junk", 25, "unexpected ' junk' after the dtype"),
        ("%x aten.mul.Tensor(%a : 8 : torch.float32) : 8 : torch.float32", 3, "or ' = ' (an op)"),
        ("%x = aten.mul.Tensor(%a : 8 : torch.float32) : (8, 8) : (torch.float32, 7)", 73, "expected a dtype"),
        ("output %x %y", 10, "unexpected ' '"),
        ("%x = aten.add.Tensor(%a : 8 : torch.float32, slice(1, 2, 3, 4, 5)) : 8 : torch.float32", 46, "unsupported constant"),
        ("%x = aten.mul.Tensor(%a : 8 : torch.float32) : (8, 8) : (torch.float32)", 48, "2 shapes but 1 dtypes"),
    ],
)
def test_errors_are_located(line, col, message):
    e = _error(_v3(line))
    assert e.loc.line == 10 and e.loc.column == col, e.format()
    assert message in e.message
    text = e.format()
    assert text.startswith(f"d.txt:10:{col}: error: ")
    src, caret = text.splitlines()[1:3]
    assert src == line and caret == " " * (col - 1) + "^"


def test_use_must_agree_with_definition():
    e = _error(_v3("%a : 8 : torch.float32", "%b = aten.neg.default(%a : 9 : torch.float32) : 8 : torch.float32"))
    assert (e.loc.line, e.loc.column) == (11, 28)  # the shape
    assert "used as '9 : torch.float32' but is '8 : torch.float32' (line 10)" in e.message


def test_use_before_definition_and_redefinition():
    e = _error(_v3("%b = aten.neg.default(%a : 8 : torch.float32) : 8 : torch.float32", "%a : 8 : torch.float32"))
    assert e.loc.line == 11 and "used earlier, at line 10" in e.message
    e = _error(_v3("%a : 8 : torch.float32", "%a : 8 : torch.float32"))
    assert e.loc.line == 11 and "redefinition" in e.message


def test_header_count_must_match():
    text = _v3("%a : 8 : torch.float32").replace("found: 1", "found: 2")
    e = _error(text)
    assert e.loc.line == 3 and "2 GraphModules" in e.message


def test_truncated_file():
    text = _v3("%a : 8 : torch.float32", "%b = aten.neg.default(%a : 8 : torch.float32) : 8 : torch.float32")
    e = _error(text[:-30])
    assert e.loc is not None and e.loc.line == 11


def test_dump_names_and_directories(tmp_path):
    assert parse_dump_name("085_compile_compile_model.txt").transform == "compile_model"
    n = parse_dump_name("077_cache_init_initialize_cache.txt")
    assert (n.counter, n.stage, n.transform) == (77, "cache_init", "initialize_cache")
    n = parse_dump_name("012_post_load_fusion_fuse_moe.txt")
    assert (n.stage, n.transform) == ("post_load_fusion", "fuse_moe")
    assert parse_dump_name("notes.txt") is None
    for name in ("001_export_export_to_gm.txt", "010_sharding_detect_sharding.txt", "085_compile_compile_model.txt"):
        (tmp_path / name).write_text(_v3("%a : 8 : torch.float32"))
    (tmp_path / "readme.txt").write_text("not a dump")
    assert resolve_dump(tmp_path).name == "085_compile_compile_model.txt"
    assert resolve_dump(tmp_path, "10").name == "010_sharding_detect_sharding.txt"
    assert resolve_dump(tmp_path, "001_export_export_to_gm.txt").name == "001_export_export_to_gm.txt"
    with pytest.raises(LayercError, match="no dump file '7'"):
        resolve_dump(tmp_path, "7")
    assert load(tmp_path).counter == 85


# reference/autodeploy-dumps.md §3.4, verbatim: synthesized from the writer code, for unit tests.
REFERENCE_3_4 = """# Transform: compile_model
# Stage: compile
# GraphModules found: 1


================================================================================
# GraphModule: monolithic.model
================================================================================

%input_ids : 8x1 : torch.int32
%position_ids : 8x1 : torch.int64
%add_40 = aten.add.Tensor(%to_30 : 8x1x7168 : torch.bfloat16, %add_38 : 8x1x7168 : torch.bfloat16) : 8x1x7168 : torch.bfloat16
%flashinfer_rms_norm_default_11 = auto_deploy.flashinfer_rms_norm.default(%add_40 : 8x1x7168 : torch.bfloat16, %model_layers_5_post_attention_layernorm_weight : 7168 : torch.bfloat16, 1e-06) : 8x1x7168 : torch.bfloat16
%noaux_tc_op_default_2 = trtllm.noaux_tc_op.default(%dsv3_router_gemm_op_default_2 : 8x256 : torch.float32, %model_layers_5_mlp_gate_e_score_correction_bias : 256 : torch.float32, 8, 4, 8, 2.5) : (8x8, 8x8) : (torch.float32, torch.int32)
%getitem_10 = <built-in function getitem>(%noaux_tc_op_default_2 : ? : tuple, 0) : 8x8 : torch.float32
%view_61 = aten.view.default(%flashinfer_rms_norm_default_11 : 8x1x7168 : torch.bfloat16, [-1, 7168]) : 8x7168 : torch.bfloat16
%trtllm_moe_fused_2 = auto_deploy.trtllm_moe_fused(%to_31 : 8x7168 : torch.bfloat16, %getitem_11 : 8x8 : torch.int32, %getitem_10 : 8x8 : torch.float32, %fused_moe_w3_w1_stacked_2 : 256x4096x7168 : torch.bfloat16, %fused_moe_w2_stacked_2 : 256x7168x2048 : torch.bfloat16) : 8x7168 : torch.bfloat16
%trtllm_dist_all_reduce_default_9 = auto_deploy.trtllm_dist_all_reduce.default(%add_41 : 8x7168 : torch.bfloat16, NCCL) : 8x7168 : torch.bfloat16
%begin_aux_stream_passthrough_3 = <function begin_aux_stream_passthrough at 0x7f2a1c0b3d90>(%view_61 : 8x7168 : torch.bfloat16) : 8x7168 : torch.bfloat16
output %to_99
"""


def test_reference_illustration():
    m = parse_and_verify(REFERENCE_3_4, "ref.txt")
    assert print_module(m) == REFERENCE_3_4
    g = m.main_graph()
    # The excerpt skips lines, so the values it reads without defining are weights here.
    assert {"to_30", "add_38", "to_31", "getitem_11", "add_41", "to_99"} <= set(g.weights)
    moe = g.value("trtllm_moe_fused_2")
    assert moe.target == "auto_deploy.trtllm_moe_fused" and moe.args[2] is g.value("getitem_10")
    assert g.value("begin_aux_stream_passthrough_3").target.startswith("<function begin_aux_stream_passthrough at 0x")
