"""torch functions whose output on an IntQuantTensor is a new integer grid: concatenation,
the weight layers (linear, convolutions, transposed convolutions, embedding) and average
pooling. Each handler computes the function on the dequantized values and derives the
output's scale and accumulator bit width with Brevitas 0.12's formulas.

`INT_QUANT_TENSOR_FN_HANDLER` maps the torch function to its handler; `FN_ACC_BITWIDTH_MAPPING`
maps it to the worst-case accumulator bit width of its integer computation."""

import math
import warnings
from functools import reduce
from operator import mul
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor

from brevitas_cpp._unsupported import unsupported_getattr
from brevitas_cpp.function import ceil_ste, max_int
from brevitas_cpp.function.shape import (
    accumulator_channel_dim,
    accumulator_scale,
    channel_view_shape,
)
from brevitas_cpp.quant_tensor.base_quant_tensor import (
    IntQuantTensorBase,
    QuantTensor,
    _unpack_quant_tensor,
)
from brevitas_cpp.quant_tensor.torch_handler import INT_QUANT_TENSOR_FN_HANDLER

__all__ = [
    "FN_ACC_BITWIDTH_MAPPING",
    "INT_QUANT_TENSOR_FN_HANDLER",
    "implements_int_qt",
    "max_acc_bit_width_avg_pool2d",
    "max_acc_bit_width_convNd",
    "max_acc_bit_width_convtransposeNd",
    "max_acc_bit_width_linear",
    "quant_layer",
    "quant_output_scale_impl",
]


def implements_int_qt(torch_function: Callable) -> Callable[[Callable], Callable]:
    """Register the decorated function as the IntQuantTensor handler of torch_function."""

    def register(handler: Callable) -> Callable:
        INT_QUANT_TENSOR_FN_HANDLER[torch_function] = handler
        return handler

    return register


def _check_same_device(where: str, **tensors: Any) -> None:
    """Raise if the given tensors (QuantTensors, tensors or None) are not all on one device."""
    devices = [
        (name, _unpack_quant_tensor(t).device)
        for name, t in tensors.items()
        if isinstance(t, (Tensor, QuantTensor))
    ]
    for name, device in devices[1:]:
        if device != devices[0][1]:
            raise RuntimeError(
                f"{where}: {devices[0][0]} is on {devices[0][1]} but {name} is on {device}; "
                f"move them to one device first"
            )


# ---- accumulator bit widths --------------------------------------------------------------------


def _bits_of_largest_sum(
    input_bit_width: Tensor, weight_bit_width: Tensor, *term_counts: int
) -> Tensor:
    """ceil(log2(max input * max weight * the term counts, multiplied in the order given)): the
    bits of the largest unsigned accumulator (Brevitas's order, which float rounding can see)."""
    max_uint = max_int(bit_width=input_bit_width, signed=False, narrow_range=False)
    max_uint = max_uint * max_int(bit_width=weight_bit_width, signed=False, narrow_range=False)
    for count in term_counts:
        max_uint = max_uint * count
    return ceil_ste(torch.log2(max_uint))


def max_acc_bit_width_convNd(
    input_bit_width: Tensor,
    weight_bit_width: Tensor,
    weight_shape: Sequence[int],
    *args: Any,
    **kwargs: Any,
) -> Tensor:
    """Bits of the largest unsigned sum of in_channels * kernel_size products."""
    kernel_size = math.prod(weight_shape[2:])
    return _bits_of_largest_sum(input_bit_width, weight_bit_width, kernel_size, weight_shape[1])


def max_acc_bit_width_linear(
    input_bit_width: Tensor,
    weight_bit_width: Tensor,
    weight_shape: Sequence[int],
    *args: Any,
    **kwargs: Any,
) -> Tensor:
    """Bits of the largest unsigned sum of in_features products."""
    return _bits_of_largest_sum(input_bit_width, weight_bit_width, weight_shape[1])


def _per_dim(value: Union[int, Sequence[int]], n: int) -> List[int]:
    """An int or a sequence of ints as one int per spatial dim."""
    if isinstance(value, int):
        return [value] * n
    values = list(value)
    return values * n if len(values) == 1 else values


def max_acc_bit_width_convtransposeNd(
    input_bit_width: Tensor,
    weight_bit_width: Tensor,
    weight_shape: Sequence[int],
    *args: Any,
    **kwargs: Any,
) -> Tensor:
    """Brevitas's bound for a transposed convolution: weight_shape[1] channels times the sum over
    spatial dims of ceil(kernel / stride) (at least 1) overlapping products. Needs stride= (an int
    or one per spatial dim)."""
    kernel_shape = weight_shape[2:]
    stride = _per_dim(kwargs["stride"], len(kernel_shape))
    patch_size = 0
    for s, k in zip(stride, kernel_shape):
        patch_size += max(math.ceil(k / s), 1)
    return _bits_of_largest_sum(input_bit_width, weight_bit_width, patch_size, weight_shape[1])


def max_acc_bit_width_avg_pool2d(input_bit_width: Tensor, avg_scaling: int) -> Tensor:
    """Bits of the largest unsigned sum of avg_scaling inputs."""
    max_uint_input = max_int(bit_width=input_bit_width, signed=False, narrow_range=False)
    max_uint_output = max_uint_input * avg_scaling
    return ceil_ste(torch.log2(max_uint_output))


FN_ACC_BITWIDTH_MAPPING: Dict[Callable, Callable] = {
    F.linear: max_acc_bit_width_linear,
    F.conv1d: max_acc_bit_width_convNd,
    F.conv2d: max_acc_bit_width_convNd,
    F.conv3d: max_acc_bit_width_convNd,
    F.conv_transpose1d: max_acc_bit_width_convtransposeNd,
    F.conv_transpose2d: max_acc_bit_width_convtransposeNd,
    F.conv_transpose3d: max_acc_bit_width_convtransposeNd,
    F.avg_pool2d: max_acc_bit_width_avg_pool2d,
}


# ---- weight layers -----------------------------------------------------------------------------


def quant_output_scale_impl(
    fn: Callable, inp: Tensor, quant_input_scale: Tensor, quant_weight_scale: Tensor
) -> Optional[Tensor]:
    """The accumulator scale of fn's output (brevitas_cpp.function.shape.accumulator_scale)."""
    return accumulator_scale(
        quant_input_scale, quant_weight_scale, inp.dim(), accumulator_channel_dim(fn == F.linear)
    )


def quant_layer(
    fn: Callable, quant_input: Any, quant_weight: Any, bias: Any, *args: Any, **kwargs: Any
) -> Any:
    """fn on the values; an IntQuantTensor accumulator when input and weight are both
    IntQuantTensors with zero zero points, otherwise the plain output tensor.

    A bias that is not already on the accumulator grid (plain, or quantized with another scale)
    is represented through the zero point: -bias / output_scale."""
    _check_same_device(
        f"{fn.__name__} on an IntQuantTensor", input=quant_input, weight=quant_weight, bias=bias
    )
    output = fn(
        _unpack_quant_tensor(quant_input),
        _unpack_quant_tensor(quant_weight),
        _unpack_quant_tensor(bias),
        *args,
        **kwargs,
    )
    if not (
        isinstance(quant_input, IntQuantTensorBase) and isinstance(quant_weight, IntQuantTensorBase)
    ):
        return output

    max_acc_bit_width = FN_ACC_BITWIDTH_MAPPING[fn]
    output_bit_width = max_acc_bit_width(
        quant_input.bit_width, quant_weight.bit_width, quant_weight.value.shape, *args, **kwargs
    )
    output_scale = quant_output_scale_impl(
        fn, quant_input.value, quant_input.scale, quant_weight.scale
    )
    output_signed = quant_input.signed or quant_weight.signed
    output_training = quant_input.training or quant_weight.training
    output_zero_point = None

    if bias is not None:
        bias_is_quant = isinstance(bias, IntQuantTensorBase)
        if output_scale is not None and (
            not bias_is_quant or not torch.allclose(bias.scale, output_scale)
        ):
            # The channel dim of the output scale (Brevitas 0.12 always used dim 1 here, which
            # misplaces a linear bias when the input has more than 2 dims).
            bias_shape = channel_view_shape(
                quant_input.value.dim(), accumulator_channel_dim(fn == F.linear)
            )
            output_zero_point = -_unpack_quant_tensor(bias).view(bias_shape) / output_scale
        if bias_is_quant:
            output_bit_width = torch.where(
                bias.bit_width > output_bit_width, bias.bit_width, output_bit_width
            )
            output_bit_width = output_bit_width + 1

    if (quant_input.zero_point != 0.0).any() or (quant_weight.zero_point != 0.0).any():
        warnings.warn(
            f"{fn.__name__}: computing the zero point of the output accumulator of operands with "
            f"non-zero zero points is not supported yet; returning a plain Tensor"
        )
        return output
    if output_scale is None:
        warnings.warn(
            f"{fn.__name__}: the input scale {tuple(quant_input.scale.shape)} and weight scale "
            f"{tuple(quant_weight.scale.shape)} do not broadcast along the output channels; "
            f"could not compute the output scale, returning a plain Tensor"
        )
        return output
    if output_zero_point is None:
        output_zero_point = torch.zeros(1).type_as(output)
    # The operands' own type: this module is imported by the IntQuantTensor class it serves.
    return type(quant_input)(
        output,
        scale=output_scale,
        zero_point=output_zero_point,
        bit_width=output_bit_width,
        signed=output_signed,
        training=output_training,
    )


@implements_int_qt(torch.cat)
def cat_handler(tensors: Sequence[Any], dim: int = 0, out: Optional[Tensor] = None) -> Any:
    int_quant_tensor = next(type(t) for t in tensors if isinstance(t, IntQuantTensorBase))
    return int_quant_tensor.cat(tensors, dim, out=out)


@implements_int_qt(F.linear)
def linear_handler(input: Any, weight: Any, bias: Any = None) -> Any:  # noqa: A002 (torch's names)
    return quant_layer(F.linear, input, weight, bias)


def _register_conv(fn: Callable) -> None:
    def handler(input: Any, weight: Any, bias: Any = None, *args: Any, **kwargs: Any) -> Any:  # noqa: A002
        return quant_layer(fn, input, weight, bias, *args, **kwargs)

    handler.__name__ = f"{fn.__name__}_handler"
    INT_QUANT_TENSOR_FN_HANDLER[fn] = handler


for _conv in (F.conv1d, F.conv2d, F.conv3d):
    _register_conv(_conv)
del _conv
conv1d_handler = INT_QUANT_TENSOR_FN_HANDLER[F.conv1d]  # Brevitas's names
conv2d_handler = INT_QUANT_TENSOR_FN_HANDLER[F.conv2d]
conv3d_handler = INT_QUANT_TENSOR_FN_HANDLER[F.conv3d]


def _register_conv_transpose(fn: Callable) -> None:
    # Arguments are bound to keywords so the bit width bound finds stride however it was passed.
    def handler(
        input: Any,  # noqa: A002
        weight: Any,
        bias: Any = None,
        stride: Any = 1,
        padding: Any = 0,
        output_padding: Any = 0,
        groups: int = 1,
        dilation: Any = 1,
    ) -> Any:
        return quant_layer(
            fn,
            input,
            weight,
            bias,
            stride=stride,
            padding=padding,
            output_padding=output_padding,
            groups=groups,
            dilation=dilation,
        )

    handler.__name__ = f"{fn.__name__}_handler"
    INT_QUANT_TENSOR_FN_HANDLER[fn] = handler


for _conv in (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d):
    _register_conv_transpose(_conv)
del _conv
conv_transpose1d_handler = INT_QUANT_TENSOR_FN_HANDLER[F.conv_transpose1d]
conv_transpose2d_handler = INT_QUANT_TENSOR_FN_HANDLER[F.conv_transpose2d]
conv_transpose3d_handler = INT_QUANT_TENSOR_FN_HANDLER[F.conv_transpose3d]


@implements_int_qt(F.embedding)
def embedding_handler(input: Any, weight: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: A002
    """Rows of a per-tensor quantized weight keep its metadata; a plain weight gives a plain tensor."""
    out = F.embedding(_unpack_quant_tensor(input), _unpack_quant_tensor(weight), *args, **kwargs)
    if not isinstance(weight, IntQuantTensorBase):
        return out
    for name in ("scale", "zero_point", "bit_width"):
        field = getattr(weight, name)
        if field.numel() > 1:
            raise RuntimeError(
                f"embedding on an IntQuantTensor weight: only per-tensor quantization is "
                f"supported, got {name} of shape {tuple(field.shape)}"
            )
    return type(weight)(
        out, weight.scale, weight.zero_point, weight.bit_width, weight.signed, weight.training
    )


# ---- average pooling ---------------------------------------------------------------------------


def _kernel_area(kernel_size: Union[int, Sequence[int]]) -> int:
    """Number of elements of a 2d pooling window given as an int or a 1- or 2-sequence."""
    if isinstance(kernel_size, int):
        return kernel_size * kernel_size
    sizes = _per_dim(kernel_size, 2)
    return sizes[0] * sizes[1]


def _sum_pooled(quant_input: Any, pooled: Tensor, window: int) -> Any:
    """An average of `window` levels is their sum on a grid `window` times finer."""
    out = quant_input.set(value=pooled)
    out = out.set(scale=out.scale / window)
    return out.set(bit_width=max_acc_bit_width_avg_pool2d(out.bit_width, window))


@implements_int_qt(F.avg_pool2d)
def avg_pool2d_handler(
    input: Any,  # noqa: A002
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: Optional[int] = None,
) -> Any:
    pooled = F.avg_pool2d(
        _unpack_quant_tensor(input),
        kernel_size,
        stride,
        padding,
        ceil_mode,
        count_include_pad,
        divisor_override,
    )
    window = divisor_override if divisor_override is not None else _kernel_area(kernel_size)
    return _sum_pooled(input, pooled, window)


def compute_adaptive_kernel_size_stride(
    input_shape: Sequence[int], output_shape: Sequence[int]
) -> Tuple[List[int], List[int]]:
    """Kernel size and stride of the fixed pooling an adaptive pooling amounts to, per spatial dim
    (Brevitas's TruncAdaptiveAvgPool2d.compute_kernel_size_stride)."""
    kernel_sizes, strides = [], []
    for inp, out in zip(input_shape, output_shape):
        stride = inp // out
        kernel_sizes.append(inp - (out - 1) * stride)
        strides.append(stride)
    return kernel_sizes, strides


@implements_int_qt(F.adaptive_avg_pool2d)
def adaptive_avg_pool2d_handler(input: Any, output_size: Any) -> Any:  # noqa: A002
    value = _unpack_quant_tensor(input)
    pooled = F.adaptive_avg_pool2d(value, output_size)
    kernel_sizes, _ = compute_adaptive_kernel_size_stride(value.shape[-2:], pooled.shape[-2:])
    return _sum_pooled(input, pooled, reduce(mul, kernel_sizes, 1))


# Brevitas names brevitas_cpp does not support raise on use (brevitas_cpp._unsupported).
__getattr__ = unsupported_getattr(__name__)
