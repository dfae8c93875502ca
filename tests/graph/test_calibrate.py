"""Calibration and bias correction (brevitas_cpp.graph.calibrate), against statistics and
errors computed by hand in the test."""

import importlib

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from brevitas_cpp import nn as qnn
from brevitas_cpp import quant as qquant
from brevitas_cpp.graph import bias_correction_mode, calibrate, calibration_mode


def _model():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.BatchNorm1d(6),
        # The running maximum of the ReLU's output, averaged over batches (no momentum).
        qnn.QuantReLU(scaling_stats_op="max", scaling_stats_momentum=None, collect_stats_steps=10),
    )


def test_calibration_collects_in_float_then_fixes_the_scale():
    model = _model().train()
    bn_state = {k: v.clone() for k, v in model[0].state_dict().items()}
    batches = [
        torch.randn(16, 6, generator=torch.Generator().manual_seed(i)) * (i + 1) for i in range(3)
    ]
    expected_max = []
    with calibration_mode(model):
        assert not torch.is_grad_enabled()
        for x in batches:
            out = model(x)
            float_out = F.relu(
                F.batch_norm(
                    x, model[0].running_mean, model[0].running_var, model[0].weight, model[0].bias
                )
            )
            assert torch.equal(out, float_out)  # float inside
            expected_max.append(float_out.max())
    assert model.training and model[0].training  # modes restored
    for key, value in model[0].state_dict().items():
        assert torch.equal(value, bn_state[key]), key  # BatchNorm frozen while calibrating
    scale = model[1].act_quant.scale()
    assert torch.allclose(scale * 255, torch.stack(expected_max).mean(), rtol=1e-6, atol=0)
    # Fixed: a training step after calibration quantizes with it, and collects nothing more.
    x = torch.randn(8, 6) * 10
    y = model(x)
    assert torch.allclose(
        torch.unique(torch.round(y / scale)), torch.unique(torch.round(y / scale))
    )
    assert y.max() <= scale * 255 * (1 + 1e-6)


def test_calibrate_runs_batches_and_stops_at_max_batches():
    model = _model().eval()
    data = [(torch.randn(4, 6), torch.zeros(4)) for _ in range(5)]
    assert calibrate(model, data, max_batches=3, progress=False) == 3
    assert not model.training


def test_an_error_inside_restores_the_model_and_fixes_nothing():
    model = _model().train()
    with pytest.raises(ValueError, match="boom"):
        with calibration_mode(model):
            model(torch.randn(4, 6))
            raise ValueError("boom")
    assert model.training
    scaling = model[1].act_quant.fused_activation_quant_proxy.tensor_quant.scaling_impl
    assert scaling.counter == 1  # not moved past the statistics


def test_calibration_computes_with_float_weights_and_biases():
    """Inside calibration_mode the weights and biases are not quantized (Brevitas's
    calibration_mode disables their quantizers too); on leaving they are again."""
    torch.manual_seed(0)
    layer = qnn.QuantLinear(
        6, 3, bias=True, weight_bit_width=2, bias_quant=qquant.Int8BiasPerTensorFloatInternalScaling
    )
    x = torch.randn(5, 6)
    with calibration_mode(layer):
        assert torch.equal(layer(x), F.linear(x, layer.weight, layer.bias))
    with torch.no_grad():
        assert not torch.allclose(layer(x), F.linear(x, layer.weight, layer.bias), atol=1e-3)
    assert layer.weight_quant.is_quant_enabled and layer.bias_quant.is_quant_enabled


def test_bias_correction_removes_the_mean_error_of_the_weight_quantization():
    torch.manual_seed(0)
    layer = qnn.QuantLinear(16, 4, bias=True, weight_bit_width=2)
    calib = torch.randn(256, 16) + 2.0  # a non-zero input mean makes the weight error biased
    held_out = torch.randn(256, 16) + 2.0

    def mean_error(x):
        with torch.no_grad():
            return (F.linear(x, layer.weight, layer.bias) - layer(x)).mean(0)

    float_bias = layer.bias.detach().clone()
    before = mean_error(held_out)
    with bias_correction_mode(layer):
        for chunk in calib.split(64):
            layer(chunk)
    # The correction written out: the mean over the calibration data of (W - Wq) x.
    w_q = layer.quant_weight().value
    expected = F.linear(calib, layer.weight.detach() - w_q).mean(0)
    assert torch.allclose(layer.bias - float_bias, expected, rtol=1e-5, atol=1e-6)
    after = (F.linear(held_out, layer.weight, float_bias) - layer(held_out)).mean(0).detach()
    assert after.abs().max() < before.abs().max() / 5


def test_bias_correction_creates_a_missing_bias():
    layer = qnn.QuantConv2d(2, 3, 3, bias=False, weight_bit_width=2)
    with bias_correction_mode(layer, skip_if_no_bias=True):
        layer(torch.randn(2, 2, 6, 6) + 1.0)
    assert layer.bias is None
    with bias_correction_mode(layer, enabled=False):
        layer(torch.randn(2, 2, 6, 6) + 1.0)
    assert layer.bias is None
    with bias_correction_mode(layer):
        layer(torch.randn(2, 2, 6, 6) + 1.0)
    assert layer.bias is not None and layer.bias.shape == (3,)
    with pytest.raises(TypeError, match="bias_correction_mode: skip_if_no_bias must be a bool"):
        with bias_correction_mode(layer, skip_if_no_bias=1):
            pass


def test_bias_correction_feeds_the_float_output_on():
    """Brevitas hands the next layers each layer's float output while correcting (errors do not
    pile up), and its output quantizers are off: the model returns the float model's output."""
    torch.manual_seed(0)
    model = nn.Sequential(
        qnn.QuantLinear(
            6, 5, bias=True, weight_bit_width=3, output_quant=qquant.Int8ActPerTensorFloat
        ),
        qnn.QuantLinear(5, 4, bias=True, weight_bit_width=3),
    )
    x = torch.randn(8, 6)
    float_out = F.linear(
        F.linear(x, model[0].weight, model[0].bias), model[1].weight, model[1].bias
    )
    with bias_correction_mode(model.eval()):
        out = model(x)
    assert torch.equal(out, float_out)
    assert model[0].output_quant.is_quant_enabled


def test_calibration_averages_batches_whatever_the_quantizer_momentum():
    """Brevitas's calibration_mode sets collect_stats_steps and the momentum aside: with the
    default EMA (momentum 0.1) and 2 warm-up steps, 3 batches still give their plain average."""
    relu = qnn.QuantReLU(scaling_stats_op="max", collect_stats_steps=2)
    maxima = [1.0, 4.0, 7.0]
    with calibration_mode(relu):
        for top in maxima:
            relu(torch.linspace(0.0, top, 11))
    scaling = relu.act_quant.fused_activation_quant_proxy.tensor_quant.scaling_impl
    assert torch.allclose(relu.act_quant.scale(), torch.tensor(sum(maxima) / 3 / 255))
    assert scaling.collect_stats_steps == 2 and scaling.momentum == 0.1
    with pytest.raises(TypeError, match="calibration_mode: enabled must be a bool"):
        with calibration_mode(relu, enabled="no"):
            pass


def _a2q_program(qnn, quant, calibration, weight_quant: str, data, correct: bool = True):
    """A user's post-training program in Brevitas's names only (it runs unchanged on brevitas.nn,
    brevitas.quant and brevitas.graph.calibrate): an accumulator-aware convolution (A2Q or A2Q+,
    an accumulator narrow enough for the L1-norm bound to bind), calibrated, then
    bias-corrected."""
    torch.manual_seed(0)
    layer = qnn.QuantConv2d(
        3,
        4,
        3,
        bias=False,
        weight_quant=getattr(quant, weight_quant),
        weight_bit_width=6,
        weight_accumulator_bit_width=12,
        input_quant=quant.Int8ActPerTensorFloat,
    )
    layer.eval()
    with calibration.calibration_mode(layer):
        for x in data:
            layer(x)
    if correct:
        with calibration.bias_correction_mode(layer):
            for x in data:
                layer(x)
    return layer


@pytest.mark.parametrize(
    "weight_quant",
    ["Int8AccumulatorAwareWeightQuant", "Int8AccumulatorAwareZeroCenterWeightQuant"],
)
def test_bias_correction_of_accumulator_aware_layers(weight_quant):
    """A2Q/A2Q+ quantize the weight with the layer's quantized input (its bit width and sign
    bound the weight's L1 norm). Brevitas's correction, written out: over the batches, the mean
    of the per-channel means of the float layer's output (input, weight and bias unquantized:
    conv(x, W)) minus those of the uncorrected layer's output (conv(qx, Wq))."""
    calibration = importlib.import_module("brevitas_cpp.graph.calibrate")
    gen = torch.Generator().manual_seed(1)
    data = [torch.randn(4, 3, 6, 6, generator=gen) + 0.5 for _ in range(3)]
    plain = _a2q_program(qnn, qquant, calibration, weight_quant, data, correct=False)
    with torch.no_grad():
        errors = [(F.conv2d(x, plain.weight) - plain(x)).mean(dim=(0, 2, 3)) for x in data]
    expected = sum(errors) / len(errors)
    layer = _a2q_program(qnn, qquant, calibration, weight_quant, data)
    assert layer.bias is not None and layer.bias.shape == (4,)
    assert torch.allclose(layer.bias, expected, rtol=1e-5, atol=1e-6)
