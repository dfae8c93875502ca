"""Straight-through rounding ops: round_ste, ceil_ste, floor_ste, round_to_zero_ste, dpu_round_ste.

Each op is checked against the formula of the contract written out here (round_to_zero and
dpu_round in helpers.py) with plain torch ops evaluated in the same dtype (bitwise, including
the sign of zero), and its backward against the identity (straight-through) gradient."""

import functools
import math

import pytest
import torch
from helpers import (
    BAD_DTYPES,
    DTYPE_IDS,
    DTYPES,
    INT_VIEW,
    assert_layout_kept,
    assert_same,
    randn_reversed_layout,
    ref_dpu_round,
    ref_round_to_zero,
)

import brevitas_cpp.function as BF

OPS = torch.ops.brevitas_cpp


# --- independent references (the contract's formulas) --------------------------------------


def ref_round(x):
    return torch.round(x)


def ref_ceil(x):
    return torch.ceil(x)


def ref_floor(x):
    return torch.floor(x)


REFS = {
    "round_ste": ref_round,
    "ceil_ste": ref_ceil,
    "floor_ste": ref_floor,
    "round_to_zero_ste": ref_round_to_zero,
    "dpu_round_ste": ref_dpu_round,
}
OP_NAMES = list(REFS)

# Hand-written expected values at ties and signed zeros (a second, literal reference).
TIE_INPUT = [-2.5, -1.5, -0.5, -0.0, 0.0, 0.5, 1.5, 2.5, -3.5, 3.5]
TIE_EXPECTED = {
    "round_ste": [-2.0, -2.0, -0.0, -0.0, 0.0, 0.0, 2.0, 2.0, -4.0, 4.0],
    "ceil_ste": [-2.0, -1.0, -0.0, -0.0, 0.0, 1.0, 2.0, 3.0, -3.0, 4.0],
    "floor_ste": [-3.0, -2.0, -1.0, -0.0, 0.0, 0.0, 1.0, 2.0, -4.0, 3.0],
    # sign(x) * floor(|x|): sign(-0.0) = 0 so -0.0 maps to +0.0, -0.5 maps to -1 * 0 = -0.0.
    "round_to_zero_ste": [-2.0, -1.0, -0.0, 0.0, 0.0, 0.0, 1.0, 2.0, -3.0, 3.0],
    # negative x.5 goes up (ceil), everything else half to even.
    "dpu_round_ste": [-2.0, -1.0, -0.0, -0.0, 0.0, 0.0, 2.0, 2.0, -3.0, 4.0],
}


def wrapper(name):
    return getattr(BF, name)


def op(name):
    return getattr(OPS, name)


ENTRY_POINTS = {"op": op, "wrapper": wrapper}


# --- helpers -------------------------------------------------------------------------------


def neighbours(values, dtype):
    """The representable values of dtype just below and just above each value (> 0)."""
    t = torch.tensor(values, dtype=dtype)
    bits = t.view(INT_VIEW[dtype])
    return torch.cat([(bits - 1).view(dtype), (bits + 1).view(dtype)])


def special_values(dtype):
    fi = torch.finfo(dtype)
    mant = round(-math.log2(fi.eps))  # explicit mantissa bits
    base = [
        -2.5,
        -1.5,
        -0.5,
        -0.0,
        0.0,
        0.5,
        1.5,
        2.5,
        -3.5,
        3.5,
        -4.5,
        4.5,
        0.25,
        -0.25,
        0.75,
        -0.75,
        1.0,
        -1.0,
        0.3,
        -0.3,
        0.7,
        -0.7,
        1e-3,
        -1e-3,
        10.5,
        -10.5,
        11.5,
        -11.5,
        63.5,
        -63.5,
        float("inf"),
        float("-inf"),
        float("nan"),
        -float("nan"),
        fi.max,
        -fi.max,
        fi.tiny,
        -fi.tiny,
        fi.smallest_normal / 4,
        -fi.smallest_normal / 4,
        2.0 ** (mant - 1) + 0.5,
        -(2.0 ** (mant - 1) + 0.5),  # largest ties with a .5 step
        2.0**mant - 0.5,
        -(2.0**mant - 0.5),
        2.0**mant,
        -(2.0**mant),
        2.0**mant + 2,
        -(2.0**mant + 2),
    ]
    t = torch.tensor(base, dtype=torch.float64).to(dtype)
    near = neighbours([0.5, 1.5, 2.5, 1.0, 2.0 ** (mant - 1)], dtype)
    t = torch.cat([t, near, -near])
    # 19 lanes of each value on both sides of a vector boundary: scalar tails and full vectors.
    return torch.cat([t, t.flip(0), t[:19]])


@functools.lru_cache(maxsize=None)
def _random_values(dtype, n, seed):
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(n, generator=g, dtype=torch.float64) * 20
    ties = torch.randint(-200, 200, (n,), generator=g).double() / 2
    quarter = torch.randint(-400, 400, (n,), generator=g).double() / 4
    pick = torch.randint(0, 3, (n,), generator=g)
    v = torch.where(pick == 0, v, torch.where(pick == 1, ties, quarter))
    v[torch.randint(0, n, (n // 100,), generator=g)] = float("nan")
    v[torch.randint(0, n, (n // 100,), generator=g)] = -0.0
    return v.to(dtype)


def random_values(dtype, n, seed=0):
    return _random_values(dtype, n, seed).clone()


def tie_grid(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    n = math.prod(shape)
    v = (
        torch.randint(-12, 12, (n,), generator=g).double() / 2
        + (torch.rand(n, generator=g, dtype=torch.float64) < 0.3) * 0.25
    )
    return v.view(shape).to(dtype)


def layouts(dtype):
    """Inputs of various memory layouts, all holding ties."""
    base = tie_grid((2, 3, 4, 5), dtype, seed=1)
    return {
        "contiguous": base,
        "transposed": tie_grid((5, 4), dtype, seed=2).t(),
        "sliced": tie_grid((4, 10), dtype, seed=3)[:, ::3],
        "channels_last": base.to(memory_format=torch.channels_last),
        "channels_last_c1": tie_grid((2, 1, 4, 5), dtype, seed=4).to(
            memory_format=torch.channels_last
        ),
        "permuted": tie_grid((3, 4, 5), dtype, seed=5).permute(2, 0, 1),
        "expanded": tie_grid((1, 5), dtype, seed=6).expand(4, 5),
        "offset": tie_grid((20,), dtype, seed=7)[3:17].view(2, 7),
        "row_slice": tie_grid((6, 33), dtype, seed=8)[1:5],
    }


LAYOUT_NAMES = list(layouts(torch.float32))


# --- forward values ----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", OP_NAMES)
@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_special_values(entry, name, dtype):
    x = special_values(dtype)
    assert_same(ENTRY_POINTS[entry](name)(x), REFS[name](x))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", OP_NAMES)
def test_random_values_large(name, dtype):
    # Large enough for the parallel path, odd length for the vector tail.
    x = random_values(dtype, 70_001)
    assert_same(op(name)(x), REFS[name](x))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", OP_NAMES)
def test_ties_and_signed_zero_literal(name, dtype):
    x = torch.tensor(TIE_INPUT, dtype=dtype)
    expected = torch.tensor(TIE_EXPECTED[name], dtype=dtype)
    out = op(name)(x)
    assert_same(out, expected)
    # The literal table and the formula agree (guards the table itself).
    assert_same(REFS[name](x), expected)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", OP_NAMES)
def test_just_below_and_above_half(name, dtype):
    # The classic floor(x + 0.5) bug: the largest value below 0.5 must not round to 1.
    x = neighbours([0.5, 1.5, 2.5], dtype)
    x = torch.cat([x, -x])
    assert_same(op(name)(x), REFS[name](x))


def test_brevitas_documented_examples():
    x = torch.tensor([-1.5, -0.5, 0.5, 1.5])
    assert_same(OPS.dpu_round_ste(x), torch.tensor([-1.0, -0.0, 0.0, 2.0]))
    assert_same(OPS.round_to_zero_ste(x), torch.tensor([-1.0, -0.0, 0.0, 1.0]))
    assert_same(OPS.round_ste(x), torch.tensor([-2.0, -0.0, 0.0, 2.0]))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", OP_NAMES)
def test_nan_propagates(name, dtype):
    x = torch.tensor([float("nan"), -float("nan"), 1.5, float("nan")], dtype=dtype)
    out = op(name)(x)
    assert torch.equal(torch.isnan(out), torch.tensor([True, True, False, True]))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", OP_NAMES)
@pytest.mark.parametrize("shape", [(0,), (2, 0, 3)], ids=["0", "2x0x3"])
def test_empty(name, dtype, shape):
    x = torch.empty(shape, dtype=dtype, requires_grad=True)
    out = op(name)(x)
    assert out.shape == x.shape and out.dtype == dtype
    (gx,) = torch.autograd.grad(out, x, torch.empty(shape, dtype=dtype))
    assert gx.shape == x.shape


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", OP_NAMES)
def test_zero_dim(name, dtype):
    for v in [-2.5, -0.5, -0.0, 0.5, 3.5, float("nan")]:
        x = torch.tensor(v, dtype=dtype)
        out = op(name)(x)
        assert out.dim() == 0
        assert_same(out, REFS[name](x))


# --- layouts -----------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUT_NAMES)
@pytest.mark.parametrize("name", OP_NAMES)
def test_layouts(name, layout):
    for dtype in (torch.float32, torch.bfloat16):
        x = layouts(dtype)[layout]
        # The Meta kernel gives the CPU kernel's layout.
        assert_layout_kept(op(name), x, REFS[name](x))


# --- autograd ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", OP_NAMES)
def test_backward_is_identity(name, dtype):
    x = special_values(dtype).requires_grad_()
    g = random_values(dtype, x.numel(), seed=3)  # includes NaN and -0.0 gradients
    out = op(name)(x)
    assert out.requires_grad
    (gx,) = torch.autograd.grad(out, x, g)
    assert gx.dtype == dtype
    torch.testing.assert_close(gx, g, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(torch.signbit(gx), torch.signbit(g))
    # Same as the autograd of the straight-through composition x + (f(x) - x).detach().
    xr = x.detach().clone().requires_grad_()
    y = xr + (REFS[name](xr) - xr).detach()
    (gr,) = torch.autograd.grad(y, xr, g)
    torch.testing.assert_close(gx, gr, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("layout", ["transposed", "sliced", "channels_last", "expanded"])
@pytest.mark.parametrize("name", OP_NAMES)
def test_backward_non_contiguous(name, layout):
    x = layouts(torch.float32)[layout].detach().requires_grad_()
    g = randn_reversed_layout(x)  # another non-contiguous layout
    out = op(name)(x)
    assert_same(out.detach(), REFS[name](x.detach()))
    out.backward(g)
    assert torch.equal(x.grad, g)


@pytest.mark.parametrize("name", OP_NAMES)
def test_wrapper_backward(name):
    x = torch.tensor([-1.5, -0.4, 0.5, 2.25], requires_grad=True)
    y = wrapper(name)(x)
    y.backward(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    assert torch.equal(x.grad, torch.tensor([1.0, 2.0, 3.0, 4.0]))


@pytest.mark.parametrize("name", OP_NAMES)
def test_only_x_requires_grad_when_needed(name):
    x = torch.tensor([0.5, 1.5])
    assert not op(name)(x).requires_grad
    with torch.no_grad():
        assert not op(name)(x.clone().requires_grad_()).requires_grad


@pytest.mark.parametrize("name", OP_NAMES)
def test_double_backward(name):
    # The straight-through backward is the identity on the incoming gradient: differentiating
    # it again gives the identity in that gradient and nothing in x (piecewise constant f).
    x = torch.tensor([-1.5, -0.4, 0.5, 2.25], dtype=torch.float64, requires_grad=True)
    g = torch.tensor([1.0, -2.0, 3.0, 0.5], dtype=torch.float64, requires_grad=True)
    (gx,) = torch.autograd.grad(op(name)(x), x, g, create_graph=True)
    assert torch.equal(gx, g)
    w = torch.tensor([2.0, 3.0, 4.0, 5.0], dtype=torch.float64)
    (gg,) = torch.autograd.grad(gx, g, w)
    assert torch.equal(gg, w)
    # gx does not depend on x: asking for d(gx)/dx raises.
    (gx,) = torch.autograd.grad(op(name)(x), x, g, create_graph=True)
    with pytest.raises(RuntimeError):
        torch.autograd.grad(gx.sum(), x)
    # With a constant incoming gradient the first derivative is a constant.
    (gx,) = torch.autograd.grad(
        op(name)(x), x, torch.ones(4, dtype=torch.float64), create_graph=True
    )
    assert not gx.requires_grad
    with pytest.raises(RuntimeError):
        torch.autograd.grad(gx.sum(), x)


# --- opcheck -----------------------------------------------------------------------------


@pytest.mark.parametrize("requires_grad", [False, True], ids=["nograd", "grad"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced", "channels_last"])
@pytest.mark.parametrize("name", OP_NAMES)
def test_opcheck(name, layout, requires_grad):
    x = layouts(torch.float32)[layout].detach().requires_grad_(requires_grad)
    torch.library.opcheck(op(name), (x,))


def test_opcheck_other_dtypes():
    for name in OP_NAMES:
        for dtype in (torch.float64, torch.float16, torch.bfloat16):
            torch.library.opcheck(op(name), (tie_grid((3, 5), dtype),))


# --- bad inputs --------------------------------------------------------------------------


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("bad", BAD_DTYPES, ids=str)
@pytest.mark.parametrize("name", OP_NAMES)
def test_non_floating_x_rejected(name, bad, device):
    x = torch.zeros(3, dtype=bad, device=device)
    with pytest.raises(
        RuntimeError, match=rf"brevitas_cpp::{name}: x must be a floating-point tensor"
    ):
        op(name)(x)
    with pytest.raises(RuntimeError, match=r"x .*floating"):
        wrapper(name)(x)


# --- TorchScript -------------------------------------------------------------------------


def _scripted_ops(x: torch.Tensor):
    a = torch.ops.brevitas_cpp.round_ste(x)
    b = torch.ops.brevitas_cpp.ceil_ste(x)
    c = torch.ops.brevitas_cpp.floor_ste(x)
    d = torch.ops.brevitas_cpp.round_to_zero_ste(x)
    e = torch.ops.brevitas_cpp.dpu_round_ste(x)
    return a, b, c, d, e


def _scripted_wrappers(x: torch.Tensor):
    a = BF.round_ste(x)
    b = BF.ceil_ste(x)
    c = BF.floor_ste(x)
    d = BF.round_to_zero_ste(x)
    e = BF.dpu_round_ste(x)
    return a, b, c, d, e


@pytest.mark.parametrize("fn", [_scripted_ops, _scripted_wrappers], ids=["ops", "wrappers"])
def test_torchscript(fn):
    scripted = torch.jit.script(fn)
    for _ in range(3):  # the profiling executor optimises after a couple of runs
        x = torch.tensor(
            [-2.5, -1.5, -0.5, -0.0, 0.0, 0.5, 1.5, 2.5, 0.3, -0.7], requires_grad=True
        )
        outs = scripted(x)
        for o, name in zip(outs, OP_NAMES):
            assert_same(o.detach(), REFS[name](x.detach()))
        weights = [float(i + 1) for i in range(5)]
        sum(w * o.sum() for w, o in zip(weights, outs)).backward()
        assert torch.equal(x.grad, torch.full_like(x, sum(weights)))
