from typing import Optional

import torch
import torch.nn.functional as F

from tinyllm.layers.quant import QuantConfig


class UnquantizedLinearMethod:
    def apply(self, layer, x):
        return F.linear(x, layer.weight)


class Linear(torch.nn.Module):
    def __init__(self, in_features: int, out_features: int, quant_config: Optional[QuantConfig] = None):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(out_features, in_features))
        if quant_config is None:
            self.quant_method = UnquantizedLinearMethod()
        else:
            self.quant_method = quant_config.get_quant_method(self)

    def forward(self, x):
        return self.quant_method.apply(self, x)
