"""Ready-made unsigned integer quantizers with an integer zero point (asymmetric ranges) and
floating-point scale factors (Brevitas's brevitas.quant.shifted_scaled_int)."""

from brevitas_cpp.inject.enum import ScalingPerOutputType
from brevitas_cpp.proxy import GroupwiseWeightQuantProxyFromInjector
from brevitas_cpp.quant.base import (
    HQOActZeroPoint,
    HQOWeightZeroPoint,
    MinMaxStatsScaling,
    MSEActZeroPoint,
    MSEAsymmetricScale,
    MSEWeightZeroPoint,
    ParamFromRuntimePercentileIntervalScaling,
    PerChannelFloatScaling8bit,
    PerTensorFloatScaling8bit,
    PerTensorPoTScaling8bit,
    ShiftedMinUintQuant,
    ShiftedParamFromPercentileUintQuant,
)
from brevitas_cpp.quant.solver.act import ActQuantSolver
from brevitas_cpp.quant.solver.weight import WeightQuantSolver

__all__ = [
    "ShiftedUint8ActPerTensorFixedPoint",
    "ShiftedUint8ActPerTensorFloat",
    "ShiftedUint8WeightPerTensorFloat",
    "ShiftedUint8WeightPerChannelFloat",
    "ShiftedUint8ActPerTensorFixedPointMSE",
    "ShiftedUint8ActPerTensorFloatMSE",
    "ShiftedUint8WeightPerTensorFloatMSE",
    "ShiftedUint8WeightPerChannelFloatMSE",
    "ShiftedUint8WeightGroupQuantFloat",
    "ShiftedUint8WeightPerTensorFloatHQO",
    "ShiftedUint8WeightPerChannelFloatHQO",
    "ShiftedUint8WeightPerGroupFloatHQO",
    "ShiftedUint8ActPerTensorFloatHQO",
]


class ShiftedUint8ActPerTensorFixedPoint(
    ShiftedParamFromPercentileUintQuant,
    ParamFromRuntimePercentileIntervalScaling,
    PerTensorPoTScaling8bit,
    ActQuantSolver,
):
    """Unsigned 8-bit activations with a learned power-of-two scale and a learned integer zero
    point, both initialised from runtime percentile statistics."""


class ShiftedUint8ActPerTensorFixedPointMSE(
    MSEAsymmetricScale, MSEActZeroPoint, ShiftedUint8ActPerTensorFixedPoint
):
    """ShiftedUint8ActPerTensorFixedPoint with scale and zero point initialised from MSE searches
    over the first training steps."""


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


class ShiftedUint8WeightGroupQuantFloat(ShiftedUint8WeightPerChannelFloat):
    """Unsigned 8-bit weights with a float scale and zero point per group of input channels.
    As in Brevitas it ships without a group size: give one, e.g. .let(group_size=32)."""

    proxy_class = GroupwiseWeightQuantProxyFromInjector
    scaling_per_output_type = ScalingPerOutputType.GROUP


class ShiftedUint8ActPerTensorFloatMSE(
    MSEAsymmetricScale, MSEActZeroPoint, ShiftedUint8ActPerTensorFloat
):
    """ShiftedUint8ActPerTensorFloat with scale and zero point initialised from MSE searches over
    the first training steps."""


class ShiftedUint8WeightPerTensorFloatMSE(
    MSEAsymmetricScale, MSEWeightZeroPoint, ShiftedUint8WeightPerTensorFloat
):
    """Unsigned 8-bit weights with a learned float scale and a learned integer zero point, per
    tensor, initialised by MSE searches on first use."""


class ShiftedUint8WeightPerChannelFloatMSE(
    MSEAsymmetricScale, MSEWeightZeroPoint, ShiftedUint8WeightPerChannelFloat
):
    """Unsigned 8-bit weights with a learned float scale and a learned integer zero point per
    output channel, initialised by MSE searches on first use."""


class ShiftedUint8WeightPerTensorFloatHQO(HQOWeightZeroPoint, ShiftedUint8WeightPerTensorFloat):
    """ShiftedUint8WeightPerTensorFloat with a learned, unrounded zero point initialised by
    HQO."""

    quantize_zero_point = False


class ShiftedUint8WeightPerChannelFloatHQO(HQOWeightZeroPoint, ShiftedUint8WeightPerChannelFloat):
    """ShiftedUint8WeightPerChannelFloat with learned, unrounded zero points initialised by HQO
    per channel."""

    quantize_zero_point = False


class ShiftedUint8WeightPerGroupFloatHQO(ShiftedUint8WeightPerChannelFloatHQO):
    """ShiftedUint8WeightPerChannelFloatHQO with a scale and zero point per group of 32 input
    channels."""

    group_size = 32
    scaling_per_output_type = ScalingPerOutputType.GROUP
    proxy_class = GroupwiseWeightQuantProxyFromInjector


class ShiftedUint8ActPerTensorFloatHQO(HQOActZeroPoint, ShiftedUint8ActPerTensorFloat):
    """ShiftedUint8ActPerTensorFloat with a learned, unrounded zero point initialised by HQO over
    the first collect_stats_steps training batches."""

    quantize_zero_point = False
