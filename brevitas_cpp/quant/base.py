"""Setting mixins the ready-made quantizers are assembled from (Brevitas's brevitas.quant.base):
the integer format (IntQuant, UintQuant, ...), how the scale is obtained (MaxStatsScaling,
ParamFromRuntimePercentileScaling, ...) and its granularity and restriction
(PerTensorFloatScaling8bit, PerChannelPoTScaling8bit, ...).

They only declare settings; a solver listed last among a quantizer's bases turns them into blocks.
"""

import numbers

from brevitas_cpp.core.bit_width import BitWidthConst, BitWidthStatefulConst
from brevitas_cpp.core.function_wrapper import (
    CeilSte,
    Identity,
    OverOutputChannelView,
    RoundToZeroSte,
    StatsInputViewShapeImpl,
    TensorClamp,
    TensorClampSte,
)
from brevitas_cpp.core.quant import (
    ClampedBinaryQuant,
    DecoupledIntQuant,
    DecoupledRescalingIntQuant,
    DecoupledRescalingIntQuantWithInput,
)
from brevitas_cpp.core.restrict_val import FloatRestrictValue, LogFloatRestrictValue
from brevitas_cpp.core.scaling import (
    SCALAR_SHAPE,
    SCALING_STATS_REDUCE_DIM,
    AccumulatorAwareParameterPreScaling,
    AccumulatorAwareZeroCenterParameterPreScaling,
    IntScaling,
    ParameterFromStatsFromParameterScaling,
    ParameterPreScalingWeightNorm,
    ParameterScaling,
    StatsFromParameterScaling,
)
from brevitas_cpp.core.stats import (
    MSE,
    AbsMax,
    AbsMaxL2,
    AbsMinMax,
    HalfQuadraticOptimizerScale,
    HalfQuadraticOptimizerZeroPoint,
    L1Norm,
    L2Norm,
    NegativeMinOrZero,
    NegativePercentileOrZero,
)
from brevitas_cpp.core.utils import SingleArgStatelessBuffer
from brevitas_cpp.core.zero_point import (
    ParameterFromRuntimeZeroPoint,
    ParameterFromStatsFromParameterZeroPoint,
    PreZeroCenterZeroPoint,
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
from brevitas_cpp.proxy import (
    DecoupledWeightQuantProxyFromInjector,
    DecoupledWeightQuantWithInputProxyFromInjector,
)
from brevitas_cpp.quant.solver.common import (
    QuantizerSolveError,
    SolveScaleSignedness,
    SolveStatsReduceDimFromEnum,
    _stats_scale_signedness,
    quantizer_name,
    require_signed,
)
from brevitas_cpp.quant.solver.parameter import SolveInputViewImpl, SolveParameterScalingShape
from brevitas_cpp.quant.solver.weight import (
    SolveWeightScalingPerOutputChannelShapeFromModule,
    SolveWeightScalingStatsInputDimsFromModule,
)

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
    "WeightPerTensorFloatDecoupledL2Param",
    "WeightPerChannelFloatDecoupled",
    "WeightNormPerChannelFloatDecoupled",
    "AccumulatorAwareWeightQuant",
    "AccumulatorAwareZeroCenterWeightQuant",
    "MSESymmetricScale",
    "MSEAsymmetricScale",
    "MSEWeightZeroPoint",
    "MSEActZeroPoint",
    "HQOZeroPoint",
    "HQOScale",
    "HQOAsymmetricScale",
    "HQOSymmetricScale",
    "HQOActZeroPoint",
    "HQOWeightZeroPoint",
    "MSEZeroPoint",
    "MSESymmetricScaleSubInjector",
    "MSEAsymmetricScaleSubInjector",
    "MSEZeroPointSubInjector",
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


# ---- scale and zero point from an MSE search ---------------------------------------------------


def _mse_input_view(scaling_per_output, __self__):
    """How an MSE block lays out its input, the loss and the statistic: per output channel, per
    group or as a whole."""
    if scaling_per_output == ScalingPerOutputType.CHANNEL:
        return StatsInputViewShapeImpl.OVER_OUTPUT_CHANNELS
    if scaling_per_output == ScalingPerOutputType.TENSOR:
        return StatsInputViewShapeImpl.OVER_TENSOR
    if scaling_per_output == ScalingPerOutputType.GROUP:
        return StatsInputViewShapeImpl.OVER_SUBCHANNEL_BLOCK
    raise QuantizerSolveError(
        f"{quantizer_name(__self__)}: an MSE search needs per-tensor, per-channel or per-group "
        f"scaling (scaling_per_output_type TENSOR, CHANNEL or GROUP), got {scaling_per_output!r}"
    )


def _from_parent_or_none(name: str):
    """A sub-injector setting read from the quantizer, or None where the quantizer has none
    (activation quantizers have no dtype/device, which Brevitas's sub-injectors fail on)."""

    def read(__parent__):
        return getattr(__parent__, name, None)

    return value(read)


class _MSESubInjector(ExtendedInjector):
    """What the MSE blocks of a quantizer read from it (the settings of ``mse_scale`` and
    ``mse_zero_point``, e.g. ``mse_search_method``, are their own). The search is ``grid``, with
    MSE's default ``mse_iters`` (20); override them with e.g.
    ``mse_scale = MSESymmetricScaleSubInjector.let(mse_search_method="fibonacci")``."""

    scaling_per_output = (this << 1).scaling_per_output
    proxy_module = (this << 1).proxy_module
    stats_impl = MSE
    stats_reduce_dim = (this << 1).stats_reduce_dim
    dtype = _from_parent_or_none("dtype")
    device = _from_parent_or_none("device")
    permute_dims = (this << 1).permute_dims
    inner_stats_input_view_shape_impl = (this << 1).inner_stats_input_view_shape_impl
    mse_search_method = "grid"


class MSESymmetricScaleSubInjector(_MSESubInjector):
    """The MSE block of a symmetric scale: candidates are fractions of max|x|."""

    mse_init_op = AbsMax


class MSEAsymmetricScaleSubInjector(_MSESubInjector):
    """The MSE block of an asymmetric scale: candidates are fractions of max(x) - min(x, 0)."""

    mse_init_op = AbsMinMax


class MSEZeroPointSubInjector(_MSESubInjector):
    """The MSE block of a zero point (per channel when the scale is): candidates are fractions of
    min(x, 0)."""

    mse_init_op = NegativeMinOrZero


class _MSEScale(ExtendedInjector):
    """A learned scale initialised from the MSE block built by ``mse_scale`` (a sub-injector, so
    that its settings do not clash with the zero point's). The block views its input itself."""

    scaling_impl_type = ScalingImplType.PARAMETER_FROM_STATS
    scaling_stats_input_view_shape_impl = Identity
    inner_stats_input_view_shape_impl = value(_mse_input_view)

    @value
    def scaling_stats_impl():
        return this.mse_scale.stats_impl

    @value
    def is_scale_unsigned(mse_scale):
        return _stats_scale_signedness(mse_scale.mse_init_op)


class MSESymmetricScale(_MSEScale):
    """Scale initialised from the fraction of max|x| with the least squared error."""

    mse_scale = MSESymmetricScaleSubInjector


class MSEAsymmetricScale(_MSEScale):
    """Scale initialised from the fraction of max(x) - min(x, 0) with the least squared error."""

    mse_scale = MSEAsymmetricScaleSubInjector


class MSEZeroPoint(ExtendedInjector):
    """Zero point initialised from the MSE block built by ``mse_zero_point``."""

    mse_zero_point = MSEZeroPointSubInjector
    zero_point_stats_input_view_shape_impl = Identity
    inner_stats_input_view_shape_impl = value(_mse_input_view)

    @value
    def zero_point_stats_impl():
        return this.mse_zero_point.stats_impl


class MSEWeightZeroPoint(MSEZeroPoint):
    """Learned zero point of a weight, initialised by an MSE search on its first use."""

    zero_point_impl = ParameterFromStatsFromParameterZeroPoint


class MSEActZeroPoint(MSEZeroPoint):
    """Learned zero point of an activation, initialised from MSE searches over the first
    collect_stats_steps training batches."""

    zero_point_impl = ParameterFromRuntimeZeroPoint


# ---- scale and zero point from half-quadratic optimization (HQO) ------------------------------


class HQOZeroPoint(ExtendedInjector):
    """Zero point initialised by HQO from -min(x, 0) (core/stats/hqo.py); the block views its
    input as the zero point's statistics do."""

    hqo_init_op_zp = NegativeMinOrZero
    inner_stats_input_view_shape_impl = this.zero_point_stats_input_view_shape_impl
    stats_impl_zp = HalfQuadraticOptimizerZeroPoint

    @value
    def zero_point_stats_impl():
        return this.stats_impl_zp


class HQOScale(ExtendedInjector):
    """A learned scale initialised by HQO (core/stats/hqo.py); the block views its input as the
    scale's statistics do."""

    scaling_impl_type = ScalingImplType.PARAMETER_FROM_STATS
    inner_stats_input_view_shape_impl = this.scaling_stats_input_view_shape_impl
    stats_impl_scale = HalfQuadraticOptimizerScale

    @value
    def scaling_stats_impl():
        return this.stats_impl_scale

    @value
    def is_scale_unsigned(hqo_init_op_scale):
        return _stats_scale_signedness(hqo_init_op_scale)


class HQOAsymmetricScale(HQOScale):
    """HQO scale starting from max(x) - min(x, 0)."""

    hqo_init_op_scale = AbsMinMax


class HQOSymmetricScale(HQOScale):
    """HQO scale starting from max|x|."""

    hqo_init_op_scale = AbsMax


class HQOActZeroPoint(HQOZeroPoint):
    """Learned zero point of an activation, initialised by HQO over the first
    collect_stats_steps training batches."""

    zero_point_impl = ParameterFromRuntimeZeroPoint


class HQOWeightZeroPoint(HQOZeroPoint):
    """Learned zero point of a weight, initialised by HQO on its first use."""

    zero_point_impl = ParameterFromStatsFromParameterZeroPoint


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


# ---- decoupled, weight-normalization and accumulator-aware weight quantizers --------------------
# A decoupled quantizer rounds w / pre_scale and dequantizes with another scale (the learned
# post-clipping one): DecoupledRescalingIntQuant, built from the blocks named here directly.


class WeightPerTensorFloatDecoupledL2Param(
    SolveWeightScalingStatsInputDimsFromModule, SolveScaleSignedness
):
    """Narrow signed per-tensor weights rounded with pre_scale = the RMS over output channels
    of max|w_c| (AbsMaxL2) / max_int, and dequantized with a learned per-tensor scale
    initialised from the same statistic (experimental in Brevitas)."""

    proxy_class = DecoupledWeightQuantProxyFromInjector
    tensor_quant = DecoupledRescalingIntQuant
    decoupled_int_quant = DecoupledIntQuant
    tensor_clamp_impl = TensorClampSte
    pre_scaling_impl = StatsFromParameterScaling
    scaling_stats_impl = AbsMaxL2
    scaling_stats_input_view_shape_impl = OverOutputChannelView
    scaling_stats_input_concat_dim = 0
    stats_reduce_dim = SCALING_STATS_REDUCE_DIM
    restrict_scaling_impl = FloatRestrictValue
    scaling_shape = SCALAR_SHAPE
    scaling_per_output_type = ScalingPerOutputType.TENSOR
    input_view_impl = Identity
    scaling_impl_type = ScalingImplType.PARAMETER_FROM_STATS
    scaling_impl = ParameterFromStatsFromParameterScaling
    int_scaling_impl = IntScaling
    zero_point_impl = ZeroZeroPoint
    pre_zero_point_impl = ZeroZeroPoint
    bit_width_impl = BitWidthConst
    narrow_range = True
    signed = True


class WeightPerChannelFloatDecoupled(
    SolveStatsReduceDimFromEnum,
    SolveWeightScalingStatsInputDimsFromModule,
    SolveWeightScalingPerOutputChannelShapeFromModule,
    SolveParameterScalingShape,
    SolveInputViewImpl,
    SolveScaleSignedness,
):
    """Narrow signed weights rounded with pre_scale = max|w_c| / max_int per output channel
    and dequantized with a learned per-channel scale initialised from the same statistic
    (experimental in Brevitas)."""

    proxy_class = DecoupledWeightQuantProxyFromInjector
    tensor_quant = DecoupledRescalingIntQuant
    decoupled_int_quant = DecoupledIntQuant
    tensor_clamp_impl = TensorClampSte
    pre_scaling_impl = StatsFromParameterScaling
    scaling_stats_impl = AbsMax
    restrict_scaling_impl = FloatRestrictValue
    scaling_impl = ParameterFromStatsFromParameterScaling
    scaling_impl_type = ScalingImplType.PARAMETER_FROM_STATS
    int_scaling_impl = IntScaling
    zero_point_impl = ZeroZeroPoint
    pre_zero_point_impl = ZeroZeroPoint
    bit_width_impl = BitWidthConst
    narrow_range = True
    signed = True
    scaling_stats_input_view_shape_impl = OverOutputChannelView
    stats_reduce_dim = SCALING_STATS_REDUCE_DIM
    scaling_per_output_type = ScalingPerOutputType.CHANNEL


class PerChannelL2Norm(ExtendedInjector):
    """Weight normalization by each output channel's L2 norm."""

    stats_reduce_dim = SCALING_STATS_REDUCE_DIM
    normalize_stats_impl = L2Norm


class PerChannelL1Norm(ExtendedInjector):
    """Weight normalization by each output channel's L1 norm (A2Q)."""

    stats_reduce_dim = SCALING_STATS_REDUCE_DIM
    normalize_stats_impl = L1Norm


class PerChannelPreNorm(ExtendedInjector):
    """The pre-clipping scale of weight normalization, built in its own injector (nested in the
    quantizer, whose settings it reads with ``this << 1``): only what is forwarded here reaches
    it, so e.g. restrict_pre_scaling_impl and pre_scaling_min_val stay unset, as in Brevitas.
    Its scaling_impl is a second instance of the quantizer's post-clipping scale."""

    pre_scaling_impl = ParameterPreScalingWeightNorm
    scaling_stats_input_view_shape_impl = OverOutputChannelView
    scaling_impl = (this << 1).scaling_impl
    normalize_stats_impl = (this << 1).normalize_stats_impl
    tracked_parameter_list = (this << 1).tracked_parameter_list
    pre_scaling_shape = (this << 1).pre_scaling_shape
    permute_dims = (this << 1).permute_dims


class AccumulatorAwarePerChannelPreNorm(PerChannelPreNorm):
    """A2Q's pre-clipping scale, bounded by the accumulator bit width."""

    pre_scaling_impl = AccumulatorAwareParameterPreScaling
    accumulator_bit_width = (this << 1).accumulator_bit_width
    accumulator_bit_width_impl = (this << 1).accumulator_bit_width_impl
    restrict_pre_scaling_impl = (this << 1).restrict_pre_scaling_impl


class AccumulatorAwareZeroCenterPerChannelPreNorm(AccumulatorAwarePerChannelPreNorm):
    """A2Q+'s pre-clipping scale and its zero-centering pre-clipping zero point."""

    pre_scaling_impl = AccumulatorAwareZeroCenterParameterPreScaling
    pre_zero_point_impl = PreZeroCenterZeroPoint
    pre_zero_point_shape = this.pre_scaling_shape  # one center per channel, like the scale
    pre_zero_point_stats_input_view_shape_impl = this.scaling_stats_input_view_shape_impl
    stats_reduce_dim = SCALING_STATS_REDUCE_DIM
    scaling_shape = (this << 1).scaling_shape
    restrict_pre_scaling_impl = (this << 1).restrict_pre_scaling_impl


class SolvePostScaleGranularity(ExtendedInjector):
    """Statistics layout of the post-clipping scale, from scaling_per_output_type."""

    @value
    def scaling_stats_input_view_shape_impl(scaling_per_output_type):
        if scaling_per_output_type == ScalingPerOutputType.TENSOR:
            return StatsInputViewShapeImpl.OVER_TENSOR
        if scaling_per_output_type == ScalingPerOutputType.CHANNEL:
            return StatsInputViewShapeImpl.OVER_OUTPUT_CHANNELS
        return None

    @value
    def stats_reduce_dim(scaling_per_output_type):
        if scaling_per_output_type == ScalingPerOutputType.CHANNEL:
            return SCALING_STATS_REDUCE_DIM
        return None


class WeightNormPerChannelFloatDecoupled(
    SolvePostScaleGranularity,
    SolveStatsReduceDimFromEnum,
    SolveWeightScalingStatsInputDimsFromModule,
    SolveWeightScalingPerOutputChannelShapeFromModule,
    SolveParameterScalingShape,
    SolveScaleSignedness,
    SolveInputViewImpl,
):
    """Weight-normalization-based quantization (Colbert et al.), narrow signed, per output
    channel: y = clip(round((g / s) * (w / ||w||_2))) * s, computed as
    clip(round(w / pre_scale)) * s with pre_scale = s * ||w||_2 / g (ParameterPreScalingWeightNorm).
    The post-clipping scale s is learned in the log2 domain, initialised to max|w_c| / max_int;
    the norm g is learned too, initialised to ||w_c||_2."""

    @value
    def scaling_init(scaling_init_impl, bit_width):
        return scaling_init_impl.parameter_list_stats() / (pow(2.0, bit_width - 1.0) - 1.0)

    per_channel_pre_norm = PerChannelPreNorm
    # The scale's initial statistic is read from the tracked parameter even with a single one.
    force_parameter = True
    proxy_class = DecoupledWeightQuantProxyFromInjector
    tensor_quant = DecoupledRescalingIntQuant
    decoupled_int_quant = DecoupledIntQuant
    tensor_clamp_impl = TensorClamp
    scaling_impl = ParameterScaling
    scaling_impl_type = ScalingImplType.PARAMETER
    scaling_init_impl = StatsFromParameterScaling
    restrict_scaling_impl = LogFloatRestrictValue
    scaling_stats_impl = AbsMax
    restrict_pre_scaling_impl = LogFloatRestrictValue
    normalize_stats_impl = PerChannelL2Norm.normalize_stats_impl
    scaling_per_output_type = ScalingPerOutputType.CHANNEL
    pre_scaling_shape = this.scaling_per_output_channel_shape
    zero_point_impl = ZeroZeroPoint
    pre_zero_point_impl = ZeroZeroPoint
    bit_width_impl = BitWidthConst
    narrow_range = True
    signed = True
    scaling_min_val = 1e-10
    pre_scaling_min_val = 1e-10

    @value
    def int_scaling_impl():
        # The scales are thresholds already: a threshold of 1. A fresh block per quantizer
        # (Brevitas shares one instance, which .to() of one model would move under the others).
        return SingleArgStatelessBuffer(1.0)

    @value
    def pre_scaling_impl():
        return this.per_channel_pre_norm.pre_scaling_impl


def _accumulator_bit_width_impl(accumulator_bit_width, __self__):
    # Checked here so that the error names the quantizer's setting, not the block's argument.
    if (
        isinstance(accumulator_bit_width, bool)
        or not isinstance(accumulator_bit_width, numbers.Integral)
        or accumulator_bit_width < 2
    ):
        raise QuantizerSolveError(
            f"{quantizer_name(__self__)}: accumulator_bit_width must be an int >= 2 (the bits "
            f"of the signed accumulator the layer's dot products must fit), got "
            f"{accumulator_bit_width!r}"
        )
    return BitWidthStatefulConst(int(accumulator_bit_width))


class AccumulatorAwareWeightQuant(WeightNormPerChannelFloatDecoupled):
    """Accumulator-aware quantization, A2Q (Colbert et al.): weight normalization by the L1 norm
    with g / s clamped so that every output channel's integer weights q satisfy
    sum|q| <= (2^(P-1) - 1) * 2^(signed - N) for a P-bit accumulator (accumulator_bit_width,
    default 32) and the layer's N-bit input: no dot product can overflow it. Rounds towards zero,
    so rounding never raises the L1 norm. Needs the layer's quantized input
    (DecoupledWeightQuantWithInputProxyFromInjector)."""

    proxy_class = DecoupledWeightQuantWithInputProxyFromInjector
    tensor_quant = DecoupledRescalingIntQuantWithInput
    per_channel_pre_norm = AccumulatorAwarePerChannelPreNorm
    normalize_stats_impl = PerChannelL1Norm.normalize_stats_impl  # the paper's derivation
    float_to_int_impl = RoundToZeroSte  # rounding up could break the bound
    accumulator_bit_width = 32
    accumulator_bit_width_impl = value(_accumulator_bit_width_impl)


class AccumulatorAwareZeroCenterWeightQuant(AccumulatorAwareWeightQuant):
    """A2Q+ ("A2Q+: Improving Accumulator-Aware Weight Quantization"): A2Q on weights
    zero-centered per output channel before rounding (PreZeroCenterZeroPoint), under the relaxed
    bound sum|q| <= (2^P - 2) / (2^N - 1)."""

    per_channel_pre_norm = AccumulatorAwareZeroCenterPerChannelPreNorm

    @value
    def pre_zero_point_impl():
        return this.per_channel_pre_norm.pre_zero_point_impl
