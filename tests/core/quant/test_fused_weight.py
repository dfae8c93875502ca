"""RescalingIntQuant routes the stock weight quantizer to the one op abs_max_int_quant.

The routed quantizer is compared with the same quantizer forced onto its composition of blocks
(eager mode: force_module_chain), which is Brevitas's arithmetic: the values bit for bit,
the weight's gradient up to summation order (in fact equal: both reduce the scale's gradient with
int_quant's kernel)."""

import pytest
import torch
from helpers import RecordedCalls

from brevitas_cpp import jit
from brevitas_cpp.core.quant.plan.match import force_module_chain
from brevitas_cpp.core.stats.stats_op import AbsMax
from brevitas_cpp.inject.enum import ScalingImplType
from brevitas_cpp.nn import QuantConv2d, QuantConvTranspose2d, QuantLinear
from brevitas_cpp.quant import Int8WeightPerChannelFloat, Int8WeightPerTensorFloat

FUSED_OP = "brevitas_cpp.abs_max_int_quant.default"


def _step_calls(layer, x):
    """Dispatcher calls of the weight quantizer's forward and of the layer's backward."""
    with RecordedCalls() as fwd:
        out = layer.weight_quant.quant_tuple(layer.weight)
    with RecordedCalls() as bwd:
        out[0].sum().backward()
    layer.weight.grad = None
    return fwd.names, bwd.names


def _layers():
    torch.manual_seed(0)
    return {
        "conv_tensor": QuantConv2d(16, 32, 3),
        "conv_channel": QuantConv2d(16, 32, 3, weight_quant=Int8WeightPerChannelFloat),
        "linear_tensor": QuantLinear(20, 12, weight_bit_width=4),
        "linear_channel": QuantLinear(20, 12, weight_quant=Int8WeightPerChannelFloat),
    }


@pytest.mark.parametrize("name", sorted(_layers()))
def test_stock_quantizers_route_to_one_op(name):
    layer = _layers()[name]
    tq = layer.weight_quant.tensor_quant
    assert tq.plan_weight
    fwd, bwd = _step_calls(layer, None)
    assert fwd.count(FUSED_OP) == 1
    assert not any("int_quant.default" in n and "abs_max" not in n for n in fwd)
    assert "aten.max.default" not in fwd and "aten.max.dim" not in fwd
    # A handful of calls (the op, the layer's own) instead of ~18.
    assert len(fwd) <= 5, fwd
    if jit.JIT_ENABLED:
        return
    force_module_chain(tq)
    fwd_c, bwd_c = _step_calls(layer, None)
    # (the integer threshold, constant here, is no longer among them: see const_int_threshold;
    # nor are detached copies of the constant blocks' buffers)
    assert FUSED_OP not in fwd_c and len(fwd_c) >= 10 and len(bwd_c) > len(bwd)


def _force_composition(layer):
    force_module_chain(layer.weight_quant.tensor_quant)
    return layer


@pytest.mark.skipif(jit.JIT_ENABLED, reason="forcing the composition needs eager blocks")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", sorted(_layers()))
@pytest.mark.parametrize("ties", [False, True])
def test_routed_equals_composition(name, dtype, ties):
    fused = _layers()[name].to(dtype)
    composed = _force_composition(_layers()[name].to(dtype))
    if ties:
        with torch.no_grad():
            for layer in (fused, composed):
                w = layer.weight
                w[0].view(-1)[:3] = torch.tensor([2.0, -2.0, 2.0], dtype=dtype)
                w[1:].view(w.shape[0] - 1, -1)[:, 0] = 2.0
    assert fused.weight_quant.tensor_quant.plan_weight
    a = fused.weight_quant.quant_tuple(fused.weight)
    b = composed.weight_quant.quant_tuple(composed.weight)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert torch.equal(x, y)
        assert torch.equal(torch.signbit(x), torch.signbit(y))
    g = torch.randn(a[0].shape, dtype=dtype, generator=torch.Generator().manual_seed(3))
    gs = torch.randn(a[1].shape, dtype=dtype, generator=torch.Generator().manual_seed(4))
    ((a[0] * g).sum() + (a[1] * gs).sum()).backward()
    ((b[0] * g).sum() + (b[1] * gs).sum()).backward()
    tol = dict(rtol=1e-6, atol=1e-7) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(fused.weight.grad, composed.weight.grad, **tol)


@pytest.mark.skipif(jit.JIT_ENABLED, reason="forcing the composition needs eager blocks")
def test_training_step_equals_composition():
    x = torch.randn(4, 16, 8, 8, generator=torch.Generator().manual_seed(5))
    fused = _layers()["conv_channel"]
    composed = _force_composition(_layers()["conv_channel"])
    for layer in (fused, composed):
        opt = torch.optim.SGD(layer.parameters(), lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            layer(x).square().mean().backward()
            opt.step()
    assert torch.equal(fused.weight, composed.weight)


def test_scripted_and_compiled_layers_equal_eager():
    layer = _layers()["conv_channel"]
    x = torch.randn(2, 16, 6, 6, generator=torch.Generator().manual_seed(6))
    want = layer(x)
    scripted = torch.jit.script(layer)
    assert torch.equal(scripted(x), want)
    compiled = torch.compile(layer, backend="aot_eager")
    got = compiled(x)
    assert torch.equal(got, want)
    got.sum().backward()
    assert layer.weight.grad is not None


def test_state_dict_and_to_float64_unchanged():
    layer = _layers()["conv_tensor"]
    keys = set(layer.state_dict())
    assert keys == {"weight", "bias"}
    layer = layer.to(torch.float64)
    with RecordedCalls() as calls:
        value = layer.quant_weight().value
    assert value.dtype == torch.float64 and FUSED_OP in calls.names
    reloaded = _layers()["conv_tensor"].to(torch.float64)
    reloaded.load_state_dict(layer.state_dict())
    assert torch.equal(reloaded.quant_weight().value, value)


class _AbsMaxSubclass(AbsMax):
    pass


@pytest.mark.parametrize(
    "make",
    [
        lambda: QuantConv2d(
            4,
            6,
            3,
            weight_quant=Int8WeightPerTensorFloat.let(
                scaling_impl_type=ScalingImplType.PARAMETER_FROM_STATS
            ),
        ),
        lambda: QuantConv2d(
            4, 6, 3, weight_quant=Int8WeightPerTensorFloat.let(bit_width_impl_type="parameter")
        ),
        lambda: QuantConv2d(
            4, 6, 3, weight_quant=Int8WeightPerTensorFloat.let(scaling_stats_impl=_AbsMaxSubclass)
        ),
        lambda: QuantConv2d(
            4, 6, 3, weight_quant=Int8WeightPerTensorFloat.let(restrict_scaling_type="log_fp")
        ),
        lambda: QuantConvTranspose2d(4, 6, 3, weight_quant=Int8WeightPerChannelFloat),
    ],
    ids=["learned_scale", "learned_bit_width", "stats_subclass", "log_domain", "conv_transpose"],
)
def test_non_stock_quantizers_keep_the_composition(make):
    layer = make()
    assert not layer.weight_quant.tensor_quant.plan_weight
    with RecordedCalls() as calls:
        layer.weight_quant.quant_tuple(layer.weight)
    assert FUSED_OP not in calls.names


def test_force_module_chain_refuses_what_it_can_not_switch():
    with pytest.raises(TypeError, match="force_module_chain: quantizer must be .* got Linear"):
        force_module_chain(torch.nn.Linear(2, 2))
    if jit.JIT_ENABLED:
        tq = _layers()["linear_tensor"].weight_quant.tensor_quant
        with pytest.raises(RuntimeError, match="force_module_chain: with BREVITAS_JIT=1"):
            force_module_chain(tq)
