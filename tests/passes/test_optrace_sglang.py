"""``layerc optrace`` on sglang's DeepSeek model (seed 003's own subject), read from the pinned
sglang wheel: ``make install`` downloads it into build/wheels (the wheel is a zip; it is read in
place, never installed). Without it these tests skip: no test downloads anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ROOT
from layerc.backends import optrace as report
from layerc.grammar.pysource import SourceSet
from layerc.ir.optree import BRANCH, OpNode
from layerc.passes.pipeline import run_passes
from layerc.passes.base import Context
from layerc.passes.optrace_passes import CrossValidateKernels, OpTraceModule, TraceOps

SGLANG_VERSION = "0.5.9"  # keep in step with the Makefile's SGLANG_VERSION
WHEEL = ROOT / "build" / "wheels" / f"sglang-{SGLANG_VERSION}-py3-none-any.whl"


@pytest.fixture(scope="module")
def wheel() -> Path:
    """The pinned wheel, as ``make install`` leaves it; no test downloads anything."""
    if not WHEEL.is_file():
        pytest.skip(f"the sglang {SGLANG_VERSION} wheel is not in build/wheels: `make install` downloads it")
    return WHEEL


@pytest.fixture(scope="module")
def deepseek(wheel) -> OpTraceModule:
    module = OpTraceModule(SourceSet(wheel), "DeepseekV2ForCausalLM")
    run_passes([TraceOps(), CrossValidateKernels()], module)
    return module


def first(root: OpNode, label: str) -> OpNode:
    return next(n for n, _ in root.walk() if n.label == label)


def names(node: OpNode) -> set[str]:
    return {k.name for k in node.kernels}


def test_attention_dispatch_paths(deepseek):
    root = deepseek.tree.root
    prepare = first(root, "self.forward_prepare()")
    paths = {c.annotation: c.label for c in prepare.children}
    assert paths["MHA path"] == "self.forward_normal_prepare()"  # a mixin in deepseek_common/
    assert paths["MLA path"] == "self.forward_absorb_prepare()"
    assert paths["MLA_FUSED_ROPE path"] == "self.forward_absorb_fused_mla_rope_prepare()"
    assert {"MHA_CHUNKED_KV path", "MHA_ONE_SHOT path", "MLA_FUSED_ROPE_CPU path"} <= set(paths)
    core = first(root, "self.forward_core()")
    assert {c.annotation: c.label for c in core.children}["MLA path"] == "self.forward_absorb_core()"
    mha = first(root, "self.forward_normal_prepare()")
    assert mha.children[0].site.path == "sglang/srt/models/deepseek_common/attention_forward_methods/forward_mha.py"
    absorb_core = first(root, "self.forward_absorb_core()")
    mqa = first(absorb_core, "self.attn_mqa()")
    assert {"cutlass_mla_decode", "trtllm_batch_decode_with_kv_cache_mla", "flash_mla_with_kvcache"} <= names(mqa)
    chain = next(k for k in mqa.kernels if k.name == "cutlass_mla_decode").chain
    assert chain[0].site.path.endswith("attention/cutlass_mla_backend.py") and chain[-1].site == mqa.site


def test_communicator_norms(deepseek):
    root = deepseek.tree.root
    prep = first(root, "self.layer_communicator.prepare_attn()")
    norm = first(prep, "self.input_layernorm()")
    assert norm.site.path == "sglang/srt/layers/communicator.py"
    assert {"rmsnorm", "fused_add_rmsnorm"} <= names(norm)
    assert next(k for k in norm.kernels if k.name == "rmsnorm").family == "sgl-kernel"
    mlp_side = first(root, "self.layer_communicator.prepare_mlp()")
    post = first(mlp_side, "layernorm()")  # the post-attention norm, handed to the communicate function
    assert {"rmsnorm", "fused_add_rmsnorm"} <= names(post)


def test_dense_mlp_vs_moe_paths(deepseek):
    root = deepseek.tree.root
    mlp = first(root, "self.mlp()")
    branches = {c.label: c for c in mlp.children if c.kind == BRANCH}
    moe, dense = branches["DeepseekV2MoE.forward()"], branches["DeepseekV2MLP.forward()"]
    assert moe.annotation == "if self.is_layer_sparse" and dense.annotation == "if not self.is_layer_sparse"
    assert [c.label for c in moe.children] == [
        "self.forward_normal_dual_stream()", "self.forward_normal()", "self.forward_deepep()"]
    assert moe.children[2].annotation == "if self._enable_a2a_moe"
    assert [c.label for c in dense.children] == ["self.gate_up_proj()", "self.act_fn()", "self.down_proj()"]
    experts = first(moe.children[1], "self.experts()")
    assert {"fused_moe_kernel", "cutlass_fused_moe"} <= names(experts)
    assert next(k for k in experts.kernels if k.name == "fused_moe_kernel").family == "triton"
    deepep = moe.children[2]
    assert {"self.gate()", "self.topk()", "self.experts()"} <= {c.label for c in deepep.children}
    gate = first(moe, "self.gate()")
    assert "dsv3_router_gemm()" in [c.label for c in gate.children]


def test_free_function_kernels(deepseek):
    root = deepseek.tree.root
    for label in ("bmm_fp8()", "concat_mla_k()", "merge_state_v2()"):
        node = first(root, label)
        assert not node.children and node.kernels[0].family == "sgl-kernel" and node.kernels[0].chain[-1].site == node.site
    assert first(first(root, "self.forward_absorb_core()"), "bmm_fp8()").annotation == \
        "if self.w_vc.dtype == torch.float8_e4m3fn"
    # quantized linears reach their GEMM kernels; their factory never hands them MoE methods
    q_b = names(first(root, "self.q_b_proj()"))
    assert {"fp8_scaled_mm", "fp8_blockwise_scaled_mm"} <= q_b and "fused_moe_kernel" not in q_b


def test_cross_validation_finds_the_indirect_call(deepseek):
    v = deepseek.validation
    assert v.scanned >= 20 and len(v.kernels) > 300
    # dsv3_fused_a_gemm is called from prepare_qkv_latent, handed to the communicator as a
    # callback: no static call path reaches it, and the report says so
    assert [(u.kernel.name, u.function.rsplit(".", 1)[-1]) for u in v.unmapped] == [
        ("dsv3_fused_a_gemm", "prepare_qkv_latent")]
    assert not v.ops_without_kernels


def test_report_in_seed_003_format(deepseek):
    link = report.linker(deepseek.sources, None, "../sglang/python/")
    text = report.op_traces_markdown(deepseek.tree, deepseek.validation, link, "DeepSeek")
    assert text.startswith("# DeepSeek Op Traces\n")
    assert "├─> [self.forward_normal_prepare()](../sglang/python/sglang/srt/models/deepseek_v2.py#L" in text
    assert "**(MLA_FUSED_ROPE path)**" in text and "**DeepseekV2MoE.forward()** **(if self.is_layer_sparse)**" in text
    assert "| `self.input_layernorm()` |" in text and "⚠️ KERNEL TRACE ISSUE: Kernel `dsv3_fused_a_gemm`" in text


#: the Triton and JIT kernels that store the KV cache run with every backend
KV_STORE = {"triton", "jit"}


@pytest.mark.parametrize("backend,platform,library", [
    ("flashinfer", "cuda", "flashinfer"), ("fa3", "cuda", "sgl-kernel"), ("aiter", "rocm", "aiter")])
def test_a_chosen_backend_prunes_the_others(wheel, backend, platform, library):
    """Issue 18: with --attention-backend and --platform, ``attn_mqa`` lists at most 10 custom
    kernels, of that backend's library (and the kernels that store the KV cache); without them
    it lists every backend's (over 100)."""
    from layerc.passes.pyconst import Knowns

    module = OpTraceModule(SourceSet(wheel), "DeepseekV2ForCausalLM",
                           knowns=Knowns(platform=platform, attention_backend=backend))
    TraceOps().apply(Context(), module)
    module.verify()
    custom = {(k.family, k.name) for n, _ in module.tree.nodes() if n.label == "self.attn_mqa()"
              for k in n.kernels if not k.native}
    assert 1 <= len(custom) <= 10, sorted(custom)
    assert {f for f, _ in custom} <= {library} | KV_STORE
    assert any(f == library for f, _ in custom)
    assert module.pruned > 50


def test_without_a_backend_every_backend_is_listed(deepseek):
    custom = {(k.family, k.name) for n, _ in deepseek.tree.nodes() if n.label == "self.attn_mqa()"
              for k in n.kernels if not k.native}
    assert len(custom) > 100 and {"flashinfer", "aiter", "sgl-kernel"} <= {f for f, _ in custom}


def test_qwen3_without_a_module_is_an_ambiguity_error(wheel, tmp_path):
    """Issue 18: sglang defines Qwen3ForCausalLM twice; --entry without a module names both."""
    from tests.layerc_cli import run_layerc

    rc, _, err = run_layerc("optrace", wheel, "--entry", "Qwen3ForCausalLM", "-o", tmp_path / "r.md")
    assert rc == 1 and "--entry 'Qwen3ForCausalLM' is ambiguous: 2 classes" in err
    assert "sglang.srt.models.qwen3:Qwen3ForCausalLM (sglang/srt/models/qwen3.py:" in err
    assert "sglang.multimodal_gen.runtime.models.encoders.qwen3:Qwen3ForCausalLM" in err
    assert not (tmp_path / "r.md").exists()
