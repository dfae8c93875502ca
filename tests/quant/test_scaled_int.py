"""Integer quantizers with float scales (brevitas_cpp.quant.scaled_int): resolved blocks and
settings, numbers against the formulas written out in plain torch, gradients, state_dict round
trips, train/eval behaviour, and scripting under BREVITAS_JIT=1."""

import math

import pytest
import torch
from helpers import rand, ref_int_quant
from torch import nn

from brevitas_cpp.config import JIT_ENABLED
from brevitas_cpp.core.function_wrapper import FloorSte, RoundSte, TensorClamp, TensorClampSte
from brevitas_cpp.core.quant import PrescaledRestrictIntQuant, RescalingIntQuant, TruncIntQuant
from brevitas_cpp.core.scaling import (
    ParameterFromRuntimeStatsScaling,
    ParameterScaling,
    StatsFromParameterScaling,
    TruncMsbScaling,
)
from brevitas_cpp.quant import (
    Int8ActPerTensorFloat,
    Int8ActPerTensorFloatMinMaxInit,
    Int8Bias,
    Int8BiasPerTensorFloatInternalScaling,
    Int8WeightPerChannelFloat,
    Int8WeightPerTensorFloat,
    Int16Bias,
    Int24Bias,
    Int32Bias,
    IntBias,
    RoundTo8bit,
    TruncTo8bit,
    Uint8ActPerTensorFloat,
    Uint8ActPerTensorFloatMaxInit,
)

ZERO = torch.tensor(0.0)


def weight_quant(quant, layer, **kwargs):
    return quant.let(module=layer, tracked_parameter_list=[layer.weight], **kwargs).tensor_quant


def seeded_conv(cls=nn.Conv2d, *args):
    torch.manual_seed(0)
    return cls(*args) if args else cls(3, 4, 3)


def assert_scripted(block):
    if JIT_ENABLED:
        assert isinstance(block, torch.jit.ScriptModule)


def percentile_k(q: float, numel: int) -> int:
    # Brevitas's 1-indexed rank of the q-th percentile, rounded half up.
    return int(math.floor(0.01 * q * numel + 0.5))


# ---- weights ------------------------------------------------------------------------------------


def test_int8_weight_per_tensor_float_blocks():
    tq = weight_quant(Int8WeightPerTensorFloat, seeded_conv())
    assert type(tq) is RescalingIntQuant
    assert tq.int_quant.signed is True and tq.int_quant.narrow_range is True
    assert type(tq.int_quant.float_to_int_impl) is RoundSte
    assert type(tq.int_quant.tensor_clamp_impl) is TensorClampSte
    assert type(tq.scaling_impl) is StatsFromParameterScaling
    assert_scripted(tq)


def test_int8_weight_per_tensor_float_numbers():
    layer = seeded_conv()
    w = layer.weight.detach()
    y, scale, zero_point, bit_width = weight_quant(Int8WeightPerTensorFloat, layer)(layer.weight)
    s = w.abs().max() / torch.tensor(127.0)
    assert torch.equal(scale, s) and scale.shape == ()
    assert torch.equal(y, torch.clamp(torch.round(w / s), -127.0, 127.0) * s)
    assert torch.equal(zero_point, ZERO) and torch.equal(bit_width, torch.tensor(8.0))


def test_int8_weight_per_tensor_float_gradient_reaches_the_weight_through_scale_and_values():
    layer = seeded_conv()
    tq = weight_quant(Int8WeightPerTensorFloat, layer)
    g = rand(layer.weight.shape, seed=3)
    tq(layer.weight)[0].backward(g)

    w = layer.weight.detach().clone().requires_grad_()
    s = w.abs().max() / torch.tensor(127.0)
    ref_int_quant(w, s, ZERO, torch.tensor(8.0), True, True, clamp_ste=True).backward(g)
    torch.testing.assert_close(layer.weight.grad, w.grad, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(
    "layer, reduce_dims",
    [
        (nn.Conv2d(3, 4, 3), (1, 2, 3)),
        (nn.Linear(6, 5), (1,)),
        (nn.ConvTranspose2d(4, 6, 3), (0, 2, 3)),
    ],
)
def test_int8_weight_per_channel_float_numbers(layer, reduce_dims):
    tq = weight_quant(Int8WeightPerChannelFloat, layer)
    w = layer.weight.detach()
    y, scale, _, _ = tq(layer.weight)
    s = w.abs().amax(dim=reduce_dims, keepdim=True) / torch.tensor(127.0)
    assert torch.equal(scale, s)
    assert torch.equal(y, torch.clamp(torch.round(w / s), -127.0, 127.0) * s)


def test_weight_state_dict_round_trip():
    layer = seeded_conv()
    tq = weight_quant(Int8WeightPerChannelFloat, layer)
    fresh = weight_quant(Int8WeightPerChannelFloat, layer)
    fresh.load_state_dict(tq.state_dict())
    for a, b in zip(tq(layer.weight), fresh(layer.weight)):
        assert torch.equal(a, b)


def test_weight_quantizer_is_the_same_in_train_and_eval():
    layer = seeded_conv()
    tq = weight_quant(Int8WeightPerTensorFloat, layer)
    y_train = tq(layer.weight)[0]
    tq.eval()
    assert torch.equal(tq(layer.weight)[0], y_train)


# ---- activations --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "quant, signed, threshold, lo, hi",
    [
        (Int8ActPerTensorFloat, True, 128.0, -128.0, 127.0),
        (Uint8ActPerTensorFloat, False, 255.0, 0.0, 255.0),
    ],
)
def test_act_first_training_step_uses_the_batch_percentile(quant, signed, threshold, lo, hi):
    tq = quant.tensor_quant
    assert type(tq) is RescalingIntQuant
    assert type(tq.scaling_impl) is ParameterFromRuntimeStatsScaling
    assert tq.int_quant.signed is signed and tq.int_quant.narrow_range is False
    assert type(tq.int_quant.tensor_clamp_impl) is TensorClamp
    assert_scripted(tq)
    tq.train()
    x = rand((8, 125, 100), seed=4)  # 1e5 values: the 99.999th percentile is the 2nd largest
    k = percentile_k(99.999, x.numel())
    assert k == x.numel() - 1
    s = torch.kthvalue(x.abs().reshape(-1), k).values / torch.tensor(threshold)
    y, scale, zero_point, bit_width = tq(x)
    assert torch.equal(scale, s)
    assert torch.equal(y, torch.clamp(torch.round(x / s), lo, hi) * s)
    assert torch.equal(zero_point, ZERO) and torch.equal(bit_width, torch.tensor(8.0))


def test_act_statistics_average_then_become_a_learned_parameter():
    tq = Uint8ActPerTensorFloat.let(collect_stats_steps=2, high_percentile_q=50.0).tensor_quant
    tq.train()
    x1, x2, x3 = rand((4, 25), seed=5), rand((4, 25), seed=6) * 3, rand((4, 25), seed=7)
    k = percentile_k(50.0, 100)
    stat1 = torch.kthvalue(x1.abs().reshape(-1), k).values
    stat2 = torch.kthvalue(x2.abs().reshape(-1), k).values
    t = torch.tensor(255.0)
    assert torch.equal(tq(x1)[1], stat1 / t)
    assert torch.equal(tq(x2)[1], stat2 / t)
    # Exponential moving average with Brevitas's default momentum 0.1.
    average = stat1.clone().mul_(1 - 0.1).add_(0.1 * stat2)
    # Evaluation before the parameter exists uses the running statistic.
    tq.eval()
    assert torch.equal(tq(x3)[1], average / t)
    tq.train()
    # Third step: the statistic becomes the learned scale, and receives the gradient.
    y, scale, _, _ = tq(x3)
    assert torch.equal(scale, average / t)
    value = tq.scaling_impl.value
    assert isinstance(value, nn.Parameter) and torch.equal(value.detach(), average)
    g = rand(x3.shape, seed=8)
    y.backward(g)
    v = average.clone().requires_grad_()
    ref_int_quant(x3, v / t, ZERO, torch.tensor(8.0), False, False).backward(g)
    torch.testing.assert_close(value.grad, v.grad, rtol=1e-6, atol=1e-7)


def test_act_state_dict_round_trip_after_calibration():
    tq = Int8ActPerTensorFloat.let(collect_stats_steps=1).tensor_quant
    tq.train()
    x = rand((6, 7), seed=9)
    tq(x)
    tq(x)
    fresh = Int8ActPerTensorFloat.let(collect_stats_steps=1).tensor_quant
    fresh.load_state_dict(tq.state_dict())
    tq.eval()
    fresh.eval()
    for a, b in zip(tq(x * 2), fresh(x * 2)):
        assert torch.equal(a, b)


@pytest.mark.parametrize(
    "quant, kwargs, init, threshold, lo, hi",
    [
        (
            Int8ActPerTensorFloatMinMaxInit,
            dict(min_val=-1.5, max_val=0.5),
            1.5,
            128.0,
            -128.0,
            127.0,
        ),
        (Uint8ActPerTensorFloatMaxInit, dict(max_val=3.0), 3.0, 255.0, 0.0, 255.0),
    ],
)
def test_act_scale_learned_from_the_declared_range(quant, kwargs, init, threshold, lo, hi):
    tq = quant.let(**kwargs).tensor_quant
    assert type(tq.scaling_impl) is ParameterScaling
    value = tq.scaling_impl.value
    assert torch.equal(value.detach(), torch.tensor(init))
    x = rand((5, 9), seed=10) * 2
    g = rand(x.shape, seed=11)
    y, scale, _, _ = tq(x)
    s = torch.tensor(init) / torch.tensor(threshold)
    assert torch.equal(scale, s)
    assert torch.equal(y, torch.clamp(torch.round(x / s), lo, hi) * s)
    y.backward(g)
    v = torch.tensor(init, requires_grad=True)
    ref = ref_int_quant(x, v / torch.tensor(threshold), ZERO, torch.tensor(8.0), lo < 0, False)
    ref.backward(g)
    torch.testing.assert_close(value.grad, v.grad, rtol=1e-6, atol=1e-7)
    fresh = quant.let(**kwargs).tensor_quant
    with torch.no_grad():
        value.mul_(2)
    fresh.load_state_dict(tq.state_dict())
    assert torch.equal(fresh(x)[1], tq(x)[1])


# ---- biases -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "quant, bits", [(Int8Bias, 8), (Int16Bias, 16), (Int24Bias, 24), (Int32Bias, 32)]
)
def test_bias_with_the_accumulator_scale(quant, bits):
    layer = nn.Linear(4, 6)
    tq = quant.let(module=layer, tracked_parameter_list=[layer.bias]).tensor_quant
    assert type(tq) is PrescaledRestrictIntQuant
    assert type(tq.int_quant.tensor_clamp_impl) is TensorClamp
    assert_scripted(tq)
    b = rand((6,), seed=12) * 1000
    s = torch.tensor(1e-3)
    y, scale, zero_point, bit_width = tq(b, s)
    hi = 2.0 ** (bits - 1)
    assert torch.equal(y, torch.clamp(torch.round(b / s), -hi, hi - 1) * s)
    assert torch.equal(bit_width, torch.tensor(float(bits))) and torch.equal(zero_point, ZERO)


def test_int_bias_needs_a_bit_width():
    layer = nn.Linear(4, 6)
    with pytest.raises(AttributeError, match=r"'IntBias' can not resolve attribute 'bit_width'"):
        IntBias.let(module=layer, tracked_parameter_list=[layer.bias]).tensor_quant


def test_bias_with_its_own_scale():
    layer = nn.Linear(4, 6)
    tq = Int8BiasPerTensorFloatInternalScaling.let(
        module=layer, tracked_parameter_list=[layer.bias]
    ).tensor_quant
    assert type(tq) is RescalingIntQuant
    b = layer.bias.detach()
    s = b.abs().max() / torch.tensor(128.0)
    y, scale, _, _ = tq(layer.bias)
    assert torch.equal(scale, s)
    assert torch.equal(y, torch.clamp(torch.round(b / s), -128.0, 127.0) * s)


# ---- truncation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "quant, rounding, rounding_block",
    [(TruncTo8bit, torch.floor, FloorSte), (RoundTo8bit, torch.round, RoundSte)],
)
@pytest.mark.parametrize("signed", [True, False])
def test_truncation_to_8_bits_keeps_the_msbs(quant, rounding, rounding_block, signed):
    tq = quant.tensor_quant
    assert type(tq) is TruncIntQuant and type(tq.trunc_scaling_impl) is TruncMsbScaling
    assert type(tq.float_to_int_impl) is rounding_block
    assert_scripted(tq)
    g = torch.Generator().manual_seed(13)
    lo_in = -(2**15) if signed else 0
    k = torch.randint(lo_in, 2**15, (50,), generator=g).float()
    scale = torch.tensor(0.5)
    y, out_scale, out_zp, out_bw = tq(k * scale, scale, ZERO, torch.tensor(16.0), signed)
    trunc = torch.tensor(256.0)  # 2 ** (16 - 8)
    lo, hi = (-128.0, 127.0) if signed else (0.0, 255.0)
    y_int = torch.clamp(rounding(torch.round(k * scale / scale) / trunc), lo, hi)
    expected = y_int * (scale * trunc)
    assert torch.equal(y, expected)
    assert torch.equal(out_scale, scale * trunc) and torch.equal(out_bw, torch.tensor(8.0))
    assert torch.equal(out_zp, ZERO)
