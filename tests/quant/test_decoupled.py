"""Decoupled, weight-normalization and accumulator-aware (A2Q, A2Q+) weight quantizers: the core
blocks and the stock quantizers against formulas written out here in plain torch, A2Q's L1-norm
bound (and the overflow guarantee it gives), the proxies in QuantLinear / QuantConv2d (quantized
input, signedness, caching, scripting, export), bad settings, and a few SGD steps in eager mode
under both BREVITAS_JIT settings. Brevitas's own numbers are in tests/quant/golden."""

import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import brevitas_cpp
from brevitas_cpp.config import JIT_ENABLED
from brevitas_cpp.core.function_wrapper import Identity, OverOutputChannelView, RoundToZeroSte
from brevitas_cpp.core.quant import (
    DecoupledIntQuant,
    DecoupledRescalingIntQuant,
    DecoupledRescalingIntQuantWithInput,
)
from brevitas_cpp.core.scaling import (
    AccumulatorAwareParameterPreScaling,
    AccumulatorAwareZeroCenterParameterPreScaling,
    ParameterPreScalingWeightNorm,
)
from brevitas_cpp.core.stats import L1Norm, L2Norm
from brevitas_cpp.core.zero_point import PreZeroCenterZeroPoint, ZeroZeroPoint
from brevitas_cpp.export import export_torch_qcdq
from brevitas_cpp.function import get_upper_bound_on_l1_norm
from brevitas_cpp.nn import QuantConv2d, QuantIdentity, QuantLinear, QuantReLU
from brevitas_cpp.proxy import (
    DecoupledWeightQuantProxyFromInjector,
    DecoupledWeightQuantWithInputProxyFromInjector,
)
from brevitas_cpp.quant import (
    Int4WeightPerTensorFixedPointDecoupled,
    Int4WeightPerTensorFloatDecoupled,
    Int8AccumulatorAwareWeightQuant,
    Int8AccumulatorAwareZeroCenterWeightQuant,
    Int8ActPerTensorFloat,
    Int8ActPerTensorFloatMinMaxInit,
    Int8WeightNormL2PerChannelFixedPoint,
    Int8WeightPerChannelFloatDecoupled,
    Uint8ActPerTensorFloat,
)
from brevitas_cpp.quant.solver import QuantizerSolveError
from brevitas_cpp.quant_tensor import IntQuantTensor

A2Q = (Int8AccumulatorAwareWeightQuant, Int8AccumulatorAwareZeroCenterWeightQuant)
WITHOUT_INPUT = (
    Int4WeightPerTensorFloatDecoupled,
    Int4WeightPerTensorFixedPointDecoupled,
    Int8WeightPerChannelFloatDecoupled,
    Int8WeightNormL2PerChannelFixedPoint,
)
ALL = WITHOUT_INPUT + A2Q
# An input quantizer with a fixed initial scale: eval-mode numbers before any training step.
INPUT_QUANT = dict(
    input_quant=Int8ActPerTensorFloatMinMaxInit, input_min_val=-3.0, input_max_val=3.0
)
# (input bit width, input signed) pairs the accumulator bounds are checked for.
INPUT_FORMATS = [(8, True), (8, False), (4, True), (4, False)]


def seeded_conv(out_channels: int = 4) -> nn.Conv2d:
    torch.manual_seed(0)
    return nn.Conv2d(3, out_channels, 3)


def tensor_quant(quant, layer: nn.Module, **settings) -> nn.Module:
    return quant.let(module=layer, tracked_parameter_list=[layer.weight], **settings).tensor_quant


def kind(module: nn.Module) -> str:
    """A block's class name (under BREVITAS_JIT=1 a submodule may be a RecursiveScriptModule
    that keeps it as original_name)."""
    if isinstance(module, torch.jit.RecursiveScriptModule):
        return module.original_name
    return type(module).__name__


def per_channel(w: torch.Tensor) -> torch.Tensor:
    return w.reshape(w.shape[0], -1)


def channel_shape(w: torch.Tensor) -> tuple:
    return (w.shape[0],) + (1,) * (w.dim() - 1)


def a2q_bound(acc_bits: int, in_bits: int, signed: bool) -> float:
    """A2Q: (2^(P-1) - 1) / (largest input magnitude, rounded up to a power of two)."""
    return (2 ** (acc_bits - 1) - 1) * 2.0 ** (int(signed) - in_bits)


def a2q_plus_bound(acc_bits: int, in_bits: int) -> float:
    """A2Q+: (2^P - 2) / (2^N - 1)."""
    return (2**acc_bits - 2) / (2**in_bits - 1)


def l1_bound(quant, acc_bits: int, in_bits: int, signed: bool) -> float:
    if quant is Int8AccumulatorAwareZeroCenterWeightQuant:
        return a2q_plus_bound(acc_bits, in_bits)
    return a2q_bound(acc_bits, in_bits, signed)


def max_input_magnitude(in_bits: int, signed: bool) -> int:
    return 2 ** (in_bits - 1) if signed else 2**in_bits - 1


def perturb_learned(block: nn.Module, seed: int = 1) -> None:
    """Moves every learned tensor off its initial value (so g != norm(w), s != its init)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in block.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.3)


# ---- core blocks -------------------------------------------------------------------------------


@pytest.mark.parametrize("round_to_zero", [False, True])
def test_decoupled_int_quant_formula_and_gradient(round_to_zero):
    torch.manual_seed(0)
    x = (torch.randn(4, 9) * 0.2).requires_grad_()
    pre_scale = torch.rand(4, 1) * 0.02 + 0.01
    pre_zero_point = torch.randn(4, 1) * 0.5
    scale = torch.rand(4, 1) * 0.05 + 0.01
    zero_point = torch.tensor(0.0)
    bit_width = torch.tensor(4.0)
    extra = {"float_to_int_impl": RoundToZeroSte()} if round_to_zero else {}
    block = DecoupledIntQuant(narrow_range=True, signed=True, input_view_impl=Identity(), **extra)
    y = block(pre_scale, pre_zero_point, scale, zero_point, bit_width, x)

    v = x.detach() / pre_scale + pre_zero_point
    rounded = torch.trunc(v) if round_to_zero else torch.round(v)
    y_int = torch.clamp(rounded, -7.0, 7.0)  # narrow signed 4 bits
    assert torch.equal(y, (y_int - zero_point) * scale)
    assert torch.equal(block.to_int(pre_scale, pre_zero_point, bit_width, x), y_int)
    # Straight-through rounding, the clamp's gradient only inside the range.
    g = torch.randn_like(y)
    y.backward(g)
    inside = (rounded >= -7.0) & (rounded <= 7.0)
    torch.testing.assert_close(x.grad, g * scale * inside / pre_scale, rtol=1e-6, atol=0.0)


def test_norm_stats_per_channel():
    x = torch.randn(5, 12)
    assert torch.equal(L1Norm(1)(x), x.norm(p=1, dim=1, keepdim=True))
    torch.testing.assert_close(L1Norm(1)(x), x.abs().sum(1, keepdim=True))
    torch.testing.assert_close(L2Norm(1)(x), x.pow(2).sum(1, keepdim=True).sqrt())
    for norm in (L1Norm, L2Norm):
        with pytest.raises(NotImplementedError, match="per-tensor .*stats_reduce_dim"):
            norm(None)


def test_pre_zero_center_zero_point():
    w = torch.randn(4, 3, 3, 3)
    scale = torch.rand(4, 1, 1, 1) + 0.5
    block = PreZeroCenterZeroPoint(1, OverOutputChannelView(), (4, 1, 1, 1))
    mean = w.reshape(4, -1).mean(1).reshape(4, 1, 1, 1)
    assert torch.equal(block.get_zero_center(w), -mean)
    assert torch.equal(block(w, scale, torch.tensor(8.0)), -mean / scale)
    with pytest.raises(ValueError, match="pre_zero_point_shape"):
        PreZeroCenterZeroPoint(1, OverOutputChannelView())


def test_upper_bound_on_l1_norm():
    p, n = torch.tensor(16.0), torch.tensor(8.0)
    assert get_upper_bound_on_l1_norm(p, n, True).item() == 32767 / 128
    assert get_upper_bound_on_l1_norm(p, n, False).item() == 32767 / 256


def test_pre_scaling_blocks_refuse_bad_arguments():
    conv = seeded_conv()
    view = OverOutputChannelView()
    scaling = nn.Identity()
    shape = channel_shape(conv.weight)
    with pytest.raises(NotImplementedError, match="shared by several layers"):
        ParameterPreScalingWeightNorm(
            scaling, L2Norm(1), view, [conv.weight, seeded_conv().weight], shape
        )
    with pytest.raises(ValueError, match="pre_scaling_shape"):
        ParameterPreScalingWeightNorm(scaling, L2Norm(1), view, [conv.weight])
    with pytest.raises(TypeError, match="PreZeroCenterZeroPoint"):
        AccumulatorAwareZeroCenterParameterPreScaling(
            scaling, ZeroZeroPoint(), L1Norm(1), nn.Identity(), view, [conv.weight], shape
        )


# ---- stock quantizers: blocks and formulas -------------------------------------------------------


def test_stock_quantizers_build_brevitas_blocks():
    conv = seeded_conv()
    for quant in WITHOUT_INPUT:
        assert type(tensor_quant(quant, conv)) is DecoupledRescalingIntQuant, quant.__name__
        assert quant.proxy_class is DecoupledWeightQuantProxyFromInjector
    for quant in A2Q:
        assert type(tensor_quant(quant, conv)) is DecoupledRescalingIntQuantWithInput
        assert quant.proxy_class is DecoupledWeightQuantWithInputProxyFromInjector
        assert quant.accumulator_bit_width == 32
    norm = tensor_quant(Int8WeightNormL2PerChannelFixedPoint, conv)
    assert type(norm.pre_scaling_impl) is ParameterPreScalingWeightNorm
    a2q = tensor_quant(Int8AccumulatorAwareWeightQuant, conv)
    assert type(a2q.pre_scaling_impl) is AccumulatorAwareParameterPreScaling
    assert kind(a2q.decoupled_int_quant.float_to_int_impl) == "RoundToZeroSte"
    a2q_plus = tensor_quant(Int8AccumulatorAwareZeroCenterWeightQuant, conv)
    assert type(a2q_plus.pre_scaling_impl) is AccumulatorAwareZeroCenterParameterPreScaling
    assert type(a2q_plus.pre_zero_point_impl) is PreZeroCenterZeroPoint
    # Brevitas's state_dict keys: the pre-clipping block holds its own copy of the scale.
    assert sorted(a2q.state_dict()) == [
        "pre_scaling_impl.accumulator_bit_width.bit_width",
        "pre_scaling_impl.scaling_impl.value",
        "pre_scaling_impl.value",
        "scaling_impl.value",
    ]


def test_per_channel_float_decoupled():
    """pre_scale = max|w_c| / 127 from the weight; the learned scale starts there and is free."""
    conv = seeded_conv()
    tq = tensor_quant(Int8WeightPerChannelFloatDecoupled, conv)
    w = conv.weight.detach()
    y, scale, zero_point, bit_width, pre_scale, pre_zero_point = tq(conv.weight)
    assert torch.equal(pre_scale, w.abs().amax(dim=(1, 2, 3), keepdim=True) / 127.0)
    assert pre_zero_point.item() == 0.0 and zero_point.item() == 0.0 and bit_width.item() == 8
    torch.testing.assert_close(scale, pre_scale)  # initialised from the same statistic
    assert torch.equal(y, torch.clamp(torch.round(w / pre_scale), -127, 127) * scale)
    with torch.no_grad():
        tq.scaling_impl.value.mul_(2.0)
    y2, scale2, _, _, pre_scale2, _ = tq(conv.weight)
    assert torch.equal(pre_scale2, pre_scale) and torch.equal(scale2, 2 * scale)
    assert torch.equal(y2, torch.clamp(torch.round(w / pre_scale), -127, 127) * scale2)


@pytest.mark.parametrize("quant", [Int4WeightPerTensorFloatDecoupled])
def test_per_tensor_l2_decoupled(quant):
    """pre_scale = RMS over channels of max|w_c|, over 7 (narrow signed 4 bits)."""
    conv = seeded_conv()
    tq = tensor_quant(quant, conv)
    w = conv.weight.detach()
    y, scale, _, _, pre_scale, _ = tq(conv.weight)
    maxes = w.abs().amax(dim=(1, 2, 3))
    torch.testing.assert_close(pre_scale, (maxes.norm(2) / maxes.numel() ** 0.5 / 7).reshape(1))
    assert torch.equal(y, torch.clamp(torch.round(w / pre_scale), -7, 7) * scale)


def test_weight_norm_l2_formula():
    """y = clip(round(w / pre_scale)) * s with pre_scale = s * ||w_c||_2 / g."""
    conv = seeded_conv()
    tq = tensor_quant(Int8WeightNormL2PerChannelFixedPoint, conv)
    w = conv.weight.detach()
    out = tq(conv.weight)
    # Initially g = ||w_c||_2 and s = max|w_c| / 127: pre_scale = s.
    torch.testing.assert_close(out[4], out[1])
    torch.testing.assert_close(out[1], w.abs().amax(dim=(1, 2, 3), keepdim=True) / 127)
    perturb_learned(tq)
    y, scale, _, _, pre_scale, _ = tq(conv.weight)
    s = 2.0 ** tq.scaling_impl.value.detach()  # learned in the log2 domain
    # As in Brevitas, the pre-clipping block learns its own copy of s (same init), and no
    # restriction reaches g (used as |g|).
    s_pre = 2.0 ** tq.pre_scaling_impl.scaling_impl.value.detach()
    g = tq.pre_scaling_impl.value.detach().abs()
    d_w = per_channel(w).norm(p=2, dim=1).reshape(channel_shape(w))
    torch.testing.assert_close(scale, s)
    torch.testing.assert_close(pre_scale, s_pre * d_w / g)
    assert torch.equal(y, torch.clamp(torch.round(w / pre_scale), -127, 127) * scale)


@pytest.mark.parametrize("acc_bits", [10, 12, 16, 32])
@pytest.mark.parametrize("in_bits,signed", INPUT_FORMATS)
def test_a2q_formula_and_l1_bound(acc_bits, in_bits, signed):
    """pre_scale = ||w_c||_1 / min(g / s, T), rounding towards zero: every output channel's
    integer weights satisfy sum|q| <= T = (2^(P-1) - 1) * 2^(signed - N), so no dot product with
    N-bit inputs exceeds 2^(P-1) - 1."""
    conv = seeded_conv(6)
    tq = tensor_quant(Int8AccumulatorAwareWeightQuant, conv, accumulator_bit_width=acc_bits)
    perturb_learned(tq)
    with torch.no_grad():
        tq.pre_scaling_impl.value.add_(3.0)  # g 8x larger: the bound binds for narrow P
    w = conv.weight.detach()
    in_bw = torch.tensor(float(in_bits))
    y, scale, _, _, pre_scale, _ = tq(conv.weight, in_bw, signed)

    bound = a2q_bound(acc_bits, in_bits, signed)
    s = 2.0 ** tq.pre_scaling_impl.scaling_impl.value.detach()  # its copy of s
    g = 2.0 ** tq.pre_scaling_impl.value.detach()
    d_w = per_channel(w).norm(p=1, dim=1).reshape(channel_shape(w))
    torch.testing.assert_close(pre_scale, d_w / torch.clamp(g / s, max=bound))
    q = torch.clamp(torch.trunc(w / pre_scale), -127, 127)
    assert torch.equal(y, q * scale)
    l1 = per_channel(q).abs().sum(1)
    assert bool((l1 <= bound).all()), (l1, bound)
    worst_accumulator = l1 * max_input_magnitude(in_bits, signed)
    assert bool((worst_accumulator <= 2 ** (acc_bits - 1) - 1).all())
    if acc_bits <= 12:  # the clamp binds: the bound is what sets pre_scale
        torch.testing.assert_close(pre_scale, d_w / bound)


@pytest.mark.parametrize("acc_bits", [10, 16])
@pytest.mark.parametrize("in_bits,signed", INPUT_FORMATS)
def test_a2q_plus_formula_and_l1_bound(acc_bits, in_bits, signed):
    """Zero-centered weights (w - mean_c) / pre_scale, rounded towards zero, with
    sum|q| <= (2^P - 2) / (2^N - 1) per output channel."""
    conv = seeded_conv(6)
    tq = tensor_quant(
        Int8AccumulatorAwareZeroCenterWeightQuant, conv, accumulator_bit_width=acc_bits
    )
    perturb_learned(tq)
    with torch.no_grad():
        tq.pre_scaling_impl.value.add_(3.0)
    w = conv.weight.detach()
    y, scale, _, _, pre_scale, pre_zero_point = tq(
        conv.weight, torch.tensor(float(in_bits)), signed
    )
    bound = a2q_plus_bound(acc_bits, in_bits)
    mean = per_channel(w).mean(1).reshape(channel_shape(w))
    centered = w - mean
    s = 2.0 ** tq.pre_scaling_impl.scaling_impl.value.detach()  # its copy of s
    g = 2.0 ** tq.pre_scaling_impl.value.detach()
    d_w = per_channel(centered).norm(p=1, dim=1).reshape(channel_shape(w))
    torch.testing.assert_close(pre_scale, d_w / torch.clamp(g / s, max=bound))
    torch.testing.assert_close(pre_zero_point, -mean / pre_scale)
    q = torch.clamp(torch.trunc(w / pre_scale + pre_zero_point), -127, 127)
    assert torch.equal(y, q * scale)
    l1 = per_channel(q).abs().sum(1)
    assert bool((l1 <= bound).all()), (l1, bound)


# ---- bad settings -------------------------------------------------------------------------------


@pytest.mark.parametrize("quant,needed", [(A2Q[0], {True: 9, False: 10}), (A2Q[1], None)])
def test_accumulator_too_narrow_for_the_input_is_an_error(quant, needed):
    conv = seeded_conv()
    tq = tensor_quant(quant, conv, accumulator_bit_width=8)
    for signed in (True, False):
        minimum = needed[signed] if needed else 9  # A2Q+: N + 1 whatever the sign
        with pytest.raises(Exception, match=f"accumulator_bit_width=8 .*>= {minimum}") as info:
            tq(conv.weight, torch.tensor(8.0), signed)
        assert "8-bit " + ("signed" if signed else "unsigned") in str(info.value)
    # Wide enough for 6-bit signed inputs: fine.
    tq(conv.weight, torch.tensor(6.0), True)


def test_accumulator_bit_width_setting_is_checked():
    conv = seeded_conv()
    for bad in (1, 12.5, True, "16"):
        with pytest.raises(QuantizerSolveError, match="accumulator_bit_width must be an int"):
            tensor_quant(Int8AccumulatorAwareWeightQuant, conv, accumulator_bit_width=bad)


def test_a2q_layer_with_too_narrow_accumulator_names_the_setting():
    layer = QuantLinear(
        6,
        3,
        weight_quant=Int8AccumulatorAwareWeightQuant,
        input_quant=Int8ActPerTensorFloat,
        weight_accumulator_bit_width=6,
    )
    with pytest.raises(Exception, match="accumulator_bit_width=6 is too small for 8-bit signed"):
        layer(torch.randn(2, 6))


def test_shared_pre_scaling_quantizer_is_refused():
    first = QuantLinear(4, 3, weight_quant=Int8WeightNormL2PerChannelFixedPoint)
    with pytest.raises(NotImplementedError, match="shared by several layers"):
        QuantLinear(4, 3, weight_quant=first.weight_quant)


# ---- proxies in layers --------------------------------------------------------------------------


@pytest.mark.parametrize("quant", WITHOUT_INPUT)
def test_decoupled_proxy_in_a_layer(quant):
    torch.manual_seed(0)
    layer = QuantConv2d(3, 4, 3, weight_quant=quant)
    proxy = layer.weight_quant
    assert isinstance(proxy, DecoupledWeightQuantProxyFromInjector)
    assert not proxy.requires_quant_input
    y, scale, zero_point, bit_width, pre_scale, pre_zero_point = proxy.tensor_quant(layer.weight)
    qw = layer.quant_weight()
    assert isinstance(qw, IntQuantTensor)
    assert torch.equal(qw.value, y) and torch.equal(qw.scale, scale)
    assert torch.equal(qw.bit_width, bit_width) and qw.signed
    assert torch.equal(proxy.pre_scale(), pre_scale)
    assert torch.equal(proxy.pre_zero_point(), pre_zero_point)
    x = torch.randn(2, 3, 6, 6)
    assert torch.equal(layer(x), F.conv2d(x, y, layer.bias))


@pytest.mark.parametrize("quant", WITHOUT_INPUT)
def test_decoupled_layer_scripts_like_eager(quant):
    torch.manual_seed(0)
    layer = QuantLinear(6, 4, weight_quant=quant, **INPUT_QUANT).eval()
    x = torch.randn(3, 6)
    # Eager first: a scale initialised on the first call shares its parameter with the scripted
    # copy but not its init flag (see docs/architecture.md, TorchScript).
    expected = layer(x)
    scripted = torch.jit.script(layer)
    assert torch.equal(scripted(x), expected)


@pytest.mark.parametrize("quant", A2Q)
def test_a2q_layer_uses_the_quantized_input(quant):
    torch.manual_seed(0)
    layer = QuantLinear(
        8, 5, bias=True, weight_quant=quant, input_quant=Int8ActPerTensorFloat,
        weight_accumulator_bit_width=14,
    )  # fmt: skip
    proxy = layer.weight_quant
    assert isinstance(proxy, DecoupledWeightQuantWithInputProxyFromInjector)
    assert proxy.requires_quant_input
    x = torch.randn(3, 8)
    out = layer(x)
    qx = layer.input_quant(x)
    qw = proxy.tensor_quant(layer.weight, qx.bit_width, True)
    assert torch.equal(out, F.linear(qx.value, qw[0], layer.bias))
    # return_quant_tensor: the same numbers, the input reaching the proxy as an IntQuantTensor.
    layer.return_quant_tensor = True
    out_qt = layer(x)
    assert isinstance(out_qt, IntQuantTensor) and torch.equal(out_qt.value, out)
    with pytest.raises(NotImplementedError, match="depends on the quantized input"):
        proxy.pre_scale()


@pytest.mark.parametrize("quant", A2Q)
def test_a2q_without_a_quantized_input_raises_what_brevitas_asserts(quant):
    """Brevitas asserts "No cached quant input found" (scale() runs the proxy): the error is an
    AssertionError and a RuntimeError, Brevitas's phrase first."""
    layer = QuantLinear(10, 5, weight_quant=quant)
    for use in (layer.weight_quant.scale, layer.weight_quant.zero_point):
        with pytest.raises(AssertionError, match=r"^No cached quant input found: .*bounds the"):
            use()
    with pytest.raises(RuntimeError, match=r"^No cached quant input found: "):
        layer(torch.randn(2, 10))


def test_a2q_input_sign_comes_from_the_input():
    """An unsigned input halves the largest input magnitude's power of two: a larger bound."""
    torch.manual_seed(0)
    kwargs = dict(weight_quant=Int8AccumulatorAwareWeightQuant, weight_accumulator_bit_width=12)
    signed_in = QuantLinear(8, 5, input_quant=Int8ActPerTensorFloat, **kwargs)
    unsigned_in = QuantLinear(8, 5, input_quant=Uint8ActPerTensorFloat, **kwargs)
    unsigned_in.load_state_dict(signed_in.state_dict(), strict=False)
    with torch.no_grad():
        unsigned_in.weight.copy_(signed_in.weight)
        for layer in (signed_in, unsigned_in):
            layer.weight_quant.tensor_quant.pre_scaling_impl.value.add_(4.0)
    x = torch.rand(2, 8)
    bw = torch.tensor(8.0)
    for layer, signed in ((signed_in, True), (unsigned_in, False)):
        layer(x)  # the plain-tuple path, sign from the input quantizer
        qw = layer.weight_quant(layer.weight, layer.input_quant(x))
        expected = layer.weight_quant.tensor_quant(layer.weight, bw, signed)[0]
        assert torch.equal(qw.value, expected)
        q = per_channel(qw.value / qw.scale).round().abs().sum(1)
        assert bool((q <= a2q_bound(12, 8, signed)).all())
    # From a QuantReLU (unsigned) and a QuantIdentity (signed) returning QuantTensors.
    for act, signed in ((QuantReLU(return_quant_tensor=True), False), (QuantIdentity(), True)):
        act.return_quant_tensor = True
        qx = act(torch.randn(2, 8))
        assert qx.signed == signed
        plain = QuantLinear(8, 5, **kwargs)
        out = plain(qx)
        qw = plain.weight_quant.tensor_quant(plain.weight, qx.bit_width, signed)[0]
        assert torch.equal(out, F.linear(qx.value, qw, plain.bias))


def test_a2q_without_a_quantized_input_is_a_clear_error_and_the_cache_fixes_it():
    torch.manual_seed(0)
    layer = QuantConv2d(3, 4, 3, weight_quant=Int8AccumulatorAwareWeightQuant)
    with pytest.raises(RuntimeError, match="input_quant=.*cache_inference_quant_act"):
        layer(torch.randn(1, 3, 5, 5))
    with pytest.raises(RuntimeError, match="needs the bit width and sign"):
        layer.quant_weight()
    # Cached in eval from a quantized input, then used where no input is given.
    layer = QuantConv2d(
        3, 4, 3, weight_quant=Int8AccumulatorAwareWeightQuant, input_quant=Uint8ActPerTensorFloat,
        input_bit_width=4, weight_accumulator_bit_width=12,
    )  # fmt: skip
    layer.weight_quant.cache_inference_quant_act = True
    layer.eval()
    x = torch.rand(1, 3, 5, 5)
    out = layer(x)
    qw = layer.quant_weight()
    expected = layer.weight_quant.tensor_quant(layer.weight, torch.tensor(4.0), False)
    assert torch.equal(qw.value, expected[0]) and torch.equal(qw.scale, expected[1])
    assert torch.equal(out, F.conv2d(layer.input_quant(x).value, qw.value, layer.bias))


@pytest.mark.parametrize("quant", A2Q)
def test_a2q_layer_refuses_scripting(quant):
    layer = QuantLinear(6, 4, weight_quant=quant, input_quant=Int8ActPerTensorFloat)
    with pytest.raises(RuntimeError, match="needs the quantized input"):
        torch.jit.script(layer)


@pytest.mark.parametrize("quant", ALL)
def test_state_dict_round_trip(quant):
    torch.manual_seed(0)
    kwargs = dict(weight_quant=quant, **INPUT_QUANT)
    layer = QuantLinear(6, 4, **kwargs)
    perturb_learned(layer.weight_quant)
    x = torch.randn(3, 6)
    layer.eval()
    expected = layer(x)
    torch.manual_seed(1)
    fresh = QuantLinear(6, 4, **kwargs).eval()
    fresh.load_state_dict(layer.state_dict())
    assert torch.equal(fresh(x), expected)


@pytest.mark.parametrize("quant", [Int8WeightPerChannelFloatDecoupled, A2Q[0], A2Q[1]])
def test_torch_qcdq_export(quant):
    torch.manual_seed(0)
    settings = {"weight_accumulator_bit_width": 16} if quant in A2Q else {}
    model = nn.Sequential(
        QuantLinear(6, 4, weight_quant=quant, input_quant=Int8ActPerTensorFloat, **settings)
    )
    model.eval()
    x = torch.randn(2, 6)
    program = export_torch_qcdq(model, (x,))
    assert torch.equal(program.module()(x), model(x))


# ---- training -----------------------------------------------------------------------------------

LAYERS = {
    "linear": (lambda **kw: QuantLinear(12, 6, bias=True, **kw), (16, 12)),
    "conv2d": (lambda **kw: QuantConv2d(3, 6, 3, bias=True, **kw), (4, 3, 6, 6)),
}


TRAIN_ACC_BITS = 20


def train_steps(quant, kind: str, steps: int = 8):
    """A few plain SGD steps towards a random teacher; returns the layer and the losses."""
    torch.manual_seed(0)
    make, in_shape = LAYERS[kind]
    # Wide enough for the norms to stay below the bound, so that they learn too (where the
    # bound binds, g / s is clamped and g gets no gradient).
    settings = {"weight_accumulator_bit_width": TRAIN_ACC_BITS} if quant in A2Q else {}
    layer = make(weight_quant=quant, input_quant=Int8ActPerTensorFloat, **settings)
    teacher = make()  # float
    x = torch.randn(*in_shape)
    with torch.no_grad():
        target = teacher(x)
    # The input quantizer's scale is still collecting statistics: not among those that move.
    params = [p for name, p in layer.named_parameters() if not name.startswith("input_quant")]
    before = [p.detach().clone() for p in params]
    opt = torch.optim.SGD(params, lr=0.02)
    losses = []
    for _ in range(steps):
        loss = F.mse_loss(layer(x), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    changed = [not torch.equal(b, p.detach()) for b, p in zip(before, params)]
    return layer, losses, changed


@pytest.mark.parametrize("kind", sorted(LAYERS))
@pytest.mark.parametrize("quant", ALL, ids=lambda q: q.__name__)
def test_trains_with_sgd(quant, kind):
    layer, losses, changed = train_steps(quant, kind)
    blocks = layer.weight_quant.tensor_quant
    if JIT_ENABLED:
        assert isinstance(blocks, torch.jit.ScriptModule)
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0], losses
    assert all(changed), "every parameter (weight, bias, learned scales and norms) moves"
    if quant in A2Q:  # the bound still holds for the trained weights
        qx = layer.input_quant(torch.randn(2, *LAYERS[kind][1][1:]))
        qw = layer.weight_quant(layer.weight, qx)
        q = per_channel(qw.value / qw.scale).round().abs().sum(1)
        assert bool((q <= l1_bound(quant, TRAIN_ACC_BITS, 8, True)).all())


def test_trains_with_sgd_in_the_other_jit_mode():
    """The training test again in a fresh interpreter with BREVITAS_JIT flipped, so that both
    block kinds (plain modules and TorchScript modules) train whichever mode this run uses."""
    if os.environ.get("BREVITAS_CPP_DECOUPLED_CHILD"):
        pytest.skip("already the child run")
    root = os.path.dirname(os.path.dirname(brevitas_cpp.__file__))
    env = dict(
        os.environ,
        BREVITAS_JIT="0" if JIT_ENABLED else "1",
        BREVITAS_CPP_DECOUPLED_CHILD="1",
        PYTHONPATH=root,
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__,
         "-k", "test_trains_with_sgd and not other_jit_mode"],
        capture_output=True, text=True, timeout=600, env=env, cwd=root,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert f"{len(ALL) * len(LAYERS)} passed" in result.stdout
