"""scalar_signed_clamp_min_ste: one op for Brevitas's ScalarSignedClampMinSte composition

    where(x >= 0, 1, -1).type_as(x) * scalar_clamp_min_ste(abs_binary_sign_grad(x), min_val)

checked bitwise against that composition evaluated with plain torch ops in x's dtype (values,
sign of zero, NaN), and its gradient against the composition's autograd (grad * sign *
binary_sign(x), which is grad itself for every non-NaN x)."""

import pytest
import torch
from helpers import DTYPE_IDS, DTYPES, assert_same

import brevitas_cpp.function as BF

OPS = torch.ops.brevitas_cpp

NAN = float("nan")
INF = float("inf")
SPECIALS = [NAN, -0.0, 0.0, INF, -INF, 0.25, -0.25, 0.2499, -0.2501, 1e-30, -1e-30, 3.0, -3.0]


def ref_signed_clamp_min(x, min_val):
    """Brevitas's composition with torch ops: sign * clamp_min(|x|, min_val)."""
    sign = torch.where(x >= 0, 1.0, -1.0).type_as(x)
    return sign * torch.clamp_min(torch.abs(x), min_val)


def ref_grad(x, g):
    """The composition's gradient: grad * sign (mul) * binary_sign(x) (abs' STE gradient)."""
    sign = torch.where(x >= 0, 1.0, -1.0).type_as(x)
    return g * sign * sign


def values(dtype, n=257, seed=0):
    gen = torch.Generator().manual_seed(seed)
    v = torch.randn(n, generator=gen, dtype=torch.float64) * 0.5
    v[: len(SPECIALS)] = torch.tensor(SPECIALS, dtype=torch.float64)
    return v.to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("min_val", [0.25, 1e-10, 0.0, 2.0])
@pytest.mark.parametrize("entry", ["op", "function"])
def test_values_match_the_composition_bitwise(dtype, min_val, entry):
    fn = OPS.scalar_signed_clamp_min_ste if entry == "op" else BF.scalar_signed_clamp_min_ste
    x = values(dtype)
    assert_same(fn(x, min_val), ref_signed_clamp_min(x, min_val))


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "channels_last", "scalar", "empty"])
def test_layouts_and_shapes(layout):
    if layout == "contiguous":
        x = torch.randn(4, 5)
    elif layout == "transposed":
        x = torch.randn(5, 4).t()
    elif layout == "channels_last":
        x = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    elif layout == "scalar":
        x = torch.tensor(-0.01)
    else:
        x = torch.randn(0, 3)
    y = OPS.scalar_signed_clamp_min_ste(x, 0.1)
    assert_same(y, ref_signed_clamp_min(x, 0.1))
    assert y.stride() == x.stride() or x.numel() == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_gradient_is_the_compositions(dtype):
    x = values(dtype, seed=1).nan_to_num(0.5)  # a NaN x has a NaN gradient in neither; skip it
    g = torch.randn(x.shape, dtype=dtype, generator=torch.Generator().manual_seed(2))
    xr = x.clone().requires_grad_(True)
    (gx,) = torch.autograd.grad(OPS.scalar_signed_clamp_min_ste(xr, 0.25), xr, g)
    assert_same(gx, ref_grad(x, g))
    assert_same(gx, g)  # straight through


def test_module_matches_brevitas_composition_in_a_learned_scale():
    """ScalarSignedClampMinSte (the block every float quantizer with scaling_min_val calls) keeps
    its values and its gradient to a learned scale."""
    from brevitas_cpp.core.function_wrapper import ScalarSignedClampMinSte

    block = ScalarSignedClampMinSte(1e-4)
    for v in (0.5, 5e-5, -5e-5, -0.0, -3.0):
        p = torch.tensor(v, requires_grad=True)
        y = block(p)
        assert_same(y.detach(), ref_signed_clamp_min(p.detach(), 1e-4))
        y.backward(torch.tensor(0.75))
        assert_same(p.grad, ref_grad(p.detach(), torch.tensor(0.75)))


def test_bad_arguments_are_named():
    x = torch.randn(3)
    with pytest.raises(
        RuntimeError, match=r"brevitas_cpp::scalar_signed_clamp_min_ste: min_val must be >= 0"
    ):
        OPS.scalar_signed_clamp_min_ste(x, -0.5)
    with pytest.raises(
        RuntimeError, match=r"brevitas_cpp::scalar_signed_clamp_min_ste: min_val must be >= 0"
    ):
        OPS.scalar_signed_clamp_min_ste(x, NAN)
    with pytest.raises(
        RuntimeError, match=r"brevitas_cpp::scalar_signed_clamp_min_ste: x must be a floating-point"
    ):
        OPS.scalar_signed_clamp_min_ste(torch.arange(3), 0.5)
    with pytest.raises(
        RuntimeError, match=r"brevitas_cpp::scalar_signed_clamp_min_ste: min_val .* overflow"
    ):
        OPS.scalar_signed_clamp_min_ste(x.half(), 1e6)


def test_meta_and_opcheck():
    x = torch.randn(3, 7, dtype=torch.float64)
    m = OPS.scalar_signed_clamp_min_ste(
        torch.empty(2, 3, 4, 5, device="meta").to(memory_format=torch.channels_last), 0.1
    )
    assert m.shape == (2, 3, 4, 5) and m.is_contiguous(memory_format=torch.channels_last)
    for requires_grad in (False, True):
        torch.library.opcheck(
            OPS.scalar_signed_clamp_min_ste, (x.detach().requires_grad_(requires_grad), 0.3)
        )


def test_scripts():
    def f(x: torch.Tensor) -> torch.Tensor:
        return BF.scalar_signed_clamp_min_ste(x, 0.25)

    x = values(torch.float32, seed=3)
    assert_same(torch.jit.script(f)(x), ref_signed_clamp_min(x, 0.25))


def test_gradcheck_where_the_clamp_is_inactive():
    # For |x| > min_val the op is x itself, so the straight-through gradient is the true one.
    x = torch.randn(8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    x = torch.where(x.abs() > 0.3, x, torch.where(x < 0, -0.75, 0.75))
    assert torch.autograd.gradcheck(
        lambda x_: OPS.scalar_signed_clamp_min_ste(x_, 0.25), (x.requires_grad_(),)
    )
    assert torch.autograd.gradcheck(
        lambda x_: BF.scalar_signed_clamp_min_ste(x_, 0.25), (x.detach().t().requires_grad_(),)
    )
