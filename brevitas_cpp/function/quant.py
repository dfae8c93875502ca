"""Fused quantizers: one C++ op each, one pass over the input."""

import torch
from torch import Tensor

import brevitas_cpp._load  # noqa: F401  (registers the ops)


def int_quant(
    x: Tensor,
    scale: Tensor,
    zero_point: Tensor,
    bit_width: Tensor,
    signed: bool,
    narrow_range: bool,
    rounding_mode: str = "round",
    clamp_ste: bool = False,
) -> Tensor:
    """(clamp(round_mode(x / scale + zero_point), min_int, max_int) - zero_point) * scale.

    scale and zero_point (x's dtype) broadcast to x; bit_width holds one integer in [1, 32];
    rounding_mode is one of round, ceil, floor, round_to_zero, dpu. With clamp_ste the clamp
    passes x's gradient straight through; without it the clamp masks the gradient of x and
    differentiates in its bounds (so in bit_width)."""
    return torch.ops.brevitas_cpp.int_quant(
        x, scale, zero_point, bit_width, signed, narrow_range, rounding_mode, clamp_ste
    )


def binary_quant(x: Tensor, scale: Tensor) -> Tensor:
    """binary_sign(x) * scale, with a straight-through gradient for the sign."""
    return torch.ops.brevitas_cpp.binary_quant(x, scale)


def clamped_binary_quant(x: Tensor, scale: Tensor) -> Tensor:
    """binary_sign(tensor_clamp(x, -scale, scale)) * scale."""
    return torch.ops.brevitas_cpp.clamped_binary_quant(x, scale)


def ternary_quant(x: Tensor, scale: Tensor, threshold: float) -> Tensor:
    """sign(x) * scale where |x| > threshold * scale, else 0."""
    return torch.ops.brevitas_cpp.ternary_quant(x, scale, threshold)
