"""Bias quantizer solver. A bias either reuses the scale of the accumulator it is added to
(``requires_input_scale``: the scale comes in at call time) or computes its own from the bias."""

from brevitas_cpp.core.quant import PrescaledRestrictIntQuant, RescalingIntQuant
from brevitas_cpp.inject.enum import QuantType
from brevitas_cpp.inject.injector import ExtendedInjector, value
from brevitas_cpp.proxy.weight_bias_quant import BiasQuantProxyFromInjector
from brevitas_cpp.quant.solver.common import (
    SolveBitWidthImplFromEnum,
    SolveDtypeDeviceFromTrackedParameterList,
    SolveIntQuantFromEnum,
    SolveIntScalingImplFromEnum,
    SolveRestrictScalingImplFromEnum,
    SolveScalingStatsInputViewShapeImplFromEnum,
    SolveScalingStatsOpFromEnum,
    SolveStatsReduceDimFromEnum,
    SolveTensorQuantFloatToIntImplFromEnum,
    to_enum,
    unsupported,
)
from brevitas_cpp.quant.solver.parameter import (
    SolveInputViewImpl,
    SolveParameterScalingImplFromEnum,
    SolveParameterScalingInitFromEnum,
    SolveParameterScalingShape,
    SolveParameterTensorClampImplFromEnum,
    require_module,
)
from brevitas_cpp.quant.solver.weight import shared_property

__all__ = [
    "BiasQuantSolver",
    "SolveBiasTensorQuantFromEnum",
    "SolveBiasScalingStatsInputConcatDimFromModule",
    "SolveBiasScalingPerOutputChannelShapeFromModule",
]


class SolveBiasScalingStatsInputConcatDimFromModule(ExtendedInjector):
    # A bias is 1-d: shared biases concatenate along their only dim.
    scaling_stats_input_concat_dim = 0


def layer_bias_channels(layer) -> int:
    """Number of output channels of a layer's bias (out_channels, else the bias's length)."""
    channels = getattr(layer, "out_channels", None)
    return channels if channels is not None else layer.bias.shape[0]


class SolveBiasScalingPerOutputChannelShapeFromModule(ExtendedInjector):
    @value
    def scaling_per_output_channel_shape(__self__, module=None):
        module = require_module(module, __self__, "scaling_per_output_channel_shape")
        channels = shared_property(
            module, layer_bias_channels, "the number of output channels", __self__
        )
        return (channels,)


class SolveBiasTensorQuantFromEnum(SolveIntQuantFromEnum):
    @value
    def tensor_quant(quant_type, requires_input_scale, __self__):
        kind = to_enum(QuantType, quant_type, "quant_type", __self__)
        if kind == QuantType.FP:
            return None
        if kind == QuantType.INT:
            return PrescaledRestrictIntQuant if requires_input_scale else RescalingIntQuant
        raise unsupported(
            __self__, "quant_type", kind, "is not supported for biases; accepted: INT, FP"
        )


class BiasQuantSolver(
    SolveScalingStatsInputViewShapeImplFromEnum,
    SolveParameterScalingShape,
    SolveStatsReduceDimFromEnum,
    SolveScalingStatsOpFromEnum,
    SolveTensorQuantFloatToIntImplFromEnum,
    SolveRestrictScalingImplFromEnum,
    SolveIntScalingImplFromEnum,
    SolveParameterScalingImplFromEnum,
    SolveParameterTensorClampImplFromEnum,
    SolveParameterScalingInitFromEnum,
    SolveBitWidthImplFromEnum,
    SolveBiasScalingPerOutputChannelShapeFromModule,
    SolveBiasScalingStatsInputConcatDimFromModule,
    SolveBiasTensorQuantFromEnum,
    SolveDtypeDeviceFromTrackedParameterList,
    SolveInputViewImpl,
):
    """Turns enum settings into bias quantization blocks. List it last among a quantizer's
    bases: earlier bases (and the quantizer's own attributes) override it.
    """

    proxy_class = BiasQuantProxyFromInjector
