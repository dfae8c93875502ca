"""Fixed-point quantizers: power-of-two scales 2^ceil(log2(statistic)) / 2^k, with k the
power-of-two integer range (7 signed, 8 unsigned for 8 bits)."""

import math

import pytest
import torch
from helpers import rand, ref_int_quant
from torch import nn

from brevitas_cpp.config import JIT_ENABLED
from brevitas_cpp.core.function_wrapper import CeilSte
from brevitas_cpp.core.quant import RescalingIntQuant
from brevitas_cpp.core.restrict_val import PowerOfTwoRestrictValue
from brevitas_cpp.core.scaling import PowerOfTwoIntScaling
from brevitas_cpp.quant import (
    Int8ActPerTensorFixedPoint,
    Int8BiasPerTensorFixedPointInternalScaling,
    Int8WeightPerTensorFixedPoint,
    Uint8ActPerTensorFixedPoint,
    Uint8ActPerTensorFixedPointMaxInit,
)
from brevitas_cpp.quant.fixed_point import (
    Int8ActPerTensorFixedPointMinMaxInit,
    Int8WeightPerChannelFixedPoint,
)

ZERO = torch.tensor(0.0)
TWO = torch.tensor(2.0)


def pot(stat, threshold):
    return TWO ** torch.ceil(torch.log2(stat)) / torch.tensor(threshold)


def test_fixed_point_weight_per_tensor_blocks_and_numbers():
    torch.manual_seed(0)
    layer = nn.Conv2d(3, 4, 3)
    quant = Int8WeightPerTensorFixedPoint.let(module=layer, tracked_parameter_list=[layer.weight])
    assert type(quant.restrict_scaling_impl) is PowerOfTwoRestrictValue
    assert type(quant.restrict_value_float_to_int_impl) is CeilSte
    tq = quant.tensor_quant
    assert type(tq) is RescalingIntQuant and type(tq.int_scaling_impl) is PowerOfTwoIntScaling
    if JIT_ENABLED:
        assert isinstance(tq, torch.jit.ScriptModule)
    w = layer.weight.detach()
    s = pot(w.abs().max(), 128.0)
    y, scale, _, _ = tq(layer.weight)
    assert torch.equal(scale, s) and math.log2(float(scale.detach())).is_integer()
    assert torch.equal(y, torch.clamp(torch.round(w / s), -127.0, 127.0) * s)


def test_fixed_point_weight_per_channel():
    torch.manual_seed(1)
    layer = nn.Linear(6, 5)
    tq = Int8WeightPerChannelFixedPoint.let(
        module=layer, tracked_parameter_list=[layer.weight]
    ).tensor_quant
    w = layer.weight.detach()
    s = pot(w.abs().amax(dim=1, keepdim=True), 128.0)
    y, scale, _, _ = tq(layer.weight)
    assert torch.equal(scale, s)
    assert torch.equal(y, torch.clamp(torch.round(w / s), -127.0, 127.0) * s)


@pytest.mark.parametrize(
    "quant, threshold, lo, hi",
    [
        (Int8ActPerTensorFixedPoint, 128.0, -128.0, 127.0),
        (Uint8ActPerTensorFixedPoint, 256.0, 0.0, 255.0),
    ],
)
def test_fixed_point_act_scale_is_a_power_of_two_once_learned(quant, threshold, lo, hi):
    tq = quant.let(high_percentile_q=90.0, collect_stats_steps=1).tensor_quant
    tq.train()
    x = rand((10, 20), seed=2) * 3
    k = int(math.floor(0.01 * 90.0 * x.numel() + 0.5))
    stat = torch.kthvalue(x.abs().reshape(-1), k).values
    # While statistics are collected the scale is the raw statistic (as in Brevitas) ...
    s = stat / torch.tensor(threshold)
    y, scale, _, _ = tq(x)
    assert torch.equal(scale, s)
    assert torch.equal(y, torch.clamp(torch.round(x / s), lo, hi) * s)
    # ... and the learned one is restricted to a power of two (exponent rounded up).
    s = pot(stat, threshold)
    y, scale, _, _ = tq(x * 2)
    assert torch.equal(scale, s) and math.log2(float(scale.detach())).is_integer()
    assert torch.equal(y, torch.clamp(torch.round(x * 2 / s), lo, hi) * s)


def test_fixed_point_act_learned_exponent_from_max_val():
    tq = Uint8ActPerTensorFixedPointMaxInit.let(max_val=3.0).tensor_quant
    value = tq.scaling_impl.value
    # The parameter is the log2 of the scale (before the integer range), rounded up when used.
    assert torch.equal(value.detach(), torch.log2(torch.tensor(3.0)))
    x = rand((4, 30), seed=3) * 3
    g = rand(x.shape, seed=4)
    y, scale, _, _ = tq(x)
    assert torch.equal(scale, torch.tensor(4.0 / 256.0))
    y.backward(g)
    v = torch.log2(torch.tensor(3.0)).requires_grad_()
    v_ceil = v + (torch.ceil(v) - v).detach()
    s = TWO**v_ceil / torch.tensor(256.0)
    ref = ref_int_quant(x, s, ZERO, torch.tensor(8.0), False, False)
    assert torch.equal(y.detach(), ref.detach())
    ref.backward(g)
    torch.testing.assert_close(value.grad, v.grad, rtol=1e-5, atol=1e-7)


def test_fixed_point_signed_act_exponent_from_min_max_val():
    """Brevitas's public (not in __all__) Int8ActPerTensorFixedPointMinMaxInit: the exponent
    starts at log2(max(|min_val|, |max_val|)), over the signed power-of-two range 2^7."""
    tq = Int8ActPerTensorFixedPointMinMaxInit.let(min_val=-3.0, max_val=0.5).tensor_quant
    assert torch.equal(tq.scaling_impl.value.detach(), torch.log2(torch.tensor(3.0)))
    x = rand((4, 30), seed=5) * 4
    y, scale, _, bit_width = tq(x)
    assert torch.equal(scale, torch.tensor(4.0 / 128.0)) and bit_width.item() == 8
    ref = ref_int_quant(x, scale, ZERO, torch.tensor(8.0), True, False)
    assert torch.equal(y, ref)


def test_fixed_point_bias_with_its_own_scale():
    torch.manual_seed(5)
    layer = nn.Linear(3, 6)
    tq = Int8BiasPerTensorFixedPointInternalScaling.let(
        module=layer, tracked_parameter_list=[layer.bias]
    ).tensor_quant
    b = layer.bias.detach()
    s = pot(b.abs().max(), 128.0)
    y, scale, _, _ = tq(layer.bias)
    assert torch.equal(scale, s)
    assert torch.equal(y, torch.clamp(torch.round(b / s), -128.0, 127.0) * s)
