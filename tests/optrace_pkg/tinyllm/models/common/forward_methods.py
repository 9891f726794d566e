from enum import IntEnum, auto

import torch

from tinyllm.layers.platform import _is_cuda

if _is_cuda:
    from sgl_kernel import bmm_fp8


class AttnForwardMethod(IntEnum):
    MHA = auto()
    MLA = auto()
    MLA_FUSED_ROPE = auto()


class MLAForwardMixin:
    """The absorbed-MLA path, kept apart from the attention class (as sglang does)."""

    def forward_absorb(self, q, latent):
        q_nope = self.q_b_proj(self.q_a_layernorm(q))
        if self.w_kc.dtype == torch.float8_e4m3fn:
            q_nope = bmm_fp8(q_nope, self.w_kc)
        else:
            q_nope = torch.bmm(q_nope, self.w_kc)
        return self.o_proj(self.attn_mqa(q_nope, latent))
