"""RescalingIntQuant, PrescaledRestrictIntQuant(WithInputBitWidth) and TruncIntQuant with small
stand-in scale / zero point / bit width blocks, against formulas written out here."""

from typing import Union

import pytest
import torch
from helpers import assert_bitwise, rand, rand_pos, ref_int_quant, ref_tensor_clamp
from torch import Tensor

from brevitas_cpp.config import JIT_ENABLED
from brevitas_cpp.core.function_wrapper import FloorSte, Identity, RoundSte, TensorClampSte
from brevitas_cpp.core.quant import (
    IntQuant,
    PrescaledRestrictIntQuant,
    PrescaledRestrictIntQuantWithInputBitWidth,
    RescalingIntQuant,
    TruncIntQuant,
)
from brevitas_cpp.core.utils import StatelessBuffer

# ---- stand-ins for the scaling, zero-point and bit-width blocks --------------------------------


class LearnedThreshold(torch.nn.Module):
    """scale = |value| / int_threshold, value learned (per tensor or per channel)."""

    def __init__(self, init: Tensor) -> None:
        super().__init__()
        self.value = torch.nn.Parameter(init.clone())

    def forward(self, x: Tensor, int_threshold: Tensor) -> Tensor:
        return self.value.abs() / int_threshold


class SignedNarrowIntThreshold(torch.nn.Module):
    """2^(b-1) - 1: the largest integer of a signed range."""

    def forward(self, bit_width: Tensor) -> Tensor:
        return 2.0 ** (bit_width - 1.0) - 1.0


class LearnedZeroPoint(torch.nn.Module):
    def __init__(self, init: Tensor) -> None:
        super().__init__()
        self.value = torch.nn.Parameter(init.clone())

    def forward(self, x: Tensor, scale: Tensor, bit_width: Tensor) -> Tensor:
        return self.value


class DropTwoBits(torch.nn.Module):
    """Output bit width = input bit width - 2."""

    def forward(self, input_bit_width: Tensor) -> Tensor:
        return input_bit_width - 2.0


class TruncMsb(torch.nn.Module):
    """Keep the most significant bits: divide by 2^(input bits - output bits)."""

    def forward(
        self,
        scaling_input: Tensor,
        input_bit_width: Tensor,
        output_bit_width: Tensor,
        signed: Union[bool, Tensor],
    ) -> Tensor:
        return 2.0 ** (input_bit_width - output_bit_width)


def const(value: float) -> StatelessBuffer:
    return StatelessBuffer(torch.tensor(value))


def int_quant(signed=True, narrow=True, **kwargs) -> IntQuant:
    return IntQuant(narrow_range=narrow, signed=signed, input_view_impl=Identity(), **kwargs)


def rescaling(scale_init: Tensor, zp_init: Tensor, bits: float = 4.0) -> RescalingIntQuant:
    return RescalingIntQuant(
        int_quant(),
        LearnedThreshold(scale_init),
        SignedNarrowIntThreshold(),
        LearnedZeroPoint(zp_init),
        const(bits),
    )


def ref_rescaling(x, scale_param, zp_param, bits=4.0):
    scale = scale_param.abs() / (2.0 ** (torch.tensor(bits) - 1.0) - 1.0)
    return ref_int_quant(x, scale, zp_param, torch.tensor(bits), True, True), scale


# ---- RescalingIntQuant ---------------------------------------------------------------------------


@pytest.mark.parametrize("scale_shape", [(), (4, 1, 1, 1)])
def test_rescaling_values_and_returned_parameters(scale_shape):
    x = rand((4, 3, 2, 2), seed=1, spread=2.0)
    scale_init = rand_pos(scale_shape, seed=2) * 3
    zp_init = torch.round(rand(scale_shape, seed=3))
    q = rescaling(scale_init, zp_init)
    y, scale, zp, bw = q(x)
    y_ref, scale_ref = ref_rescaling(x, scale_init, zp_init)
    assert_bitwise(y, y_ref)
    assert_bitwise(scale, scale_ref)
    assert torch.equal(zp, zp_init) and torch.equal(bw, torch.tensor(4.0))


def test_rescaling_gradients_reach_learned_parameters():
    x = rand((4, 3, 2, 2), seed=4, spread=2.0)
    scale_init = rand_pos((4, 1, 1, 1), seed=5) * 3
    zp_init = torch.round(rand((4, 1, 1, 1), seed=6))
    g = rand(x.shape, seed=7)
    q = rescaling(scale_init, zp_init)
    xq = x.clone().requires_grad_()
    q(xq)[0].backward(g)
    leaves = [t.clone().requires_grad_() for t in (x, scale_init, zp_init)]
    ref_rescaling(*leaves)[0].backward(g)
    assert_bitwise(xq.grad, leaves[0].grad)
    torch.testing.assert_close(q.scaling_impl.value.grad, leaves[1].grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(q.zero_point_impl.value.grad, leaves[2].grad, rtol=1e-5, atol=1e-6)
    assert q.scaling_impl.value.grad.abs().sum() > 0


def test_rescaling_state_dict_round_trip():
    scale_init, zp_init = rand_pos((4, 1, 1, 1), seed=8), torch.zeros(4, 1, 1, 1)
    trained = rescaling(scale_init, zp_init)
    with torch.no_grad():
        trained.scaling_impl.value.mul_(1.5)
        trained.zero_point_impl.value.add_(1.0)
    state = trained.state_dict()
    assert sorted(state) == ["scaling_impl.value", "zero_point_impl.value"]
    fresh = rescaling(scale_init, zp_init)
    fresh.load_state_dict(state, strict=True)
    x = rand((4, 3, 2, 2), seed=9, spread=2.0)
    for a, b in zip(trained(x), fresh(x)):
        assert_bitwise(a.detach(), b.detach())


def test_rescaling_observer_only_returns_input():
    x = rand((4, 3), seed=10)
    q = rescaling(torch.tensor(1.0), torch.tensor(0.0))
    q.observer_only = True
    y, scale, _, _ = q(x)
    assert y is x
    assert_bitwise(scale, torch.tensor(1.0) / 7.0)


def test_rescaling_train_eval_propagate():
    q = rescaling(torch.tensor(1.0), torch.tensor(0.0))
    x = rand((4, 3), seed=11)
    y_train = q(x)[0]
    q.eval()
    assert not q.scaling_impl.training and not q.int_quant.training
    assert_bitwise(q(x)[0].detach(), y_train.detach())


# ---- Prescaled -----------------------------------------------------------------------------------


def test_prescaled_restrict_int_quant():
    x = rand((3, 5), seed=12, spread=2.0)
    scale = rand_pos((3, 1), seed=13)
    q = PrescaledRestrictIntQuant(int_quant(signed=True, narrow=False), const(3.0))
    y, s, zp, bw = q(x, scale)
    assert_bitwise(y, ref_int_quant(x, scale, torch.tensor(0.0), torch.tensor(3.0), True, False))
    assert s is scale
    assert torch.equal(zp, torch.tensor(0.0)) and torch.equal(bw, torch.tensor(3.0))
    assert list(q.state_dict()) == []


def test_prescaled_restrict_int_quant_with_input_bit_width():
    x = rand((3, 5), seed=14, spread=8.0)
    scale = rand_pos((1, 5), seed=15)
    q = PrescaledRestrictIntQuantWithInputBitWidth(
        int_quant(signed=False, narrow=False), DropTwoBits()
    )
    y, s, zp, bw = q(x, scale, torch.tensor(6.0))
    assert torch.equal(bw, torch.tensor(4.0))
    assert_bitwise(y, ref_int_quant(x, scale, torch.tensor(0.0), torch.tensor(4.0), False, False))
    assert s is scale and torch.equal(zp, torch.tensor(0.0))


def test_prescaled_gradient_to_given_scale():
    x = rand((3, 5), seed=16, spread=2.0)
    scale = rand_pos((3, 1), seed=17)
    g = rand(x.shape, seed=18)
    q = PrescaledRestrictIntQuant(int_quant(), const(4.0))
    s1 = scale.clone().requires_grad_()
    q(x, s1)[0].backward(g)
    s2 = scale.clone().requires_grad_()
    ref_int_quant(x, s2, torch.tensor(0.0), torch.tensor(4.0), True, True).backward(g)
    torch.testing.assert_close(s1.grad, s2.grad, rtol=1e-5, atol=1e-6)


# ---- TruncIntQuant -------------------------------------------------------------------------------


def trunc(float_to_int_impl=None, out_bits=4.0, narrow=False, **kwargs) -> TruncIntQuant:
    return TruncIntQuant(
        float_to_int_impl if float_to_int_impl is not None else RoundSte(),
        const(out_bits),
        trunc_scaling_impl=TruncMsb(),
        narrow_range=narrow,
        **kwargs,
    )


def ref_trunc(x, scale, zp, in_bits, out_bits, signed, narrow, rnd=torch.round):
    """Written out: exact integer, divide by 2^(in - out), round, clamp, rescale."""
    y = torch.round(x / scale + zp)
    trunc_scale = 2.0 ** (torch.tensor(in_bits) - torch.tensor(out_bits))
    y = rnd(y / trunc_scale)
    if signed:
        lo = -(2.0 ** (out_bits - 1)) + (1.0 if narrow else 0.0)
        hi = 2.0 ** (out_bits - 1) - 1.0
    else:
        lo, hi = 0.0, 2.0**out_bits - (2.0 if narrow else 1.0)
    y = ref_tensor_clamp(y, torch.tensor(lo), torch.tensor(hi))
    out_scale, out_zp = scale * trunc_scale, zp / trunc_scale
    return (y - out_zp) * out_scale, out_scale, out_zp


def test_trunc_brevitas_docstring_example_by_hand():
    # 8-bit integers 4, -5, 31, -44 scaled by 0.01, cut to 4 bits: divide by 16 and round
    # (0.25 -> 0, -0.3125 -> -0, 1.9375 -> 2, -2.75 -> -3), clamp to [-8, 7], scale 0.16.
    x = torch.tensor([0.04, -0.05, 0.31, -0.44])
    y, scale, zp, bw = trunc()(x, torch.tensor(0.01), torch.tensor(0.0), torch.tensor(8.0), True)
    assert torch.equal(scale, torch.tensor(0.01) * 16.0)
    assert_bitwise(y, torch.tensor([0.0, -0.0, 2.0, -3.0]) * scale)
    assert torch.equal(zp, torch.tensor(0.0)) and torch.equal(bw, torch.tensor(4.0))


@pytest.mark.parametrize(
    "signed",
    [True, False, torch.tensor(True), torch.tensor(False)],
    ids=["bool_signed", "bool_unsigned", "tensor_signed", "tensor_unsigned"],
)
@pytest.mark.parametrize("narrow", [False, True])
@pytest.mark.parametrize("rounding", ["round", "floor"])
def test_trunc_values(signed, narrow, rounding):
    is_signed = bool(signed)
    scale = rand_pos((1, 6), seed=20) * 0.1
    ints = torch.randint(
        -128 if is_signed else 0,
        128 if is_signed else 256,
        (5, 6),
        generator=torch.Generator().manual_seed(21),
    ).float()
    x = ints * scale
    impl, rnd = (RoundSte(), torch.round) if rounding == "round" else (FloorSte(), torch.floor)
    q = trunc(impl, out_bits=5.0, narrow=narrow)
    y, out_scale, out_zp, bw = q(x, scale, torch.tensor(0.0), torch.tensor(8.0), signed)
    y_ref, s_ref, zp_ref = ref_trunc(x, scale, torch.tensor(0.0), 8.0, 5.0, is_signed, narrow, rnd)
    assert_bitwise(y, y_ref)
    assert_bitwise(out_scale, s_ref)
    assert_bitwise(out_zp, zp_ref)
    assert torch.equal(bw, torch.tensor(5.0))


def test_trunc_with_zero_point_and_clamp_ste():
    scale = torch.tensor(0.05)
    zp = torch.tensor(16.0)
    x = (torch.arange(0.0, 256.0, 7.0) - zp) * scale
    q = trunc(out_bits=4.0, tensor_clamp_impl=TensorClampSte())
    y, out_scale, out_zp, _ = q(x, scale, zp, torch.tensor(8.0), False)
    y_ref, s_ref, zp_ref = ref_trunc(x, scale, zp, 8.0, 4.0, False, False)
    assert_bitwise(y, y_ref)
    assert torch.equal(out_zp, torch.tensor(1.0)) and torch.equal(out_scale, scale * 16.0)


def test_trunc_gradients():
    # Straight-through roundings: x's gradient is out_scale / scale / trunc_scale inside the
    # range (= 1 here up to rounding) and 0 where the clamp bites.
    scale = torch.tensor(0.25)
    x = torch.tensor([1.0, -2.0, 30.0, -31.0], requires_grad=True)
    s = scale.clone().requires_grad_()
    y, _, _, _ = trunc(out_bits=4.0)(x, s, torch.tensor(0.0), torch.tensor(8.0), True)
    y.backward(torch.ones(4))
    # x / s = 4, -8, 120, -124; / 16 = 0.25, -0.5, 7.5, -7.75 -> 0, -0, 8 -> 7 (clamped), -8.
    assert torch.equal(y.detach(), torch.tensor([0.0, -0.0, 7.0, -8.0]) * 4.0)
    assert torch.equal(x.grad, torch.tensor([1.0, 1.0, 0.0, 1.0]))
    # Reference: the same composition spelled out with straight-through roundings.
    xr = x.detach().clone().requires_grad_()
    sr = scale.clone().requires_grad_()
    u = xr / sr
    u = u + (torch.round(u) - u).detach()
    v = u / 16.0
    v = v + (torch.round(v) - v).detach()
    v = ref_tensor_clamp(v, torch.tensor(-8.0), torch.tensor(7.0))
    (v * (sr * 16.0)).sum().backward()
    torch.testing.assert_close(s.grad, sr.grad)


def test_trunc_delay_and_state():
    q = trunc(quant_delay_steps=1)
    x = torch.tensor([0.04, -0.05])
    args = (torch.tensor(0.01), torch.tensor(0.0), torch.tensor(8.0), True)
    assert q(x, *args)[0] is x
    assert q(x, *args)[0] is not x
    assert list(q.state_dict()) == []


def test_trunc_default_scaling_is_msb():
    scaling = pytest.importorskip("brevitas_cpp.core.scaling")
    if not hasattr(scaling, "TruncMsbScaling"):
        pytest.skip("brevitas_cpp.core.scaling has no TruncMsbScaling yet")
    q = TruncIntQuant(RoundSte(), const(4.0))
    assert type(q.trunc_scaling_impl) is scaling.TruncMsbScaling
    _, scale, _, _ = q(
        torch.tensor([0.04]), torch.tensor(0.01), torch.tensor(0.0), torch.tensor(8.0), True
    )
    assert torch.equal(scale, torch.tensor(0.01) * 16.0)


# ---- scripting and errors -----------------------------------------------------------------------


def test_blocks_script_under_jit():
    blocks = [
        rescaling(torch.tensor(1.0), torch.tensor(0.0)),
        PrescaledRestrictIntQuant(int_quant(), const(4.0)),
        PrescaledRestrictIntQuantWithInputBitWidth(int_quant(), DropTwoBits()),
        trunc(),
    ]
    for block in blocks:
        assert isinstance(block, torch.jit.ScriptModule) == JIT_ENABLED


@pytest.mark.parametrize(
    "build,match",
    [
        (
            lambda: RescalingIntQuant(
                None,
                LearnedThreshold(torch.tensor(1.0)),
                SignedNarrowIntThreshold(),
                LearnedZeroPoint(torch.tensor(0.0)),
                const(4.0),
            ),
            r"RescalingIntQuant: int_quant must be a torch.nn.Module, got None",
        ),
        (
            lambda: RescalingIntQuant(
                int_quant(),
                LearnedThreshold(torch.tensor(1.0)),
                SignedNarrowIntThreshold(),
                LearnedZeroPoint(torch.tensor(0.0)),
                4,
            ),
            r"RescalingIntQuant: bit_width_impl must be a torch.nn.Module, got 4",
        ),
        (
            lambda: PrescaledRestrictIntQuant(int_quant(), 8),
            r"PrescaledRestrictIntQuant: bit_width_impl must be a torch.nn.Module, got 8",
        ),
        (
            lambda: PrescaledRestrictIntQuantWithInputBitWidth("iq", DropTwoBits()),
            r"PrescaledRestrictIntQuantWithInputBitWidth: int_quant must be a torch.nn.Module",
        ),
        (
            lambda: TruncIntQuant(RoundSte(), const(4.0), TruncMsb(), narrow_range="no"),
            r"TruncIntQuant: narrow_range must be a bool.*'no'",
        ),
        (
            lambda: TruncIntQuant(RoundSte, const(4.0), TruncMsb()),
            r"TruncIntQuant: float_to_int_impl must be a torch.nn.Module.*pass an instance",
        ),
        (
            lambda: TruncIntQuant(RoundSte(), const(4.0), TruncMsb(), quant_delay_steps="3"),
            r"TruncIntQuant: quant_delay_steps must be an int.*'3'",
        ),
    ],
)
def test_bad_arguments(build, match):
    with pytest.raises(TypeError, match=match):
        build()
