"""Export a tiny random-weight Hugging Face causal LM to an AutoDeploy-style graph dump.

``layerc export-hf --arch llama OUTDIR`` builds a small model from a config (no
download, ``torch.manual_seed(0)``, CPU, float32), runs ``torch.export.export``
on it and writes, into OUTDIR:

``001_export_export_to_gm.txt``
    The graph in TensorRT-LLM AutoDeploy's graph-dump (v3) format, the file
    AutoDeploy writes after its ``export_to_gm`` transform when
    ``AD_DUMP_GRAPHS_DIR`` is set.
``fx_graph.txt``
    ``str(gm.graph)``: torch.fx's own print of the same GraphModule.
``layers.json``
    Ground truth for layer attribution: the decoder layer each node belongs
    to (from ``node.meta["nn_module_stack"]``, or from the qualified parameter
    name for ``get_attr`` nodes), plus the qualified target of every
    ``get_attr`` node.

The export mirrors what AutoDeploy's ``torch_export_to_gm`` does to a model
before it dumps the graph: ``torch.autocast`` is a no-op while tracing (so the
rotary embedding is not wrapped in an autocast higher-order op), the unlifted
GraphModule from ``ep.module()`` is used (parameters and buffers are
``get_attr`` nodes), tied parameters are deduplicated, and unused
shape/metadata assertions are removed.

torch and transformers are imported lazily: this module imports without them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import time
from pathlib import Path
from typing import IO, Any

from layerc.backends.outputs import atomic_open, atomic_path, write_atomic
from layerc.ir.diagnostics import LayercError

DUMP_FILENAME = "001_export_export_to_gm.txt"
FX_FILENAME = "fx_graph.txt"
LAYERS_FILENAME = "layers.json"

TRANSFORM_NAME = "export_to_gm"
STAGE = "export"

BATCH = 2
SEQ_LEN = 8

# --------------------------------------------------------------------------
# Tiny configs
# --------------------------------------------------------------------------

# Shared by every arch: hidden 64, intermediate 128, 4 heads, 2 KV heads, vocab 128.
_BASE: dict[str, Any] = {
    "vocab_size": 128,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "use_cache": False,
    "tie_word_embeddings": False,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}

# MoE shapes: 8 experts of width 32, top-2 routing.
_MOE: dict[str, Any] = {"moe_intermediate_size": 32, "num_experts_per_tok": 2}

# DeepSeek-style MLA + grouped top-k routing; layer 0 dense (first_k_dense_replace=1).
_DEEPSEEK: dict[str, Any] = {
    **_MOE,
    "num_key_value_heads": 4,
    "q_lora_rank": 32,
    "kv_lora_rank": 16,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 16,
    "v_head_dim": 16,
    "n_routed_experts": 8,
    "n_shared_experts": 1,
    "n_group": 2,
    "topk_group": 1,
    "first_k_dense_replace": 1,
    "routed_scaling_factor": 1.0,
    "norm_topk_prob": True,
}

class PerLayer:
    """A config value that depends on the number of decoder layers (a per-layer pattern)."""

    def __init__(self, make, text: str) -> None:
        self.make, self.text = make, text

    def __call__(self, layers: int) -> Any:
        return self.make(layers)

    def __repr__(self) -> str:
        return self.text


def cycle(*kinds: Any) -> PerLayer:
    """``kinds`` repeated and cut to the layer count: ``cycle("mamba", "attention")`` is
    ``["mamba", "attention", "mamba"]`` for 3 layers (put every kind in the first layers)."""
    return PerLayer(lambda n: [kinds[i % len(kinds)] for i in range(n)], f"cycle{kinds!r}")


#: the layer count itself, where a config keeps it under another name or in a sub-config
LAYERS = PerLayer(lambda n: n, "layers")

#: an override that removes a key of _BASE (a config that refuses it)
DROP = object()

# arch (config model_type) -> overrides on top of _BASE (a model type not listed gets _BASE
# alone). These first entries are ARCHES, the tested set: each exports with torch 2.13 /
# transformers 5.x (checked by tests/backends/synth/test_export_hf.py); the rest are added below.
ARCH_CONFIGS: dict[str, dict[str, Any]] = {
    # dense decoders
    "llama": {},
    "mistral": {"sliding_window": None},
    "qwen2": {},
    "qwen3": {"head_dim": 16},
    "phi": {},
    "phi3": {},
    "gemma": {"head_dim": 16},
    "gemma2": {"head_dim": 16, "sliding_window": 4, "query_pre_attn_scalar": 16},
    "gemma3_text": {"head_dim": 16, "sliding_window": 4, "query_pre_attn_scalar": 16},
    "olmo": {},
    "olmo2": {},
    "olmo3": {"sliding_window": 4},
    "granite": {},
    "starcoder2": {"sliding_window": None},
    "glm": {"head_dim": 16},
    "glm4": {"head_dim": 16},
    "cohere": {},
    "cohere2": {"sliding_window": 4},
    "smollm3": {},
    "helium": {"head_dim": 16},
    "ministral": {"head_dim": 16},
    "internlm3": {},
    "exaone4": {"sliding_window": 4},
    "seed_oss": {"head_dim": 16},
    "nemotron": {},
    "stablelm": {},
    "gpt_neox": {},
    "falcon": {},
    # mixture of experts
    "mixtral": {"num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": None},
    "phimoe": {"num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": None},
    "qwen2_moe": {
        **_MOE,
        "shared_expert_intermediate_size": 64,
        "num_experts": 8,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
    },
    "qwen3_moe": {
        **_MOE,
        "head_dim": 16,
        "num_experts": 8,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "norm_topk_prob": True,
    },
    "olmoe": {"num_experts": 8, "num_experts_per_tok": 2},
    "granitemoe": {"num_local_experts": 4, "num_experts_per_tok": 2},
    "granitemoeshared": {
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "shared_intermediate_size": 64,
    },
    "deepseek_v2": dict(_DEEPSEEK),
    "deepseek_v3": dict(_DEEPSEEK),
    "dots1": {
        **_MOE,
        "n_routed_experts": 8,
        "n_shared_experts": 1,
        "n_group": 2,
        "topk_group": 1,
        "first_k_dense_replace": 1,
    },
    "glm4_moe": {
        **_MOE,
        "head_dim": 16,
        "n_routed_experts": 8,
        "n_shared_experts": 1,
        "n_group": 2,
        "topk_group": 1,
        "first_k_dense_replace": 1,
    },
    "ernie4_5_moe": {"moe_intermediate_size": 32, "moe_num_experts": 8, "moe_k": 2, "moe_layer_start_index": 1},
    "hunyuan_v1_moe": {"head_dim": 16, "num_experts": 4, "moe_topk": 2},
    "minimax": {"head_dim": 16, "num_local_experts": 4, "num_experts_per_tok": 2},
    # max_position_embeddings at its default, or YaRN warns about its factor
    "gpt_oss": {
        "head_dim": 16,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "sliding_window": 4,
        "max_position_embeddings": 131072,
    },
    "llama4_text": {
        "head_dim": 16,
        "intermediate_size_mlp": 128,
        "num_local_experts": 4,
        "num_experts_per_tok": 1,
    },
}

ARCHES: tuple[str, ...] = tuple(ARCH_CONFIGS)

# Multi-head latent attention dims alone (no MoE in them).
_MLA: dict[str, Any] = {
    k: _DEEPSEEK[k]
    for k in ("num_key_value_heads", "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
}
# 8 routed experts of width 32, top-2, in the DeepSeek names.
_ROUTED: dict[str, Any] = {**_MOE, "n_routed_experts": 8, "n_group": 2, "topk_group": 1}
# A sparse-attention indexer (DeepSeek-V3.2 style) sized for 8 tokens.
_INDEXER: dict[str, Any] = {"index_head_dim": 16, "index_n_heads": 2, "index_topk": 4}
# Qwen3-Next style gated delta net dims, the pattern linear then full attention.
_GATED_DELTA: dict[str, Any] = {
    "head_dim": 16,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "layer_types": cycle("linear_attention", "full_attention"),
}
# Mamba-2 mixers: heads x head dim = expand (2) x hidden (64).
_MAMBA2: dict[str, Any] = {"mamba_n_heads": 8, "mamba_d_head": 16, "mamba_d_state": 16, "mamba_chunk_size": 8}

_EXPERT_LOOP = ("its experts loop in Python over nonzero() (no experts_implementation to pick): torch.export "
                "stops at a data-dependent guard (GuardOnDataDependentSymNode)")

#: causal-LM model types of transformers that export-hf does not export, and why
NOT_EXPORTED: dict[str, str] = {
    **{wrapper: f"multimodal wrapper: its text model is {text}" for wrapper, text in {
        "gemma3": "gemma3_text", "gemma3n": "gemma3n_text", "gemma4": "gemma4_text",
        "gemma4_unified": "gemma4_unified_text", "llama4": "llama4_text", "qwen3_5": "qwen3_5_text",
        "qwen3_5_moe": "qwen3_5_moe_text", "qwen4_exp": "qwen4_exp_text", "dots3_note": "dots3_note_text",
        "got_ocr2": "qwen2", "moss_transcribe_diarize": "qwen3"}.items()},
    **{drafter: "speculative-decoding drafter: its forward needs the target model's embeddings and shared KV "
                "states (inputs_embeds, shared_kv_states), not token ids"
       for drafter in ("gemma4_assistant", "gemma4_unified_assistant")},
    "dbrx": _EXPERT_LOOP,
    "longcat_flash": _EXPERT_LOOP,
}


def _gpt_neo_attention(layers: int) -> list:
    pairs = [[["global", "local"], layers // 2]] if layers > 1 else []
    return pairs + ([[["global"], 1]] if layers % 2 else [])


# The other decoder-only causal LMs of transformers, untested here but measured by
# `layerc fidelity` (ARCHES above stay the tested set). Hybrids list every layer kind in their
# first 2-3 layers; MoE models get 4-8 experts.
ARCH_CONFIGS.update({
    # dense decoders whose default head is wider than hidden / heads
    **{arch: {"head_dim": 16} for arch in ("ernie4_5", "internlm3", "iquestcoder", "hunyuan_v1_dense", "ministral3")},
    "hrm_text": {"head_dim": 16, "H_cycles": 1, "L_cycles": 1},
    "cwm": {"head_dim": 16, "sliding_window": 4},
    "vaultgemma": {"head_dim": 16, "query_pre_attn_scalar": 16, "sliding_window": 4},
    "dory": {"head_dim": 16, "sliding_window": 4, "layer_types": cycle("sliding_attention", "full_attention")},
    "modernbert-decoder": {"sliding_window": 4},
    # rotary on the sliding layers only (NoPE full attention)
    "cohere_compass_text": {"sliding_window": 4, "layer_types": cycle("sliding_attention", "full_attention"),
                            "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                                "full_attention": None}},
    # its sliding layers have MLA dims of their own (swa_*)
    "dots3_note_text": {**_MLA, **_ROUTED, **_INDEXER, "n_group": 1, "shared_experts_intermediate_size": 32,
                        "sliding_window": 4, "layer_types": cycle("indexed_attention", "sliding_attention"),
                        **{f"swa_{k}": v for k, v in _MLA.items() if k != "qk_rope_head_dim"},
                        "swa_num_attention_heads": 4, "swa_head_dim": 24},
    "gpt_neo": {"attention_types": PerLayer(_gpt_neo_attention, "global/local pairs"), "window_size": 4},
    # rotary_dim defaults to 64, wider than a head of 16
    "gptj": {"rotary_dim": 8},
    "codegen": {"rotary_dim": 8},
    "xlstm": {"num_heads": 4},
    "cpmant": {"dim_ff": 128},
    "opt": {"ffn_dim": 128},
    "xglm": {"ffn_dim": 128},
    "trocr": {"decoder_ffn_dim": 128},
    # tiny image (and audio) towers: unused on token ids, but built
    "git": {"vision_config": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                              "num_attention_heads": 2, "image_size": 32, "patch_size": 16}},
    "phi4_multimodal": {
        "vision_config": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
                          "image_size": 28, "crop_size": 28},
        "audio_config": {"hidden_size": 32, "intermediate_size": 64, "num_blocks": 1, "num_attention_heads": 2,
                         "ext_pw_out_channel": 32, "depthwise_separable_out_channel": 32, "nemo_conv_channels": 32},
    },
    "moshi": {"ffn_dim": 256},
    "xlnet": {"max_position_embeddings": DROP, "d_head": 16, "d_inner": 128},
    "gemma3n_text": {
        "head_dim": 16,
        "sliding_window": 4,
        "layer_types": cycle("sliding_attention", "full_attention"),
        "intermediate_size": 128,
        "vocab_size_per_layer_input": 128,
        "hidden_size_per_layer_input": 16,
        "laurel_rank": 8,
        "num_kv_shared_layers": 0,
        "altup_num_inputs": 2,
    },
    "gemma4_text": {
        "head_dim": 16,
        "sliding_window": 4,
        "layer_types": cycle("sliding_attention", "full_attention"),
        "vocab_size_per_layer_input": 128,
        "hidden_size_per_layer_input": 16,
        "enable_moe_block": True,
        "num_experts": 4,
        "top_k_experts": 2,
        "moe_intermediate_size": 32,
    },
    "gemma4_unified_text": {"head_dim": 16, "sliding_window": 4,
                            "layer_types": cycle("sliding_attention", "full_attention")},
    # mixture of experts
    "afmoe": {**_MOE, "head_dim": 16, "num_experts": 8, "num_shared_experts": 1, "sliding_window": 4,
              "global_attn_every_n_layers": 2},
    "beam": {**_MOE, "head_dim": 16, "num_experts": 8, "n_group": 2, "topk_group": 1, "sliding_window": 4,
             "layer_types": cycle("sliding_attention", "full_attention"), "mlp_layer_types": cycle("dense", "sparse")},
    "cohere2_moe": {"head_dim": 16, "sliding_window": 4, "sliding_window_pattern": 2},
    "exaone_moe": {**_MOE, "num_experts": 8, "sliding_window": 4, "sliding_window_pattern": 2},
    "flex_olmo": {"num_experts": 8, "num_experts_per_tok": 2},
    "flint": {**_MOE, "head_dim": 16, "num_experts": 8, "shared_expert_intermediate_size": 64, "sliding_window": 4,
              "layer_types": cycle("full_attention", "sliding_attention"), "mlp_only_layers": [0]},
    "hy_v3": {**_MOE, "head_dim": 16, "num_experts": 8},
    "kolibri1": {**_MOE, "head_dim": 16, "num_local_experts": 8, "shared_expert_intermediate_size": 64,
                 "sliding_window": 4, "layer_types": cycle("sliding_attention", "full_attention")},
    "laguna": {**_MOE, "head_dim": 16, "num_experts": 8, "shared_expert_intermediate_size": 64, "sliding_window": 4,
               "layer_types": cycle("full_attention", "sliding_attention")},
    "mellum": {**_MOE, "head_dim": 16, "num_local_experts": 8, "sliding_window": 4,
               "layer_types": cycle("full_attention", "sliding_attention")},
    "mimo_v2_flash": {**_MOE, "head_dim": 16, "v_head_dim": 16, "n_routed_experts": 8, "sliding_window": 4},
    "minimax_m2": {"head_dim": 16, "num_local_experts": 8, "num_experts_per_tok": 2},
    "minimax_m3_vl_text": {"head_dim": 16, "rotary_dim": 8, "num_local_experts": 8, "num_experts_per_tok": 2,
                           "dense_intermediate_size": 128, "shared_intermediate_size": 64, "index_head_dim": 16,
                           "index_block_size": 2, "index_topk_blocks": 2,
                           "layer_types": cycle("full_attention", "minimax_m3_sparse"),
                           "mlp_layer_types": cycle("dense", "sparse")},
    "sarvam_moe": {**_ROUTED, "head_dim": 16},
    "solar_open": {**_ROUTED, "head_dim": 16},
    "zaya": {**_MOE, "head_dim": 16, "num_experts": 4, "num_experts_per_tok": 1, "router_hidden_size": 32,
             "sliding_window": 4, "layer_types": cycle("hybrid", "hybrid_sliding")},
    "deepseek_v4": {"head_dim": 16, "q_lora_rank": 32, "o_groups": 2, "o_lora_rank": 16, "n_routed_experts": 8,
                    "num_experts_per_tok": 2, "moe_intermediate_size": 32, "sliding_window": 4, **_INDEXER,
                    "compress_rates": {"compressed_sparse_attention": 2, "heavily_compressed_attention": 4},
                    "layer_types": cycle("sliding_attention", "compressed_sparse_attention",
                                         "heavily_compressed_attention"),
                    "mlp_layer_types": cycle("hash_moe", "moe")},
    # multi-head latent attention
    "minicpm3": dict(_MLA),
    "youtu": dict(_MLA),
    "deepseek_v32": {**_MLA, **_ROUTED, **_INDEXER, "first_k_dense_replace": 1},
    "glm4_moe_lite": {**_MLA, **_ROUTED, "n_group": 1},
    "glm_moe_dsa": {**_MLA, **_ROUTED, **_INDEXER, "first_k_dense_replace": 1},
    "axk1": {**_MLA, **_ROUTED},
    "axk2": {**_MLA, **_ROUTED, **_INDEXER},
    "hy_v4": {**_MLA, **_ROUTED, **_INDEXER, "n_group": 1},
    "sarvam_mla": {**_MLA, **_ROUTED, "n_group": 1},
    # hybrids: state-space / recurrent / linear-attention layers beside attention
    "mamba2": {"num_heads": 8, "head_dim": 16, "n_groups": 1, "state_size": 16, "chunk_size": 8},
    "bamba": {**_MAMBA2, "attn_layer_indices": [1]},
    "falcon_h1": {**_MAMBA2, "mamba_d_ssm": 128, "head_dim": 16},
    "granitemoehybrid": {**_MAMBA2, "shared_intermediate_size": 64,
                         "layer_types": cycle("linear_attention", "full_attention")},
    "nemotron_h": {"layers_block_type": cycle("linear_attention", "full_attention", "moe", "mlp"), "head_dim": 16,
                   "mamba_num_heads": 8, "mamba_head_dim": 16, "n_groups": 1, "ssm_state_size": 16, "chunk_size": 8,
                   "moe_intermediate_size": 32, "moe_shared_expert_intermediate_size": 64, "use_mamba_kernels": False},
    "jamba": {"num_experts": 4, "attn_layer_period": 2, "attn_layer_offset": 1, "expert_layer_period": 2,
              "expert_layer_offset": 1, "use_mamba_kernels": False},
    "zamba": {"layers_block_type": cycle("linear_attention", "hybrid"), "use_mamba_kernels": False},
    "zamba2": {"layers_block_type": cycle("linear_attention", "hybrid"), "mamba_d_state": 16, "chunk_size": 8,
               "use_mamba_kernels": False, "adapter_rank": 8},
    "qwen3_next": {**_GATED_DELTA, **_MOE, "num_experts": 8, "shared_expert_intermediate_size": 64},
    "qwen3_5_text": dict(_GATED_DELTA),
    "qwen3_5_moe_text": {**_GATED_DELTA, **_MOE, "num_experts": 8, "shared_expert_intermediate_size": 64},
    # gated delta net layers only: its attention layers need the QSA indexer, whose block
    # selection (nonzero, then a branch on its size) torch.export refuses
    "qwen4_exp_text": {**_GATED_DELTA, **_MOE, "num_experts": 8, "shared_expert_intermediate_size": 64,
                       "layer_types": cycle("linear_attention"), "hc_lowrank": 8, "ngram_vocab_size_base": 256},
    "lara_mini": {**_GATED_DELTA, **_MOE, "num_experts": 8, "shared_expert_intermediate_size": 64, "sliding_window": 4,
                  "layer_types": cycle("linear_attention", "sliding_attention")},
    "olmo_hybrid": {"layer_types": cycle("linear_attention", "full_attention")},
    "kimi_linear": {**_MLA, **_MOE, "num_experts": 8, "num_experts_per_token": 2, "linear_head_dim": 16,
                    "linear_num_heads": 4, "layer_types": cycle("linear_attention", "full_attention")},
    "bailing_hybrid": {**_MLA, **_MOE, "head_dim": 16, "num_experts": 8, "num_experts_per_token": 2,
                       "num_expert_group": 2, "topk_group": 1, "first_k_dense_replace": 1, "layer_group_size": 2,
                       "linear_head_dim": 16, "linear_num_heads": 4},
    "lfm2": {"layer_types": cycle("conv", "full_attention")},
    "lfm2_moe": {**_MOE, "num_experts": 8, "num_dense_layers": 1, "layer_types": cycle("conv", "full_attention")},
    "lfm3": {"head_dim": 16, "sliding_window": 4, "layer_types": cycle("conv", "full_attention", "sliding_attention")},
    "recurrent_gemma": {"attention_window_size": 4},
    # sliding and global attention layers, each with a short convolution
    "inkling_text": {**_MOE, "head_dim": 16, "swa_head_dim": 16, "swa_num_attention_heads": 4,
                     "swa_num_key_value_heads": 2, "sliding_window_size": 4, "n_routed_experts": 8, "n_shared_experts": 1,
                     "layer_types": cycle("hybrid_sliding", "hybrid"), "mlp_layer_types": cycle("dense", "sparse")},
    "inkling2_text": {"head_dim": 16, "swa_head_dim": 16, "swa_num_attention_heads": 4, "swa_num_key_value_heads": 2,
                      "sliding_window_size": 4, "n_routed_experts": 8, "num_experts_per_tok": 2,
                      "intermediate_size": 32,  # its experts' width (attribute_map)
                      "unpadded_vocab_size": 128, "n_layers_per_attn_res_block": 2,
                      "layer_types": cycle("hybrid_sliding", "hybrid")},
    # byte-level: a local encoder and decoder (one layer each) around the global transformer's layers;
    # static patches (entropy patching sizes them from the data: torch.export refuses it)
    "blt": {"vocab_size": 260, "patch_in_forward": False, "patching_mode": "static", "local_attention_window_len": 8,
            "encoder_hash_byte_group_vocab": 64, "encoder_hash_byte_group_size": [3, 4],
            "patcher_config": {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                               "intermediate_size": 64},
            "encoder_config": {"hidden_size": 64, "hidden_size_global": 64, "num_attention_heads": 4,
                               "num_hidden_layers": 1, "intermediate_size": 128},
            "decoder_config": {"hidden_size": 64, "hidden_size_global": 64, "num_attention_heads": 4,
                               "num_hidden_layers": 1, "intermediate_size": 128},
            "global_config": {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": LAYERS,
                              "intermediate_size": 128}},
    # multimodal configs: the base goes to their text config (mllama: a cross-attention layer, idle
    # without an image)
    "mllama": {"text_config": {"cross_attention_layers": [1]}},
    "emu3": {"text_config": {}},
    "fuyu": {"text_config": {}},
})
ARCH_CONFIGS["inkling2_loop_text"] = {**ARCH_CONFIGS["inkling2_text"], "loop_gate_rank": 8, "loop_layer_index_start": 1,
                                      "loop_layer_index_end": 2, "loop_num_passes": 2,
                                      "n_layers_per_attn_res_block": 1}


def tiny_config(arch: str, layers: int = 2) -> dict[str, Any]:
    """The tiny config of ``arch`` with ``layers`` decoder layers, as HF config keys: the shared
    base (transformers maps the common names to each model's own through ``attribute_map``), then
    the arch's overrides; a :class:`PerLayer` value is made for ``layers``, a ``DROP`` one removed."""
    overrides = ARCH_CONFIGS.get(arch, {})
    if "text_config" in overrides:  # a wrapper around a text model: the base goes to the text model
        return {**_made(overrides, layers), "text_config": tiny_text_config(overrides["text_config"], layers)}
    return tiny_text_config(overrides, layers)


def tiny_text_config(overrides: dict[str, Any], layers: int) -> dict[str, Any]:
    return _made({**_BASE, "num_hidden_layers": layers, **overrides}, layers)


def _made(config: dict[str, Any], layers: int) -> dict[str, Any]:
    """``config`` with its :class:`PerLayer` values made (in sub-configs too) and ``DROP`` keys removed."""
    def made(v: Any) -> Any:
        return v(layers) if isinstance(v, PerLayer) else _made(v, layers) if isinstance(v, dict) else v

    return {k: made(v) for k, v in config.items() if v is not DROP}


def model_types() -> list[str]:
    """Every causal-LM model type of the installed transformers (``ARCHES`` are the tested ones)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def _require_torch() -> None:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise LayercError("export-hf needs the [torch] extra: pip install 'layerc[torch]'") from exc


EXPERTS_IMPLEMENTATIONS: tuple[str, ...] = ("grouped_mm", "batched_mm")
DTYPES: tuple[str, ...] = ("float32", "bfloat16")


def build_model(arch: str, layers: int, *, experts: str | None = None, dtype: str = "float32",
                attention: str | None = "eager"):
    """A tiny random-weight causal LM of ``arch`` with ``layers`` decoder layers, on CPU.

    ``experts`` picks transformers' MoE experts implementation (None: its
    default, ``grouped_mm``, which on CPU/float32 traces to the
    ``transformers.grouped_mm_fallback`` custom op; ``batched_mm``: plain aten
    ``index``/``bmm``).  ``eager`` is not offered: its per-expert Python loop
    over ``nonzero()`` is data-dependent and torch.export rejects it.
    ``attention``: the attention implementation (None: transformers' default for the model,
    as users run it; export uses ``eager``).
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if arch not in ARCH_CONFIGS and arch not in model_types():
        raise LayercError(
            f"unknown --arch {arch!r}: not a causal-LM model type of transformers; tested: {', '.join(ARCHES)}"
        )
    if arch in NOT_EXPORTED:
        raise LayercError(f"--arch {arch} is not exported: {NOT_EXPORTED[arch]}")
    if layers < 1:
        raise LayercError(f"--layers must be at least 1, got {layers}")
    if experts is not None and experts not in EXPERTS_IMPLEMENTATIONS:
        raise LayercError(
            f"unknown --experts {experts!r}; choose one of: {', '.join(EXPERTS_IMPLEMENTATIONS)}"
        )
    if dtype not in DTYPES:
        raise LayercError(f"unknown --dtype {dtype!r}; choose one of: {', '.join(DTYPES)}")
    config = AutoConfig.for_model(arch, **tiny_config(arch, layers))
    torch.manual_seed(0)
    extra: dict[str, Any] = {}
    if experts is not None:
        extra["experts_implementation"] = experts
    model = AutoModelForCausalLM.from_config(
        config, attn_implementation=attention, dtype=getattr(torch, dtype), **extra
    )
    return model.to("cpu").eval()


# --------------------------------------------------------------------------
# Export (what AutoDeploy's torch_export_to_gm does before its first dump)
# --------------------------------------------------------------------------


@contextlib.contextmanager
def _autocast_noop():
    """torch.autocast as a null context while tracing (AutoDeploy's ``autocast_noop`` patch)."""
    import torch

    orig_autocast = torch.autocast
    orig_enabled = torch.is_autocast_enabled

    def _safe_is_autocast_enabled(*args, **kwargs):
        try:
            return orig_enabled(*args, **kwargs)
        except RuntimeError:
            return False

    torch.autocast = lambda *args, **kwargs: contextlib.nullcontext()
    torch.is_autocast_enabled = _safe_is_autocast_enabled
    try:
        yield
    finally:
        torch.autocast = orig_autocast
        torch.is_autocast_enabled = orig_enabled


def _deduplicate_get_attrs(gm) -> None:
    """One get_attr node per tensor (tied embeddings), keeping the first."""
    by_tensor: dict[int, Any] = {}
    for node in list(gm.graph.nodes):
        if node.op != "get_attr":
            continue
        tensor = _resolve_attr(gm, str(node.target))
        if tensor is None:
            continue
        kept = by_tensor.setdefault(id(tensor), node)
        if kept is not node:
            node.replace_all_uses_with(kept)
            gm.graph.erase_node(node)


def _clean_up_assertions(gm) -> None:
    """Drop unused shape/metadata assertion nodes, like AutoDeploy's export does."""
    import torch

    checks = {
        torch.ops.aten._assert_scalar,
        torch.ops.aten.sym_constrain_range,
        torch.ops.aten.sym_constrain_range_for_size,
        torch.ops.aten._assert_tensor_metadata,
    }
    for node in reversed(list(gm.graph.nodes)):
        if node.users or node.op != "call_function":
            continue
        target = node.target
        packet = getattr(target, "overloadpacket", target)
        if packet in checks or target in checks:
            gm.graph.erase_node(node)


def _resolve_attr(gm, target: str):
    obj = gm
    for part in target.split("."):
        if not hasattr(obj, part):
            return None
        obj = getattr(obj, part)
    return obj


def _ensure_vals(gm) -> int:
    """Give every get_attr / placeholder / op node a ``meta["val"]``; returns how many were added.

    torch.export usually records FakeTensors for all of them already (torch >= 2.5
    also on the get_attr nodes of ``ep.module()``); where it did not, the
    get_attr values are faked from the real tensors and the rest is filled in by
    fake-tensor propagation over the whole graph.
    """
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    # call_module nodes (export's _guards_fn) have no value, and neither do unused
    # assertion ops; AutoDeploy's dump prints "? : N/A" for those.
    missing = [
        n
        for n in gm.graph.nodes
        if n.op in ("get_attr", "placeholder", "call_function", "call_method")
        and "val" not in n.meta
        and not (n.op == "call_function" and not n.users and "assert" in str(n.target))
    ]
    if not missing:
        return 0
    mode = None
    for n in gm.graph.nodes:
        val = n.meta.get("val")
        if isinstance(val, torch.Tensor) and hasattr(val, "fake_mode"):
            mode = val.fake_mode
            break
    if mode is None:
        mode = FakeTensorMode(allow_non_fake_inputs=True)
    added = 0
    for n in gm.graph.nodes:
        if n.op == "get_attr" and "val" not in n.meta:
            tensor = _resolve_attr(gm, str(n.target))
            if isinstance(tensor, torch.Tensor):
                n.meta["val"] = mode.from_tensor(tensor, static_shapes=True)
                added += 1
    if any("val" not in n.meta for n in missing):
        from torch.fx.passes.fake_tensor_prop import FakeTensorProp

        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        inputs = [n.meta.get("val") for n in placeholders]
        if all(v is not None for v in inputs):
            had_val = {n for n in gm.graph.nodes if "val" in n.meta}
            FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*inputs)
            for n in gm.graph.nodes:
                if n in had_val or "val" not in n.meta:
                    continue
                added += 1
                # export records multi-output values as plain lists/tuples;
                # FakeTensorProp leaves fx's immutable_list, whose type name would leak
                # into the dump ("? : immutable_list").
                if isinstance(n.meta["val"], list) and type(n.meta["val"]) is not list:
                    n.meta["val"] = list(n.meta["val"])
    return added


def _input_ids(model):
    """The token ids the export traces with (and the profile runs on): seeded, so both agree."""
    import torch

    gen = torch.Generator().manual_seed(0)
    vocab = model.config.get_text_config().vocab_size  # a multimodal config keeps it in its text config
    return torch.randint(0, vocab, (BATCH, SEQ_LEN), generator=gen)


def export_graph_module(arch: str, layers: int, *, experts: str | None = None, dtype: str = "float32"):
    """(model, gm) for ``arch``: the unlifted, cleaned GraphModule of a tiny model."""
    import torch

    model = build_model(arch, layers, experts=experts, dtype=dtype)
    with _autocast_noop(), torch.no_grad():
        ep = torch.export.export(model, (), {"input_ids": _input_ids(model)}, strict=False)
    gm = ep.module()
    _deduplicate_get_attrs(gm)
    _clean_up_assertions(gm)
    gm.graph.lint()
    gm.recompile()
    _ensure_vals(gm)
    return model, gm


# --------------------------------------------------------------------------
# AutoDeploy graph dump (v3 writer format)
# --------------------------------------------------------------------------


def _dtype_or_type(val) -> Any:
    if hasattr(val, "dtype"):
        return val.dtype
    return type(val).__name__


def _shape_str(val) -> str:
    if hasattr(val, "shape"):
        dims = [str(int(d)) if str(d).isdigit() else str(d) for d in val.shape]
        return "x".join(dims) if dims else "scalar"
    return "?"


def _shape_dtype(val) -> str:
    return f"{_shape_str(val)} : {_dtype_or_type(val)}"


def write_ssa(f: IO[str], gm) -> None:
    """One graph's body, node by node, in AutoDeploy's SSA dump style."""
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            info = _shape_dtype(node.meta["val"]) if "val" in node.meta else "? : unknown"
            f.write(f"%{node.name} : {info}\n")
        elif node.op in ("call_function", "call_method", "call_module"):
            inputs = []
            for arg in node.args:
                if hasattr(arg, "name"):
                    if hasattr(arg, "meta") and "val" in arg.meta:
                        inputs.append(f"%{arg.name} : {_shape_dtype(arg.meta['val'])}")
                    else:
                        inputs.append(f"%{arg.name} : ? : unknown")
                else:
                    inputs.append(str(arg))
            if "val" in node.meta:
                out = node.meta["val"]
                if isinstance(out, (tuple, list)):
                    shapes, dtypes = [], []
                    for v in out:
                        if v is None:
                            shapes.append("?")
                            dtypes.append("None")
                        else:
                            shapes.append(_shape_str(v))
                            dtypes.append(str(_dtype_or_type(v)))
                    out_info = f"({', '.join(shapes)}) : ({', '.join(dtypes)})"
                else:
                    out_info = _shape_dtype(out)
            else:
                out_info = "? : N/A"
            f.write(f"%{node.name} = {node.target}({', '.join(inputs)}) : {out_info}\n")
        elif node.op == "output":
            outs = node.args[0] if isinstance(node.args[0], (tuple, list)) else [node.args[0]]
            names = [f"%{o.name}" if hasattr(o, "name") else str(o) for o in outs]
            f.write(f"output {', '.join(names)}\n")
        # get_attr nodes are not written


def write_dump(f: IO[str], mod, transform: str = TRANSFORM_NAME, stage: str = STAGE) -> int:
    """The whole dump file for ``mod``; returns the number of GraphModules written."""
    from torch.fx import GraphModule

    graph_modules = [
        (name or "(root)", sub) for name, sub in mod.named_modules() if isinstance(sub, GraphModule)
    ]
    f.write(f"# Transform: {transform}\n")
    f.write(f"# Stage: {stage}\n")
    f.write(f"# GraphModules found: {len(graph_modules)}\n\n")
    for name, gm in graph_modules:
        f.write(f"\n{'=' * 80}\n")
        f.write(f"# GraphModule: {name}\n")
        f.write(f"{'=' * 80}\n\n")
        write_ssa(f, gm)
    return len(graph_modules)


# --------------------------------------------------------------------------
# Layer attribution
# --------------------------------------------------------------------------

_SUBSCRIPT = re.compile(r"\[\s*['\"]?([^\]'\"]*?)['\"]?\s*\]")
_GENERIC_LAYER = re.compile(r"(?:^|\.)(?:layers|layer|h|blocks)\.(\d+)(?=\.|$)")


def normalize_module_path(path: str) -> str:
    """``L['self'].model.layers[3]`` / ``L__self__.model.layers.3`` -> ``model.layers.3``."""
    path = _SUBSCRIPT.sub(r".\1", str(path))
    path = re.sub(r"^(?:L\.self|L__self__|self)(?=\.|$)\.?", "", path)
    return path.strip(".")


def decoder_layers_prefix(model, layers: int | None = None) -> str | None:
    """Qualified name of the ModuleList holding the decoder layers (``model.layers``, ``transformer.h``):
    the shallowest one as long as the layer count asked for (``layers``) or, failing that, as
    ``config.num_hidden_layers`` (which some configs derive: LongCat counts two per layer). None
    where there is none, or two at the same depth (HRM's H and L stacks): the path names the layer."""
    import torch

    lists = [(name, len(mod)) for name, mod in model.named_modules() if name and isinstance(mod, torch.nn.ModuleList)]
    for n in dict.fromkeys((layers, getattr(model.config, "num_hidden_layers", None))):
        names = [name for name, size in lists if n is None or size == n]
        if not names:
            continue
        depth = min(name.count(".") for name in names)
        best = [name for name in names if name.count(".") == depth]
        return best[0] if len(best) == 1 else None
    return None


def layer_of_path(path: str, prefix: str | None = None) -> int | None:
    """The decoder-layer index in a module path or parameter name, or None.

    With ``prefix`` (the decoder ModuleList, e.g. ``model.layers``) only
    ``{prefix}.N`` counts; without it, the last ``layers.N`` / ``h.N`` /
    ``blocks.N`` component does.
    """
    path = normalize_module_path(path)
    if prefix:
        m = re.match(re.escape(prefix) + r"\.(\d+)(?=\.|$)", path)
        return int(m.group(1)) if m else None
    found = None
    for m in _GENERIC_LAYER.finditer(path):
        found = int(m.group(1))
    return found


def layer_of_node(node, prefix: str | None = None) -> int | None:
    """Decoder layer of one FX node: get_attr by its target, others by ``nn_module_stack``.

    ``nn_module_stack`` maps an opaque key (``L__self__model.layers.0`` under
    non-strict export, an object id under strict export) to ``(qualified
    path, class name)``, outermost module first; the path is what counts.
    """
    if node.op == "get_attr":
        return layer_of_path(str(node.target), prefix)
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return None
    layer = None
    for key, value in stack.items():
        path = value[0] if isinstance(value, (tuple, list)) and value else key
        idx = layer_of_path(str(path), prefix)
        if idx is not None:
            layer = idx
    return layer


def layer_map(gm, arch: str, num_layers: int, prefix: str | None = None) -> dict[str, Any]:
    """The layers.json document for ``gm``."""
    nodes = {n.name: layer_of_node(n, prefix) for n in gm.graph.nodes}
    weights = {n.name: str(n.target) for n in gm.graph.nodes if n.op == "get_attr"}
    return {
        "arch": arch,
        "num_layers": num_layers,
        "layers_module": prefix,
        "nodes": nodes,
        "weights": weights,
    }


# --------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------


def export(
    arch: str,
    layers: int,
    outdir: str | Path,
    *,
    experts: str | None = None,
    dtype: str = "float32",
) -> dict:
    """Export ``arch`` with ``layers`` decoder layers into ``outdir``; returns paths and metadata."""
    _require_torch()
    from layerc.backends.outputs import output_dir

    outdir = output_dir(outdir)
    t0 = time.perf_counter()
    model, gm = export_graph_module(arch, layers, experts=experts, dtype=dtype)
    prefix = decoder_layers_prefix(model, layers)
    seconds = time.perf_counter() - t0

    dump_path = outdir / DUMP_FILENAME
    fx_path = outdir / FX_FILENAME
    layers_path = outdir / LAYERS_FILENAME
    counts: dict[str, int] = {}
    with atomic_open(dump_path) as f:
        counts["graph_modules"] = write_dump(f, gm)
    write_atomic(fx_path, str(gm.graph))
    lmap = layer_map(gm, arch, layers, prefix)
    write_atomic(layers_path, json.dumps(lmap, indent=1) + "\n")
    return {
        "arch": arch,
        "num_layers": layers,
        "dump": str(dump_path),
        "fx_graph": str(fx_path),
        "layers": str(layers_path),
        "graph_modules": counts["graph_modules"],
        "num_nodes": len(gm.graph.nodes),
        "export_seconds": round(seconds, 3),
    }


PROFILE_FILENAME = "profile.json"
NODE_MODULES_FILENAME = "node_modules.json"


def profile_model(model, path: str | Path, *, annotate_modules: bool = True) -> None:
    """Run ``model`` once on the export's inputs under torch.profiler (CPU, shapes and module
    spans recorded) and write the Kineto trace to ``path``. ``annotate_modules`` wraps every
    module call in a ``record_function`` named by its qualified name (``module: model.layers.0.mlp``):
    the truth that kernel binding is checked against."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    handles, open_ranges = [], []
    if annotate_modules:
        for qual, mod in model.named_modules():
            def pre(_m, _a, qual=qual):
                r = record_function(f"module: {qual or '(root)'}")
                r.__enter__()
                open_ranges.append(r)

            def post(_m, _a, _o):
                open_ranges.pop().__exit__(None, None, None)

            handles += [mod.register_forward_pre_hook(pre), mod.register_forward_hook(post)]
    device = next(model.parameters()).device
    ids = _input_ids(model).to(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    try:
        with torch.no_grad():
            model(input_ids=ids)  # warm-up: lazy inits stay out of the profile
            with profile(activities=activities, record_shapes=True, with_stack=True, with_modules=True) as prof:
                model(input_ids=ids)
    finally:
        for h in handles:
            h.remove()
    with atomic_path(path) as tmp:
        prof.export_chrome_trace(str(tmp))


def node_modules(gm) -> dict[str, str]:
    """Node name → the qualified name of the innermost module that ran it (``nn_module_stack``)."""
    out = {}
    for node in gm.graph.nodes:
        stack = node.meta.get("nn_module_stack")
        if stack:
            path = list(stack.values())[-1][0]
            out[node.name] = normalize_module_path(path) or "(root)"
    return out


def model_type(value: str) -> str:
    """``--arch``: a causal-LM model type of the installed transformers (checked where it imports)."""
    if value in ARCH_CONFIGS or value in NOT_EXPORTED:
        return value
    try:
        known = model_types()
    except ImportError:  # run() says what is missing
        return value
    if value not in known:
        raise argparse.ArgumentTypeError(f"not a causal-LM model type of transformers: {value!r}")
    return value
