"""QuantReLU's ReLU fused into its activation quantizer (learned_int_quant with relu) in the
learned phase,
eager and TorchScript alike (BREVITAS_JIT=0 and =1 run this file): the same numbers as a
hand-built equivalent that keeps them apart, torch.nn.ReLU then QuantIdentity with the same
quantizer, and the fused op counted in the profiler, not assumed."""

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from brevitas_cpp.config import JIT_ENABLED
from brevitas_cpp.nn import QuantIdentity, QuantReLU
from brevitas_cpp.quant import Uint8ActPerTensorFloat


def fused_calls(fn) -> int:
    """Calls of the learned plan's op with the ReLU in it: learned_int_quant(..., relu=True)."""
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        fn()
    return sum(
        1
        for e in prof.events()
        if e.name == "brevitas_cpp::learned_int_quant" and e.concrete_inputs[-1] is True
    )


def train_step(layer, x):
    x = x.clone().requires_grad_()
    y = layer(x)
    y.square().sum().backward()
    grads = [p.grad.clone() for p in layer.parameters() if p.grad is not None]
    layer.zero_grad()
    return y.detach(), x.grad, grads


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_quant_relu_equals_relu_then_quant_identity(bits, dtype):
    kwargs = dict(act_quant=Uint8ActPerTensorFloat, bit_width=bits, collect_stats_steps=2)
    fused = QuantReLU(**kwargs).to(dtype)
    apart = torch.nn.Sequential(torch.nn.ReLU(), QuantIdentity(**kwargs)).to(dtype)
    gen = torch.Generator().manual_seed(0)
    calls = []
    for step in range(6):
        x = (torch.randn(4, 3, 6, 6, generator=gen, dtype=torch.float64) * (step + 1)).to(dtype)
        got = []
        calls.append(fused_calls(lambda: got.append(train_step(fused, x))))
        want = train_step(apart, x)
        (y, gx, gp), (wy, wgx, wgp) = got[0], want
        assert torch.equal(y, wy) and torch.equal(torch.signbit(y), torch.signbit(wy)), step
        assert torch.equal(gx, wgx), step
        assert len(gp) == len(wgp) and all(torch.equal(a, b) for a, b in zip(gp, wgp)), step
    # Statistics steps 0 and 1 and the hand-over step 2 keep the two calls; then one op.
    assert calls == [0, 0, 0, 1, 1, 1]


def test_eval_keeps_the_two_calls():
    layer = QuantReLU(act_quant=Uint8ActPerTensorFloat, bit_width=8, collect_stats_steps=1)
    x = torch.randn(2, 3, 4, 4)
    for _ in range(3):
        train_step(layer, x)
    assert fused_calls(lambda: layer(x)) == 1
    layer.eval()
    assert fused_calls(lambda: layer(x)) == 0


def trained_quant_relu():
    layer = QuantReLU(act_quant=Uint8ActPerTensorFloat, bit_width=8, collect_stats_steps=1)
    x = torch.randn(2, 3, 4, 4)
    for _ in range(3):
        train_step(layer, x)
    return layer, x


@pytest.mark.skipif(JIT_ENABLED, reason="eager blocks are replaced; scripted ones are fixed")
def test_replaced_activation_or_hooks_keep_the_two_calls_eager_and_scripted():
    layer, x = trained_quant_relu()
    proxy = layer.act_quant.fused_activation_quant_proxy
    ref_quant = proxy.tensor_quant
    # Another activation: the chain, in eager mode and in a model scripted afterwards.
    proxy.activation_impl = torch.nn.Hardtanh(0.0, 0.5)
    want = ref_quant(torch.nn.functional.hardtanh(x, 0.0, 0.5))[0]
    assert fused_calls(lambda: layer(x)) == 0
    assert torch.equal(layer(x), want)
    assert torch.equal(torch.jit.script(layer)(x), want)
    # A hook on the ReLU must run: the two calls again.
    proxy.activation_impl = torch.nn.ReLU()
    assert fused_calls(lambda: layer(x)) == 1
    seen = []
    handle = proxy.activation_impl.register_forward_hook(lambda m, i, o: seen.append(o))
    assert fused_calls(lambda: layer(x)) == 0 and len(seen) == 1
    handle.remove()
    assert fused_calls(lambda: layer(x)) == 1
    assert fused_calls(lambda: torch.jit.script(layer)(x)) == 1
