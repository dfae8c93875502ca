"""torch functions with their own rule on a FloatQuantTensor: concatenation, the weight layers
(linear, convolutions, transposed convolutions, embedding) and average pooling.

No accumulator format is derived for minifloat operands (as Brevitas 0.12): the layers and the
poolings compute on the dequantized values and return plain tensors. Concatenation and embedding
only select values of one grid, so they keep the metadata.

`FLOAT_QUANT_TENSOR_FN_HANDLER` maps the torch function to its handler; a FloatQuantTensor's
`__torch_function__` looks functions up here before the shared QUANT_TENSOR_FN_HANDLER."""

from typing import Any, Callable, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from brevitas_cpp.quant_tensor.base_quant_tensor import FloatQuantTensorBase, _unpack_quant_tensor
from brevitas_cpp.quant_tensor.torch_handler import FLOAT_QUANT_TENSOR_FN_HANDLER

__all__ = ["FLOAT_QUANT_TENSOR_FN_HANDLER", "implements_float_qt", "quant_layer"]


def implements_float_qt(torch_function: Callable) -> Callable[[Callable], Callable]:
    """Register the decorated function as the FloatQuantTensor handler of torch_function."""

    def register(handler: Callable) -> Callable:
        FLOAT_QUANT_TENSOR_FN_HANDLER[torch_function] = handler
        return handler

    return register


def quant_layer(
    fn: Callable, quant_input: Any, quant_weight: Any, bias: Any, *args: Any, **kwargs: Any
) -> Tensor:
    """fn on the values of input, weight and bias: a plain tensor."""
    return fn(
        _unpack_quant_tensor(quant_input),
        _unpack_quant_tensor(quant_weight),
        _unpack_quant_tensor(bias),
        *args,
        **kwargs,
    )


@implements_float_qt(torch.cat)
def cat_handler(tensors: Sequence[Any], dim: int = 0, out: Optional[Tensor] = None) -> Any:
    # The operands' own class: this module is imported by the FloatQuantTensor class it serves.
    float_quant_tensor = next(type(t) for t in tensors if isinstance(t, FloatQuantTensorBase))
    return float_quant_tensor.cat(tensors, dim, out=out)


def _register_layer(fn: Callable) -> None:
    def handler(input: Any, weight: Any, bias: Any = None, *args: Any, **kwargs: Any) -> Tensor:  # noqa: A002 (torch's names)
        return quant_layer(fn, input, weight, bias, *args, **kwargs)

    handler.__name__ = f"{fn.__name__}_handler"
    FLOAT_QUANT_TENSOR_FN_HANDLER[fn] = handler


for _layer in (
    F.linear,
    F.conv1d,
    F.conv2d,
    F.conv3d,
    F.conv_transpose1d,
    F.conv_transpose2d,
    F.conv_transpose3d,
):
    _register_layer(_layer)
del _layer
linear_handler = FLOAT_QUANT_TENSOR_FN_HANDLER[F.linear]  # Brevitas's names
conv1d_handler = FLOAT_QUANT_TENSOR_FN_HANDLER[F.conv1d]
conv2d_handler = FLOAT_QUANT_TENSOR_FN_HANDLER[F.conv2d]
conv3d_handler = FLOAT_QUANT_TENSOR_FN_HANDLER[F.conv3d]
conv_transpose1d_handler = FLOAT_QUANT_TENSOR_FN_HANDLER[F.conv_transpose1d]
conv_transpose2d_handler = FLOAT_QUANT_TENSOR_FN_HANDLER[F.conv_transpose2d]
conv_transpose3d_handler = FLOAT_QUANT_TENSOR_FN_HANDLER[F.conv_transpose3d]


@implements_float_qt(F.embedding)
def embedding_handler(input: Any, weight: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: A002
    """Rows of a per-tensor quantized weight keep its metadata; a plain weight gives a plain tensor."""
    out = F.embedding(_unpack_quant_tensor(input), _unpack_quant_tensor(weight), *args, **kwargs)
    if not isinstance(weight, FloatQuantTensorBase):
        return out
    for name in (
        "scale",
        "zero_point",
        "exponent_bit_width",
        "mantissa_bit_width",
        "exponent_bias",
    ):
        field = getattr(weight, name)
        if field.numel() > 1:
            raise RuntimeError(
                f"embedding on a FloatQuantTensor weight: only per-tensor quantization is "
                f"supported, got {name} of shape {tuple(field.shape)}"
            )
    return weight.set(value=out)


@implements_float_qt(F.avg_pool2d)
def avg_pool2d_handler(
    input: Any,  # noqa: A002
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: Optional[int] = None,
) -> Tensor:
    return F.avg_pool2d(
        _unpack_quant_tensor(input),
        kernel_size,
        stride,
        padding,
        ceil_mode,
        count_include_pad,
        divisor_override,
    )


@implements_float_qt(F.adaptive_avg_pool2d)
def adaptive_avg_pool2d_handler(input: Any, output_size: Any) -> Tensor:  # noqa: A002
    return F.adaptive_avg_pool2d(_unpack_quant_tensor(input), output_size)
