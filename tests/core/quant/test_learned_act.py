"""The stock activation quantizer's plan in training (core/quant/plan): the same numbers as the
module chain it skips, bit for bit, and taken only where it applies.

The reference is the same layer with the plan switched off (force_module_chain: the module
chain, which the suites check against Brevitas); whether the plan ran is counted, not
assumed."""

import pytest
import torch

import brevitas_cpp.core.quant.int as int_module
from brevitas_cpp import jit
from brevitas_cpp.core.quant.plan.forward import PlannedQuant
from brevitas_cpp.core.quant.plan.match import force_module_chain
from brevitas_cpp.core.zero_point import ZeroZeroPoint
from brevitas_cpp.nn import QuantConv2d, QuantIdentity, QuantReLU
from brevitas_cpp.quant import Int8ActPerTensorFloat, Uint8ActPerTensorFloat

pytestmark = pytest.mark.skipif(jit.JIT_ENABLED, reason="counts eager calls of the plan")


class Taken:
    """Counts the calls in which an activation plan returned the quantizer's output."""

    def __init__(self, monkeypatch):
        self.count = 0
        self.with_relu = 0  # of which QuantReLU's fused relu_int_quant
        original = PlannedQuant.plan_forward

        def counting(block, x, relu):
            out = original(block, x, relu)
            if block.plan_act:
                self.count += out is not None
                self.with_relu += out is not None and relu
            return out

        monkeypatch.setattr(PlannedQuant, "plan_forward", counting)


def make(kind: str, bits: int):
    torch.manual_seed(0)
    if kind == "relu":
        return QuantReLU(act_quant=Uint8ActPerTensorFloat, bit_width=bits, collect_stats_steps=2)
    if kind == "identity_min_val":
        return QuantIdentity(
            act_quant=Int8ActPerTensorFloat,
            bit_width=bits,
            collect_stats_steps=2,
            scaling_min_val=0.5,
        )
    if kind == "conv_input":
        return QuantConv2d(3, 4, 3, input_quant=Int8ActPerTensorFloat, input_collect_stats_steps=2)
    return QuantIdentity(act_quant=Int8ActPerTensorFloat, bit_width=bits, collect_stats_steps=2)


def tensor_quants(layer):
    return [m for m in layer.modules() if type(m) is int_module.RescalingIntQuant and m.plan_act]


def train(layer, dtype, steps=5, seed=1):
    gen = torch.Generator().manual_seed(seed)
    out = []
    for step in range(steps):
        x = (torch.randn(4, 3, 6, 6, generator=gen) * (step + 1)).to(dtype).requires_grad_()
        y = layer(x)
        y.square().sum().backward()
        grads = [p.grad.clone() for p in layer.parameters() if p.grad is not None]
        layer.zero_grad()
        out.append((y.detach(), x.grad, grads))
    return out


@pytest.mark.parametrize("kind", ["relu", "identity", "identity_min_val", "conv_input"])
@pytest.mark.parametrize("bits", [3, 8])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_shortcut_equals_the_module_chain(kind, bits, dtype, monkeypatch):
    """Statistics steps, the hand-over (the chain) and learned steps: outputs, the input's
    gradient and every parameter's (the learned scale's included) bit for bit."""
    fast, slow = make(kind, bits).to(dtype), make(kind, bits).to(dtype)
    assert tensor_quants(fast), "the stock quantizer should have a plan"
    for tq in tensor_quants(slow):
        force_module_chain(tq)
    taken = Taken(monkeypatch)
    want = train(slow, dtype)
    assert taken.count == 0
    got = train(fast, dtype)
    # Statistics steps 0 and 1 (abs_percentile_int_quant) and learned steps 3 and 4; the
    # hand-over step 2 initialises the scale in the chain.
    assert taken.count == 4
    assert taken.with_relu == (4 if kind == "relu" else 0)  # QuantReLU: ReLU in the op
    for (y, gx, gp), (wy, wgx, wgp) in zip(got, want):
        assert y.dtype == wy.dtype and torch.equal(y, wy)
        assert torch.equal(torch.signbit(y), torch.signbit(wy))
        assert torch.equal(gx, wgx)
        assert len(gp) == len(wgp) and all(torch.equal(a, b) for a, b in zip(gp, wgp))


def test_not_taken_in_eval_observer_only_or_with_another_block(monkeypatch):
    layer = make("identity", 8)
    train(layer, torch.float32)
    taken = Taken(monkeypatch)
    (tq,) = tensor_quants(layer)
    x = torch.randn(2, 3, 4, 4)
    layer.eval()
    layer(x)
    layer.train()
    tq.observer_only = True
    assert torch.equal(layer(x), x)  # observer only: x itself, as the chain returns
    tq.observer_only = False
    layer(x)
    assert taken.count == 1

    class HalfZeroPoint(ZeroZeroPoint):  # a subclass may compute otherwise: the chain runs
        pass

    tq.zero_point_impl = HalfZeroPoint()
    assert not tq.plan_act
    layer(x)
    assert taken.count == 1


def test_other_operands_take_the_chain(monkeypatch):
    """x in another dtype than the learned scale (float64 x, float32 layer): the op does not take
    the operands as they are, the chain promotes them as Brevitas does."""
    layer, ref = make("relu", 8), make("relu", 8)
    for tq in tensor_quants(ref):
        force_module_chain(tq)
    train(layer, torch.float32)
    train(ref, torch.float32)
    taken = Taken(monkeypatch)
    x = torch.randn(2, 3, 4, 4, dtype=torch.float64)
    assert torch.equal(layer(x), ref(x))
    assert taken.count == 0


def test_relu_fusion_only_for_an_out_of_place_relu(monkeypatch):
    """QuantReLU's ReLU is fused into relu_int_quant; an in-place ReLU (which writes its input)
    or another activation keeps its own call, with the chain's numbers."""
    layer = make("relu", 8)
    train(layer, torch.float32)
    proxy = layer.act_quant.fused_activation_quant_proxy
    taken = Taken(monkeypatch)
    x = torch.randn(2, 3, 4, 4)
    y = layer(x)
    assert (taken.count, taken.with_relu) == (1, 1)

    proxy.activation_impl = torch.nn.ReLU(inplace=True)
    x_inplace = x.clone()
    y_inplace = layer(x_inplace)
    assert (taken.count, taken.with_relu) == (2, 1)  # the quantizer's shortcut alone
    assert torch.equal(x_inplace, torch.relu(x))  # the in-place ReLU wrote its input
    assert torch.equal(y_inplace, y)

    proxy.activation_impl = torch.nn.Hardtanh(0.0, 1.0)
    y_other = layer(x)
    assert (taken.count, taken.with_relu) == (3, 1)
    ref = make("relu", 8)
    train(ref, torch.float32)
    assert torch.equal(
        y_other,
        ref.act_quant.fused_activation_quant_proxy.tensor_quant(
            torch.nn.functional.hardtanh(x, 0.0, 1.0)
        )[0],
    )


def test_hooks_on_inner_blocks_keep_the_chain(monkeypatch):
    """A hook on a block the shortcut would skip (or a global one) must run: the chain again."""
    layer = make("identity", 8)
    train(layer, torch.float32)  # past the statistics phase
    (tq,) = tensor_quants(layer)
    taken = Taken(monkeypatch)
    x = torch.randn(2, 3, 4, 4)
    ran = []
    handle = tq.scaling_impl.register_forward_hook(lambda m, args, out: ran.append(1))
    layer(x)
    assert (taken.count, len(ran)) == (0, 1)
    handle.remove()
    layer(x)
    assert taken.count == 1
    handle = torch.nn.modules.module.register_module_forward_hook(lambda m, args, out: None)
    try:
        layer(x)
    finally:
        handle.remove()
    assert taken.count == 1
