"""The one forward of the quant layers, in eager mode: when nothing needs QuantTensor metadata
(plain Tensor input, return_quant_tensor=False, no caches, hooks or export), QuantWBIOL layers,
activation layers and QuantEltwiseAdd run on their proxies' (value, scale, ...) tuples
(``quant_tuple``) without calling the proxies or building IntQuantTensors. The reference is the
same forward with QuantTensors asked for (the proxies called, the float op on IntQuantTensors
through their torch handlers), itself checked bit for bit against Brevitas by the golden tests:
outputs, gradients and the quantizers' state after a few training steps must be identical, and
every feature that needs the proxies called (caches, hooks, overridden proxies) must still
work."""

import pytest
import torch
from torch import nn

from brevitas_cpp.nn import (
    QuantConv1d,
    QuantConv2d,
    QuantConvTranspose2d,
    QuantEltwiseAdd,
    QuantHardTanh,
    QuantIdentity,
    QuantLinear,
    QuantReLU,
    QuantScaleBias,
    QuantSigmoid,
)
from brevitas_cpp.nn.mixin.base import QuantLayerMixin
from brevitas_cpp.proxy import (
    ActQuantProxyFromInjectorBase,
    BiasQuantProxyFromInjector,
    WeightQuantProxyFromInjector,
    WeightQuantProxyFromInjectorBase,
)
from brevitas_cpp.proxy.quant_proxy import wraps_quant_tuple
from brevitas_cpp.quant import (
    Int8ActPerTensorFloat,
    Int8BiasPerTensorFloatInternalScaling,
    Int8WeightPerTensorFloat,
    Int32Bias,
)
from brevitas_cpp.quant_tensor import IntQuantTensor

A8 = dict(input_quant=Int8ActPerTensorFloat, input_collect_stats_steps=2)

# name -> (layer factory, input shapes); collect_stats_steps=2 so that the steps below cover
# statistics collection and the learned scale after it.
LAYERS = {
    "conv2d-weight-only": (lambda: QuantConv2d(3, 4, 3, padding=1), [(2, 3, 6, 6)]),
    "conv2d-in-out-bias": (
        lambda: QuantConv2d(
            3,
            4,
            3,
            output_quant=Int8ActPerTensorFloat,
            output_collect_stats_steps=2,
            bias_quant=Int8BiasPerTensorFloatInternalScaling,
            **A8,
        ),
        [(2, 3, 6, 6)],
    ),
    "conv2d-same-strided": (
        lambda: QuantConv2d(3, 4, 3, stride=2, padding="same", **A8),
        [(2, 3, 7, 7)],
    ),
    "conv2d-reflect": (
        lambda: QuantConv2d(3, 4, 3, padding=1, padding_mode="reflect", bias=False),
        [(2, 3, 6, 6)],
    ),
    "conv1d-groups": (lambda: QuantConv1d(4, 4, 3, groups=2, **A8), [(2, 4, 9)]),
    "convtranspose2d": (lambda: QuantConvTranspose2d(3, 4, 3, stride=2, **A8), [(2, 3, 5, 5)]),
    "linear-int32-bias": (lambda: QuantLinear(5, 3, bias_quant=Int32Bias, **A8), [(4, 5)]),
    "linear-no-quant": (lambda: QuantLinear(5, 3, weight_quant=None), [(4, 5)]),
    "scale-bias": (lambda: QuantScaleBias(3, True), [(2, 3, 4, 4)]),
    "scale-bias-int32": (
        lambda: QuantScaleBias(3, True, bias_quant=Int32Bias, **A8),
        [(2, 3, 4, 4)],
    ),
    "relu": (lambda: QuantReLU(collect_stats_steps=2), [(4, 6)]),
    "relu-input-quant": (lambda: QuantReLU(collect_stats_steps=2, **A8), [(4, 6)]),
    "identity": (lambda: QuantIdentity(collect_stats_steps=2), [(4, 6)]),
    "hardtanh": (lambda: QuantHardTanh(max_val=1.0, min_val=-1.0), [(4, 6)]),
    "sigmoid-no-act-quant": (lambda: QuantSigmoid(act_quant=None), [(4, 6)]),
    "eltwise-add": (
        lambda: QuantEltwiseAdd(input_collect_stats_steps=2, output_collect_stats_steps=2),
        [(4, 6), (4, 6)],
    ),
}
# With a quantized bias, QuantScaleBias always works on QuantTensors (see its _wants_quant_tensor).
NO_TUPLE_PATH = {"scale-bias-int32"}


def _force_quant_tensors(monkeypatch):
    monkeypatch.setattr(QuantLayerMixin, "_wants_quant_tensor", lambda layer, inp: True)


def _count_proxy_forward_calls(monkeypatch):
    """Counts the calls of the proxies' forward (wrapped, keeping the mark that lets layers
    call quant_tuple directly)."""
    calls = []
    for cls in (
        ActQuantProxyFromInjectorBase,
        WeightQuantProxyFromInjectorBase,
        BiasQuantProxyFromInjector,
    ):
        original = cls.forward

        @wraps_quant_tuple
        def wrapped(self, *args, _original=original, **kwargs):
            calls.append(type(self).__name__)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(cls, "forward", wrapped)
    return calls


def _train(make, shapes, steps=4):
    """Outputs, input/parameter gradients and final state of a few SGD steps, then eval."""
    torch.manual_seed(0)
    layer = make()
    params = list(layer.parameters())
    opt = torch.optim.SGD(params, lr=0.1) if params else None
    record = []
    for step in range(steps):
        gen = torch.Generator().manual_seed(step)
        inputs = [torch.randn(s, generator=gen).requires_grad_() for s in shapes]
        out = layer(*inputs)
        assert type(out) is torch.Tensor
        for p in params:
            p.grad = None
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        if opt is not None:
            opt.step()
        record += [out.detach()] + [x.grad for x in inputs]
        record += [p.grad for p in layer.parameters() if p.grad is not None]
    layer.eval()
    with torch.no_grad():
        record.append(layer(*[torch.randn(s, generator=gen) for s in shapes]))
    return record, layer.state_dict()


@pytest.mark.parametrize("name", list(LAYERS))
def test_direct_quant_tuple_calls_match_quant_tensors_bit_for_bit(name, monkeypatch):
    make, shapes = LAYERS[name]
    calls = _count_proxy_forward_calls(monkeypatch)
    fast, fast_state = _train(make, shapes)
    took_tuple_path = not calls
    assert took_tuple_path == (name not in NO_TUPLE_PATH)
    _force_quant_tensors(monkeypatch)
    ref, ref_state = _train(make, shapes)
    assert calls
    assert len(fast) == len(ref)
    for a, b in zip(fast, ref):
        assert torch.equal(a, b)
    assert fast_state.keys() == ref_state.keys()
    for key in ref_state:
        assert torch.equal(fast_state[key], ref_state[key]), key


def test_convtranspose_output_size_is_an_argument():
    layer = QuantConvTranspose2d(3, 4, 3, stride=2)
    x = torch.randn(1, 3, 5, 5)
    assert layer(x, output_size=[12, 12]).shape[-2:] == (12, 12)
    assert layer(x).shape[-2:] == (11, 11)


def test_quant_tensor_requests_take_the_quant_tensor_path(monkeypatch):
    calls = _count_proxy_forward_calls(monkeypatch)
    conv = QuantConv2d(3, 4, 3, return_quant_tensor=True, **A8)
    out = conv(torch.randn(1, 3, 5, 5))
    assert isinstance(out, IntQuantTensor)
    assert calls == [
        "ActQuantProxyFromInjector",
        "WeightQuantProxyFromInjector",
        "BiasQuantProxyFromInjector",
        "ActQuantProxyFromInjector",
    ]
    relu = QuantReLU(return_quant_tensor=True)
    qt = relu(torch.randn(2, 4))
    assert isinstance(qt, IntQuantTensor)
    # A QuantTensor input brings its scale: the accumulator scale of Int32Bias needs it.
    linear = QuantLinear(4, 3, bias_quant=Int32Bias, return_quant_tensor=True)
    acc = linear(qt)
    assert isinstance(acc, IntQuantTensor)
    # The accumulator: input scale x weight scale, and its bit width (handler's rule).
    assert torch.allclose(acc.scale, qt.scale * linear.quant_weight().scale)


def test_accumulator_scale_of_a_plain_input_bias():
    """Int32Bias with direct quant_tuple calls: the bias is quantized at input scale x weight scale, the
    scales read from the proxies' tuples (no QuantTensor built)."""
    torch.manual_seed(0)
    linear = QuantLinear(4, 3, bias_quant=Int32Bias, input_quant=Int8ActPerTensorFloat).eval()
    x = torch.randn(2, 4)
    input_scale = linear.input_quant.scale()
    weight_scale = linear.quant_weight().scale
    acc_scale = input_scale * weight_scale
    expected_bias = torch.round(linear.bias / acc_scale).clamp(-(2**31), 2**31 - 1) * acc_scale
    q_x = linear.input_quant(x).value
    expected = torch.nn.functional.linear(q_x, linear.quant_weight().value, expected_bias)
    assert torch.equal(linear(x), expected)


def test_return_quant_tensor_without_quantized_output_still_errors():
    layer = QuantLinear(4, 3, return_quant_tensor=True)
    with pytest.raises(RuntimeError, match="return_quant_tensor=True"):
        layer(torch.randn(2, 4))


def test_inference_caches_are_filled():
    conv = QuantConv2d(3, 4, 3, bias_quant=Int8BiasPerTensorFloatInternalScaling, **A8).eval()
    conv.weight_quant.cache_inference_quant_weight = True
    conv.bias_quant.cache_inference_quant_bias = True
    conv.input_quant.cache_inference_quant_act = True
    conv(torch.randn(1, 3, 5, 5))
    assert conv.weight_quant._cached_weight is not None
    assert conv.bias_quant._cached_bias is not None
    assert conv.input_quant._cached_act is not None
    assert torch.equal(conv.weight_quant.scale(), conv.weight_quant._cached_weight.scale)
    relu = QuantReLU().eval()
    relu.act_quant.cache_inference_quant_act = True
    relu(torch.randn(2, 4))
    assert relu.act_quant._cached_act is not None


def test_proxy_hooks_run():
    conv = QuantConv2d(3, 4, 3, **A8)
    seen = []
    conv.weight_quant.register_forward_hook(lambda m, i, o: seen.append("weight"))
    conv.input_quant.register_forward_pre_hook(lambda m, i: seen.append("input"))
    conv(torch.randn(1, 3, 5, 5))
    assert seen == ["input", "weight"]
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda m, i, o: seen.append(type(m).__name__)
    )
    try:
        seen.clear()
        QuantReLU()(torch.randn(2, 4))
    finally:
        handle.remove()
    assert "ActQuantProxyFromInjector" in seen


class CountingWeightProxy(WeightQuantProxyFromInjector):
    calls = 0

    def forward(self, x):
        CountingWeightProxy.calls += 1
        return super().forward(x)


class CountingWeightQuant(Int8WeightPerTensorFloat):
    proxy_class = CountingWeightProxy


def test_proxy_subclass_overriding_forward_is_called():
    CountingWeightProxy.calls = 0
    layer = QuantLinear(4, 3, weight_quant=CountingWeightQuant)
    reference = QuantLinear(4, 3)
    reference.load_state_dict(layer.state_dict())
    x = torch.randn(2, 4)
    assert torch.equal(layer(x), reference(x))
    assert CountingWeightProxy.calls == 1


def test_scale_bias_keeps_the_eval_check_of_a_bias_off_the_product_grid():
    layer = QuantScaleBias(3, True, bias_quant=Int8BiasPerTensorFloatInternalScaling, **A8)
    layer(torch.randn(2, 3, 4, 4))
    layer.eval()
    with pytest.raises(RuntimeError, match="scaling factors are different in eval mode"):
        layer(torch.randn(2, 3, 4, 4))


def test_eltwise_add_eval_scale_mismatch_names_the_scales(monkeypatch):
    add = QuantEltwiseAdd().eval()
    # One input quantizer gives both operands its scale; make the second scale differ.
    scales = iter([torch.tensor(1.0), torch.tensor(2.0)])
    original = add.input_quant.quant_tuple

    def _scaled(x):
        value, _, zero_point, bit_width = original(x)
        return value, next(scales), zero_point, bit_width

    monkeypatch.setattr(add.input_quant, "quant_tuple", _scaled)
    with pytest.raises(RuntimeError, match=r"same scale, got input scale 1.0 and other scale 2.0"):
        add(torch.randn(2, 3), torch.randn(2, 3))


def test_shared_input_quant_between_layers():
    first = QuantConv2d(3, 4, 3, padding=1, **A8)
    second = QuantConv2d(3, 4, 3, padding=1, input_quant=first.input_quant)
    assert second.input_quant is first.input_quant
    x = torch.randn(1, 3, 5, 5)
    first(x)
    second(x)  # the second statistics step of the shared quantizer: its scale is now learned
    first.eval()
    second.eval()
    quant_x = second.input_quant(x)
    assert isinstance(quant_x, IntQuantTensor)
    expected = nn.functional.conv2d(
        quant_x.value, second.quant_weight().value, second.bias, padding=1
    )
    assert torch.equal(second(x), expected)
