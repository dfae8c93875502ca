"""TernaryQuant against mask(|x| > threshold * scale) * sign(x) * scale written out with plain
torch: values bit for bit, gradients, dtypes, delay, state and argument errors."""

import math

import pytest
import torch
from core_refs import LearnedScale
from helpers import SCALE_SHAPES, assert_bitwise, rand, rand_pos, ref_sign_ste, ref_ternary_sign
from torch import Tensor

from brevitas_cpp.config import JIT_ENABLED
from brevitas_cpp.core.quant import TernaryQuant


def ref_ternary(x: Tensor, scale: Tensor, threshold: float) -> Tensor:
    # The mask is float32 whatever x's dtype (so half precision x gives float32 out).
    mask = (x.abs() > threshold * scale).to(torch.float32)
    return mask * ref_sign_ste(ref_ternary_sign, x) * scale


@pytest.mark.parametrize("shape_key", list(SCALE_SHAPES))
@pytest.mark.parametrize("threshold", [0.5, 0.3, 0.0, 1.7])
def test_values_and_gradients(shape_key, threshold):
    x_shape, s_shape = SCALE_SHAPES[shape_key]
    x = rand(x_shape, seed=1)
    scale = rand_pos(s_shape, seed=2)
    g = rand(x_shape, seed=3)
    q = TernaryQuant(LearnedScale(scale), threshold)
    xg = x.clone().requires_grad_()
    y, s, zp, bw = q(xg)
    assert "TernaryQuantFunction" in y.grad_fn.name()  # the fused op ran
    y.backward(g)
    xr, sr = x.clone().requires_grad_(), scale.clone().requires_grad_()
    y_ref = ref_ternary(xr, sr.abs(), threshold)
    y_ref.backward(g)
    assert_bitwise(y.detach(), y_ref.detach())
    assert_bitwise(xg.grad, xr.grad)
    torch.testing.assert_close(q.scaling_impl.value.grad, sr.grad, rtol=1e-5, atol=1e-6)
    assert torch.equal(zp, torch.tensor(0.0)) and torch.equal(bw, torch.tensor(2.0))


def test_by_hand():
    # Brevitas's example: scale 1, threshold 0.5.
    q = TernaryQuant(LearnedScale(torch.tensor(1.0)), 0.5)
    y = q(torch.tensor([0.04, -0.6, 3.3, 0.5, -0.5]))[0]
    assert torch.equal(y.detach(), torch.tensor([0.0, -1.0, 1.0, 0.0, 0.0]))


def test_threshold_is_rounded_like_pytorch():
    # threshold * scale in float32: 0.3 * 0.1 rounds; elements right at the product stay 0.
    scale = torch.tensor(0.1)
    edge = torch.tensor(0.3) * scale
    x = torch.stack([edge, torch.nextafter(edge, torch.tensor(1.0)), -edge])
    y = TernaryQuant(LearnedScale(scale), 0.3)(x)[0].detach()
    assert_bitwise(y, ref_ternary(x, scale, 0.3))
    assert torch.equal(y, torch.tensor([0.0, 1.0, 0.0]) * scale)


@pytest.mark.parametrize(
    "x_dtype,s_dtype,out_dtype",
    [
        (torch.float64, torch.float64, torch.float64),
        (torch.float16, torch.float16, torch.float32),
        (torch.bfloat16, torch.bfloat16, torch.float32),
        (torch.float16, torch.float32, torch.float32),
        (torch.float32, torch.float64, torch.float64),
    ],
)
def test_dtypes(x_dtype, s_dtype, out_dtype):
    x = rand((4, 6), x_dtype, seed=4)
    scale = rand_pos((4, 1), s_dtype, seed=5)
    y = TernaryQuant(LearnedScale(scale), 0.4)(x)[0].detach()
    assert y.dtype == out_dtype
    assert_bitwise(y, ref_ternary(x, scale, 0.4))


def test_delay_state_and_modes():
    x = rand((3, 4), seed=6)
    scale = torch.tensor(0.5)
    q = TernaryQuant(LearnedScale(scale), 0.5, quant_delay_steps=2)
    assert q(x)[0] is x
    q.eval()
    assert q(x)[0] is x
    assert_bitwise(q(x)[0].detach(), ref_ternary(x, scale, 0.5))
    assert list(q.state_dict()) == ["scaling_impl.value"]
    fresh = TernaryQuant(LearnedScale(torch.tensor(3.0)), 0.5)
    fresh.load_state_dict(q.state_dict(), strict=True)
    assert_bitwise(fresh(x)[0].detach(), ref_ternary(x, scale, 0.5))


def test_default_has_no_delay():
    q = TernaryQuant(LearnedScale(torch.tensor(0.5)), 0.5)
    x = rand((3, 4), seed=7)
    assert_bitwise(q(x)[0].detach(), ref_ternary(x, torch.tensor(0.5), 0.5))


def test_scripts_under_jit():
    q = TernaryQuant(LearnedScale(torch.tensor(0.5)), 0.5)
    assert isinstance(q, torch.jit.ScriptModule) == JIT_ENABLED


@pytest.mark.parametrize("threshold", [-0.1, math.nan, math.inf, True, "0.5", None])
def test_bad_threshold(threshold):
    with pytest.raises(ValueError, match=r"TernaryQuant: threshold must be a finite number >= 0"):
        TernaryQuant(LearnedScale(torch.tensor(1.0)), threshold)


def test_bad_blocks():
    with pytest.raises(TypeError, match=r"TernaryQuant: scaling_impl must be a torch.nn.Module"):
        TernaryQuant(1.0, 0.5)
    with pytest.raises(TypeError, match=r"TernaryQuant: quant_delay_steps must be an int"):
        TernaryQuant(LearnedScale(torch.tensor(1.0)), 0.5, quant_delay_steps=0.5)
