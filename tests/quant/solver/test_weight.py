"""Weight solver: per-channel shapes and stats layout inferred from the layer (plain torch layers
included), the tensor quantizer per QuantType, and overriding a solver's choice."""

import pytest
import torch
from torch import nn

from brevitas_cpp.core.function_wrapper import (
    FloorSte,
    OverOutputChannelView,
    OverTensorView,
    RoundSte,
    TensorClampSte,
)
from brevitas_cpp.core.quant import BinaryQuant, RescalingIntQuant, TernaryQuant
from brevitas_cpp.core.scaling import (
    ConstScaling,
    ParameterFromStatsFromParameterScaling,
    ParameterScaling,
    StatsFromParameterScaling,
)
from brevitas_cpp.quant.base import MaxStatsScaling, NarrowIntQuant, PerChannelFloatScaling8bit
from brevitas_cpp.quant.solver import QuantizerSolveError, WeightQuantSolver


class PerChannelW(NarrowIntQuant, MaxStatsScaling, PerChannelFloatScaling8bit, WeightQuantSolver):
    pass


def on(quant, layer, **kwargs):
    return quant.let(module=layer, tracked_parameter_list=[layer.weight], **kwargs)


@pytest.mark.parametrize(
    "layer, shape, channel_dim",
    [
        (nn.Conv2d(3, 4, 3), (4, 1, 1, 1), 0),
        (nn.Conv1d(3, 5, 2), (5, 1, 1), 0),
        (nn.Linear(6, 7), (7, 1), 0),
        (nn.ConvTranspose2d(4, 6, 3), (1, 6, 1, 1), 1),
        # Grouped transposed conv: weight [4, 6 / 2, 3], one scale per slice of its dim 1.
        (nn.ConvTranspose1d(4, 6, 3, groups=2), (1, 3, 1), 1),
    ],
)
def test_per_channel_shape_from_plain_torch_layers(layer, shape, channel_dim):
    quant = on(PerChannelW, layer)
    assert quant.output_channel_dim == channel_dim
    assert quant.scaling_shape == shape
    scale = quant.tensor_quant(layer.weight)[1]
    assert scale.shape == shape


def test_transposed_conv_scale_is_per_output_channel_of_dim_one():
    layer = nn.ConvTranspose2d(4, 6, 3)
    quant = on(PerChannelW, layer)
    assert quant.permute_dims == (1, 0, 2, 3)
    assert quant.scaling_stats_input_concat_dim == 1
    view = quant.scaling_stats_input_view_shape_impl
    assert type(view) is OverOutputChannelView
    w = layer.weight.detach()
    expected = w.abs().amax(dim=(0, 2, 3), keepdim=True) / torch.tensor(127.0)
    assert torch.equal(quant.tensor_quant(w)[1], expected)


def test_layer_output_channel_dim_attribute_wins():
    class ChannelsLast(nn.Linear):
        output_channel_dim = 1

    layer = ChannelsLast(6, 7)  # weight [7, 6]: channels taken along dim 1 here
    quant = on(PerChannelW, layer)
    assert quant.scaling_shape == (1, 6)
    assert quant.permute_dims == (1, 0)


def test_shared_quantizer_over_a_tuple_of_layers():
    a, b = nn.Conv2d(3, 4, 3), nn.Conv2d(5, 4, 1)
    quant = PerChannelW.let(module=(a, b), tracked_parameter_list=[a.weight, b.weight])
    assert quant.scaling_shape == (4, 1, 1, 1)
    # The scale covers both weights: per channel max over the concatenated parameters.
    both = torch.cat([a.weight.detach().reshape(4, -1), b.weight.detach().reshape(4, -1)], dim=1)
    expected = (both.abs().amax(dim=1) / torch.tensor(127.0)).reshape(4, 1, 1, 1)
    assert torch.equal(quant.tensor_quant(a.weight)[1], expected)


def test_tuple_of_layers_that_disagree_is_an_error():
    a, b = nn.Conv2d(3, 4, 3), nn.Conv2d(3, 5, 3)
    quant = PerChannelW.let(module=(a, b), tracked_parameter_list=[a.weight, b.weight])
    with pytest.raises(
        QuantizerSolveError,
        match=r"PerChannelW: the layers sharing this "
        r"quantizer disagree on the number of output "
        r"channels: \[4, 5\]",
    ):
        quant.scaling_shape


def test_per_channel_without_module_is_an_error():
    w = nn.Parameter(torch.randn(4, 3))
    quant = PerChannelW.let(tracked_parameter_list=[w])
    with pytest.raises(
        QuantizerSolveError,
        match=r"PerChannelW: .* no `module` was given "
        r"\(per-channel scaling needs the layer",
    ):
        quant.tensor_quant


def test_per_tensor_needs_no_module():
    w = nn.Parameter(torch.randn(4, 3))
    quant = PerChannelW.let(tracked_parameter_list=[w], scaling_per_output_type="tensor")
    assert quant.scaling_shape == ()
    assert quant.scaling_stats_input_concat_dim == 0
    assert type(quant.scaling_stats_input_view_shape_impl) is OverTensorView
    assert torch.equal(quant.tensor_quant(w)[1], w.detach().abs().max() / torch.tensor(127.0))


def test_dtype_follows_the_weight():
    layer = nn.Linear(3, 2).double()
    y, scale, zero_point, bit_width = on(PerChannelW, layer).tensor_quant(layer.weight)
    assert y.dtype == scale.dtype == zero_point.dtype == bit_width.dtype == torch.float64


@pytest.mark.parametrize(
    "impl_type, block",
    [
        ("stats", StatsFromParameterScaling),
        ("affine_stats", StatsFromParameterScaling),
        ("parameter_from_stats", ParameterFromStatsFromParameterScaling),
        ("parameter", ParameterScaling),
        ("const", ConstScaling),
        ("he", ConstScaling),
    ],
)
def test_scaling_impl_per_type(impl_type, block):
    layer = nn.Conv2d(2, 3, 2)
    quant = on(PerChannelW, layer, scaling_impl_type=impl_type, scaling_const=0.5)
    assert type(quant.tensor_quant.scaling_impl) is block


def test_tensor_quant_per_quant_type():
    layer = nn.Linear(3, 2)
    assert type(on(PerChannelW, layer).tensor_quant) is RescalingIntQuant
    assert on(PerChannelW, layer, quant_type="fp").tensor_quant is None
    binary = on(
        PerChannelW,
        layer,
        quant_type="binary",
        scaling_impl_type="const",
        scaling_const=0.5,
        scaling_per_output_type="tensor",
    ).tensor_quant
    assert type(binary) is BinaryQuant
    ternary = on(
        PerChannelW,
        layer,
        quant_type="ternary",
        scaling_impl_type="const",
        scaling_const=0.5,
        scaling_per_output_type="tensor",
        threshold=0.5,
    ).tensor_quant
    assert type(ternary) is TernaryQuant


@pytest.mark.parametrize("quant_type", ["binary", "ternary"])
def test_unsigned_binary_or_ternary_is_an_error(quant_type):
    layer = nn.Linear(3, 2)
    quant = on(PerChannelW, layer, quant_type=quant_type, signed=False)
    with pytest.raises(
        QuantizerSolveError,
        match=rf"PerChannelW: quant_type={quant_type.upper()} "
        r"is always signed, but the quantizer sets "
        r"signed=False",
    ):
        quant.tensor_quant


def test_unknown_quant_type():
    message = (
        r"PerChannelW: quant_type='float' is not a valid QuantType; accepted "
        r"\(case-insensitive\): BINARY, TERNARY, INT, FP"
    )
    with pytest.raises(QuantizerSolveError, match=message):
        on(PerChannelW, nn.Linear(2, 2), quant_type="float").tensor_quant


def test_clamp_and_rounding_of_a_stats_weight_quantizer():
    quant = on(PerChannelW, nn.Linear(2, 2))
    assert type(quant.tensor_clamp_impl) is TensorClampSte
    assert type(quant.float_to_int_impl) is RoundSte


def test_a_declared_block_overrides_the_solver():
    class FloorConstW(PerChannelW):
        float_to_int_impl = FloorSte
        scaling_impl = ConstScaling
        scaling_init = 0.5

    layer = nn.Linear(4, 3)
    tq = on(FloorConstW, layer).tensor_quant
    assert type(tq.scaling_impl) is ConstScaling
    assert type(tq.int_quant.float_to_int_impl) is FloorSte
    w = layer.weight.detach() * 40
    y, scale, _, _ = tq(w)
    s = torch.tensor(0.5) / torch.tensor(127.0)
    assert torch.equal(scale, s)
    assert torch.equal(y, torch.clamp(torch.floor(w / s), -127.0, 127.0) * s)
