"""When a fused C++ quantizer op can stand in for Brevitas's chain of elementwise steps.

Two kinds of conditions. Structural ones are fixed when a quantizer is built: its rounding and
clamp blocks must be ones whose arithmetic the op reproduces (looked up by exact type, so a
subclass with its own forward is never mistaken for the original). Operand ones are checked on
every call, from tensor metadata only (no values, so no device synchronisation and no graph
break under torch.compile): the ops have CPU and Meta kernels, want the scale (and zero point)
in x's dtype, and broadcast parameters to x without growing x. Anything else takes Brevitas's
unfused composition, which has PyTorch's promotion and broadcasting rules.
"""

from typing import Dict, Optional

import torch
from torch import Tensor

from brevitas_cpp.core.function_wrapper import ROUNDING_MODE_OF_IMPL, TensorClamp, TensorClampSte

# tensor_clamp_impl type -> int_quant's clamp_ste.
CLAMP_STE_OF_IMPL: Dict[type, bool] = {TensorClamp: False, TensorClampSte: True}


def rounding_mode_of(float_to_int_impl: torch.nn.Module) -> Optional[str]:
    """The fused op's rounding_mode equivalent to float_to_int_impl, or None."""
    return ROUNDING_MODE_OF_IMPL.get(type(float_to_int_impl))


def clamp_ste_of(tensor_clamp_impl: torch.nn.Module) -> Optional[bool]:
    """The fused op's clamp_ste equivalent to tensor_clamp_impl, or None."""
    return CLAMP_STE_OF_IMPL.get(type(tensor_clamp_impl))


def broadcasts_into(param: Tensor, x: Tensor) -> bool:
    """param broadcasts to x's shape and the result keeps x's shape."""
    rank = param.dim()
    offset = x.dim() - rank
    if offset < 0:
        return False
    for i in range(rank):
        size = param.size(i)
        if size != 1 and size != x.size(offset + i):
            return False
    return True


def is_kernel_float(dtype: torch.dtype) -> bool:
    """The ops' dtypes (float8 is floating but has no kernels). Compared by value: TorchScript
    reads dtype without a dispatcher call, where x.is_floating_point() makes one per quantizer."""
    return (
        dtype == torch.float32
        or dtype == torch.float64
        or dtype == torch.float16
        or dtype == torch.bfloat16
    )


def is_single_value(t: Tensor) -> bool:
    """t.numel() == 1, from its sizes (numel is a dispatcher call under TorchScript)."""
    for size in t.size():
        if size != 1:
            return False
    return True


def on_kernel_device(x: Tensor) -> bool:
    """The ops have CPU, CUDA and Meta (tracing, shape propagation) kernels; a CUDA torch with a
    CPU-only build of brevitas_cpp runs the composite kernels there. Other devices take the
    module composition."""
    device_type = x.device.type
    return device_type == "cpu" or device_type == "cuda" or device_type == "meta"


def scaled_operands_fit(x: Tensor, scale: Tensor) -> bool:
    """binary_quant, clamped_binary_quant and ternary_quant accept (x, scale) as they are and
    then compute in the dtype Brevitas's composition would. In eager mode a user's scale block
    may return a Python float, as Brevitas allows: the composition takes it."""
    return (
        isinstance(scale, Tensor)
        and is_kernel_float(x.dtype)
        and on_kernel_device(x)
        and scale.device == x.device
        and scale.dtype == x.dtype
        and broadcasts_into(scale, x)
    )


def int_operands_fit(x: Tensor, scale: Tensor, zero_point: Tensor, bit_width: Tensor) -> bool:
    """int_quant accepts these operands as they are (see scaled_operands_fit); bit_width must be
    one value on x's device."""
    if not (
        scaled_operands_fit(x, scale)
        and isinstance(zero_point, Tensor)
        and isinstance(bit_width, Tensor)
    ):
        return False
    device = x.device  # read once: each read builds a torch.device
    return (
        zero_point.device == device
        and zero_point.dtype == x.dtype
        and broadcasts_into(zero_point, x)
        and is_single_value(bit_width)
        and bit_width.device == device
    )
