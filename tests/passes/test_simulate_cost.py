"""The decoder-layer graph and the cost pass: every op's FLOPs and bytes against closed forms written
here from the config's numbers alone (never from the graph's shapes), for several models, phases,
batch sizes and attention forms; the roofline time against the hardware table; config and hardware
file errors with their positions."""

from __future__ import annotations

import math
import tomllib

import pytest

from tests.conftest import ROOT
from layerc.grammar.decoder_layer import build_layer
from layerc.grammar.hf_config import load_config, load_preset, spec_from_dict
from layerc.ir.diagnostics import LayercError
from layerc.passes.pipeline import run_passes
from layerc.passes.base import Context
from layerc.passes.cost import CostModel, efficiency, expected_active_experts, load_hardware

BF16, F32, I64 = 2, 4, 8
HW_TOML = ROOT / "passes" / "data" / "hardware.toml"


def costed(preset: str, phase: str, seq: int, batch: int, attention: str = "fused", dtype: str = "model", hw: str = "h100"):
    module = build_layer(load_preset(preset), phase, seq, batch, attention=attention, dtype=dtype)
    module.verify()
    ctx = Context()
    CostModel(hw=hw).apply(ctx, module)
    assert not ctx.warnings
    graph = module.graphs[0]
    return {n.meta["label"]: n.meta["cost"] for n in graph.ops if "label" in n.meta}, graph


def gqa_forms(c: dict, phase: str, seq: int, batch: int, attention: str) -> dict[str, tuple[int, int]]:
    """Closed forms of a Llama/Qwen3 layer: label → (FLOPs, bytes)."""
    H, Hq, Hkv, D, I = c["hidden"], c["heads"], c["kv_heads"], c["head_dim"], c["inter"]
    S = 1 if phase == "decode" else seq
    L = seq + 1 if phase == "decode" else seq
    T, e = batch * S, BF16
    pairs = S * L if phase == "decode" else S * (S + 1) // 2

    def linear(k, n):
        return 2 * T * k * n, (T * k + k * n + T * n) * e

    f = {
        "input_layernorm": (4 * T * H, (2 * T * H + H) * e),
        "q_proj": linear(H, Hq * D), "k_proj": linear(H, Hkv * D), "v_proj": linear(H, Hkv * D),
        "rope_q": (3 * T * Hq * D, (2 * T * Hq * D + 2 * T * D) * e),
        "rope_k": (3 * T * Hkv * D, (2 * T * Hkv * D + 2 * T * D) * e),
        "k_cache_write": (0, 2 * T * Hkv * D * e), "v_cache_write": (0, 2 * T * Hkv * D * e),
        "o_proj": linear(Hq * D, H),
        "residual_attn": (T * H, 3 * T * H * e), "residual_mlp": (T * H, 3 * T * H * e),
        "post_attention_layernorm": (4 * T * H, (2 * T * H + H) * e),
        "gate_proj": linear(H, I), "up_proj": linear(H, I), "down_proj": linear(I, H),
        "act": (4 * T * I, 2 * T * I * e), "act_mul": (T * I, 3 * T * I * e),
    }
    if c.get("qk_norm"):
        f["q_norm"] = (4 * T * Hq * D, (2 * T * Hq * D + D) * e)
        f["k_norm"] = (4 * T * Hkv * D, (2 * T * Hkv * D + D) * e)
    kv = batch * Hkv * L * D  # keys (or values) read once per KV head, shared by its query group
    if attention == "fused":
        f["attention"] = (2 * batch * Hq * pairs * 2 * D, (2 * T * Hq * D + 2 * kv) * e)
    else:
        scores = batch * Hq * S * L  # eager computes every pair and masks
        f["attn_qk"] = (2 * scores * D, (T * Hq * D + kv + scores) * e)
        f["attn_softmax"] = (5 * scores, 2 * scores * e)
        f["attn_pv"] = (2 * scores * D, (scores + kv + T * Hq * D) * e)
    return f


LLAMA_1B = dict(hidden=2048, heads=32, kv_heads=8, head_dim=64, inter=8192)
LLAMA_8B = dict(hidden=4096, heads=32, kv_heads=8, head_dim=128, inter=14336)
QWEN3_8B = dict(hidden=4096, heads=32, kv_heads=8, head_dim=128, inter=12288, qk_norm=True)


@pytest.mark.parametrize("preset,dims,phase,seq,batch,attention", [
    ("llama-3.2-1b", LLAMA_1B, "decode", 256, 1, "eager"),
    ("llama-3.2-1b", LLAMA_1B, "decode", 256, 1, "fused"),
    ("llama-3.1-8b", LLAMA_8B, "decode", 4096, 8, "fused"),
    ("llama-3.1-8b", LLAMA_8B, "prefill", 512, 2, "fused"),
    ("llama-3.1-8b", LLAMA_8B, "prefill", 128, 1, "eager"),
    ("qwen3-8b", QWEN3_8B, "decode", 1000, 4, "eager"),
    ("qwen3-8b", QWEN3_8B, "prefill", 333, 1, "fused"),
])
def test_dense_layers_match_closed_forms(preset, dims, phase, seq, batch, attention):
    costs, _ = costed(preset, phase, seq, batch, attention)
    expected = gqa_forms(dims, phase, seq, batch, attention)
    assert set(costs) == set(expected)
    for label, (flops, moved) in expected.items():
        assert (costs[label].flops, costs[label].bytes) == (flops, moved), label


def test_mixtral_moe_layer(tmp_path):
    H, E, k, I = 4096, 8, 2, 14336
    batch, seq = 16, 2048
    costs, _ = costed("mixtral-8x7b", "decode", seq, batch)
    T, e = batch, BF16
    assert (costs["router"].flops, costs["router"].bytes) == (2 * T * H * E, (T * H + E * H + T * E) * e)
    assert (costs["router_topk"].flops, costs["router_topk"].bytes) == (8 * T * E, T * E * e + T * k * (F32 + I64))
    active = E * (1 - (1 - k / E) ** T)
    moved = T * H * e + T * k * (I64 + F32) + T * H * e + active * 3 * I * H * e + T * k * (2 * 2 * I + 2 * I + H) * e
    assert costs["experts"].flops == 2 * T * k * (2 * I * H + H * I)
    assert costs["experts"].bytes == int(moved)
    assert "gate_proj" not in costs  # the MLP is the experts
    # attention is the GQA decode of the same shapes as Llama-3.1-8B's
    f = gqa_forms(dict(LLAMA_8B, inter=I), "decode", seq, batch, "fused")
    assert (costs["attention"].flops, costs["attention"].bytes) == f["attention"]


def test_expected_active_experts():
    assert expected_active_experts(8, 2, 1) == pytest.approx(2.0)
    assert expected_active_experts(256, 8, 1) == pytest.approx(8.0)
    assert expected_active_experts(256, 8, 10_000) == pytest.approx(256.0)
    assert 8 < expected_active_experts(256, 8, 4) < 32


@pytest.mark.parametrize("phase,seq,batch", [("decode", 4096, 1), ("decode", 300, 8), ("prefill", 256, 1)])
def test_deepseek_v3_mla_moe_layer(phase, seq, batch):
    H, Hh, ql, C, R, P, V = 7168, 128, 1536, 512, 64, 128, 128
    E, k, Ie, n_shared = 256, 8, 2048, 1
    costs, graph = costed("deepseek-v3", phase, seq, batch)
    assert graph.meta["layer"] == 3 and graph.meta["mlp"] == "moe"  # layers 0-2 are dense
    S = 1 if phase == "decode" else seq
    L = seq + 1 if phase == "decode" else seq
    T, e = batch * S, BF16

    def linear(kk, n):
        return 2 * T * kk * n, (T * kk + kk * n + T * n) * e

    assert (costs["q_a_proj"].flops, costs["q_a_proj"].bytes) == linear(H, ql)
    assert (costs["q_b_proj"].flops, costs["q_b_proj"].bytes) == linear(ql, Hh * (P + R))
    assert (costs["kv_a_proj_with_mqa"].flops, costs["kv_a_proj_with_mqa"].bytes) == linear(H, C + R)
    assert (costs["kv_a_layernorm"].flops, costs["kv_a_layernorm"].bytes) == (4 * T * C, (2 * T * C + C) * e)
    # the MLA KV cache holds C + R values per token, for all heads at once
    assert costs["kv_cache_write"].bytes == 2 * T * (C + R) * e
    assert (costs["rope_k"].flops, costs["rope_k"].bytes) == (3 * T * R, (2 * T * R + 2 * T * R) * e)
    assert (costs["o_proj"].flops, costs["o_proj"].bytes) == linear(Hh * V, H)
    if phase == "decode":  # absorbed: attention over the latent cache, values its first C channels
        absorb_q = (2 * T * Hh * P * C, (T * Hh * P + Hh * P * C + T * Hh * C) * e)
        assert (costs["q_absorb"].flops, costs["q_absorb"].bytes) == absorb_q
        assert (costs["o_absorb"].flops, costs["o_absorb"].bytes) == (2 * T * Hh * C * V, (T * Hh * C + Hh * C * V + T * Hh * V) * e)
        att = costs["attention"]
        assert att.flops == 2 * batch * Hh * S * L * ((C + R) + C)
        assert att.bytes == (T * Hh * (C + R) + batch * L * (C + R) + T * Hh * C) * e
        assert "kv_b_proj" not in costs
    else:  # expanded: per-head keys and values from kv_b_proj, causal flash attention
        assert (costs["kv_b_proj"].flops, costs["kv_b_proj"].bytes) == linear(C, Hh * (P + V))
        pairs = S * (S + 1) // 2
        att = costs["attention"]
        assert att.flops == 2 * batch * Hh * pairs * ((P + R) + V)
        assert att.bytes == (2 * T * Hh * (P + R) + T * Hh * V + T * Hh * V) * e
    active = E * (1 - (1 - k / E) ** T)
    assert costs["experts"].flops == 2 * T * k * (2 * Ie * H + H * Ie)
    assert costs["experts"].bytes == int(T * H * e * 2 + T * k * (I64 + F32) + active * 3 * Ie * H * e
                                         + T * k * (2 * 2 * Ie + 2 * Ie + H) * e)
    assert (costs["router"].flops, costs["router"].bytes) == (2 * T * H * E, (T * H + E * H) * e + T * E * F32)
    si = Ie * n_shared
    assert (costs["shared_gate_proj"].flops, costs["shared_down_proj"].flops) == (2 * T * H * si, 2 * T * si * H)


def test_dense_deepseek_layer_and_layer_choice():
    spec = load_preset("deepseek-v3")
    g = build_layer(spec, "decode", 64, 1, layer=0).graphs[0]
    assert g.meta["mlp"] == "dense"
    linears = {n.meta["label"]: n.type.shape for n in g.ops if n.meta.get("label") in ("gate_proj", "down_proj")}
    assert linears == {"gate_proj": (1, 1, 18432), "down_proj": (1, 1, 7168)}
    with pytest.raises(LayercError, match="layer 61 does not exist"):
        build_layer(spec, "decode", 64, 1, layer=61)


def test_fp8_weights_use_the_fp8_peak_and_a100_has_none():
    bf, _ = costed("llama-3.1-8b", "prefill", 4096, 1)
    f8, _ = costed("llama-3.1-8b", "prefill", 4096, 1, dtype="fp8")
    q_bf, q_f8 = bf["q_proj"], f8["q_proj"]
    assert q_f8.flops == q_bf.flops
    assert q_bf.bytes - q_f8.bytes == 4096 * 4096  # one byte less per weight
    assert q_f8.bound == q_bf.bound == "compute"
    assert q_f8.compute_ns == pytest.approx(q_bf.compute_ns * 989.4 / 1978.9, rel=1e-9)  # the fp8 peak
    with pytest.raises(LayercError, match="no float8 matrix peak"):
        costed("llama-3.1-8b", "decode", 128, 1, dtype="fp8", hw="a100")


def _steps(doc, hw, key):
    return [tuple(p) for p in doc[hw].get(key, doc["defaults"][key])]


@pytest.mark.parametrize("hw", ["a100", "h100", "h200", "b200", "mi300x"])
def test_roofline_time_from_the_hardware_table(hw):
    doc = tomllib.loads(HW_TOML.read_text())
    table = {**doc["defaults"], **doc[hw]}
    costs, graph = costed("llama-3.1-8b", "decode", 2048, 4, hw=hw)
    for label in ("q_proj", "attention", "input_layernorm", "act"):
        c = costs[label]
        matrix = label in ("q_proj", "attention")
        peak = (table["matrix_tflops"]["bfloat16"] if matrix else table["vector_tflops"]) * 1e12
        eta_c = _step(_steps(doc, hw, "matrix_efficiency" if matrix else "vector_efficiency"), c.flops / 1e9)
        eta_m = _step(_steps(doc, hw, "memory_efficiency"), c.bytes / 1e6)
        compute, memory = c.flops / (peak * eta_c), c.bytes / (table["hbm_gbps"] * 1e9 * eta_m)
        assert c.time_ns == pytest.approx((max(compute, memory) + table["launch_overhead_us"] * 1e-6) * 1e9, rel=1e-9)
        assert c.bound == ("compute" if compute > memory else "memory")
    # a decode GEMV of Llama-3.1-8B is memory-bound on every preset
    assert costs["gate_proj"].bound == "memory"
    assert graph.meta["cost"]["time_ns"] == pytest.approx(sum(c.time_ns for c in costs.values() if c.is_kernel))


def _step(steps, size):
    return [eta for threshold, eta in steps if size >= threshold][-1] if size >= steps[0][0] else steps[0][1]


def test_efficiency_steps():
    steps = ((0.0, 0.1), (1.0, 0.6), (16.0, 0.9))
    assert [efficiency(steps, x) for x in (0, 0.5, 1, 15.9, 16, 1e6)] == [0.1, 0.1, 0.6, 0.6, 0.9, 0.9]


def test_no_overlap_mode_adds_the_terms():
    module = build_layer(load_preset("llama-3.2-1b"), "prefill", 512, 1)
    CostModel(mode="no-overlap", launch_overhead_us=0).apply(Context(), module)
    for n in module.graphs[0].ops:
        c = n.meta["cost"]
        if c.is_kernel:
            assert c.time_ns == pytest.approx(c.compute_ns + c.memory_ns)


def test_sliced_dump_layer_is_costed(tmp_path):
    """A layer sliced from a generated AutoDeploy dump: fused ops and paged attention."""
    from layerc.passes.slicing import SliceLayer
    from layerc.backends.synth.dump import write

    write("llama", tmp_path, layers=2)
    from layerc.grammar.dumps import load

    module = load(tmp_path)
    run_passes([SliceLayer(layer=1)], module)
    with pytest.raises(LayercError, match="give kv-len"):
        CostModel().apply(Context(), module)
    ctx = Context()
    CostModel(kv_len=1000).apply(ctx, module)
    from layerc.ir.targets import op_name

    costs = {op_name(n.target): n.meta["cost"] for n in module.graphs[0].ops}
    att = costs["flashinfer_attention_mha_with_cache"]
    B, S, Hq, Hkv, D, e = 8, 1, 32, 8, 128, BF16
    assert att.flops == 2 * B * Hq * 1001 * 2 * D
    cache_read = B * Hkv * 1001 * 2 * D * e
    assert att.bytes == 4 * B * S * Hq * D * e // 2 + 2 * B * S * Hkv * D * e + cache_read + B * Hkv * S * 2 * D * e
    mlp = costs["fused_swiglu_mlp"]
    I, H = 14336, 4096
    assert mlp.flops == 2 * B * H * 2 * I + 2 * B * I * H + 4 * B * I
    rope = costs["flashinfer_rope"]  # reads the cos/sin rows of 8 positions, not the 131072-row table
    assert rope.bytes < 1 << 20


# -- config and hardware files -------------------------------------------------------------------
def test_config_json_errors_point_at_the_value(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{\n  "model_type": "llama",\n  "hidden_size": 2048,\n  "num_attention_heads": "32"\n}\n')
    with pytest.raises(LayercError) as e:
        load_config(bad)
    text = e.value.format()
    assert text.startswith(f"{bad}:4:26: error: 'num_attention_heads' must be an integer")
    assert text.splitlines()[1] == '  "num_attention_heads": "32"'
    assert text.splitlines()[2] == " " * 25 + "^"
    bad.write_text('{"model_type": "llama", "hidden_size": 2048,,}')
    with pytest.raises(LayercError, match=r":1:45: error: invalid JSON"):
        load_config(bad)
    bad.write_text('{"model_type": "gpt2", "hidden_size": 64}')
    with pytest.raises(LayercError, match="'model_type' must be one of llama"):
        load_config(bad)
    bad.write_text('{"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 3}')
    with pytest.raises(LayercError, match="multiple of num_key_value_heads"):
        load_config(bad)


def test_spec_from_a_real_shaped_config():
    spec = spec_from_dict({"model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288,
                           "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128})
    assert spec.qk_norm and spec.head_dim == 128 and spec.dtype == "torch.bfloat16"
    ds = load_preset("deepseek-v3")
    mscale = 0.1 * math.log(40) + 1
    assert ds.softmax_scale == pytest.approx(192 ** -0.5 * mscale ** 2)
    assert ds.kv_heads == ds.heads == 128 and ds.mla.kv_lora_rank == 512


def test_hardware_file_errors(tmp_path):
    f = tmp_path / "gpu.toml"
    f.write_text('[mygpu]\nname = "X"\nmatrix_tflops = { bfloat16 = 100.0 }\nvector_tflops = 10\nhbm_gbps = -3\n')
    with pytest.raises(LayercError) as e:
        load_hardware(str(f))
    assert e.value.format().startswith(f"{f}:5:12: error: 'hbm_gbps' must be a positive number")
    f.write_text("[mygpu]\nname = \n")
    with pytest.raises(LayercError, match=r"gpu.toml:2:8: error: invalid TOML"):
        load_hardware(str(f))
    f.write_text('[mygpu]\nmatrix_tflops = { bfloat16 = 100.0 }\nvector_tflops = 10\nhbm_gbps = 1000\n'
                 'memory_efficiency = [[10, 0.5], [0, 0.9]]\n')
    with pytest.raises(LayercError, match=r"gpu.toml:5:21: error: 'memory_efficiency' must be ascending"):
        load_hardware(str(f))
    f.write_text('[mygpu]\nmatrix_tflops = { bfloat16 = 100.0 }\nvector_tflops = 10\nhbm_gbps = 1000\n')
    hw = load_hardware(str(f))
    assert hw.matrix_peak("torch.bfloat16") == 100e12 and hw.launch_overhead_us == 2.0  # built-in defaults apply
    with pytest.raises(LayercError, match="unknown hardware 'h900'"):
        load_hardware("h900")
