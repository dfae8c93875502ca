"""BinaryQuant and ClampedBinaryQuant against sign(x) * scale written out with plain torch:
values bit for bit, gradients, fused against unfused, delay, state and argument errors."""

import pytest
import torch
from core_refs import LearnedScale, UserTensorClamp
from helpers import (
    SCALE_SHAPES,
    assert_bitwise,
    rand,
    rand_pos,
    ref_binary_sign,
    ref_sign_ste,
    ref_tensor_clamp,
)
from torch import Tensor

from brevitas_cpp.config import JIT_ENABLED
from brevitas_cpp.core.function_wrapper import TensorClamp, TensorClampSte
from brevitas_cpp.core.quant import BinaryQuant, ClampedBinaryQuant


def ref_binary(x: Tensor, scale: Tensor) -> Tensor:
    return ref_sign_ste(ref_binary_sign, x) * scale


def ref_clamped_binary(x: Tensor, scale: Tensor) -> Tensor:
    return ref_sign_ste(ref_binary_sign, ref_tensor_clamp(x, -scale, scale)) * scale


def inputs(shape_key, dtype=torch.float32, seed=0):
    x_shape, s_shape = SCALE_SHAPES[shape_key]
    x = rand(x_shape, dtype, seed=seed)
    x.view(-1)[0] = 0.0  # the sign of 0 is +1
    return x, rand_pos(s_shape, dtype, seed=seed + 1)


def run(block, x, scale, g):
    """(y, x.grad, scale.grad) of a block built around a learned copy of scale."""
    q = block(LearnedScale(scale))
    xg = x.clone().requires_grad_()
    y, s, zp, bw = q(xg)
    y.backward(g)
    return y.detach(), xg.grad, q.scaling_impl.value.grad, (s, zp, bw, y.grad_fn.name())


def run_ref(fn, x, scale, g):
    xg, sg = x.clone().requires_grad_(), scale.clone().requires_grad_()
    y = fn(xg, sg.abs())
    y.backward(g)
    return y.detach(), xg.grad, sg.grad


@pytest.mark.parametrize("shape_key", list(SCALE_SHAPES))
@pytest.mark.parametrize(
    "block,ref",
    [(BinaryQuant, ref_binary), (ClampedBinaryQuant, ref_clamped_binary)],
    ids=["binary", "clamped"],
)
def test_values_and_gradients(shape_key, block, ref):
    x, scale = inputs(shape_key)
    g = rand(x.shape, seed=5)
    y, gx, gs, (s, zp, bw, node) = run(block, x, scale, g)
    assert node.endswith(f"{block.__name__}Function>")  # the fused op's autograd node
    y_ref, gx_ref, gs_ref = run_ref(ref, x, scale, g)
    assert_bitwise(y, y_ref)
    assert_bitwise(gx, gx_ref)
    torch.testing.assert_close(gs, gs_ref, rtol=1e-5, atol=1e-6)
    assert_bitwise(s.detach(), scale)
    assert torch.equal(zp, torch.tensor(0.0)) and torch.equal(bw, torch.tensor(1.0))


def test_by_hand():
    # Brevitas's example: scale 0.1; the clamped variant zeroes gradients outside [-0.1, 0.1].
    x = torch.tensor([0.04, -0.6, 3.3, 0.0], requires_grad=True)
    scale = torch.tensor(0.1)
    y = ClampedBinaryQuant(LearnedScale(scale))(x)[0]
    y.backward(torch.ones(4))
    assert torch.equal(y.detach(), torch.tensor([1.0, -1.0, 1.0, 1.0]) * scale)
    assert torch.equal(x.grad, torch.tensor([1.0, 0.0, 0.0, 1.0]) * scale)
    x.grad = None
    BinaryQuant(LearnedScale(scale))(x)[0].backward(torch.ones(4))
    assert torch.equal(x.grad, torch.full((4,), 0.1))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_other_dtypes(dtype):
    x, scale = inputs("dim1", dtype)
    for block, ref in ((BinaryQuant, ref_binary), (ClampedBinaryQuant, ref_clamped_binary)):
        y = block(LearnedScale(scale))(x)[0]
        assert y.dtype == dtype
        assert_bitwise(y.detach(), ref(x, scale))


@pytest.mark.parametrize(
    "x_dtype,s_dtype", [(torch.float16, torch.float32), (torch.float32, torch.float64)]
)
def test_mixed_dtypes_promote_like_pytorch(x_dtype, s_dtype):
    x, scale = inputs("dim0", s_dtype)
    x = x.to(x_dtype)
    for block, ref in ((BinaryQuant, ref_binary), (ClampedBinaryQuant, ref_clamped_binary)):
        y = block(LearnedScale(scale))(x)[0]
        assert y.dtype == s_dtype
        assert_bitwise(y.detach(), ref(x, scale))


def test_clamped_fused_equals_unfused():
    x, scale = inputs("dim1", seed=3)
    x = x * 2.0  # many elements outside [-scale, scale]
    g = rand(x.shape, seed=4)
    fused = run(ClampedBinaryQuant, x, scale, g)
    unfused = run(lambda s: ClampedBinaryQuant(s, tensor_clamp_impl=UserTensorClamp()), x, scale, g)
    assert "ClampedBinaryQuantFunction" in fused[3][3] and "Function" not in unfused[3][3]
    assert_bitwise(fused[0], unfused[0])
    # A scripted composition masks gradients with a product (-0.0 for negative upstream grads).
    assert_bitwise(fused[1], unfused[1], signed_zero=not JIT_ENABLED)
    torch.testing.assert_close(fused[2], unfused[2], rtol=1e-5, atol=1e-6)


def test_clamped_with_straight_through_clamp():
    # TensorClampSte lets x's gradient through everywhere, so it behaves like BinaryQuant's.
    x, scale = inputs("dim0", seed=6)
    x = x * 2.0
    g = rand(x.shape, seed=7)
    y, gx, _, _ = run(
        lambda s: ClampedBinaryQuant(s, tensor_clamp_impl=TensorClampSte()), x, scale, g
    )
    assert_bitwise(y, ref_clamped_binary(x, scale))
    assert_bitwise(gx, g * scale)


def test_delay_state_and_modes():
    x, scale = inputs("dim1")
    for block in (BinaryQuant, ClampedBinaryQuant):
        q = block(LearnedScale(scale), quant_delay_steps=1)
        assert q(x)[0] is x
        q.eval()
        assert_bitwise(q(x)[0].detach(), ref_binary(x, scale))
        # Only the learned scale is state: zero point and bit width are fixed by the type.
        assert list(q.state_dict()) == ["scaling_impl.value"]
        fresh = block(LearnedScale(scale * 2))
        fresh.load_state_dict(q.state_dict(), strict=True)
        assert_bitwise(fresh(x)[0].detach(), ref_binary(x, scale))


def test_scripts_under_jit():
    scale = torch.tensor(0.5)
    for q in (BinaryQuant(LearnedScale(scale)), ClampedBinaryQuant(LearnedScale(scale))):
        assert isinstance(q, torch.jit.ScriptModule) == JIT_ENABLED
    default = ClampedBinaryQuant(LearnedScale(scale))
    assert type(default.tensor_clamp_impl) is TensorClamp and default.fused


def test_binary_refuses_unsigned():
    with pytest.raises(ValueError, match=r"BinaryQuant: signed must be True, got False"):
        BinaryQuant(LearnedScale(torch.tensor(1.0)), signed=False)


@pytest.mark.parametrize(
    "build,exc,match",
    [
        (
            lambda: BinaryQuant(LearnedScale(torch.tensor(1.0)), signed=0),
            TypeError,
            r"BinaryQuant: signed must be a bool.*got 0",
        ),
        (
            lambda: BinaryQuant(0.1),
            TypeError,
            r"BinaryQuant: scaling_impl must be a torch.nn.Module",
        ),
        (
            lambda: BinaryQuant(LearnedScale(torch.tensor(1.0)), quant_delay_steps=1.0),
            TypeError,
            r"BinaryQuant: quant_delay_steps must be an int",
        ),
        (
            lambda: ClampedBinaryQuant(
                LearnedScale(torch.tensor(1.0)), tensor_clamp_impl=TensorClamp
            ),
            TypeError,
            r"ClampedBinaryQuant: tensor_clamp_impl must be a torch.nn.Module.*pass an instance",
        ),
        (
            lambda: ClampedBinaryQuant(None),
            TypeError,
            r"ClampedBinaryQuant: scaling_impl must be a torch.nn.Module, got None",
        ),
    ],
)
def test_bad_arguments(build, exc, match):
    with pytest.raises(exc, match=match):
        build()
