"""Ready-made unsigned integer quantizers with an integer zero point (asymmetric ranges) and
floating-point scale factors (Brevitas's brevitas.quant.shifted_scaled_int)."""

from brevitas_cpp.quant.base import (
    MinMaxStatsScaling,
    ParamFromRuntimePercentileIntervalScaling,
    PerChannelFloatScaling8bit,
    PerTensorFloatScaling8bit,
    ShiftedMinUintQuant,
    ShiftedParamFromPercentileUintQuant,
)
from brevitas_cpp.quant.solver.act import ActQuantSolver
from brevitas_cpp.quant.solver.weight import WeightQuantSolver

__all__ = [
    "ShiftedUint8ActPerTensorFloat",
    "ShiftedUint8WeightPerTensorFloat",
    "ShiftedUint8WeightPerChannelFloat",
]


class ShiftedUint8ActPerTensorFloat(
    ShiftedParamFromPercentileUintQuant,
    ParamFromRuntimePercentileIntervalScaling,
    PerTensorFloatScaling8bit,
    ActQuantSolver,
):
    """Unsigned 8-bit activations with learned float scale and learned integer zero point, both
    initialised from runtime percentile statistics."""


class ShiftedUint8WeightPerTensorFloat(
    ShiftedMinUintQuant, MinMaxStatsScaling, PerTensorFloatScaling8bit, WeightQuantSolver
):
    """Unsigned 8-bit weights, scale (max - min) / 255 and zero point from -min, per tensor."""


class ShiftedUint8WeightPerChannelFloat(
    ShiftedMinUintQuant, MinMaxStatsScaling, PerChannelFloatScaling8bit, WeightQuantSolver
):
    """Unsigned 8-bit weights, scale (max - min) / 255 and zero point from -min, per output
    channel."""
