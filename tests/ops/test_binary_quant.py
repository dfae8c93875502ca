"""binary_quant and clamped_binary_quant (and their _backward ops) against the Brevitas
compositions written out here:

    binary_quant:          y = binary_sign(x) * s
    clamped_binary_quant:  c = tensor_clamp(x, -s, s);  y = binary_sign_ste(c) * s

binary_sign(x) = +1 for x >= 0 (also -0.0), -1 for x < 0; NaN x gives NaN (contract).
In backward the sign is straight-through (its value is detached, its gradient is identity).
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
    ref_binary_sign,
    ref_sign_ste,
    ref_tensor_clamp,
)

import brevitas_cpp  # noqa: F401  (registers the ops)
from brevitas_cpp.function import binary_quant, clamped_binary_quant

OPS = torch.ops.brevitas_cpp


# ---- reference compositions ----------------------------------------------------------------


def ref_binary_quant(x, s):
    return ref_sign_ste(ref_binary_sign, x) * s


def ref_clamped_binary_quant(x, s):
    c = ref_tensor_clamp(x, -s, s)
    return ref_sign_ste(ref_binary_sign, c) * s


OPS_AND_REFS = {
    "binary": (binary_quant, ref_binary_quant, "binary_quant"),
    "clamped": (clamped_binary_quant, ref_clamped_binary_quant, "clamped_binary_quant"),
}


# ---- forward ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(OPS_AND_REFS))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", list(SCALE_SHAPES))
def test_forward_bitwise(kind, dtype, case):
    op, ref, _ = OPS_AND_REFS[kind]
    xs, ss = SCALE_SHAPES[case]
    x = rand(xs, dtype)
    s = rand_pos(ss, dtype)
    assert_bitwise(op(x, s), ref(x, s))


@pytest.mark.parametrize("kind", list(OPS_AND_REFS))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_forward_special_values(kind, dtype):
    op, ref, _ = OPS_AND_REFS[kind]
    s = torch.tensor(0.75, dtype=dtype)
    x = torch.tensor(
        [
            0.0,
            -0.0,
            0.75,
            -0.75,
            0.7,
            -0.7,
            3.0,
            -3.0,
            1e-5,
            -1e-5,
            float("inf"),
            float("-inf"),
            6e4,
            -6e4,
        ],
        dtype=dtype,
    )
    y = op(x, s)
    assert_bitwise(y, ref(x, s))
    want = torch.tensor([1, 1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1], dtype=dtype) * s
    assert torch.equal(y, want)


@pytest.mark.parametrize("kind", list(OPS_AND_REFS))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_nan_propagates(kind, dtype):
    op, ref, _ = OPS_AND_REFS[kind]
    x = torch.tensor([float("nan"), 1.0, -1.0, float("nan"), 0.0], dtype=dtype)
    y = op(x, torch.tensor(0.5, dtype=dtype))
    assert torch.isnan(y[[0, 3]]).all() and not torch.isnan(y[[1, 2, 4]]).any()
    assert_bitwise(y, ref(x, torch.tensor(0.5, dtype=dtype)))


def test_python_binary_sign_helper_follows_brevitas_on_nan():
    """The non-STE Python helper keeps Brevitas's formula: NaN -> -1 (unlike the ops)."""
    from brevitas_cpp.function import binary_sign

    x = torch.tensor([float("nan"), -0.0, 2.0, -2.0])
    assert torch.equal(binary_sign(x), torch.tensor([-1.0, 1.0, 1.0, -1.0]))


@pytest.mark.parametrize("kind", list(OPS_AND_REFS))
def test_empty(kind):
    op, _, _ = OPS_AND_REFS[kind]
    x = torch.empty(3, 0, 2, requires_grad=True)
    s = torch.full((3, 1, 1), 0.5, requires_grad=True)
    y = op(x, s)
    assert y.shape == x.shape
    y.sum().backward()
    assert torch.equal(s.grad, torch.zeros(3, 1, 1))
    assert x.grad.shape == x.shape


@pytest.mark.parametrize("kind", list(OPS_AND_REFS))
@pytest.mark.parametrize("layout", list(quant_layouts()))
@pytest.mark.parametrize("param_dim", [None, 0, 1, 3])
def test_layouts(kind, layout, param_dim):
    op, ref, _ = OPS_AND_REFS[kind]
    x = quant_layouts()[layout]
    s = rand_pos(param_shape(x, param_dim))
    y = op(x, s)
    assert_bitwise(y, ref(x, s))
    assert y.stride() == torch.empty_like(x).stride()


# ---- gradients -----------------------------------------------------------------------------


def _tols(dtype):
    return dict(rtol=1e-10, atol=1e-10) if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", list(OPS_AND_REFS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("case", list(SCALE_SHAPES))
def test_gradients_vs_composition(kind, dtype, case):
    op, ref, _ = OPS_AND_REFS[kind]
    xs, ss = SCALE_SHAPES[case]
    x, s, g = rand(xs, dtype), rand_pos(ss, dtype), rand(xs, dtype, seed=3)
    for which in [(True, True), (True, False), (False, True)]:
        y, (gx, gs) = grads(op, (x, s), g, which)
        yr, (rx, rs) = grads(ref, (x, s), g, which)
        assert_bitwise(y, yr, signed_zero=False)  # the STE reference adds +0
        if which[0]:
            assert torch.equal(gx, rx)
        else:
            assert gx is None
        if which[1]:
            assert gs.shape == s.shape
            torch.testing.assert_close(gs, rs, **_tols(dtype))
        else:
            assert gs is None


@pytest.mark.parametrize("kind", list(OPS_AND_REFS))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_gradients_reduced_precision(kind, dtype):
    op, ref, _ = OPS_AND_REFS[kind]
    x, s, g = (
        rand((2, 4, 3, 3), dtype),
        rand_pos((1, 4, 1, 1), dtype),
        rand((2, 4, 3, 3), dtype, seed=3),
    )
    y, (gx, gs) = grads(op, (x, s), g, (True, True))
    yr, (rx, rs) = grads(ref, (x, s), g, (True, True))
    assert_bitwise(y, yr, signed_zero=False)  # the STE reference adds +0
    assert torch.equal(gx, rx)
    torch.testing.assert_close(gs, rs, rtol=2e-2, atol=5e-2)


def test_clamped_gradient_pins_clamp_terms():
    """clamped_binary_quant: x's gradient is masked where |x| > s; the bounds +-s collect g*s."""
    x = torch.tensor([2.0, -2.0, 0.25, -0.25], requires_grad=True)
    s = torch.tensor(0.5, requires_grad=True)
    g = torch.tensor([1.0, 2.0, 3.0, 4.0])
    clamped_binary_quant(x, s).backward(g)
    assert torch.equal(x.grad, torch.tensor([0.0, 0.0, 1.5, 2.0]))
    # ds = sum g * bsign(c) + g*s (above) - g*s (below) = (1 - 2 + 3 - 4) + 0.5 - 1.0
    torch.testing.assert_close(s.grad, torch.tensor(-2.5))


def test_non_contiguous_gradients():
    base = rand((4, 6, 5))
    g = rand((5, 6, 4), seed=7).permute(2, 1, 0)
    for kind in OPS_AND_REFS:
        op, ref, _ = OPS_AND_REFS[kind]
        for x in [
            base.transpose(0, 2).contiguous().transpose(0, 2),
            base[:, ::1, :].permute(0, 1, 2),
            base,
        ]:
            s = rand_pos((1, 6, 1))
            y, (gx, gs) = grads(op, (x, s), g, (True, True))
            yr, (rx, rs) = grads(ref, (x, s), g, (True, True))
            assert_bitwise(y, yr, signed_zero=False)  # the STE reference adds +0
            assert torch.equal(gx, rx)
            torch.testing.assert_close(gs, rs, **_tols(torch.float32))


def test_gradcheck_binary_in_scale():
    x = rand((4, 5), torch.float64)
    s = rand_pos((4, 1), torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(lambda s_: binary_quant(x, s_), (s,))
    s0 = torch.tensor(0.4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda s_: binary_quant(x, s_), (s0,))


def test_gradcheck_clamped_in_scale_unclamped_region():
    # With |x| < s for every perturbation the clamp is inactive: y = binary_sign(x) * s.
    x = (
        torch.rand(4, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64) - 0.5
    ) * 0.4
    s = (rand_pos((4, 1), torch.float64) + 0.3).requires_grad_()
    assert bool((x.abs() < s.detach()).all())
    assert torch.autograd.gradcheck(lambda s_: clamped_binary_quant(x, s_), (s,))


# ---- backward ops ----------------------------------------------------------------------------


@pytest.mark.parametrize("output_mask", MASKS2, ids=str)
@pytest.mark.parametrize("kind", list(OPS_AND_REFS))
def test_backward_op_outputs(output_mask, kind):
    _, ref, name = OPS_AND_REFS[kind]
    x, s, g = (
        rand((3, 4, 5), torch.float64),
        rand_pos((1, 4, 1), torch.float64),
        rand((3, 4, 5), torch.float64, seed=4),
    )
    _, (rx, rs) = grads(ref, (x, s), g, (True, True))
    gx, gs = getattr(OPS, f"_{name}_backward")(g, x, s, output_mask)
    if output_mask[0]:
        assert torch.equal(gx, rx)
    else:
        assert gx is None
    if output_mask[1]:
        torch.testing.assert_close(gs, rs, rtol=1e-10, atol=1e-10)
    else:
        assert gs is None


def test_binary_backward_without_x():
    s, g = rand_pos((3, 1)), rand((3, 4), seed=4)
    gx, gs = OPS._binary_quant_backward(g, None, s, [True, False])
    assert torch.equal(gx, g * s) and gs is None
    with pytest.raises(
        RuntimeError, match=r"_binary_quant_backward: the gradient of scale needs x"
    ):
        OPS._binary_quant_backward(g, None, s, [True, True])


@pytest.mark.parametrize("kind", list(OPS_AND_REFS))
def test_backward_ops_not_differentiable(kind):
    _, _, name = OPS_AND_REFS[kind]
    x = rand((3, 4))
    g = rand((3, 4), seed=2).requires_grad_()
    gx, _ = getattr(OPS, f"_{name}_backward")(g, x, rand_pos(()), [True, False])
    with pytest.raises(RuntimeError, match="not implemented"):
        gx.sum().backward()


# ---- opcheck ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(OPS_AND_REFS))
@pytest.mark.parametrize("noncontig", [False, True])
@pytest.mark.parametrize("requires_grad", [False, True])
def test_opcheck_forward(kind, noncontig, requires_grad):
    _, _, name = OPS_AND_REFS[kind]
    x, s = quant_opcheck_inputs(noncontig, requires_grad)
    torch.library.opcheck(getattr(OPS, name), (x, s))
    if requires_grad:  # per-tensor scale requiring grad, x without
        torch.library.opcheck(
            getattr(OPS, name), (x.detach(), torch.tensor(0.3, requires_grad=True))
        )


@pytest.mark.parametrize("kind", list(OPS_AND_REFS))
@pytest.mark.parametrize("noncontig", [False, True])
@pytest.mark.parametrize("requires_grad", [False, True])
def test_opcheck_backward(kind, noncontig, requires_grad):
    _, _, name = OPS_AND_REFS[kind]
    x, s = quant_opcheck_inputs(noncontig, False)
    g = rand(x.shape, seed=5)
    if noncontig:
        g = rand((x.shape[2], x.shape[1], x.shape[0]), seed=5).permute(2, 1, 0)
    if requires_grad:
        g = g.clone().requires_grad_()
    # The backward ops are deliberately not differentiable: skip the check that differentiates them.
    utils = backward_op_utils(requires_grad)
    op = getattr(OPS, f"_{name}_backward")
    for m in MASKS2:
        torch.library.opcheck(op, (g, x, s, m), test_utils=utils)
    if kind == "binary":
        torch.library.opcheck(op, (g, None, s, [True, False]), test_utils=utils)


# ---- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(OPS_AND_REFS))
def test_bad_inputs(kind):
    op, _, name = OPS_AND_REFS[kind]
    x = rand((2, 5))
    with pytest.raises(RuntimeError, match=rf"{name}: x must be a floating-point"):
        op(torch.ones(2, 5, dtype=torch.int32), torch.tensor(1, dtype=torch.int32))
    with pytest.raises(RuntimeError, match=rf"{name}: scale must have the dtype of x"):
        op(x, torch.tensor(0.5, dtype=torch.float64))
    with pytest.raises(
        RuntimeError,
        match=rf"{name}: scale of shape \[3\] does not broadcast to x of shape \[2, 5\]",
    ):
        op(x, torch.ones(3))
    with pytest.raises(RuntimeError, match=r"scale of shape \[4, 2, 5\] does not broadcast"):
        op(x, torch.ones(4, 2, 5))
    with pytest.raises(
        RuntimeError, match=r"scale of shape \[2, 1\] does not broadcast to x of shape \[1, 5\]"
    ):
        op(rand((1, 5)), torch.ones(2, 1))
    for v, text in [(0.0, "0"), (-1.0, "-1"), (float("inf"), "inf"), (float("nan"), "nan")]:
        with pytest.raises(
            RuntimeError, match=rf"{name}: scale must be positive and finite, got {text}\b"
        ):
            op(x, torch.tensor(v))
        with pytest.raises(RuntimeError, match=rf"scale must be positive and finite, got {text}\b"):
            op(x, torch.tensor([[1.0], [v]]))
    with pytest.raises(RuntimeError):
        op(x, torch.tensor(0.5, device="meta"))


@pytest.mark.parametrize("kind", list(OPS_AND_REFS))
@pytest.mark.parametrize(
    "xs,ss", [((3, 40001), (3, 1)), ((4, 20003), (1, 20003)), ((64, 40, 33), (64, 40, 1))]
)
def test_large_tensors(kind, xs, ss):
    """Several parallel chunks, runs of one scale split across chunks."""
    op, ref, _ = OPS_AND_REFS[kind]
    x, s, g = rand(xs, torch.float64), rand_pos(ss, torch.float64), rand(xs, torch.float64, seed=3)
    y, (gx, gs) = grads(op, (x, s), g, (True, True))
    yr, (rx, rs) = grads(ref, (x, s), g, (True, True))
    assert_bitwise(y, yr, signed_zero=False)  # the STE reference adds +0
    assert torch.equal(gx, rx)
    torch.testing.assert_close(gs, rs, rtol=1e-9, atol=1e-8)


@pytest.mark.parametrize("kind", list(OPS_AND_REFS))
def test_expanded_scale_forward(kind):
    op, ref, _ = OPS_AND_REFS[kind]
    x = rand((4, 6))
    s = torch.tensor(0.5).expand(1, 6)
    assert_bitwise(op(x, s), ref(x, s))


@pytest.mark.parametrize("kind", list(OPS_AND_REFS))
def test_expanded_scale_gradient(kind):
    op, ref, _ = OPS_AND_REFS[kind]
    x = rand((4, 6), torch.float64)
    base = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    ref_base = base.detach().clone().requires_grad_()
    op(x, base.expand(1, 6)).sum().backward()
    ref(x, ref_base.expand(1, 6)).sum().backward()
    torch.testing.assert_close(base.grad, ref_base.grad, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("kind", list(OPS_AND_REFS))
def test_meta_shape_and_strides(kind):
    _, _, name = OPS_AND_REFS[kind]
    x = torch.empty(2, 4, 3, 3, device="meta").contiguous(memory_format=torch.channels_last)
    y = getattr(OPS, name)(x, torch.empty(1, 4, 1, 1, device="meta"))
    assert y.device.type == "meta" and y.shape == x.shape and y.stride() == x.stride()
