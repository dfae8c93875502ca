"""Asymmetric (shifted) unsigned quantizers: scale from the range, integer zero point from the
negative part, per tensor and per channel; the activation one learns both."""

import math

import torch
from helpers import rand, ref_int_quant
from torch import nn

from brevitas_cpp.config import JIT_ENABLED
from brevitas_cpp.core.quant import RescalingIntQuant
from brevitas_cpp.core.zero_point import ParameterFromRuntimeZeroPoint, StatsFromParameterZeroPoint
from brevitas_cpp.quant import (
    ShiftedUint8ActPerTensorFloat,
    ShiftedUint8WeightPerChannelFloat,
    ShiftedUint8WeightPerTensorFloat,
)

BW = torch.tensor(8.0)
T = torch.tensor(255.0)


def weight_quant(quant, layer):
    return quant.let(module=layer, tracked_parameter_list=[layer.weight]).tensor_quant


def shifted_reference(w, lo, hi):
    """Scale |hi - min(lo, 0)| / 255, zero point round(|min(lo, 0)| / scale) clamped to
    [0, 255], y = (clamp(round(w / s + z), 0, 255) - z) * s."""
    lo = torch.clamp(lo, max=0.0)
    s = torch.abs(hi - lo) / T
    z = torch.clamp(torch.round(torch.abs(lo) / s), 0.0, 255.0)
    return s, z, torch.clamp(torch.round(w / s + z), 0.0, 255.0) - z


def test_shifted_weight_per_tensor():
    torch.manual_seed(1)
    layer = nn.Conv2d(3, 4, 3)
    tq = weight_quant(ShiftedUint8WeightPerTensorFloat, layer)
    assert type(tq) is RescalingIntQuant and type(tq.zero_point_impl) is StatsFromParameterZeroPoint
    assert tq.int_quant.signed is False and tq.int_quant.narrow_range is False
    if JIT_ENABLED:
        assert isinstance(tq, torch.jit.ScriptModule)
    w = layer.weight.detach()
    s, z, y_int = shifted_reference(w, w.min(), w.max())
    y, scale, zero_point, bit_width = tq(layer.weight)
    assert torch.equal(scale, s) and torch.equal(zero_point, z) and torch.equal(bit_width, BW)
    assert torch.equal(y, y_int * s)


def test_shifted_weight_per_channel_on_a_linear_layer():
    torch.manual_seed(2)
    layer = nn.Linear(5, 3)
    with torch.no_grad():
        layer.weight[0].abs_()  # a channel with no negative part: zero point 0
    w = layer.weight.detach()
    y, scale, zero_point, _ = weight_quant(ShiftedUint8WeightPerChannelFloat, layer)(layer.weight)
    s, z, y_int = shifted_reference(w, w.amin(dim=1, keepdim=True), w.amax(dim=1, keepdim=True))
    assert scale.shape == zero_point.shape == (3, 1)
    assert torch.equal(scale, s) and torch.equal(zero_point, z) and float(z[0]) == 0.0
    assert torch.equal(y, y_int * s)


def test_shifted_act_first_step_then_learned_scale_and_zero_point():
    tq = ShiftedUint8ActPerTensorFloat.let(collect_stats_steps=1).tensor_quant
    assert type(tq.zero_point_impl) is ParameterFromRuntimeZeroPoint
    tq.train()
    x = rand((20, 50), seed=3) + 0.5
    n = x.numel()
    low_k = int(math.ceil(0.01 * 0.001 * n))
    high_k = int(math.floor(0.01 * 99.999 * n + 0.5))
    flat = x.reshape(-1)
    lo, hi = torch.kthvalue(flat, low_k).values, torch.kthvalue(flat, high_k).values
    s, z, y_int = shifted_reference(x, lo, hi)
    y, scale, zero_point, _ = tq(x)
    assert torch.equal(scale, s) and torch.equal(zero_point, z)
    assert torch.equal(y, y_int * s)
    # Next step: scale and zero point are parameters initialised from the statistics.
    y, scale, zero_point, _ = tq(x)
    scale_param, zp_param = tq.scaling_impl.value, tq.zero_point_impl.value
    assert torch.equal(scale, s) and torch.equal(zero_point, z)
    g = rand(x.shape, seed=4)
    y.backward(g)
    v = scale_param.detach().clone().requires_grad_()
    u = zp_param.detach().clone().requires_grad_()
    s_ref = v / T
    # Zero point: |u| / s, rounded straight-through and clamped to [0, 255] (masked gradient).
    z_real = torch.abs(u) / s_ref
    z_round = z_real + (torch.round(z_real) - z_real).detach()
    z_ref = torch.where(z_round > 255.0, torch.tensor(255.0), z_round)
    z_ref = torch.where(z_ref < 0.0, torch.tensor(0.0), z_ref)
    ref_int_quant(x, s_ref, z_ref, BW, False, False).backward(g)
    torch.testing.assert_close(scale_param.grad, v.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(zp_param.grad, u.grad, rtol=1e-5, atol=1e-6)


def test_shifted_act_state_dict_round_trip():
    tq = ShiftedUint8ActPerTensorFloat.let(collect_stats_steps=1).tensor_quant
    tq.train()
    x = rand((6, 10), seed=5)
    tq(x)
    tq(x)
    fresh = ShiftedUint8ActPerTensorFloat.let(collect_stats_steps=1).tensor_quant
    fresh.load_state_dict(tq.state_dict())
    tq.eval()
    fresh.eval()
    for a, b in zip(tq(x), fresh(x)):
        assert torch.equal(a, b)
