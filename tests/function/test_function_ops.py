"""brevitas_cpp.function helpers with Brevitas's formulas (max_int, min_int, tensor_clamp,
tensor_clamp_, binary_sign, round_to_zero, dpu_round, identity), and TorchScript for every
function of brevitas_cpp.function.

References are literal tables (Brevitas's documented numbers) or element-by-element Python
arithmetic, independent of the torch compositions under test."""

import math

import pytest
import torch
from helpers import DTYPE_IDS, DTYPES, assert_same

import brevitas_cpp.function as BF
from brevitas_cpp.function import (
    binary_sign,
    dpu_round,
    identity,
    max_int,
    min_int,
    round_to_zero,
    tensor_clamp,
    tensor_clamp_,
)

NAN = float("nan")
INF = float("inf")


# --- max_int / min_int ---------------------------------------------------------------------


def py_max_int(signed, narrow, b):
    if signed:
        return 2 ** (b - 1) - 1
    return 2**b - 2 if narrow else 2**b - 1


def py_min_int(signed, narrow, b):
    if not signed:
        return 0
    return -(2 ** (b - 1)) + 1 if narrow else -(2 ** (b - 1))


SN = [(True, True), (True, False), (False, True), (False, False)]
SN_IDS = ["signed-narrow", "signed", "unsigned-narrow", "unsigned"]


def flags(signed, narrow, kind):
    if kind == "bool":
        return signed, narrow
    if kind == "tensor":
        return torch.tensor(signed), torch.tensor(narrow)
    if kind == "int_tensor":
        return torch.tensor(int(signed)), torch.tensor(int(narrow))
    return signed, torch.tensor(narrow)  # mixed


@pytest.mark.parametrize("sn", SN, ids=SN_IDS)
def test_brevitas_documented_numbers(sn):
    documented_max = {
        (True, True): 127,
        (False, True): 254,
        (True, False): 127,
        (False, False): 255,
    }
    documented_min = {(True, True): -127, (False, True): 0, (True, False): -128, (False, False): 0}
    for kind in ["bool", "tensor"]:
        s, n = flags(*sn, kind)
        mx = max_int(s, n, torch.tensor(8))
        mn = min_int(s, n, torch.tensor(8))
        assert torch.equal(mx, torch.tensor(documented_max[sn])), (kind, mx)
        assert torch.equal(mn, torch.tensor(documented_min[sn])), (kind, mn)
        assert mx.dtype == torch.int64 and mx.dim() == 0


@pytest.mark.parametrize(
    "bw_dtype", [torch.int64, torch.int32, torch.float32, torch.float64], ids=str
)
@pytest.mark.parametrize("kind", ["bool", "tensor", "int_tensor", "mixed"])
@pytest.mark.parametrize("sn", SN, ids=SN_IDS)
def test_max_min_int_formulas(sn, kind, bw_dtype):
    bits = [1, 2, 3, 4, 5, 7, 8, 12, 16, 24, 30] + ([32] if bw_dtype != torch.int32 else [])
    s, n = flags(*sn, kind)
    for shape in [(), (1,)]:
        for b in bits:
            bw = torch.tensor(b, dtype=bw_dtype).reshape(shape)
            mx, mn = max_int(s, n, bw), min_int(s, n, bw)
            assert mx.dtype == bw_dtype and mn.dtype == bw_dtype
            assert mx.shape == bw.shape and mn.shape == bw.shape
            # The exact integer, rounded once to bit_width's dtype (float32 cannot hold 2^30 - 1).
            assert torch.equal(
                mx,
                torch.tensor(py_max_int(*sn, b), dtype=torch.float64).to(bw_dtype).reshape(shape),
            ), (b, mx)
            assert torch.equal(
                mn,
                torch.tensor(py_min_int(*sn, b), dtype=torch.float64).to(bw_dtype).reshape(shape),
            ), (b, mn)
    # Per-channel bit widths.
    bw = torch.tensor([2, 4, 8], dtype=bw_dtype)
    assert max_int(s, n, bw).tolist() == [py_max_int(*sn, b) for b in (2, 4, 8)]
    assert min_int(s, n, bw).tolist() == [py_min_int(*sn, b) for b in (2, 4, 8)]


@pytest.mark.parametrize("kind", ["bool", "tensor"])
@pytest.mark.parametrize("sn", SN, ids=SN_IDS)
def test_max_min_int_gradient(sn, kind):
    # d(2^e)/db = 2^e ln 2 with e = b or b - 1.
    signed, _ = sn
    s, n = flags(*sn, kind)
    for b in [2.0, 4.0, 8.0]:
        bw = torch.tensor(b, dtype=torch.float64, requires_grad=True)
        (gmax,) = torch.autograd.grad(max_int(s, n, bw), bw)
        e = b - 1 if signed else b
        torch.testing.assert_close(
            gmax, torch.tensor(2.0**e * math.log(2), dtype=torch.float64), rtol=1e-12, atol=0
        )
        mn = min_int(s, n, bw)
        if mn.requires_grad:
            (gmin,) = torch.autograd.grad(mn, bw)
        else:
            gmin = torch.tensor(0.0, dtype=torch.float64)
        expected = -(2.0 ** (b - 1)) * math.log(2) if signed else 0.0
        torch.testing.assert_close(
            gmin, torch.tensor(expected, dtype=torch.float64), rtol=1e-12, atol=0
        )


def test_max_min_int_gradcheck():
    bw = torch.tensor([3.0, 5.5], dtype=torch.float64, requires_grad=True)
    for sn in SN:
        for kind in ["bool", "tensor"]:
            s, n = flags(*sn, kind)
            torch.autograd.gradcheck(lambda b: max_int(s, n, b), (bw,))
            if sn[0]:
                torch.autograd.gradcheck(lambda b: min_int(s, n, b), (bw,))


# --- tensor_clamp / tensor_clamp_ ---------------------------------------------------------


def py_clamp(x, lo, hi):
    """Element by element, Brevitas's tensor_clamp: first > max, then < min."""
    xb, lob, hib = torch.broadcast_tensors(
        x.double(), lo.double().to(x.dtype).double(), hi.double().to(x.dtype).double()
    )
    out = []
    for v, lo, hi in zip(xb.flatten().tolist(), lob.flatten().tolist(), hib.flatten().tolist()):
        if v > hi:
            v = hi
        if v < lo:
            v = lo
        out.append(v)
    return torch.tensor(out, dtype=torch.float64).view(xb.shape).to(x.dtype)


def clamp_case(dtype, seed=0, xshape=(2, 3, 4), bshape=(3, 1)):
    g = torch.Generator().manual_seed(seed)
    n = math.prod(xshape)
    x = torch.randint(-8, 9, (n,), generator=g).double() / 4
    x[0], x[1], x[2] = NAN, -0.0, INF
    x = x[torch.randperm(n, generator=g)].view(xshape).to(dtype)
    lo = -(torch.randint(1, 5, bshape, generator=g).double() / 4).to(dtype)
    hi = (torch.randint(1, 5, bshape, generator=g).double() / 4).to(dtype)
    return x, lo, hi


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("bshape", [(), (1,), (4,), (3, 1), (1, 3, 1), (2, 3, 4)], ids=str)
def test_tensor_clamp_values(bshape, dtype):
    x, lo, hi = clamp_case(dtype, seed=1, bshape=bshape)
    out = tensor_clamp(x, lo, hi)
    assert_same(out, py_clamp(x, lo, hi))


def test_tensor_clamp_literal():
    x = torch.tensor([1.7, -0.5, 0.1])
    assert_same(
        tensor_clamp(x, torch.tensor(0.0), torch.tensor(1.0)), torch.tensor([1.0, 0.0, 0.1])
    )
    # min > max: min wins; NaN bounds compare false and let x through; NaN x stays NaN.
    x = torch.tensor([-2.0, 0.0, 2.0, NAN])
    assert_same(
        tensor_clamp(x, torch.tensor(1.0), torch.tensor(-1.0)), torch.tensor([1.0, 1.0, 1.0, NAN])
    )
    assert_same(tensor_clamp(x, torch.tensor(NAN), torch.tensor(NAN)), x)


@pytest.mark.parametrize(
    "bound_dtype", [torch.int32, torch.int64, torch.float64, torch.float16], ids=str
)
def test_tensor_clamp_bound_dtypes(bound_dtype):
    x = torch.tensor([[-3.0, -0.7, 0.7, 3.0]] * 3)
    lo = torch.tensor([[-1.0], [-2.0], [0.0]]).to(bound_dtype)
    hi = torch.tensor([[1.0], [2.0], [0.0]]).to(bound_dtype)
    out = tensor_clamp(x, lo, hi)
    assert out.dtype == torch.float32
    assert_same(out, py_clamp(x, lo, hi))


@pytest.mark.parametrize("bshape", [(), (3, 1), (1, 3, 1), (4,)], ids=str)
def test_tensor_clamp_gradients(bshape):
    x, lo, hi = clamp_case(torch.float64, seed=2, bshape=bshape)
    x = torch.nan_to_num(x, 0.3, 5.0, -5.0).requires_grad_()
    lo.requires_grad_()
    hi.requires_grad_()
    g = torch.randn(x.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    gx, glo, ghi = torch.autograd.grad(tensor_clamp(x, lo, hi), (x, lo, hi), g)
    # Closed form: the first where routes x > max to max, the second out < min to min.
    xd, lod, hid = torch.broadcast_tensors(x.detach(), lo.detach(), hi.detach())
    above = xd > hid
    out1 = torch.where(above, hid, xd)
    below = out1 < lod
    ex_gx = g * (~above & ~below)
    ex_ghi = (g * (above & ~below)).sum_to_size(hi.shape)
    ex_glo = (g * below).sum_to_size(lo.shape)
    torch.testing.assert_close(gx, ex_gx, rtol=0, atol=0)
    torch.testing.assert_close(ghi, ex_ghi, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(glo, ex_glo, rtol=1e-12, atol=1e-12)


def test_tensor_clamp_gradcheck():
    # Away from the clamp edges the function is piecewise linear in x and both bounds.
    x = torch.tensor(
        [[-2.0, -0.3, 0.4, 2.0], [-0.9, 0.1, 0.2, 1.7], [3.0, -3.0, 0.05, -0.05]],
        dtype=torch.float64,
    )
    lo = torch.tensor([[-1.0], [-0.5], [-0.25]], dtype=torch.float64)
    hi = torch.tensor([[1.0], [0.5], [0.25]], dtype=torch.float64)
    torch.autograd.gradcheck(
        tensor_clamp, (x.requires_grad_(), lo.requires_grad_(), hi.requires_grad_())
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("bshape", [(), (3, 1), (1, 3, 1), (4,)], ids=str)
def test_tensor_clamp_inplace(bshape, dtype):
    x, lo, hi = clamp_case(dtype, seed=4, bshape=bshape)
    expected = py_clamp(x, lo, hi)
    ptr = x.data_ptr()
    out = tensor_clamp_(x, lo, hi)
    assert out is x and x.data_ptr() == ptr
    assert_same(x, expected)


def test_tensor_clamp_inplace_min_greater_than_max_and_nan():
    x = torch.tensor([-2.0, 0.0, 2.0, NAN])
    tensor_clamp_(x, torch.tensor(1.0), torch.tensor(-1.0))
    assert_same(x, torch.tensor([1.0, 1.0, 1.0, NAN]))


def test_tensor_clamp_inplace_non_contiguous():
    base = torch.tensor([[-3.0, -0.5], [0.5, 3.0], [9.0, 9.0]])
    view = base[:2].t()
    tensor_clamp_(view, torch.tensor(-1.0), torch.tensor(1.0))
    assert_same(base, torch.tensor([[-1.0, -0.5], [0.5, 1.0], [9.0, 9.0]]))


# --- binary_sign / round_to_zero / dpu_round / identity -------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_binary_sign(dtype):
    x = torch.tensor([2.1, -0.3, 0.0, -0.0, NAN, INF, -INF, 1e-3, -1e-3], dtype=dtype)
    expected = torch.tensor([1.0, -1.0, 1.0, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0], dtype=dtype)
    assert_same(binary_sign(x), expected)  # NaN -> -1, as Brevitas


def py_round_to_zero(v):
    if math.isnan(v) or math.isinf(v):
        return v
    r = float(math.trunc(v))
    if r == 0.0:  # sign(x) * floor(|x|): -0.0 for negative x, +0.0 for +-0
        return -0.0 if v < 0 else 0.0
    return r


def py_dpu_round(v):
    if math.isnan(v) or math.isinf(v):
        return v
    if v < 0 and v - math.floor(v) == 0.5:
        r = float(math.ceil(v))
    else:
        r = float(round(v))  # Python's round is half to even
    return math.copysign(0.0, v) if r == 0.0 else r


ROUND_INPUT = [
    -3.5,
    -2.5,
    -1.5,
    -0.5,
    -0.0,
    0.0,
    0.5,
    1.5,
    2.5,
    3.5,
    -0.75,
    -0.25,
    0.25,
    0.75,
    -1.25,
    1.25,
    -7.0,
    7.0,
    NAN,
    INF,
    -INF,
    100.5,
    -100.5,
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_round_to_zero(dtype):
    x = torch.tensor(ROUND_INPUT, dtype=dtype)
    expected = torch.tensor([py_round_to_zero(v) for v in x.double().tolist()], dtype=dtype)
    assert_same(round_to_zero(x), expected)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_dpu_round(dtype):
    x = torch.tensor(ROUND_INPUT, dtype=dtype)
    expected = torch.tensor([py_dpu_round(v) for v in x.double().tolist()], dtype=dtype)
    assert_same(dpu_round(x), expected)


def test_brevitas_documented_rounding():
    x = torch.tensor([-1.5, -0.5, 0.5, 1.5])
    assert_same(dpu_round(x), torch.tensor([-1.0, -0.0, 0.0, 2.0]))
    assert_same(round_to_zero(x), torch.tensor([-1.0, -0.0, 0.0, 1.0]))
    assert_same(binary_sign(torch.tensor([2.1, -0.3, 0.0])), torch.tensor([1.0, -1.0, 1.0]))


def test_identity():
    x = torch.tensor([1.7, -0.0, NAN], requires_grad=True)
    assert identity(x) is x
    y = identity(x)
    (g,) = torch.autograd.grad(y, x, torch.tensor([1.0, 2.0, 3.0]))
    assert torch.equal(g, torch.tensor([1.0, 2.0, 3.0]))


# --- TorchScript: every function of brevitas_cpp.function ----------------------------------


def _fn_ops_helpers(
    x: torch.Tensor,
    lo: torch.Tensor,
    hi: torch.Tensor,
    bw: torch.Tensor,
    s: torch.Tensor,
    n: torch.Tensor,
):
    a = (
        BF.max_int(True, False, bw)
        + BF.max_int(False, True, bw)
        + BF.max_int(s, n, bw)
        + BF.max_int(True, n, bw)
    )
    b = (
        BF.min_int(True, True, bw)
        + BF.min_int(False, False, bw)
        + BF.min_int(s, n, bw)
        + BF.min_int(s, False, bw)
    )
    c = BF.tensor_clamp(x, lo, hi)
    d = BF.tensor_clamp_(x.detach().clone(), lo.detach(), hi.detach())
    e = BF.binary_sign(x)
    f = BF.round_to_zero(x)
    g = BF.dpu_round(x)
    h = BF.identity(x)
    return [a, b, c, d, e, f, g, h]


def _fn_ste(
    x: torch.Tensor,
    lo: torch.Tensor,
    hi: torch.Tensor,
    bw: torch.Tensor,
    s: torch.Tensor,
    n: torch.Tensor,
):
    return [
        BF.round_ste(x),
        BF.ceil_ste(x),
        BF.floor_ste(x),
        BF.round_to_zero_ste(x),
        BF.dpu_round_ste(x),
        BF.tensor_clamp_ste(x, lo, hi),
        BF.scalar_clamp_ste(x, -0.5, 0.5),
        BF.scalar_clamp_min_ste(x, 0.25),
        BF.binary_sign_ste(x),
        BF.ternary_sign_ste(x),
        BF.abs_binary_sign_grad(x),
    ]


def _fn_quant(
    x: torch.Tensor,
    lo: torch.Tensor,
    hi: torch.Tensor,
    bw: torch.Tensor,
    s: torch.Tensor,
    n: torch.Tensor,
):
    scale = hi.abs() + 0.1
    zp = torch.zeros_like(scale)
    return [
        BF.int_quant(x, scale, zp, bw, True, False),
        BF.int_quant(x, scale, zp, bw, False, True, "floor", True),
        BF.int_quant(x, scale, zp, bw, True, True, "dpu"),
        BF.binary_quant(x, scale),
        BF.clamped_binary_quant(x, scale),
        BF.ternary_quant(x, scale, 0.5),
    ]


def _inputs():
    g = torch.Generator().manual_seed(5)
    x = (torch.randn(2, 3, 4, generator=g, dtype=torch.float64) * 2).requires_grad_()
    lo = (-torch.rand(3, 1, generator=g, dtype=torch.float64) - 0.2).requires_grad_()
    hi = (torch.rand(3, 1, generator=g, dtype=torch.float64) + 0.2).requires_grad_()
    bw = torch.tensor(3.0, dtype=torch.float64, requires_grad=True)
    return x, lo, hi, bw, torch.tensor(True), torch.tensor(False)


@pytest.mark.parametrize(
    "fn", [_fn_ops_helpers, _fn_ste, _fn_quant], ids=["ops", "ops_ste", "quant"]
)
def test_torchscript_matches_eager(fn):
    scripted = torch.jit.script(fn)
    for _ in range(3):  # the profiling executor specialises after the first runs
        grads = []
        outs = []
        for f in (fn, scripted):
            args = _inputs()
            o = f(*args)
            outs.append([t.detach() for t in o])
            diff = [a for a in args[:4]]
            total = sum(((i + 1) * t.double()).sum() for i, t in enumerate(o) if t.requires_grad)
            grads.append(torch.autograd.grad(total, diff, allow_unused=True))
        for a, b in zip(*outs):
            assert_same(a, b)
        for a, b in zip(*grads):
            assert (a is None) == (b is None)
            if a is not None:
                torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    # The scripted graph really calls the C++ ops (not a Python fallback).
    if fn is not _fn_ops_helpers:
        assert "brevitas_cpp::" in str(scripted.graph) or "brevitas_cpp" in str(
            scripted.inlined_graph
        )


def test_torchscript_max_min_int_flags():
    @torch.jit.script
    def f(signed: bool, narrow: bool, bw: torch.Tensor):
        return BF.max_int(signed, narrow, bw), BF.min_int(signed, narrow, bw)

    @torch.jit.script
    def ft(signed: torch.Tensor, narrow: torch.Tensor, bw: torch.Tensor):
        return BF.max_int(signed, narrow, bw), BF.min_int(signed, narrow, bw)

    for sn in SN:
        mx, mn = f(sn[0], sn[1], torch.tensor(8))
        assert (mx.item(), mn.item()) == (py_max_int(*sn, 8), py_min_int(*sn, 8))
        mx, mn = ft(torch.tensor(sn[0]), torch.tensor(sn[1]), torch.tensor(8))
        assert (mx.item(), mn.item()) == (py_max_int(*sn, 8), py_min_int(*sn, 8))
