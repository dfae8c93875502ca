"""QuantLinear: torch.nn.Linear with quantized weight (Int8WeightPerTensorFloat by default) and
optional bias, input and output quantization; QuantTransformersConv1D, the same for
transformers' Conv1D (a linear layer whose weight is stored transposed)."""

from typing import Optional

import torch
from torch import Tensor
from torch.nn import Linear
from torch.nn.functional import linear

from brevitas_cpp.quant import Int8WeightPerTensorFloat

from .quant_layer import ActQuantType, BiasQuantType, WeightQuantType
from .quant_layer import QuantWeightBiasInputOutputLayer as QuantWBIOL

__all__ = ["QuantLinear", "QuantTransformersConv1D"]


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


class QuantTransformersConv1D(QuantLinear):
    """transformers' Conv1D (GPT-2's projections: y = x @ W + b with W stored (nx, nf), the
    transpose of a Linear's) as a QuantLinear(nx, nf). In memory the weight is laid out as a
    Linear's (nf, nx), so every quantizer (per output channel included) works unchanged; in a
    state_dict it is Conv1D's (nx, nf), so the float model's checkpoints load as they are and
    this layer's load into the float model."""

    def __init__(self, nf: int, nx: int, bias: Optional[bool] = True, **kwargs) -> None:
        super().__init__(nx, nf, bias=bias, **kwargs)
        self.nf, self.nx = nf, nx

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        weight = destination[prefix + "weight"]
        destination[prefix + "weight"] = weight.t() if keep_vars else weight.t().contiguous()

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        key = prefix + "weight"
        # load_state_dict works on its own copy of the mapping and this key is this layer's
        # alone; a weight of another shape is left for the size check to report.
        if key in state_dict and tuple(state_dict[key].shape) == (self.nx, self.nf):
            state_dict[key] = state_dict[key].t()
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
