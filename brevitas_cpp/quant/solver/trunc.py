"""Truncation quantizer solver: requantizes an integer tensor (e.g. an accumulator) to fewer bits,
keeping the most significant ones (MSB scaling) or a learned/statistics-based range (wrapper)."""

from brevitas_cpp.core.quant import TruncIntQuant
from brevitas_cpp.core.scaling import PowerOfTwoIntScaling, TruncMsbScaling, TruncScalingWrapper
from brevitas_cpp.inject.enum import QuantType, RestrictValueType, TruncScalingImplType
from brevitas_cpp.inject.injector import ExtendedInjector, value
from brevitas_cpp.proxy.runtime_quant import TruncQuantProxyFromInjector
from brevitas_cpp.quant.solver.act import (
    ActQuantSolver,
    MinMaxScalingInit,
    SolveActScalingImplFromEnum,
    SolveActScalingInitFromEnum,
    SolveActScalingPerOutputChannelShape,
    SolveActScalingShape,
    SolveActTensorQuantFromEnum,
    SolveUpdateStateDictImplFromEnum,
)
from brevitas_cpp.quant.solver.common import (
    SolveAffineRescalingFromEnum,
    SolveBitWidthImplFromEnum,
    SolveDtypeDeviceFromTrackedParameterList,
    SolveIntQuantFromEnum,
    SolveIntScalingImplFromEnum,
    SolveRestrictScalingImplFromEnum,
    SolveScaleSignedness,
    SolveScalingStatsInputViewShapeImplFromEnum,
    SolveScalingStatsOpFromEnum,
    SolveStatsReduceDimFromEnum,
    SolveTensorQuantFloatToIntImplFromEnum,
    solve_bit_width_impl_from_enum,
    solve_float_to_int_impl_from_enum,
    solve_restrict_value_impl_from_enum,
    to_enum,
    unsupported,
)
from brevitas_cpp.quant.solver.parameter import SolveInputViewImpl

__all__ = [
    "SolveTruncTensorQuantFromEnum",
    "SolveTruncScalingImplFromEnum",
    "SolveTruncIntScalingImplFromEnum",
    "TruncQuantSolver",
    # act's and common's, which Brevitas's trunc.py star-imports
    "ActQuantSolver",
    "MinMaxScalingInit",
    "SolveActTensorQuantFromEnum",
    "SolveAffineRescalingFromEnum",
    "SolveDtypeDeviceFromTrackedParameterList",
    "SolveIntQuantFromEnum",
    "SolveScaleSignedness",
    "solve_bit_width_impl_from_enum",
    "solve_float_to_int_impl_from_enum",
    "solve_restrict_value_impl_from_enum",
]


class SolveTruncTensorQuantFromEnum(ExtendedInjector):
    @value
    def tensor_quant(quant_type, __self__):
        kind = to_enum(QuantType, quant_type, "quant_type", __self__)
        if kind == QuantType.FP:
            return None
        if kind == QuantType.INT:
            return TruncIntQuant
        raise unsupported(
            __self__, "quant_type", kind, "is not supported for truncation; accepted: INT, FP"
        )


class SolveTruncScalingImplFromEnum(ExtendedInjector):
    @value
    def trunc_scaling_impl(__self__, trunc_scaling_impl_type="msb"):
        impl_type = to_enum(
            TruncScalingImplType, trunc_scaling_impl_type, "trunc_scaling_impl_type", __self__
        )
        if impl_type == TruncScalingImplType.MSB:
            return TruncMsbScaling
        return TruncScalingWrapper


class SolveTruncIntScalingImplFromEnum(ExtendedInjector):
    # The wrapper truncates by whole bits, so its integer scale is a power of two.
    @value
    def trunc_int_scaling_impl(restrict_scaling_type, __self__):
        impl_type = to_enum(
            RestrictValueType, restrict_scaling_type, "restrict_scaling_type", __self__
        )
        if impl_type == RestrictValueType.POWER_OF_TWO:
            return PowerOfTwoIntScaling
        raise unsupported(
            __self__,
            "restrict_scaling_type",
            impl_type,
            "is not supported for truncation scaling; accepted: POWER_OF_TWO",
        )


class TruncQuantSolver(
    SolveBitWidthImplFromEnum,
    SolveTensorQuantFloatToIntImplFromEnum,
    SolveActScalingImplFromEnum,
    SolveIntScalingImplFromEnum,
    SolveScalingStatsOpFromEnum,
    SolveRestrictScalingImplFromEnum,
    SolveActScalingInitFromEnum,
    SolveStatsReduceDimFromEnum,
    SolveActScalingShape,
    SolveScalingStatsInputViewShapeImplFromEnum,
    SolveActScalingPerOutputChannelShape,
    SolveUpdateStateDictImplFromEnum,
    SolveInputViewImpl,
    SolveTruncTensorQuantFromEnum,
    SolveTruncScalingImplFromEnum,
    SolveTruncIntScalingImplFromEnum,
):
    """Turns enum settings into truncation blocks. List it last among a quantizer's bases:
    earlier bases (and the quantizer's own attributes) override it.
    """

    proxy_class = TruncQuantProxyFromInjector
