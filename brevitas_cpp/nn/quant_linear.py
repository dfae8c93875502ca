"""QuantLinear: torch.nn.Linear with quantized weight (Int8WeightPerTensorFloat by default) and
optional bias, input and output quantization."""

from typing import Optional

import torch
from torch import Tensor
from torch.nn import Linear
from torch.nn.functional import linear

from brevitas_cpp.quant import Int8WeightPerTensorFloat

from .quant_layer import ActQuantType, BiasQuantType, WeightQuantType
from .quant_layer import QuantWeightBiasInputOutputLayer as QuantWBIOL

__all__ = ["QuantLinear"]


class QuantLinear(QuantWBIOL, Linear):
    """y = linear(input_quant(x), weight_quant(W), bias_quant(b)), then output_quant. With every
    quantizer None it computes exactly what Linear does."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: Optional[bool] = True,
        weight_quant: Optional[WeightQuantType] = Int8WeightPerTensorFloat,
        bias_quant: Optional[BiasQuantType] = None,
        input_quant: Optional[ActQuantType] = None,
        output_quant: Optional[ActQuantType] = None,
        return_quant_tensor: bool = False,
        device: Optional[torch.device] = None,
        dtype: Optional[torch.dtype] = None,
        **kwargs,
    ) -> None:
        Linear.__init__(self, in_features, out_features, bias, device=device, dtype=dtype)
        QuantWBIOL.__init__(
            self,
            weight_quant=weight_quant,
            bias_quant=bias_quant,
            input_quant=input_quant,
            output_quant=output_quant,
            return_quant_tensor=return_quant_tensor,
            device=device,
            dtype=dtype,
            **kwargs,
        )

    @property
    def per_elem_ops(self) -> int:
        return 2 * self.in_features

    @property
    def output_channel_dim(self) -> int:
        return 0

    @property
    def out_channels(self) -> int:
        return self.out_features

    @property
    def channelwise_separable(self) -> bool:
        return False

    def inner_forward_impl(
        self, x: Tensor, quant_weight: Tensor, quant_bias: Optional[Tensor]
    ) -> Tensor:
        return linear(x, quant_weight, quant_bias)
