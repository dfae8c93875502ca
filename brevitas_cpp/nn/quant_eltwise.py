"""Elementwise addition and concatenation of quantized tensors (Brevitas's
brevitas.nn.quant_eltwise).

Both operands go through one input quantizer (so in eval they land on the same grid), the
float op runs on the dequantized values, and the output quantizer requantizes the result.
On IntQuantTensors the op also derives the output's metadata: a sum has the operands' mean
scale and a bit width wide enough for both integer ranges; a concatenation keeps the shared
grid. In eval the operands must then have the same scale, or the result would not be on one
grid: that is an error naming the layer and the two scales."""

from typing import Any, List, Optional

import torch
from torch import Tensor
from torch.nn import Module

from brevitas_cpp.nn.quant_layer import ActQuantType, QuantInputOutputLayer
from brevitas_cpp.proxy.script import QuantTuple, quant_operand, script_error
from brevitas_cpp.quant import Int8ActPerTensorFloat
from brevitas_cpp.quant_tensor import QuantTensor

from ._error_context import call_naming_layer

__all__ = ["QuantEltwiseAdd", "QuantCat"]


def _check_tie_scriptable(layer: QuantInputOutputLayer) -> None:
    # One proxy under two names: TorchScript would script it twice, and the two copies would
    # no longer share their state (statistics, learned scale).
    if layer.input_quant is layer.output_quant:
        raise script_error(
            layer,
            "tie_input_output_quant=True (one quantizer serving input and output)",
            "Build the layer without it, or trace the model.",
        )


def _is_training(quant: QuantTuple, training: bool) -> bool:
    """The training flag of a quantized operand: a QuantTensor's own (eager mode), else the
    quantizer's."""
    if torch.jit.is_scripting():
        return training
    return quant.training if isinstance(quant, QuantTensor) else training


def _check_same_scale(
    layer: Any,
    training: bool,
    scale: Optional[Tensor],
    other_scale: Optional[Tensor],
    first_name: str,
    other_name: str,
) -> None:
    """In eval, the quantized operands of an add or cat must share a scale (the rule and
    tolerance of IntQuantTensor's check, whose message would be less specific); None: an
    operand that is not quantized."""
    if training or scale is None or other_scale is None:
        return
    if torch.allclose(scale, other_scale):
        return
    if torch.jit.is_scripting():
        raise RuntimeError(
            "scripted quant layer: in eval mode the quantized operands must have the same "
            "scale; quantize both with the layer's input_quant (or a shared quantizer)"
        )
    raise RuntimeError(
        f"{type(layer).__name__}: in eval mode the quantized operands must have the same "
        f"scale, got {first_name} scale {scale.detach().cpu().tolist()} and "
        f"{other_name} scale {other_scale.detach().cpu().tolist()}; quantize both with the "
        f"layer's input_quant (or a shared quantizer) so they share a scale"
    )


class _QuantEltwise(QuantInputOutputLayer, Module):
    """What QuantEltwiseAdd and QuantCat share: the constructor (Brevitas's arguments) and what
    scripts."""

    def __init__(
        self,
        input_quant: Optional[ActQuantType] = Int8ActPerTensorFloat,
        output_quant: Optional[ActQuantType] = Int8ActPerTensorFloat,
        tie_input_output_quant: bool = False,
        return_quant_tensor: bool = False,
        **kwargs,
    ) -> None:
        Module.__init__(self)
        QuantInputOutputLayer.__init__(
            self, input_quant, output_quant, tie_input_output_quant, return_quant_tensor, **kwargs
        )

    @property
    def channelwise_separable(self) -> bool:
        return True

    def __prepare_scriptable__(self) -> "_QuantEltwise":
        _check_tie_scriptable(self)
        return super().__prepare_scriptable__()


class QuantEltwiseAdd(_QuantEltwise):
    """``output_quant(input_quant(input) + input_quant(other))``.

    Keywords ``input_*`` configure input_quant, ``output_*`` output_quant. With
    tie_input_output_quant one quantizer (whichever of the two is enabled) serves both."""

    # Tensors, or in eager mode QuantTensors (annotated as what TorchScript accepts).
    def forward(self, input: Tensor, other: Tensor):
        if torch.jit.is_scripting():
            return self._layer_forward(input, other)
        # An error names the layer (TorchScript compiles no try statement: eager mode only).
        return call_naming_layer(self, self._layer_forward, input, other)

    def _layer_forward(self, input: Tensor, other: Tensor):
        as_quant_tensor = self._wants_quant_tensor(input) or self._wants_quant_tensor(other)
        quant_input = self.input_quant.quantize(input, as_quant_tensor)
        quant_other = self.input_quant.quantize(other, as_quant_tensor)
        _check_same_scale(
            self,
            _is_training(quant_input, self.input_quant.training),
            quant_input[1],
            quant_other[1],
            "input",
            "other",
        )
        output = quant_operand(quant_input, as_quant_tensor) + quant_operand(
            quant_other, as_quant_tensor
        )
        return self._layer_output(self.output_quant.quantize(output, as_quant_tensor))


class QuantCat(_QuantEltwise):
    """``output_quant(torch.cat([input_quant(t) for t in tensor_list], dim))``.

    The quantized operands must agree in bit width and sign (always) and in scale and zero
    point (in eval); a plain tensor among them makes the result a plain tensor."""

    def _wants_quant_tensors(self, tensor_list: List[Tensor]) -> bool:
        """_wants_quant_tensor over the operands, every one checked before any is quantized
        (quantizing updates statistics)."""
        if torch.jit.is_scripting():
            return False
        # A QuantTensor is itself a (named) tuple: rule it out explicitly.
        is_sequence = isinstance(tensor_list, (list, tuple)) and not isinstance(
            tensor_list, QuantTensor
        )
        if not is_sequence or len(tensor_list) == 0:
            raise ValueError(
                f"{type(self).__name__}: tensor_list must be a non-empty list or tuple of "
                f"Tensors or QuantTensors, got {type(tensor_list).__name__}"
                f"{' of length 0' if is_sequence else ''}"
            )
        return any([self._wants_quant_tensor(t) for t in tensor_list])

    # tensor_list: a list or tuple of Tensors or QuantTensors in eager mode; annotated as what
    # TorchScript accepts (a list of Tensors: TorchScript lists are invariant).
    def forward(self, tensor_list: List[Tensor], dim: int = 1):
        if torch.jit.is_scripting():
            return self._layer_forward(tensor_list, dim)
        # An error names the layer (TorchScript compiles no try statement: eager mode only).
        return call_naming_layer(self, self._layer_forward, tensor_list, dim)

    def _layer_forward(self, tensor_list: List[Tensor], dim: int):
        as_quant_tensor = self._wants_quant_tensors(tensor_list)
        quant_list: List[QuantTuple] = []
        for t in tensor_list:
            quant_list.append(self.input_quant.quantize(t, as_quant_tensor))
        for i in range(1, len(quant_list)):
            _check_same_scale(
                self,
                _is_training(quant_list[0], self.input_quant.training),
                quant_list[0][1],
                quant_list[i][1],
                "tensor_list[0]",
                "tensor_list[" + str(i) + "]",
            )
        # QuantTensor operands dispatch to IntQuantTensor.cat, which also checks that they agree
        # in bit width and sign (Brevitas 0.12 calls QuantTensor.cat, which raises there).
        output = torch.cat([quant_operand(q, as_quant_tensor) for q in quant_list], dim=dim)
        return self._layer_output(self.output_quant.quantize(output, as_quant_tensor))
