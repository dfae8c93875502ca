"""The stock activation quantizer's statistics phase in one op (abs_percentile_int_quant),
eager and TorchScript alike (BREVITAS_JIT=0 and =1 run this file): QuantIdentity and QuantReLU
give the numbers of a hand-built equivalent that runs the module composition (the same quantizer
with a subclass of AbsPercentile, which the fusion does not take), over the statistics steps,
the hand-over and the learned steps: outputs, gradients, running statistics and the learned
scale. The op is counted in the profiler, not assumed."""

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import brevitas_cpp.distributed as distributed
from brevitas_cpp.config import JIT_ENABLED
from brevitas_cpp.core.stats.stats_op import AbsPercentile
from brevitas_cpp.nn import QuantIdentity, QuantReLU
from brevitas_cpp.quant import Int8ActPerTensorFloat, Uint8ActPerTensorFloat


class ComposedAbsPercentile(AbsPercentile):
    """AbsPercentile itself; a subclass, so the quantizer keeps its module composition."""


def fused_calls(fn) -> int:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return sum(1 for e in prof.events() if e.name == "brevitas_cpp::abs_percentile_int_quant")


def train_step(layer, x):
    x = x.clone().requires_grad_()
    y = layer(x)
    (y.square().sum() + y.sum()).backward()
    grads = [p.grad.clone() for p in layer.parameters() if p.grad is not None]
    layer.zero_grad()
    return y.detach(), x.grad, grads


def same(a, b) -> bool:
    """Equal values (a -0 equals +0) with NaN where the other has NaN."""
    return torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))


def scaling_of(layer):
    return layer.act_quant.fused_activation_quant_proxy.tensor_quant.scaling_impl


LAYERS = {
    "identity": (QuantIdentity, Int8ActPerTensorFloat),
    "relu": (QuantReLU, Uint8ActPerTensorFloat),
}


@pytest.mark.parametrize("layer", list(LAYERS))
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_statistics_phase_equals_the_composition(layer, bits, dtype):
    cls, quant = LAYERS[layer]
    kwargs = dict(bit_width=bits, collect_stats_steps=3)
    fused = cls(act_quant=quant, **kwargs).to(dtype)
    composed = cls(act_quant=quant.let(scaling_stats_impl=ComposedAbsPercentile), **kwargs).to(
        dtype
    )
    gen = torch.Generator().manual_seed(bits)
    calls = []
    for step in range(6):
        x = (torch.randn(4, 3, 20, 20, generator=gen, dtype=torch.float64) * (step + 1)).to(dtype)
        if step == 1:
            x = torch.round(x * 2) / 2  # ties at the selected value
        got = []
        calls.append(fused_calls(lambda: got.append(train_step(fused, x))))
        (y, gx, gp), (wy, wgx, wgp) = got[0], train_step(composed, x)
        assert torch.equal(y, wy) and torch.equal(torch.signbit(y), torch.signbit(wy)), step
        # == (the composition adds the statistic's one-hot zeros: a -0 there is +0).
        assert torch.equal(gx, wgx), step
        assert len(gp) == len(wgp) and all(torch.equal(a, b) for a, b in zip(gp, wgp)), step
        s, ws = scaling_of(fused), scaling_of(composed)
        assert s.counter == ws.counter
        assert torch.equal(s.buffer, ws.buffer) and torch.equal(s.value, ws.value), step
    # Statistics steps 0-2 in one op; then the hand-over and the learned steps.
    assert calls == [1, 1, 1, 0, 0, 0]


@pytest.mark.skipif(JIT_ENABLED, reason="scripted blocks ask the op, _stats_stay_local")
def test_statistics_to_average_across_ranks_keep_the_composition(monkeypatch):
    # Where all_reduce_stats would average over ranks, the op (which cannot) is not used.
    layer = QuantIdentity(act_quant=Int8ActPerTensorFloat, bit_width=8, collect_stats_steps=4)
    x = torch.randn(2, 3, 8, 8)
    assert fused_calls(lambda: train_step(layer, x)) == 1
    monkeypatch.setattr(distributed, "stats_stay_local", lambda: False)
    assert fused_calls(lambda: train_step(layer, x)) == 0


def test_local_loss_mode_and_eval_keep_the_composition():
    layer = QuantReLU(act_quant=Uint8ActPerTensorFloat, bit_width=8, collect_stats_steps=4)
    x = torch.randn(2, 3, 8, 8)
    scaling_of(layer).local_loss_mode = True
    assert fused_calls(lambda: train_step(layer, x)) == 0
    assert scaling_of(layer).counter == 0  # local loss: no running statistic
    scaling_of(layer).local_loss_mode = False
    layer.eval()
    assert fused_calls(lambda: layer(x)) == 0


@pytest.mark.parametrize("steps", [1, 2])
def test_quantizer_called_twice_per_step_across_the_hand_over(steps):
    """QuantEltwiseAdd's input quantizer quantizes both operands: the second call of a step may
    initialise the learned scale in place (the first call's backward must not need it), and
    both calls update the running statistic, as in the composition."""

    class TwiceAdd(torch.nn.Module):
        def __init__(self, quant):
            super().__init__()
            self.q = QuantIdentity(act_quant=quant, bit_width=8, collect_stats_steps=steps)

        def forward(self, a, b):
            return self.q(a) + self.q(b)

    fused = TwiceAdd(Int8ActPerTensorFloat)
    composed = TwiceAdd(Int8ActPerTensorFloat.let(scaling_stats_impl=ComposedAbsPercentile))
    gen = torch.Generator().manual_seed(steps)
    for step in range(4):
        a, b = (torch.randn(2, 3, 9, 9, generator=gen) * (step + 2) for _ in range(2))
        outs = []
        for model in (fused, composed):
            aa, bb = a.clone().requires_grad_(), b.clone().requires_grad_()
            y = model(aa, bb)
            y.square().sum().backward()
            value = scaling_of(model.q).value
            outs.append(
                (y.detach(), aa.grad, bb.grad, value.grad, scaling_of(model.q).buffer.clone())
            )
            model.zero_grad()
        for got, want in zip(*outs):
            assert (got is None) == (want is None), step
            if got is not None:
                assert torch.equal(got, want), step


def test_the_op_says_statistics_stay_local_in_one_process():
    # What scripted blocks ask: no process group to average over, or syncing off.
    assert torch.ops.brevitas_cpp._stats_stay_local()
    with distributed.stats_sync(False):
        assert torch.ops.brevitas_cpp._stats_stay_local()


@pytest.mark.parametrize("layer", list(LAYERS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_large_tied_activations_equal_the_composition(layer, dtype):
    """65536 values: the k-th largest is the second (t = 2), found in one read, or, where the
    input is already quantized (ties), by torch.kthvalue as in the composition; 16-bit dtypes
    too (the threshold, clamp and division round in them)."""
    cls, quant = LAYERS[layer]
    kwargs = dict(bit_width=8, collect_stats_steps=3)
    fused = cls(act_quant=quant, **kwargs).to(dtype)
    composed = cls(act_quant=quant.let(scaling_stats_impl=ComposedAbsPercentile), **kwargs).to(
        dtype
    )
    gen = torch.Generator().manual_seed(5)
    for step in range(3):
        x = torch.randn(8, 8, 32, 32, generator=gen, dtype=torch.float64) * 3
        if step > 0:
            x = torch.round(x * 4) / 4  # ties at the top
        x = x.to(dtype)
        got = []
        calls = fused_calls(lambda: got.append(train_step(fused, x)))
        (y, gx, gp), (wy, wgx, wgp) = got[0], train_step(composed, x)
        assert calls == 1
        # float16's scale gradient (a sum over 65536 values in the dtype) overflows, in both.
        assert same(y, wy) and same(gx, wgx), step
        assert all(same(a, b) for a, b in zip(gp, wgp)), step
        assert torch.equal(scaling_of(fused).buffer, scaling_of(composed).buffer), step


@pytest.mark.skipif(JIT_ENABLED, reason="scripted modules are fixed when scripted")
def test_hooks_or_a_replaced_nested_block_keep_the_composition():
    layer = QuantIdentity(act_quant=Int8ActPerTensorFloat, bit_width=8, collect_stats_steps=9)
    x = torch.randn(2, 3, 8, 8)
    stats = scaling_of(layer).stats
    seen = []
    handle = stats.register_forward_hook(lambda m, args, out: seen.append(out.detach()))
    assert fused_calls(lambda: train_step(layer, x)) == 0  # the composition, so the hook runs
    assert len(seen) == 1
    handle.remove()
    assert fused_calls(lambda: train_step(layer, x)) == 1
    # Another percentile, set deep inside: the plan is derived again, with it (not with the
    # one the quantizer was built with).
    stats.stats_impl = AbsPercentile(high_percentile_q=50.0, stats_reduce_dim=None)
    assert fused_calls(lambda: train_step(layer, x)) == 1
    y = layer(x)
    median = torch.kthvalue(x.abs().reshape(-1), x.numel() // 2).values
    # Signed 8 bits: scale = median / 128, and -128 * scale = -median.
    assert torch.equal(y.abs().max(), median)
