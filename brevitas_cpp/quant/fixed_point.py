"""Ready-made fixed-point quantizers: integer formats whose scale is a power of two, 2^ceil(log2 s),
so the radix point is a shift (Brevitas's brevitas.quant.fixed_point)."""

from brevitas_cpp.core.function_wrapper import CeilSte
from brevitas_cpp.core.restrict_val import PowerOfTwoRestrictValue
from brevitas_cpp.core.scaling import PowerOfTwoIntScaling
from brevitas_cpp.quant.base import (
    IntQuant,
    MaxStatsScaling,
    MSESymmetricScale,
    NarrowIntQuant,
    ParamFromRuntimePercentileScaling,
    ParamMinMaxInitScaling,
    PerChannelPoTScaling8bit,
    PerTensorPoTScaling8bit,
    UintQuant,
    WeightPerTensorFloatDecoupledL2Param,
)
from brevitas_cpp.quant.solver.act import ActQuantSolver
from brevitas_cpp.quant.solver.bias import BiasQuantSolver
from brevitas_cpp.quant.solver.weight import WeightQuantSolver

__all__ = [
    "Int8WeightPerTensorFixedPoint",
    "Int8WeightPerChannelFixedPoint",
    "Int8ActPerTensorFixedPoint",
    "Uint8ActPerTensorFixedPoint",
    "Int8BiasPerTensorFixedPointInternalScaling",
    "Uint8ActPerTensorFixedPointMaxInit",
    "Int8WeightPerTensorFixedPointMSE",
    "Int8WeightPerChannelFixedPointMSE",
    "Uint8ActPerTensorFixedPointMSE",
    "Int8ActPerTensorFixedPointMSE",
    "Int4WeightPerTensorFixedPointDecoupled",
]


class Int8WeightPerTensorFixedPoint(
    NarrowIntQuant, MaxStatsScaling, PerTensorPoTScaling8bit, WeightQuantSolver
):
    """Narrow signed 8-bit weights, scale 2^ceil(log2(max|w| / 127))."""


class Int8WeightPerChannelFixedPoint(
    NarrowIntQuant, MaxStatsScaling, PerChannelPoTScaling8bit, WeightQuantSolver
):
    """Narrow signed 8-bit weights, scale 2^ceil(log2(max|w_c| / 127)) per output channel."""


class Int8ActPerTensorFixedPoint(
    IntQuant, ParamFromRuntimePercentileScaling, PerTensorPoTScaling8bit, ActQuantSolver
):
    """Signed 8-bit activations, learned power-of-two scale initialised from runtime percentile
    statistics."""


class Uint8ActPerTensorFixedPoint(
    UintQuant, ParamFromRuntimePercentileScaling, PerTensorPoTScaling8bit, ActQuantSolver
):
    """Unsigned 8-bit activations, learned power-of-two scale initialised from runtime
    percentile statistics."""


class Int8ActPerTensorFixedPointMinMaxInit(
    IntQuant, ParamMinMaxInitScaling, PerTensorPoTScaling8bit, ActQuantSolver
):
    """Signed 8-bit activations, learned power-of-two scale initialised from
    max(|min_val|, |max_val|) (given by the user). Public but outside __all__, as in Brevitas."""


class Uint8ActPerTensorFixedPointMaxInit(
    UintQuant, ParamMinMaxInitScaling, PerTensorPoTScaling8bit, ActQuantSolver
):
    """Unsigned 8-bit activations, learned power-of-two scale initialised from |max_val| (given
    by the user)."""

    min_val = 0.0


class Int8BiasPerTensorFixedPointInternalScaling(
    IntQuant, MaxStatsScaling, PerTensorPoTScaling8bit, BiasQuantSolver
):
    """Signed 8-bit bias with its own power-of-two scale 2^ceil(log2(max|b| / 127))."""

    requires_input_scale = False


class Int4WeightPerTensorFixedPointDecoupled(WeightPerTensorFloatDecoupledL2Param):
    """4-bit narrow signed per-tensor weights with decoupled L2,inf normalization and a learned
    power-of-two scale (radix point), e.g. for depthwise separable weights retrained from a
    float model (experimental in Brevitas, which leaves it out of its module's __all__)."""

    bit_width = 4
    restrict_scaling_impl = PowerOfTwoRestrictValue
    int_scaling_impl = PowerOfTwoIntScaling
    restrict_value_float_to_int_impl = CeilSte


class Int8WeightPerTensorFixedPointMSE(MSESymmetricScale, Int8WeightPerTensorFixedPoint):
    """Narrow signed 8-bit weights, learned power-of-two scale initialised by an MSE search."""


class Int8WeightPerChannelFixedPointMSE(MSESymmetricScale, Int8WeightPerChannelFixedPoint):
    """Narrow signed 8-bit weights, one learned power-of-two scale per output channel initialised
    by an MSE search per channel."""


class Int8ActPerTensorFixedPointMSE(MSESymmetricScale, Int8ActPerTensorFixedPoint):
    """Signed 8-bit activations, learned power-of-two scale initialised from MSE searches over
    the first training steps."""


class Uint8ActPerTensorFixedPointMSE(MSESymmetricScale, Uint8ActPerTensorFixedPoint):
    """Unsigned 8-bit activations, learned power-of-two scale initialised from MSE searches over
    the first training steps."""
