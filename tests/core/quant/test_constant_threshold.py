"""RescalingIntQuant computes a constant integer threshold once (const_int_threshold) instead of
two ops per call, and the learned activation scale skips its identity blocks.

The threshold is checked against the formula written out here; whole quantizers against the
same quantizer with the per-call composition forced (eager mode), bit for bit, through dtype
conversions, and in a training run past the statistics phase."""

import pytest
import torch

from brevitas_cpp import jit
from brevitas_cpp.core.bit_width import BitWidthConst, BitWidthParameter
from brevitas_cpp.core.quant.plan.weight import constant_int_threshold
from brevitas_cpp.core.scaling import IntScaling, PowerOfTwoIntScaling
from brevitas_cpp.nn import QuantIdentity, QuantReLU
from brevitas_cpp.quant import Int8ActPerTensorFloat, Uint8ActPerTensorFloat


def _formula(bits: int, signed: bool, narrow: bool, power_of_two: bool) -> float:
    if power_of_two:
        return 2.0 ** (bits - 1) if signed else 2.0**bits
    if signed:
        return 2.0 ** (bits - 1) - (1 if narrow else 0)
    return 2.0**bits - 1 - (1 if narrow else 0)


@pytest.mark.parametrize("bits", [1, 2, 4, 8, 16, 24])
@pytest.mark.parametrize("signed", [True, False])
@pytest.mark.parametrize("narrow", [True, False])
@pytest.mark.parametrize("power_of_two", [True, False])
def test_constant_threshold_is_the_formula(bits, signed, narrow, power_of_two):
    if bits == 1 and signed and narrow:
        pytest.skip("a narrow signed 1-bit range is empty")
    scaling = PowerOfTwoIntScaling(signed) if power_of_two else IntScaling(narrow, signed)
    got = constant_int_threshold(BitWidthConst(bits), scaling)
    assert got is not None and got.dtype == torch.float32 and got.requires_grad is False
    assert got.item() == _formula(bits, signed, narrow, power_of_two)


def test_no_constant_threshold_when_it_can_vary_or_round():
    assert constant_int_threshold(BitWidthParameter(8), IntScaling(False, True)) is None
    assert constant_int_threshold(BitWidthConst(8), IntScaling(False, None)) is None
    # Above 24 bits float32 rounds the threshold, and float64 would not: kept per call.
    assert constant_int_threshold(BitWidthConst(25), IntScaling(False, True)) is None


def _act_layers(kind: str, bits: int):
    torch.manual_seed(0)
    if kind == "relu":
        return QuantReLU(act_quant=Uint8ActPerTensorFloat, bit_width=bits, collect_stats_steps=2)
    return QuantIdentity(act_quant=Int8ActPerTensorFloat, bit_width=bits, collect_stats_steps=2)


def _tensor_quant(layer):
    return layer.act_quant.fused_activation_quant_proxy.tensor_quant


@pytest.mark.skipif(jit.JIT_ENABLED, reason="forcing the composition needs eager blocks")
@pytest.mark.parametrize("kind", ["relu", "identity"])
@pytest.mark.parametrize("bits", [3, 8])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_activation_quantizer_equals_the_per_call_composition(kind, bits, dtype):
    """Statistics phase, then learned scale: outputs, scale and gradients (input and learned
    value) bit for bit against the same layer computing its threshold on every call."""
    fast, slow = _act_layers(kind, bits).to(dtype), _act_layers(kind, bits).to(dtype)
    assert _tensor_quant(fast).int_threshold_is_const
    _tensor_quant(slow).int_threshold_is_const = False
    gen = torch.Generator().manual_seed(1)
    for step in range(5):
        x = (torch.randn(4, 3, 5, 5, generator=gen) * (step + 1)).to(dtype)
        outs = []
        for layer in (fast, slow):
            xi = x.clone().requires_grad_()
            y = layer(xi)
            y.square().sum().backward()
            value = _tensor_quant(layer).scaling_impl.value
            outs.append(
                (y.detach(), xi.grad, value.grad.clone() if value.grad is not None else None)
            )
            value.grad = None
        for a, b in zip(*outs):
            assert (a is None) == (b is None)
            if a is not None:
                assert a.dtype == b.dtype and torch.equal(a, b)
        # Outputs to the sign of zero. (A per-call threshold also takes the layer off its plan:
        # in the statistics phase the chain's input gradient holds +0 where the plan's op
        # writes -0, equal values.)
        assert torch.equal(torch.signbit(outs[0][0]), torch.signbit(outs[1][0]))
    assert torch.equal(fast.act_quant.scale(), slow.act_quant.scale())


def test_threshold_follows_dtype_and_is_not_state():
    layer = _act_layers("relu", 8)
    tq = _tensor_quant(layer)
    keys = set(layer.state_dict())
    assert not any("const_int_threshold" in k for k in keys)
    layer.to(torch.float64)
    assert tq.const_int_threshold.value.dtype == torch.float64
    assert tq.const_int_threshold.value.item() == 255.0
    fresh = _act_layers("relu", 8)
    fresh.load_state_dict(layer.state_dict())  # strict: nothing missing, nothing unexpected


@pytest.mark.parametrize(
    "bits,narrow",
    [(16, torch.float16), (10, torch.bfloat16), (12, torch.float16), (8, torch.bfloat16)],
)
def test_threshold_survives_a_round_trip_through_a_narrow_dtype(bits, narrow):
    """.half()/.bfloat16() then .float(): the bit width comes back exact, so must the threshold
    (2^16 - 1 is infinite in float16, 2^10 - 1 rounds to 1024 in bfloat16)."""
    layer = _act_layers("relu", bits).to(narrow).float()
    tq = _tensor_quant(layer)
    assert tq.const_int_threshold.value.dtype == torch.float32
    assert tq.const_int_threshold.value.item() == 2.0**bits - 1
    x = torch.rand(2, 3, 4, 4) * 4
    for _ in range(4):
        out = layer(x)
    fresh = _act_layers("relu", bits)
    for _ in range(4):
        want = fresh(x)
    assert torch.equal(out, want)


def test_scripted_activation_layer_equals_eager():
    layer = _act_layers("identity", 8)
    x = torch.randn(2, 3, 4, 4, generator=torch.Generator().manual_seed(2))
    for _ in range(3):
        layer(x)  # past the statistics phase: the learned scale
    want = layer(x)
    scripted = torch.jit.script(layer)
    assert torch.equal(scripted(x), want)
