"""learned_int_quant and _learned_int_quant_backward, against the composition the op replaces,
written out here with the existing ops, never against the op itself:

    clamped = scalar_signed_clamp_min_ste(value, min_val)   (value when min_val is None)
    scale = clamped / threshold
    y = relu_int_quant(x, scale, ...) if relu else int_quant(x, scale, ...)

with autograd through all three: values, signs of zeros and the gradients of x and value bit for
bit (the same CPU kernels, the same float operations in the same order)."""

import pytest
import torch
from helpers import (
    DTYPES,
    MODES,
    RecordedCalls,
    assert_bitwise,
    backward_op_utils,
    meta_like,
    rand,
    rand_pos,
)

import brevitas_cpp  # noqa: F401  (registers the ops)
from brevitas_cpp.function import learned_int_quant

OPS = torch.ops.brevitas_cpp
SIGNED_NARROW = [(True, False), (True, True), (False, False), (False, True)]
# (x shape, value shape, threshold shape): a per-tensor and a per-channel value, and a 0-dim
# value over a per-channel threshold (scale per channel: autograd reduces value's gradient).
CASES = {
    "per_tensor": ((4, 3, 5), (), ()),
    "per_channel": ((2, 4, 3, 3), (1, 4, 1, 1), ()),
    "threshold_per_channel": ((2, 4, 3, 3), (), (1, 4, 1, 1)),
}
MIN_VALS = [None, 1e-10, 0.5]


def composition(
    x,
    value,
    threshold,
    zero_point,
    bit_width,
    signed,
    narrow,
    min_val=None,
    mode="round",
    clamp_ste=False,
    relu=False,
):
    """The stock quantizer's learned phase as three ops (the reference)."""
    clamped = value if min_val is None else OPS.scalar_signed_clamp_min_ste(value, min_val)
    scale = clamped / threshold
    quant = OPS.relu_int_quant if relu else OPS.int_quant
    return quant(x, scale, zero_point, bit_width, signed, narrow, mode, clamp_ste), scale


def _inputs(case, dtype, min_val, seed=0):
    xs, vs, ts = CASES[case]
    x = rand(xs, torch.float64, seed=seed, spread=3.0)
    # Zeros of both signs, NaN and infinities next to ordinary values.
    x.view(-1)[:6] = torch.tensor([-0.0, 0.0, float("nan"), float("inf"), float("-inf"), -1e-30])
    value = rand_pos(vs, torch.float64, seed=seed + 1) * 2.0
    if min_val == 0.5:  # values below the bound, at it and 0 (the clamp acts)
        flat = value.view(-1)
        flat[: min(3, flat.numel())] = torch.tensor([0.25, 0.5, 0.0])[: flat.numel()]
    threshold = torch.full(ts, 7.0, dtype=torch.float64)
    if ts:
        threshold = torch.tensor([7.0, 3.0, 15.0, 127.0], dtype=torch.float64).reshape(ts)
    return x.to(dtype), value.to(dtype), threshold.to(dtype), torch.zeros((), dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("relu", [False, True])
def test_forward_bitwise_vs_composition(dtype, case, relu):
    for min_val in MIN_VALS:
        x, value, threshold, z = _inputs(case, dtype, min_val)
        for mode in MODES:
            for signed, narrow in SIGNED_NARROW:
                b = torch.tensor(4.0)
                args = (x, value, threshold, z, b, signed, narrow, min_val, mode, False, relu)
                y, s = learned_int_quant(*args)
                wy, ws = composition(*args)
                assert_bitwise(y, wy)  # signs of zeros included
                assert_bitwise(s, ws)
                assert y.stride() == wy.stride() and s.stride() == ws.stride()


def _grads(fn, x, value, args, g, w, use_y, use_scale, x_grad=True, value_grad=True):
    """fn's outputs and the gradients of x and value of sum(y * g) (use_y) + sum(scale * w)
    (use_scale), on fresh leaves."""
    xl = x.detach().clone().requires_grad_(x_grad)
    vl = value.detach().clone().requires_grad_(value_grad)
    y, s = fn(xl, vl, *args)
    loss = torch.zeros((), dtype=x.dtype)
    if use_y:
        loss = loss + (y * g).sum()
    if use_scale:
        loss = loss + (s * w).sum()
    leaves = [t for t in (xl, vl) if t.requires_grad]
    got = torch.autograd.grad(loss, leaves, allow_unused=True)
    out = dict(zip([n for n, t in (("x", xl), ("value", vl)) if t.requires_grad], got))
    return y.detach(), s.detach(), out.get("x"), out.get("value")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("relu", [False, True])
def test_gradients_bitwise_vs_composition(dtype, case, relu):
    for min_val in MIN_VALS:
        x, value, threshold, z = _inputs(case, dtype, min_val)
        x = torch.where(x.isfinite(), x, torch.zeros((), dtype=dtype))  # finite scale gradients
        g = rand(x.shape, dtype, seed=7)
        for use_y, use_scale in [(True, False), (True, True), (False, True)]:
            for mode, signed, narrow, clamp_ste in [
                ("round", True, False, False),
                ("floor", False, True, True),
                ("dpu", True, True, True),
                ("round_to_zero", False, False, False),
            ]:
                b = torch.tensor(4.0)
                args = (threshold, z, b, signed, narrow, min_val, mode, clamp_ste, relu)
                scale_shape = torch.broadcast_shapes(value.shape, threshold.shape)
                w = rand(scale_shape, dtype, seed=8)
                got = _grads(learned_int_quant, x, value, args, g, w, use_y, use_scale)
                want = _grads(composition, x, value, args, g, w, use_y, use_scale)
                assert_bitwise(got[0], want[0])
                assert_bitwise(got[1], want[1])
                if use_y:
                    assert_bitwise(got[2], want[2])
                else:
                    assert got[2] is None and want[2] is None
                assert got[3].shape == value.shape
                assert_bitwise(got[3], want[3])


@pytest.mark.parametrize("relu", [False, True])
def test_only_x_or_only_value_requires_grad(relu):
    x, value, threshold, z = _inputs("per_channel", torch.float32, 0.5)
    x = torch.where(x.isfinite(), x, torch.zeros(()))
    g, w = rand(x.shape, seed=7), rand(value.shape, seed=8)
    args = (threshold, z, torch.tensor(4.0), True, False, 0.5, "round", False, relu)
    for xg, vg in [(True, False), (False, True)]:
        got = _grads(learned_int_quant, x, value, args, g, w, True, vg, xg, vg)
        want = _grads(composition, x, value, args, g, w, True, vg, xg, vg)
        for a, b in zip(got, want):
            assert (a is None) == (b is None)
            if a is not None:
                assert_bitwise(a, b)
    # As in the composition, scale carries no gradient when value needs none.
    y, s = learned_int_quant(x.clone().requires_grad_(), value, *args)
    assert y.requires_grad and not s.requires_grad


def test_one_autograd_node_and_one_op_per_pass():
    x = rand((2, 8, 8, 8), spread=3.0).requires_grad_()
    value = torch.tensor(0.7, requires_grad=True)
    args = (torch.tensor(127.0), torch.zeros(()), torch.tensor(8.0), True, False, 1e-10)
    with RecordedCalls() as rec:
        y, s = learned_int_quant(x, value, *args, relu=True)
    assert [n for n in rec.names if "brevitas_cpp" in n] == [
        "brevitas_cpp.learned_int_quant.default"
    ]
    # One node, straight onto the two leaves.
    assert y.grad_fn is s.grad_fn
    leaves = {id(f.variable) for f, _ in y.grad_fn.next_functions if f is not None}
    assert leaves == {id(x), id(value)}
    with RecordedCalls() as rec:
        (y.sum() + s).backward()
    assert [n for n in rec.names if "brevitas_cpp" in n] == [
        "brevitas_cpp._learned_int_quant_backward.default"
    ]


def test_saves_only_x_among_large_tensors():
    x = rand((8, 16, 4, 4), spread=3.0).requires_grad_()
    value = torch.tensor(0.1, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        learned_int_quant(
            x, value, torch.tensor(7.0), torch.zeros(()), torch.tensor(4.0), True, False
        )
    big = [t for t in saved if t.numel() == x.numel()]
    assert len(big) == 1 and big[0].data_ptr() == x.data_ptr()


def test_no_graph_under_no_grad():
    x, value = torch.randn(4, requires_grad=True), torch.tensor(0.5, requires_grad=True)
    threshold = torch.tensor(7.0, requires_grad=True)  # allowed: no graph is recorded
    with torch.no_grad():
        y, s = learned_int_quant(
            x, value, threshold, torch.zeros(()), torch.tensor(4.0), True, False
        )
    assert y.grad_fn is None and s.grad_fn is None and not y.requires_grad


@pytest.mark.parametrize("name", ["threshold", "zero_point", "bit_width"])
def test_constants_requiring_grad_are_refused(name):
    args = dict(
        threshold=torch.tensor(7.0), zero_point=torch.zeros(()), bit_width=torch.tensor(4.0)
    )
    args[name] = args[name].clone().requires_grad_()
    x = torch.randn(4)  # refused even when nothing else needs a gradient
    with pytest.raises(RuntimeError, match=rf"learned_int_quant: {name} must not require grad"):
        learned_int_quant(
            x,
            torch.tensor(0.5),
            args["threshold"],
            args["zero_point"],
            args["bit_width"],
            True,
            False,
        )


def test_empty_input():
    x = torch.empty(0, 3, requires_grad=True)
    value = torch.ones((), requires_grad=True)
    y, s = learned_int_quant(
        x, value, torch.tensor(3.0), torch.zeros(()), torch.tensor(8.0), False, False
    )
    assert y.shape == (0, 3)
    gx, gv = torch.autograd.grad(y.sum(), (x, value))
    assert gx.shape == (0, 3) and gv.item() == 0.0


def test_gradcheck_float64_where_the_derivative_is_true():
    """Finite differences agree with the STE gradient where it is the true derivative: ReLU's
    zeros (x < 0) and x far outside the range (y = bound * scale, smooth in value); value above
    min_val (the clamp is the identity there)."""
    g = torch.Generator().manual_seed(0)
    mag = torch.rand(4, 6, generator=g, dtype=torch.float64) + 0.5
    sign = torch.where(torch.rand(4, 6, generator=g) > 0.5, 1.0, -1.0).to(torch.float64)
    value = (
        torch.full((1, 6), 0.5, dtype=torch.float64) + torch.arange(6.0, dtype=torch.float64) * 0.01
    )
    threshold = torch.tensor(7.0, dtype=torch.float64)
    x = sign * (20.0 + mag)  # |x| / scale > 200: beyond every bound of 4 bits
    z, b = torch.zeros((), dtype=torch.float64), torch.tensor(4.0, dtype=torch.float64)
    for relu in (False, True):
        for mode in ("round", "floor"):
            assert torch.autograd.gradcheck(
                lambda x_, v_: learned_int_quant(
                    x_, v_, threshold, z, b, True, False, 0.1, mode, False, relu
                ),
                (x.clone().requires_grad_(), value.clone().requires_grad_()),
                eps=1e-7,
                atol=1e-6,
            )


def test_script_and_compile():
    def f(x, value, threshold, zero_point, bit_width):
        y, s = learned_int_quant(
            x, value, threshold, zero_point, bit_width, True, False, 1e-10, "round", False, True
        )
        return (y * 1.5).sum() + 2.0 * s

    x, value, threshold, z = _inputs("per_tensor", torch.float32, None)
    x = torch.where(x.isfinite(), x, torch.zeros(()))
    b = torch.tensor(4.0)

    def run(fn):
        xl, vl = x.clone().requires_grad_(), value.clone().requires_grad_()
        out = fn(xl, vl, threshold, z, b)
        return [out.detach(), *torch.autograd.grad(out, (xl, vl))]

    eager = run(f)
    for fn in (torch.jit.script(f), torch.compile(f, backend="aot_eager", fullgraph=True)):
        for got, want in zip(run(fn), eager):
            assert_bitwise(got, want)


@pytest.mark.parametrize("layout", ["channels_last", "permuted"])
def test_layouts_and_meta(layout):
    base = rand((4, 6, 5, 3), spread=3.0)
    x = (
        base.contiguous(memory_format=torch.channels_last)
        if layout == "channels_last"
        else base.permute(2, 0, 3, 1)
    )
    value = rand_pos((1, x.shape[1], 1, 1))
    threshold, z, b = torch.tensor(7.0), torch.zeros(()), torch.tensor(4.0)
    y, s = learned_int_quant(x, value, threshold, z, b, True, False, 0.2)
    wy, ws = composition(x, value, threshold, z, b, True, False, 0.2)
    assert_bitwise(y, wy)
    assert y.stride() == torch.empty_like(x).stride()
    ym, sm = learned_int_quant(
        *(meta_like(t) for t in (x, value, threshold, z, b)), True, False, 0.2
    )
    assert ym.device.type == "meta" and ym.shape == y.shape and ym.stride() == y.stride()
    assert sm.shape == s.shape and sm.stride() == s.stride()


def _opcheck_inputs(noncontig, requires_grad, threshold_shape=()):
    x = rand((4, 12, 5), spread=4.0)[:, ::2, :] if noncontig else rand((4, 6, 5), spread=4.0)
    value = rand_pos((1, 6, 1)) * 2.0 if not threshold_shape else torch.tensor(1.5)
    threshold = torch.full(threshold_shape, 7.0)
    z, b = torch.zeros(()), torch.tensor(4.0)
    if requires_grad:
        x, value = x.clone().requires_grad_(), value.clone().requires_grad_()
    return x, value, threshold, z, b


@pytest.mark.parametrize("noncontig", [False, True])
@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("relu", [False, True])
def test_opcheck_learned_int_quant(noncontig, requires_grad, relu):
    for threshold_shape, min_val in [((), 1e-10), ((1, 6, 1), None)]:
        x, value, threshold, z, b = _opcheck_inputs(noncontig, requires_grad, threshold_shape)
        torch.library.opcheck(
            OPS.learned_int_quant,
            (x, value, threshold, z, b, True, False, min_val, "round", False, relu),
        )


@pytest.mark.parametrize(
    "output_mask", [[True, True], [True, False], [False, True], [False, False]], ids=str
)
@pytest.mark.parametrize("requires_grad", [False, True])
def test_opcheck_learned_int_quant_backward(output_mask, requires_grad):
    x, value, threshold, z, b = _opcheck_inputs(True, requires_grad)
    _, s = OPS.learned_int_quant(x.detach(), value.detach(), threshold, z, b, True, False)
    grad_y = rand(x.shape, seed=5)
    grad_scale = rand(s.shape, seed=6)
    for gy, gs, relu in [
        (grad_y, None, False),
        (grad_y, grad_scale, True),
        (None, grad_scale, False),
    ]:
        torch.library.opcheck(
            OPS._learned_int_quant_backward,
            (gy, gs, x, s, threshold, z, b, True, False, "dpu", False, relu, output_mask),
            test_utils=backward_op_utils(requires_grad),
        )


def test_cpu_kernels_equal_the_composite_kernels():
    # The composite kernels (what CUDA runs: the three ops on the device's kernels), called on the
    # CPU through their dispatch key: values and x's gradient bit for bit.
    composite = torch._C.DispatchKey.CompositeExplicitAutograd
    x, value, threshold, z = _inputs("per_channel", torch.float32, 0.5)
    x = torch.where(x.isfinite(), x, torch.zeros(()))  # finite scale gradients
    b = torch.tensor(4.0)
    grad_y, grad_scale = rand(x.shape, seed=5), rand(value.shape, seed=6)
    for relu in (False, True):
        args = (x, value, threshold, z, b, False, False, 0.5, "round", False, relu)
        cpu = OPS.learned_int_quant(*args)
        ref = OPS.learned_int_quant.default._op_dk(composite, *args)
        for got, want in zip(cpu, ref):
            assert_bitwise(got, want)
        for gs in (None, grad_scale):
            bargs = (
                grad_y,
                gs,
                x,
                cpu[1],
                threshold,
                z,
                b,
                False,
                False,
                "round",
                True,
                relu,
                [True, True],
            )
            got = OPS._learned_int_quant_backward(*bargs)
            want = OPS._learned_int_quant_backward.default._op_dk(composite, *bargs)
            assert_bitwise(got[0], want[0])
            torch.testing.assert_close(got[1], want[1], rtol=1e-5, atol=1e-5)


def test_backward_with_only_the_scale_gradient():
    """y unused: x gets nothing, value grad_scale / threshold (no NaN from x's infinities)."""
    x = torch.tensor([float("inf"), -2.0, 0.3])
    s = torch.tensor(0.1)
    gx, gv = OPS._learned_int_quant_backward(
        None,
        torch.tensor(2.0),
        x,
        s,
        torch.tensor(4.0),
        torch.zeros(()),
        torch.tensor(4.0),
        True,
        False,
        "round",
        False,
        False,
        [True, True],
    )
    assert gx is None
    assert_bitwise(gv, torch.tensor(0.5))


@pytest.mark.parametrize(
    "call,match",
    [
        (
            lambda: OPS.learned_int_quant(
                torch.ones(3),
                torch.ones(()).double(),
                torch.ones(()),
                torch.zeros(()),
                torch.tensor(8.0),
                True,
                False,
            ),
            r"learned_int_quant: value must have the dtype of x",
        ),
        (
            lambda: OPS.learned_int_quant(
                torch.ones(3),
                torch.ones(2),
                torch.ones(()),
                torch.zeros(()),
                torch.tensor(8.0),
                True,
                False,
            ),
            r"learned_int_quant: value of shape \[2\] does not broadcast",
        ),
        (
            lambda: OPS.learned_int_quant(
                torch.ones(3),
                torch.ones(()),
                torch.ones(2),
                torch.zeros(()),
                torch.tensor(8.0),
                True,
                False,
            ),
            r"learned_int_quant: threshold of shape \[2\] does not broadcast",
        ),
        (
            lambda: OPS.learned_int_quant(
                torch.ones(3),
                torch.ones(()),
                torch.ones(()),
                torch.zeros(()),
                torch.tensor(8.0),
                True,
                False,
                float("inf"),
            ),
            r"learned_int_quant: min_val must be a finite number >= 0",
        ),
        (
            lambda: OPS.learned_int_quant(
                torch.ones(3),
                torch.ones(()),
                torch.ones(()),
                torch.zeros(()),
                torch.tensor(8.0),
                True,
                False,
                -0.5,
            ),
            r"learned_int_quant: min_val must be a finite number >= 0",
        ),
        (
            lambda: OPS.learned_int_quant(
                torch.ones(3).half(),
                torch.ones(()).half(),
                torch.ones(()).half(),
                torch.zeros(()).half(),
                torch.tensor(8.0),
                True,
                False,
                1e6,
            ),
            r"learned_int_quant: min_val .* overflow",
        ),
        (
            lambda: OPS.learned_int_quant(
                torch.ones(3),
                -torch.ones(()),
                torch.ones(()),
                torch.zeros(()),
                torch.tensor(8.0),
                True,
                False,
            ),
            r"learned_int_quant: scale must be a normal positive finite number",
        ),
        (
            lambda: OPS._learned_int_quant_backward(
                torch.ones(4),
                None,
                torch.ones(3),
                torch.ones(()),
                torch.ones(()),
                torch.zeros(()),
                torch.tensor(8.0),
                True,
                False,
                "round",
                False,
                False,
                [True, True],
            ),
            r"_learned_int_quant_backward: grad_y of shape",
        ),
        (
            lambda: OPS._learned_int_quant_backward(
                None,
                torch.ones(2),
                torch.ones(3),
                torch.ones(()),
                torch.ones(()),
                torch.zeros(()),
                torch.tensor(8.0),
                True,
                False,
                "round",
                False,
                False,
                [True, True],
            ),
            r"_learned_int_quant_backward: grad_scale of shape",
        ),
        (
            lambda: OPS._learned_int_quant_backward(
                None,
                None,
                torch.ones(2, 3),
                torch.ones(()),
                torch.ones(1, 3),
                torch.zeros(()),
                torch.tensor(8.0),
                True,
                False,
                "round",
                False,
                False,
                [True, True],
            ),
            r"_learned_int_quant_backward: threshold of shape \[1, 3\] does not broadcast to scale",
        ),
    ],
    ids=[
        "value-dtype",
        "value-shape",
        "threshold-shape",
        "min-val-inf",
        "min-val-negative",
        "min-val-overflow",
        "negative-value",
        "grad-y-shape",
        "grad-scale-shape",
        "threshold-vs-scale",
    ],
)
def test_bad_inputs_name_the_argument(call, match):
    with pytest.raises(RuntimeError, match=match):
        call()
