"""Which platform the kernels are for (decided once, at import)."""

import torch

_is_cuda = torch.cuda.is_available()
_is_hip = torch.version.hip is not None


class PlatformOp(torch.nn.Module):
    """A module whose forward is the platform's implementation, chosen at construction."""

    def __init__(self):
        super().__init__()
        self._forward_method = self.dispatch_forward()

    def forward(self, *args, **kwargs):
        return self._forward_method(*args, **kwargs)

    def forward_native(self, *args, **kwargs):
        raise NotImplementedError

    def forward_cuda(self, *args, **kwargs):
        raise NotImplementedError

    def dispatch_forward(self):
        if _is_cuda:
            return self.forward_cuda
        return self.forward_native

    def enter_torch_compile(self):
        self._forward_method = self.forward_native
