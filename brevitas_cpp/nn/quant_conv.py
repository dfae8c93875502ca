"""QuantConv1d/2d/3d: torch convolutions with quantized weight (Int8WeightPerTensorFloat by
default) and optional bias, input and output quantization.

``padding='same'`` with a stride above 1, which torch rejects, is supported as in Brevitas (and
TensorFlow): the input is zero-padded so the output has ceil(input / stride) elements per dim,
the odd element of padding going at the end.
"""

import math
from typing import List, Optional, Tuple, Union

import torch
from torch import Tensor
from torch.nn import Conv1d, Conv2d, Conv3d
from torch.nn import functional as F

from brevitas_cpp.quant import Int8WeightPerTensorFloat

from .quant_layer import ActQuantType, BiasQuantType, WeightQuantType
from .quant_layer import QuantWeightBiasInputOutputLayer as QuantWBIOL

__all__ = ["QuantConv1d", "QuantConv2d", "QuantConv3d"]


def _same_padded_strided(padding, padding_mode: str, stride) -> Tuple[object, bool]:
    """(padding for the torch constructor, whether forward pads itself): torch only accepts
    'same' with stride 1, so a strided 'same' conv is built unpadded and padded at run time."""
    strided = stride > 1 if isinstance(stride, int) else any(s > 1 for s in stride)
    if padding_mode == "zeros" and isinstance(padding, str) and padding == "same" and strided:
        return 0, True
    return padding, False


def _same_pad_amounts(
    spatial: List[int], kernel: List[int], stride: List[int], dilation: List[int]
) -> List[int]:
    """F.pad amounts (last dim first) giving ceil(size / stride) outputs per spatial dim, the odd
    element of padding at the end. Plain TorchScript: the forward of every mode runs it."""
    pads: List[int] = []
    for j in range(len(stride)):
        i = len(stride) - 1 - j
        out = (spatial[i] + stride[i] - 1) // stride[i]  # ceil(size / stride)
        total = max((out - 1) * stride[i] + (kernel[i] - 1) * dilation[i] + 1 - spatial[i], 0)
        pads += [total // 2, total - total // 2]
    return pads


class _QuantConvNd(object):
    """What QuantConv1d/2d/3d share; each also derives from QuantWBIOL and its torch conv."""

    def _init_quant_conv(
        self,
        conv_class: type,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride,
        padding,
        dilation,
        groups: int,
        padding_mode: str,
        bias: Optional[bool],
        weight_quant: Optional[WeightQuantType],
        bias_quant: Optional[BiasQuantType],
        input_quant: Optional[ActQuantType],
        output_quant: Optional[ActQuantType],
        return_quant_tensor: bool,
        device: Optional[torch.device],
        dtype: Optional[torch.dtype],
        **kwargs,
    ) -> None:
        """The constructor body of QuantConv1d/2d/3d (conv_class: their torch conv)."""
        padding, is_same_padded_strided = _same_padded_strided(padding, padding_mode, stride)
        conv_class.__init__(
            self,
            in_channels,
            out_channels,
            kernel_size,
            stride=stride,
            padding=padding,
            dilation=dilation,
            groups=groups,
            bias=bias,
            padding_mode=padding_mode,
            device=device,
            dtype=dtype,
        )
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
        self.is_same_padded_strided = is_same_padded_strided

    @property
    def per_elem_ops(self) -> int:
        return 2 * math.prod(self.kernel_size) * (self.in_channels // self.groups)

    @property
    def output_channel_dim(self) -> int:
        return 1 if self.transposed else 0

    @property
    def channelwise_separable(self) -> bool:
        return self.groups == self.in_channels

    def inner_forward_impl(
        self, x: Tensor, quant_weight: Tensor, quant_bias: Optional[Tensor]
    ) -> Tensor:
        if self.is_same_padded_strided:
            n = len(self.kernel_size)
            pads = _same_pad_amounts(
                list(x.shape[-n:]),
                list(quant_weight.shape[-n:]),
                list(self.stride),
                list(self.dilation),
            )
            if any([p > 0 for p in pads]):
                x = F.pad(x, pads)
        # A strided 'same' conv is built with padding 0: _conv_forward convolves the padded input.
        return self._conv_forward(x, quant_weight, quant_bias)


class QuantConv1d(_QuantConvNd, QuantWBIOL, Conv1d):
    """Conv1d with quantizers; with every quantizer None it computes exactly what Conv1d does."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: Union[int, Tuple[int]],
        stride: Union[int, Tuple[int]] = 1,
        padding: Union[str, int, Tuple[int]] = 0,
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
        **kwargs,
    ) -> None:
        self._init_quant_conv(
            Conv1d,
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            dilation,
            groups,
            padding_mode,
            bias,
            weight_quant,
            bias_quant,
            input_quant,
            output_quant,
            return_quant_tensor,
            device,
            dtype,
            **kwargs,
        )


class QuantConv2d(_QuantConvNd, QuantWBIOL, Conv2d):
    """Conv2d with quantizers; with every quantizer None it computes exactly what Conv2d does."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: Union[int, Tuple[int, int]],
        stride: Union[int, Tuple[int, int]] = 1,
        padding: Union[str, int, Tuple[int, int]] = 0,
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
        **kwargs,
    ) -> None:
        self._init_quant_conv(
            Conv2d,
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            dilation,
            groups,
            padding_mode,
            bias,
            weight_quant,
            bias_quant,
            input_quant,
            output_quant,
            return_quant_tensor,
            device,
            dtype,
            **kwargs,
        )


class QuantConv3d(_QuantConvNd, QuantWBIOL, Conv3d):
    """Conv3d with quantizers; with every quantizer None it computes exactly what Conv3d does."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: Union[int, Tuple[int, int, int]],
        stride: Union[int, Tuple[int, int, int]] = 1,
        padding: Union[str, int, Tuple[int, int, int]] = 0,
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
        **kwargs,
    ) -> None:
        self._init_quant_conv(
            Conv3d,
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            dilation,
            groups,
            padding_mode,
            bias,
            weight_quant,
            bias_quant,
            input_quant,
            output_quant,
            return_quant_tensor,
            device,
            dtype,
            **kwargs,
        )
