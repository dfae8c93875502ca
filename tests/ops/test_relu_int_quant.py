"""relu_int_quant and _relu_int_quant_backward, against torch.relu followed by the unfused
Brevitas composition (helpers.ref_int_quant), never against the op itself:
    r = torch.relu(x);  y = (clamp(round_mode(r / s + z), min_int, max_int) - z) * s
with autograd through both (ReLU's backward is threshold_backward(g, r, 0))."""

import pytest
import torch
from helpers import (
    DTYPES,
    MASKS4,
    MODES,
    assert_bitwise,
    backward_op_utils,
    grads,
    meta_like,
    rand,
    rand_pos,
    ref_int_quant,
)

import brevitas_cpp  # noqa: F401  (registers the ops)
from brevitas_cpp.function import int_quant, relu_int_quant

OPS = torch.ops.brevitas_cpp
SIGNED_NARROW = [(True, False), (True, True), (False, False), (False, True)]
# (x shape, scale and zero point shape): per tensor, per channel, per group.
CASES = {
    "per_tensor": ((4, 3, 5), ()),
    "per_channel": ((2, 4, 3, 3), (1, 4, 1, 1)),
    "last_dim": ((6, 7), (1, 7)),
}


def _inputs(case, dtype, seed=0):
    xs, ps = CASES[case]
    x = rand(xs, torch.float64, seed=seed, spread=3.0)
    # Negative, zero of both signs, NaN and infinities next to ordinary values.
    x.view(-1)[:6] = torch.tensor([-0.0, 0.0, float("nan"), float("inf"), float("-inf"), -1e-30])
    s = rand_pos(ps, torch.float64, seed=seed + 1) * 0.5
    g = torch.Generator().manual_seed(seed + 2)
    z = torch.randint(-1, 2, ps, generator=g).to(torch.float64)
    return x.to(dtype), s.to(dtype), z.to(dtype)


def _ref(x, s, z, b, signed, narrow, mode, clamp_ste):
    return ref_int_quant(torch.relu(x), s, z, b, signed, narrow, mode, clamp_ste)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", list(CASES))
def test_forward_bitwise_vs_relu_then_composition(dtype, case):
    x, s, z = _inputs(case, dtype)
    for mode in MODES:
        for signed, narrow in SIGNED_NARROW:
            b = torch.tensor(3.0)
            y = relu_int_quant(x, s, z, b, signed, narrow, mode)
            # relu keeps -0; both then add the zero point to -0 / s alike.
            assert_bitwise(y, _ref(x, s, z, b, signed, narrow, mode, False))
            assert_bitwise(y, int_quant(torch.relu(x), s, z, b, signed, narrow, mode))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("clamp_ste", [False, True])
@pytest.mark.parametrize("case", list(CASES))
def test_gradients_vs_relu_then_composition(dtype, clamp_ste, case):
    x, s, z = _inputs(case, dtype)
    x = torch.where(x.isfinite(), x, torch.zeros((), dtype=dtype))  # finite parameter sums
    g = rand(x.shape, dtype, seed=7)
    tol = dict(rtol=1e-10, atol=1e-10) if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-4)
    for mode in MODES:
        for signed, narrow in SIGNED_NARROW:
            b = torch.tensor(3.0, dtype=dtype)

            def op(x_, s_, z_, b_):
                return relu_int_quant(x_, s_, z_, b_, signed, narrow, mode, clamp_ste)

            def ref(x_, s_, z_, b_):
                return _ref(x_, s_, z_, b_, signed, narrow, mode, clamp_ste)

            y, (gx, gs, gz, gb) = grads(op, (x, s, z, b), g, (True, True, True, True))
            yr, (rx, rs, rz, rb) = grads(ref, (x, s, z, b), g, (True, True, True, True))
            assert_bitwise(y, yr, signed_zero=False)  # the STE reference adds +0
            assert_bitwise(gx, rx)  # ReLU's +0 where x <= 0, the clamp's mask elsewhere
            torch.testing.assert_close(gs, rs, **tol)
            torch.testing.assert_close(gz, rz, **tol)
            if clamp_ste:
                assert gb is None and rb is None
            else:
                torch.testing.assert_close(gb, rb, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("clamp_ste", [False, True])
def test_x_and_scale_gradients_with_non_finite_inputs(dtype, clamp_ste):
    # Only x and the scale asked for (the kernel's branch without the bounds' masks), NaN and
    # infinities in x: x's gradient bit for bit, the scale's NaN where the composition's is.
    x, s, z = _inputs("per_channel", dtype)
    g = rand(x.shape, dtype, seed=7)
    for mode in MODES:
        b = torch.tensor(3.0)

        def op(x_, s_):
            return relu_int_quant(x_, s_, z, b, False, False, mode, clamp_ste)

        def ref(x_, s_):
            return _ref(x_, s_, z, b, False, False, mode, clamp_ste)

        _, (gx, gs) = grads(op, (x, s), g, (True, True))
        _, (rx, rs) = grads(ref, (x, s), g, (True, True))
        assert_bitwise(gx, rx)
        assert torch.equal(gs.isnan(), rs.isnan()), mode


def test_x_gradient_by_hand():
    # Unsigned 2 bits, s = 1: range [0, 3]. Where x <= 0 ReLU stops the gradient (and NaN
    # passes it, as threshold_backward does); above 3 the clamp stops it.
    x = torch.tensor([-2.0, -0.0, 0.0, 0.4, 2.6, 3.4, 9.0, float("nan")], requires_grad=True)
    y = relu_int_quant(x, torch.tensor(1.0), torch.tensor(0.0), torch.tensor(2.0), False, False)
    # relu(-0) is -0, and -0 / 1 + 0 is +0: every zero comes out +0.
    assert_bitwise(y.detach(), torch.tensor([0.0, 0.0, 0.0, 0.0, 3.0, 3.0, 3.0, float("nan")]))
    (gx,) = torch.autograd.grad(y, x, torch.full((8,), 2.0))
    assert_bitwise(gx, torch.tensor([0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 0.0, 2.0]))


@pytest.mark.parametrize("layout", ["channels_last", "permuted"])
def test_layouts_and_meta(layout):
    base = rand((4, 6, 5, 3), spread=3.0)
    x = (
        base.contiguous(memory_format=torch.channels_last)
        if layout == "channels_last"
        else base.permute(2, 0, 3, 1)
    )
    s = rand_pos((1, x.shape[1], 1, 1))
    z, b = torch.zeros(()), torch.tensor(4.0)
    y = relu_int_quant(x, s, z, b, False, False)
    assert_bitwise(y, int_quant(torch.relu(x), s, z, b, False, False))
    assert y.stride() == torch.empty_like(x).stride()
    ym = relu_int_quant(meta_like(x), meta_like(s), meta_like(z), meta_like(b), False, False)
    assert ym.device.type == "meta" and ym.shape == x.shape and ym.stride() == y.stride()


def test_empty_input():
    x = torch.empty(0, 3, requires_grad=True)
    s = torch.ones((), requires_grad=True)
    y = relu_int_quant(x, s, torch.zeros(()), torch.tensor(8.0), False, False)
    assert y.shape == (0, 3)
    gx, gs = torch.autograd.grad(y.sum(), (x, s))
    assert gx.shape == (0, 3) and gs.item() == 0.0


def test_saves_only_x():
    # relu(x) is never written: autograd keeps x and the (small) parameters, nothing else.
    x = rand((8, 16, 4, 4), spread=3.0).requires_grad_()
    s = torch.tensor(0.1, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        relu_int_quant(x, s, torch.zeros(()), torch.tensor(8.0), False, False)
    big = [t for t in saved if t.numel() == x.numel()]
    assert len(big) == 1 and big[0].data_ptr() == x.data_ptr()


def test_no_graph_under_no_grad():
    x = torch.randn(4, requires_grad=True)
    with torch.no_grad():
        y = relu_int_quant(x, torch.tensor(0.1), torch.zeros(()), torch.tensor(8.0), False, False)
    assert y.grad_fn is None and not y.requires_grad


def test_gradcheck_float64_where_the_derivative_is_true():
    """Finite differences agree with the STE gradient where it is the true derivative: x < 0
    (ReLU's zero) and x far above the range (the clamp, smooth in the scale)."""
    g = torch.Generator().manual_seed(0)
    mag = torch.rand(4, 6, generator=g, dtype=torch.float64) + 0.5
    below = torch.rand(4, 6, generator=g) > 0.5
    s0 = (
        torch.full((1, 6), 0.5, dtype=torch.float64) + torch.arange(6.0, dtype=torch.float64) * 0.01
    )
    x = torch.where(below, -mag, (7.0 + 2.0 + mag) * s0)  # unsigned 3 bits: [0, 7]
    z0 = torch.full((1, 6), 0.25, dtype=torch.float64)
    b = torch.tensor(3.0, dtype=torch.float64)
    for mode in MODES:
        # Not the zero point: at relu's zeros round(0 / s + z) is in range, where the STE
        # gradient of z (0) is not its true derivative (-s).
        assert torch.autograd.gradcheck(
            lambda x_, s_: relu_int_quant(x_, s_, z0, b, False, False, mode, False),
            (x.clone().requires_grad_(), s0.clone().requires_grad_()),
            eps=1e-7,
            atol=1e-6,
        )


def _opcheck_inputs(noncontig, requires_grad):
    x = rand((4, 12, 5), spread=4.0)[:, ::2, :] if noncontig else rand((4, 6, 5), spread=4.0)
    s = rand_pos((1, 6, 1)) * 0.5
    z, b = torch.zeros(()), torch.tensor(3.0)
    if requires_grad:
        x, s, z, b = (t.clone().requires_grad_() for t in (x, s, z, b))
    return x, s, z, b


@pytest.mark.parametrize("noncontig", [False, True])
@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("clamp_ste", [False, True])
def test_opcheck_relu_int_quant(noncontig, requires_grad, clamp_ste):
    x, s, z, b = _opcheck_inputs(noncontig, requires_grad)
    torch.library.opcheck(OPS.relu_int_quant, (x, s, z, b, False, False, "round", clamp_ste))


@pytest.mark.parametrize("output_mask", MASKS4, ids=lambda m: "".join("1" if v else "0" for v in m))
@pytest.mark.parametrize("noncontig", [False, True])
@pytest.mark.parametrize("requires_grad", [False, True])
def test_opcheck_relu_int_quant_backward(output_mask, noncontig, requires_grad):
    x, s, z, b = _opcheck_inputs(noncontig, requires_grad)
    grad = rand(x.shape, seed=5)
    for clamp_ste in (False, True):
        torch.library.opcheck(
            OPS._relu_int_quant_backward,
            (grad, x, s, z, b, True, False, "dpu", clamp_ste, output_mask),
            test_utils=backward_op_utils(requires_grad),
        )


def test_cpu_kernels_equal_the_composite_kernels():
    # The composite kernels (what CUDA runs: torch.relu, then int_quant's own kernels), called
    # on the CPU through their dispatch key: values and x's gradient bit for bit.
    composite = torch._C.DispatchKey.CompositeExplicitAutograd
    x, s, z, b = _opcheck_inputs(False, False)
    grad = rand(x.shape, seed=5)
    for clamp_ste in (False, True):
        args = (grad, x, s, z, b, False, False, "round", clamp_ste, [True, True, True, True])
        cpu = OPS._relu_int_quant_backward(*args)
        ref = OPS._relu_int_quant_backward.default._op_dk(composite, *args)
        assert_bitwise(cpu[0], ref[0])
        for got, want in zip(cpu[1:], ref[1:]):
            assert (got is None) == (want is None)
            if got is not None:
                torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert_bitwise(
        OPS.relu_int_quant(x, s, z, b, False, False),
        OPS.relu_int_quant.default._op_dk(composite, x, s, z, b, False, False, "round", False),
    )


@pytest.mark.parametrize(
    "call,match",
    [
        (
            lambda: OPS.relu_int_quant(
                torch.ones(3, dtype=torch.int32),
                torch.ones(()),
                torch.zeros(()),
                torch.tensor(8.0),
                False,
                False,
            ),
            r"relu_int_quant.*x",
        ),
        (
            lambda: OPS.relu_int_quant(
                torch.ones(3), torch.ones(2), torch.zeros(()), torch.tensor(8.0), False, False
            ),
            r"relu_int_quant.*scale",
        ),
        (
            lambda: OPS.relu_int_quant(
                torch.ones(3), torch.zeros(()), torch.zeros(()), torch.tensor(8.0), False, False
            ),
            r"relu_int_quant.*scale",
        ),
        (
            lambda: OPS.relu_int_quant(
                torch.ones(3), torch.ones(()), torch.zeros(()), torch.tensor(40.0), False, False
            ),
            r"relu_int_quant.*bit_width",
        ),
        (
            lambda: OPS.relu_int_quant(
                torch.ones(3),
                torch.ones(()),
                torch.zeros(()),
                torch.tensor(8.0),
                False,
                False,
                "nearest",
            ),
            r"relu_int_quant.*rounding_mode",
        ),
        (
            lambda: OPS._relu_int_quant_backward(
                torch.ones(4),
                torch.ones(3),
                torch.ones(()),
                torch.zeros(()),
                torch.tensor(8.0),
                False,
                False,
                "round",
                False,
                [True, True, True, True],
            ),
            r"_relu_int_quant_backward.*grad",
        ),
        (
            lambda: OPS._relu_int_quant_backward(
                torch.ones(3, dtype=torch.float64),
                torch.ones(3),
                torch.ones(()),
                torch.zeros(()),
                torch.tensor(8.0),
                False,
                False,
                "round",
                False,
                [True, True, True, True],
            ),
            r"_relu_int_quant_backward.*grad",
        ),
    ],
    ids=[
        "int-x",
        "scale-shape",
        "zero-scale",
        "bit-width",
        "rounding-mode",
        "grad-shape",
        "grad-dtype",
    ],
)
def test_bad_inputs_name_the_argument(call, match):
    with pytest.raises(RuntimeError, match=match):
        call()
