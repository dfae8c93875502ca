"""Fused quantizers: one C++ op each, one pass over the input."""

from typing import Optional, Tuple

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


def relu_int_quant(
    x: Tensor,
    scale: Tensor,
    zero_point: Tensor,
    bit_width: Tensor,
    signed: bool,
    narrow_range: bool,
    rounding_mode: str = "round",
    clamp_ste: bool = False,
) -> Tensor:
    """int_quant(torch.relu(x), ...) in one pass (QuantReLU's activation and quantizer), with the
    same values and gradients: relu(x) is never written, and ReLU's gradient mask is applied as
    x's gradient is. Autograd keeps x (where torch.relu keeps its output), so x must not be
    modified in place before backward."""
    return torch.ops.brevitas_cpp.relu_int_quant(
        x, scale, zero_point, bit_width, signed, narrow_range, rounding_mode, clamp_ste
    )


def learned_int_quant(
    x: Tensor,
    value: Tensor,
    threshold: Tensor,
    zero_point: Tensor,
    bit_width: Tensor,
    signed: bool,
    narrow_range: bool,
    min_val: Optional[float] = None,
    rounding_mode: str = "round",
    clamp_ste: bool = False,
    relu: bool = False,
) -> Tuple[Tensor, Tensor]:
    """The learned phase of the stock activation quantizer in one op and one autograd node;
    returns (y, scale) with the values and gradients of the composition
        scale = scalar_signed_clamp_min_ste(value, min_val) / threshold  (value when min_val is None)
        y = relu_int_quant(x, scale, ...) if relu else int_quant(x, scale, ...)
    value and threshold (x's dtype) each broadcast to x as int_quant's scale. x and value get
    gradients (the clamp is straight-through); threshold, zero_point and bit_width are constants
    and must not require grad. min_val is None or a finite number >= 0."""
    return torch.ops.brevitas_cpp.learned_int_quant(
        x,
        value,
        threshold,
        zero_point,
        bit_width,
        signed,
        narrow_range,
        min_val,
        rounding_mode,
        clamp_ste,
        relu,
    )


def abs_max_int_quant(
    w: Tensor,
    bit_width: Tensor,
    channel_dim: Optional[int],
    signed: bool,
    narrow_range: bool,
    scaling_min_val: Optional[float] = None,
    rounding_mode: str = "round",
    clamp_ste: bool = False,
) -> Tuple[Tensor, Tensor]:
    """The stock weight quantizer (BitWidthConst, IntScaling, AbsMax statistics, _StatsScaling,
    zero point 0, IntQuant) in one op; returns (y, scale). m = max|w| over the tensor
    (channel_dim None: scale 0-dim) or over every dim but channel_dim (scale of w's rank, C at
    channel_dim); scale = |clamp_min(m, scaling_min_val)| / threshold with IntScaling's threshold
    (2^(b-1) - narrow signed, max_int unsigned); y = int_quant(w, scale, 0, bit_width, ...).
    w's gradient is the composition's: the STE of int_quant plus the path through the scale
    into the maxima. bit_width gets no gradient."""
    return torch.ops.brevitas_cpp.abs_max_int_quant(
        w, bit_width, channel_dim, signed, narrow_range, scaling_min_val, rounding_mode, clamp_ste
    )


def abs_percentile_int_quant(
    x: Tensor,
    zero_grad_param: Optional[Tensor],
    bit_width: Tensor,
    k: int,
    signed: bool,
    narrow_range: bool,
    scaling_min_val: Optional[float] = None,
    rounding_mode: str = "round",
    clamp_ste: bool = False,
    relu: bool = False,
) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """The stock activation quantizer while it collects statistics (AbsPercentile over the
    tensor, a linear-domain scale, IntScaling, zero point 0, IntQuant) in one op, of relu(x)
    with relu; returns (y, scale, stat, index). With a = |x| (|relu(x)|), s = the k-th smallest
    of a (NaN ranks above every number) and index the element torch.kthvalue gives (Brevitas's);
    stat = clamp_min(s, scaling_min_val); scale = stat / threshold (IntScaling's);
    y = int_quant(x, scale, 0, bit_width, ...). x's gradient is the composition's: the STE plus
    the path through the scale into the selected element. stat and index carry no gradient;
    zero_grad_param (the learned scale the statistics initialise) gets an exact zero."""
    return torch.ops.brevitas_cpp.abs_percentile_int_quant(
        x,
        zero_grad_param,
        bit_width,
        k,
        signed,
        narrow_range,
        scaling_min_val,
        rounding_mode,
        clamp_ste,
        relu,
    )


def float_quant(
    x: Tensor,
    scale: Tensor,
    exponent_bit_width: int,
    mantissa_bit_width: int,
    exponent_bias: int,
    max_value: float,
    signed: bool = True,
    saturating: bool = True,
    inf_values: bool = False,
    nan_values: bool = False,
    rounding_mode: str = "round",
) -> Tensor:
    """Minifloat fake quantization (Brevitas's FloatQuant with its FloatClamp in one pass):
    x / scale rounded to the e/m grid (subnormals below 2^(1 - bias)), clamped to +-max_value
    (0 below for unsigned), times scale. Without saturating, values beyond max_value become inf
    (inf_values) or NaN (nan_values only, which also turns inf into NaN)."""
    return torch.ops.brevitas_cpp.float_quant(
        x,
        scale,
        exponent_bit_width,
        mantissa_bit_width,
        exponent_bias,
        max_value,
        signed,
        saturating,
        inf_values,
        nan_values,
        rounding_mode,
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


def quantization_int8(
    x: Tensor,
    threshold: Tensor,
    iteration: Tensor,
    nbits: int = 8,
    is_weight: bool = False,
    channel_axis: Optional[int] = None,
    ema_decay: float = 0.01,
    delay_quant: int = 0,
    grad_mode: str = "ste",
    quant_mode: str = "minmax",
    training: bool = True,
) -> Tuple[Tensor, Tensor, Tensor]:
    """Seed 003's EMA-threshold quantizer: (y, scale, clip_threshold).

    QL = 2^(nbits-1) - 1. The threshold t is max|x| (weights: every call; activations: the
    first training batch, then t * (1 - ema_decay) + max|x| * ema_decay), per tensor or per
    channel along channel_axis; power2 rounds it up to a power of two. scale = t / QL and
    y = clamp(round_half_even(x / scale), -QL, QL) * scale. threshold (float32, one value or
    [C]) and iteration (one int64) are updated in place when training; for the first
    delay_quant training calls y is a copy of x. grad_mode "clip" zeroes x's gradient where
    |x| > clip_threshold, "ste" passes it. (y, scale, 0, nbits) is y's QuantTensor metadata."""
    return torch.ops.brevitas_cpp.quantization_int8(
        x,
        threshold,
        iteration,
        nbits,
        is_weight,
        channel_axis,
        ema_decay,
        delay_quant,
        grad_mode,
        quant_mode,
        training,
    )
