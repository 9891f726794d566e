import torch

try:
    from sgl_kernel import fp8_scaled_mm, per_token_quant_fp8
except ImportError:
    pass


class QuantConfig:
    def get_quant_method(self, layer):
        raise NotImplementedError


class Fp8Config(QuantConfig):
    def get_quant_method(self, layer):
        from tinyllm.layers.moe import FusedMoE

        if isinstance(layer, FusedMoE):
            return Fp8MoEMethod()
        return Fp8LinearMethod()


class Fp8LinearMethod:
    def apply(self, layer, x):
        q, scale = per_token_quant_fp8(x)
        return fp8_scaled_mm(q, layer.weight, scale, layer.weight_scale)


class Fp8MoEMethod:
    def apply(self, layer, x, topk_ids):
        from tinyllm.layers.moe import fused_experts

        return fused_experts(x, layer.w13, layer.w2, topk_ids, use_fp8=True)
