"""Generate realistic PyTorch-profiler (Kineto) Chrome traces of LLM inference, with ground truth.

Layer detection needs traces whose answer is known. This module writes a Kineto JSON(.gz) trace
of one inference run of a chosen model on a chosen vendor's stack, and beside it
``<stem>_truth.json``: for every kernel (in start order, keyed by ``correlation`` and ``start`` in
ns, as ``read_kineto`` reads them) its true ``layer`` (None outside the decoder layers), ``stage``,
``layer_type`` and ``kernel_type``, plus totals.

Models: ``deepseek_v3`` (61 layers, the first 3 MLA + dense FFN, the rest MLA + MoE; fp8 GEMMs
with per-token-group quantisation; shared experts on an auxiliary stream), ``grok2`` (64 layers
of MHA + MoE whose ``fused_dual_residual_rmsnorm_kernel`` fires twice per block, before attention
and before the MoE, so a naive detector sees 128 half layers), ``llama`` (32), ``qwen3`` (36,
with per-head q/k norms), ``gpt_oss`` (36; vLLM's ``TransformerBlock`` holding an ``MLPBlock``;
TensorRT-LLM-gen MXFP4 ``bmm_*`` expert GEMMs on CUDA, Triton ``_matmul_ogs_*`` on ROCm) and
``vlm`` (two stacks: a 24-block ViT tower in prefill passes, then a 28-layer language model).
``tp > 1`` adds an all-reduce after attention and after the FFN/MoE of
every layer (inside the layer), one after the vocab-parallel embedding and an all-gather of the
logits; eager (prefill) passes use NCCL/RCCL, graph-replayed decode passes the custom all-reduce.
``fused_allreduce`` fuses each all-reduce with the RMSNorm after it (the layers' boundaries move).

Vendors: ``cuda`` (SGLang/vLLM/TRT-LLM on NVIDIA: nvjet / cuBLAS / DeepGEMM GEMMs, flashinfer and
FlashMLA attention, ``fmhaSm90`` for grok2, flashinfer norms, triton MoE, NCCL) and ``rocm``
(SGLang on MI300: hipBLASLt ``Cijk_*`` GEMMs, aiter norms and MLA, ``paged_attention_ll4mi``,
ck_tile prefill attention and MoE sorting, ck ``kernel_moe_gemm``, RCCL); names follow real traces
(e.g. ``sglang_qwen3-8b_decode_mi300x.json.gz``).

Passes: ``prefill`` eager passes (per kernel a ``cpu_op`` with a ``cudaLaunchKernel`` /
``hipLaunchKernel`` runtime call inside, or the driver/module launch the library really uses, an
``ac2g`` flow, and the ``External id`` on all three), then ``decode`` passes, each one graph replay:
one ``cudaGraphLaunch``/``hipGraphLaunch`` whose correlation every kernel of the pass shares.
Each pass: input fills/copies and the embedding, the layers, then final norm, lm_head and sampling;
in half the eager passes the host stalls before one of those, longer than between two passes.
``graphs`` makes the decode passes eager, or every pass (or the prefill passes only) piecewise:
graph pieces split at attention, which is launched eagerly between them (``GRAPHS``).
``modules="layers"`` (``ground_truth_spans=True``) adds ``python_function``
``nn.Module: <Class>DecoderLayer_<i>`` spans around each layer's launches in eager passes (graph
replays and compiled pieces have no Python context); ``modules="tree"`` the whole module tree.
``style="hf_eager"`` writes a Hugging Face transformers model run eagerly instead (``llama``,
``qwen3``, ``qwen3_moe``; CUDA): every torch op its own kernel, names from a real H100 capture
(``hf_eager_kernels``), launch-bound, now and then a host stall inside a layer.
Training steps and an HPC code: ``gen_trace_workloads``.

Truth layer membership follows the module: a layer's kernels are those its ``DecoderLayer``
forward launches, so the all-reduce after its FFN belongs to it, and the embedding, final norm,
lm_head and sampling kernels to none.

Usage: ``layerc gen-trace OUT.json.gz --model M --vendor V --tp N [--prefill P] [--decode D]
[--layers L] [--seed S] [--graphs G] [--modules M] [--fused-allreduce] [--workload W]``.
"""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import numpy as np
import orjson

from layerc.backends.outputs import companion, output_dir, write_atomic
from layerc.backends.synth.hf_eager_kernels import HF_EAGER_CUDA

VENDORS = ("cuda", "rocm")
TYPES = ("ATTENTION", "MOE", "LINEAR", "NORM", "COMMUNICATION", "QUANTIZATION", "MEMORY", "ELEMENTWISE", "OTHER")


@dataclass(frozen=True)
class Tree:
    """The module classes a forward pass nests (``nn.Module: <class>_<instance>`` spans)."""

    top: str
    model: str
    layer: str
    attention: str
    mlp: str
    norm: str = "RMSNorm"
    linear: str = "Linear"


@dataclass(frozen=True)
class Model:
    layers: int
    cls: str  # DecoderLayer class prefix
    tps: tuple[int, ...]
    tree: Tree
    vision: int = 0  #: layers of a vision tower run before the text stack in prefill passes (two stacks)
    vision_tree: Tree | None = None

    def stack_tree(self, stack: int) -> Tree:
        """The module tree of stack 0 (the text stack) or 1 (the vision tower)."""
        if stack != 1:
            return self.tree
        assert self.vision_tree is not None, "a vision op in a model without a vision tower"
        return self.vision_tree


def _hf(cls: str, norm: str = "RMSNorm") -> Tree:
    return Tree(f"{cls}ForCausalLM", f"{cls}Model", f"{cls}DecoderLayer", f"{cls}Attention", f"{cls}MLP", f"{cls}{norm}")


MODELS = {
    "deepseek_v3": Model(61, "DeepseekV3", (1, 8), Tree("DeepseekV3ForCausalLM", "DeepseekV3Model", "DeepseekV3DecoderLayer",
                                                        "DeepseekV3Attention", "DeepseekV3MLP", linear="ReplicatedLinear")),
    "grok2": Model(64, "Grok1", (1, 8), Tree("Grok1ForCausalLM", "Grok1Model", "Grok1DecoderLayer", "Grok1Attention", "Grok1MoE")),
    "llama": Model(32, "Llama", (1, 4), _hf("Llama")),
    "qwen3": Model(36, "Qwen3", (1, 4), _hf("Qwen3")),
    # a hybrid stack: three Gated-DeltaNet layers (flash-linear-attention's Triton kernels), then
    # one gated full-attention layer, each with a MoE and a shared expert
    "qwen3_next": Model(48, "Qwen3Next", (1, 4), Tree("Qwen3NextForCausalLM", "Qwen3NextModel", "Qwen3NextDecoderLayer",
                                                      "Qwen3NextGatedDeltaNet", "Qwen3NextSparseMoeBlock", "Qwen3NextRMSNorm")),
    "qwen3_moe": Model(48, "Qwen3Moe", (1, 4), Tree("Qwen3MoeForCausalLM", "Qwen3MoeModel", "Qwen3MoeDecoderLayer",
                                                    "Qwen3MoeAttention", "Qwen3MoeSparseMoeBlock", "Qwen3MoeRMSNorm")),
    # vLLM's gpt-oss: the MLPBlock (router + MoE) nests inside each TransformerBlock
    "gpt_oss": Model(36, "", (1, 8), Tree("GptOssForCausalLM", "GptOssModel", "TransformerBlock", "OAIAttention", "MLPBlock")),
    # a vision-language model: a ViT tower (LayerNorm, GELU MLP, non-causal attention) before the text stack
    "vlm": Model(28, "Qwen2", (1, 4), _hf("Qwen2"), vision=24,
                 vision_tree=Tree("", "Qwen2VisionTransformer", "Qwen2VLVisionBlock", "VisionAttention", "VisionMlp", "LayerNorm")),
}
#: how the decode and prefill passes launch their kernels: full-graph decode (SGLang's default),
#: vLLM's piecewise graphs (split at attention, which runs eagerly between the pieces) for every
#: pass or for prefill only beside full-graph decode, or no graphs at all
GRAPHS = ("full", "piecewise", "full_and_piecewise", "none")
#: whose kernels a pass runs: a serving engine's fused ones (norms, rope, activation and MoE in one
#: kernel each), or a Hugging Face transformers model run eagerly (every torch op its own kernel:
#: an RMSNorm is eight, q/k/v and gate/up separate GEMMs, cuDNN's SDPA, DynamicCache ``cat``s,
#: grouped-GEMM experts through ``torch._grouped_mm``; launch-bound, with host stalls inside layers)
STYLES = ("engine", "hf_eager")
#: the models and graph modes an HF eager run has (its kernel names come from a real H100 capture)
HF_EAGER_MODELS, HF_EAGER_GRAPHS = ("llama", "qwen3", "qwen3_moe"), ("none", "full")
MODULES = ("none", "layers", "tree")
#: the ops that sample a token from the logits, launched eagerly after a graph
_SAMPLING = ("to_float", "softmax", "argmax", "hf:argmax")
#: ops a piecewise graph leaves out: attention runs eagerly between two pieces
_SPLITTING = {"kv_write", "mla_kv_write", "attn", "attn_grok", "attn_mla", "attn_sink", "attn_reduce", "attn_reduce_mla"}
DENSE_LAYERS = 3  # deepseek_v3: first_k_dense_replace

# -- kernel catalog ------------------------------------------------------------------------------
# key -> (type, cpu_op, grid kind, base µs) ; names per vendor below (str, or (prefill, decode)).
_KIND = {
    "fill": ("MEMORY", "aten::fill_", "ew", 2.0),
    "copy": ("MEMORY", "aten::copy_", "ew", 2.5),
    "positions": ("MEMORY", "triton::compute_position", "small", 2.5),
    "kv_indices": ("MEMORY", "triton::create_flashinfer_kv_indices", "small", 3.0),
    "embed": ("MEMORY", "aten::embedding", "ew", 4.0),
    "norm": ("NORM", "sglang::rmsnorm", "rows", 4.0),
    "add_norm": ("NORM", "sglang::fused_add_rmsnorm", "rows", 5.0),
    "head_norm": ("NORM", "sglang::rmsnorm", "rows", 3.5),
    "dual_norm": ("NORM", "sglang::fused_dual_residual_rmsnorm", "rows", 5.5),
    "final_norm": ("NORM", "sglang::rmsnorm", "rows", 4.0),
    "quant": ("QUANTIZATION", "sglang::per_token_group_quant_fp8", "rows", 3.0),
    "gemm": ("LINEAR", "aten::mm", "gemm", 12.0),
    "bmm": ("LINEAR", "aten::bmm", "gemm", 8.0),
    "rope": ("ATTENTION", "sglang::rotary_embedding", "rows", 4.0),
    "kv_write": ("ATTENTION", "sglang::store_kvcache", "rows", 4.0),
    "mla_kv_write": ("ATTENTION", "sglang::set_mla_kv_buffer", "rows", 4.0),
    "attn": ("ATTENTION", "sglang::attention", "attn", 30.0),
    "attn_reduce": ("ATTENTION", "sglang::attention", "attn", 5.0),
    "act": ("ELEMENTWISE", "sglang::silu_and_mul", "ew", 6.0),
    "add": ("ELEMENTWISE", "aten::add", "ew", 3.0),
    "topk": ("MOE", "sglang::topk", "rows", 5.0),
    "moe_align": ("MOE", "sglang::moe_align_block_size", "small", 6.0),
    "moe_sort": ("MOE", "sglang::moe_align_block_size", "small", 4.0),
    "moe_gemm": ("MOE", "sglang::fused_moe", "gemm", 40.0),
    "moe_sum": ("MOE", "sglang::moe_sum_reduce", "rows", 4.0),
    "allreduce": ("COMMUNICATION", "sglang::all_reduce", "comm", 14.0),
    "allgather": ("COMMUNICATION", "sglang::all_gather", "comm", 12.0),
    "argmax": ("ELEMENTWISE", "aten::argmax", "small", 6.0),
    "softmax": ("ELEMENTWISE", "aten::softmax", "rows", 5.0),
    "to_float": ("MEMORY", "aten::to", "ew", 3.0),
    "ln": ("NORM", "aten::native_layer_norm", "rows", 4.0),
    "ar_norm": ("COMMUNICATION", "trtllm::allreduce_fusion", "comm", 16.0),
    "gelu": ("ELEMENTWISE", "aten::gelu", "ew", 4.0),
    "patch_embed": ("LINEAR", "aten::convolution", "gemm", 20.0),
    "routing": ("MOE", "vllm::moe_routing", "small", 4.0),
    "moe_finalize": ("MOE", "vllm::moe_finalize", "rows", 5.0),
    "gdn_conv": ("ELEMENTWISE", "vllm::causal_conv1d", "rows", 4.0),
    "gdn_gating": ("ELEMENTWISE", "vllm::fused_gdn_gating", "rows", 2.5),
    "gdn_chunk": ("ATTENTION", "vllm::chunk_gated_delta_rule", "attn", 12.0),
    "gdn_recurrent": ("ATTENTION", "vllm::fused_recurrent_gated_delta_rule", "attn", 8.0),
    "gated_norm": ("NORM", "vllm::rms_norm_gated", "rows", 3.0),
    "sigmoid_mul": ("ELEMENTWISE", "aten::mul", "ew", 2.5),
}

# the eager ops of a transformers model: (type, cpu_op, grid kind, base µs); names in hf_eager_kernels
_HF_KIND = {
    **{k: ("MEMORY", "aten::to", "ew", 2.0) for k in ("to_f32", "to_bf16")},
    "pow": ("ELEMENTWISE", "aten::pow", "ew", 1.5), "mean": ("ELEMENTWISE", "aten::mean", "rows", 2.0),
    "eps_add": ("ELEMENTWISE", "aten::add", "ew", 1.2), "rsqrt": ("ELEMENTWISE", "aten::rsqrt", "ew", 1.2),
    "mul_f32": ("ELEMENTWISE", "aten::mul", "ew", 1.5), "mul_w": ("ELEMENTWISE", "aten::mul", "ew", 2.0),
    "neg": ("ELEMENTWISE", "aten::neg", "ew", 1.5), "cat": ("MEMORY", "aten::cat", "ew", 2.0),
    "rope_add": ("ELEMENTWISE", "aten::add", "ew", 1.8), "kv_cat": ("MEMORY", "aten::cat", "ew", 2.5),
    "attn": ("ATTENTION", "aten::_cudnn_attention_forward", "attn", 20.0),
    **{k: ("LINEAR", "aten::mm", "gemm", 10.0) for k in ("proj", "kv_proj", "up", "down", "lm_head", "router")},
    "rope_freqs": ("LINEAR", "aten::matmul", "small", 3.0), "split_k": ("LINEAR", "aten::mm", "small", 1.5),
    "silu": ("ELEMENTWISE", "aten::silu", "ew", 2.0), "act_mul": ("ELEMENTWISE", "aten::mul", "ew", 2.0),
    "residual": ("ELEMENTWISE", "aten::add", "ew", 2.0), "router_softmax": ("ELEMENTWISE", "aten::_softmax", "rows", 2.0),
    "topk": ("MEMORY", "aten::topk", "rows", 4.0), "sort": ("ELEMENTWISE", "aten::topk", "rows", 4.0),
    "sort_long": ("ELEMENTWISE", "aten::sort", "rows", 3.0), "div": ("ELEMENTWISE", "aten::floor_divide", "ew", 1.2),
    "gather": ("MEMORY", "aten::index", "ew", 1.5), "index": ("MEMORY", "aten::index", "ew", 1.5),
    "fill_int": ("MEMORY", "aten::fill_", "ew", 1.0), "histogram": ("OTHER", "aten::histc", "small", 1.5),
    "scan_init": ("ELEMENTWISE", "aten::cumsum", "small", 1.0), "scan": ("ELEMENTWISE", "aten::cumsum", "small", 1.5),
    "compare": ("ELEMENTWISE", "aten::lt", "ew", 1.0), "clamp": ("ELEMENTWISE", "aten::clamp", "ew", 1.0),
    "masked_fill": ("MEMORY", "aten::masked_fill_", "ew", 1.8), "grouped_prep": ("MOE", "aten::_grouped_mm", "small", 1.2),
    "grouped_gemm": ("MOE", "aten::_grouped_mm", "gemm", 15.0), "index_put": ("MEMORY", "aten::index_put_", "ew", 1.5),
    "sum": ("ELEMENTWISE", "aten::sum", "rows", 3.0), "embed": ("MEMORY", "aten::embedding", "ew", 2.0),
    "arange": ("MEMORY", "aten::arange", "small", 0.8), "cos": ("ELEMENTWISE", "aten::cos", "ew", 1.2),
    "sin": ("ELEMENTWISE", "aten::sin", "ew", 1.2), "argmax": ("ELEMENTWISE", "aten::argmax", "small", 4.0),
}

_CUDA = {
    "fill": "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>, std::array<char*, 1ul> >(int, at::native::FillFunctor<int>, std::array<char*, 1ul>)",
    "copy": "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(long)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(long)#1} const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(long)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(long)#1} const&)::{lambda(int)#1})",
    "positions": "compute_position_kernel",
    "kv_indices": "create_flashinfer_kv_indices_triton",
    "embed": "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<c10::BFloat16 const, unsigned int>, at::cuda::detail::TensorInfo<long const, unsigned int>, int, int, unsigned int, unsigned int, long)",
    "norm": "void flashinfer::norm::RMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, unsigned int, unsigned int, unsigned int, unsigned int, float, float)",
    "add_norm": "void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, unsigned int, unsigned int, unsigned int, unsigned int, float, float)",
    "head_norm": "void flashinfer::norm::RMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, unsigned int, unsigned int, unsigned int, unsigned int, float, float)",
    "dual_norm": "fused_dual_residual_rmsnorm_kernel",
    "final_norm": "void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, unsigned int, unsigned int, unsigned int, unsigned int, float, float)",
    "quant": "void per_token_group_quant_8bit_kernel<__nv_bfloat16, __nv_fp8_e4m3, false, false>(__nv_bfloat16 const*, void*, float*, int, int, int, float, float, float, int, int)",
    "gemm": ("nvjet_tst_256x128_64x4_2x1_v_bz_coopA_TNT", "nvjet_tst_64x8_64x16_4x1_v_bz_splitK_TNT"),
    "gemm_fp8": "void deep_gemm::fp8_gemm_kernel<7168u, 1536u, 128u, 128u, 128u, 1u, 8u, 128u, 128u, 1u, 1u, (deep_gemm::GemmType)0>(float*, int*, int, __grid_constant__ CUtensorMap, __grid_constant__ CUtensorMap, __grid_constant__ CUtensorMap, __grid_constant__ CUtensorMap)",
    "bmm": "nvjet_tst_64x8_64x16_4x1_v_bz_bias_TNN",
    "rope": "void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, c10::BFloat16*, c10::BFloat16 const*, int, long, long, long, int, int, int)",
    "kv_write": "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>(__nv_bfloat16 const*, __nv_bfloat16 const*, __nv_bfloat16*, __nv_bfloat16*, long const*, long, long, long, long, int, int, int, float const*, float const*)",
    "mla_kv_write": "void set_mla_kv_buffer_kernel<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16 const*, __nv_bfloat16 const*, long const*, int, int, int)",
    "attn": ("void flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits<(flashinfer::MaskMode)1, 128u, 1u, 8u, 2u, 4u, 1u, 4u, (flashinfer::PosEncodingMode)0, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, int, flashinfer::DefaultAttention<false, false, false, false> >, flashinfer::BatchPrefillPagedParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, int> >(flashinfer::BatchPrefillPagedParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, int>)",
             "void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0, 2u, 4u, 8u, 16u, 1u, 8u, flashinfer::DefaultAttention<false, false, false, false>, flashinfer::BatchDecodeParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, int> >(flashinfer::BatchDecodeParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, int>)"),
    "attn_grok": ("fmhaSm90Kernel_QkvBfloat16OBfloat16H128PagedKvCausalP64VarSeqQ128Kv128PersistentContext",
                  "fmhaSm90Kernel_QkvBfloat16OBfloat16H128PagedKvDenseP64VarSeqQ8Kv128PersistentSwapsAbForGen"),
    "attn_mla": ("void flashinfer::BatchPrefillWithRaggedKVCacheKernel<flashinfer::KernelTraits<(flashinfer::MaskMode)1, 128u, 1u, 12u, 8u, 8u, 1u, 4u, (flashinfer::PosEncodingMode)0, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, int, flashinfer::DefaultAttention<false, false, false, false> >, flashinfer::BatchPrefillRaggedParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, int> >(flashinfer::BatchPrefillRaggedParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, int>)",
                 "void flash::flash_fwd_splitkv_mla_kernel<Flash_fwd_kernel_traits_mla<576, 64, 64, 8, cutlass::bfloat16_t, 512>, true>(Flash_fwd_mla_params)"),
    "attn_reduce_mla": "void flash::flash_fwd_mla_combine_kernel<cutlass::bfloat16_t, 512, 64, 8>(Flash_fwd_mla_params)",
    "act": "void sglang::activation::act_and_mul_kernel<__nv_bfloat16, &(float silu<float>(float const&))>(__nv_bfloat16*, __nv_bfloat16 const*, int)",
    "add": "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)",
    "topk": "void vllm::moe::topkGatingSoftmax<4, 8, 4, 16, 32, int, __nv_bfloat16>(__nv_bfloat16 const*, bool const*, float*, int, int*, int*, int, int, int)",
    "topk_grouped": "void moe_fused_gate_kernel<__nv_bfloat16, 256, 8, 4>(void*, void*, float*, int*, long, long, long, long, double)",
    "moe_align": "void moe_align_block_size_kernel<int>(int const*, int*, int*, int*, int, int, int, int, unsigned long, int*)",
    "moe_sort": "void count_and_sort_expert_tokens_kernel<int>(int const*, int*, int*, unsigned long)",
    "moe_gemm": "fused_moe_kernel",
    "moe_sum": "void moe_sum_reduce_kernel<__nv_bfloat16, 8>(__nv_bfloat16 const*, __nv_bfloat16*, long, long, long, long, double)",
    "allreduce": ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                  "void sglang::cross_device_reduce_1stage<__nv_bfloat16, 8>(sglang::RankData*, sglang::RankSignals, sglang::Signal*, __nv_bfloat16*, int, int)"),
    "allgather": "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "argmax": "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, long, 4, 4> >(at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, long, 4, 4>)",
    "softmax": "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)",
    "to_float": "void at::native::vectorized_elementwise_kernel<4, at::native::bfloat16tofloat32_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, at::native::bfloat16tofloat32_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul>)",
}

_CIJK = "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT{}_MI16x16x1_SN_LDSB1_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_DTLA0_DTLB0_DTVA0_DTVB0_EPS0_FDSI0_GRPM1"
_ROCM = {
    "fill": "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>, std::array<char*, 1ul> >(int, at::native::FillFunctor<int>, std::array<char*, 1ul>)",
    "copy": "void at::native::elementwise_kernel_manual_unroll<128, 8, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(c10::BFloat16)#1} const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(c10::BFloat16)#1} const&)::{lambda(int)#1})",
    "positions": "compute_position_kernel",
    "kv_indices": "create_flashinfer_kv_indices_triton",
    "embed": "void at::native::vectorized_gather_kernel<16, long>(char*, char*, long*, int, long, long, long, long, bool)",
    "norm": "_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256ELi16ELb0ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib",
    "add_norm": "_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256ELi16ELb1ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib",
    "head_norm": "_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi64ELi8ELb0ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib",
    "dual_norm": "fused_dual_residual_rmsnorm_kernel",
    "rms_fp8": "_fused_rms_fp8_group_quant_kernel",
    "final_norm": "_ZN7ck_tile6kentryILi1ENS_17Rmsnorm2dFwdKernelINS_19Rmsnorm2dFwdPipelineOnePassINS_23Rmsnorm2dFwdPipelineProblemIDF16bDF16bfDF16bfDF16bffNS_14Generic2dShapeILi1ELi1ELi8ELi1ELi64ELi1ELi8EEENS_21Rmsnorm2dFwdTraitsILb1ELb0ELNS_24Rmsnorm2dFusedAddEnumE1ELNS_26Rmsnorm2dFusedQuantEnumE0EEEEENS_32Rmsnorm2dFwdPipelineDefaultPolicyEEENS_8Default2DEpilogueINS_23Default2DEpilogueProblemIfDF16bLb0ELb1ELb0EEEvEEEEEJNSC_5KargsEEEEvDpT0_",
    "quant": "_ZN5aiter34dynamic_per_group_scaled_quant_kernelIDF16bN3c1015Float8_e4m3fnuzELi128EEEvPT0_PKT_Pfi",
    "gemm": (_CIJK.format("256x192x64"), _CIJK.format("64x32x256")),
    "gemm_fp8": "_gemm_a8w8_blockscale_kernel",
    "bmm": "_batched_gemm_a8w8_a_per_token_group_prequant_w_per_batched_tensor_quant_kernel",
    "rope": "void rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, c10::BFloat16*, c10::BFloat16 const*, int, long, long, long, int, int, int)",
    "kv_write": "void (anonymous namespace)::store_kvcache<2048l, 4, false, long>((anonymous namespace)::StoreKVCacheParams)",
    "mla_kv_write": "void set_mla_kv_buffer_kernel<c10::BFloat16>(c10::BFloat16*, c10::BFloat16 const*, c10::BFloat16 const*, long const*, int, int, int)",
    "attn": ("_ZN7ck_tile6kentryILi2ENS_38FmhaBatchPrefillWithPagedKVCacheKernelINS_40BlockFmhaBatchPrefillPipelineQRKSVSAsyncINS_31BlockFmhaPipelineProblemEEENS_17Default2DEpilogueEEEJNS_5KargsEEEEvDpT0_",
             "void paged_attention_ll4mi_QKV_mfma16_kernel<0, __hip_bfloat16, __hip_bfloat16, (vllm::Fp8KVCacheDataType)0, 1, 128, 256, false, 4, 1, ck_tile::ComposedAttention<0u, false> >(__hip_bfloat16 const*, __hip_bfloat16 const*, __hip_bfloat16 const*, int, float, int const*, int const*, int const*, int, float const*, int, int, int, float*, float*, __hip_bfloat16*, __hip_bfloat16*, int, float const*, float const*, float const*)"),
    "attn_reduce": "void paged_attention_ll4mi_reduce_kernel<__hip_bfloat16, __hip_bfloat16, 128, 128, 256, 3, false>(__hip_bfloat16*, float const*, float const*, __hip_bfloat16 const*, int const*, int const*, int, float const*)",
    "attn_mla": ("_ZN5aiter32fmha_fwd_hd192_hd128_bf16_causalE",
                 "_ZN5aiter39mla_a8w8_qh16_qseqlen1_gqaratio16_ps_m16EPv"),
    "attn_reduce_mla": "_ZN5aiter16kn_mla_reduce_v1ILi512ELi16ELb1EEEvNS_19MlaReduceKernelArgsE",
    "act": "_ZN7sgl_hip10activation18act_and_mul_kernelI14__hip_bfloat16TnPFT_RKS3_EXadL_Z4siluIS2_ES3_S5_EEEEvPS3_PS4_i",
    "add": "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)",
    "topk": "_ZN5aiter17topkGatingSoftmaxIDF16bLi8ELi8ELi4ELi16ELi64EiEEvPKT_PKbPfiPT5_Piiii",
    "topk_grouped": "_ZN5aiter19biased_grouped_topk_kernelIDF16bLi256ELi8ELi4EEEvPKT_PKS1_PfPiiiid",
    "moe_align": "_ZN7ck_tile6kentryILi1ENS_16MoeSortingKernelINS_17MoeSortingProblemIifLi1ELb1ELb0EEEEEJNS_18MoeSortingKernel5KargsEEEEvDpT0_",
    "moe_gemm": "_ZN2ck15kernel_moe_gemmINS_28GridwiseMoeGemmBlockScaleEELb1ELNS_25InMemoryDataOperationEnumE0ELi1ELNS_10TailNumberE0EEEvNT_8ArgumentE",
    "allreduce": ("rcclGenericKernel(ncclDevComm*, unsigned long, ncclWork*)",
                  "void aiter::cross_device_reduce_1stage_naive<__hip_bfloat16, 8>(aiter::RankData*, aiter::RankSignals, aiter::Signal*, __hip_bfloat16*, int, int)"),
    "allgather": "rcclGenericKernel(ncclDevComm*, unsigned long, ncclWork*)",
    "argmax": "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, long, 4, 4> >(at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, long, 4, 4>)",
    "softmax": "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)",
    "to_float": "void at::native::vectorized_elementwise_kernel<4, at::native::bfloat16tofloat32_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, at::native::bfloat16tofloat32_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul>)",
}
_COMMON = {  # the same library on both stacks (PyTorch's own kernels, Triton kernels)
    # flash-linear-attention's Triton kernels for Gated DeltaNet (vLLM / SGLang Qwen3-Next)
    "gdn_conv": ("_causal_conv1d_fwd_kernel", "_causal_conv1d_update_kernel"),
    "gdn_gating": "fused_gdn_gating_kernel",
    "gdn_cumsum": "chunk_local_cumsum_scalar_kernel", "gdn_kkt": "chunk_scaled_dot_kkt_fwd_kernel",
    "gdn_solve": "solve_tril_16x16_kernel", "gdn_wu": "recompute_w_u_fwd_kernel",
    "gdn_h": "chunk_gated_delta_rule_fwd_kernel_h_blockdim64", "gdn_o": "chunk_fwd_kernel_o",
    "gdn_recurrent": "fused_recurrent_gated_delta_rule_fwd_kernel",
    "gated_norm": "_layer_norm_fwd_1pass_kernel",
    "sigmoid_mul": "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul>)",
    "ln": "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)",
    "gelu": "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul>)",
    "topk_ogs": "_topk_forward",
    "ar_norm": "void tensorrt_llm::kernels::ar_fusion::allreduce_fusion_kernel_oneshot_lamport<__nv_bfloat16, 8, true>(tensorrt_llm::kernels::ar_fusion::AllReduceFusionParams<__nv_bfloat16>)",
    "routing": "_combined_routing_compute",
}
_CUDA.update({
    "vit_attn": "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<80, 128, 64, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<80, 128, 64, 4, cutlass::bfloat16_t> >, false, false, false, false, true, true, false, false>(flash::Flash_fwd_params)",
    "attn_sink": ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 64, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 64, 4, cutlass::bfloat16_t> >, true, false, true, false, true, true, false, false>(flash::Flash_fwd_params)",
                  "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<64, 64, 128, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<64, 64, 128, 4, cutlass::bfloat16_t> >, true, false, true, false, true, true, false, false>(flash::Flash_fwd_params)"),
    "patch_embed": "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8::Params)",
    # TensorRT-LLM-gen MXFP4 expert GEMMs on B200 (gpt-oss)
    "moe_gate_up": "bmm_MxE4m3_MxE2m1E2m1_Fp32_t128x8x256u2_s6_et64x8_m64x8x32_cga1x1x1_16dp256b_rM_TN_transOut_schedS_biasM_bN_ldgsts_tmaOpt_clmp_swiGlu_dynBatch_sm100f",
    "moe_down": "bmm_Bfloat16_MxE2m1MxE4m3_Fp32_t128x8x256u2_s6_et64x8_m64x8x32_cga1x1x1_16dp256b_rM_TN_transOut_schedS_biasM_bN_ldgsts_tmaOpt_dynBatch_sm100f",
    "moe_finalize": "void moe::dev::finalize::finalizeKernelVecLoad<moe::dev::finalize::KernelParams<__nv_bfloat16, __nv_bfloat16, float, false> >(moe::dev::finalize::KernelParams<__nv_bfloat16, __nv_bfloat16, float, false>)",
})
_ROCM.update({
    "vit_attn": "_ZN7ck_tile6kentryILi2ENS_13FmhaFwdKernelINS_26BlockFmhaPipelineQRKSVSAsyncINS_24BlockFmhaPipelineProblemEEENS_17Default2DEpilogueEEEJNS_5KargsEEEEvDpT0_",
    "attn_sink": "kernel_unified_attention_2d",
    "patch_embed": _CIJK.format("128x128x64"),
    # vLLM's Triton MoE kernels (triton_kernels' matmul_ogs) on MI300X
    "moe_gate_up": "_matmul_ogs_NNT_bf16xbf16xmxfp4_128x256x128x1_swiglu",
    "moe_down": "_matmul_ogs_NNT_bf16xbf16xmxfp4_128x256x128x1",
    "moe_finalize": "_finalize_matmul_scatter",
})
for _names in (_CUDA, _ROCM):
    for _key, _name in _COMMON.items():
        _names.setdefault(_key, _name)
_NAMES = {"cuda": _CUDA, "rocm": _ROCM}
#: name variants that share a base kind (type, cpu op, grid, duration)
_BASE = {"gemm_fp8": "gemm", "attn_grok": "attn", "attn_mla": "attn", "attn_reduce_mla": "attn_reduce",
         "topk_grouped": "topk", "rms_fp8": "norm", "router": "gemm", "o_proj": "gemm", "vit_attn": "attn", "attn_sink": "attn",
         "topk_ogs": "topk", "moe_gate_up": "moe_gemm", "moe_down": "moe_gemm",
         **{k: "gdn_chunk" for k in ("gdn_cumsum", "gdn_kkt", "gdn_solve", "gdn_wu", "gdn_h", "gdn_o")}}
#: triton kernels are launched through the driver on CUDA; hipBLASLt / asm kernels through the module API on ROCm
_TRITON = {"_causal_conv1d_fwd_kernel", "_causal_conv1d_update_kernel", "fused_gdn_gating_kernel", "chunk_local_cumsum_scalar_kernel",
           "chunk_scaled_dot_kkt_fwd_kernel", "solve_tril_16x16_kernel", "recompute_w_u_fwd_kernel",
           "chunk_gated_delta_rule_fwd_kernel_h_blockdim64", "chunk_fwd_kernel_o", "fused_recurrent_gated_delta_rule_fwd_kernel",
           "_layer_norm_fwd_1pass_kernel", "fused_moe_kernel", "fused_dual_residual_rmsnorm_kernel", "compute_position_kernel",
           "create_flashinfer_kv_indices_triton", "_fused_rms_fp8_group_quant_kernel", "_gemm_a8w8_blockscale_kernel",
           "_batched_gemm_a8w8_a_per_token_group_prequant_w_per_batched_tensor_quant_kernel", "kernel_unified_attention_2d",
           "_topk_forward", "_combined_routing_compute", "_matmul_ogs_NNT_bf16xbf16xmxfp4_128x256x128x1_swiglu",
           "_matmul_ogs_NNT_bf16xbf16xmxfp4_128x256x128x1", "_finalize_matmul_scatter"}


# -- the op sequence of one pass -----------------------------------------------------------------
@dataclass
class Op:
    key: str  # catalog key
    layer: int | None = None
    aux: bool = False  # on the auxiliary stream (deepseek shared experts)
    part: str = ""  #: the layer's submodule that launches it: "attention", "mlp" or "" (the layer itself)
    stack: int = 0  #: 0: the text stack; 1: the vision tower
    stall: float = 0.0  #: µs the host stalls before launching it (eager only)
    dims: list[list[int]] | None = None  #: its CPU op's ``Input Dims`` (recorded shapes), where written


def _layer_ops(model: str, vendor: str, i: int, tp: int, stage: str) -> tuple[list[Op], str]:
    """Ops of decoder layer ``i`` and its layer type."""
    ar = ["allreduce"] if tp > 1 else []
    decode = stage == "decode"
    if model == "deepseek_v3":
        moe_layer = i >= DENSE_LAYERS
        if vendor == "rocm":
            first = "rms_fp8"
            attn = ["gemm_fp8", "rms_fp8", "rms_fp8", "gemm_fp8"]  # fused_qkv_a, q_a / kv_a norms (+ fp8 quant), q_b
        else:
            first = "norm" if i == 0 else "add_norm"
            attn = ["quant", "gemm_fp8", "norm", "norm", "quant", "gemm_fp8"]
        attn += ["bmm" if decode else "gemm", "rope", "mla_kv_write", "attn_mla"]
        attn += ["attn_reduce_mla", "bmm"] if decode else []
        attn += (["gemm_fp8"] if vendor == "rocm" else ["quant", "gemm_fp8"]) + ar
        post = "rms_fp8" if vendor == "rocm" else "add_norm"
        q = [] if vendor == "rocm" else ["quant"]
        if moe_layer:
            ffn = ["router", "topk_grouped"]
            shared = q + ["gemm_fp8", "act"] + q + ["gemm_fp8"]
            routed = (["moe_align", "moe_gemm", "moe_gemm"] if vendor == "rocm"
                      else ["moe_align", "moe_sort", "quant", "moe_gemm", "act", "quant", "moe_gemm", "moe_sum"])
            ops = [Op(first), *map(Op, attn), Op(post), *map(Op, ffn), *(Op(k, aux=True) for k in shared),
                   *map(Op, routed), Op("add"), *map(Op, ar)]
            kind = "MLA_MOE"
        else:
            ops = [Op(first), *map(Op, attn), Op(post), *map(Op, q + ["gemm_fp8", "act"] + q + ["gemm_fp8"] + ar)]
            kind = "MLA_FC"
    elif model == "gpt_oss":
        first = "norm" if i == 0 else "add_norm"
        attn = [first, "gemm", "rope", "kv_write", "attn_sink", "o_proj"] + ar
        moe = ["add_norm", "router", "topk_ogs", "routing", "moe_gate_up", "moe_down", "moe_finalize"] + ar
        ops = [Op(k) for k in attn + moe]
        kind = "MHA_MOE"
    elif model == "grok2":
        attn = ["dual_norm", "gemm", "rope", "kv_write", "attn_grok" if vendor == "cuda" else "attn"]
        attn += ["attn_reduce"] if decode and vendor == "rocm" else []
        attn += ["o_proj"] + ar
        moe = ["dual_norm", "router", "topk", "moe_align"]
        moe += ["moe_gemm", "moe_gemm"] if vendor == "rocm" else ["moe_sort", "moe_gemm", "act", "moe_gemm", "moe_sum"]
        ops = [Op(k) for k in attn + moe + ar]
        kind = "MHA_MOE"
    elif model == "qwen3_next":
        first = "norm" if i == 0 else "add_norm"
        if (i + 1) % 4:  # Gated DeltaNet: projections, short conv, gating, the delta rule (chunked or recurrent), gated norm
            rule = ["gdn_cumsum", "gdn_kkt", "gdn_solve", "gdn_wu", "gdn_h", "gdn_o"] if not decode else ["gdn_recurrent"]
            mixer, kind = ["gemm", "gemm", "gdn_conv", "gdn_gating", *rule, "gated_norm"], "GDN_MOE"
        else:  # gated attention: q/k norms, rope, the cache, attention, the output gate
            mixer, kind = ["gemm", "head_norm", "head_norm", "rope", "kv_write", "attn"], "MHA_MOE"
            mixer += ["attn_reduce"] if decode and vendor == "rocm" else []
            mixer += ["sigmoid_mul"]
        moe = ["add_norm", "router", "topk", "moe_align"]
        moe += ["moe_gemm", "moe_gemm"] if vendor == "rocm" else ["moe_sort", "moe_gemm", "act", "moe_gemm", "moe_sum"]
        shared = ["gemm", "act", "gemm", "sigmoid_mul"]
        ops = [Op(k) for k in [first, *mixer, "o_proj", *ar, *moe, *shared, *ar]]
    elif model == "qwen3_moe":
        first = "norm" if i == 0 else "add_norm"
        attn = [first, "gemm", "head_norm", "head_norm", "rope", "kv_write", "attn"]
        attn += ["attn_reduce"] if decode and vendor == "rocm" else []
        moe = ["add_norm", "router", "topk", "moe_align"]
        moe += ["moe_gemm", "moe_gemm"] if vendor == "rocm" else ["moe_sort", "moe_gemm", "act", "moe_gemm", "moe_sum"]
        ops = [Op(k) for k in attn + ["o_proj"] + ar + moe + ar]
        kind = "MHA_MOE"
    else:  # llama, qwen3
        first = "norm" if i == 0 else "add_norm"
        attn = [first, "gemm"]
        if model == "qwen3":
            attn += ["copy", "head_norm", "copy", "head_norm"] if vendor == "rocm" else ["head_norm", "head_norm"]
        attn += ["rope", "kv_write", "attn"]
        attn += ["attn_reduce"] if decode and vendor == "rocm" else []
        attn += ["o_proj"] + ar + ["add_norm", "gemm", "act", "gemm"] + ar
        ops = [Op(k) for k in attn]
        kind = "MHA_FC"
    for op in ops:
        op.layer = i
    _mark_parts(ops)
    return ops, kind


#: one RMSNorm run eagerly: to float32, x.pow(2), mean, + eps, rsqrt, x * rsqrt, to bf16, * weight
_HF_NORM = ("to_f32", "pow", "mean", "eps_add", "rsqrt", "mul_f32", "to_bf16", "mul_w")
#: rotary embedding of q or k: q * cos, rotate_half (neg of one half, cat), * sin, add
_HF_ROPE = ("mul_w", "neg", "cat", "mul_w", "rope_add")
#: Qwen3-MoE's sparse block through transformers' grouped-GEMM experts (softmax routing, top-k,
#: sort by expert, per-expert counts, two grouped GEMMs around the activation, weighted scatter)
_HF_MOE = ("router", "to_f32", "router_softmax", "topk", "sort", "to_bf16", "arange", "sort_long", "div", "gather", "index",
           "to_f32", "fill_int", "histogram", "scan_init", "scan", "compare", "clamp", "masked_fill", "grouped_prep",
           "grouped_gemm", "masked_fill", "silu", "act_mul", "grouped_prep", "grouped_gemm", "masked_fill", "mul_w",
           "arange", "index_put", "gather", "sum")


def _hf_eager_layer_ops(model: str, i: int, stage: str) -> tuple[list[Op], str]:
    """Ops of decoder layer ``i`` of a transformers model run eagerly (keys ``hf:<op>``)."""
    def ops(keys: Sequence[str], part: str) -> list[Op]:
        return [Op(f"hf:{k}", layer=i, part=part) for k in keys]

    qk_norm = _HF_NORM if model in ("qwen3", "qwen3_moe") else ()
    attention = (ops(("proj",), "attention") + ops(qk_norm, "attention") + ops(("kv_proj",), "attention")
                 + ops(qk_norm, "attention") + ops(("kv_proj",) + _HF_ROPE + _HF_ROPE + ("kv_cat", "kv_cat", "attn", "proj"),
                                                    "attention"))
    if model == "qwen3_moe":
        ffn, kind = ops(_HF_MOE, "mlp"), "MHA_MOE"
    else:
        down = ("down", "split_k") if stage == "decode" else ("down",)
        ffn, kind = ops(("up", "silu", "up", "act_mul") + down, "mlp"), "MHA_FC"
    return ops(_HF_NORM, "") + attention + ops(("residual",), "") + ops(_HF_NORM, "") + ffn + ops(("residual",), ""), kind


def _hf_eager_pass_ops(model: str, stage: str, layers: int, rng: random.Random, eager: bool) -> tuple[list[Op], list[str]]:
    """One forward pass of a transformers model run eagerly: the embedding, the causal positions
    and the rotary table (an fp32 GEMM of the inverse frequencies, cos and sin), the layers, the
    final norm, lm_head and the greedy pick. An eager pass stalls the host once in a while inside
    a layer (a first call after compilation, the allocator, the Python side): 1.5 to 2.5 ms,
    far longer than the launch gaps around it, and not a boundary between forward passes."""
    ops = [Op(f"hf:{k}") for k in ("embed", "arange", "to_f32", "rope_freqs", "cat", "cos", "mul_f32", "sin", "mul_f32",
                                    "to_bf16", "to_bf16")]
    kinds = []
    for i in range(layers):
        layer, kind = _hf_eager_layer_ops(model, i, stage)
        ops += layer
        kinds.append(kind)
    if eager and layers and rng.random() < 0.5:  # inside a layer, or on its first kernel
        ops[rng.choice([j for j, op in enumerate(ops) if op.layer is not None])].stall = rng.uniform(1500, 2500)
    ops += [Op(f"hf:{k}") for k in (*_HF_NORM, "lm_head", "argmax")]
    return ops, kinds


def _edge_stall(ops: list[Op], rng: random.Random) -> list[Op]:
    """Half the eager passes: the host stalls before one kernel of the pass's head (inputs,
    embedding, rotary table) or tail (final norm, lm_head, sampling), 1.5 to 2.5 ms, longer than
    it waits between passes (a first call, the allocator, the Python side). The kernel is still
    its pass's."""
    outside = [j for j, op in enumerate(ops) if op.layer is None and j > 0]
    if not outside or rng.random() < 0.5:
        return ops
    j = rng.choice(outside)
    return [*ops[:j], replace(ops[j], stall=rng.uniform(1500, 2500)), *ops[j + 1 :]]


def _vision_ops(i: int) -> list[Op]:
    """One ViT block: pre-LayerNorm attention (non-causal) and a GELU MLP, residual adds apart."""
    ops = [Op(k, layer=i, stack=1) for k in ("ln", "gemm", "vit_attn", "o_proj", "add", "ln", "gemm", "gelu", "gemm", "add")]
    _mark_parts(ops)
    return ops


def _mark_parts(ops: list[Op]) -> None:
    """Which submodule launches each op of a layer: the attention block runs from its first
    projection through the output projection (and its all-reduce); the MLP from the op after the
    post-attention norm to the end; the norms belong to the layer itself."""
    types = [KinetoWriter.kind(op.key)[0] for op in ops]
    att = [j for j, t in enumerate(types) if t == "ATTENTION"]
    begin = next(j for j, t in enumerate(types) if t not in ("NORM",))
    out = next(j for j in range(att[-1] + 1, len(ops)) if types[j] == "LINEAR")
    while out + 1 < len(ops) and types[out + 1] == "COMMUNICATION":
        out += 1
    for j in range(begin, out + 1):
        ops[j].part = "attention"
    mlp = out + 1 + (out + 1 < len(ops) and types[out + 1] == "NORM")
    end = len(ops) - (ops[-1].key == "add")  # a closing residual add is the layer's own
    for j in range(mlp, end):
        ops[j].part = "mlp"


def _pass_ops(model: str, vendor: str, tp: int, stage: str, layers: int, fused: bool = False) -> tuple[list[Op], list[str]]:
    """The ops of one pass and its layers' types; ``fused``: each all-reduce fused with the norm
    after it (``_fuse_allreduce``)."""
    ops, kinds = _unfused_pass_ops(model, vendor, tp, stage, layers)
    return (_fuse_allreduce(ops) if fused else ops), kinds


#: the norms an all-reduce fuses with (all-reduce + residual add + RMSNorm in one kernel)
_FUSES = {"norm", "add_norm", "final_norm"}


def _fuse_allreduce(ops: list[Op]) -> list[Op]:
    """TensorRT-LLM's and SGLang's all-reduce fusion: an all-reduce and the RMSNorm right after it
    run as one kernel, which belongs where the norm does. The all-reduce after a layer's MLP so
    becomes the next layer's input norm (the first layer's takes the embedding's), and the last
    layer's becomes the model's final norm: the layers' boundaries move by one kernel."""
    out: list[Op] = []
    for op in ops:
        if op.key in _FUSES and out and out[-1].key == "allreduce" and not out[-1].aux:
            out[-1] = Op("ar_norm", layer=op.layer, part=op.part, stack=op.stack)
        else:
            out.append(op)
    return out


def _unfused_pass_ops(model: str, vendor: str, tp: int, stage: str, layers: int) -> tuple[list[Op], list[str]]:
    ops = [Op("fill"), Op("positions")]
    if stage == "prefill":
        ops += [Op("kv_indices"), Op("fill")]
    ops += [Op("embed")] + ([Op("allreduce")] if tp > 1 else [])
    kinds = []
    vision = MODELS[model].vision if stage == "prefill" else 0
    if vision:  # the image's patches, the tower, and the merger into the text embeddings
        ops += [Op("patch_embed")]
        for i in range(vision):
            ops += _vision_ops(i)
            kinds.append("MHA_FC")
        ops += [Op("ln"), Op("gemm"), Op("gelu"), Op("gemm")]
    for i in range(layers):
        layer, kind = _layer_ops(model, vendor, i, tp, stage)
        ops += layer
        kinds.append(kind)
    ops += [Op("final_norm"), Op("gemm"), *([Op("allgather")] if tp > 1 else []), Op("to_float"), Op("softmax"), Op("argmax")]
    return ops, kinds


def _pass_mode(stage: str, graphs: str) -> str:
    """How a pass of ``stage`` launches under ``graphs``: "eager", "graph" (one replay) or "piecewise"."""
    if graphs == "none":
        return "eager"
    if stage == "prefill":
        return "piecewise" if graphs in ("piecewise", "full_and_piecewise") else "eager"
    return "piecewise" if graphs == "piecewise" else "graph"


def _launch_modes(ops: list[Op], mode: str) -> np.ndarray:
    """Per op: the graph piece that replays it (0, 1, ...), or -1 where it is launched eagerly.
    A graph captures the model's forward, embedding through the logits, as SGLang does (and
    transformers' compiled decode): the inputs' preparation before it and the sampling after it
    run eagerly. A piecewise pass captures the model, embedding through the final norm, in
    pieces split at each attention op, which runs eagerly between them (vLLM): the inputs before
    and the logits and sampling after run eagerly."""
    n = len(ops)
    if mode == "eager":
        return np.full(n, -1, np.int64)
    keys = [op.key for op in ops]
    first = keys.index("hf:embed" if "hf:embed" in keys else "embed")
    lm_head = max(j for j, op in enumerate(ops) if op.key in ("gemm", "hf:lm_head") and op.layer is None)
    out = np.full(n, -1, np.int64)
    if mode == "graph":  # the model's forward with its logits (SGLang's and a compiled transformers model's)
        out[first : min(j for j in range(lm_head, n) if keys[j] in _SAMPLING)] = 0
        return out
    last = lm_head - 1  # the pieces end at the final norm (vLLM's compiled model)
    piece, splitting = 0, False
    for j in range(first, last + 1):
        if keys[j] in _SPLITTING:
            splitting = True
            continue
        if splitting:
            piece, splitting = piece + 1, False
        out[j] = piece
    return out


# -- writing -------------------------------------------------------------------------------------
class KinetoWriter:
    """A Kineto trace being written: its events (ops, launches, kernels, flows, graph launches),
    the clocks of the host and the streams, and the truth rows; ``document()`` is the JSON."""

    def __init__(self, model: str, vendor: str, tp: int, seed: int, modules: str):
        self.model, self.vendor, self.tp, self.modules = model, vendor, tp, modules
        self.rng = random.Random(seed)
        self.names = _NAMES[vendor]
        self.events: list[dict] = []
        self.kernels: list[dict] = []  # truth rows
        self.gpu = 4909914679597053  # ns, like a real trace's clock
        self.aux = self.gpu
        self.cpu = self.gpu - 2_000_000
        self.correlation = 92000 + self.rng.randrange(1000)
        self.external = 219000 + self.rng.randrange(1000)
        self.python_id = 1_095_000
        self.device = self.rng.randrange(8) if tp > 1 else 0
        self.pid = 251 + self.rng.randrange(4000)
        self.main_stream, self.aux_stream = (3, 4) if vendor == "rocm" else (7, 23)
        self.memops = 0

    def name(self, key: str, stage: str) -> str:
        n = HF_EAGER_CUDA[key[3:]] if key.startswith("hf:") else self.names.get(key) or self.names[_BASE[key]]
        return n if isinstance(n, str) else n[0 if stage == "prefill" else 1]

    @staticmethod
    def kind(key: str):
        if key.startswith("hf:"):
            return _HF_KIND[key[3:]]
        return _KIND[key] if key in _KIND else _KIND[_BASE[key]]

    def geometry(self, grid_kind: str, tokens: int, prefill: bool) -> tuple[list[int], list[int]]:
        rng = self.rng
        if grid_kind == "gemm":
            return [rng.choice((56, 112, 132)) * (max(1, tokens // 128) if prefill else 1), 1, 1], [256, 1, 1]
        if grid_kind == "attn":
            return ([max(1, tokens // 128), 32, 1], [128, 1, 1]) if prefill else ([tokens, 8, 16], [256, 1, 1])
        if grid_kind == "rows":
            return [tokens, 1, 1], [256 if self.vendor == "rocm" else 128, 1, 1]
        if grid_kind == "ew":
            return [max(1, tokens * 7168 // 2048), 1, 1], [128, 1, 1]
        if grid_kind == "comm":
            return [self.tp * (4 if prefill else 2), 1, 1], [512, 1, 1]
        return [1, 1, 1], [512 if self.vendor == "cuda" else 256, 1, 1]

    def ns(self, us: float) -> int:
        return int(round(us * 1000))

    def kernel_event(self, name: str, start: int, dur: int, stream: int, corr: int, ext: int | None,
                     grid: list[int], block: list[int]) -> dict:
        args: dict[str, object] = {"External id": ext} if ext is not None else {}
        args.update({"device": self.device, "stream": stream, "correlation": corr})
        if self.vendor == "cuda":
            args.update({"registers per thread": 128 if grid[0] > 64 else 64, "shared memory": 0, "grid": grid, "block": block})
        else:
            args.update({"kind": "Dispatch Kernel", "grid": grid, "block": block})
        return {"ph": "X", "cat": "kernel", "name": name, "pid": self.device, "tid": stream,
                "ts": start / 1000, "dur": dur / 1000, "args": args}

    def flow(self, corr: int, launch_ts: int, kernel_ts: int, stream: int) -> None:
        self.events.append({"ph": "s", "id": corr, "pid": self.pid, "tid": self.pid, "ts": launch_ts / 1000, "cat": "ac2g", "name": "ac2g"})
        self.events.append({"ph": "f", "id": corr, "pid": self.device, "tid": stream, "ts": kernel_ts / 1000, "cat": "ac2g", "name": "ac2g", "bp": "e"})

    def place(self, op: Op, dur: int) -> tuple[int, int]:
        """Start on the op's stream (ns) and the stream id."""
        gap = self.ns(self.rng.uniform(0.8, 2.5))
        if op.aux:
            start = max(self.aux, self.fork) + gap
            self.aux = start + dur
            return start, self.aux_stream
        start = self.gpu + gap
        self.gpu = start + dur
        return start, self.main_stream

    def write_pass(self, index: int, stage: str, ops: list[Op], kinds: list[str], graphs: str = "full") -> dict:
        prefill = stage == "prefill"
        rng = self.rng
        tokens = rng.choice((512, 1024, 2048)) if prefill else rng.choice((1, 4, 8))
        self.gpu = max(self.gpu, self.cpu) + self.ns(rng.uniform(50, 200))
        self.aux = self.gpu
        self.fork = self.gpu
        first_row = len(self.kernels)
        piece = _launch_modes(ops, _pass_mode(stage, graphs))
        if prefill:  # the host-to-device copy of the batch's inputs
            self.memcpy(tokens)
        graph_corr: dict[int, int] = {}
        first_ts: dict[int, int] = {}
        launched: dict[int, int] = {}
        cpu_span: list[tuple[int, int] | None] = [None] * len(ops)  # host time of each eager op
        vision = len({op.layer for op in ops if op.stack == 1})
        for j, op in enumerate(ops):
            ktype, cpu_name, grid_kind, base = self.kind(op.key)
            name = self.name(op.key, stage)
            scale = (1.0 + tokens / 256) if prefill and grid_kind in ("gemm", "attn", "comm") else 1.0
            dur = self.ns(base * scale * rng.uniform(0.85, 1.2))
            grid, block = self.geometry(grid_kind, tokens, prefill)
            if not op.aux:
                self.fork = self.gpu
            if op.key == "hf:attn":  # SDPA's query, key and value: (batch, heads, tokens, head dim)
                batch, asked = (4, tokens // 4) if prefill else (tokens, 1)
                cached = asked if prefill else 512 + index
                op.dims = [[batch, 32, asked, 128], [batch, 8, cached, 128], [batch, 8, cached, 128]]
            if piece[j] < 0:
                start, stream, corr, ext, cpu_span[j] = self.eager(op, name, cpu_name, dur)
            else:
                if piece[j] not in graph_corr:  # the host launches the next piece
                    graph_corr[piece[j]] = self.graph_launch()
                    launched[piece[j]] = self._graph_launched
                corr, ext = graph_corr[piece[j]], None
                start, stream = self.place(op, dur)
                first_ts.setdefault(piece[j], start)
            self.events.append(self.kernel_event(name, start, dur, stream, corr, ext, grid, block))
            # layers are numbered in the order they run in the pass (a vision tower's first), and within their stack
            ordinal = None if op.layer is None else op.layer + (vision if op.stack == 0 else 0)
            self.kernels.append({"correlation": corr, "start": start, "name": name, "op": op.key, "stream": stream,
                                 "pass": index, "stage": stage, "layer": ordinal, "stack": None if op.layer is None else op.stack,
                                 "stack_layer": op.layer, "layer_type": None if ordinal is None else kinds[ordinal],
                                 "kernel_type": ktype})
        for q, corr in graph_corr.items():  # each graph launch's flow to its first kernel
            self.flow(corr, launched[q], first_ts[q], self.main_stream)
        if _pass_mode(stage, graphs) == "eager":  # a compiled (piecewise) model calls no module's forward
            self.module_spans(ops, cpu_span)
        end = max(self.gpu, self.aux)
        self.gpu = self.aux = end
        self.cpu = max(self.cpu, end) + self.ns(rng.uniform(100, 300))  # the host waits for the step's result
        corrs = list(graph_corr.values())
        return {"index": index, "stage": stage, "tokens": tokens, "kernels": len(self.kernels) - first_row,
                "layers": len(kinds), "stacks": [len(kinds) - vision] + ([vision] if vision else []),
                "graph_correlation": corrs[0] if len(corrs) == 1 else None,
                "graph_correlations": corrs, "start": self.kernels[first_row]["start"], "end": end}

    def eager(self, op: Op, name: str, cpu_name: str, dur: int, tid: int | None = None) -> tuple[int, int, int, int, tuple[int, int]]:
        """One eagerly launched kernel: its CPU op, the runtime launch inside it (on thread
        ``tid``, the main thread by default), the flow to the kernel, and the kernel's place on
        its stream. Returns its start, stream, correlation, External id and the op's host span."""
        rng, tid = self.rng, self.pid if tid is None else tid
        corr, ext = self.next_corr(), self.next_ext()
        self.cpu += self.ns(op.stall)
        op_ts = self.cpu
        launch_ts = op_ts + self.ns(rng.uniform(1.5, 4))
        launch_dur = self.ns(rng.uniform(3, 7))
        if op.aux:
            self.aux = max(self.aux, launch_ts + launch_dur)
        else:
            self.gpu = max(self.gpu, launch_ts + launch_dur)
        start, stream = self.place(op, dur)
        self.cpu = launch_ts + launch_dur + self.ns(rng.uniform(1, 3))
        self.events.append({"ph": "X", "cat": "cpu_op", "name": cpu_name, "pid": self.pid, "tid": tid,
                            "ts": op_ts / 1000, "dur": (self.cpu - op_ts) / 1000,
                            "args": {"External id": ext, "Record function id": 0, "Sequence number": ext - 200000, "Ev Idx": ext,
                                     **({"Input Dims": op.dims} if op.dims else {})}})
        launch = self.launch_event(name, launch_ts, launch_dur, corr, ext)
        launch["tid"] = tid
        self.events.append(launch)
        self.flow(corr, launch_ts, start, stream)
        span = (op_ts, self.cpu)
        self.cpu += self.ns(rng.uniform(2, 6))
        return start, stream, corr, ext, span

    def module_spans(self, ops: list[Op], cpu_span: Sequence[tuple[int, int] | None]) -> None:
        """``nn.Module`` spans around the eager ops: only the decoder layers (``modules="layers"``),
        or the whole tree (the model, its layers, their attention and MLP blocks, norms and
        linears) for ``"tree"``. A graph replay runs without Python, so it has none."""
        if self.modules == "none" or not any(cpu_span):
            return
        model = MODELS[self.model]
        groups: dict[tuple, list[int]] = {}
        counters: dict[str, int] = {}
        for j, (op, when) in enumerate(zip(ops, cpu_span)):
            if when is None or op.layer is None:
                continue
            tree = model.stack_tree(op.stack)
            cls = tree.layer if self.modules == "tree" else (f"{model.cls}DecoderLayer" if op.stack == 0 else tree.layer)
            groups.setdefault((cls, op.layer), []).append(j)
            if self.modules == "tree":
                if op.part:
                    groups.setdefault((tree.attention if op.part == "attention" else tree.mlp, op.layer), []).append(j)
                ktype = self.kind(op.key)[0]
                leaf = tree.linear if ktype == "LINEAR" else tree.norm if ktype == "NORM" else None
                if leaf is not None:
                    n = counters[leaf] = counters.get(leaf, -1) + 1
                    groups[(leaf, n + 1000 * op.stack)] = [j]
        if self.modules == "tree":  # the stacks' parents, and the whole model
            for stack in (0, 1):
                inside = [j for j, op in enumerate(ops) if cpu_span[j] and op.layer is not None and op.stack == stack]
                if inside and (parent := model.stack_tree(stack).model):
                    groups[(parent, 0)] = inside
            eager = [j for j in range(len(ops)) if cpu_span[j]]
            groups[(model.tree.top, 0)] = eager
        trees = [t for t in (model.tree, model.vision_tree) if t is not None]
        depth = {c: d for t in trees for d, c in enumerate((t.top, t.model, t.layer, t.attention, t.linear)) if c}
        depth.update({t.mlp: 3 for t in trees} | {t.norm: 4 for t in trees} | {f"{model.cls}DecoderLayer": 2})
        for (cls, n), js in groups.items():
            first, last = cpu_span[js[0]], cpu_span[js[-1]]
            assert first is not None and last is not None  # only eager ops are grouped
            t0, t1 = first[0], last[1]
            pad = 500 - 100 * depth[cls]  # an enclosing module's span starts before and ends after its children's
            self.python_id += 1
            self.events.append({"ph": "X", "cat": "python_function", "name": f"nn.Module: {cls}_{n}",
                                "pid": self.pid, "tid": self.pid, "ts": (t0 - pad) / 1000, "dur": (t1 - t0 + 2 * pad) / 1000,
                                "args": {"Python parent id": 1_000_000, "Python id": self.python_id, "Python module id": 0}})

    def graph_launch(self) -> int:
        """A ``CUDAGraph::replay`` op and its ``cudaGraphLaunch``; the launch's correlation, which
        every kernel of the replay shares."""
        corr, ext = self.next_corr(), self.next_ext()
        launch = self.cpu + self.ns(8)
        self.events.append({"ph": "X", "cat": "cpu_op", "name": "CUDAGraph::replay" if self.vendor == "cuda" else "HIPGraph::replay",
                            "pid": self.pid, "tid": self.pid, "ts": self.cpu / 1000, "dur": 40.0,
                            "args": {"External id": ext, "Record function id": 0, "Ev Idx": ext}})
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch" if self.vendor == "cuda" else "hipGraphLaunch",
                            "pid": self.pid, "tid": self.pid, "ts": launch / 1000, "dur": 25.0,
                            "args": {"External id": ext, ("cbid" if self.vendor == "cuda" else "cid"): 311 if self.vendor == "cuda" else 215,
                                     "correlation": corr}})
        self.gpu = max(self.gpu, launch + self.ns(6))
        self.fork = self.gpu
        self._graph_launched = launch
        self.cpu = launch + self.ns(30)
        return corr

    def launch_event(self, name: str, ts: int, dur: int, corr: int, ext: int) -> dict:
        cat = "cuda_runtime"
        if self.vendor == "cuda":
            api, id_key, cid = "cudaLaunchKernel", "cbid", 211
            if name in _TRITON:
                cat, api, cid = "cuda_driver", "cuLaunchKernel", 307
            elif name.startswith("nvjet"):
                cat, api, cid = "cuda_driver", "cuLaunchKernelEx", 652
        else:
            api, id_key, cid = "hipLaunchKernel", "cid", 200
            if name.startswith(("Cijk_", "_ZN5aiter")) or name in _TRITON:
                api, cid = "hipExtModuleLaunchKernel", 202
        args: dict[str, object] = {"External id": ext, id_key: cid, "correlation": corr}
        if self.vendor == "rocm":
            args["kernel"] = name
        return {"ph": "X", "cat": cat, "name": api, "pid": self.pid, "tid": self.pid, "ts": ts / 1000, "dur": dur / 1000, "args": args}

    def memcpy(self, tokens: int) -> None:
        corr, ext = self.next_corr(), self.next_ext()
        api = "cudaMemcpyAsync" if self.vendor == "cuda" else "hipMemcpyAsync"
        launch = self.cpu + self.ns(2)
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": api, "pid": self.pid, "tid": self.pid,
                            "ts": launch / 1000, "dur": 6.0, "args": {"External id": ext, "correlation": corr}})
        start = max(self.gpu, launch + self.ns(7))
        dur = self.ns(2 + tokens / 512)
        self.events.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": self.device,
                            "tid": self.main_stream, "ts": start / 1000, "dur": dur / 1000,
                            "args": {"External id": ext, "device": self.device, "stream": self.main_stream,
                                     "correlation": corr, "bytes": tokens * 8, "memory bandwidth (GB/s)": 4.2}})
        self.flow(corr, launch, start, self.main_stream)
        self.gpu = start + dur
        self.cpu = launch + self.ns(8)
        self.memops += 1

    def next_corr(self) -> int:
        self.correlation += 1 + (self.rng.random() < 0.2)
        return self.correlation

    def next_ext(self) -> int:
        self.external += 1
        return self.external

    def document(self) -> dict:
        cuda = self.vendor == "cuda"
        prop = ({"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85029158912, "computeMajor": 9, "computeMinor": 0,
                 "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, "warpSize": 32,
                 "sharedMemPerBlock": 49152, "numSms": 132}
                if cuda else
                {"id": 0, "name": "AMD Instinct MI300X", "totalGlobalMem": 206141652992, "computeMajor": 9, "computeMinor": 4,
                 "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 131072, "warpSize": 64,
                 "sharedMemPerBlock": 65536, "numSms": 304})
        props = [dict(prop, id=i) for i in range(max(self.tp, self.device + 1))]
        meta = [{"ph": "M", "name": "process_name", "pid": self.pid, "tid": 0, "args": {"name": "python"}},
                {"ph": "M", "name": "process_name", "pid": self.device, "tid": 0, "args": {"name": f"GPU {self.device}"}},
                {"ph": "M", "name": "thread_name", "pid": self.device, "tid": self.main_stream, "args": {"name": f"stream {self.main_stream}"}}]
        events = sorted(self.events, key=lambda e: (e["pid"] != self.pid, e["ts"]))
        doc = {"schemaVersion": 1, "deviceProperties": props}
        if self.tp > 1:
            doc["distributedInfo"] = {"backend": "nccl", "rank": self.device, "world_size": self.tp}
        doc.update({"record_shapes": 0, "with_stack": 0, "with_modules": int(self.modules != "none")})
        doc.update({"cuda_runtime_version": 12080, "cuda_driver_version": 12080} if cuda
                   else {"roctracer_version": 4, "hip_runtime_version": 60443483, "hip_driver_version": 60443483})
        doc["traceEvents"] = meta + events + [{"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "",
                                               "ts": (max(self.gpu, self.cpu) + 1000) / 1000}]
        doc.update({"displayTimeUnit": "ms", "baseTimeNanoseconds": 1759000000000000000, "traceName": ""})
        return doc


def generate(path: str | os.PathLike, *, model: str, vendor: str = "cuda", tp: int = 1, prefill: int = 1, decode: int = 2,
             layers: int | None = None, seed: int = 0, ground_truth_spans: bool = False, modules: str | None = None,
             graphs: str = "full", fused_allreduce: bool = False, kineto: str = "today", style: str = "engine",
             requests: int = 1) -> dict:
    """Write a synthetic Kineto trace to ``path`` (gzip when it ends in ``.gz``), atomically, and its
    ground truth to ``<stem>_truth.json``; return the truth. ``modules``: "none", "layers" (the
    decoder layers' spans; what ``ground_truth_spans`` asks for) or "tree" (every module's);
    ``graphs``: one of ``GRAPHS``; ``fused_allreduce``: each all-reduce fused with the RMSNorm
    after it (tp > 1); ``kineto``: the generation whose names the trace uses (``GENERATIONS``);
    ``style``: a serving engine's fused kernels or a transformers model run eagerly (``STYLES``);
    ``requests``: the prefill and decode passes run this many times over, one request after the
    other (a prefill between decode steps)."""
    if kineto not in GENERATIONS:
        raise ValueError(f"kineto must be one of {', '.join(GENERATIONS)}, not {kineto!r}")
    if model not in MODELS:
        raise ValueError(f"model must be one of {', '.join(MODELS)}, not {model!r}")
    if vendor not in VENDORS:
        raise ValueError(f"vendor must be one of {', '.join(VENDORS)}, not {vendor!r}")
    if tp not in (1, 2, 4, 8):
        raise ValueError(f"tp must be 1, 2, 4 or 8, not {tp!r}")
    if requests < 1:
        raise ValueError("requests must be >= 1")
    if prefill < 0 or decode < 0 or prefill + decode == 0:
        raise ValueError("prefill and decode must be >= 0, and at least one pass is needed")
    modules = modules or ("layers" if ground_truth_spans else "none")
    if modules not in MODULES:
        raise ValueError(f"modules must be one of {', '.join(MODULES)}, not {modules!r}")
    if graphs not in GRAPHS:
        raise ValueError(f"graphs must be one of {', '.join(GRAPHS)}, not {graphs!r}")
    if style not in STYLES:
        raise ValueError(f"style must be one of {', '.join(STYLES)}, not {style!r}")
    if style == "hf_eager" and (model not in HF_EAGER_MODELS or vendor != "cuda" or tp != 1 or graphs not in HF_EAGER_GRAPHS):
        raise ValueError(f"style hf_eager (kernel names from an H100 capture) has models {', '.join(HF_EAGER_MODELS)}, "
                         f"vendor cuda, tp 1 and graphs {' or '.join(HF_EAGER_GRAPHS)}")
    depth = MODELS[model].layers if layers is None else layers
    if depth < 1:
        raise ValueError("layers must be >= 1")
    t0 = time.perf_counter()
    w = KinetoWriter(model, vendor, tp, seed, modules)
    edges = random.Random(f"edges {seed}")  # apart from the writer's draws, which earlier traces keep
    passes = []
    for index in range((prefill + decode) * requests):
        stage = "prefill" if index % (prefill + decode) < prefill else "decode"
        if style == "hf_eager":
            ops, kinds = _hf_eager_pass_ops(model, stage, depth, w.rng, _pass_mode(stage, graphs) == "eager")
        else:
            ops, kinds = _pass_ops(model, vendor, tp, stage, depth, fused_allreduce and tp > 1)
        if _pass_mode(stage, graphs) == "eager":
            ops = _edge_stall(ops, edges)
        passes.append(w.write_pass(index, stage, ops, kinds, graphs))
    data = orjson.dumps(as_generation(w.document(), kineto))
    path = Path(path)
    output_dir(path.parent)
    size = write_atomic(path, data)  # gzipped there when the name ends in .gz
    kernels = sorted(w.kernels, key=lambda k: (k["start"], k["stream"]))
    m = MODELS[model]
    truth = {
        "path": str(path), "model": model, "vendor": vendor, "tp": tp, "seed": seed, "spans": modules != "none",
        "modules": modules, "graphs": graphs, "fused_allreduce": fused_allreduce and tp > 1, "kineto": kineto, "style": style,
        "layer_class": f"{m.cls}DecoderLayer" if modules == "layers" else m.tree.layer,
        # each stack's layer class and its layers in a pass that runs it (the vision tower: prefill only)
        "stacks": [{"class": m.tree.layer, "layers": depth}] + ([{"class": m.stack_tree(1).layer, "layers": m.vision}] if m.vision else []),
        "totals": {
            "kernels": len(kernels), "passes": len(passes), "prefill_passes": prefill * requests, "decode_passes": decode * requests,
            "layers_per_pass": depth, "layers": sum(p["layers"] for p in passes),
            # grok2's dual-residual norm fires twice per block: what a norm-boundary detector counts
            "half_layers_per_pass": 2 * depth if model == "grok2" else depth,
            "graph_replays": sum(len(p["graph_correlations"]) for p in passes), "memops": w.memops,
        },
        "passes": passes,
        "bytes": size,
        "seconds": round(time.perf_counter() - t0, 3),
        "kernels": kernels,
    }
    if (beside := truth_path(path)) is not None:
        write_atomic(beside, json.dumps(truth, indent=None, separators=(",", ":")) + "\n")
    return truth


#: Kineto generations: today's category names; 2020-21's (``Kernel``, ``Memcpy``, ``Memset``,
#: ``Runtime``, ``Operator``, whole-microsecond times); ROCm's runtime category (``hip_runtime``)
GENERATIONS = ("today", "2021", "rocm-runtime")
_GENERATION_NAMES = {
    "2021": {"kernel": "Kernel", "gpu_memcpy": "Memcpy", "gpu_memset": "Memset", "cuda_runtime": "Runtime", "cpu_op": "Operator"},
    "rocm-runtime": {"cuda_runtime": "hip_runtime"},
}


def as_generation(doc: dict, generation: str) -> dict:
    """A trace document as an earlier Kineto generation (or ROCm's) wrote it: its category names
    and, for 2021, timestamps in whole microseconds."""
    names = _GENERATION_NAMES.get(generation)
    if not names:
        return doc
    for e in doc["traceEvents"]:
        if e.get("cat") in names:
            e["cat"] = names[e["cat"]]
        if generation == "2021":
            for key in ("ts", "dur"):
                if isinstance(e.get(key), float):
                    e[key] = int(e[key])
    return doc


def truth_path(path: str | os.PathLike) -> Path | None:
    """``<stem>_truth.json`` beside a trace; None for a trace written to stdout or a device."""
    stem = Path(path).name
    for suffix in (".gz", ".json"):
        stem = stem.removesuffix(suffix)
    return companion(path, stem + "_truth.json")
