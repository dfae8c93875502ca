"""The per-gate parameter holders of QuantRNN and QuantLSTM (Brevitas's GateWeight and
GateParams): a gate's input-to-hidden and hidden-to-hidden weights, which share one weight
quantizer, and its bias with its bias quantizer. Their attribute names are Brevitas's state_dict
keys (``gate_params.input_weight.weight``, ``..._gate_params.bias_quant...``)."""

from typing import Any, Optional, Union

import torch
from torch import Tensor, nn

from brevitas_cpp.quant_tensor import QuantTensor

from .mixin import QuantBiasMixin, QuantWeightMixin
from .mixin.base import mark_internal_kwargs

__all__ = ["GateParams", "GateWeight"]


# Marks the gate weights and biases (Parameter attribute): the tensors reset_parameters draws.
_GATE_TENSOR = "_brevitas_cpp_gate_tensor"


class GateWeight(QuantWeightMixin, nn.Module):
    """One gate's weight (output_features x input_features) and its weight quantizer."""

    def __init__(
        self,
        input_features: int,
        output_features: int,
        weight_quant: Any,
        dtype: Optional[torch.dtype],
        device: Any,
        **kwargs: Any,
    ) -> None:
        nn.Module.__init__(self)
        # randn: Brevitas draws the placeholder (overwritten by reset_parameters) from the global
        # generator, so a seeded construction gives the same weights only if we draw it too.
        self.weight = nn.Parameter(
            torch.randn(output_features, input_features, dtype=dtype, device=device)
        )
        setattr(self.weight, _GATE_TENSOR, True)
        QuantWeightMixin.__init__(self, weight_quant=weight_quant, **kwargs)

    @property
    def output_channel_dim(self) -> int:
        return 0

    @property
    def out_channels(self) -> int:
        return self.weight.size(0)

    def forward(self) -> Union[Tensor, QuantTensor]:
        return self.weight_quant(self.weight)


class GateParams(QuantBiasMixin, nn.Module):
    """A gate's bias and bias quantizer, its input-to-hidden weight (possibly another layer's,
    when shared) and its hidden-to-hidden weight, which reuses the input weight's quantizer."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool,
        weight_quant: Any,
        bias_quant: Any,
        input_weight: Optional[GateWeight],
        dtype: Optional[torch.dtype],
        device: Any,
        **kwargs: Any,
    ) -> None:
        nn.Module.__init__(self)
        if bias:
            self.bias = nn.Parameter(torch.randn(hidden_size, dtype=dtype, device=device))
            setattr(self.bias, _GATE_TENSOR, True)
        else:
            self.bias = None
        # As in Brevitas, kwargs holds the weight_* and bias_* keywords: the weight's go on to
        # the input weight's quantizer, which judges them (or to nothing, with a shared weight).
        weight_kwargs = {k: v for k, v in kwargs.items() if k.startswith("weight_")}
        mark_internal_kwargs(self, *weight_kwargs)
        QuantBiasMixin.__init__(self, bias_quant, **kwargs)
        if input_weight is None:
            input_weight = GateWeight(
                input_size, hidden_size, weight_quant, dtype, device, **weight_kwargs
            )
        self.input_weight = input_weight
        self.hidden_weight = GateWeight(
            hidden_size, hidden_size, input_weight.weight_quant, dtype, device
        )
