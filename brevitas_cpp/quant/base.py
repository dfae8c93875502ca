"""Setting mixins the ready-made quantizers are assembled from (Brevitas's brevitas.quant.base):
the integer format (IntQuant, UintQuant, ...), how the scale is obtained (MaxStatsScaling,
ParamFromRuntimePercentileScaling, ...) and its granularity and restriction
(PerTensorFloatScaling8bit, PerChannelPoTScaling8bit, ...).

They only declare settings; a solver listed last among a quantizer's bases turns them into blocks.
"""

from brevitas_cpp.core.function_wrapper import CeilSte
from brevitas_cpp.core.quant import ClampedBinaryQuant
from brevitas_cpp.core.stats import NegativeMinOrZero, NegativePercentileOrZero
from brevitas_cpp.core.zero_point import (
    ParameterFromRuntimeZeroPoint,
    StatsFromParameterZeroPoint,
    ZeroZeroPoint,
)
from brevitas_cpp.inject.enum import (
    BitWidthImplType,
    FloatToIntImplType,
    QuantType,
    RestrictValueType,
    ScalingImplType,
    ScalingPerOutputType,
    StatsOp,
)
from brevitas_cpp.inject.injector import ExtendedInjector, this, value
from brevitas_cpp.quant.solver.common import require_signed

__all__ = [
    "MaxStatsScaling",
    "MinMaxStatsScaling",
    "ParamFromRuntimePercentileScaling",
    "ParamFromRuntimePercentileIntervalScaling",
    "ParamFromRuntimeMinMaxScaling",
    "ParamMinMaxInitScaling",
    "IntQuant",
    "NarrowIntQuant",
    "UintQuant",
    "ShiftedMinUintQuant",
    "ShiftedParamFromPercentileUintQuant",
    "PerChannelFloatScaling8bit",
    "PerTensorFloatScaling8bit",
    "PerTensorPoTScaling8bit",
    "PerChannelPoTScaling8bit",
    "SignedBinaryClampedConst",
    "PerTensorConstScaling2bit",
    "BatchQuantStatsScaling1d",
    "BatchQuantStatsScaling2d",
]

# ---- how the scale is obtained ------------------------------------------------------------------


class MaxStatsScaling(ExtendedInjector):
    """Scale from max|x| of the tensor being quantized, recomputed at every call."""

    scaling_impl_type = ScalingImplType.STATS
    scaling_stats_op = StatsOp.MAX
    scaling_min_val = 1e-10


class MinMaxStatsScaling(ExtendedInjector):
    """Scale from the range max(x) - min(x), recomputed at every call (for asymmetric formats)."""

    scaling_impl_type = ScalingImplType.STATS
    scaling_stats_op = StatsOp.MIN_MAX
    scaling_min_val = 1e-10


class ParamFromRuntimePercentileScaling(ExtendedInjector):
    """Learned scale, initialised from the 99.999th percentile of |x| over the first 300 training
    steps."""

    scaling_impl_type = ScalingImplType.PARAMETER_FROM_STATS
    scaling_stats_op = StatsOp.PERCENTILE
    high_percentile_q = 99.999
    collect_stats_steps = 300
    scaling_min_val = 1e-10


class BatchQuantStatsScaling1d(ExtendedInjector):
    """Scale a * mean over channels of max|x| + b (BatchQuant), statistics averaged over all
    batches seen (momentum None), input (N, C, F)."""

    scaling_impl_type = ScalingImplType.AFFINE_STATS
    scaling_stats_op = StatsOp.MAX_AVE
    scaling_stats_momentum = None
    affine_shift_scale = False
    scaling_stats_permute_dims = (1, 0, 2)  # channels first
    scaling_min_val = 1e-10


class BatchQuantStatsScaling2d(ExtendedInjector):
    """As BatchQuantStatsScaling1d, input (N, C, H, W)."""

    scaling_impl_type = ScalingImplType.AFFINE_STATS
    scaling_stats_op = StatsOp.MAX_AVE
    scaling_stats_momentum = None
    affine_shift_scale = False
    scaling_stats_permute_dims = (1, 0, 2, 3)  # channels first
    scaling_min_val = 1e-10


class ParamFromRuntimeMinMaxScaling(ExtendedInjector):
    """Learned scale, initialised from the range of x over the first 300 training steps."""

    scaling_impl_type = ScalingImplType.PARAMETER_FROM_STATS
    scaling_stats_op = StatsOp.MIN_MAX
    collect_stats_steps = 300
    scaling_min_val = 1e-10


class ParamFromRuntimePercentileIntervalScaling(ExtendedInjector):
    """Learned scale, initialised from the 0.001th..99.999th percentile interval of x over the
    first 300 training steps."""

    scaling_impl_type = ScalingImplType.PARAMETER_FROM_STATS
    scaling_stats_op = StatsOp.PERCENTILE_INTERVAL
    high_percentile_q = 99.999
    low_percentile_q = 0.001
    collect_stats_steps = 300
    scaling_min_val = 1e-10


class ParamMinMaxInitScaling(ExtendedInjector):
    """Learned scale, initialised from the user's min_val/max_val."""

    scaling_impl_type = ScalingImplType.PARAMETER


# ---- integer formats -----------------------------------------------------------------------------


class _RoundedConstBitWidthInt(ExtendedInjector):
    """What every integer format below shares: a constant bit width, round half to even."""

    quant_type = QuantType.INT
    bit_width_impl_type = BitWidthImplType.CONST
    float_to_int_impl_type = FloatToIntImplType.ROUND


class IntQuant(_RoundedConstBitWidthInt):
    """Signed integers [-2^(b-1), 2^(b-1) - 1], zero point 0, round half to even."""

    narrow_range = False
    signed = True
    zero_point_impl = ZeroZeroPoint


class NarrowIntQuant(_RoundedConstBitWidthInt):
    """Signed integers without the most negative value: [-(2^(b-1) - 1), 2^(b-1) - 1]."""

    narrow_range = True
    signed = True
    zero_point_impl = ZeroZeroPoint


class UintQuant(_RoundedConstBitWidthInt):
    """Unsigned integers [0, 2^b - 1], zero point 0."""

    narrow_range = False
    signed = False
    zero_point_impl = ZeroZeroPoint


class _ShiftedUint(_RoundedConstBitWidthInt):
    """What the shifted unsigned formats share: an integer zero point shaped and laid out like
    the scale."""

    narrow_range = False
    signed = False
    quantize_zero_point = True
    zero_point_shape = this.scaling_shape
    zero_point_stats_input_view_shape_impl = this.scaling_stats_input_view_shape_impl


class ShiftedMinUintQuant(_ShiftedUint):
    """Unsigned integers with an integer zero point from -min(x, 0) of the parameter, shaped
    and laid out like the scale."""

    zero_point_impl = StatsFromParameterZeroPoint
    zero_point_stats_impl = NegativeMinOrZero
    zero_point_stats_input_concat_dim = this.scaling_stats_input_concat_dim


class ShiftedParamFromPercentileUintQuant(_ShiftedUint):
    """Unsigned integers with a learned integer zero point, initialised from the negated 0.001th
    percentile of x (or 0) over the first training steps."""

    zero_point_impl = ParameterFromRuntimeZeroPoint
    zero_point_stats_impl = NegativePercentileOrZero
    low_percentile_q = 0.001


# ---- granularity and restriction of the scale ----------------------------------------------------


class PerChannelFloatScaling8bit(ExtendedInjector):
    """8 bits, one float scale per output channel."""

    scaling_per_output_type = ScalingPerOutputType.CHANNEL
    restrict_scaling_type = RestrictValueType.FP
    bit_width = 8


class PerTensorFloatScaling8bit(ExtendedInjector):
    """8 bits, one float scale."""

    scaling_per_output_type = ScalingPerOutputType.TENSOR
    restrict_scaling_type = RestrictValueType.FP
    bit_width = 8


class PerChannelPoTScaling8bit(ExtendedInjector):
    """8 bits, one power-of-two scale per output channel (exponent rounded up, so the range
    is never cut)."""

    scaling_per_output_type = ScalingPerOutputType.CHANNEL
    restrict_scaling_type = RestrictValueType.POWER_OF_TWO
    bit_width = 8
    restrict_value_float_to_int_impl = CeilSte


class PerTensorPoTScaling8bit(ExtendedInjector):
    """8 bits, one power-of-two scale (exponent rounded up)."""

    scaling_per_output_type = ScalingPerOutputType.TENSOR
    restrict_scaling_type = RestrictValueType.POWER_OF_TWO
    bit_width = 8
    restrict_value_float_to_int_impl = CeilSte


def _signed_clamped_binary_quant(signed, __self__):
    # Checked where the block is chosen: the block itself has no signed setting to refuse.
    require_signed(QuantType.BINARY, signed, __self__)
    return ClampedBinaryQuant


class SignedBinaryClampedConst(ExtendedInjector):
    """Values {-s, +s} with a constant scale s; inputs are clamped to [-s, s] first so the
    straight-through gradient vanishes outside it."""

    tensor_quant = value(_signed_clamped_binary_quant)
    scaling_impl_type = ScalingImplType.CONST
    restrict_scaling_type = RestrictValueType.FP
    float_to_int_impl_type = FloatToIntImplType.ROUND
    scaling_per_output_type = ScalingPerOutputType.TENSOR
    narrow_range = True
    signed = True


class PerTensorConstScaling2bit(ExtendedInjector):
    """2 bits with one constant float scale."""

    scaling_impl_type = ScalingImplType.CONST
    restrict_scaling_type = RestrictValueType.FP
    scaling_per_output_type = ScalingPerOutputType.TENSOR
    bit_width = 2
