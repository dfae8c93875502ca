"""Sign ops: binary_sign_ste, ternary_sign_ste, abs_binary_sign_grad and its backward op
_abs_binary_sign_grad_backward.

References are the contract's formulas written out with plain torch ops in x's dtype. NaN
inputs give NaN outputs in every op (deliberately unlike Brevitas's Python formulas)."""

import functools
import math

import pytest
import torch
from helpers import (
    BAD_DTYPES,
    DTYPE_IDS,
    DTYPES,
    NO_AOT,
    assert_layout_kept,
    assert_same,
    meta_like,
    randn_reversed_layout,
    ref_binary_sign,
    ref_ternary_sign,
)

import brevitas_cpp.function as BF

OPS = torch.ops.brevitas_cpp


# --- independent references ---------------------------------------------------------------


def ref_abs(x):
    return torch.abs(x)


def ref_abs_backward(grad, x):
    """grad * binary_sign(x): +1 at 0 and at -0.0, NaN where x is NaN."""
    return grad * ref_binary_sign(x)


REFS = {
    "binary_sign_ste": ref_binary_sign,
    "ternary_sign_ste": ref_ternary_sign,
    "abs_binary_sign_grad": ref_abs,
}
OP_NAMES = list(REFS)
STE_NAMES = ["binary_sign_ste", "ternary_sign_ste"]

TABLE_INPUT = [-2.5, -1.0, -1e-7, -0.0, 0.0, 1e-7, 0.5, 3.0, float("inf"), float("-inf")]
TABLE_EXPECTED = {
    "binary_sign_ste": [-1.0, -1.0, -1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, -1.0],
    "ternary_sign_ste": [-1.0, -1.0, -1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, -1.0],
    "abs_binary_sign_grad": [2.5, 1.0, 1e-7, 0.0, 0.0, 1e-7, 0.5, 3.0, float("inf"), float("inf")],
}


def op(name):
    return getattr(OPS, name)


def wrapper(name):
    return getattr(BF, name)


ENTRY_POINTS = {"op": op, "wrapper": wrapper}


# --- helpers -------------------------------------------------------------------------------


def special_values(dtype):
    fi = torch.finfo(dtype)
    base = [
        -2.5,
        -1.5,
        -0.5,
        -0.0,
        0.0,
        0.5,
        1.5,
        2.5,
        1.0,
        -1.0,
        0.3,
        -0.3,
        1e-3,
        -1e-3,
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
    ]
    t = torch.tensor(base, dtype=torch.float64).to(dtype)
    return torch.cat([t, t.flip(0), t[:19]])


@functools.lru_cache(maxsize=None)
def _random_values(dtype, n, seed):
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(n, generator=g, dtype=torch.float64) * 5
    v[torch.randint(0, n, (n // 50,), generator=g)] = 0.0
    v[torch.randint(0, n, (n // 50,), generator=g)] = -0.0
    v[torch.randint(0, n, (n // 100,), generator=g)] = float("nan")
    return v.to(dtype)


def random_values(dtype, n, seed=0):
    return _random_values(dtype, n, seed).clone()


def grid(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    n = math.prod(shape)
    v = torch.randint(-3, 4, (n,), generator=g).double() / 2
    v = torch.where(v == 0, torch.tensor(-0.0, dtype=torch.float64), v) if seed % 2 else v
    return v.view(shape).to(dtype)


def layouts(dtype):
    base = grid((2, 3, 4, 5), dtype, seed=1)
    return {
        "contiguous": grid((3, 7), dtype, seed=0),
        "transposed": grid((5, 4), dtype, seed=2).t(),
        "sliced": grid((4, 10), dtype, seed=3)[:, ::3],
        "channels_last": base.to(memory_format=torch.channels_last),
        "permuted": grid((3, 4, 5), dtype, seed=5).permute(2, 0, 1),
        "expanded": grid((1, 5), dtype, seed=6).expand(4, 5),
        "offset": grid((20,), dtype, seed=7)[3:17].view(2, 7),
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
    x = random_values(dtype, 70_001)
    assert_same(op(name)(x), REFS[name](x))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", OP_NAMES)
def test_literal_table(name, dtype):
    x = torch.tensor(TABLE_INPUT, dtype=dtype)
    expected = torch.tensor(TABLE_EXPECTED[name], dtype=dtype)
    assert_same(op(name)(x), expected)
    assert_same(REFS[name](x), expected)  # guards the table


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_signed_zero(dtype):
    x = torch.tensor([-0.0, 0.0], dtype=dtype)
    # binary sign: -0.0 >= 0, so +1 for both.
    assert torch.equal(OPS.binary_sign_ste(x), torch.tensor([1.0, 1.0], dtype=dtype))
    # ternary sign: sign(+-0) = +0 (no sign bit).
    t = OPS.ternary_sign_ste(x)
    assert torch.equal(t, torch.zeros(2, dtype=dtype)) and not torch.signbit(t).any()
    # |-0.0| = +0.0.
    a = OPS.abs_binary_sign_grad(x)
    assert torch.equal(a, torch.zeros(2, dtype=dtype)) and not torch.signbit(a).any()


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", OP_NAMES)
def test_nan_propagates(name, dtype):
    x = torch.tensor([float("nan"), -float("nan"), 1.5, -1.5, float("nan")], dtype=dtype)
    out = op(name)(x)
    assert torch.equal(torch.isnan(out), torch.tensor([True, True, False, False, True]))


def test_python_binary_sign_differs_on_nan():
    # The non-STE Python helper follows Brevitas (NaN -> -1); the op keeps NaN.
    x = torch.tensor([float("nan")])
    assert torch.equal(BF.binary_sign(x), torch.tensor([-1.0]))
    assert torch.isnan(OPS.binary_sign_ste(x)).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", OP_NAMES)
@pytest.mark.parametrize("shape", [(0,), (2, 0, 3)], ids=["0", "2x0x3"])
def test_empty(name, dtype, shape):
    x = torch.empty(shape, dtype=dtype, requires_grad=True)
    out = op(name)(x)
    assert out.shape == x.shape and out.dtype == dtype
    (gx,) = torch.autograd.grad(out, x, torch.empty(shape, dtype=dtype))
    assert gx.shape == x.shape and gx.dtype == dtype
    g = OPS._abs_binary_sign_grad_backward(torch.empty(shape, dtype=dtype), x.detach())
    assert g.shape == x.shape and g.dtype == dtype


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", OP_NAMES)
def test_zero_dim(name, dtype):
    for v in [-2.5, -0.0, 0.0, 0.5, float("nan")]:
        x = torch.tensor(v, dtype=dtype)
        out = op(name)(x)
        assert out.dim() == 0
        assert_same(out, REFS[name](x))
    x = torch.tensor(-0.0, dtype=dtype)
    g = torch.tensor(3.0, dtype=dtype)
    out = OPS._abs_binary_sign_grad_backward(g, x)
    assert out.dim() == 0 and out.item() == 3.0


# --- layouts -----------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUT_NAMES)
@pytest.mark.parametrize("name", OP_NAMES)
def test_layouts(name, layout):
    for dtype in (torch.float32, torch.float16):
        x = layouts(dtype)[layout]
        assert_layout_kept(op(name), x, REFS[name](x))


@pytest.mark.parametrize("layout", LAYOUT_NAMES)
def test_abs_backward_op_layouts(layout):
    # The gradient of x takes x's layout, whatever the layout of grad.
    x = layouts(torch.float32)[layout]
    for g in (torch.randn(x.shape), randn_reversed_layout(x)):
        out = OPS._abs_binary_sign_grad_backward(g, x)
        assert_same(out, ref_abs_backward(g, x))
        assert out.stride() == torch.empty_like(x).stride()
        xm = meta_like(x)
        om = OPS._abs_binary_sign_grad_backward(meta_like(g), xm)
        assert om.shape == x.shape and om.stride() == torch.empty_like(xm).stride()


# --- abs_binary_sign_grad backward ---------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_abs_backward_op_values(dtype):
    x = special_values(dtype)
    g = random_values(dtype, x.numel(), seed=5)
    assert_same(OPS._abs_binary_sign_grad_backward(g, x), ref_abs_backward(g, x))
    xl = random_values(dtype, 70_001, seed=1)
    gl = random_values(dtype, 70_001, seed=2)
    assert_same(OPS._abs_binary_sign_grad_backward(gl, xl), ref_abs_backward(gl, xl))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_abs_binary_sign_grad_autograd(dtype):
    x = special_values(dtype).requires_grad_()
    g = random_values(dtype, x.numel(), seed=7)
    (gx,) = torch.autograd.grad(OPS.abs_binary_sign_grad(x), x, g)
    assert_same(gx, ref_abs_backward(g, x.detach()))
    # +1 (not 0, not -1) at +0.0 and -0.0.
    z = torch.tensor([0.0, -0.0], dtype=dtype, requires_grad=True)
    (gz,) = torch.autograd.grad(BF.abs_binary_sign_grad(z).sum(), z)
    assert torch.equal(gz, torch.ones(2, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_abs_binary_sign_grad_matches_composition(dtype):
    # |x| written as x * binary_sign(x).detach() has the gradient grad * binary_sign(x).
    x0 = random_values(dtype, 1001, seed=9)
    x0 = x0[~torch.isnan(x0)]
    x = x0.clone().requires_grad_()
    g = random_values(dtype, x.numel(), seed=10)
    g = torch.where(torch.isnan(g), torch.ones_like(g), g)
    (gx,) = torch.autograd.grad(OPS.abs_binary_sign_grad(x), x, g)
    xr = x0.clone().requires_grad_()
    sign = torch.where(xr >= 0, torch.ones_like(xr), -torch.ones_like(xr))
    (gr,) = torch.autograd.grad(xr * sign.detach(), xr, g)
    assert_same(gx, gr)


def test_abs_binary_sign_grad_gradcheck():
    # Away from 0 |x| is smooth and the op's gradient is the true derivative.
    g = torch.Generator().manual_seed(0)
    x = torch.rand(3, 4, generator=g, dtype=torch.float64) + 0.1
    x = x * torch.where(torch.rand(3, 4, generator=g) < 0.5, -1.0, 1.0).double()
    torch.autograd.gradcheck(OPS.abs_binary_sign_grad, (x.requires_grad_(),))
    torch.autograd.gradcheck(BF.abs_binary_sign_grad, (x.t(),))


def test_abs_binary_sign_grad_is_not_twice_differentiable():
    x = torch.tensor([-1.5, -0.0, 0.5, 2.0], dtype=torch.float64, requires_grad=True)
    (gx,) = torch.autograd.grad(OPS.abs_binary_sign_grad(x).sum(), x, create_graph=True)
    assert torch.equal(gx.detach(), torch.tensor([-1.0, 1.0, 1.0, 1.0], dtype=torch.float64))
    # The backward op's Autograd kernel is autogradNotImplementedFallback: saying so, instead
    # of a silent zero second derivative.
    assert gx.requires_grad
    with pytest.raises(RuntimeError, match="_abs_binary_sign_grad_backward is not implemented"):
        gx.sum().backward()
    with pytest.raises(RuntimeError, match="not implemented"):
        torch.autograd.gradgradcheck(
            OPS.abs_binary_sign_grad, (x.detach().abs().add(0.5).requires_grad_(),)
        )
    # Calling the backward op directly on tensors that require grad: same.
    g = torch.ones(4, dtype=torch.float64, requires_grad=True)
    out = OPS._abs_binary_sign_grad_backward(g, x)
    with pytest.raises(RuntimeError, match="not implemented"):
        out.sum().backward()


def test_abs_binary_sign_grad_saved_x_version_check():
    # The node saves x: modifying x in place before backward is reported, not silently used.
    x = torch.tensor([-1.0, 0.5, 2.0], requires_grad=True).clone()
    y = OPS.abs_binary_sign_grad(x)
    x.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_abs_binary_sign_grad_retain_graph():
    x = torch.tensor([-1.0, -0.0, 2.0], requires_grad=True)
    y = OPS.abs_binary_sign_grad(x)
    y.sum().backward(retain_graph=True)
    y.sum().backward()
    assert torch.equal(x.grad, torch.tensor([-2.0, 2.0, 2.0]))


@pytest.mark.parametrize("name", OP_NAMES)
def test_no_graph_under_no_grad_and_inference_mode(name):
    x = torch.tensor([-1.5, 0.0, 2.5], requires_grad=True)
    with torch.no_grad():
        assert not op(name)(x).requires_grad
    with torch.inference_mode():
        out = op(name)(x)
        assert not out.requires_grad
        assert_same(out, REFS[name](x.detach()))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", STE_NAMES)
def test_ste_backward_is_identity(name, dtype):
    x = special_values(dtype).requires_grad_()
    g = random_values(dtype, x.numel(), seed=3)
    out = op(name)(x)
    (gx,) = torch.autograd.grad(out, x, g)
    assert_same(gx, g)
    xr = x.detach().clone().requires_grad_()
    (gr,) = torch.autograd.grad(xr + (REFS[name](xr) - xr).detach(), xr, g)
    assert_same(gx, gr)


@pytest.mark.parametrize("layout", ["transposed", "sliced", "channels_last", "expanded"])
@pytest.mark.parametrize("name", OP_NAMES)
def test_backward_non_contiguous(name, layout):
    x = layouts(torch.float32)[layout].detach().requires_grad_()
    g = randn_reversed_layout(x)
    out = op(name)(x)
    assert_same(out.detach(), REFS[name](x.detach()))
    out.backward(g)
    expected = ref_abs_backward(g, x.detach()) if name == "abs_binary_sign_grad" else g
    assert_same(x.grad, expected)


@pytest.mark.parametrize("name", STE_NAMES)
def test_ste_double_backward(name):
    x = torch.tensor([-1.5, -0.0, 0.5, 2.0], dtype=torch.float64, requires_grad=True)
    g = torch.tensor([1.0, -2.0, 3.0, 0.5], dtype=torch.float64, requires_grad=True)
    (gx,) = torch.autograd.grad(op(name)(x), x, g, create_graph=True)
    assert torch.equal(gx, g)
    w = torch.tensor([2.0, 3.0, 4.0, 5.0], dtype=torch.float64)
    (gg,) = torch.autograd.grad(gx, g, w)
    assert torch.equal(gg, w)
    (gx,) = torch.autograd.grad(
        op(name)(x), x, torch.ones(4, dtype=torch.float64), create_graph=True
    )
    assert not gx.requires_grad
    with pytest.raises(RuntimeError):
        torch.autograd.grad(gx.sum(), x)


# --- opcheck -----------------------------------------------------------------------------

OPCHECK_LAYOUTS = ["contiguous", "transposed", "sliced", "channels_last"]


@pytest.mark.parametrize("requires_grad", [False, True], ids=["nograd", "grad"])
@pytest.mark.parametrize("layout", OPCHECK_LAYOUTS)
@pytest.mark.parametrize("name", OP_NAMES)
def test_opcheck(name, layout, requires_grad):
    x = layouts(torch.float32)[layout].detach().requires_grad_(requires_grad)
    torch.library.opcheck(op(name), (x,))


@pytest.mark.parametrize("layout", OPCHECK_LAYOUTS)
def test_opcheck_abs_backward(layout):
    x = layouts(torch.float32)[layout]
    g = torch.randn(x.shape)
    torch.library.opcheck(OPS._abs_binary_sign_grad_backward, (g, x))
    torch.library.opcheck(
        OPS._abs_binary_sign_grad_backward, (g.t().contiguous().t() if g.dim() == 2 else g, x)
    )


@pytest.mark.parametrize("layout", OPCHECK_LAYOUTS)
def test_opcheck_abs_backward_requires_grad(layout):
    x = layouts(torch.float32)[layout].detach().requires_grad_()
    g = torch.randn(x.shape, requires_grad=True)
    # Everything but the AOT backward passes; the backward op is deliberately not
    # differentiable, which test_aot_dispatch_dynamic reports.
    torch.library.opcheck(OPS._abs_binary_sign_grad_backward, (g, x), test_utils=NO_AOT)
    with pytest.raises(Exception, match="_abs_binary_sign_grad_backward is not implemented"):
        torch.library.opcheck(
            OPS._abs_binary_sign_grad_backward, (g, x), test_utils="test_aot_dispatch_dynamic"
        )


def test_opcheck_other_dtypes():
    for name in OP_NAMES:
        for dtype in (torch.float64, torch.float16, torch.bfloat16):
            torch.library.opcheck(op(name), (grid((3, 5), dtype, seed=1),))
    torch.library.opcheck(
        OPS._abs_binary_sign_grad_backward,
        (torch.randn(3, 5, dtype=torch.bfloat16), grid((3, 5), torch.bfloat16, seed=1)),
    )


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


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_abs_backward_bad_inputs(device):
    x = torch.randn(2, 3, device=device)
    with pytest.raises(RuntimeError, match=r"_abs_binary_sign_grad_backward: x must be a floating"):
        OPS._abs_binary_sign_grad_backward(
            torch.ones(2, 3, device=device), torch.ones(2, 3, dtype=torch.int32, device=device)
        )
    with pytest.raises(
        RuntimeError, match=r"_abs_binary_sign_grad_backward: grad must have the dtype of x"
    ):
        OPS._abs_binary_sign_grad_backward(torch.ones(2, 3, dtype=torch.float64, device=device), x)
    with pytest.raises(
        RuntimeError,
        match=r"_abs_binary_sign_grad_backward: grad of shape \[3, 2\] must have the shape of x",
    ):
        OPS._abs_binary_sign_grad_backward(torch.ones(3, 2, device=device), x)
    with pytest.raises(
        RuntimeError,
        match=r"_abs_binary_sign_grad_backward: grad of shape .* must have the shape of x",
    ):
        OPS._abs_binary_sign_grad_backward(
            torch.ones(3, device=device), x
        )  # would broadcast: still rejected


def test_abs_backward_mixed_devices():
    with pytest.raises(RuntimeError):
        OPS._abs_binary_sign_grad_backward(torch.ones(2, 3, device="meta"), torch.randn(2, 3))


# --- TorchScript -------------------------------------------------------------------------


def _scripted_ops(x: torch.Tensor):
    a = torch.ops.brevitas_cpp.binary_sign_ste(x)
    b = torch.ops.brevitas_cpp.ternary_sign_ste(x)
    c = torch.ops.brevitas_cpp.abs_binary_sign_grad(x)
    return a, b, c


def _scripted_wrappers(x: torch.Tensor):
    a = BF.binary_sign_ste(x)
    b = BF.ternary_sign_ste(x)
    c = BF.abs_binary_sign_grad(x)
    return a, b, c


def _scripted_backward_op(g: torch.Tensor, x: torch.Tensor):
    return torch.ops.brevitas_cpp._abs_binary_sign_grad_backward(g, x)


@pytest.mark.parametrize("fn", [_scripted_ops, _scripted_wrappers], ids=["ops", "wrappers"])
def test_torchscript(fn):
    scripted = torch.jit.script(fn)
    for _ in range(3):
        x = torch.tensor([-2.5, -0.5, -0.0, 0.0, 0.5, 2.5, float("nan")], requires_grad=True)
        outs = scripted(x)
        for o, name in zip(outs, OP_NAMES):
            assert_same(o.detach(), REFS[name](x.detach()))
        (2.0 * outs[0].sum() + 3.0 * outs[1].sum() + 5.0 * outs[2].sum()).backward()
        expected = 5.0 + 5.0 * ref_binary_sign(x.detach())
        assert_same(x.grad, expected)


def test_torchscript_backward_op():
    scripted = torch.jit.script(_scripted_backward_op)
    x = special_values(torch.float32)
    g = random_values(torch.float32, x.numel(), seed=4)
    assert_same(scripted(g, x), ref_abs_backward(g, x))
