"""abs_max_int_quant (and _abs_max_int_quant_backward): the stock weight quantizer in one op.

Every result is checked against the unfused composition written out below with plain torch ops
(Brevitas's BitWidthConst -> IntScaling -> AbsMax -> _StatsScaling -> IntQuant, zero point 0):

    m = max|w|  (torch.max over everything, or torch.max(dim=1) of w.movedim(d, 0).reshape(C, -1))
    c = |clamp_min_ste(m, scaling_min_val)|        (ScalarSignedClampMinSte, straight-through)
    threshold = -(1 - 2^(b-1)) narrow signed, 2^(b-1) signed, max_int unsigned
    scale = |c / |threshold||
    y = (clamp(round(w / scale + 0), min_int, max_int) - 0) * scale   (STE round, and clamp)
"""

import pytest
import torch
from helpers import (
    DTYPE_IDS,
    DTYPES,
    MODES,
    NO_AOT,
    RecordedCalls,
    _StraightThrough,
    assert_bitwise,
    rand,
    ref_int_quant,
    ref_max_int,
)

import brevitas_cpp  # noqa: F401  (registers the ops)
from brevitas_cpp.function import abs_max_int_quant

OPS = torch.ops.brevitas_cpp
SIGNED_NARROW = [(True, True), (True, False), (False, False), (False, True)]
# (shape, channel_dim)
# The reference's scale gradient is autograd's float32 sum_to_size, the op's int_quant's double
# accumulators: the max element's gradient (which adds it) differs by a few float32 roundings of
# that sum. (Against the library's own unfused quantizer, which reduces with the same kernel, the
# gradients are equal: tests/core/quant/test_fused_weight.py.)
F32_GRAD_TOL = dict(rtol=1e-6, atol=1e-5)
LAYOUTS = {
    "tensor": ((8, 5, 3, 3), None),
    "channel0": ((8, 5, 3, 3), 0),
    "channel1": ((4, 6, 3), 1),
    "channel_last": ((5, 7), -1),
    "linear": ((16, 33), 0),
}


def _clamp_min(v, lo):
    a = torch.abs(v)
    return torch.where(v >= 0, torch.where(a < lo, lo, a), torch.where(v > -lo, -lo, v))


def ref_abs_max_int_quant(
    w, bit_width, channel_dim, signed, narrow, min_val=None, mode="round", clamp_ste=False
):
    a = torch.abs(w)
    if channel_dim is None:
        m = torch.max(a)
    else:
        d = channel_dim % w.dim()
        shape = [1] * w.dim()
        shape[d] = w.shape[d]
        m = torch.max(a.movedim(d, 0).reshape(w.shape[d], -1), dim=1)[0].reshape(shape)
    if min_val is not None:
        lo = torch.tensor(min_val, dtype=w.dtype)
        for _ in range(2):  # _StatsScaling clamps twice (clamp_scaling, restrict_clamp_scaling)
            m = _StraightThrough.apply(m, lambda v: _clamp_min(v, lo))
    c = torch.abs(m)
    if signed:
        threshold = -(1 - 2 ** (bit_width - 1)) if narrow else 2 ** (bit_width - 1)
    else:
        threshold = ref_max_int(False, narrow, bit_width)
    scale = torch.abs(c / torch.abs(threshold))
    zero = torch.zeros((), dtype=w.dtype)
    y = ref_int_quant(w, scale, zero, bit_width, signed, narrow, mode, clamp_ste)
    return y, scale


def _w(shape, dtype=torch.float64, seed=0, ties=False):
    w = rand(shape, dtype=torch.float64, seed=seed).to(dtype)
    if ties:  # the same |max| several times: negative and positive, per row and overall
        flat = w.reshape(-1).clone()
        big = float(flat.abs().max()) * 1.5
        flat[0], flat[3], flat[-1] = big, -big, big
        w = flat.reshape(shape)
        if w.dim() >= 2:
            w[:, -1] = (
                w.abs()
                .amax(dim=tuple(range(1, w.dim())), keepdim=False)
                .reshape([-1] + [1] * (w.dim() - 2))
            )
    return w


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("signed,narrow", SIGNED_NARROW)
def test_forward_bitwise_vs_composition(dtype, layout, signed, narrow):
    shape, dim = LAYOUTS[layout]
    # 2^16 - 1 is inf in float16: a 16-bit unsigned threshold only exists in wider dtypes.
    wide = 16.0 if dtype in (torch.float32, torch.float64) else 12.0
    for seed, min_val, b in [(0, None, 8.0), (1, 1e-10, 4.0), (2, 2.5, 3.0), (3, 1e-3, wide)]:
        w = _w(shape, dtype, seed=seed, ties=seed == 1) * (1 + seed)
        bw = torch.tensor(b, dtype=dtype)  # the quantizer's bit width follows .to(dtype)
        for mode in MODES:
            y, s = abs_max_int_quant(w, bw, dim, signed, narrow, min_val, mode, True)
            ry, rs = ref_abs_max_int_quant(w, bw, dim, signed, narrow, min_val, mode, True)
            assert_bitwise(s, rs)
            assert_bitwise(y, ry)


def test_scale_shapes_and_default_arguments():
    w = _w((6, 4, 3, 3), torch.float32)
    y, s = OPS.abs_max_int_quant(w, torch.tensor(8.0), None, True, True)
    assert s.shape == () and y.shape == w.shape
    _, s = OPS.abs_max_int_quant(w, torch.tensor(8.0), 0, True, True)
    assert s.shape == (6, 1, 1, 1)
    _, s = OPS.abs_max_int_quant(w, torch.tensor(8.0), 2, True, True)
    assert s.shape == (1, 1, 3, 1)
    torch.testing.assert_close(s.reshape(-1), w.abs().amax(dim=(0, 1, 3)) / 127, rtol=0, atol=0)


@pytest.mark.parametrize("layout", ["channels_last", "transposed", "sliced"])
def test_layouts(layout):
    w = _w((8, 6, 3, 3), torch.float32, seed=4)
    if layout == "channels_last":
        w = w.contiguous(memory_format=torch.channels_last)
    elif layout == "transposed":
        w = w.transpose(0, 1)
    else:
        w = _w((8, 12, 3, 3), torch.float32, seed=4)[:, ::2]
    bw = torch.tensor(8.0)
    for dim in (None, 0, 1):
        wr = w.clone().requires_grad_()
        y, s = abs_max_int_quant(wr, bw, dim, True, True, 1e-10, "round", True)
        w2 = w.clone().requires_grad_()
        ry, rs = ref_abs_max_int_quant(w2, bw, dim, True, True, 1e-10, "round", True)
        assert_bitwise(y, ry)
        assert_bitwise(s, rs)
        g = rand(w.shape, seed=9)
        (y * g).sum().backward()
        (ry * g).sum().backward()
        torch.testing.assert_close(wr.grad, w2.grad, **F32_GRAD_TOL)


# ---- gradients -------------------------------------------------------------------------------


def _grads(fn, w, g, gs):
    w = w.detach().clone().requires_grad_()
    y, s = fn(w)
    loss = (y * g).sum() + ((s * gs).sum() if gs is not None else 0)
    (gw,) = torch.autograd.grad(loss, w)
    return gw


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("clamp_ste", [True, False])
@pytest.mark.parametrize("ties", [False, True])
def test_gradients_vs_composition(dtype, layout, clamp_ste, ties):
    shape, dim = LAYOUTS[layout]
    tol = F32_GRAD_TOL if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    w = _w(shape, dtype, seed=5, ties=ties)
    g = rand(shape, dtype=torch.float64, seed=6).to(dtype)
    for signed, narrow in SIGNED_NARROW:
        for min_val, b in [(None, 8.0), (1e-10, 3.0), (10.0, 4.0)]:
            bw = torch.tensor(b, dtype=dtype)
            for with_scale_grad in (False, True):
                s_shape = ref_abs_max_int_quant(w, bw, dim, signed, narrow, min_val)[1].shape
                gs = (
                    rand(s_shape, dtype=torch.float64, seed=7).to(dtype)
                    if with_scale_grad
                    else None
                )
                got = _grads(
                    lambda v: abs_max_int_quant(
                        v, bw, dim, signed, narrow, min_val, "round", clamp_ste
                    ),
                    w,
                    g,
                    gs,
                )
                want = _grads(
                    lambda v: ref_abs_max_int_quant(
                        v, bw, dim, signed, narrow, min_val, "round", clamp_ste
                    ),
                    w,
                    g,
                    gs,
                )
                torch.testing.assert_close(got, want, **tol)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gradients_reduced_precision(dtype):
    for dim in (None, 0):
        w = _w((8, 5, 3, 3), dtype, seed=8)
        g = rand(w.shape, seed=9).to(dtype)
        bw = torch.tensor(8.0, dtype=dtype)
        got = _grads(
            lambda v: abs_max_int_quant(v, bw, dim, True, True, 1e-10, "round", True), w, g, None
        )
        want = _grads(
            lambda v: ref_abs_max_int_quant(v, bw, dim, True, True, 1e-10, "round", True),
            w,
            g,
            None,
        )
        torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_subnormal_weights_vs_composition(dtype):
    """Subnormal weights (issue 29): channel 0's max|w| is normal, channel 1's subnormal and
    lifted by scaling_min_val (Brevitas's stock 1e-10; 1e-2 in float16, which holds no 1e-10).
    Values bit for bit, w's gradient finite and the composition's. Without scaling_min_val
    channel 1's scale is subnormal: the op raises, where the composition's scale gradient
    overflows ((w / s) / s) and w's gradient at that channel's maximum is not finite."""
    tiny, eps = torch.finfo(dtype).tiny, torch.finfo(dtype).eps
    w = torch.tensor(
        [[0.5, -tiny / 4, 0.25, tiny * eps], [tiny / 4, -tiny / 2, 0.0, 3 * tiny / 4]],
        dtype=torch.float64,
    ).to(dtype)
    min_val = 1e-2 if dtype == torch.float16 else 1e-10
    bw = torch.tensor(8.0, dtype=dtype)
    g = rand(w.shape, seed=3).to(dtype)
    tol = {torch.float32: F32_GRAD_TOL, torch.float64: dict(rtol=1e-12, atol=1e-12)}
    for dim in (None, 0):
        y, s = abs_max_int_quant(w, bw, dim, True, True, min_val, "round", False)
        ry, rs = ref_abs_max_int_quant(w, bw, dim, True, True, min_val, "round", False)
        assert_bitwise(s, rs)
        assert_bitwise(y, ry)
        got = _grads(
            lambda v: abs_max_int_quant(v, bw, dim, True, True, min_val, "round", False), w, g, None
        )
        want = _grads(
            lambda v: ref_abs_max_int_quant(v, bw, dim, True, True, min_val, "round", False),
            w,
            g,
            None,
        )
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, want, **tol.get(dtype, dict(rtol=1e-2, atol=1e-2)))
    with pytest.raises(RuntimeError, match="abs_max_int_quant: the scale .* in channel 1"):
        abs_max_int_quant(w, bw, 0, True, True, None)
    want = _grads(lambda v: ref_abs_max_int_quant(v, bw, 0, True, True, None), w, g, None)
    assert not torch.isfinite(want[1]).all()


def test_per_tensor_gradient_spread_over_ties():
    """torch.max over everything gives each tied maximum an equal share."""
    w = torch.tensor([0.5, -2.0, 2.0, 1.0, -2.0], dtype=torch.float64, requires_grad=True)
    _, s = abs_max_int_quant(w, torch.tensor(8.0, dtype=torch.float64), None, True, True)
    s.backward()
    share = 1.0 / 127.0 / 3.0
    torch.testing.assert_close(
        w.grad, torch.tensor([0.0, -share, share, 0.0, -share], dtype=torch.float64)
    )


def test_per_channel_gradient_to_first_maximum():
    """torch.max(dim) sends a channel's gradient to the index it returns: the first maximum."""
    w = torch.tensor([[1.0, -3.0, 3.0], [2.0, 2.0, -2.0]], dtype=torch.float64, requires_grad=True)
    _, s = abs_max_int_quant(w, torch.tensor(8.0, dtype=torch.float64), 0, True, False)
    s.sum().backward()
    want = torch.tensor([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0]], dtype=torch.float64) / 128.0
    torch.testing.assert_close(w.grad, want)


@pytest.mark.parametrize("dim", [None, 0, 1])
def test_gradcheck_scale(dim):
    """The scale is a smooth function of w where the max is unique and above scaling_min_val."""
    w = _w((4, 6), torch.float64, seed=11).requires_grad_()
    bw = torch.tensor(5.0, dtype=torch.float64)
    assert torch.autograd.gradcheck(
        lambda v: abs_max_int_quant(v, bw, dim, True, True, 1e-10, "round", True)[1], (w,)
    )


def test_gradcheck_y_where_round_is_straight_through():
    """y's gradient is the STE one: check it against the composition's autograd in float64."""
    w = _w((5, 7), torch.float64, seed=12).requires_grad_()
    bw = torch.tensor(4.0, dtype=torch.float64)
    (got,) = torch.autograd.grad(abs_max_int_quant(w, bw, 0, True, True)[0].sum(), w)
    w2 = w.detach().clone().requires_grad_()
    (want,) = torch.autograd.grad(ref_abs_max_int_quant(w2, bw, 0, True, True)[0].sum(), w2)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_no_graph_under_no_grad_or_without_requires_grad():
    w = _w((4, 3), torch.float32).requires_grad_()
    with torch.no_grad():
        y, s = abs_max_int_quant(w, torch.tensor(8.0), 0, True, True)
    assert y.grad_fn is None and s.grad_fn is None
    y, s = abs_max_int_quant(w.detach(), torch.tensor(8.0), 0, True, True)
    assert y.grad_fn is None


def test_backward_op_vs_composite():
    w = _w((6, 5), torch.float64, seed=13, ties=True)
    g = rand(w.shape, dtype=torch.float64, seed=14)
    bw = torch.tensor(6.0, dtype=torch.float64)
    for dim in (None, 0, 1):
        _, s = OPS.abs_max_int_quant(w, bw, dim, True, True, None, "floor", False)
        gs = rand(s.shape, dtype=torch.float64, seed=15)
        args = (g, gs, w, s, bw, dim, True, True, None, "floor", False)
        got = OPS._abs_max_int_quant_backward(*args)
        want = OPS._abs_max_int_quant_backward.default._op_dk(
            torch._C.DispatchKey.CompositeExplicitAutograd, *args
        )
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


# ---- opcheck ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dim", [None, 0, -1])
@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("noncontig", [False, True])
def test_opcheck(dim, requires_grad, noncontig):
    w = _w((4, 12, 5), torch.float32, seed=16)
    if noncontig:
        w = w[:, ::2, :]
    if requires_grad:
        w = w.clone().requires_grad_()
    torch.library.opcheck(
        OPS.abs_max_int_quant, (w, torch.tensor(4.0), dim, True, True, 1e-10, "round", True)
    )
    torch.library.opcheck(
        OPS.abs_max_int_quant, (w, torch.tensor(3.0), dim, False, False, None, "dpu", False)
    )


@pytest.mark.parametrize("dim", [None, 0])
def test_opcheck_backward(dim):
    w = _w((4, 6, 5), torch.float32, seed=17)
    bw = torch.tensor(5.0)
    _, s = OPS.abs_max_int_quant(w, bw, dim, True, True)
    g, gs = rand(w.shape, seed=18), rand(s.shape, seed=19)
    torch.library.opcheck(
        OPS._abs_max_int_quant_backward,
        (g, gs, w, s, bw, dim, True, True, None, "round", True),
        test_utils=NO_AOT,
    )


@pytest.mark.parametrize("dim", [None, 0])
def test_backward_without_grad_scale_is_zeros_added(dim):
    """grad_scale None (the scale output got no gradient) is a zero gradient added, bit for
    bit, in the CPU and composite kernels; the autograd kernel then makes no zeros."""
    w = _w((6, 5, 3), torch.float64, seed=21, ties=True)
    bw = torch.tensor(5.0, dtype=torch.float64)
    _, s = OPS.abs_max_int_quant(w, bw, dim, True, True, None, "round", False)
    g = rand(w.shape, dtype=torch.float64, seed=22)
    tail = (w, s, bw, dim, True, True, None, "round", False)
    want = OPS._abs_max_int_quant_backward(g, torch.zeros_like(s), *tail)
    assert_bitwise(OPS._abs_max_int_quant_backward(g, None, *tail), want)
    composite = OPS._abs_max_int_quant_backward.default._op_dk(
        torch._C.DispatchKey.CompositeExplicitAutograd, g, None, *tail
    )
    torch.testing.assert_close(composite, want, rtol=1e-12, atol=1e-12)
    torch.library.opcheck(OPS._abs_max_int_quant_backward, (g, None, *tail), test_utils=NO_AOT)
    wl = w.clone().requires_grad_()
    y, _ = OPS.abs_max_int_quant(wl, bw, dim, True, True, None, "round", False)
    with RecordedCalls() as calls:
        y.backward(g)
    assert "aten.zeros.default" not in calls.names and "aten.zeros_like.default" not in calls.names
    assert_bitwise(wl.grad, want)


def test_meta_shapes():
    w = torch.empty(8, 4, 3, 3, device="meta")
    y, s = OPS.abs_max_int_quant(w, torch.tensor(8.0, device="meta"), 0, True, True)
    assert y.shape == w.shape and s.shape == (8, 1, 1, 1) and s.device.type == "meta"
    y, s = OPS.abs_max_int_quant(w, torch.tensor(8.0, device="meta"), None, True, True)
    assert s.shape == ()


def test_compile_matches_eager():
    w = _w((8, 4, 3, 3), torch.float32, seed=20).requires_grad_()
    bw = torch.tensor(8.0)

    def f(v):
        y, s = abs_max_int_quant(v, bw, 0, True, True, 1e-10, "round", True)
        return (y * 2).sum() + s.sum()

    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    (ge,) = torch.autograd.grad(f(w), w)
    (gc,) = torch.autograd.grad(compiled(w), w)
    assert torch.equal(ge, gc)


# ---- bad input -------------------------------------------------------------------------------


def _call(w=None, bw=None, dim=0, min_val=None, mode="round"):
    w = _w((4, 3), torch.float32) if w is None else w
    bw = torch.tensor(8.0) if bw is None else bw
    return OPS.abs_max_int_quant(w, bw, dim, True, True, min_val, mode, False)


@pytest.mark.parametrize(
    "kwargs,fragments",
    [
        (dict(w=torch.ones(4, 3, dtype=torch.int32)), ("abs_max_int_quant", "w", "floating")),
        (dict(w=torch.ones(0, 3)), ("abs_max_int_quant", "w must not be empty")),
        (dict(dim=2), ("abs_max_int_quant", "channel_dim", "got 2")),
        (dict(dim=-3), ("abs_max_int_quant", "channel_dim", "got -3")),
        (dict(min_val=-1.0), ("abs_max_int_quant", "scaling_min_val", ">= 0")),
        (dict(min_val=float("nan")), ("abs_max_int_quant", "scaling_min_val")),
        (
            dict(w=torch.ones(4, 3).half(), min_val=1e6),
            ("abs_max_int_quant", "scaling_min_val", "overflow"),
        ),
        (dict(bw=torch.tensor([8.0, 8.0])), ("abs_max_int_quant", "bit_width")),
        (dict(bw=torch.tensor(0.0)), ("abs_max_int_quant", "bit_width")),
        (dict(bw=torch.tensor(33.0)), ("abs_max_int_quant", "bit_width")),
        (dict(bw=torch.tensor(8.0, device="meta")), ("abs_max_int_quant", "bit_width", "device")),
        (dict(mode="nearest"), ("abs_max_int_quant", "rounding_mode")),
        (dict(w=torch.zeros(4, 3)), ("abs_max_int_quant", "scale", "normal positive finite")),
        (
            dict(w=torch.full((4, 3), float("nan"))),
            ("abs_max_int_quant", "scale", "normal positive finite"),
        ),
    ],
)
def test_bad_input(kwargs, fragments):
    with pytest.raises(RuntimeError) as info:
        _call(**kwargs)
    for f in fragments:
        assert f in str(info.value), (f, str(info.value))


def test_bad_bit_width_requires_grad():
    with pytest.raises(RuntimeError, match="bit_width must not require grad"):
        _call(bw=torch.tensor(8.0, requires_grad=True))


def test_bad_input_backward_op():
    w = _w((4, 3), torch.float32)
    bw = torch.tensor(8.0)
    _, s = OPS.abs_max_int_quant(w, bw, 0, True, True)
    g, gs = torch.ones_like(w), torch.ones_like(s)
    op = OPS._abs_max_int_quant_backward
    cases = [
        ((torch.ones(3, 4), gs, w, s), "grad of shape"),
        ((g, torch.ones(3), w, s), "grad_scale of shape"),
        ((g, gs, w, torch.ones(())), "scale of shape"),
        ((g.double(), gs, w, s), "grad"),
    ]
    for (a, b, c, d), text in cases:
        with pytest.raises(RuntimeError, match=text):
            op(a, b, c, d, bw, 0, True, True, None, "round", False)
