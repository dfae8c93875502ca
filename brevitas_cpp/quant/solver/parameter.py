"""Solver mixins for quantizers of parameters (weights and biases): scale initialisation, scale
block, clamp block, scale shape and input view."""

import math
from typing import List

import torch
from torch import Tensor

from brevitas_cpp.core.function_wrapper import (
    Identity,
    StatsInputViewShapeImpl,
    TensorClamp,
    TensorClampSte,
)
from brevitas_cpp.core.scaling import (
    SCALAR_SHAPE,
    ConstScaling,
    ParameterFromStatsFromParameterScaling,
    ParameterScaling,
    StatsFromParameterScaling,
)
from brevitas_cpp.inject.enum import BitWidthImplType, ScalingImplType, ScalingPerOutputType
from brevitas_cpp.inject.injector import ExtendedInjector, this, value
from brevitas_cpp.quant.solver.common import (
    QuantizerSolveError,
    SolveAffineRescalingFromEnum,
    group_reduce_dim,
    quantizer_name,
    to_enum,
)

__all__ = [
    "ScalingConstInit",
    "HeScalingInit",
    "SolveParameterTensorClampImplFromEnum",
    "SolveParameterScalingInitFromEnum",
    "SolveParameterScalingImplFromEnum",
    "SolveParameterScalingShape",
    "SolveInputViewImpl",
]


class ScalingConstInit:
    """Initial scale given by the quantizer's ``scaling_const``."""

    def __init__(self, scaling_const) -> None:
        self.scaling_const = scaling_const

    def __call__(self):
        return self.scaling_const


class HeScalingInit:
    """Initial scale sqrt(2 / fan_in) (He et al.), averaged over the tracked parameters, with
    fan_in the size of a parameter's dims after the first."""

    def __init__(self, tracked_parameter_list: List[torch.nn.Parameter]) -> None:
        if len(tracked_parameter_list) == 0:
            raise QuantizerSolveError(
                "HeScalingInit: tracked_parameter_list is empty; He initialisation needs at least "
                "one parameter to take the fan-in from"
            )
        self.tracked_parameter_list = tracked_parameter_list

    def __call__(self) -> Tensor:
        # Accumulated in Python floats, in parameter order, then converted once (as Brevitas).
        total = 0.0
        for param in self.tracked_parameter_list:
            fan_in = param.view(param.shape[0], -1).shape[1]
            total += math.sqrt(2.0 / fan_in)
        total /= len(self.tracked_parameter_list)
        return torch.tensor(total)


# Scales learned by backprop need the clamp's gradient masked outside the range; a bit width
# learned by backprop too. Otherwise the clamp is straight-through.
_LEARNED_SCALING = (
    ScalingImplType.AFFINE_STATS,
    ScalingImplType.PARAMETER_FROM_STATS,
    ScalingImplType.PARAMETER,
)


class SolveParameterTensorClampImplFromEnum(ExtendedInjector):
    @value
    def tensor_clamp_impl(bit_width_impl_type, scaling_impl_type, __self__):
        learned_bit_width = (
            to_enum(BitWidthImplType, bit_width_impl_type, "bit_width_impl_type", __self__)
            == BitWidthImplType.PARAMETER
        )
        learned_scale = (
            to_enum(ScalingImplType, scaling_impl_type, "scaling_impl_type", __self__)
            in _LEARNED_SCALING
        )
        return TensorClamp if learned_bit_width or learned_scale else TensorClampSte


def _init_as_tensor(scaling_init_impl):
    if scaling_init_impl is None:
        return None
    init = scaling_init_impl()
    return init.detach() if isinstance(init, Tensor) else torch.tensor(init)


class _SolveScalingInitFromImpl(ExtendedInjector):
    """scaling_init from the scaling_init_impl a subclass chooses (weights and activations
    choose differently)."""

    @value
    def scaling_init(scaling_init_impl):
        return _init_as_tensor(scaling_init_impl)


class SolveParameterScalingInitFromEnum(_SolveScalingInitFromImpl):
    @value
    def scaling_init_impl(scaling_impl_type, __self__):
        impl_type = to_enum(ScalingImplType, scaling_impl_type, "scaling_impl_type", __self__)
        if impl_type in (ScalingImplType.CONST, ScalingImplType.PARAMETER):
            return ScalingConstInit
        if impl_type == ScalingImplType.HE:
            return HeScalingInit
        return None


class SolveParameterScalingImplFromEnum(SolveAffineRescalingFromEnum):
    @value
    def scaling_impl(__self__, scaling_impl_type=None):
        # No scaling_impl_type: a quantizer without a scale.
        if scaling_impl_type is None:
            return None
        impl_type = to_enum(ScalingImplType, scaling_impl_type, "scaling_impl_type", __self__)
        return {
            ScalingImplType.PARAMETER: ParameterScaling,
            ScalingImplType.PARAMETER_FROM_STATS: ParameterFromStatsFromParameterScaling,
            ScalingImplType.CONST: ConstScaling,
            ScalingImplType.HE: ConstScaling,
            ScalingImplType.STATS: StatsFromParameterScaling,
            ScalingImplType.AFFINE_STATS: StatsFromParameterScaling,
        }[impl_type]


class SolveParameterScalingShape(ExtendedInjector):
    @value
    def scaling_shape(scaling_per_output):
        if scaling_per_output == ScalingPerOutputType.TENSOR:
            return SCALAR_SHAPE
        if scaling_per_output == ScalingPerOutputType.CHANNEL:
            # Deferred, so the layer is only consulted for per-channel scales.
            return this.scaling_per_output_channel_shape
        if scaling_per_output == ScalingPerOutputType.GROUP:
            return this.groupwise_scaling_shape
        return None

    @value
    def groupwise_scaling_shape(expanded_groupwise_shape, group_dim):
        """The grouped weight's shape with 1 in place of the group size: a scale per group."""
        shape = list(expanded_groupwise_shape)
        shape[group_reduce_dim(group_dim)] = 1
        return tuple(shape)


class SolveInputViewImpl(ExtendedInjector):
    @value
    def input_view_impl(scaling_per_output):
        # Per-group scales quantize the weight viewed as its groups.
        if scaling_per_output == ScalingPerOutputType.GROUP:
            return StatsInputViewShapeImpl.OVER_SUBCHANNEL_BLOCK
        return Identity


def require_module(module, quantizer, attr: str):
    """The layer a per-channel setting is inferred from, or an error saying it is missing."""
    if module is None:
        raise QuantizerSolveError(
            f"{quantizer_name(quantizer)}: {attr} is inferred from the layer the quantizer is "
            f"applied to, but no `module` was given (per-channel scaling needs the layer to know "
            f"the number of output channels); pass module=<layer> (e.g. with .let(module=...)) or "
            f"define {attr} on the quantizer"
        )
    return module
