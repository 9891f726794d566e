import torch

from tinyllm.layers.platform import PlatformOp, _is_cuda

if _is_cuda:
    from sgl_kernel import fused_add_rmsnorm, rmsnorm


class RMSNorm(PlatformOp):
    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward_cuda(self, x, residual=None):
        if residual is not None:
            fused_add_rmsnorm(x, residual, self.weight, self.eps)
            return x, residual
        return rmsnorm(x, self.weight, self.eps)

    def forward_native(self, x, residual=None):
        if residual is not None:
            x = x + residual
            residual = x
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        out = x * self.weight
        return out if residual is None else (out, residual)
