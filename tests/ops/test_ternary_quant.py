"""ternary_quant (and _ternary_quant_backward) against Brevitas's TernaryQuant composition:

    mask = x.abs() > threshold * s;  y = (mask.to(x.dtype) * ternary_sign_ste(x)) * s

ternary_sign = torch.sign (sign(+-0) = 0), straight-through in backward; the mask is not
differentiated. torch.sign(NaN) is 0 on CPU, but the contract makes NaN x give NaN y for every
op, so the reference sign keeps NaN.
"""

import pytest
import torch
from helpers import (
    DTYPES,
    MASKS2,
    SCALE_SHAPES,
    assert_bitwise,
    backward_op_utils,
    grads,
    param_shape,
    quant_layouts,
    quant_opcheck_inputs,
    rand,
    rand_pos,
    ref_sign_ste,
    ref_ternary_sign,
)

import brevitas_cpp  # noqa: F401  (registers the ops)
from brevitas_cpp.function import ternary_quant

OPS = torch.ops.brevitas_cpp
THRESHOLDS = [0.0, 0.5, 0.3, 1.0, 2.0]


def ref_ternary_quant(x, s, threshold):
    mask = x.abs() > threshold * s
    y = mask.to(x.dtype) * ref_sign_ste(ref_ternary_sign, x)
    return y * s


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", list(SCALE_SHAPES))
def test_forward_bitwise(dtype, case):
    xs, ss = SCALE_SHAPES[case]
    x, s = rand(xs, dtype), rand_pos(ss, dtype)
    for t in THRESHOLDS:
        assert_bitwise(ternary_quant(x, s, t), ref_ternary_quant(x, s, t))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_forward_threshold_ties_and_specials(dtype):
    s = torch.tensor(1.0, dtype=dtype)
    x = torch.tensor(
        [0.5, -0.5, 0.5000001, 0.75, -0.75, 0.0, -0.0, 0.25, float("inf"), float("-inf"), 1e4],
        dtype=dtype,
    )
    y = ternary_quant(x, s, 0.5)
    assert_bitwise(y, ref_ternary_quant(x, s, 0.5))
    assert y[0] == 0 and y[1] == 0  # |x| == threshold * s: strictly greater is needed
    assert y[3] == 1 and y[4] == -1 and y[5] == 0 and y[6] == 0 and y[8] == 1 and y[9] == -1
    y0 = ternary_quant(x, s, 0.0)
    assert_bitwise(y0, ref_ternary_quant(x, s, 0.0))
    assert y0[5] == 0 and y0[0] == 1
    # A scaled threshold that is inexact in the dtype: x right at threshold * s as the dtype rounds it.
    s2 = torch.tensor(0.7, dtype=dtype)
    edge = (0.3 * s2).reshape(1)
    xe = torch.cat([edge, -edge, torch.nextafter(edge.float(), torch.tensor(1.0)).to(dtype)])
    assert_bitwise(ternary_quant(xe, s2, 0.3), ref_ternary_quant(xe, s2, 0.3))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_nan_propagates(dtype):
    x = torch.tensor([float("nan"), 1.0, -1.0, 0.01, float("nan")], dtype=dtype)
    y = ternary_quant(x, torch.tensor(0.5, dtype=dtype), 0.5)
    assert torch.isnan(y[[0, 4]]).all() and not torch.isnan(y[[1, 2, 3]]).any()
    assert_bitwise(y, ref_ternary_quant(x, torch.tensor(0.5, dtype=dtype), 0.5))


def test_empty():
    x = torch.empty(3, 0, 2, requires_grad=True)
    s = torch.full((3, 1, 1), 0.5, requires_grad=True)
    y = ternary_quant(x, s, 0.5)
    assert y.shape == x.shape
    y.sum().backward()
    assert torch.equal(s.grad, torch.zeros(3, 1, 1))


@pytest.mark.parametrize("layout", list(quant_layouts()))
@pytest.mark.parametrize("param_dim", [None, 0, 1, 3])
def test_layouts(layout, param_dim):
    x = quant_layouts()[layout]
    s = rand_pos(param_shape(x, param_dim))
    y = ternary_quant(x, s, 0.5)
    assert_bitwise(y, ref_ternary_quant(x, s, 0.5))
    assert y.stride() == torch.empty_like(x).stride()


# ---- gradients -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("case", list(SCALE_SHAPES))
def test_gradients_vs_composition(dtype, case):
    xs, ss = SCALE_SHAPES[case]
    x, s, g = rand(xs, dtype), rand_pos(ss, dtype), rand(xs, dtype, seed=3)
    tol = dict(rtol=1e-10, atol=1e-10) if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-5)
    for t in THRESHOLDS:
        for which in [(True, True), (True, False), (False, True)]:
            y, (gx, gs) = grads(lambda a, b: ternary_quant(a, b, t), (x, s), g, which)
            yr, (rx, rs) = grads(lambda a, b: ref_ternary_quant(a, b, t), (x, s), g, which)
            assert_bitwise(y, yr, signed_zero=False)  # the STE reference adds +0
            if which[0]:
                assert torch.equal(gx, rx)
            else:
                assert gx is None
            if which[1]:
                assert gs.shape == s.shape
                torch.testing.assert_close(gs, rs, **tol)
            else:
                assert gs is None


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_gradients_reduced_precision(dtype):
    x, s, g = (
        rand((2, 4, 3, 3), dtype),
        rand_pos((1, 4, 1, 1), dtype),
        rand((2, 4, 3, 3), dtype, seed=3),
    )
    y, (gx, gs) = grads(lambda a, b: ternary_quant(a, b, 0.5), (x, s), g, (True, True))
    yr, (rx, rs) = grads(lambda a, b: ref_ternary_quant(a, b, 0.5), (x, s), g, (True, True))
    assert_bitwise(y, yr, signed_zero=False)  # the STE reference adds +0
    assert torch.equal(gx, rx)
    torch.testing.assert_close(gs, rs, rtol=2e-2, atol=5e-2)


def test_non_contiguous_gradients():
    base = rand((4, 6, 5))
    g = rand((5, 6, 4), seed=7).permute(2, 1, 0)
    for x in [base.transpose(0, 2).contiguous().transpose(0, 2), base]:
        s = rand_pos((1, 6, 1))
        y, (gx, gs) = grads(lambda a, b: ternary_quant(a, b, 0.4), (x, s), g, (True, True))
        yr, (rx, rs) = grads(lambda a, b: ref_ternary_quant(a, b, 0.4), (x, s), g, (True, True))
        assert_bitwise(y, yr, signed_zero=False)  # the STE reference adds +0
        assert torch.equal(gx, rx)
        torch.testing.assert_close(gs, rs, rtol=1e-5, atol=1e-5)


def test_gradcheck_in_scale_away_from_threshold():
    g = torch.Generator().manual_seed(0)
    s0 = torch.full((4, 1), 0.5, dtype=torch.float64)
    # |x| / s in {0.1..0.3} (zeroed) or {0.7..2} (kept): far from the threshold 0.5.
    r = torch.rand(4, 6, generator=g, dtype=torch.float64)
    mag = torch.where(r > 0.5, 0.7 + r, 0.1 + 0.2 * r)
    x = mag * s0 * torch.where(torch.rand(4, 6, generator=g) > 0.5, 1.0, -1.0).double()
    s = s0.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda s_: ternary_quant(x, s_, 0.5), (s,))


@pytest.mark.parametrize("output_mask", MASKS2, ids=str)
def test_backward_op(output_mask):
    x, s, g = (
        rand((3, 4, 5), torch.float64),
        rand_pos((1, 4, 1), torch.float64),
        rand((3, 4, 5), torch.float64, seed=4),
    )
    _, (rx, rs) = grads(lambda a, b: ref_ternary_quant(a, b, 0.5), (x, s), g, (True, True))
    gx, gs = OPS._ternary_quant_backward(g, x, s, 0.5, output_mask)
    if output_mask[0]:
        assert torch.equal(gx, rx)
    else:
        assert gx is None
    if output_mask[1]:
        torch.testing.assert_close(gs, rs, rtol=1e-10, atol=1e-10)
    else:
        assert gs is None


def test_backward_op_not_differentiable():
    x = rand((3, 4))
    g = rand((3, 4), seed=2).requires_grad_()
    gx, _ = OPS._ternary_quant_backward(g, x, rand_pos(()), 0.5, [True, False])
    with pytest.raises(RuntimeError, match="not implemented"):
        gx.sum().backward()


# ---- opcheck ---------------------------------------------------------------------------------


@pytest.mark.parametrize("noncontig", [False, True])
@pytest.mark.parametrize("requires_grad", [False, True])
def test_opcheck_forward(noncontig, requires_grad):
    x, s = quant_opcheck_inputs(noncontig, requires_grad)
    torch.library.opcheck(OPS.ternary_quant, (x, s, 0.5))
    torch.library.opcheck(OPS.ternary_quant, (x, s, 0.0))


@pytest.mark.parametrize("noncontig", [False, True])
@pytest.mark.parametrize("requires_grad", [False, True])
def test_opcheck_backward(noncontig, requires_grad):
    x, s = quant_opcheck_inputs(noncontig, False)
    g = rand(x.shape, seed=5)
    if noncontig:
        g = rand((x.shape[2], x.shape[1], x.shape[0]), seed=5).permute(2, 1, 0)
    if requires_grad:
        g = g.clone().requires_grad_()
    # Deliberately not differentiable: without test_aot_dispatch_dynamic when inputs require grad.
    utils = backward_op_utils(requires_grad)
    for m in [[True, False], [False, True], [True, True]]:
        torch.library.opcheck(OPS._ternary_quant_backward, (g, x, s, 0.5, m), test_utils=utils)


# ---- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "threshold,text",
    [(-0.5, "-0.5"), (float("inf"), "inf"), (float("nan"), "nan"), (-float("inf"), "-inf")],
)
def test_bad_threshold(threshold, text):
    x, s = rand((2, 5)), torch.tensor(0.5)
    with pytest.raises(
        RuntimeError, match=rf"ternary_quant: threshold must be finite and >= 0.*got {text}\b"
    ):
        ternary_quant(x, s, threshold)
    with pytest.raises(
        RuntimeError, match=r"_ternary_quant_backward: threshold must be finite and >= 0"
    ):
        OPS._ternary_quant_backward(x, x, s, threshold, [True, True])


def test_bad_scale_and_x():
    x = rand((2, 5))
    with pytest.raises(RuntimeError, match=r"ternary_quant: x must be a floating-point"):
        ternary_quant(torch.ones(2, 5, dtype=torch.int64), torch.tensor(1), 0.5)
    with pytest.raises(RuntimeError, match=r"ternary_quant: scale must have the dtype of x"):
        ternary_quant(x, torch.tensor(0.5, dtype=torch.bfloat16), 0.5)
    with pytest.raises(
        RuntimeError, match=r"scale of shape \[3\] does not broadcast to x of shape \[2, 5\]"
    ):
        ternary_quant(x, torch.ones(3), 0.5)
    with pytest.raises(RuntimeError, match=r"scale of shape \[3, 2, 5\] does not broadcast"):
        ternary_quant(x, torch.ones(3, 2, 5), 0.5)
    for v, text in [(0.0, "0"), (-2.0, "-2"), (float("inf"), "inf"), (float("nan"), "nan")]:
        with pytest.raises(
            RuntimeError, match=rf"ternary_quant: scale must be positive and finite, got {text}\b"
        ):
            ternary_quant(x, torch.tensor(v), 0.5)
        with pytest.raises(RuntimeError, match=rf"scale must be positive and finite, got {text}\b"):
            ternary_quant(x, torch.tensor([[1.0], [v]]), 0.5)
    with pytest.raises(RuntimeError):
        ternary_quant(x, torch.tensor(0.5, device="meta"), 0.5)


@pytest.mark.parametrize(
    "xs,ss", [((3, 40001), (3, 1)), ((4, 20003), (1, 20003)), ((64, 40, 33), (64, 40, 1))]
)
def test_large_tensors(xs, ss):
    """Several parallel chunks, runs of one scale split across chunks."""
    x, s, g = rand(xs, torch.float64), rand_pos(ss, torch.float64), rand(xs, torch.float64, seed=3)
    y, (gx, gs) = grads(lambda a, b: ternary_quant(a, b, 0.5), (x, s), g, (True, True))
    yr, (rx, rs) = grads(lambda a, b: ref_ternary_quant(a, b, 0.5), (x, s), g, (True, True))
    assert_bitwise(y, yr, signed_zero=False)  # the STE reference adds +0
    assert torch.equal(gx, rx)
    torch.testing.assert_close(gs, rs, rtol=1e-9, atol=1e-8)


def test_expanded_scale_forward():
    x = rand((4, 6))
    s = torch.tensor(0.5).expand(1, 6)
    assert_bitwise(ternary_quant(x, s, 0.5), ref_ternary_quant(x, s, 0.5))


def test_expanded_scale_gradient():
    x = rand((4, 6), torch.float64)
    base = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    ref_base = base.detach().clone().requires_grad_()
    ternary_quant(x, base.expand(1, 6), 0.5).sum().backward()
    ref_ternary_quant(x, ref_base.expand(1, 6), 0.5).sum().backward()
    torch.testing.assert_close(base.grad, ref_base.grad, rtol=1e-10, atol=1e-10)


def test_meta_shape_and_strides():
    x = torch.empty(2, 4, 3, 3, device="meta").permute(0, 2, 3, 1)
    y = OPS.ternary_quant(x, torch.empty(1, 1, 1, 4, device="meta"), 0.5)
    assert (
        y.device.type == "meta"
        and y.shape == x.shape
        and y.stride() == torch.empty_like(x).stride()
    )
