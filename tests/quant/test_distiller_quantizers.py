"""Distiller's QAT methods (brevitas_cpp.quant.distiller) in quant layers, against their formulas
written out here in plain torch (from the papers and Distiller's clipped_linear.py, q_utils.py
and range_linear.py), never through the blocks under test:

    PACT:     x = relu(x); x = where(x < a, x, a); m = (2^b - 1) / a; y = round(m x) / m
              dy/dx = 1 on (0, a), dy/da = sum of the gradient where x >= a
    DoReFa:   b >= 2: t = tanh(w); t = t / (2 max|t|) + 0.5; y = 2 round(n t) / n - 1
              b == 1: y = where(w == 0, 1, sign(w)) * mean|w|, identity backward
    linear:   m, z from a range (symmetric: n / max|.|; asymmetric: n / (max' - min'),
              z = round(m min') [+ 2^(b-1)]); y = (round(m x - z) + z) / m, straight through
    EMA:      biased = biased d + (1 - d) current; tracked = biased / (1 - d^step)

Rounding is torch.round (half to even). Also: QuantTensor metadata, state_dict round trips,
bad arguments and a float64 gradcheck. Run with BREVITAS_JIT=0 and =1."""

import math
from typing import Tuple

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from brevitas_cpp import config
from brevitas_cpp.core.quant import (
    ClippedLinearQuant,
    DorefaParamQuant,
    LearnedClippedLinearQuant,
    RangeLinearFakeQuant,
    RangeLinearParamQuant,
)
from brevitas_cpp.nn import (
    QuantConv1d,
    QuantConv2d,
    QuantConvTranspose2d,
    QuantEmbedding,
    QuantIdentity,
    QuantLinear,
    QuantReLU,
)
from brevitas_cpp.quant import (
    ClippedActQuant,
    DorefaWeightQuant,
    PACTActQuant,
    RangeLinearActQuant,
    RangeLinearBiasQuant,
    RangeLinearWeightQuant,
)
from brevitas_cpp.quant_tensor import IntQuantTensor

MODES = ["SYMMETRIC", "SYMMETRIC_RESTRICTED", "ASYMMETRIC_UNSIGNED", "ASYMMETRIC_SIGNED"]
# The gradients pass straight through (g / m) * m: equal to g up to float32 rounding.
GRAD_TOL = dict(rtol=1e-6, atol=0.0)


def seeded(seed: int, *shape: int, scale: float = 1.0) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


def act_block(layer: nn.Module) -> nn.Module:
    return layer.act_quant.fused_activation_quant_proxy.tensor_quant


def ste(u: Tensor) -> Tensor:
    """round(u) in value up to float rounding, identity gradient (for gradient references)."""
    return u + (torch.round(u) - u).detach()


def ref_linear_params(lo: Tensor, hi: Tensor, bits: int, mode: str) -> Tuple[Tensor, Tensor]:
    """Distiller's symmetric/asymmetric_linear_quantization_params."""
    lo, hi = lo.clone(), hi.clone()
    if mode.startswith("SYMMETRIC"):
        n = (2**bits - 1) / 2 if mode == "SYMMETRIC" else 2 ** (bits - 1) - 1
        sat = torch.max(lo.abs(), hi.abs())
        sat[sat == 0] = n
        scale = n / sat
        return scale, torch.zeros_like(scale)
    n = 2**bits - 1
    sat_min = torch.min(lo, torch.zeros_like(lo))
    sat_max = torch.max(hi, torch.zeros_like(hi))
    diff = sat_max - sat_min
    diff[diff == 0] = n
    scale = n / diff
    zero_point = (scale * sat_min).round()
    if mode == "ASYMMETRIC_SIGNED":
        zero_point += 2 ** (bits - 1)
    return scale, zero_point


def ref_fake_quant(x: Tensor, scale: Tensor, zero_point: Tensor) -> Tensor:
    """LinearQuantizeSTE's forward with dequantize."""
    return (torch.round(scale * x - zero_point) + zero_point) / scale


def assert_honest(qt: IntQuantTensor, int_low: float, int_high: float) -> None:
    """value == (int - zero_point) * scale, ints within [int_low, int_high] and within the
    reported bit width and sign (IntQuantTensor.int() checks it)."""
    ints = qt.int().double()
    rebuilt = (ints - qt.zero_point.double()) * qt.scale.double()
    torch.testing.assert_close(rebuilt, qt.value.detach().double(), rtol=1e-6, atol=1e-6)
    assert int_low <= float(ints.min()) and float(ints.max()) <= int_high


# ---- PACT ----------------------------------------------------------------------------------------


def test_pact_relu_layer_equals_the_formula_with_gradients():
    layer = QuantReLU(
        act_quant=PACTActQuant, bit_width=4, act_clip_init_val=8.0, return_quant_tensor=True
    )
    block = act_block(layer)
    assert isinstance(block, LearnedClippedLinearQuant)
    assert isinstance(block, torch.jit.ScriptModule) == config.JIT_ENABLED
    # The schedule reader finds the learned clipping value by its name.
    names = [name for name, _ in layer.named_parameters() if "clip_val" in name]
    assert names == ["act_quant.fused_activation_quant_proxy.tensor_quant.clip_val"]
    x = torch.tensor([-2.0, 0.0, 0.3, 1.1, 2.2, 5.5, 7.9, 8.0, 9.5, 20.0], requires_grad=True)
    qt = layer(x)
    alpha = torch.tensor(8.0)
    clipped = torch.where(torch.relu(x) < alpha, torch.relu(x), alpha)
    m = (2**4 - 1) / alpha
    assert torch.equal(qt.value, torch.round(m * clipped) / m)
    assert torch.equal(qt.scale, 1.0 / m) and float(qt.zero_point) == 0.0
    assert float(qt.bit_width) == 4.0 and not qt.signed
    assert_honest(qt, 0, 15)
    g = torch.arange(1.0, 11.0)
    qt.value.backward(g)
    inside = (x > 0) & (x < alpha)
    torch.testing.assert_close(x.grad, torch.where(inside, g, 0.0), **GRAD_TOL)
    assert torch.equal(x.grad[~inside], torch.zeros(int((~inside).sum())))
    # The tie x == clip_val goes to clip_val, as Distiller's where.
    torch.testing.assert_close(block.clip_val.grad, g[x.detach() >= alpha].sum(), **GRAD_TOL)


def test_clipped_relu_layer_is_dorefas_fixed_clip_with_gradients():
    # Distiller's ClippedLinearQuantization(num_bits, 1): clamp(x, 0, 1), then
    # round(x * (2^b - 1)) / (2^b - 1); the clamp's gradient is 1 on [0, 1], ends included.
    layer = QuantReLU(act_quant=ClippedActQuant, bit_width=3, return_quant_tensor=True)
    assert isinstance(act_block(layer), ClippedLinearQuant)
    assert not list(layer.parameters())
    x = torch.tensor([-1.0, 0.0, 0.07, 0.5, 0.93, 1.0, 1.5], requires_grad=True)
    qt = layer(x)
    assert torch.equal(qt.value, torch.round(torch.clamp(x, 0.0, 1.0) * 7.0) / 7.0)
    assert torch.equal(qt.scale, torch.tensor(1.0) / torch.tensor(7.0))
    assert float(qt.bit_width) == 3.0 and not qt.signed
    assert_honest(qt, 0, 7)
    g = torch.arange(1.0, 8.0)
    qt.value.backward(g)
    # QuantReLU's own ReLU first: its gradient is 0 at x = 0 (torch's relu), then the clamp's.
    inside = (x > 0) & (x <= 1)
    torch.testing.assert_close(x.grad, torch.where(inside, g, 0.0), **GRAD_TOL)


def test_pact_clip_val_learns_and_sets_the_scale():
    layer = QuantReLU(act_quant=PACTActQuant, bit_width=2, act_clip_init_val=1.0)
    block = act_block(layer)
    optimizer = torch.optim.SGD([block.clip_val], lr=0.5)
    x = torch.tensor([0.2, 3.0, 4.0])
    layer(x).sum().backward()  # two elements above clip_val: gradient 2
    optimizer.step()
    assert float(block.clip_val.detach()) == pytest.approx(0.0, abs=1e-6)  # 1 - 0.5 * 2
    with torch.no_grad():
        block.clip_val.fill_(3.0)
    y = layer(x)
    assert torch.equal(y, torch.round(1.0 * torch.clamp(x, 0, 3)) / 1.0)  # m = 3 / 3


def test_pact_clip_val_of_zero_gives_scale_one_and_negative_gives_nan():
    block = LearnedClippedLinearQuant(bit_width=3, act_clip_init_val=1.0)
    with torch.no_grad():
        block.clip_val.zero_()
    y, scale, _, _ = block(torch.tensor([-1.0, 0.5, 2.0]))
    assert torch.equal(y, torch.zeros(3)) and float(scale) == 1.0
    # Distiller raises; NaN here, without a host sync per call.
    with torch.no_grad():
        block.clip_val.fill_(-1.0)
    y, scale, _, _ = block(torch.tensor([1.0, -2.0]))
    assert bool(torch.isnan(y).all()) and bool(torch.isnan(scale))


def test_pact_gradients_float64_away_from_rounding():
    """Inside (0, clip_val) the output is piecewise constant in x and in clip_val (through the
    scale, which PACT does not differentiate): the straight-through gradients are not
    derivatives there. Below 0 and above clip_val (where y == clip_val) they are: gradcheck for
    x, a central difference on the Parameter for clip_val (a Parameter is no gradcheck input)."""
    block = LearnedClippedLinearQuant(bit_width=3, act_clip_init_val=2.0).double()
    x = torch.tensor([-3.0, -0.5, 2.5, 4.0, 7.25], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: block(x)[0], (x,), eps=1e-6, atol=1e-10)
    weights = torch.tensor([0.5, 1.5, -2.0, 3.0, 0.25], dtype=torch.float64)
    (block(x)[0] * weights).sum().backward()
    eps = 1e-6
    sums = []
    for clip in (2.0 + eps, 2.0 - eps):
        with torch.no_grad():
            block.clip_val.fill_(clip)
            sums.append(float((block(x)[0] * weights).sum()))
    numeric = (sums[0] - sums[1]) / (2 * eps)
    assert float(block.clip_val.grad) == pytest.approx(numeric, rel=1e-6)
    assert numeric == pytest.approx(1.25, rel=1e-6)  # the weights of 2.5, 4.0 and 7.25


# ---- DoReFa --------------------------------------------------------------------------------------


def ref_dorefa(w: Tensor, bits: int, round_fn=torch.round) -> Tensor:
    n = 2**bits - 1
    t = torch.tanh(w)
    t = t / (2 * t.abs().max()) + 0.5
    return 2 * (round_fn(n * t) / n) - 1


def test_dorefa_conv_3_bits_equals_the_formula_with_gradients():
    torch.manual_seed(0)
    conv = QuantConv2d(2, 3, 3, weight_quant=DorefaWeightQuant, weight_bit_width=3)
    assert isinstance(conv.weight_quant.tensor_quant, DorefaParamQuant)
    w = conv.weight
    expected = ref_dorefa(w.detach(), 3)
    x = seeded(1, 2, 2, 6, 6)
    assert torch.equal(conv(x), F.conv2d(x, expected, conv.bias))
    qw = conv.quant_weight()
    assert torch.equal(qw.value, expected)
    # Unsigned 3-bit integers round(7 t) with scale 2/7 and zero point 7/2.
    assert float(qw.bit_width) == 3.0 and not qw.signed
    assert torch.equal(qw.scale, torch.tensor(2.0 / 7.0))
    assert torch.equal(qw.zero_point, torch.tensor(3.5))
    assert_honest(qw, 0, 7)
    t = torch.tanh(w.detach())
    assert torch.equal(qw.int().to(torch.float32), torch.round(7 * (t / (2 * t.abs().max()) + 0.5)))
    # Gradient: differentiable through tanh and max|t|, straight through the round.
    g = seeded(2, *w.shape)
    qw.value.backward(g)
    w_ref = w.detach().clone().requires_grad_(True)
    ref_dorefa(w_ref, 3, ste).backward(g)
    torch.testing.assert_close(w.grad, w_ref.grad, rtol=1e-5, atol=1e-7)


def test_dorefa_conv_1_bit_is_the_mean_magnitude_sign_with_identity_gradient():
    torch.manual_seed(0)
    conv = QuantConv2d(2, 3, 3, weight_quant=DorefaWeightQuant, weight_bit_width=1)
    with torch.no_grad():
        conv.weight[0, 0, 0, 0] = 0.0  # sign 0 becomes +1
    w = conv.weight
    e = w.detach().abs().mean()
    expected = torch.where(w == 0, torch.ones_like(w), torch.sign(w)).detach() * e
    x = seeded(1, 2, 2, 5, 5)
    assert torch.equal(conv(x), F.conv2d(x, expected, conv.bias))
    qw = conv.quant_weight()
    assert torch.equal(qw.value, expected) and float(qw.value[0, 0, 0, 0].detach()) == float(e)
    assert float(qw.bit_width) == 1.0 and qw.signed and float(qw.zero_point) == 0.0
    assert torch.equal(qw.scale, e)
    assert_honest(qw, -1, 1)
    g = seeded(2, *w.shape)
    qw.value.backward(g)
    assert torch.equal(w.grad, g)


# ---- range-linear activations --------------------------------------------------------------------


class RefFakeLinear:
    """Distiller's FakeLinearQuantization, written out: float32 decay and step as its buffers."""

    def __init__(self, bits: int, mode: str, decay: float) -> None:
        self.bits, self.mode, self.decay = bits, mode, torch.tensor(decay)
        self.min_biased = self.max_biased = self.min = self.max = torch.zeros(())
        self.step = 0
        self.scale, self.zero_point = torch.ones(()), torch.zeros(())

    def __call__(self, x: Tensor, training: bool) -> Tensor:
        if training:
            self.step += 1
            correction = 1 - self.decay ** torch.tensor(float(self.step))
            d = self.decay
            self.min_biased = self.min_biased * d + (1 - d) * x.min()
            self.max_biased = self.max_biased * d + (1 - d) * x.max()
            self.min, self.max = self.min_biased / correction, self.max_biased / correction
            self.scale, self.zero_point = ref_linear_params(
                self.min, self.max, self.bits, self.mode
            )
        if self.mode.startswith("SYMMETRIC"):
            max_abs = torch.max(self.min.abs(), self.max.abs())
            lo, hi = -max_abs, max_abs
        else:
            lo, hi = self.min, self.max
        return ref_fake_quant(torch.clamp(x, lo.item(), hi.item()), self.scale, self.zero_point)


def test_range_linear_relu_asymmetric_unsigned_over_training_then_eval():
    layer = QuantReLU(
        act_quant=RangeLinearActQuant,
        bit_width=8,
        linear_quant_mode="ASYMMETRIC_UNSIGNED",
        ema_decay=0.9,
        return_quant_tensor=True,
    )
    block = act_block(layer)
    assert isinstance(block, RangeLinearFakeQuant)
    ref = RefFakeLinear(8, "ASYMMETRIC_UNSIGNED", 0.9)
    # Distiller's quirk, kept: before any training step the range is [0, 0], the output 0.
    layer.eval()
    x = seeded(0, 4, 6, scale=3.0)
    assert torch.equal(layer(x).value, torch.zeros(4, 6))
    assert torch.equal(layer(x).value, ref(torch.relu(x), False))
    layer.train()
    for step in range(5):
        x = seeded(step + 1, 4, 6, scale=1.0 + step)
        qt = layer(x)
        assert torch.equal(qt.value, ref(torch.relu(x), True)), step
        assert int(block.iter_count) == step + 1
        for name, value in (("tracked_min", ref.min), ("tracked_max", ref.max)):
            assert torch.equal(getattr(block, name), value), (step, name)
        assert torch.equal(block.tracked_min_biased, ref.min_biased)
        assert torch.equal(block.tracked_max_biased, ref.max_biased)
        assert torch.equal(block.scale, ref.scale) and torch.equal(block.zero_point, ref.zero_point)
        assert torch.equal(qt.scale, 1.0 / ref.scale) and not qt.signed
        assert float(qt.bit_width) == 8.0 and torch.equal(qt.zero_point, -ref.zero_point)
        assert_honest(qt, 0, 255)
    layer.eval()
    x = seeded(9, 4, 6, scale=10.0)
    assert torch.equal(layer(x).value, ref(torch.relu(x), False))
    assert int(block.iter_count) == 5 and torch.equal(block.tracked_max, ref.max)


@pytest.mark.parametrize("mode", MODES)
def test_range_linear_act_every_mode_with_gradients(mode):
    layer = QuantIdentity(
        act_quant=RangeLinearActQuant, linear_quant_mode=mode, ema_decay=0.5, bit_width=4,
        return_quant_tensor=True,
    )  # fmt: skip
    ref = RefFakeLinear(4, mode, 0.5)
    for step in range(3):
        # Growing batches: the last one reaches past the tracked range (its clamp is tested).
        x = (seeded(step, 5, 7, scale=1.0 + 2 * step) + 0.7).requires_grad_(True)
        qt = layer(x)
        expected = ref(x.detach(), True)
        assert torch.equal(qt.value, expected), step
    if mode.startswith("SYMMETRIC"):
        max_abs = torch.max(ref.min.abs(), ref.max.abs())
        lo, hi = -max_abs, max_abs
    else:
        lo, hi = ref.min, ref.max
    g = seeded(7, 5, 7)
    qt.value.backward(g)
    inside = (x.detach() >= lo) & (x.detach() <= hi)
    assert bool((~inside).any()) and bool(inside.any())
    torch.testing.assert_close(x.grad, torch.where(inside, g, 0.0), **GRAD_TOL)
    # Honest metadata: zero point -z, scale 1/m; SYMMETRIC's integers reach +-2^(b-1).
    assert torch.equal(qt.zero_point, 0.0 - ref.zero_point)
    assert torch.equal(qt.scale, 1.0 / ref.scale)
    bits, signed, narrow, low, high = {
        "SYMMETRIC": (5, True, False, -8, 8),
        "SYMMETRIC_RESTRICTED": (4, True, True, -7, 7),
        "ASYMMETRIC_UNSIGNED": (4, False, False, 0, 15),
        "ASYMMETRIC_SIGNED": (4, True, False, -8, 7),
    }[mode]
    assert float(qt.bit_width) == bits and qt.signed == signed
    assert layer.act_quant.is_narrow_range == narrow and layer.act_quant.is_signed == signed
    assert_honest(qt, low, high)
    # The proxy reads the metadata in eval without moving the statistics.
    assert torch.equal(layer.act_quant.scale(), 1.0 / ref.scale)
    assert int(act_block(layer).iter_count) == 3


def test_range_linear_act_state_dict_round_trip_resumes():
    def make() -> nn.Module:
        return QuantReLU(act_quant=RangeLinearActQuant, linear_quant_mode="SYMMETRIC_RESTRICTED")

    layer = make()
    for step in range(3):
        layer(seeded(step, 3, 4))
    # Copies: state_dict's tensors share the buffers' storage, which training moves on.
    state = {k: v.clone() for k, v in layer.state_dict().items()}
    prefix = "act_quant.fused_activation_quant_proxy.tensor_quant."
    names = [
        "tracked_min_biased",
        "tracked_min",
        "tracked_max_biased",
        "tracked_max",
        "iter_count",
        "scale",
        "zero_point",
    ]
    assert sorted(k[len(prefix) :] for k in state if k.startswith(prefix)) == sorted(names)
    twin = make()
    twin.load_state_dict(state)
    for name in names:
        assert torch.equal(getattr(act_block(twin), name), getattr(act_block(layer), name))
    x = seeded(5, 3, 4)
    assert torch.equal(twin(x), layer(x))  # one more training step each: the same
    assert int(act_block(twin).iter_count) == 4
    twin.eval()
    layer.eval()
    assert torch.equal(twin(x * 3), layer(x * 3))
    # Distiller's layout (shape [1], a float step counter) loads too.
    distiller_layout = {k: v.reshape(1).float() for k, v in state.items()}
    twin.load_state_dict(distiller_layout)
    assert act_block(twin).iter_count.dtype == torch.int64
    assert int(act_block(twin).iter_count) == 3 and act_block(twin).tracked_max.shape == ()
    # A float model's checkpoint (no quantizer entries) loads strictly: the state stays fresh.
    fresh = make()
    fresh.load_state_dict(nn.ReLU().state_dict())
    assert int(act_block(fresh).iter_count) == 0


def test_pact_state_dict_round_trip():
    layer = QuantReLU(act_quant=PACTActQuant, bit_width=3, act_clip_init_val=4.0)
    with torch.no_grad():
        act_block(layer).clip_val.fill_(2.5)
    twin = QuantReLU(act_quant=PACTActQuant, bit_width=3)
    twin.load_state_dict(layer.state_dict())
    assert float(act_block(twin).clip_val.detach()) == 2.5
    x = seeded(0, 4, 5, scale=3.0)
    assert torch.equal(twin(x), layer(x))


# ---- range-linear weights and biases -------------------------------------------------------------


def ref_param_quant(w: Tensor, bits: int, mode: str, axis=None) -> Tuple[Tensor, Tensor, Tensor]:
    """Distiller's _get_quant_params_from_tensor (per channel: along axis) and its STE."""
    w = w.detach()
    if axis is None:
        lo, hi = w.min(), w.max()
    else:
        rows = w.transpose(0, axis).reshape(w.shape[axis], -1)
        shape = [1] * w.dim()
        shape[axis] = -1
        lo, hi = rows.min(dim=-1)[0].view(shape), rows.max(dim=-1)[0].view(shape)
    scale, zero_point = ref_linear_params(lo, hi, bits, mode)
    return ref_fake_quant(w, scale, zero_point), scale, zero_point


@pytest.mark.parametrize("mode", MODES)
def test_range_linear_weights_per_channel(mode):
    torch.manual_seed(0)
    layer = QuantLinear(
        6, 5, bias=True, weight_quant=RangeLinearWeightQuant, weight_per_channel=True,
        weight_linear_quant_mode=mode, weight_bit_width=8,
    )  # fmt: skip
    assert isinstance(layer.weight_quant.tensor_quant, RangeLinearParamQuant)
    expected, scale, zero_point = ref_param_quant(layer.weight, 8, mode, axis=0)
    x = seeded(1, 3, 6)
    assert torch.equal(layer(x), F.linear(x, expected, layer.bias))
    qw = layer.quant_weight()
    assert torch.equal(qw.value, expected)
    assert qw.scale.shape == (5, 1) and torch.equal(qw.scale, 1.0 / scale)
    assert torch.equal(qw.zero_point, 0.0 - zero_point)
    low, high = {
        "SYMMETRIC": (-128, 128),
        "SYMMETRIC_RESTRICTED": (-127, 127),
        "ASYMMETRIC_UNSIGNED": (0, 255),
        "ASYMMETRIC_SIGNED": (-128, 127),
    }[mode]
    assert_honest(qw, low, high)
    if mode == "SYMMETRIC":
        # No clamp (Distiller): the channel maximum maps to round(127.5) = 128, so 9 bits.
        assert float(qw.bit_width) == 9.0 and float(qw.int().abs().max()) == 128
    g = seeded(2, 5, 6)
    qw.value.backward(g)
    torch.testing.assert_close(layer.weight.grad, g, **GRAD_TOL)


def test_range_linear_weights_per_tensor_and_distillers_per_channel_rule():
    torch.manual_seed(0)
    per_tensor = QuantLinear(4, 3, weight_quant=RangeLinearWeightQuant)
    assert torch.equal(
        per_tensor.quant_weight().value, ref_param_quant(per_tensor.weight, 8, "SYMMETRIC")[0]
    )
    conv = QuantConv2d(2, 4, 3, weight_quant=RangeLinearWeightQuant, weight_per_channel=True)
    assert conv.quant_weight().scale.shape == (4, 1, 1, 1)
    assert torch.equal(
        conv.quant_weight().value, ref_param_quant(conv.weight, 8, "SYMMETRIC", axis=0)[0]
    )
    # The layer's output channel: dim 1 of a transposed convolution's weight.
    deconv = QuantConvTranspose2d(
        2, 4, 3, weight_quant=RangeLinearWeightQuant, weight_per_channel=True
    )
    assert deconv.quant_weight().scale.shape == (1, 4, 1, 1)
    assert torch.equal(
        deconv.quant_weight().value, ref_param_quant(deconv.weight, 8, "SYMMETRIC", axis=1)[0]
    )
    # 3-dim weights and embeddings stay per tensor (Distiller's rule).
    conv1d = QuantConv1d(2, 4, 3, weight_quant=RangeLinearWeightQuant, weight_per_channel=True)
    assert conv1d.quant_weight().scale.shape == ()
    emb = QuantEmbedding(7, 3, weight_quant=RangeLinearWeightQuant, weight_per_channel=True)
    assert emb.quant_weight().scale.shape == ()


@pytest.mark.parametrize("mode", ["SYMMETRIC", "ASYMMETRIC_SIGNED"])
def test_range_linear_bias_32_bits(mode):
    torch.manual_seed(0)
    conv = QuantConv2d(
        2, 3, 3, bias=True, bias_quant=RangeLinearBiasQuant, bias_bit_width=32,
        bias_linear_quant_mode=mode, return_quant_tensor=False,
    )  # fmt: skip
    assert not conv.bias_quant.requires_input_scale
    expected, scale, zero_point = ref_param_quant(conv.bias, 32, mode)
    qb = conv.quant_bias()
    assert torch.equal(qb.value, expected) and qb.scale.shape == ()
    assert torch.equal(qb.scale, 1.0 / scale) and torch.equal(qb.zero_point, 0.0 - zero_point)
    assert float(qb.bit_width) == (33.0 if mode == "SYMMETRIC" else 32.0) and qb.signed
    rebuilt = (qb.value.double() / qb.scale.double() + qb.zero_point.double()).round()
    torch.testing.assert_close(
        (rebuilt - qb.zero_point.double()) * qb.scale.double(), qb.value.double()
    )
    x = seeded(1, 1, 2, 5, 5)
    weight = conv.quant_weight().value
    assert torch.equal(conv(x), F.conv2d(x, weight, expected))


# ---- names and bad arguments ---------------------------------------------------------------------


def test_public_names():
    import brevitas_cpp.quant as quant

    for name in (
        "ClippedActQuant",
        "PACTActQuant",
        "DorefaWeightQuant",
        "RangeLinearActQuant",
        "RangeLinearWeightQuant",
        "RangeLinearBiasQuant",
    ):
        assert name in quant.__all__ and hasattr(quant, name)


BAD_ACT = [
    (PACTActQuant, dict(bit_width=0), r"bit_width must be in \[1, 32\]"),
    (PACTActQuant, dict(bit_width=33), r"bit_width must be in \[1, 32\]"),
    (PACTActQuant, dict(act_clip_init_val=0.0), "act_clip_init_val must be a finite float > 0"),
    (PACTActQuant, dict(act_clip_init_val=-1.0), "act_clip_init_val must be a finite float > 0"),
    (PACTActQuant, dict(act_clip_init_val=math.nan), "act_clip_init_val must be a finite"),
    (ClippedActQuant, dict(act_clip_val=0.0), "act_clip_val must be a finite float > 0"),
    (RangeLinearActQuant, dict(bit_width=1), r"bit_width must be in \[2, 32\]"),
    (RangeLinearActQuant, dict(linear_quant_mode="sym"), "linear_quant_mode must be one of "),
    (RangeLinearActQuant, dict(ema_decay=0.0), r"ema_decay must be in the open interval \(0, 1\)"),
    (RangeLinearActQuant, dict(ema_decay=1.0), r"ema_decay must be in the open interval \(0, 1\)"),
]


@pytest.mark.parametrize("quant, keywords, message", BAD_ACT)
def test_bad_activation_arguments(quant, keywords, message):
    with pytest.raises(ValueError, match=f"{quant.__name__}: {message}"):
        QuantReLU(act_quant=quant, **keywords)


@pytest.mark.parametrize(
    "quant, keywords, message",
    [
        (DorefaWeightQuant, dict(weight_bit_width=0), r"bit_width must be in \[1, 32\]"),
        (RangeLinearWeightQuant, dict(weight_bit_width=40), r"bit_width must be in \[2, 32\]"),
        (
            RangeLinearWeightQuant,
            dict(weight_linear_quant_mode="ASYMMETRIC"),
            "linear_quant_mode must be one of 'SYMMETRIC', 'SYMMETRIC_RESTRICTED', "
            "'ASYMMETRIC_UNSIGNED', 'ASYMMETRIC_SIGNED', got 'ASYMMETRIC'",
        ),
    ],
)
def test_bad_weight_arguments(quant, keywords, message):
    with pytest.raises(ValueError, match=f"{quant.__name__}: {message}"):
        QuantConv2d(2, 3, 3, weight_quant=quant, **keywords)


def test_bad_block_and_bias_arguments():
    with pytest.raises(ValueError, match="RangeLinearBiasQuant: linear_quant_mode must be one of"):
        QuantLinear(2, 3, bias=True, bias_quant=RangeLinearBiasQuant, bias_linear_quant_mode=3)
    with pytest.raises(TypeError, match="RangeLinearWeightQuant: per_channel must be a bool"):
        QuantLinear(2, 3, weight_quant=RangeLinearWeightQuant, weight_per_channel="yes")
    with pytest.raises(ValueError, match="RangeLinearFakeQuant: ema_decay must be in the open"):
        RangeLinearFakeQuant(ema_decay=1.5)
    with pytest.raises(ValueError, match="LearnedClippedLinearQuant: act_clip_init_val must"):
        LearnedClippedLinearQuant(act_clip_init_val=0)
    with pytest.raises(ValueError, match="DorefaParamQuant: bit_width must be in"):
        DorefaParamQuant(bit_width=0)
    with pytest.raises(ValueError, match="RangeLinearParamQuant: linear_quant_mode must be"):
        RangeLinearParamQuant(linear_quant_mode="NONE")
