"""A DeepSeek-shaped toy: MHA / MLA dispatch, dense MLP vs MoE, norms owned by a communicator."""

import torch
from torch import nn

from tinyllm.layers.communicator import LayerCommunicator
from tinyllm.layers.linear import Linear
from tinyllm.layers.moe import FusedMoE, TopK
from tinyllm.layers.norm import RMSNorm
from tinyllm.models.common import AttnForwardMethod, MLAForwardMixin


def rotate(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module, MLAForwardMixin):
    def __init__(self, config, quant_config=None):
        super().__init__()
        self.q_proj = Linear(config.hidden, config.hidden, quant_config)
        self.q_a_layernorm = RMSNorm(config.hidden)
        self.q_b_proj = Linear(config.hidden, config.hidden, quant_config)
        self.o_proj = Linear(config.hidden, config.hidden, quant_config)
        self.attn_mqa = nn.MultiheadAttention(config.hidden, 4)
        self.w_kc = nn.Parameter(torch.empty(4, config.hidden, config.hidden))

    def dispatch(self, batch):
        return AttnForwardMethod.MLA if batch.is_decode else AttnForwardMethod.MHA

    def forward(self, hidden_states, batch):
        method = self.dispatch(batch)
        if method == AttnForwardMethod.MHA:
            return self.forward_normal(hidden_states)
        elif method == AttnForwardMethod.MLA:
            return self.forward_absorb(hidden_states, batch.latent)
        raise NotImplementedError

    def forward_normal(self, hidden_states):
        q = rotate(self.q_proj(hidden_states).view(-1, 4, 16))
        attn = torch.softmax(q @ q.transpose(-1, -2), dim=-1)
        return self.o_proj(attn.reshape(hidden_states.shape))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gate_up_proj = Linear(config.hidden, 2 * config.intermediate)
        self.down_proj = Linear(config.intermediate, config.hidden)

    def forward(self, x):
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(nn.functional.silu(gate) * up)


class MoE(nn.Module):
    def __init__(self, config, quant_config=None):
        super().__init__()
        self.gate = nn.Linear(config.hidden, config.num_experts, bias=False)
        self.topk = TopK(config.top_k)
        self.experts = FusedMoE(config.num_experts, config.hidden, quant_config)
        self.shared_experts = MLP(config)

    def forward(self, hidden_states, batch):
        if batch.deepep:
            return self.forward_deepep(hidden_states)
        return self.forward_normal(hidden_states)

    def forward_normal(self, hidden_states):
        shared = self.shared_experts(hidden_states)
        routed = self.experts(hidden_states, self.topk(self.gate(hidden_states)))
        return routed + shared

    def forward_deepep(self, hidden_states):
        topk_output = self.topk(self.gate(hidden_states))
        return torch.ops.deep_ep.dispatch_combine(self.experts(hidden_states, topk_output))


class DecoderLayer(nn.Module):
    def __init__(self, config, layer_id, quant_config=None):
        super().__init__()
        self.self_attn = Attention(config, quant_config)
        if layer_id >= config.first_k_dense_replace:
            self.mlp = MoE(config, quant_config)
        else:
            self.mlp = MLP(config)
        self.input_layernorm = RMSNorm(config.hidden)
        self.post_attention_layernorm = RMSNorm(config.hidden)
        self.layer_communicator = LayerCommunicator(
            input_layernorm=self.input_layernorm,
            post_attention_layernorm=self.post_attention_layernorm,
        )

    def forward(self, hidden_states, residual, batch):
        hidden_states, residual = self.layer_communicator.prepare_attn(hidden_states, residual)
        hidden_states = self.self_attn(hidden_states, batch)
        hidden_states, residual = self.layer_communicator.prepare_mlp(hidden_states, residual)
        if isinstance(self.mlp, MoE):
            hidden_states = self.mlp(hidden_states, batch)
        else:
            hidden_states = self.mlp(hidden_states)
        return hidden_states, residual

    def debug_probe(self, x):
        # a kernel call no forward reaches: the cross-validation reports it
        return torch.ops.tinyllm.probe(x)


class TinyModel(nn.Module):
    def __init__(self, config, quant_config=None):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab, config.hidden)
        self.layers = nn.ModuleList([DecoderLayer(config, i, quant_config) for i in range(config.layers)])
        self.norm = RMSNorm(config.hidden)

    def forward(self, input_ids, batch):
        hidden_states = self.embed_tokens(input_ids)
        residual = None
        for i in range(len(self.layers)):
            layer = self.layers[i]
            hidden_states, residual = layer(hidden_states, residual, batch)
        hidden_states, _ = self.norm(hidden_states, residual)
        return hidden_states


class TinyForCausalLM(nn.Module):
    def __init__(self, config, quant_config=None):
        super().__init__()
        self.model = TinyModel(config, quant_config)
        self.lm_head = nn.Linear(config.hidden, config.vocab, bias=False)
        self.logits_scaler = config.scaler

    def forward(self, input_ids, batch):
        hidden_states = self.model(input_ids, batch)
        return self.logits_scaler(self.lm_head(hidden_states))
