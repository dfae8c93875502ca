"""Activation quantizer solver: scales from runtime statistics, constants or learned parameters,
with the per-channel shape given by the quantizer (``per_channel_broadcastable_shape``), since an
activation's shape is not known from a layer."""

from typing import Optional

import torch
from torch import nn

from brevitas_cpp.core.function_wrapper import Identity, StatsInputViewShapeImpl
from brevitas_cpp.core.quant import ClampedBinaryQuant
from brevitas_cpp.core.scaling import (
    SCALAR_SHAPE,
    ConstScaling,
    ParameterFromRuntimeStatsScaling,
    ParameterScaling,
    RuntimeStatsScaling,
)
from brevitas_cpp.inject.enum import ScalingImplType, ScalingPerOutputType
from brevitas_cpp.inject.injector import ExtendedInjector, value
from brevitas_cpp.proxy.runtime_quant import ActQuantProxyFromInjector
from brevitas_cpp.proxy.utils import ConvertRuntimeStatsToParameter
from brevitas_cpp.quant.solver.common import (
    QuantizerSolveError,
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
    quantizer_name,
    solve_bit_width_impl_from_enum,
    solve_float_to_int_impl_from_enum,
    solve_restrict_value_impl_from_enum,
    solve_scaled_tensor_quant,
    to_enum,
    unsupported,
)
from brevitas_cpp.quant.solver.parameter import _SolveScalingInitFromImpl

__all__ = [
    "ConvertRuntimeStatsToParameter",
    "MinMaxScalingInit",
    "SolveActScalingImplFromEnum",
    "SolveActTensorQuantFromEnum",
    "SolveActScalingInitFromEnum",
    "SolveActScalingShape",
    "SolveActScalingPerOutputChannelShape",
    "SolveUpdateStateDictImplFromEnum",
    "SolveInputViewImpl",
    "SolveActGroupDimFromModule",
    "ActQuantSolver",
    # common's, which Brevitas's act.py star-imports
    "SolveDtypeDeviceFromTrackedParameterList",
    "solve_bit_width_impl_from_enum",
    "solve_float_to_int_impl_from_enum",
    "solve_restrict_value_impl_from_enum",
]


class MinMaxScalingInit:
    """Initial scale max(|min_val|, |max_val|), the range the user declares for the activation."""

    def __init__(self, min_val: Optional[float], max_val: float) -> None:
        for name, bound in (("min_val", min_val), ("max_val", max_val)):
            if bound is None or isinstance(bound, bool):
                raise QuantizerSolveError(
                    f"MinMaxScalingInit: {name} must be a number, got {bound!r} (a signed "
                    f"quantizer initialised from a range needs both min_val and max_val)"
                )
        self.scaling_init = torch.tensor(max(abs(float(min_val)), abs(float(max_val))))

    def __call__(self) -> torch.Tensor:
        return self.scaling_init


class SolveActScalingImplFromEnum(SolveAffineRescalingFromEnum):
    @value
    def scaling_impl(__self__, scaling_impl_type=None):
        # No scaling_impl_type: a quantizer without a scale.
        if scaling_impl_type is None:
            return None
        impl_type = to_enum(ScalingImplType, scaling_impl_type, "scaling_impl_type", __self__)
        if impl_type == ScalingImplType.HE:
            raise unsupported(
                __self__,
                "scaling_impl_type",
                impl_type,
                "is for weights (it needs a fan-in); activations accept CONST, "
                "STATS, AFFINE_STATS, PARAMETER, PARAMETER_FROM_STATS",
            )
        return {
            ScalingImplType.PARAMETER: ParameterScaling,
            ScalingImplType.PARAMETER_FROM_STATS: ParameterFromRuntimeStatsScaling,
            ScalingImplType.CONST: ConstScaling,
            ScalingImplType.STATS: RuntimeStatsScaling,
            ScalingImplType.AFFINE_STATS: RuntimeStatsScaling,
        }[impl_type]


class SolveActTensorQuantFromEnum(SolveIntQuantFromEnum):
    # Binary activations are clamped to [-scale, scale] first.
    @value
    def tensor_quant(quant_type, __self__, signed=None):
        return solve_scaled_tensor_quant(quant_type, signed, __self__, ClampedBinaryQuant)


class SolveActScalingInitFromEnum(_SolveScalingInitFromImpl):
    @value
    def scaling_init_impl(scaling_impl_type, __self__):
        impl_type = to_enum(ScalingImplType, scaling_impl_type, "scaling_impl_type", __self__)
        if impl_type in (ScalingImplType.CONST, ScalingImplType.PARAMETER):
            return MinMaxScalingInit
        return None

    # Unsigned activations start at 0; signed ones must give min_val.
    @value
    def min_val(signed):
        return None if signed else 0.0


class SolveActScalingShape(ExtendedInjector):
    @value
    def scaling_shape(scaling_per_output, __self__, per_channel_broadcastable_shape=None):
        if scaling_per_output == ScalingPerOutputType.TENSOR:
            return SCALAR_SHAPE
        if scaling_per_output == ScalingPerOutputType.CHANNEL:
            if per_channel_broadcastable_shape is None:
                raise QuantizerSolveError(
                    f"{quantizer_name(__self__)}: per-channel activation scaling needs "
                    f"per_channel_broadcastable_shape (e.g. (1, C, 1, 1)): an activation's channel "
                    f"count can not be inferred from a layer"
                )
            return per_channel_broadcastable_shape
        return None


class SolveActScalingPerOutputChannelShape(ExtendedInjector):
    @value
    def scaling_per_output_channel_shape(per_channel_broadcastable_shape):
        return per_channel_broadcastable_shape


class SolveUpdateStateDictImplFromEnum(ExtendedInjector):
    @value
    def update_state_dict_impl(scaling_impl_type, __self__):
        impl_type = to_enum(ScalingImplType, scaling_impl_type, "scaling_impl_type", __self__)
        if impl_type in (ScalingImplType.PARAMETER, ScalingImplType.PARAMETER_FROM_STATS):
            return ConvertRuntimeStatsToParameter
        return None


class SolveInputViewImpl(ExtendedInjector):
    @value
    def input_view_impl(scaling_per_output):
        # Per-group scales quantize the activation viewed as its groups, whatever its shape.
        if scaling_per_output == ScalingPerOutputType.GROUP:
            return StatsInputViewShapeImpl.DYNAMIC_OVER_SUBCHANNEL_BLOCK
        return Identity


class SolveActGroupDimFromModule(ExtendedInjector):
    """The dim an activation's groups run along, from the layer whose input it quantizes: the
    features of a linear layer (-1), the channels of a batched convolution input (1)."""

    @value
    def group_dim(__self__, module=None, group_size=None):
        if group_size is None:
            return None
        if isinstance(module, nn.Linear):
            return -1
        if isinstance(module, nn.modules.conv._ConvNd):
            return 1
        raise QuantizerSolveError(
            f"{quantizer_name(__self__)}: group_dim of a per-group activation quantizer is "
            f"inferred only for the input of a linear layer (-1) or a convolution (1, a batched "
            f"input); it quantizes {type(module).__name__ if module is not None else 'no layer'}, "
            f"so give it: .let(group_dim=...)"
        )


class ActQuantSolver(
    SolveActTensorQuantFromEnum,
    SolveActScalingImplFromEnum,
    SolveIntScalingImplFromEnum,
    SolveBitWidthImplFromEnum,
    SolveTensorQuantFloatToIntImplFromEnum,
    SolveScalingStatsOpFromEnum,
    SolveRestrictScalingImplFromEnum,
    SolveActScalingInitFromEnum,
    SolveStatsReduceDimFromEnum,
    SolveActScalingShape,
    SolveScalingStatsInputViewShapeImplFromEnum,
    SolveActScalingPerOutputChannelShape,
    SolveUpdateStateDictImplFromEnum,
    SolveInputViewImpl,
    SolveActGroupDimFromModule,
    SolveScaleSignedness,
):
    """Turns enum settings into activation quantization blocks. List it last among a quantizer's
    bases: earlier bases (and the quantizer's own attributes) override it.
    """

    proxy_class = ActQuantProxyFromInjector
