"""Ready-made fixed-point quantizers: integer formats whose scale is a power of two, 2^ceil(log2 s),
so the radix point is a shift (Brevitas's brevitas.quant.fixed_point)."""

from brevitas_cpp.quant.base import (
    IntQuant,
    MaxStatsScaling,
    NarrowIntQuant,
    ParamFromRuntimePercentileScaling,
    ParamMinMaxInitScaling,
    PerChannelPoTScaling8bit,
    PerTensorPoTScaling8bit,
    UintQuant,
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
