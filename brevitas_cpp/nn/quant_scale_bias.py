"""ScaleBias (a per-channel affine y = x * weight + bias) and QuantScaleBias, its version with
quantized weight (Int8WeightPerTensorFloat by default) and optional bias, input and output
quantization. runtime_shape views the per-channel vectors against the input ((1, -1, 1, 1):
channels at dim 1 of a 4-d input)."""

from typing import Optional, Tuple

import torch
from torch import Tensor
from torch.nn import Module, Parameter

from brevitas_cpp.quant import Int8WeightPerTensorFloat

from .quant_layer import ActQuantType, BiasQuantType, WeightQuantType
from .quant_layer import QuantWeightBiasInputOutputLayer as QuantWBIOL

__all__ = ["ScaleBias", "QuantScaleBias"]


def _biased_mul(x: Tensor, weight: Tensor, bias: Optional[Tensor]) -> Tensor:
    out = x * weight
    if bias is not None:
        out = out + bias
    return out


class ScaleBias(Module):
    """y = x * weight.view(runtime_shape) + bias.view(runtime_shape); weight starts at ones,
    bias (if any) at zeros."""

    def __init__(
        self,
        num_features: int,
        bias: bool,
        runtime_shape=(1, -1, 1, 1),
        device: Optional[torch.device] = None,
        dtype: Optional[torch.dtype] = None,
    ):
        super(ScaleBias, self).__init__()
        self.num_features = num_features
        self.weight = Parameter(torch.ones(num_features, device=device, dtype=dtype))
        self.bias = (
            Parameter(torch.zeros(num_features, device=device, dtype=dtype)) if bias else None
        )
        self.runtime_shape = runtime_shape

    def forward(self, input: Tensor) -> Tensor:
        bias = self.bias.view(self.runtime_shape) if self.bias is not None else None
        return _biased_mul(input, self.weight.view(self.runtime_shape), bias)


class QuantScaleBias(QuantWBIOL, ScaleBias):
    """ScaleBias with quantizers; with every quantizer None it computes exactly what ScaleBias
    does."""

    def __init__(
        self,
        num_features: int,
        bias: bool,
        weight_quant: Optional[WeightQuantType] = Int8WeightPerTensorFloat,
        bias_quant: Optional[BiasQuantType] = None,
        input_quant: Optional[ActQuantType] = None,
        output_quant: Optional[ActQuantType] = None,
        return_quant_tensor: bool = False,
        runtime_shape: Tuple[int, ...] = (1, -1, 1, 1),
        device: Optional[torch.device] = None,
        dtype: Optional[torch.dtype] = None,
        **kwargs,
    ) -> None:
        ScaleBias.__init__(self, num_features, bias, runtime_shape, device=device, dtype=dtype)
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
        return 2

    @property
    def output_channel_dim(self) -> int:
        return 0

    @property
    def out_channels(self) -> int:
        return self.num_features

    @property
    def channelwise_separable(self) -> bool:
        return True

    def _wants_quant_tensor(self, inp: Tensor) -> bool:
        if torch.jit.is_scripting():
            return False
        # With a quantized bias, the QuantTensor sum x * weight + bias checks in eval that the
        # bias is on the product's grid (an error otherwise, as in Brevitas).
        quant_bias = self.bias is not None and self.bias_quant.is_quant_enabled
        return QuantWBIOL._wants_quant_tensor(self, inp) or quant_bias

    def inner_forward_impl(
        self, input: Tensor, quant_weight: Tensor, quant_bias: Optional[Tensor]
    ) -> Tensor:
        shape = list(self.runtime_shape)
        if quant_bias is None:
            return _biased_mul(input, quant_weight.view(shape), None)
        return _biased_mul(input, quant_weight.view(shape), quant_bias.view(shape))
