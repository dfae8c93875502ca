"""Elementwise addition and concatenation of quantized tensors (Brevitas's
brevitas.nn.quant_eltwise).

Both operands go through one input quantizer (so in eval they land on the same grid), the
float op runs on the dequantized values, and the output quantizer requantizes the result.
On IntQuantTensors the op also derives the output's metadata: a sum has the operands' mean
scale and a bit width wide enough for both integer ranges; a concatenation keeps the shared
grid. In eval the operands must then have the same scale, or the result would not be on one
grid: that is an error naming the layer and the two scales."""

from typing import List, Optional, Union

import torch
from torch import Tensor
from torch.nn import Module

from brevitas_cpp.nn.quant_layer import ActQuantType
from brevitas_cpp.nn.quant_layer import QuantInputOutputLayer
from brevitas_cpp.nn.quant_layer import _takes_tuple_path, _tuple_forward_ok
from brevitas_cpp.proxy.script import script_error
from brevitas_cpp.quant import Int8ActPerTensorFloat
from brevitas_cpp.quant_tensor import IntQuantTensor
from brevitas_cpp.quant_tensor import QuantTensor

__all__ = ["QuantEltwiseAdd", "QuantCat"]


def _script_check_same_scale(training: bool, scale: Optional[Tensor],
                             other_scale: Optional[Tensor]) -> None:
    """_check_same_scale on the TorchScript path, where operands are (value, scale, ...)."""
    if training or scale is None or other_scale is None:
        return
    if not torch.allclose(scale, other_scale):
        raise RuntimeError(
            "scripted quant layer: in eval mode the quantized operands must have the same "
            "scale; quantize both with the layer's input_quant (or a shared quantizer)")


def _check_tie_scriptable(layer: QuantInputOutputLayer) -> None:
    # One proxy under two names: TorchScript would script it twice, and the two copies would
    # no longer share their state (statistics, learned scale).
    if layer.input_quant is layer.output_quant:
        raise script_error(
            layer, "tie_input_output_quant=True (one quantizer serving input and output)",
            "Build the layer without it, or trace the model.")


def _check_same_scale(layer: Module, first: Union[Tensor, QuantTensor],
                      other: Union[Tensor, QuantTensor], first_name: str, other_name: str) -> None:
    """In eval, IntQuantTensor operands of an add or cat must share a scale (same rule and
    tolerance as IntQuantTensor's check, which would fail next with a less specific message)."""
    if not (isinstance(first, IntQuantTensor) and isinstance(other, IntQuantTensor)):
        return
    _check_same_scale_values(layer, first.training, first.scale, other.scale, first_name,
                             other_name)


def _check_same_scale_values(layer: Module, training: bool, scale: Optional[Tensor],
                             other_scale: Optional[Tensor], first_name: str,
                             other_name: str) -> None:
    """_check_same_scale on the scales of (value, scale, ...) operands (None: not quantized)."""
    if training or scale is None or other_scale is None:
        return
    if not torch.allclose(scale, other_scale):
        raise RuntimeError(
            f"{type(layer).__name__}: in eval mode the quantized operands must have the same "
            f"scale, got {first_name} scale {scale.detach().cpu().tolist()} and "
            f"{other_name} scale {other_scale.detach().cpu().tolist()}; quantize both with the "
            f"layer's input_quant (or a shared quantizer) so they share a scale")


class QuantEltwiseAdd(QuantInputOutputLayer, Module):
    """``output_quant(input_quant(input) + input_quant(other))``.

    Keywords ``input_*`` configure input_quant, ``output_*`` output_quant. With
    tie_input_output_quant one quantizer (whichever of the two is enabled) serves both."""

    def __init__(
            self,
            input_quant: Optional[ActQuantType] = Int8ActPerTensorFloat,
            output_quant: Optional[ActQuantType] = Int8ActPerTensorFloat,
            tie_input_output_quant: bool = False,
            return_quant_tensor: bool = False,
            **kwargs) -> None:
        Module.__init__(self)
        QuantInputOutputLayer.__init__(
            self, input_quant, output_quant, tie_input_output_quant, return_quant_tensor, **kwargs)

    @property
    def channelwise_separable(self) -> bool:
        return True

    def __prepare_scriptable__(self) -> "QuantEltwiseAdd":
        _check_tie_scriptable(self)
        return super().__prepare_scriptable__()

    def forward(self, input: Union[Tensor, IntQuantTensor], other: Union[Tensor,
                                                                          IntQuantTensor]):
        if torch.jit.is_scripting():
            assert isinstance(input, Tensor), (
                "scripted quant layers take Tensors, not QuantTensors")
            assert isinstance(other, Tensor), (
                "scripted quant layers take Tensors, not QuantTensors")
            return self._tuple_forward(input, other)
        if (_takes_tuple_path(self, input) and isinstance(other, Tensor)
                and _tuple_forward_ok(self.input_quant) and _tuple_forward_ok(self.output_quant)):
            # Nothing needs the sum's QuantTensor metadata (its scale and bit width).
            return self._tuple_forward(input, other)
        input = self.unpack_input(input)
        other = self.unpack_input(other)
        quant_input = self.input_quant(input)
        quant_other = self.input_quant(other)
        _check_same_scale(self, quant_input, quant_other, "input", "other")
        output = quant_input + quant_other
        quant_output = self.output_quant(output)
        return self.pack_output(quant_output)

    def _tuple_forward(self, input: Tensor, other: Tensor) -> Tensor:
        """forward on values (the QuantTensor sum adds the same values), for TorchScript and
        for eager calls that need no QuantTensor."""
        quant_input, input_scale, _, _ = self.input_quant._script_forward(input)
        quant_other, other_scale, _, _ = self.input_quant._script_forward(other)
        if torch.jit.is_scripting():
            _script_check_same_scale(self.input_quant.training, input_scale, other_scale)
        else:
            _check_same_scale_values(self, self.input_quant.training, input_scale, other_scale,
                                     "input", "other")
        return self.output_quant._script_forward(quant_input + quant_other)[0]


class QuantCat(QuantInputOutputLayer, Module):
    """``output_quant(torch.cat([input_quant(t) for t in tensor_list], dim))``.

    The quantized operands must agree in bit width and sign (always) and in scale and zero
    point (in eval); a plain tensor among them makes the result a plain tensor."""

    def __init__(
            self,
            input_quant: Optional[ActQuantType] = Int8ActPerTensorFloat,
            output_quant: Optional[ActQuantType] = Int8ActPerTensorFloat,
            tie_input_output_quant: bool = False,
            return_quant_tensor: bool = False,
            **kwargs) -> None:
        Module.__init__(self)
        QuantInputOutputLayer.__init__(
            self, input_quant, output_quant, tie_input_output_quant, return_quant_tensor, **kwargs)

    @property
    def channelwise_separable(self) -> bool:
        return True

    def __prepare_scriptable__(self) -> "QuantCat":
        _check_tie_scriptable(self)
        return super().__prepare_scriptable__()

    # tensor_list: a list or tuple of Tensors or QuantTensors in eager mode; annotated as what
    # TorchScript accepts (a list of Tensors: TorchScript lists are invariant).
    def forward(self, tensor_list: List[Tensor], dim: int = 1):
        if torch.jit.is_scripting():
            values: List[Tensor] = []
            first_scale: Optional[Tensor] = None
            for i, t in enumerate(tensor_list):
                value, scale, _, _ = self.input_quant(t)
                if i == 0:
                    first_scale = scale
                else:
                    _script_check_same_scale(self.input_quant.training, first_scale, scale)
                values.append(value)
            return self.output_quant(torch.cat(values, dim=dim))[0]
        # A QuantTensor is itself a (named) tuple: rule it out explicitly.
        is_sequence = isinstance(tensor_list, (list, tuple)) and not isinstance(
            tensor_list, QuantTensor)
        if not is_sequence or len(tensor_list) == 0:
            raise ValueError(
                f"{type(self).__name__}: tensor_list must be a non-empty list or tuple of "
                f"Tensors or QuantTensors, got {type(tensor_list).__name__}"
                f"{' of length 0' if is_sequence else ''}")
        # Every operand is checked before any is quantized (quantizing updates statistics).
        unpacked = [self.unpack_input(t) for t in tensor_list]
        quant_tensor_list = [self.input_quant(t) for t in unpacked]
        for i, qt in enumerate(quant_tensor_list[1:], start=1):
            _check_same_scale(self, quant_tensor_list[0], qt, "tensor_list[0]",
                              f"tensor_list[{i}]")
        # Brevitas 0.12 calls QuantTensor.cat here, which only the subclasses define (so it
        # raises AttributeError); IntQuantTensor.cat is what torch.cat of them does there.
        output = IntQuantTensor.cat(quant_tensor_list, dim=dim)
        quant_output = self.output_quant(output)
        return self.pack_output(quant_output)
