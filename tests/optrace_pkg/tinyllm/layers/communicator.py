import torch
import torch.distributed as dist


class LayerCommunicator:
    """Owns the layer's norms (the model passes them in) and the all-reduce around them."""

    def __init__(self, input_layernorm: torch.nn.Module, post_attention_layernorm: torch.nn.Module):
        self.input_layernorm = input_layernorm
        self.post_attention_layernorm = post_attention_layernorm

    def prepare_attn(self, hidden_states, residual):
        if residual is None:
            return self.input_layernorm(hidden_states), hidden_states
        return self.input_layernorm(hidden_states, residual)

    def prepare_mlp(self, hidden_states, residual):
        dist.all_reduce(hidden_states)
        return self.post_attention_layernorm(hidden_states, residual)
