"""QuantConvTranspose1d/2d/3d: torch transposed convolutions with quantized weight
(Int8WeightPerTensorFloat by default) and optional bias, input and output quantization. The
weight is [C_in, C_out / groups, *kernel], so its output channel dim is 1."""

from typing import List, Optional, Tuple, Union

import torch
from torch import Tensor
from torch.nn import ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from torch.nn import functional as F

from brevitas_cpp.quant import Int8WeightPerTensorFloat
from brevitas_cpp.quant_tensor import IntQuantTensor, QuantTensor, _unpack_quant_tensor

from .quant_layer import ActQuantType, BiasQuantType
from .quant_layer import QuantWeightBiasInputOutputLayer as QuantWBIOL
from .quant_layer import WeightQuantType

__all__ = ["QuantConvTranspose1d", "QuantConvTranspose2d", "QuantConvTranspose3d"]

_CONV_TRANSPOSE = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


class _QuantConvTransposeNd(object):
    """What QuantConvTranspose1d/2d/3d share; each also derives from QuantWBIOL and its torch
    layer (which already rejects padding modes other than 'zeros')."""

    def _init_quant_conv(self, conv_class: type, in_channels: int, out_channels: int,
                         kernel_size, stride, padding, output_padding, dilation, groups: int,
                         padding_mode: str, bias: Optional[bool],
                         weight_quant: Optional[WeightQuantType],
                         bias_quant: Optional[BiasQuantType], input_quant: Optional[ActQuantType],
                         output_quant: Optional[ActQuantType], return_quant_tensor: bool,
                         device: Optional[torch.device], dtype: Optional[torch.dtype],
                         **kwargs) -> None:
        """The constructor body of QuantConvTranspose1d/2d/3d (conv_class: their torch layer)."""
        conv_class.__init__(
            self, in_channels, out_channels, kernel_size, stride=stride, padding=padding,
            output_padding=output_padding, dilation=dilation, groups=groups, bias=bias,
            padding_mode=padding_mode, device=device, dtype=dtype)
        QuantWBIOL.__init__(
            self, weight_quant=weight_quant, bias_quant=bias_quant, input_quant=input_quant,
            output_quant=output_quant, return_quant_tensor=return_quant_tensor, device=device,
            dtype=dtype, **kwargs)
        self._output_size = None

    @property
    def per_elem_ops(self) -> int:
        raise NotImplementedError(
            f"{type(self).__name__}: per_elem_ops is not defined for transposed convolutions")

    @property
    def output_channel_dim(self) -> int:
        return 1

    @property
    def channelwise_separable(self) -> bool:
        return self.groups == self.out_channels

    def forward(self, input: Union[Tensor, IntQuantTensor],
                output_size: Optional[List[int]] = None):
        if torch.jit.is_scripting():
            assert isinstance(input, Tensor), (
                "scripted quant layers take Tensors, not QuantTensors")
            return self._script_forward_impl(input, output_size)
        return self._eager_forward(input, output_size)

    def _eager_forward(self, input: Union[Tensor, QuantTensor],
                       output_size: Optional[List[int]]) -> Union[Tensor, QuantTensor]:
        # Out of forward: TorchScript parses forward whole, and can not parse try/finally.
        # forward_impl takes one argument: output_size reaches inner_forward_impl through self.
        self._output_size = output_size
        try:
            return self.forward_impl(input)
        finally:
            self._output_size = None

    def __prepare_scriptable__(self) -> "_QuantConvTransposeNd":
        # torch's _output_padding takes lists.
        self._script_stride = list(self.stride)
        self._script_padding = list(self.padding)
        self._script_kernel_size = list(self.kernel_size)
        self._script_dilation = list(self.dilation)
        return super().__prepare_scriptable__()

    def _script_inner_forward_impl(self, x: Tensor, quant_weight: Tensor,
                                   quant_bias: Optional[Tensor],
                                   output_size: Optional[List[int]]) -> Tensor:
        n = len(self._script_kernel_size)
        output_padding = self._output_padding(x, output_size, self._script_stride,
                                              self._script_padding, self._script_kernel_size, n,
                                              self._script_dilation)
        if n == 1:
            return F.conv_transpose1d(x, quant_weight, quant_bias, self._script_stride,
                                      self._script_padding, output_padding, self.groups,
                                      self._script_dilation)
        if n == 2:
            return F.conv_transpose2d(x, quant_weight, quant_bias, self._script_stride,
                                      self._script_padding, output_padding, self.groups,
                                      self._script_dilation)
        return F.conv_transpose3d(x, quant_weight, quant_bias, self._script_stride,
                                  self._script_padding, output_padding, self.groups,
                                  self._script_dilation)

    def compute_output_padding(self, inp: Union[Tensor, QuantTensor],
                               output_size: Optional[List[int]]) -> List[int]:
        # With the dilation, as torch's own forward does (Brevitas 0.12 leaves it out).
        return self._output_padding(
            _unpack_quant_tensor(inp), output_size, self.stride, self.padding, self.kernel_size,
            len(self.kernel_size), self.dilation)

    def inner_forward_impl(self, x: Union[Tensor, QuantTensor],
                           quant_weight: Union[Tensor, QuantTensor],
                           quant_bias: Optional[Union[Tensor, QuantTensor]]):
        output_padding = self.compute_output_padding(x, self._output_size)
        conv_transpose = _CONV_TRANSPOSE[len(self.kernel_size)]
        # QuantTensor operands dispatch to the QuantTensor handler (output scale, bit width).
        return conv_transpose(
            x,
            quant_weight,
            quant_bias,
            stride=self.stride,
            padding=self.padding,
            output_padding=output_padding,
            groups=self.groups,
            dilation=self.dilation)


class QuantConvTranspose1d(_QuantConvTransposeNd, QuantWBIOL, ConvTranspose1d):
    """ConvTranspose1d with quantizers; with every quantizer None it computes exactly what
    ConvTranspose1d does."""

    def __init__(
            self,
            in_channels: int,
            out_channels: int,
            kernel_size: Union[int, Tuple[int]],
            stride: Union[int, Tuple[int]] = 1,
            padding: Union[int, Tuple[int]] = 0,
            output_padding: Union[int, Tuple[int]] = 0,
            dilation: Union[int, Tuple[int]] = 1,
            groups: int = 1,
            padding_mode: str = "zeros",
            bias: Optional[bool] = True,
            weight_quant: Optional[WeightQuantType] = Int8WeightPerTensorFloat,
            bias_quant: Optional[BiasQuantType] = None,
            input_quant: Optional[ActQuantType] = None,
            output_quant: Optional[ActQuantType] = None,
            return_quant_tensor: bool = False,
            device: Optional[torch.device] = None,
            dtype: Optional[torch.dtype] = None,
            **kwargs) -> None:
        self._init_quant_conv(
            ConvTranspose1d, in_channels, out_channels, kernel_size, stride, padding,
            output_padding, dilation, groups, padding_mode, bias, weight_quant, bias_quant,
            input_quant, output_quant, return_quant_tensor, device, dtype, **kwargs)


class QuantConvTranspose2d(_QuantConvTransposeNd, QuantWBIOL, ConvTranspose2d):
    """ConvTranspose2d with quantizers; with every quantizer None it computes exactly what
    ConvTranspose2d does."""

    def __init__(
            self,
            in_channels: int,
            out_channels: int,
            kernel_size: Union[int, Tuple[int, int]],
            stride: Union[int, Tuple[int, int]] = 1,
            padding: Union[int, Tuple[int, int]] = 0,
            output_padding: Union[int, Tuple[int, int]] = 0,
            dilation: Union[int, Tuple[int, int]] = 1,
            groups: int = 1,
            padding_mode: str = "zeros",
            bias: Optional[bool] = True,
            weight_quant: Optional[WeightQuantType] = Int8WeightPerTensorFloat,
            bias_quant: Optional[BiasQuantType] = None,
            input_quant: Optional[ActQuantType] = None,
            output_quant: Optional[ActQuantType] = None,
            return_quant_tensor: bool = False,
            device: Optional[torch.device] = None,
            dtype: Optional[torch.dtype] = None,
            **kwargs) -> None:
        self._init_quant_conv(
            ConvTranspose2d, in_channels, out_channels, kernel_size, stride, padding,
            output_padding, dilation, groups, padding_mode, bias, weight_quant, bias_quant,
            input_quant, output_quant, return_quant_tensor, device, dtype, **kwargs)


class QuantConvTranspose3d(_QuantConvTransposeNd, QuantWBIOL, ConvTranspose3d):
    """ConvTranspose3d with quantizers; with every quantizer None it computes exactly what
    ConvTranspose3d does."""

    def __init__(
            self,
            in_channels: int,
            out_channels: int,
            kernel_size: Union[int, Tuple[int, int, int]],
            stride: Union[int, Tuple[int, int, int]] = 1,
            padding: Union[int, Tuple[int, int, int]] = 0,
            output_padding: Union[int, Tuple[int, int, int]] = 0,
            dilation: Union[int, Tuple[int, int, int]] = 1,
            groups: int = 1,
            padding_mode: str = "zeros",
            bias: bool = True,
            weight_quant: Optional[WeightQuantType] = Int8WeightPerTensorFloat,
            bias_quant: Optional[BiasQuantType] = None,
            input_quant: Optional[ActQuantType] = None,
            output_quant: Optional[ActQuantType] = None,
            return_quant_tensor: bool = False,
            device: Optional[torch.device] = None,
            dtype: Optional[torch.dtype] = None,
            **kwargs) -> None:
        self._init_quant_conv(
            ConvTranspose3d, in_channels, out_channels, kernel_size, stride, padding,
            output_padding, dilation, groups, padding_mode, bias, weight_quant, bias_quant,
            input_quant, output_quant, return_quant_tensor, device, dtype, **kwargs)
