"""Which numbered module list holds the decoder layers, from the weight names' structure alone."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from layerc.passes.layer_list import find_layer_list

BLOCK = ["self_attn_q_proj_weight", "self_attn_o_proj_weight", "mlp_down_proj_weight", "input_layernorm_weight"]


def stack(path: str, layers: int, block=BLOCK) -> list[str]:
    return [f"{path}_{i}_{w}" for i in range(layers) for w in block]


@given(st.sampled_from(["model_layers", "transformer_h", "bert_encoder_layer", "transformer_layer", "backbone_blocks",
                        "model_decoder_layers", "gpt_neox_layers", "rwkv_blocks"]), st.integers(2, 64))
def test_any_spelling_of_the_stack(path, layers):
    names = ["model_embed_tokens_weight", "lm_head_weight", *stack(path, layers)]
    found = find_layer_list(names)
    assert found.path == path
    assert sorted(set(found.layer_of.values())) == list(range(layers))
    assert "lm_head_weight" not in found.layer_of


def test_the_layers_not_the_experts_nested_in_them():
    names = stack("model_layers", 2) + [f"model_layers_{i}_mlp_experts_{e}_{w}_proj_weight"
                                        for i in range(2) for e in range(64) for w in ("gate", "up", "down")]
    found = find_layer_list(names)
    assert found.path == "model_layers" and set(found.layer_of.values()) == {0, 1}


def test_a_one_layer_model_has_no_repeated_list_even_with_experts():
    names = stack("model_layers", 1) + [f"model_layers_0_mlp_experts_{e}_w" for e in range(8) for _ in range(1)]
    names += [f"model_layers_0_mlp_experts_{e}_v" for e in range(8)]
    assert find_layer_list(names) is None  # the caller falls back on the conventional names


def test_counters_and_single_weight_lists_are_not_layers():
    """A fused weight's counter, a list of single projections: one weight per entry."""
    names = [f"fused_weight_{k}" for k in range(40)] + [f"model_altup_projections_{k}_weight" for k in range(4)]
    assert find_layer_list(names) is None
    found = find_layer_list(names + stack("model_layers", 3))
    assert found.path == "model_layers"


def test_the_main_stack_of_several():
    """BLT: a one-layer local encoder and decoder around a global transformer."""
    names = stack("model_local_encoder_layers", 1) + stack("model_global_transformer_layers", 3) + stack("model_local_decoder_layers", 1)
    found = find_layer_list(names)
    assert found.path == "model_global_transformer_layers" and found.others == ()
    bigger = stack("model_vision_blocks", 2) + stack("model_language_layers", 6)
    found = find_layer_list(bigger)
    assert found.path == "model_language_layers" and found.others == ("model_vision_blocks",)


def test_twin_stacks_are_numbered_together():
    names = stack("model_h_module_layers", 3) + stack("model_l_module_layers", 3)
    found = find_layer_list(names)
    assert found.path == "model_h_module_layers+model_l_module_layers"
    assert found.layer_of["model_l_module_layers_2_mlp_down_proj_weight"] == 2
    unlike = stack("model_h_module_layers", 3) + stack("model_l_module_layers", 3, BLOCK[:2])
    assert "+" not in find_layer_list(unlike).path


def test_dotted_and_sanitized_names_agree():
    dotted = [n.replace("_", ".", 2) for n in stack("model_layers", 4)]  # model.layers.N_...
    assert find_layer_list(dotted).path == "model_layers"
