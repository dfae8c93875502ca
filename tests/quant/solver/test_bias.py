"""Bias solver: the accumulator's scale passed in at call time or a scale of its own, per-channel
shape from the layer, and the quant types a bias accepts."""

import pytest
import torch
from torch import nn

from brevitas_cpp.core.function_wrapper import TensorClamp
from brevitas_cpp.core.quant import PrescaledRestrictIntQuant, RescalingIntQuant
from brevitas_cpp.quant.base import IntQuant, MaxStatsScaling, PerTensorFloatScaling8bit
from brevitas_cpp.quant.solver import BiasQuantSolver, QuantizerSolveError


class AccBias(IntQuant, BiasQuantSolver):
    bit_width = 8
    requires_input_scale = True
    tensor_clamp_impl = TensorClamp  # no scaling_impl_type to choose the clamp from


class OwnScaleBias(IntQuant, MaxStatsScaling, PerTensorFloatScaling8bit, BiasQuantSolver):
    requires_input_scale = False
    scaling_stats_permute_dims = None


def on(quant, layer, **kwargs):
    return quant.let(module=layer, tracked_parameter_list=[layer.bias], **kwargs)


def test_bias_with_the_accumulator_scale():
    layer = nn.Linear(3, 5)
    tq = on(AccBias, layer).tensor_quant
    assert type(tq) is PrescaledRestrictIntQuant
    b = layer.bias.detach() * 10
    s = torch.full((5,), 0.01)
    y, scale, zero_point, bit_width = tq(b, s)
    assert torch.equal(y, torch.clamp(torch.round(b / s), -128.0, 127.0) * s)
    assert scale is s and float(zero_point) == 0.0 and float(bit_width) == 8.0


def test_bias_with_its_own_scale():
    layer = nn.Conv2d(2, 4, 3)
    tq = on(OwnScaleBias, layer).tensor_quant
    assert type(tq) is RescalingIntQuant
    b = layer.bias.detach()
    s = b.abs().max() / torch.tensor(128.0)  # signed, not narrow: threshold -min_int = 128
    y, scale, _, _ = tq(b)
    assert torch.equal(scale, s)
    assert torch.equal(y, torch.clamp(torch.round(b / s), -128.0, 127.0) * s)


@pytest.mark.parametrize(
    "layer, channels",
    [(nn.Linear(3, 5), 5), (nn.Conv2d(2, 4, 3), 4), (nn.ConvTranspose2d(4, 6, 3, groups=2), 6)],
)
def test_per_channel_bias_shape_from_the_layer(layer, channels):
    quant = on(OwnScaleBias, layer, scaling_per_output_type="channel")
    assert quant.scaling_shape == (channels,)
    b = layer.bias.detach()
    y, scale, _, _ = quant.tensor_quant(b)
    assert torch.equal(scale, b.abs() / torch.tensor(128.0))


def test_per_channel_bias_without_module_is_an_error():
    b = nn.Parameter(torch.randn(4))
    quant = OwnScaleBias.let(tracked_parameter_list=[b], scaling_per_output_type="channel")
    with pytest.raises(
        QuantizerSolveError,
        match=r"OwnScaleBias: scaling_per_output_channel_shape"
        r" is inferred from the layer",
    ):
        quant.scaling_shape


@pytest.mark.parametrize("quant_type", ["binary", "ternary"])
def test_binary_and_ternary_biases_are_refused(quant_type):
    with pytest.raises(
        QuantizerSolveError,
        match=rf"AccBias: quant_type={quant_type.upper()} is "
        r"not supported for biases; accepted: INT, FP",
    ):
        AccBias.let(quant_type=quant_type).tensor_quant


def test_fp_bias_is_not_quantized():
    assert AccBias.let(quant_type="fp").tensor_quant is None


def test_bias_dtype_follows_the_bias():
    layer = nn.Linear(3, 2).double()
    tq = on(AccBias, layer).tensor_quant
    assert tq(layer.bias, torch.tensor(0.1, dtype=torch.float64))[3].dtype == torch.float64
