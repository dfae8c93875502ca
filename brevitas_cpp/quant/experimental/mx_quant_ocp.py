"""OCP Microscaling (MX) quantizers (Brevitas's ``brevitas.quant.experimental.mx_quant_ocp``):
elements in groups of 32 along the input channels (weights) or the reduced dimension
(activations: the features of a linear layer's input, the channels of a convolution's), each
group sharing a power-of-two scale, with INT8 or FP8 E4M3 elements.

The shared scale is 2^floor(log2 max|x| of the group) / 2^floor(log2 threshold), the threshold
being the element format's largest value, both restricted to powers of two by rounding the log2
down (restrict_value_float_to_int_impl = FloorSte): 2^8 for FP8 E4M3 (448), the OCP shared
exponent; 2^7 for INT8 (Brevitas's PowerOfTwoIntScaling, 2^(bit_width - 1)), one more than the
OCP specification's 2^6, so that values from 127/128 of the group's largest power of two up
saturate at 127 (kept: the numbers are Brevitas's). Activations recompute the scale from every
input (RuntimeDynamicGroupStatsScaling), training and eval alike.
"""

from brevitas_cpp.core.function_wrapper import FloorSte, StatsInputViewShapeImpl
from brevitas_cpp.core.restrict_val import PowerOfTwoRestrictValue
from brevitas_cpp.core.scaling import RuntimeDynamicGroupStatsScaling
from brevitas_cpp.inject.enum import RestrictValueType, ScalingPerOutputType
from brevitas_cpp.inject.injector import ExtendedInjector, this, value
from brevitas_cpp.proxy import (
    GroupwiseActFloatQuantProxyFromInjector,
    GroupwiseActQuantProxyFromInjector,
    GroupwiseWeightFloatQuantProxyFromInjector,
    GroupwiseWeightQuantProxyFromInjector,
)
from brevitas_cpp.quant.base import (
    IntQuant,
    MaxStatsScaling,
    MinMaxStatsScaling,
    MSEAsymmetricScale,
    MSESymmetricScale,
    ShiftedMinUintQuant,
)
from brevitas_cpp.quant.experimental.float_base import ScaledFloatActBase, ScaledFloatWeightBase
from brevitas_cpp.quant.experimental.float_quant_ocp import FpOCPAct, FpOCPWeight
from brevitas_cpp.quant.solver.act import ActQuantSolver
from brevitas_cpp.quant.solver.common import group_reduce_dim
from brevitas_cpp.quant.solver.weight import WeightQuantSolver

__all__ = [
    "GroupwiseActFloatProxyMixin",
    "GroupwiseActProxyMixin",
    "GroupwiseWeightFloatProxyMixin",
    "GroupwiseWeightProxyMixin",
    "MXActMixin",
    "MXFloat8e4m3Act",
    "MXFloat8e4m3Weight",
    "MXFloat8e4m3WeightMSE",
    "MXInt8Act",
    "MXInt8Weight",
    "MXInt8WeightMSE",
    "MXWeightMixin",
    "RestrictThresholdMixin",
    "ShiftedMXUInt8Weight",
    "ShiftedMXUInt8WeightMSE",
]


class GroupwiseWeightFloatProxyMixin(ExtendedInjector):
    proxy_class = GroupwiseWeightFloatQuantProxyFromInjector


class GroupwiseActFloatProxyMixin(ExtendedInjector):
    proxy_class = GroupwiseActFloatQuantProxyFromInjector


class GroupwiseWeightProxyMixin(ExtendedInjector):
    proxy_class = GroupwiseWeightQuantProxyFromInjector


class GroupwiseActProxyMixin(ExtendedInjector):
    proxy_class = GroupwiseActQuantProxyFromInjector


class RestrictThresholdMixin(ExtendedInjector):
    """The element format's largest value (the threshold the statistic is divided by) as a
    power of two, rounded down in the log2 domain like the scale."""

    restrict_value_float_to_int_impl = FloorSte
    restrict_scaling_impl = PowerOfTwoRestrictValue


class MXWeightMixin(ExtendedInjector):
    threshold_mixin = RestrictThresholdMixin
    group_size = 32
    restrict_scaling_type = RestrictValueType.POWER_OF_TWO
    restrict_value_float_to_int_impl = FloorSte
    scaling_per_output_type = ScalingPerOutputType.GROUP

    @value
    def restrict_threshold_impl():
        return this.threshold_mixin.restrict_scaling_impl


class MXActMixin(ExtendedInjector):
    threshold_mixin = RestrictThresholdMixin
    group_size = 32
    restrict_scaling_type = RestrictValueType.POWER_OF_TWO
    restrict_value_float_to_int_impl = FloorSte
    scaling_impl = RuntimeDynamicGroupStatsScaling
    scaling_per_output_type = ScalingPerOutputType.GROUP

    @value
    def stats_reduce_dim(group_dim):
        return group_reduce_dim(group_dim)

    @value
    def restrict_threshold_impl():
        return this.threshold_mixin.restrict_scaling_impl


class MXFloat8e4m3Weight(
    MXWeightMixin, GroupwiseWeightFloatProxyMixin, FpOCPWeight, ScaledFloatWeightBase
):
    """MX FP8 (E4M3, OCP codes) weights: groups of 32 input channels share a power-of-two
    scale."""

    bit_width = 8
    exponent_bit_width = 4
    mantissa_bit_width = 3


class MXFloat8e4m3Act(MXActMixin, GroupwiseActFloatProxyMixin, FpOCPAct, ScaledFloatActBase):
    """MX FP8 (E4M3, OCP codes) activations: groups of 32 share a power-of-two scale computed
    from each input."""

    bit_width = 8
    exponent_bit_width = 4
    mantissa_bit_width = 3


class MXFloat8e4m3WeightMSE(MXFloat8e4m3Weight, MSESymmetricScale):
    """MXFloat8e4m3Weight with each group's scale searched to minimise the quantization MSE."""


class MXInt8Weight(
    MXWeightMixin, GroupwiseWeightProxyMixin, IntQuant, MaxStatsScaling, WeightQuantSolver
):
    """MX INT8 weights: groups of 32 input channels share a power-of-two scale."""

    bit_width = 8


class ShiftedMXUInt8Weight(
    MXWeightMixin,
    GroupwiseWeightProxyMixin,
    ShiftedMinUintQuant,
    MinMaxStatsScaling,
    WeightQuantSolver,
):
    """Unsigned 8-bit weights with a zero point and a power-of-two scale per group of 32 (the
    group's min-max range)."""

    bit_width = 8


class MXInt8Act(MXActMixin, GroupwiseActProxyMixin, IntQuant, MaxStatsScaling, ActQuantSolver):
    """MX INT8 activations: groups of 32 share a power-of-two scale computed from each input."""

    bit_width = 8


class MXInt8WeightMSE(MSESymmetricScale, MXInt8Weight):
    """MXInt8Weight with each group's scale searched to minimise the quantization MSE."""


class ShiftedMXUInt8WeightMSE(MSEAsymmetricScale, ShiftedMXUInt8Weight):
    """ShiftedMXUInt8Weight with each group's scale searched to minimise the quantization MSE;
    the zero point is each group's -min, as in ShiftedMXUInt8Weight."""

    # The MSE scale takes the weight as it is (its search views it), but the zero point's
    # statistic needs the grouped view (Brevitas 0.12 gives it the ungrouped weight and fails).
    zero_point_stats_input_view_shape_impl = StatsInputViewShapeImpl.OVER_SUBCHANNEL_BLOCK
