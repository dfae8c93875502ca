"""Ready-made integer quantizers with floating-point scale factors (Brevitas's
brevitas.quant.scaled_int). Derive from one to change a setting, e.g.
``class Int4WeightPerChannelFloat(Int8WeightPerChannelFloat): bit_width = 4``."""

from brevitas_cpp._unsupported import unsupported_getattr
from brevitas_cpp.core.function_wrapper import TensorClamp
from brevitas_cpp.quant.base import (
    AccumulatorAwareWeightQuant,
    AccumulatorAwareZeroCenterWeightQuant,
    BatchQuantStatsScaling1d,
    BatchQuantStatsScaling2d,
    HQOSymmetricScale,
    IntQuant,
    MaxStatsScaling,
    MSESymmetricScale,
    NarrowIntQuant,
    ParamFromRuntimePercentileScaling,
    ParamMinMaxInitScaling,
    PerChannelFloatScaling8bit,
    PerTensorFloatScaling8bit,
    UintQuant,
    WeightNormPerChannelFloatDecoupled,
    WeightPerChannelFloatDecoupled,
    WeightPerTensorFloatDecoupledL2Param,
)
from brevitas_cpp.quant.solver.act import ActQuantSolver
from brevitas_cpp.quant.solver.bias import BiasQuantSolver
from brevitas_cpp.quant.solver.trunc import TruncQuantSolver
from brevitas_cpp.quant.solver.weight import WeightQuantSolver

__all__ = [
    "IntBias",
    "Int8Bias",
    "Int16Bias",
    "Int24Bias",
    "Int32Bias",
    "Int8BiasPerTensorFloatInternalScaling",
    "Int8ActPerTensorFloatMinMaxInit",
    "Uint8ActPerTensorFloatMaxInit",
    "Int8ActPerTensorFloat",
    "Int8WeightPerTensorFloat",
    "Int8WeightPerChannelFloat",
    "Uint8ActPerTensorFloat",
    "Int8ActPerTensorFloatMSE",
    "Uint8ActPerTensorFloatMSE",
    "Int8WeightPerTensorFloatMSE",
    "Int8WeightPerChannelFloatMSE",
    "TruncTo8bit",
    "RoundTo8bit",
    "Int4WeightPerTensorFloatDecoupled",
    "Int8WeightPerChannelFloatDecoupled",
    "Int8WeightNormL2PerChannelFixedPoint",
    "Int8AccumulatorAwareWeightQuant",
    "Int8AccumulatorAwareZeroCenterWeightQuant",
    "Int8ActPerTensorFloatBatchQuant1d",
    "Int8ActPerTensorFloatBatchQuant2d",
    "Uint8ActPerTensorFloatBatchQuant1d",
    "Uint8ActPerTensorFloatBatchQuant2d",
    "Int8WeightPerTensorFloatHQO",
    "Int8WeightPerChannelFloatHQO",
]


class Int8ActPerTensorFloatMinMaxInit(
    IntQuant, ParamMinMaxInitScaling, PerTensorFloatScaling8bit, ActQuantSolver
):
    """Signed 8-bit activations, learned float scale initialised to max(|min_val|, |max_val|)
    (both given by the user)."""


class Uint8ActPerTensorFloatMaxInit(
    UintQuant, ParamMinMaxInitScaling, PerTensorFloatScaling8bit, ActQuantSolver
):
    """Unsigned 8-bit activations, learned float scale initialised to |max_val| (given by the
    user)."""

    min_val = 0.0


class IntBias(IntQuant, BiasQuantSolver):
    """Signed int bias with the scale of the accumulator it is added to (input scale times weight
    scale), passed in at call time; set bit_width (see Int8Bias, ..., Int32Bias)."""

    tensor_clamp_impl = TensorClamp
    requires_input_scale = True


class Int8Bias(IntBias):
    """IntBias on 8 bits."""

    bit_width = 8


class Int16Bias(IntBias):
    """IntBias on 16 bits."""

    bit_width = 16


class Int24Bias(IntBias):
    """IntBias on 24 bits."""

    bit_width = 24


class Int32Bias(IntBias):
    """IntBias on 32 bits."""

    bit_width = 32


class Int8BiasPerTensorFloatInternalScaling(
    IntQuant, MaxStatsScaling, PerTensorFloatScaling8bit, BiasQuantSolver
):
    """Signed 8-bit bias with its own float scale max|b| / 127."""

    requires_input_scale = False


class Int8WeightPerTensorFloat(
    NarrowIntQuant, MaxStatsScaling, PerTensorFloatScaling8bit, WeightQuantSolver
):
    """Narrow signed 8-bit weights, one float scale max|w| / 127."""


class Int8WeightPerChannelFloat(
    NarrowIntQuant, MaxStatsScaling, PerChannelFloatScaling8bit, WeightQuantSolver
):
    """Narrow signed 8-bit weights, one float scale per output channel, max|w_c| / 127."""


class Int8ActPerTensorFloat(
    IntQuant, ParamFromRuntimePercentileScaling, PerTensorFloatScaling8bit, ActQuantSolver
):
    """Signed 8-bit activations, learned float scale initialised from runtime percentile
    statistics."""


class Uint8ActPerTensorFloat(
    UintQuant, ParamFromRuntimePercentileScaling, PerTensorFloatScaling8bit, ActQuantSolver
):
    """Unsigned 8-bit activations, learned float scale initialised from runtime percentile
    statistics."""


class Int8WeightPerTensorFloatMSE(MSESymmetricScale, Int8WeightPerTensorFloat):
    """Narrow signed 8-bit weights, one learned float scale initialised by an MSE search over
    fractions of max|w| / 127."""


class Int8WeightPerChannelFloatMSE(MSESymmetricScale, Int8WeightPerChannelFloat):
    """Narrow signed 8-bit weights, one learned float scale per output channel initialised by an
    MSE search per channel."""


class Int8ActPerTensorFloatMSE(MSESymmetricScale, Int8ActPerTensorFloat):
    """Signed 8-bit activations, learned float scale initialised from MSE searches over the first
    training steps."""


class Uint8ActPerTensorFloatMSE(MSESymmetricScale, Uint8ActPerTensorFloat):
    """Unsigned 8-bit activations, learned float scale initialised from MSE searches over the
    first training steps."""


class TruncTo8bit(TruncQuantSolver):
    """Requantizes to 8 bits keeping the most significant bits, rounding down (floor); the zero
    point is kept."""

    bit_width = 8
    quant_type = "int"
    bit_width_impl_type = "const"
    float_to_int_impl_type = "floor"
    trunc_scaling_impl_type = "msb"


class RoundTo8bit(TruncQuantSolver):
    """As TruncTo8bit, rounding half to even."""

    bit_width = 8
    quant_type = "int"
    bit_width_impl_type = "const"
    float_to_int_impl_type = "round"
    trunc_scaling_impl_type = "msb"


class Int4WeightPerTensorFloatDecoupled(WeightPerTensorFloatDecoupledL2Param):
    """4-bit narrow signed per-tensor weights with decoupled L2,inf normalization and a learned
    scale, e.g. for depthwise separable weights retrained from a float model (experimental in
    Brevitas)."""

    bit_width = 4


class Int8WeightPerChannelFloatDecoupled(WeightPerChannelFloatDecoupled):
    """8-bit narrow signed per-channel weights with decoupled Linf normalization and a learned
    scale (experimental in Brevitas)."""

    bit_width = 8


class Int8WeightNormL2PerChannelFixedPoint(WeightNormPerChannelFloatDecoupled):
    """8-bit narrow signed per-channel weights with L2 weight normalization (A2Q paper): scales
    and norms learned in the log2 domain, round half to even. (Brevitas's name; the scales are
    not restricted to powers of two.)"""

    bit_width = 8


class Int8AccumulatorAwareWeightQuant(AccumulatorAwareWeightQuant):
    """8-bit narrow signed accumulator-aware (A2Q) per-channel weights: scales and norms learned
    in the log2 domain, round towards zero, the norms bounded for accumulator_bit_width (32 by
    default; e.g. weight_accumulator_bit_width=16 on the layer)."""

    bit_width = 8


class Int8AccumulatorAwareZeroCenterWeightQuant(AccumulatorAwareZeroCenterWeightQuant):
    """8-bit narrow signed zero-centered accumulator-aware (A2Q+) per-channel weights: each
    channel's mean is removed before rounding and the norms are bounded for
    accumulator_bit_width (32 by default)."""

    bit_width = 8


class Int8ActPerTensorFloatBatchQuant2d(
    IntQuant, BatchQuantStatsScaling2d, PerTensorFloatScaling8bit, ActQuantSolver
):
    """Signed 8-bit activations of shape (N, C, H, W) with scale a * mean over channels of
    max|x| (BatchQuant, Bai et al. 2021): a learned, the statistic a true average over every
    batch seen (recompute it on calibration data after training)."""


class Uint8ActPerTensorFloatBatchQuant2d(
    UintQuant, BatchQuantStatsScaling2d, PerTensorFloatScaling8bit, ActQuantSolver
):
    """Int8ActPerTensorFloatBatchQuant2d, unsigned."""


class Int8ActPerTensorFloatBatchQuant1d(
    IntQuant, BatchQuantStatsScaling1d, PerTensorFloatScaling8bit, ActQuantSolver
):
    """Int8ActPerTensorFloatBatchQuant2d for inputs of shape (N, C, F)."""


class Uint8ActPerTensorFloatBatchQuant1d(
    UintQuant, BatchQuantStatsScaling1d, PerTensorFloatScaling8bit, ActQuantSolver
):
    """Int8ActPerTensorFloatBatchQuant1d, unsigned."""


class Int8WeightPerTensorFloatHQO(HQOSymmetricScale, Int8WeightPerTensorFloat):
    """Int8WeightPerTensorFloat with a learned scale initialised by HQO from max|w|."""


class Int8WeightPerChannelFloatHQO(HQOSymmetricScale, Int8WeightPerChannelFloat):
    """Int8WeightPerChannelFloat with learned scales initialised by HQO from max|w| per
    channel."""


# Brevitas names brevitas_cpp does not support raise on use (brevitas_cpp._unsupported).
__getattr__ = unsupported_getattr(__name__)
