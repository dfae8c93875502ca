"""Straight-through clamps: tensor_clamp_ste, scalar_clamp_ste, scalar_clamp_min_ste.

tensor_clamp_ste is checked against Brevitas's tensor_clamp (the torch.where composition,
helpers.ref_tensor_clamp), the scalar clamps against torch.clamp / torch.clamp_min, all in x's dtype
and bitwise (sign of zero included)."""

import functools
import math

import pytest
import torch
from helpers import (
    DTYPE_IDS,
    DTYPES,
    assert_same,
    meta_like,
    randn_reversed_layout,
    ref_tensor_clamp,
)

import brevitas_cpp.function as BF

OPS = torch.ops.brevitas_cpp

NAN = float("nan")
INF = float("inf")


# --- independent references ---------------------------------------------------------------


def ref_scalar_clamp(x, lo, hi):
    return torch.clamp(x, lo, hi)


def ref_scalar_clamp_min(x, lo):
    return torch.clamp_min(x, lo)


# --- helpers -------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _values(shape, dtype, seed):
    """Random values with ties, signed zeros, infinities and NaNs."""
    g = torch.Generator().manual_seed(seed)
    n = math.prod(shape)
    v = torch.randn(n, generator=g, dtype=torch.float64) * 2
    ties = torch.randint(-8, 8, (n,), generator=g).double() / 2
    v = torch.where(torch.rand(n, generator=g, dtype=torch.float64) < 0.3, ties, v)
    specials = torch.tensor([NAN, -0.0, 0.0, INF, -INF, 0.1, -0.1, 1.0, -1.0], dtype=torch.float64)
    k = min(n, specials.numel())
    if n >= 2 * k:
        v[torch.randperm(n, generator=g)[:k]] = specials[:k]
    return v.view(shape).to(dtype)


def values(shape, dtype=torch.float32, seed=0):
    return _values(tuple(shape), dtype, seed).clone()


def fvalues(shape, dtype=torch.float32, seed=0):
    """values() without NaN/inf (opcheck compares eager and traced outputs without equal_nan)."""
    return values(shape, dtype, seed).nan_to_num_(0.5, 3.0, -3.0)


def bounds(shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(1000 + seed)
    lo = -(torch.rand(shape, generator=g, dtype=torch.float64) * 1.5 + 0.1)
    hi = torch.rand(shape, generator=g, dtype=torch.float64) * 1.5 + 0.1
    return lo.to(dtype), hi.to(dtype)


def op_or_wrapper(entry):
    return OPS.tensor_clamp_ste if entry == "op" else BF.tensor_clamp_ste


# --- tensor_clamp_ste: values --------------------------------------------------------------

BOUND_SHAPES = [
    ((), ()),
    ((1,), (1,)),
    ((4,), (4,)),
    ((3, 1), (3, 1)),
    ((1, 3, 1), (1, 3, 1)),
    ((2, 1, 1), (2, 1, 1)),
    ((2, 3, 4), (2, 3, 4)),
    ((1, 1, 1), (1, 1, 1)),
    ((3, 1), (1, 1, 4)),
    ((), (2, 3, 4)),
]


@pytest.mark.parametrize("entry", ["op", "wrapper"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shapes", BOUND_SHAPES, ids=lambda s: f"{list(s[0])}-{list(s[1])}")
def test_tensor_clamp_values(shapes, dtype, entry):
    x = values((2, 3, 4), dtype)
    lo, _ = bounds(shapes[0], dtype, seed=1)
    _, hi = bounds(shapes[1], dtype, seed=2)
    out = op_or_wrapper(entry)(x, lo, hi)
    assert_same(out, ref_tensor_clamp(x, lo, hi))


def test_tensor_clamp_literal():
    x = torch.tensor([[-3.0, -0.5, 0.5, 3.0], [-3.0, -0.5, 0.5, 3.0]])
    lo = torch.tensor([[-1.0], [0.0]])
    hi = torch.tensor([[1.0], [0.25]])
    expected = torch.tensor([[-1.0, -0.5, 0.5, 1.0], [0.0, 0.0, 0.25, 0.25]])
    assert_same(OPS.tensor_clamp_ste(x, lo, hi), expected)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_tensor_clamp_large(dtype):
    # Per-channel bounds on a tensor big enough for the parallel path.
    x = values((8, 33, 301), dtype, seed=3)
    lo, hi = bounds((33, 1), dtype, seed=3)
    assert_same(OPS.tensor_clamp_ste(x, lo, hi), ref_tensor_clamp(x, lo, hi))
    lo, hi = bounds((301,), dtype, seed=4)
    assert_same(OPS.tensor_clamp_ste(x, lo, hi), ref_tensor_clamp(x, lo, hi))
    # channels_last and transposed x with per-channel bounds, above the parallel grain.
    xc = values((4, 33, 16, 17), dtype, seed=5).to(memory_format=torch.channels_last)
    lo, hi = bounds((1, 33, 1, 1), dtype, seed=5)
    out = OPS.tensor_clamp_ste(xc, lo, hi)
    assert_same(out, ref_tensor_clamp(xc, lo, hi))
    assert out.stride() == xc.stride()
    xt = x.transpose(0, 2)
    lo, hi = bounds((1, 33, 1), dtype, seed=6)
    out = OPS.tensor_clamp_ste(xt, lo, hi)
    assert_same(out, ref_tensor_clamp(xt, lo, hi))
    assert out.stride() == xt.stride()


BOUND_DTYPES = [
    torch.int8,
    torch.uint8,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
]


@pytest.mark.parametrize("bound_dtype", BOUND_DTYPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_tensor_clamp_bound_dtypes(dtype, bound_dtype):
    """Bounds of any real dtype are cast to x's dtype."""
    x = values((2, 3, 4), dtype, seed=5) * 3
    if bound_dtype.is_floating_point:
        lo = torch.tensor([[-0.1], [-1.3], [-2.7]], dtype=torch.float64).to(bound_dtype)
        hi = torch.tensor([[0.1], [1.3], [2.7]], dtype=torch.float64).to(bound_dtype)
        # x values that round to the bound in x's dtype, and neighbours of it.
        x[0, :, 0] = lo[:, 0].to(dtype)
        x[1, :, 1] = hi[:, 0].to(dtype)
    elif bound_dtype == torch.uint8:
        lo = torch.tensor([[0], [1], [2]], dtype=bound_dtype)
        hi = torch.tensor([[1], [2], [3]], dtype=bound_dtype)
    else:
        lo = torch.tensor([[-1], [-2], [0]], dtype=bound_dtype)
        hi = torch.tensor([[1], [2], [3]], dtype=bound_dtype)
    out = OPS.tensor_clamp_ste(x, lo, hi)
    assert out.dtype == dtype
    assert_same(out, ref_tensor_clamp(x, lo, hi))


def test_tensor_clamp_bound_cast_rounds_like_type_as():
    # 257 is not a bfloat16: the bound becomes bfloat16(257) = 256.
    x = torch.tensor([300.0, 100.0], dtype=torch.bfloat16)
    out = OPS.tensor_clamp_ste(x, torch.tensor(0), torch.tensor(257))
    assert torch.equal(out, torch.tensor([256.0, 100.0], dtype=torch.bfloat16))
    # A float64 bound beyond float16's range becomes inf.
    x = torch.tensor([70000.0, -70000.0]).half()
    out = OPS.tensor_clamp_ste(
        x, torch.tensor(-1e6, dtype=torch.float64), torch.tensor(1e6, dtype=torch.float64)
    )
    assert torch.equal(out, torch.tensor([INF, -INF], dtype=torch.float16))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_tensor_clamp_min_greater_than_max(dtype):
    # Elementwise min > max: the second where wins, the result is min.
    x = torch.tensor([-5.0, -0.5, 0.0, 0.5, 5.0, NAN], dtype=dtype)
    lo = torch.tensor(1.0, dtype=dtype)
    hi = torch.tensor(-1.0, dtype=dtype)
    expected = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0, NAN], dtype=dtype)
    assert_same(OPS.tensor_clamp_ste(x, lo, hi), expected)
    assert_same(ref_tensor_clamp(x, lo, hi), expected)
    # Mixed: some channels inverted.
    x = values((3, 4), dtype, seed=6)
    lo = torch.tensor([[0.5], [-1.0], [2.0]], dtype=dtype)
    hi = torch.tensor([[-0.5], [1.0], [1.0]], dtype=dtype)
    assert_same(OPS.tensor_clamp_ste(x, lo, hi), ref_tensor_clamp(x, lo, hi))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_tensor_clamp_nan_and_inf(dtype):
    x = torch.tensor([NAN, -NAN, -INF, INF, -0.0, 0.0, 2.0, -2.0], dtype=dtype)
    for lo, hi in [
        (-1.0, 1.0),
        (NAN, 1.0),
        (-1.0, NAN),
        (NAN, NAN),
        (-INF, INF),
        (0.0, 0.0),
        (-0.0, -0.0),
        (0.0, -0.0),
        (INF, INF),
        (-INF, -INF),
    ]:
        lo_t, hi_t = torch.tensor(lo, dtype=dtype), torch.tensor(hi, dtype=dtype)
        out = OPS.tensor_clamp_ste(x, lo_t, hi_t)
        assert_same(out, ref_tensor_clamp(x, lo_t, hi_t))
        assert torch.isnan(out[:2]).all()  # NaN x stays NaN
    # NaN bounds compare false: x passes unchanged.
    out = OPS.tensor_clamp_ste(x, torch.tensor(NAN, dtype=dtype), torch.tensor(NAN, dtype=dtype))
    assert_same(out, x)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_tensor_clamp_zero_dim_and_empty(dtype):
    x = torch.tensor(2.5, dtype=dtype)
    out = OPS.tensor_clamp_ste(x, torch.tensor(-1.0, dtype=dtype), torch.tensor(1.0, dtype=dtype))
    assert out.dim() == 0 and out.item() == 1.0
    for shape, bshape in [
        ((0,), ()),
        ((0,), (1,)),
        ((0, 3), (3,)),
        ((2, 0), (2, 1)),
        ((2, 0), (0,)),
    ]:
        x = torch.empty(shape, dtype=dtype, requires_grad=True)
        lo, hi = bounds(bshape, dtype)
        out = OPS.tensor_clamp_ste(x, lo, hi)
        assert out.shape == x.shape and out.dtype == dtype
        (gx,) = torch.autograd.grad(out, x, torch.empty(shape, dtype=dtype))
        assert gx.shape == x.shape


# --- tensor_clamp_ste: layouts --------------------------------------------------------------


def layout_cases(finite=False):
    """Name -> (x, min_val, max_val). finite=True: no NaN/inf in x (opcheck compares eager
    and traced outputs without equal_nan)."""
    vals = fvalues if finite else values

    x4 = vals((2, 3, 4, 5), seed=7)
    return {
        "contiguous-perchannel": (x4, *bounds((1, 3, 1, 1))),
        "channels_last-perchannel": (
            x4.to(memory_format=torch.channels_last),
            *bounds((1, 3, 1, 1)),
        ),
        "channels_last-perout": (x4.to(memory_format=torch.channels_last), *bounds((2, 1, 1, 1))),
        "channels_last-lastdim": (x4.to(memory_format=torch.channels_last), *bounds((5,))),
        "transposed-rows": (vals((5, 4), seed=8).t(), *bounds((4, 1))),
        "transposed-cols": (vals((5, 4), seed=8).t(), *bounds((5,))),
        "sliced": (vals((4, 10), seed=9)[:, ::3], *bounds((4, 1))),
        "permuted": (vals((3, 4, 5), seed=10).permute(2, 0, 1), *bounds((1, 3, 1))),
        "expanded-x": (vals((1, 5), seed=11).expand(4, 5), *bounds((4, 1))),
        "expanded-bounds": (
            vals((2, 3, 4), seed=12),
            bounds((3, 1))[0].expand(3, 4),
            bounds((1, 4))[1].expand(2, 3, 4),
        ),
        "sliced-bounds": (
            vals((2, 3, 4), seed=13),
            bounds((3, 8))[0][:, ::2],
            bounds((6, 1))[1][::2],
        ),
        "transposed-bounds": (
            vals((2, 4, 3), seed=14),
            bounds((3, 4))[0].t(),
            bounds((3, 4))[1].t(),
        ),
    }


LAYOUT_NAMES = list(layout_cases())


@pytest.mark.parametrize("layout", LAYOUT_NAMES)
def test_tensor_clamp_layouts(layout):
    x, lo, hi = layout_cases()[layout]
    for dtype in (torch.float32, torch.bfloat16):
        xd, lod, hid = x.to(dtype), lo.to(dtype), hi.to(dtype)
        out = OPS.tensor_clamp_ste(xd, lod, hid)
        assert_same(out, ref_tensor_clamp(xd, lod, hid))
        assert out.stride() == torch.empty_like(xd).stride()
        om = OPS.tensor_clamp_ste(meta_like(xd), meta_like(lod), meta_like(hid))
        assert om.shape == x.shape and om.dtype == dtype
        assert om.stride() == torch.empty_like(meta_like(xd)).stride()


# --- tensor_clamp_ste: autograd -------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_tensor_clamp_backward_is_identity(dtype):
    x = values((2, 3, 4), dtype, seed=15).requires_grad_()
    lo, hi = bounds((3, 1), dtype)
    lo.requires_grad_()
    hi.requires_grad_()
    g = values((2, 3, 4), dtype, seed=16)
    out = OPS.tensor_clamp_ste(x, lo, hi)
    out.backward(g)
    assert_same(x.grad, g)  # also where clamped
    assert lo.grad is None and hi.grad is None
    # Same as the straight-through composition x + (tensor_clamp(x) - x).detach().
    xr = x.detach().clone().requires_grad_()
    (gr,) = torch.autograd.grad(xr + (ref_tensor_clamp(xr, lo, hi) - xr).detach(), xr, g)
    assert_same(x.grad, gr)


def test_tensor_clamp_bounds_get_no_gradient():
    x = torch.randn(2, 3)
    lo = torch.full((3,), -0.5, requires_grad=True)
    hi = torch.full((3,), 0.5, requires_grad=True)
    out = BF.tensor_clamp_ste(x, lo, hi)
    if out.requires_grad:  # the op may record a node for the bounds; it must give them nothing
        out.sum().backward()
    assert lo.grad is None and hi.grad is None
    x = torch.randn(2, 3, requires_grad=True)
    (glo, ghi) = torch.autograd.grad(
        OPS.tensor_clamp_ste(x, lo, hi).sum(), (lo, hi), allow_unused=True
    )
    assert glo is None and ghi is None


@pytest.mark.parametrize(
    "layout", ["channels_last-perchannel", "transposed-rows", "sliced", "expanded-x"]
)
def test_tensor_clamp_backward_non_contiguous(layout):
    x, lo, hi = layout_cases()[layout]
    x = x.detach().requires_grad_()
    g = randn_reversed_layout(x)
    OPS.tensor_clamp_ste(x, lo, hi).backward(g)
    assert torch.equal(x.grad, g)


def test_tensor_clamp_double_backward():
    x = torch.tensor([-2.0, 0.5, 2.0], dtype=torch.float64, requires_grad=True)
    lo, hi = torch.tensor(-1.0, dtype=torch.float64), torch.tensor(1.0, dtype=torch.float64)
    g = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
    (gx,) = torch.autograd.grad(OPS.tensor_clamp_ste(x, lo, hi), x, g, create_graph=True)
    assert torch.equal(gx, g)
    with pytest.raises(RuntimeError):
        torch.autograd.grad(gx.sum(), x)  # the straight-through grad does not depend on x


# --- tensor_clamp_ste: bad inputs ----------------------------------------------------------


@pytest.mark.parametrize(
    "bad", [torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64], ids=str
)
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_tensor_clamp_non_floating_x(bad, device):
    x = torch.zeros(2, 3, dtype=bad, device=device)
    lo = torch.zeros(1, device=device)
    with pytest.raises(
        RuntimeError, match=r"brevitas_cpp::tensor_clamp_ste: x must be a floating-point tensor"
    ):
        OPS.tensor_clamp_ste(x, lo, lo)


@pytest.mark.parametrize("which", ["min_val", "max_val"])
@pytest.mark.parametrize(
    "xshape,bshape",
    [
        ((2, 3, 4), (5,)),
        ((2, 3, 4), (3,)),
        ((2, 3, 4), (4, 1)),
        ((2, 3, 4), (2, 3)),
        ((2, 3, 4), (2, 3, 4, 1)),
        ((2, 3, 4), (1, 2, 3, 4)),
        ((2, 3, 4), (2, 3, 5)),
        ((3,), (2, 3)),
        ((), (1,)),
        ((0,), (2,)),
    ],
    ids=str,
)
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_tensor_clamp_bounds_must_not_expand_x(xshape, bshape, which, device):
    x = torch.zeros(xshape, device=device)
    bad = torch.zeros(bshape, device=device)
    good = torch.zeros((), device=device)
    args = (bad, good) if which == "min_val" else (good, bad)
    shp = ", ".join(str(s) for s in bshape)
    xs = ", ".join(str(s) for s in xshape)
    pattern = (
        rf"brevitas_cpp::tensor_clamp_ste: {which} of shape \[{shp}\] does not broadcast to x of "
        rf"shape \[{xs}\]"
    )
    with pytest.raises(RuntimeError, match=pattern):
        OPS.tensor_clamp_ste(x, *args)


@pytest.mark.parametrize("which", ["min_val", "max_val"])
@pytest.mark.parametrize("bad", [torch.bool, torch.complex64, torch.complex128], ids=str)
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_tensor_clamp_bool_complex_bounds(bad, which, device):
    x = torch.zeros(2, 3, device=device)
    b = torch.zeros(3, dtype=bad, device=device)
    good = torch.zeros(3, device=device)
    args = (b, good) if which == "min_val" else (good, b)
    with pytest.raises(
        RuntimeError, match=rf"brevitas_cpp::tensor_clamp_ste: {which} must be a real"
    ):
        OPS.tensor_clamp_ste(x, *args)


def test_tensor_clamp_mixed_devices():
    x = torch.zeros(2, 3)
    with pytest.raises(RuntimeError):
        OPS.tensor_clamp_ste(x, torch.zeros(3, device="meta"), torch.ones(3))
    with pytest.raises(RuntimeError):
        OPS.tensor_clamp_ste(x, torch.zeros(3), torch.ones(3, device="meta"))
    with pytest.raises(RuntimeError):
        OPS.tensor_clamp_ste(torch.zeros(2, 3, device="meta"), torch.zeros(3), torch.ones(3))


# --- tensor_clamp_ste: opcheck --------------------------------------------------------------


@pytest.mark.parametrize("requires_grad", ["none", "x", "all"])
@pytest.mark.parametrize(
    "layout",
    [
        "contiguous-perchannel",
        "channels_last-perchannel",
        "transposed-rows",
        "sliced",
        "expanded-bounds",
        "sliced-bounds",
    ],
)
def test_tensor_clamp_opcheck(layout, requires_grad):
    x, lo, hi = layout_cases(finite=True)[layout]
    x = x.detach().requires_grad_(requires_grad != "none")
    lo = lo.detach().requires_grad_(requires_grad == "all")
    hi = hi.detach().requires_grad_(requires_grad == "all")
    torch.library.opcheck(OPS.tensor_clamp_ste, (x, lo, hi))


def test_tensor_clamp_opcheck_dtypes():
    x = fvalues((3, 4), torch.float16, seed=17)
    torch.library.opcheck(
        OPS.tensor_clamp_ste,
        (x, torch.tensor([[-1], [0], [-2]]), torch.tensor(1.0, dtype=torch.float64)),
    )
    x = fvalues((3, 4), torch.bfloat16, seed=17)
    torch.library.opcheck(
        OPS.tensor_clamp_ste, (x, torch.tensor(-1, dtype=torch.int8), torch.ones(4))
    )


# --- scalar_clamp_ste / scalar_clamp_min_ste -------------------------------------------------

SCALAR_BOUNDS = [
    (-1.0, 1.0),
    (-0.3, 0.7),
    (0.0, 0.0),
    (-0.0, 0.0),
    (0.0, 1.0),
    (-1.0, -0.0),
    (-INF, INF),
    (-INF, 0.5),
    (2.5, INF),
    (1.5, 1.5),
    (-1e4, 1e4),
    (1e-30, 2e-30),
]


@pytest.mark.parametrize("entry", ["op", "wrapper"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_scalar_clamp_values(dtype, entry):
    fn = OPS.scalar_clamp_ste if entry == "op" else BF.scalar_clamp_ste
    x = values((7, 11), dtype, seed=18)
    for lo, hi in SCALAR_BOUNDS:
        assert_same(fn(x, lo, hi), ref_scalar_clamp(x, lo, hi))


@pytest.mark.parametrize("entry", ["op", "wrapper"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_scalar_clamp_min_values(dtype, entry):
    fn = OPS.scalar_clamp_min_ste if entry == "op" else BF.scalar_clamp_min_ste
    x = values((7, 11), dtype, seed=19)
    for lo in [-1.0, -0.3, 0.0, -0.0, 0.7, INF, -INF, 1e-30, 1e4]:
        assert_same(fn(x, lo), ref_scalar_clamp_min(x, lo))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_scalar_clamps_large(dtype):
    x = values((70_001,), dtype, seed=20)
    assert_same(OPS.scalar_clamp_ste(x, -0.75, 1.25), ref_scalar_clamp(x, -0.75, 1.25))
    assert_same(OPS.scalar_clamp_min_ste(x, -0.75), ref_scalar_clamp_min(x, -0.75))


def test_scalar_clamp_literal():
    x = torch.tensor([-3.0, -1.0, -0.5, 0.5, 1.0, 3.0, NAN])
    assert_same(
        OPS.scalar_clamp_ste(x, -1.0, 1.0), torch.tensor([-1.0, -1.0, -0.5, 0.5, 1.0, 1.0, NAN])
    )
    assert_same(OPS.scalar_clamp_min_ste(x, 0.0), torch.tensor([0.0, 0.0, 0.0, 0.5, 1.0, 3.0, NAN]))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_scalar_clamps_zero_dim_empty_nan(dtype):
    x = torch.tensor(-2.5, dtype=dtype)
    assert_same(OPS.scalar_clamp_ste(x, -1.0, 1.0), torch.tensor(-1.0, dtype=dtype))
    assert_same(OPS.scalar_clamp_min_ste(x, -1.0), torch.tensor(-1.0, dtype=dtype))
    for shape in [(0,), (3, 0)]:
        e = torch.empty(shape, dtype=dtype)
        assert OPS.scalar_clamp_ste(e, -1.0, 1.0).shape == shape
        assert OPS.scalar_clamp_min_ste(e, -1.0).shape == shape
    n = torch.tensor([NAN, -NAN], dtype=dtype)
    assert torch.isnan(OPS.scalar_clamp_ste(n, -1.0, 1.0)).all()
    assert torch.isnan(OPS.scalar_clamp_min_ste(n, INF)).all()


def scalar_layouts(values=values):
    return {
        "transposed": values((5, 4), seed=21).t(),
        "sliced": values((4, 10), seed=22)[:, ::3],
        "channels_last": values((2, 3, 4, 5), seed=23).to(memory_format=torch.channels_last),
        "permuted": values((3, 4, 5), seed=24).permute(2, 0, 1),
        "expanded": values((1, 5), seed=25).expand(4, 5),
    }


SCALAR_LAYOUTS = list(scalar_layouts())


@pytest.mark.parametrize("layout", SCALAR_LAYOUTS)
def test_scalar_clamp_layouts(layout):
    x = scalar_layouts()[layout]
    for out, ref in [
        (OPS.scalar_clamp_ste(x, -0.5, 0.5), ref_scalar_clamp(x, -0.5, 0.5)),
        (OPS.scalar_clamp_min_ste(x, -0.5), ref_scalar_clamp_min(x, -0.5)),
    ]:
        assert_same(out, ref)
        assert out.stride() == torch.empty_like(x).stride()
    xm = meta_like(x)
    for om in (OPS.scalar_clamp_ste(xm, -0.5, 0.5), OPS.scalar_clamp_min_ste(xm, -0.5)):
        assert om.shape == x.shape and om.stride() == torch.empty_like(xm).stride()


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_scalar_clamps_backward_is_identity(dtype):
    x = values((4, 9), dtype, seed=26).requires_grad_()
    g = values((4, 9), dtype, seed=27)
    (gx,) = torch.autograd.grad(OPS.scalar_clamp_ste(x, -0.5, 0.5), x, g)
    assert_same(gx, g)
    (gx,) = torch.autograd.grad(BF.scalar_clamp_min_ste(x, 0.25), x, g)
    assert_same(gx, g)
    # torch.clamp's own gradient is masked: the STE is not.
    xr = x.detach().clone().requires_grad_()
    (gr,) = torch.autograd.grad(xr + (torch.clamp(xr, -0.5, 0.5) - xr).detach(), xr, g)
    assert_same(gr, g)


@pytest.mark.parametrize("layout", ["transposed", "channels_last", "expanded"])
def test_scalar_clamps_backward_non_contiguous(layout):
    x = scalar_layouts()[layout].requires_grad_()
    g = randn_reversed_layout(x)
    (OPS.scalar_clamp_ste(x, -0.5, 0.5) * 2 + OPS.scalar_clamp_min_ste(x, 0.0)).backward(g)
    assert torch.equal(x.grad, 3 * g)


def test_scalar_clamps_double_backward():
    x = torch.tensor([-2.0, 0.5, 2.0], dtype=torch.float64, requires_grad=True)
    g = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
    for out in (OPS.scalar_clamp_ste(x, -1.0, 1.0), OPS.scalar_clamp_min_ste(x, 0.0)):
        (gx,) = torch.autograd.grad(out, x, g, create_graph=True)
        assert torch.equal(gx, g)
        with pytest.raises(RuntimeError):
            torch.autograd.grad(gx.sum(), x)


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("entry", ["op", "wrapper"])
def test_scalar_clamp_bad_bounds(entry, device):
    fn = OPS.scalar_clamp_ste if entry == "op" else BF.scalar_clamp_ste
    fmin = OPS.scalar_clamp_min_ste if entry == "op" else BF.scalar_clamp_min_ste
    x = torch.randn(3, device=device)
    with pytest.raises(
        RuntimeError,
        match=r"brevitas_cpp::scalar_clamp_ste: min_val \(2\) must be <= max_val \(1\)",
    ):
        fn(x, 2.0, 1.0)
    with pytest.raises(
        RuntimeError, match=r"scalar_clamp_ste: min_val \(2\.5\) must be <= max_val \(-1\.25\)"
    ):
        fn(x, 2.5, -1.25)
    with pytest.raises(RuntimeError, match=r"scalar_clamp_ste: min_val .* must be <= max_val"):
        fn(x, INF, -INF)
    with pytest.raises(
        RuntimeError, match=r"brevitas_cpp::scalar_clamp_ste: min_val must not be NaN"
    ):
        fn(x, NAN, 1.0)
    with pytest.raises(
        RuntimeError, match=r"brevitas_cpp::scalar_clamp_ste: max_val must not be NaN"
    ):
        fn(x, -1.0, NAN)
    with pytest.raises(RuntimeError, match=r"scalar_clamp_ste: m.._val must not be NaN"):
        fn(x, NAN, NAN)
    with pytest.raises(
        RuntimeError, match=r"brevitas_cpp::scalar_clamp_min_ste: min_val must not be NaN"
    ):
        fmin(x, NAN)


@pytest.mark.parametrize(
    "bad", [torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64], ids=str
)
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_scalar_clamps_non_floating_x(bad, device):
    x = torch.zeros(2, 3, dtype=bad, device=device)
    with pytest.raises(
        RuntimeError, match=r"brevitas_cpp::scalar_clamp_ste: x must be a floating-point tensor"
    ):
        OPS.scalar_clamp_ste(x, -1.0, 1.0)
    with pytest.raises(
        RuntimeError, match=r"brevitas_cpp::scalar_clamp_min_ste: x must be a floating-point tensor"
    ):
        OPS.scalar_clamp_min_ste(x, -1.0)


@pytest.mark.parametrize("requires_grad", [False, True], ids=["nograd", "grad"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced", "channels_last"])
def test_scalar_clamps_opcheck(layout, requires_grad):
    x = fvalues((3, 7), seed=28) if layout == "contiguous" else scalar_layouts(fvalues)[layout]
    x = x.detach().requires_grad_(requires_grad)
    torch.library.opcheck(OPS.scalar_clamp_ste, (x, -0.5, 0.5))
    torch.library.opcheck(OPS.scalar_clamp_min_ste, (x, -0.5))


def test_scalar_clamps_opcheck_dtypes():
    for dtype in (torch.float64, torch.float16, torch.bfloat16):
        x = fvalues((3, 7), dtype, seed=29)
        torch.library.opcheck(OPS.scalar_clamp_ste, (x, -0.3, 0.7))
        torch.library.opcheck(OPS.scalar_clamp_min_ste, (x, 0.3))


# --- TorchScript -------------------------------------------------------------------------


def _scripted_ops(x: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor):
    a = torch.ops.brevitas_cpp.tensor_clamp_ste(x, lo, hi)
    b = torch.ops.brevitas_cpp.scalar_clamp_ste(x, -0.5, 0.5)
    c = torch.ops.brevitas_cpp.scalar_clamp_min_ste(x, 0.25)
    return a, b, c


def _scripted_wrappers(x: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor):
    a = BF.tensor_clamp_ste(x, lo, hi)
    b = BF.scalar_clamp_ste(x, -0.5, 0.5)
    c = BF.scalar_clamp_min_ste(x, 0.25)
    return a, b, c


@pytest.mark.parametrize("fn", [_scripted_ops, _scripted_wrappers], ids=["ops", "wrappers"])
def test_torchscript(fn):
    scripted = torch.jit.script(fn)
    lo, hi = bounds((3, 1), seed=30)
    for i in range(3):
        x = values((2, 3, 4), seed=31 + i).requires_grad_()
        a, b, c = scripted(x, lo, hi)
        xd = x.detach()
        assert_same(a.detach(), ref_tensor_clamp(xd, lo, hi))
        assert_same(b.detach(), ref_scalar_clamp(xd, -0.5, 0.5))
        assert_same(c.detach(), ref_scalar_clamp_min(xd, 0.25))
        (a.sum() + 2 * b.sum() + 4 * c.sum()).backward()
        assert torch.equal(x.grad, torch.full_like(xd, 7.0))
