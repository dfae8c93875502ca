"""Weight and bias proxies: QuantTensor outputs against written-out quantization formulas,
sharing between layers, caching, disabled quantizers, and the bias's input-scale requirement."""

import warnings

import pytest
import torch
from helpers import ref_int_quant
from torch import nn

from brevitas_cpp import config
from brevitas_cpp.inject.enum import ScalingImplType
from brevitas_cpp.proxy import (
    BiasQuantProxyFromInjector,
    BiasQuantProxyProtocol,
    WeightQuantProxyFromInjector,
    WeightQuantProxyProtocol,
)
from brevitas_cpp.quant import (
    Int8Bias,
    Int8BiasPerTensorFloatInternalScaling,
    Int8WeightPerChannelFloat,
    Int8WeightPerTensorFloat,
    Int16Bias,
    NoneBiasQuant,
    NoneWeightQuant,
    SignedBinaryWeightPerTensorConst,
)
from brevitas_cpp.quant_tensor import IntQuantTensor

ZERO = torch.tensor(0.0)
BW8 = torch.tensor(8.0)
BW16 = torch.tensor(16.0)


def int8_narrow(w: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return ref_int_quant(w, scale, ZERO, BW8, True, True)


class StandInConv(nn.Module):
    """What a proxy reads from a conv layer: weight [C_out, C_in, k, k], bias, out_channels,
    output_channel_dim."""

    def __init__(self, cin: int = 3, cout: int = 4, k: int = 3, seed: int = 0, bias: bool = True):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.weight = nn.Parameter(torch.randn(cout, cin, k, k, generator=g))
        self.bias = nn.Parameter(torch.randn(cout, generator=g)) if bias else None
        self.out_channels = cout
        self.output_channel_dim = 0


class StandInLinear(nn.Linear):
    """A Linear (bias scales are laid out along its last dim)."""

    def __init__(self, fin: int = 6, fout: int = 5, seed: int = 0):
        super().__init__(fin, fout)
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            self.weight.copy_(torch.randn(fout, fin, generator=g))
            self.bias.copy_(torch.randn(fout, generator=g))
        self.output_channel_dim = 0


def per_tensor_ref(w: torch.Tensor) -> torch.Tensor:
    return w.abs().max() / 127


def per_channel_ref(w: torch.Tensor) -> torch.Tensor:
    return (w.abs().flatten(1).max(dim=1).values / 127).view(-1, *([1] * (w.dim() - 1)))


# ---- weights -------------------------------------------------------------------------------------


def test_weight_per_tensor_values_and_fields():
    layer = StandInConv()
    proxy = WeightQuantProxyFromInjector(layer, Int8WeightPerTensorFloat)
    out = proxy(layer.weight)
    w = layer.weight.detach()
    scale = per_tensor_ref(w)
    assert isinstance(out, IntQuantTensor)
    assert torch.equal(out.value, ref_int_quant(w, scale, ZERO, BW8, True, True))
    assert torch.equal(out.scale, scale)
    assert torch.equal(out.zero_point, ZERO)
    assert torch.equal(out.bit_width, BW8)
    assert out.signed is True and out.training is True
    proxy.eval()
    assert proxy(layer.weight).training is False
    # The same numbers as the quantizer the proxy was built from.
    quantizer = Int8WeightPerTensorFloat.let(module=layer, tracked_parameter_list=[layer.weight])
    expected = quantizer.tensor_quant(layer.weight)
    assert torch.equal(out.value, expected[0]) and torch.equal(out.scale, expected[1])


def test_weight_proxy_attributes():
    layer = StandInConv()
    proxy = WeightQuantProxyFromInjector(layer, Int8WeightPerTensorFloat)
    assert proxy.is_quant_enabled and proxy.is_signed is True and proxy.is_narrow_range is True
    assert proxy.rounding_mode == "ROUND"
    assert not proxy.requires_quant_input and not proxy.is_groupwise
    assert torch.equal(proxy.scale(), per_tensor_ref(layer.weight.detach()))
    assert torch.equal(proxy.zero_point(), ZERO)
    assert torch.equal(proxy.bit_width(), BW8)
    assert torch.equal(proxy.max_uint_value(BW8), torch.tensor(254.0))
    assert proxy.tracked_module_list == [layer]
    assert proxy.tracked_parameter_list[0] is layer.weight
    assert proxy.quant_injector.module is layer and proxy.quant_injector.proxy_module is proxy
    assert proxy.update_state_dict_impl is None
    x = torch.randn(3)
    assert torch.equal(proxy.apply_input_view(x), x)  # no per-group view
    assert isinstance(proxy, WeightQuantProxyProtocol)
    assert not isinstance(proxy, BiasQuantProxyProtocol)


def test_weight_per_channel():
    layer = StandInConv(cout=5)
    proxy = WeightQuantProxyFromInjector(layer, Int8WeightPerChannelFloat)
    out = proxy(layer.weight)
    w = layer.weight.detach()
    scale = per_channel_ref(w)
    assert out.scale.shape == (5, 1, 1, 1)
    assert torch.equal(out.scale, scale)
    assert torch.equal(out.value, ref_int_quant(w, scale, ZERO, BW8, True, True))


def test_weight_gradient_matches_formula():
    layer = StandInConv()
    proxy = WeightQuantProxyFromInjector(layer, Int8WeightPerTensorFloat)
    g = torch.randn(layer.weight.shape, generator=torch.Generator().manual_seed(3))
    proxy(layer.weight).value.backward(g)
    w = layer.weight.detach().clone().requires_grad_()
    # Stats scaling: the scale depends on w (max), the clamp is straight-through.
    ref_int_quant(w, w.abs().max() / 127, ZERO, BW8, True, True, clamp_ste=True).backward(g)
    torch.testing.assert_close(layer.weight.grad, w.grad, rtol=1e-6, atol=1e-7)


def test_weight_learned_scale_gradient():
    layer = StandInConv()
    quant = Int8WeightPerTensorFloat.let(scaling_impl_type=ScalingImplType.PARAMETER_FROM_STATS)
    proxy = WeightQuantProxyFromInjector(layer, quant)
    proxy(layer.weight)  # initialises the learned scale from max|w|
    value = proxy.tensor_quant.scaling_impl.value
    assert torch.equal(value.detach(), layer.weight.detach().abs().max())
    g = torch.randn(layer.weight.shape, generator=torch.Generator().manual_seed(4))
    proxy(layer.weight).value.backward(g)
    v = value.detach().clone().requires_grad_()
    w = layer.weight.detach().clone().requires_grad_()
    ref_int_quant(w, v / 127, ZERO, BW8, True, True).backward(g)
    torch.testing.assert_close(value.grad, v.grad, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(layer.weight.grad, w.grad, rtol=1e-6, atol=1e-7)


def test_shared_weight_proxy_per_tensor_scale_is_max_over_layers():
    l1, l2 = StandInConv(seed=0), StandInConv(cin=2, cout=4, k=1, seed=1)
    with torch.no_grad():
        l2.weight.mul_(10)  # so that l2 holds the largest weight
    proxy = WeightQuantProxyFromInjector(l1, Int8WeightPerTensorFloat)
    first = proxy.tensor_quant
    proxy.add_tracked_module(l2)
    assert proxy.tensor_quant is not first
    assert proxy.tracked_module_list == [l1, l2]
    assert proxy.quant_injector.module == (l1, l2)
    scale = torch.max(l1.weight.detach().abs().max(), l2.weight.detach().abs().max()) / 127
    assert torch.equal(scale, l2.weight.detach().abs().max() / 127)
    for layer in (l1, l2):
        out = proxy(layer.weight)
        assert torch.equal(out.scale, scale)
        assert torch.equal(out.value, int8_narrow(layer.weight.detach(), scale))
    assert torch.equal(proxy.scale(), scale)


def test_shared_weight_proxy_per_channel_concatenates():
    l1, l2 = StandInConv(cout=4, seed=0), StandInConv(cin=5, cout=4, k=1, seed=1)
    proxy = WeightQuantProxyFromInjector(l1, Int8WeightPerChannelFloat)
    proxy.add_tracked_module(l2)
    rows = torch.cat([l1.weight.detach().flatten(1), l2.weight.detach().flatten(1)], dim=1)
    scale = (rows.abs().max(dim=1).values / 127).view(4, 1, 1, 1)
    for layer in (l1, l2):
        out = proxy(layer.weight)
        assert torch.equal(out.scale, scale)
        assert torch.equal(out.value, int8_narrow(layer.weight.detach(), scale))


def test_shared_per_channel_proxy_with_different_channel_counts_errors():
    proxy = WeightQuantProxyFromInjector(StandInConv(cout=4), Int8WeightPerChannelFloat)
    with pytest.raises(Exception, match="disagree on the number of output channels"):
        proxy.add_tracked_module(StandInConv(cout=3))


def test_none_and_disabled_weight_quant_pass_through():
    layer = StandInConv()
    none = WeightQuantProxyFromInjector(layer, NoneWeightQuant)
    assert none.tensor_quant is None and not none.is_quant_enabled
    assert none(layer.weight) is layer.weight
    assert none.scale() is None and none.zero_point() is None and none.bit_width() is None
    proxy = WeightQuantProxyFromInjector(layer, Int8WeightPerTensorFloat)
    proxy.disable_quant = True
    assert not proxy.is_quant_enabled
    assert proxy(layer.weight) is layer.weight
    assert proxy.scale() is None


def test_skip_create_quant_tensor_returns_value():
    layer = StandInConv()
    proxy = WeightQuantProxyFromInjector(layer, Int8WeightPerTensorFloat)
    proxy.skip_create_quant_tensor = True
    out = proxy(layer.weight)
    assert type(out) is torch.Tensor
    scale = per_tensor_ref(layer.weight.detach())
    assert torch.equal(out, ref_int_quant(layer.weight.detach(), scale, ZERO, BW8, True, True))


def test_weight_inference_cache():
    layer = StandInConv()
    proxy = WeightQuantProxyFromInjector(layer, Int8WeightPerTensorFloat)
    proxy.cache_inference_quant_weight = True
    proxy(layer.weight)
    assert proxy._cached_weight is None  # training: nothing cached
    proxy.eval()
    proxy(layer.weight)
    scale = per_tensor_ref(layer.weight.detach())
    assert torch.equal(proxy._cached_weight.scale, scale)
    with torch.no_grad():
        layer.weight.mul_(2)
    assert torch.equal(proxy.scale(), scale)  # the cached scale, not a recomputed one
    proxy.cache_inference_quant_weight = False
    assert proxy._cached_weight is None
    assert torch.equal(proxy.scale(), per_tensor_ref(layer.weight.detach()))


def test_binary_weight():
    layer = StandInConv()
    proxy = WeightQuantProxyFromInjector(layer, SignedBinaryWeightPerTensorConst)
    out = proxy(layer.weight)
    w = layer.weight.detach()
    expected = torch.where(w >= 0, torch.tensor(0.1), torch.tensor(-0.1))
    assert torch.equal(out.value, expected)
    assert torch.equal(out.bit_width, torch.tensor(1.0)) and out.signed is True


def test_preserve_state_dict_reinit_keeps_learned_scale():
    layer = StandInConv()
    quant = Int8WeightPerTensorFloat.let(scaling_impl_type=ScalingImplType.PARAMETER_FROM_STATS)
    proxy = WeightQuantProxyFromInjector(layer, quant)
    proxy(layer.weight)
    with torch.no_grad():
        proxy.tensor_quant.scaling_impl.value.mul_(3)
    learned = proxy.tensor_quant.scaling_impl.value.detach().clone()
    old = proxy.tensor_quant
    flags = (config.REINIT_ON_STATE_DICT_LOAD, config.IGNORE_MISSING_KEYS)
    proxy.init_tensor_quant(preserve_state_dict=True)
    assert proxy.tensor_quant is not old
    assert torch.equal(proxy.tensor_quant.scaling_impl.value.detach(), learned)
    assert (config.REINIT_ON_STATE_DICT_LOAD, config.IGNORE_MISSING_KEYS) == flags
    # Without preserving, the new quantizer starts from the weight's statistics again.
    proxy.init_tensor_quant()
    proxy(layer.weight)
    value = proxy.tensor_quant.scaling_impl.value.detach()
    assert torch.equal(value, layer.weight.detach().abs().max())


def test_weight_proxy_scripts_quantizer_under_jit():
    layer = StandInConv()
    proxy = WeightQuantProxyFromInjector(layer, Int8WeightPerTensorFloat)
    assert not isinstance(proxy, torch.jit.ScriptModule)  # proxies stay eager modules
    assert isinstance(proxy.tensor_quant, torch.jit.ScriptModule) == config.JIT_ENABLED


# ---- biases --------------------------------------------------------------------------------------


def quant_tensor(value: torch.Tensor, scale: torch.Tensor) -> IntQuantTensor:
    return IntQuantTensor(value, scale, ZERO, BW8, True, True)


def test_bias_with_input_scale_conv_per_channel():
    layer = StandInConv(cout=4)
    weight_proxy = WeightQuantProxyFromInjector(layer, Int8WeightPerChannelFloat)
    bias_proxy = BiasQuantProxyFromInjector(layer, Int16Bias)
    assert bias_proxy.requires_input_scale and bias_proxy.is_quant_enabled
    qw = weight_proxy(layer.weight)
    qin = quant_tensor(torch.randn(2, 3, 5, 5), torch.tensor(0.02))
    out = bias_proxy(layer.bias, qin, qw)
    scale = per_channel_ref(layer.weight.detach()).view(-1) * 0.02
    assert isinstance(out, IntQuantTensor)
    assert torch.equal(out.scale, scale)
    assert torch.equal(out.bit_width, BW16) and torch.equal(out.zero_point, ZERO)
    expected = ref_int_quant(layer.bias.detach(), scale, ZERO, BW16, True, False)
    assert torch.equal(out.value, expected)


def test_bias_with_input_scale_linear_uses_last_dim():
    layer = StandInLinear(fin=6, fout=5)
    weight_proxy = WeightQuantProxyFromInjector(layer, Int8WeightPerChannelFloat)
    bias_proxy = BiasQuantProxyFromInjector(layer, Int8Bias)
    qw = weight_proxy(layer.weight)
    assert qw.scale.shape == (5, 1)
    qin = quant_tensor(torch.randn(3, 6), torch.tensor(0.05))
    out = bias_proxy(layer.bias, qin, qw)
    scale = per_channel_ref(layer.weight.detach()).view(-1) * 0.05
    assert torch.equal(out.scale, scale)
    assert torch.equal(out.value, ref_int_quant(layer.bias.detach(), scale, ZERO, BW8, True, False))


def test_bias_gradient():
    layer = StandInConv()
    bias_proxy = BiasQuantProxyFromInjector(layer, Int16Bias)
    qw = WeightQuantProxyFromInjector(layer, Int8WeightPerTensorFloat)(layer.weight)
    qin = quant_tensor(torch.randn(1, 3, 4, 4), torch.tensor(0.1))
    g = torch.randn(4, generator=torch.Generator().manual_seed(2))
    bias_proxy(layer.bias, qin, qw).value.backward(g)
    b = layer.bias.detach().clone().requires_grad_()
    scale = (qw.scale * 0.1).detach().view(-1)
    ref_int_quant(b, scale, ZERO, BW16, True, False).backward(g)
    torch.testing.assert_close(layer.bias.grad, b.grad, rtol=0, atol=0)


@pytest.mark.parametrize("inputs", ["none", "plain_input", "plain_weight"])
def test_bias_needing_input_scale_errors_without_one(inputs):
    layer = StandInConv()
    bias_proxy = BiasQuantProxyFromInjector(layer, Int16Bias)
    qw = WeightQuantProxyFromInjector(layer, Int8WeightPerTensorFloat)(layer.weight)
    qin = quant_tensor(torch.randn(1, 3, 4, 4), torch.tensor(0.1))
    args = {"none": (), "plain_input": (qin.value, qw), "plain_weight": (qin, qw.value)}[inputs]
    with pytest.raises(
        RuntimeError,
        match=r"^Input scale required: BiasQuantProxyFromInjector of StandInConv: bias "
        r"quantizer Int16Bias has requires_input_scale=True.*input scale \* "
        r"weight scale",
    ):
        bias_proxy(layer.bias, *args)


def test_bias_uses_cached_scale_when_input_has_none():
    layer = StandInConv()
    bias_proxy = BiasQuantProxyFromInjector(layer, Int16Bias)
    qw = WeightQuantProxyFromInjector(layer, Int8WeightPerTensorFloat)(layer.weight)
    qin = quant_tensor(torch.randn(1, 3, 4, 4), torch.tensor(0.1))
    with pytest.warns(UserWarning, match="No quant bias cache found"):
        assert bias_proxy.scale() is None
    bias_proxy.eval()
    bias_proxy.cache_inference_quant_bias = True
    first = bias_proxy(layer.bias, qin, qw)
    again = bias_proxy(layer.bias)
    assert torch.equal(again.value, first.value) and torch.equal(again.scale, first.scale)
    assert torch.equal(bias_proxy.scale(), first.scale)
    bias_proxy.train()
    with pytest.warns(UserWarning, match="training mode"):
        bias_proxy(layer.bias)


def test_bias_internal_scaling():
    layer = StandInConv()
    bias_proxy = BiasQuantProxyFromInjector(layer, Int8BiasPerTensorFloatInternalScaling)
    assert not bias_proxy.requires_input_scale
    b = layer.bias.detach()
    # Signed, not narrow: the integer threshold is -min_int = 128.
    scale = b.abs().max() / 128
    out = bias_proxy(layer.bias)
    assert torch.equal(out.scale, scale)
    assert torch.equal(out.value, ref_int_quant(b, scale, ZERO, BW8, True, False))
    assert torch.equal(bias_proxy.scale(), scale)
    assert torch.equal(bias_proxy.zero_point(), ZERO) and torch.equal(bias_proxy.bit_width(), BW8)
    # Quantized input or not, its own scale.
    qin = quant_tensor(torch.randn(1, 3, 4, 4), torch.tensor(0.1))
    assert torch.equal(bias_proxy(layer.bias, qin, None).scale, scale)


def test_layer_without_bias_and_none_bias_quant():
    layer = StandInConv(bias=False)
    proxy = BiasQuantProxyFromInjector(layer, Int16Bias)
    assert proxy.tensor_quant is None and not proxy.is_quant_enabled
    assert proxy.tracked_parameter_list == []
    x = torch.randn(4)
    assert proxy(x) is x
    assert proxy.scale() is None and proxy.bit_width() is None
    layer = StandInConv()
    none = BiasQuantProxyFromInjector(layer, NoneBiasQuant)
    assert not none.is_quant_enabled and none(layer.bias) is layer.bias


def test_shared_bias_proxy_across_layer_types_with_input_scale_errors():
    conv, linear = StandInConv(cout=5), StandInLinear(fout=5)
    proxy = BiasQuantProxyFromInjector(conv, Int16Bias)
    proxy.add_tracked_module(linear)
    assert proxy.tracked_parameter_list == [conv.bias, linear.bias]
    qw = WeightQuantProxyFromInjector(conv, Int8WeightPerTensorFloat)(conv.weight)
    qin = quant_tensor(torch.randn(1, 3, 4, 4), torch.tensor(0.1))
    with pytest.raises(RuntimeError, match="can not be shared by layers of different types"):
        proxy(conv.bias, qin, qw)


def test_shared_bias_internal_scaling_over_both_biases():
    l1, l2 = StandInConv(seed=0), StandInConv(seed=1)
    proxy = BiasQuantProxyFromInjector(l1, Int8BiasPerTensorFloatInternalScaling)
    proxy.add_tracked_module(l2)
    scale = torch.cat([l1.bias.detach(), l2.bias.detach()]).abs().max() / 128
    assert torch.equal(proxy(l2.bias).scale, scale)


def test_bias_protocol():
    proxy = BiasQuantProxyFromInjector(StandInConv(), Int16Bias)
    assert isinstance(proxy, BiasQuantProxyProtocol)


def test_no_warnings_on_plain_use():
    layer = StandInConv()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        WeightQuantProxyFromInjector(layer, Int8WeightPerTensorFloat)(layer.weight)
        BiasQuantProxyFromInjector(layer, Int8BiasPerTensorFloatInternalScaling)(layer.bias)
