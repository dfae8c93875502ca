"""Weight quantizer solver: per-channel shapes and the stats layout are read from ``module``, the
layer (or tuple of layers sharing the quantizer) whose weight is quantized.

Brevitas's quant layers carry ``output_channel_dim``; for plain torch layers it falls back to 1
for transposed convolutions (weight [C_in, C_out / groups, ...]) and 0 otherwise.
"""

from typing import Any, Callable

from torch import nn

from brevitas_cpp.core.quant import BinaryQuant
from brevitas_cpp.function.shape import grouped_shape
from brevitas_cpp.inject.enum import ScalingPerOutputType
from brevitas_cpp.inject.injector import ExtendedInjector, value
from brevitas_cpp.proxy.weight_bias_quant import WeightQuantProxyFromInjector
from brevitas_cpp.quant.solver.common import (
    QuantizerSolveError,
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
    require_group_dim,
    solve_scaled_tensor_quant,
)
from brevitas_cpp.quant.solver.parameter import (
    SolveInputViewImpl,
    SolveParameterScalingImplFromEnum,
    SolveParameterScalingInitFromEnum,
    SolveParameterScalingShape,
    SolveParameterTensorClampImplFromEnum,
    require_module,
)

__all__ = [
    "SolveWeightTensorQuantFromEnum",
    "SolveWeightGroupwiseShapesFromModule",
    "SolveWeightScalingStatsInputDimsFromModule",
    "SolveWeightScalingPerOutputChannelShapeFromModule",
    "WeightQuantSolver",
    "layer_input_channel_dim",
    "layer_output_channel_dim",
    "layer_output_channels",
]


class SolveWeightTensorQuantFromEnum(SolveIntQuantFromEnum):
    @value
    def tensor_quant(quant_type, __self__, signed=None):
        return solve_scaled_tensor_quant(quant_type, signed, __self__, BinaryQuant)


def layer_output_channel_dim(layer: nn.Module) -> int:
    """Dim of a layer's weight that indexes output channels."""
    dim = getattr(layer, "output_channel_dim", None)
    if dim is not None:
        return dim
    return 1 if isinstance(layer, nn.modules.conv._ConvTransposeNd) else 0


def layer_input_channel_dim(layer: nn.Module) -> int:
    """Dim of a layer's weight that indexes input channels: 0 for transposed convolutions
    (weight [C_in, C_out / groups, ...]), 1 otherwise."""
    return 0 if isinstance(layer, nn.modules.conv._ConvTransposeNd) else 1


def checked_group_size(group_size: Any, quantizer: Any) -> int:
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise QuantizerSolveError(
            f"{quantizer_name(quantizer)}: group_size must be a positive int (the elements "
            f"sharing a scale, e.g. 32), got {group_size!r}"
        )
    return group_size


def layer_output_channels(layer: nn.Module) -> int:
    """Number of per-channel scales a layer's weight needs: the size of its output channel dim.
    Equal to out_channels except for grouped transposed convolutions (weight
    [C_in, C_out / groups, ...]), where Brevitas's out_channels gives a shape the weight's
    statistics can not fill."""
    weight = getattr(layer, "weight", None)
    if weight is not None:
        return weight.shape[layer_output_channel_dim(layer)]
    return layer.out_channels


def shared_property(module: Any, read: Callable[[Any], Any], what: str, quantizer: Any) -> Any:
    """read(layer) for the layer, or for each layer of a tuple sharing the quantizer, where it
    must agree."""
    if not isinstance(module, tuple):
        return read(module)
    values = [read(layer) for layer in module]
    if any(v != values[0] for v in values):
        raise QuantizerSolveError(
            f"{quantizer_name(quantizer)}: the layers sharing this quantizer disagree on {what}: "
            f"{values}"
        )
    return values[0]


def _weight_rank(module: Any, quantizer: Any) -> int:
    return shared_property(module, lambda layer: layer.weight.dim(), "the weight's rank", quantizer)


class SolveWeightScalingPerOutputChannelShapeFromModule(ExtendedInjector):
    @value
    def out_channels(__self__, module=None):
        module = require_module(module, __self__, "out_channels")
        return shared_property(
            module, layer_output_channels, "the number of output channels", __self__
        )

    @value
    def weight_ndims(__self__, module=None):
        return _weight_rank(require_module(module, __self__, "weight_ndims"), __self__)

    @value
    def scaling_per_output_channel_shape(weight_ndims, output_channel_dim, out_channels):
        shape = [1] * weight_ndims
        shape[output_channel_dim] = out_channels
        return tuple(shape)


class SolveWeightGroupwiseShapesFromModule(ExtendedInjector):
    """Per-group scales: the weight is split along group_dim (its input channels) into groups of
    group_size, padded with zeros to a multiple of it. Resolved only for per-group scaling."""

    @value
    def group_dim(__self__, module=None, group_size=None):
        if group_size is None:
            return None
        module = require_module(module, __self__, "group_dim")
        return shared_property(module, layer_input_channel_dim, "group_dim", __self__)

    @value
    def expanded_groupwise_shape(tracked_parameter_list, group_dim, __self__, group_size=None):
        group_size = checked_group_size(group_size, __self__)
        if len(tracked_parameter_list) != 1:
            raise QuantizerSolveError(
                f"{quantizer_name(__self__)}: per-group scales can not be shared by "
                f"{len(tracked_parameter_list)} weights: give each layer its own quantizer"
            )
        shape = list(tracked_parameter_list[0].shape)
        return tuple(grouped_shape(shape, require_group_dim(group_dim, __self__), group_size))

    @value
    def reshaped_groupwise_shape(expanded_groupwise_shape, group_dim, group_size):
        """The weight's shape, padded to whole groups."""
        shape = list(expanded_groupwise_shape)
        del shape[group_dim + 1]
        shape[group_dim] = shape[group_dim] * group_size
        return shape


class SolveWeightScalingStatsInputDimsFromModule(ExtendedInjector):
    # Per-channel stats see the weight as [C_out, rest]; shared weights concatenate along rest.
    @value
    def scaling_stats_input_concat_dim(scaling_per_output):
        if scaling_per_output == ScalingPerOutputType.TENSOR:
            return 0
        if scaling_per_output == ScalingPerOutputType.CHANNEL:
            return 1
        if scaling_per_output == ScalingPerOutputType.GROUP:
            return 0  # unused: per-group scales track one weight (sharing is refused)
        return None

    # Brings the output channel dim first, for weights that keep it elsewhere.
    @value
    def permute_dims(output_channel_dim, __self__, module=None):
        if output_channel_dim == 0:
            return None
        module = require_module(module, __self__, "permute_dims")
        dims = list(range(_weight_rank(module, __self__)))
        dims[0], dims[output_channel_dim] = dims[output_channel_dim], dims[0]
        return tuple(dims)

    @value
    def output_channel_dim(__self__, module=None):
        module = require_module(module, __self__, "output_channel_dim")
        return shared_property(module, layer_output_channel_dim, "output_channel_dim", __self__)


class WeightQuantSolver(
    SolveStatsReduceDimFromEnum,
    SolveWeightScalingStatsInputDimsFromModule,
    SolveWeightGroupwiseShapesFromModule,
    SolveScalingStatsInputViewShapeImplFromEnum,
    SolveScalingStatsOpFromEnum,
    SolveBitWidthImplFromEnum,
    SolveTensorQuantFloatToIntImplFromEnum,
    SolveRestrictScalingImplFromEnum,
    SolveIntScalingImplFromEnum,
    SolveParameterScalingImplFromEnum,
    SolveParameterTensorClampImplFromEnum,
    SolveParameterScalingInitFromEnum,
    SolveParameterScalingShape,
    SolveWeightScalingPerOutputChannelShapeFromModule,
    SolveWeightTensorQuantFromEnum,
    SolveDtypeDeviceFromTrackedParameterList,
    SolveInputViewImpl,
    SolveScaleSignedness,
):
    """Turns enum settings and the layer's shape into weight quantization blocks. List it last
    among a quantizer's bases: earlier bases (and the quantizer's own attributes) override it.
    """

    proxy_class = WeightQuantProxyFromInjector
