"""QuantConvTranspose1d/2d/3d: torch transposed convolutions with quantized weight
(Int8WeightPerTensorFloat by default) and optional bias, input and output quantization. The
weight is [C_in, C_out / groups, *kernel], so its output channel dim is 1."""

from typing import List, Optional, Tuple, Union

import torch
from torch import Tensor
from torch.nn import ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from torch.nn import functional as F

from brevitas_cpp.quant import Int8WeightPerTensorFloat
from brevitas_cpp.quant_tensor import QuantTensor, _unpack_quant_tensor

from .quant_layer import ActQuantType, BiasQuantType, WeightQuantType
from .quant_layer import QuantWeightBiasInputOutputLayer as QuantWBIOL

__all__ = ["QuantConvTranspose1d", "QuantConvTranspose2d", "QuantConvTranspose3d"]


class _QuantConvTransposeNd(object):
    """What QuantConvTranspose1d/2d/3d share; each also derives from QuantWBIOL and its torch
    layer (which already rejects padding modes other than 'zeros')."""

    def _init_quant_conv(
        self,
        conv_class: type,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride,
        padding,
        output_padding,
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
        """The constructor body of QuantConvTranspose1d/2d/3d (conv_class: their torch layer)."""
        conv_class.__init__(
            self,
            in_channels,
            out_channels,
            kernel_size,
            stride=stride,
            padding=padding,
            output_padding=output_padding,
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

    @property
    def per_elem_ops(self) -> int:
        raise NotImplementedError(
            f"{type(self).__name__}: per_elem_ops is not defined for transposed convolutions"
        )

    @property
    def output_channel_dim(self) -> int:
        return 1

    @property
    def channelwise_separable(self) -> bool:
        return self.groups == self.out_channels

    # input: a Tensor, or in eager mode a QuantTensor (annotated as what TorchScript accepts).
    def forward(self, input: Tensor, output_size: Optional[List[int]] = None):
        return self.forward_impl(input, output_size)

    def _float_op(
        self,
        x: Tensor,
        quant_weight: Tensor,
        quant_bias: Optional[Tensor],
        output_size: Optional[List[int]],
    ) -> Tensor:
        return self.inner_forward_impl(x, quant_weight, quant_bias, output_size)

    def _output_padding_for(self, x: Tensor, output_size: Optional[List[int]]) -> List[int]:
        # With the dilation, as torch's own forward does (Brevitas 0.12 leaves it out).
        return self._output_padding(
            x,
            output_size,
            list(self.stride),
            list(self.padding),
            list(self.kernel_size),
            len(self.kernel_size),
            list(self.dilation),
        )

    def compute_output_padding(
        self, inp: Union[Tensor, QuantTensor], output_size: Optional[List[int]]
    ) -> List[int]:
        return self._output_padding_for(_unpack_quant_tensor(inp), output_size)

    def inner_forward_impl(
        self,
        x: Tensor,
        quant_weight: Tensor,
        quant_bias: Optional[Tensor],
        output_size: Optional[List[int]] = None,
    ) -> Tensor:
        output_padding = self._output_padding_for(x, output_size)
        n = len(self.kernel_size)
        # Lists: TorchScript passes no tuple attribute to an int[] argument.
        stride, padding, dilation = list(self.stride), list(self.padding), list(self.dilation)
        if n == 1:
            return F.conv_transpose1d(
                x, quant_weight, quant_bias, stride, padding, output_padding, self.groups, dilation
            )
        if n == 2:
            return F.conv_transpose2d(
                x, quant_weight, quant_bias, stride, padding, output_padding, self.groups, dilation
            )
        return F.conv_transpose3d(
            x, quant_weight, quant_bias, stride, padding, output_padding, self.groups, dilation
        )


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
        **kwargs,
    ) -> None:
        self._init_quant_conv(
            ConvTranspose1d,
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            output_padding,
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
        **kwargs,
    ) -> None:
        self._init_quant_conv(
            ConvTranspose2d,
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            output_padding,
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
        **kwargs,
    ) -> None:
        self._init_quant_conv(
            ConvTranspose3d,
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            output_padding,
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
