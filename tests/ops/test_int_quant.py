"""int_quant and its internal ops (_int_quant_with_mask, _int_quant_backward).

Every result is checked against the unfused Brevitas composition (helpers.ref_int_quant:
IntQuant.to_int + tensor_clamp + max_int/min_int), never against the op itself:

    t = x / s;  u = t + z;  r = round_mode(u)            (STE in backward)
    c = where(r > max_int, max_int, r);  c = where(c < min_int, min_int, c)
    y = (c - z) * s
"""

import pytest
import torch
from helpers import (
    DTYPES,
    MASKS4,
    MODES,
    ROUND,
    assert_bitwise,
    backward_op_utils,
    grads,
    param_shape,
    rand,
    rand_pos,
    ref_int_quant,
    ref_max_int,
    ref_min_int,
)

import brevitas_cpp  # noqa: F401  (registers the ops)
from brevitas_cpp.function import int_quant

OPS = torch.ops.brevitas_cpp
SIGNED_NARROW = [(True, False), (True, True), (False, False), (False, True)]
BIT_WIDTHS = [1, 2, 3, 4, 5, 6, 7, 8, 16, 24, 32]


# ---- reference composition (ref_int_quant is in helpers.py) --------------------------------


def ref_pass_mask(x, scale, zero_point, bit_width, signed, narrow_range, rounding_mode="round"):
    r = ROUND[rounding_mode.lower()](x / scale + zero_point)
    hi = ref_max_int(signed, narrow_range, bit_width).type_as(r)
    lo = ref_min_int(signed, narrow_range, bit_width).type_as(r)
    c1 = torch.where(r > hi, hi, r)
    return ~((r > hi) | (c1 < lo))


def _bw(b, dtype=torch.float32):
    return (
        torch.tensor(float(b), dtype=dtype)
        if dtype.is_floating_point
        else torch.tensor(b, dtype=dtype)
    )


def _u_values(lo, hi):
    """Values of x/s + z: ties +-(k + .5), near-ties, integers, clamp edges, far beyond, infinities."""
    ks = [float(k) for k in range(0, 9)]
    v = []
    for k in ks:
        v += [k + 0.5, -(k + 0.5), k, -k, k + 0.25, -(k + 0.75)]
    v += [
        hi - 0.5,
        hi,
        hi + 0.5,
        hi + 1.0,
        hi + 1.5,
        hi - 1.5,
        lo + 0.5,
        lo,
        lo - 0.5,
        lo - 1.0,
        lo - 1.5,
        lo + 1.5,
    ]
    v += [4.0 * hi + 3.0, 4.0 * lo - 3.0, 1e6, -1e6, 3e8, -3e8, float("inf"), float("-inf"), -0.0]
    g = torch.Generator().manual_seed(int(hi) % 1000 + 7)
    span = max(hi - lo, 1.0)
    v += (torch.rand(64, generator=g, dtype=torch.float64) * (span + 6.0) + (lo - 3.0)).tolist()
    return torch.tensor(v, dtype=torch.float64)


def _int_range(b, signed, narrow):
    if signed:
        return -(2.0 ** (b - 1)) + (1.0 if narrow else 0.0), 2.0 ** (b - 1) - 1.0
    return 0.0, 2.0**b - (2.0 if narrow else 1.0)


# ---- forward -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("signed,narrow", SIGNED_NARROW)
def test_forward_bitwise_vs_composition(dtype, mode, signed, narrow):
    for b in BIT_WIDTHS:
        lo, hi = _int_range(b, signed, narrow)
        u = _u_values(lo, hi)
        # (scale, zero_point): scale 1 and powers of two keep x/s + z exact (ties stay ties),
        # a non-power-of-two scale and fractional zero point check the general path.
        for s, z in [(1.0, 0.0), (0.25, 0.0), (2.0**-3, 2.0), (8.0, -3.0), (0.37, 1.5)]:
            x = ((u - z) * s).to(dtype)
            scale = torch.tensor(s, dtype=dtype)
            zp = torch.tensor(z, dtype=dtype)
            bw = _bw(b)
            y = int_quant(x, scale, zp, bw, signed, narrow, mode)
            ref = ref_int_quant(x, scale, zp, bw, signed, narrow, mode)
            assert_bitwise(y, ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_forward_ties_pinned(dtype):
    """Explicit tie results, independent of the reference: k + .5 and -(k + .5)."""
    x = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, -3.5], dtype=dtype)
    one, zero, bw = torch.tensor(1.0, dtype=dtype), torch.tensor(0.0, dtype=dtype), _bw(8)
    want = {
        "round": [0.0, 2.0, 2.0, -0.0, -2.0, -2.0, 4.0, -4.0],
        "ceil": [1.0, 2.0, 3.0, -0.0, -1.0, -2.0, 4.0, -3.0],
        "floor": [0.0, 1.0, 2.0, -1.0, -2.0, -3.0, 3.0, -4.0],
        "round_to_zero": [0.0, 1.0, 2.0, -0.0, -1.0, -2.0, 3.0, -3.0],
        "dpu": [0.0, 2.0, 2.0, 0.0, -1.0, -2.0, 4.0, -3.0],
    }
    for mode, w in want.items():
        y = int_quant(x, one, zero, bw, True, False, mode)
        assert torch.equal(y, torch.tensor(w, dtype=dtype)), (mode, y)


@pytest.mark.parametrize("name", ["ROUND", "Ceil", "FLOOR", "Round_To_Zero", "DPU", "dPu"])
def test_rounding_mode_case_insensitive(name):
    x = (torch.arange(-40, 40, dtype=torch.float32) / 4.0).reshape(8, 10)
    s, z, bw = torch.tensor(0.5), torch.tensor(1.0), _bw(3)
    y = int_quant(x, s, z, bw, True, False, name)
    assert_bitwise(y, ref_int_quant(x, s, z, bw, True, False, name.lower()))
    assert_bitwise(
        OPS.int_quant(x, s, z, bw, True, False, name, True),
        ref_int_quant(x, s, z, bw, True, False, name),
    )


def test_default_arguments():
    x = torch.randn(4, 6) * 3
    s, z, bw = torch.tensor(0.2), torch.tensor(0.0), _bw(4)
    assert_bitwise(
        OPS.int_quant(x, s, z, bw, True, False), ref_int_quant(x, s, z, bw, True, False, "round")
    )


def test_max_int_32_bit_rounds_like_composition():
    # 2**32 - 1 in float32 bit_width is 4294967296: values in between are not clamped to 4294967295.
    x = torch.tensor([4294967295.0, 4294967296.0, 5e9, 1e10, -1.0, 3e9], dtype=torch.float32)
    one, zero = torch.tensor(1.0), torch.tensor(0.0)
    y = int_quant(x, one, zero, _bw(32), False, False)
    assert_bitwise(y, ref_int_quant(x, one, zero, _bw(32), False, False))
    assert y[2].item() == 4294967296.0 and y[4].item() == 0.0
    xd = x.double()
    yd = int_quant(xd, one.double(), zero.double(), _bw(32, torch.float64), False, False)
    assert_bitwise(
        yd, ref_int_quant(xd, one.double(), zero.double(), _bw(32, torch.float64), False, False)
    )
    assert yd[2].item() == 4294967295.0


@pytest.mark.parametrize(
    "bw_dtype",
    [
        torch.float32,
        torch.float64,
        torch.float16,
        torch.bfloat16,
        torch.int64,
        torch.int32,
        torch.int16,
    ],
)
def test_bit_width_dtypes(bw_dtype):
    """max_int/min_int are computed in bit_width's dtype, then cast to x's (as the composition does)."""
    for b in [1, 2, 4, 8, 9, 12, 15]:
        for signed, narrow in SIGNED_NARROW:
            lo, hi = _int_range(b, signed, narrow)
            x = _u_values(lo, hi).float() * 0.5
            s, z = torch.tensor(0.5), torch.tensor(0.0)
            bw = _bw(b, bw_dtype)
            for bw_shape in [(), (1,)]:
                bwv = bw.reshape(bw_shape)
                y = int_quant(x, s, z, bwv, signed, narrow, "round")
                assert_bitwise(y, ref_int_quant(x, s, z, bwv, signed, narrow, "round"))


@pytest.mark.parametrize("b", [16, 17, 24, 31])
@pytest.mark.parametrize("bw_dtype", [torch.float16, torch.bfloat16, torch.int64])
def test_wide_bit_width_in_narrow_dtypes(b, bw_dtype):
    for signed, narrow in SIGNED_NARROW:
        lo, hi = _int_range(b, signed, narrow)
        u = _u_values(lo, hi)
        for dtype in [torch.float32, torch.float16]:
            x = u.to(dtype)
            s, z = torch.tensor(1.0, dtype=dtype), torch.tensor(0.0, dtype=dtype)
            bw = _bw(b, bw_dtype)
            assert_bitwise(
                int_quant(x, s, z, bw, signed, narrow), ref_int_quant(x, s, z, bw, signed, narrow)
            )


def test_nan_propagates():
    x = torch.tensor([float("nan"), 1.0, -1.0, float("nan"), 100.0, -100.0])
    for mode in MODES:
        for clamp_ste in (False, True):
            y = int_quant(
                x, torch.tensor(0.5), torch.tensor(1.0), _bw(4), True, False, mode, clamp_ste
            )
            assert torch.isnan(y[0]) and torch.isnan(y[3])
            assert not torch.isnan(y[[1, 2, 4, 5]]).any()
            assert_bitwise(
                y, ref_int_quant(x, torch.tensor(0.5), torch.tensor(1.0), _bw(4), True, False, mode)
            )


@pytest.mark.parametrize("clamp_ste", [False, True])
def test_infinities_saturate(clamp_ste):
    """+-inf (e.g. float16 overflow upstream) clamps to the range ends; the clamp masks the
    gradient unless clamp_ste, which passes it through."""
    x = torch.tensor([-float("inf"), 1.3, float("inf")], requires_grad=True)
    s, z = torch.tensor(0.5), torch.tensor(0.0)
    y = int_quant(x, s, z, _bw(4), True, False, "round", clamp_ste)
    assert torch.equal(y.detach(), torch.tensor([-8.0 * 0.5, 3.0 * 0.5, 7.0 * 0.5]))
    g = torch.tensor([2.0, 3.0, 5.0])
    y.backward(g)
    inside = torch.tensor([0.0, 1.0, 0.0]) if not clamp_ste else torch.ones(3)
    assert torch.equal(x.grad, (g * s) / s * inside)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_empty_input(dtype):
    for shape in [(0,), (3, 0, 2)]:
        x = torch.empty(shape, dtype=dtype)
        s = torch.ones(3, 1, 1, dtype=dtype) if len(shape) == 3 else torch.tensor(1.0, dtype=dtype)
        y = int_quant(x, s, torch.tensor(0.0, dtype=dtype), _bw(4), True, False)
        assert y.shape == x.shape and y.dtype == dtype


def test_empty_input_gradients_are_zero():
    x = torch.empty(3, 0, 2, requires_grad=True)
    s = torch.full((3, 1, 1), 0.5, requires_grad=True)
    z = torch.zeros(1, requires_grad=True)
    bw = torch.tensor(4.0, requires_grad=True)
    y = int_quant(x, s, z, bw, True, False)
    y.sum().backward()
    assert x.grad.shape == x.shape
    assert torch.equal(s.grad, torch.zeros(3, 1, 1))
    assert torch.equal(z.grad, torch.zeros(1))
    assert torch.equal(bw.grad, torch.zeros(()))


# ---- broadcasting and layout ---------------------------------------------------------------


def _rand(shape, dtype=torch.float32, seed=0, spread=6.0):
    # Wider than helpers.rand's default (1.0), so that x / scale reaches the clamp bounds.
    return rand(shape, dtype, seed, spread)


def _ints(shape, dtype=torch.float32, seed=2, lo=-2, hi=3):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(lo, hi, shape, generator=g).to(dtype)


BROADCAST_CASES = {
    "per_tensor_0d": ((4, 3, 5), (), ()),
    "per_tensor_1": ((4, 3, 5), (1,), (1,)),
    "conv_weight_dim0": ((6, 3, 3, 3), (6, 1, 1, 1), (6, 1, 1, 1)),
    "activation_dim1": ((2, 5, 4, 4), (1, 5, 1, 1), (1, 5, 1, 1)),
    "linear_last_dim": ((7, 9), (1, 9), (1, 9)),
    "linear_last_dim_1d": ((7, 9), (9,), (9,)),
    "scale_per_channel_zp_per_tensor": ((6, 3, 4), (6, 1, 1), ()),
    "scale_per_tensor_zp_per_channel": ((6, 3, 4), (1,), (1, 3, 1)),
    "scale_dim0_zp_dim2": ((6, 3, 4), (6, 1, 1), (4,)),
    "scale_2d_block": ((5, 6, 7), (5, 6, 1), (1, 6, 7)),
    "middle_dim_3d": ((3, 8, 5), (8, 1), (1,)),
}


@pytest.mark.parametrize("case", list(BROADCAST_CASES), ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_broadcast_forward(case, dtype):
    xs, ss, zs = BROADCAST_CASES[case]
    x = _rand(xs, dtype)
    s, z = rand_pos(ss, dtype), _ints(zs, dtype)
    for mode in ["round", "dpu"]:
        y = int_quant(x, s, z, _bw(4), True, False, mode)
        assert y.shape == x.shape
        assert_bitwise(y, ref_int_quant(x, s, z, _bw(4), True, False, mode))


def test_per_group_through_view():
    C, G, K = 4, 3, 8
    w = _rand((C, G * K))
    x = w.view(C, G, K)
    s, z = rand_pos((C, G, 1)), _ints((C, G, 1), lo=0, hi=4)
    y = int_quant(x, s, z, _bw(3), False, False, "floor").view(C, G * K)
    assert_bitwise(y, ref_int_quant(x, s, z, _bw(3), False, False, "floor").view(C, G * K))


def _layouts():
    base = _rand((4, 6, 5, 3))
    cl = base.contiguous(memory_format=torch.channels_last)
    return {
        "contiguous": base,
        "channels_last": cl,
        "permuted": base.permute(2, 0, 3, 1),
        "transposed": base.transpose(0, 1),
        "sliced": base[:, 1:5:2, :, 1:],
        "expanded": _rand((1, 6, 5, 1)).expand(4, 6, 5, 3),
        "step_slice": base[::2, :, :, ::2],
    }


@pytest.mark.parametrize("layout", list(_layouts()), ids=str)
@pytest.mark.parametrize("param_dim", [None, 0, 1, 3])
def test_layouts_forward_and_strides(layout, param_dim):
    x = _layouts()[layout]
    pshape = param_shape(x, param_dim)
    s, z = rand_pos(pshape), _ints(pshape)
    y = int_quant(x, s, z, _bw(5), True, True, "round_to_zero")
    assert_bitwise(y, ref_int_quant(x, s, z, _bw(5), True, True, "round_to_zero"))
    assert y.stride() == torch.empty_like(x).stride()
    ym, mask = OPS._int_quant_with_mask(x, s, z, _bw(5), True, True, "round_to_zero")
    assert torch.equal(ym, y) and ym.stride() == y.stride()
    assert (
        mask.dtype == torch.bool and mask.stride() == torch.empty_like(x, dtype=torch.bool).stride()
    )
    assert torch.equal(mask, ref_pass_mask(x, s, z, _bw(5), True, True, "round_to_zero"))


def test_channels_last_per_channel_activation():
    x = _rand((2, 8, 5, 5)).contiguous(memory_format=torch.channels_last)
    s, z = rand_pos((1, 8, 1, 1)), _ints((1, 8, 1, 1), lo=0, hi=3)
    y = int_quant(x, s, z, _bw(8), False, False)
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert_bitwise(y, ref_int_quant(x, s, z, _bw(8), False, False))


def test_non_contiguous_params():
    x = _rand((5, 6))
    s = rand_pos((2, 6))[:1, :]
    s_strided = rand_pos((6, 2))[:, 0].reshape(1, 6)
    z = _ints((6, 3))[:, 1].reshape(1, 6)
    for sc in [s, s_strided]:
        assert_bitwise(
            int_quant(x, sc, z, _bw(4), True, False), ref_int_quant(x, sc, z, _bw(4), True, False)
        )


def test_meta_tensors_shape_and_strides():
    x = torch.empty(2, 4, 3, 3, device="meta").contiguous(memory_format=torch.channels_last)
    s = torch.empty(1, 4, 1, 1, device="meta")
    z = torch.empty((), device="meta")
    bw = torch.empty((), device="meta")
    y = OPS.int_quant(x, s, z, bw, True, False, "round", False)
    assert (
        y.device.type == "meta"
        and y.shape == x.shape
        and y.stride() == torch.empty_like(x).stride()
    )
    y2, m = OPS._int_quant_with_mask(x, s, z, bw, True, False, "round")
    assert m.dtype == torch.bool and y2.stride() == x.stride() and m.stride() == x.stride()


# ---- gradients -------------------------------------------------------------------------------


GRAD_CASES = {
    "per_tensor": ((5, 7), (), (1,)),
    "per_channel_dim0": ((4, 3, 2, 2), (4, 1, 1, 1), (4, 1, 1, 1)),
    "per_channel_dim1": ((2, 4, 3, 3), (1, 4, 1, 1), ()),
    "per_group": ((3, 4, 5), (3, 4, 1), (3, 4, 1)),
}


def _grad_inputs(case, dtype, seed=0):
    xs, ss, zs = GRAD_CASES[case]
    x = _rand(xs, dtype, seed=seed, spread=2.0)
    s = rand_pos(ss, dtype, seed=seed + 1) * 0.5
    z = _ints(zs, dtype, seed=seed + 2, lo=-1, hi=2)
    g = _rand(xs, dtype, seed=seed + 3, spread=1.0)
    return x, s, z, g


def _tols(dtype):
    return dict(rtol=1e-10, atol=1e-10) if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("clamp_ste", [False, True])
@pytest.mark.parametrize("case", list(GRAD_CASES))
def test_gradients_vs_composition(dtype, clamp_ste, case):
    x, s, z, g = _grad_inputs(case, dtype)
    for mode in MODES:
        for signed, narrow in SIGNED_NARROW:
            for b in (2, 4):
                bw = torch.tensor(float(b))

                def op(x_, s_, z_, b_):
                    return int_quant(x_, s_, z_, b_, signed, narrow, mode, clamp_ste)

                def ref(x_, s_, z_, b_):
                    return ref_int_quant(x_, s_, z_, b_, signed, narrow, mode, clamp_ste)

                y, (gx, gs, gz, gb) = grads(op, (x, s, z, bw), g, (True, True, True, True))
                yr, (rx, rs, rz, rb) = grads(ref, (x, s, z, bw), g, (True, True, True, True))
                assert_bitwise(y, yr, signed_zero=False)  # the STE reference adds +0
                assert torch.equal(gx, rx), (mode, signed, narrow, b)
                torch.testing.assert_close(gs, rs, **_tols(dtype))
                torch.testing.assert_close(gz, rz, **_tols(dtype))
                if clamp_ste:
                    assert gb is None and rb is None
                else:
                    assert gb is not None and gb.shape == bw.shape
                    torch.testing.assert_close(
                        gb, rb, rtol=1e-5 if dtype == torch.float32 else 1e-6, atol=1e-4
                    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_gradients_reduced_precision(dtype):
    x, s, z, g = _grad_inputs("per_channel_dim1", dtype)
    bw = torch.tensor(4.0)
    for clamp_ste in (False, True):
        y, (gx, gs, gz, gb) = grads(
            lambda a, b_, c, d: int_quant(a, b_, c, d, True, False, "round", clamp_ste),
            (x, s, z, bw),
            g,
            (1, 1, 1, 1),
        )
        yr, (rx, rs, rz, rb) = grads(
            lambda a, b_, c, d: ref_int_quant(a, b_, c, d, True, False, "round", clamp_ste),
            (x, s, z, bw),
            g,
            (1, 1, 1, 1),
        )
        assert_bitwise(y, yr, signed_zero=False)  # the STE reference adds +0
        assert torch.equal(gx, rx)
        torch.testing.assert_close(gs, rs, rtol=2e-2, atol=5e-2)
        torch.testing.assert_close(gz, rz, rtol=2e-2, atol=5e-2)
        if not clamp_ste:
            torch.testing.assert_close(gb, rb, rtol=2e-2, atol=5e-2)


@pytest.mark.parametrize("bw_shape", [(), (1,)])
@pytest.mark.parametrize("bw_dtype", [torch.float32, torch.float64])
def test_bit_width_gradient_shape_and_dtype(bw_shape, bw_dtype):
    x, s, z, g = _grad_inputs("per_tensor", torch.float32)
    x = x * 4  # plenty of clamping on both sides
    bw = torch.tensor(3.0, dtype=bw_dtype).reshape(bw_shape)
    for signed, narrow in SIGNED_NARROW:
        _, (_, _, _, gb) = grads(
            lambda a, b_, c, d: int_quant(a, b_, c, d, signed, narrow),
            (x, s, z, bw),
            g,
            (0, 0, 0, 1),
        )
        _, (_, _, _, rb) = grads(
            lambda a, b_, c, d: ref_int_quant(a, b_, c, d, signed, narrow),
            (x, s, z, bw),
            g,
            (0, 0, 0, 1),
        )
        assert gb.shape == bw.shape and gb.dtype == bw_dtype
        assert rb.abs().sum() > 0
        torch.testing.assert_close(gb, rb, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("clamp_ste", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_only_x_requires_grad(clamp_ste, dtype):
    x, s, z, g = _grad_inputs("per_channel_dim0", dtype)
    bw = torch.tensor(3.0)
    for mode in MODES:
        y, (gx, gs, gz, gb) = grads(
            lambda a, b_, c, d: int_quant(a, b_, c, d, True, False, mode, clamp_ste),
            (x, s, z, bw),
            g,
            (1, 0, 0, 0),
        )
        yr, (rx, *_) = grads(
            lambda a, b_, c, d: ref_int_quant(a, b_, c, d, True, False, mode, clamp_ste),
            (x, s, z, bw),
            g,
            (1, 0, 0, 0),
        )
        assert_bitwise(y, yr, signed_zero=False)  # the STE reference adds +0
        assert torch.equal(gx, rx)
        assert gs is None and gz is None and gb is None


@pytest.mark.parametrize("clamp_ste", [False, True])
def test_only_scale_requires_grad(clamp_ste):
    x, s, z, g = _grad_inputs("per_channel_dim1", torch.float64)
    bw = torch.tensor(3.0)
    _, (gx, gs, gz, gb) = grads(
        lambda a, b_, c, d: int_quant(a, b_, c, d, True, True, "ceil", clamp_ste),
        (x, s, z, bw),
        g,
        (0, 1, 0, 0),
    )
    _, (_, rs, _, _) = grads(
        lambda a, b_, c, d: ref_int_quant(a, b_, c, d, True, True, "ceil", clamp_ste),
        (x, s, z, bw),
        g,
        (0, 1, 0, 0),
    )
    assert gx is None and gz is None and gb is None
    torch.testing.assert_close(gs, rs, rtol=1e-10, atol=1e-10)


def test_only_bit_width_requires_grad():
    x, s, z, g = _grad_inputs("per_tensor", torch.float32)
    x = x * 3
    bw = torch.tensor(2.0)
    _, (_, _, _, gb) = grads(
        lambda a, b_, c, d: int_quant(a, b_, c, d, False, True), (x, s, z, bw), g, (0, 0, 0, 1)
    )
    _, (_, _, _, rb) = grads(
        lambda a, b_, c, d: ref_int_quant(a, b_, c, d, False, True), (x, s, z, bw), g, (0, 0, 0, 1)
    )
    torch.testing.assert_close(gb, rb, rtol=1e-5, atol=1e-4)
    # clamp_ste: the bounds get no gradient.
    b2 = torch.tensor(2.0, requires_grad=True)
    y = int_quant(x, s, z, b2, False, True, "round", True)
    if y.requires_grad:
        y.backward(g)
    assert b2.grad is None


def test_non_contiguous_gradients():
    base = _rand((4, 6, 5), spread=2.0)
    for x0 in [base.transpose(0, 2), base[:, ::2, 1:], base.permute(1, 0, 2)]:
        pshape = [1, 1, x0.shape[2]]
        s, z = rand_pos(pshape) * 0.5, _ints(pshape, lo=-1, hi=2)
        g = _rand(x0.shape, seed=9, spread=1.0)
        bw = torch.tensor(3.0)
        for clamp_ste in (False, True):
            y, (gx, gs, gz, gb) = grads(
                lambda a, b_, c, d: int_quant(a, b_, c, d, True, False, "dpu", clamp_ste),
                (x0, s, z, bw),
                g,
                (1,) * 4,
            )
            yr, (rx, rs, rz, rb) = grads(
                lambda a, b_, c, d: ref_int_quant(a, b_, c, d, True, False, "dpu", clamp_ste),
                (x0, s, z, bw),
                g,
                (1,) * 4,
            )
            assert_bitwise(y, yr, signed_zero=False)  # the STE reference adds +0
            assert torch.equal(gx, rx)
            torch.testing.assert_close(gs, rs, **_tols(torch.float32))
            torch.testing.assert_close(gz, rz, **_tols(torch.float32))
    # A non-contiguous upstream gradient.
    x = _rand((6, 5), spread=2.0).requires_grad_()
    s = rand_pos((6, 1)) * 0.5
    g = _rand((5, 6), seed=3).t()
    int_quant(x, s, torch.tensor(0.0), torch.tensor(4.0), True, False).backward(g)
    xr = x.detach().clone().requires_grad_()
    ref_int_quant(xr, s, torch.tensor(0.0), torch.tensor(4.0), True, False).backward(g)
    assert torch.equal(x.grad, xr.grad)


def test_backward_ops_not_differentiable_twice():
    x = _rand((4, 5)).requires_grad_()
    s = torch.tensor(0.3, requires_grad=True)
    y = int_quant(x, s, torch.tensor(0.0), torch.tensor(4.0), True, False)
    (gx,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    assert gx.requires_grad
    with pytest.raises(
        RuntimeError, match=r"derivative for brevitas_cpp::_int_quant_backward is not implemented"
    ):
        gx.sum().backward()
    ym, _ = OPS._int_quant_with_mask(
        x, s, torch.tensor(0.0), torch.tensor(4.0), True, False, "round"
    )
    with pytest.raises(
        RuntimeError, match=r"derivative for brevitas_cpp::_int_quant_with_mask is not implemented"
    ):
        ym.sum().backward()


# ---- saved memory --------------------------------------------------------------------------


def _record_saved(fn):
    rec = []

    def pack(t):
        rec.append((t.dtype, t.numel()))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = fn()
    return y, rec


def test_saved_only_x_grad_saves_bool_mask():
    x = _rand((10, 100)).requires_grad_()
    s, z, bw = rand_pos((10, 1)), torch.tensor(0.0), torch.tensor(4.0)
    y, rec = _record_saved(lambda: int_quant(x, s, z, bw, True, False, "round", False))
    x_sized = [d for d, n in rec if n == x.numel()]
    assert x_sized == [torch.bool], rec
    assert all(n <= 10 for d, n in rec if n != x.numel()), rec
    y.backward(torch.ones_like(y))
    xr = x.detach().clone().requires_grad_()
    ref_int_quant(xr, s, z, bw, True, False).backward(torch.ones_like(y))
    assert torch.equal(x.grad, xr.grad)


def test_saved_only_x_grad_clamp_ste_saves_nothing_x_sized():
    x = _rand((10, 100)).requires_grad_()
    s, z, bw = rand_pos((10, 1)), torch.tensor(0.0), torch.tensor(4.0)
    y, rec = _record_saved(lambda: int_quant(x, s, z, bw, True, False, "round", True))
    assert [r for r in rec if r[1] == x.numel()] == [], rec
    y.backward(torch.ones_like(y))
    xr = x.detach().clone().requires_grad_()
    ref_int_quant(xr, s, z, bw, True, False, "round", True).backward(torch.ones_like(y))
    assert torch.equal(x.grad, xr.grad)


@pytest.mark.parametrize("which", ["scale", "zero_point", "bit_width"])
def test_saved_param_grad_saves_x(which):
    x = _rand((10, 100)).requires_grad_()
    s, z, bw = rand_pos((10, 1)), torch.tensor(0.0), torch.tensor(4.0)
    {"scale": s, "zero_point": z, "bit_width": bw}[which].requires_grad_()
    _, rec = _record_saved(lambda: int_quant(x, s, z, bw, True, False))
    assert (torch.float32, x.numel()) in rec, rec
    assert (torch.bool, x.numel()) not in rec, rec


def test_no_graph_under_no_grad():
    x = _rand((10, 100)).requires_grad_()
    with torch.no_grad():
        _, rec = _record_saved(
            lambda: int_quant(
                x, torch.tensor(0.2), torch.tensor(0.0), torch.tensor(4.0), True, False
            )
        )
    assert rec == []


# ---- gradcheck -------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["per_tensor", "per_channel"])
def test_gradcheck_scale_zero_point_clamped_region(layout):
    """Finite differences only agree with the STE gradient where it is the true derivative:
    in the clamped region y = (max_int - z) * s (or min_int), smooth in scale and zero_point.
    x is chosen so x/s + z stays >= 1.25 beyond the range for every perturbation."""
    bw = torch.tensor(3.0, dtype=torch.float64)  # signed: [-4, 3]
    g = torch.Generator().manual_seed(0)
    mag = torch.rand(4, 6, generator=g, dtype=torch.float64) * 5 + 1.5
    above = torch.rand(4, 6, generator=g) > 0.5
    u = torch.where(above, 3.0 + mag, -4.0 - mag)  # target x/s + z
    shape = (4, 1) if layout == "per_channel" else ()
    s0 = torch.full(shape, 0.5, dtype=torch.float64)
    if layout == "per_channel":
        s0 = s0 + torch.arange(4.0, dtype=torch.float64).reshape(4, 1) * 0.05
    z0 = torch.full(shape, 0.25, dtype=torch.float64)
    x = (u - z0) * s0
    assert bool(((x / s0 + z0 > 3 + 1.25) | (x / s0 + z0 < -4 - 1.25)).all())
    s, z = s0.clone().requires_grad_(), z0.clone().requires_grad_()
    for mode in MODES:
        assert torch.autograd.gradcheck(
            lambda s_, z_: int_quant(x, s_, z_, bw, True, False, mode, False),
            (s, z),
            eps=1e-7,
            atol=1e-6,
        )


def test_gradcheck_scale_in_range_is_ste_not_true_derivative():
    """In range the scale gradient is the STE one; document it against the composition instead."""
    x = torch.tensor([0.3, -0.8, 1.1, -0.1], dtype=torch.float64)
    s = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    z = torch.tensor(0.0, dtype=torch.float64)
    (gs,) = torch.autograd.grad(int_quant(x, s, z, torch.tensor(8.0), True, False).sum(), s)
    sr = s.detach().clone().requires_grad_()
    (rs,) = torch.autograd.grad(ref_int_quant(x, sr, z, torch.tensor(8.0), True, False).sum(), sr)
    torch.testing.assert_close(gs, rs, rtol=1e-12, atol=1e-12)


# ---- internal ops ----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_int_quant_with_mask(mode):
    x, s, z, _ = _grad_inputs("per_channel_dim0", torch.float32)
    for signed, narrow in SIGNED_NARROW:
        y, m = OPS._int_quant_with_mask(x, s, z, _bw(3), signed, narrow, mode)
        assert_bitwise(y, ref_int_quant(x, s, z, _bw(3), signed, narrow, mode))
        assert m.dtype == torch.bool
        want = ref_pass_mask(x, s, z, _bw(3), signed, narrow, mode)
        assert torch.equal(m, want)
        assert (~want).any() and want.any()


def test_int_quant_backward_x_only_from_x_masks_clamped():
    x = torch.tensor([-10.0, -1.2, 0.3, 10.0])
    s, z, bw, g = torch.tensor(1.0), torch.tensor(0.0), torch.tensor(3.0), torch.ones(4)
    gx, _, _, _ = OPS._int_quant_backward(
        g, x, None, s, z, bw, True, False, "round", False, [True, False, False, False]
    )
    assert torch.equal(gx, torch.tensor([0.0, 1.0, 1.0, 0.0]))


@pytest.mark.parametrize("output_mask", MASKS4, ids=lambda m: "".join("1" if b else "0" for b in m))
@pytest.mark.parametrize("clamp_ste", [False, True])
def test_int_quant_backward_op(output_mask, clamp_ste, request):
    x, s, z, g = _grad_inputs("per_channel_dim1", torch.float64)
    bw = torch.tensor(3.0, dtype=torch.float64)
    xr, sr, zr, br = (t.clone().requires_grad_() for t in (x, s, z, bw))
    ref_int_quant(xr, sr, zr, br, True, False, "dpu", clamp_ste).backward(g)
    out = OPS._int_quant_backward(g, x, None, s, z, bw, True, False, "dpu", clamp_ste, output_mask)
    want = [xr.grad, sr.grad, zr.grad, br.grad]
    for i, (o, w) in enumerate(zip(out, want)):
        if not output_mask[i] or (i == 3 and clamp_ste):
            assert o is None, i
        elif i == 0:
            assert torch.equal(o, w)
        else:
            assert o.shape == w.shape
            torch.testing.assert_close(o, w, rtol=1e-10, atol=1e-10)


def test_int_quant_backward_from_mask_or_nothing():
    x, s, z, g = _grad_inputs("per_group", torch.float32)
    bw = torch.tensor(3.0)
    xr = x.clone().requires_grad_()
    ref_int_quant(xr, s, z, bw, False, False, "floor").backward(g)
    m = ref_pass_mask(x, s, z, bw, False, False, "floor")
    gx, gs, gz, gb = OPS._int_quant_backward(
        g, None, m, s, z, bw, False, False, "floor", False, [True, False, False, False]
    )
    assert torch.equal(gx, xr.grad) and gs is None and gz is None and gb is None
    # clamp_ste: x's gradient needs neither x nor the mask.
    xr2 = x.clone().requires_grad_()
    ref_int_quant(xr2, s, z, bw, False, False, "floor", True).backward(g)
    gx2, *_ = OPS._int_quant_backward(
        g, None, None, s, z, bw, False, False, "floor", True, [True, False, False, True]
    )
    assert torch.equal(gx2, xr2.grad)
    with pytest.raises(RuntimeError, match="need x"):
        OPS._int_quant_backward(
            g, None, m, s, z, bw, False, False, "floor", False, [True, True, False, False]
        )
    with pytest.raises(RuntimeError, match="needs x or mask"):
        OPS._int_quant_backward(
            g, None, None, s, z, bw, False, False, "floor", False, [True, False, False, False]
        )


# ---- opcheck ---------------------------------------------------------------------------------


def _opcheck_inputs(noncontig, requires_grad):
    x = _rand((4, 6, 5), spread=2.0)
    if noncontig:
        x = _rand((4, 12, 5), spread=2.0)[:, ::2, :]
    s = rand_pos((1, 6, 1)) * 0.5
    z = torch.zeros(())
    bw = torch.tensor(3.0)
    if requires_grad:
        x, s, z, bw = (t.clone().requires_grad_() for t in (x, s, z, bw))
    return x, s, z, bw


@pytest.mark.parametrize("noncontig", [False, True])
@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("clamp_ste", [False, True])
def test_opcheck_int_quant(noncontig, requires_grad, clamp_ste):
    x, s, z, bw = _opcheck_inputs(noncontig, requires_grad)
    torch.library.opcheck(OPS.int_quant, (x, s, z, bw, True, False, "dpu", clamp_ste))


# The internal ops are deliberately not differentiable: with inputs requiring grad,
# backward_op_utils leaves out test_aot_dispatch_dynamic; test_backward_ops_not_differentiable_twice
# pins the error instead.


@pytest.mark.parametrize("noncontig", [False, True])
@pytest.mark.parametrize("requires_grad", [False, True])
def test_opcheck_int_quant_with_mask(noncontig, requires_grad):
    x, s, z, bw = _opcheck_inputs(noncontig, requires_grad)
    torch.library.opcheck(
        OPS._int_quant_with_mask,
        (x, s, z, bw, False, True, "floor"),
        test_utils=backward_op_utils(requires_grad),
    )


@pytest.mark.parametrize("output_mask", MASKS4, ids=lambda m: "".join("1" if b else "0" for b in m))
@pytest.mark.parametrize("noncontig", [False, True])
def test_opcheck_int_quant_backward(output_mask, noncontig):
    x, s, z, bw = _opcheck_inputs(noncontig, False)
    g = _rand(x.shape, seed=5)
    if noncontig:
        g = _rand((x.shape[2], x.shape[1], x.shape[0]), seed=5).permute(2, 1, 0)
    for clamp_ste in (False, True):
        torch.library.opcheck(
            OPS._int_quant_backward,
            (g, x, None, s, z, bw, True, False, "round", clamp_ste, output_mask),
        )


@pytest.mark.parametrize("requires_grad", [False, True])
def test_opcheck_int_quant_backward_without_x(requires_grad):
    x, s, z, bw = _opcheck_inputs(False, False)
    g = _rand(x.shape, seed=5)
    m = ref_pass_mask(x, s, z, bw, True, False)
    if requires_grad:
        g = g.clone().requires_grad_()
    u = backward_op_utils(requires_grad)
    torch.library.opcheck(
        OPS._int_quant_backward,
        (g, None, m, s, z, bw, True, False, "round", False, [True, False, False, False]),
        test_utils=u,
    )
    torch.library.opcheck(
        OPS._int_quant_backward,
        (g, None, None, s, z, bw, True, False, "round", True, [True, False, False, True]),
        test_utils=u,
    )
    torch.library.opcheck(
        OPS._int_quant_backward,
        (g, x, m, s, z, bw, True, False, "round", False, [True, True, True, True]),
        test_utils=u,
    )


# ---- bad input -------------------------------------------------------------------------------


def _args(**kw):
    a = dict(
        x=_rand((2, 5)),
        scale=torch.tensor(0.5),
        zero_point=torch.tensor(0.0),
        bit_width=torch.tensor(4.0),
        signed=True,
        narrow_range=False,
        rounding_mode="round",
        clamp_ste=False,
    )
    a.update(kw)
    return a


def _call(**kw):
    a = _args(**kw)
    return OPS.int_quant(
        a["x"],
        a["scale"],
        a["zero_point"],
        a["bit_width"],
        a["signed"],
        a["narrow_range"],
        a["rounding_mode"],
        a["clamp_ste"],
    )


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.bool])
def test_bad_integer_x(dtype):
    x = torch.ones(2, 5, dtype=dtype)
    with pytest.raises(RuntimeError, match=r"int_quant: x must be a floating-point"):
        _call(
            x=x,
            scale=torch.tensor(1, dtype=dtype) if dtype != torch.bool else torch.tensor(True),
            zero_point=torch.tensor(0, dtype=dtype) if dtype != torch.bool else torch.tensor(False),
        )


def test_bad_scale_dtype():
    with pytest.raises(RuntimeError, match=r"int_quant: scale must have the dtype of x"):
        _call(scale=torch.tensor(0.5, dtype=torch.float64))
    with pytest.raises(RuntimeError, match=r"int_quant: zero_point must have the dtype of x"):
        _call(zero_point=torch.tensor(0.0, dtype=torch.float16))
    with pytest.raises(RuntimeError, match=r"scale must have the dtype of x"):
        _call(x=_rand((2, 5), torch.bfloat16), zero_point=torch.tensor(0.0, dtype=torch.bfloat16))


def test_bad_scale_shape():
    with pytest.raises(
        RuntimeError, match=r"scale of shape \[3\] does not broadcast to x of shape \[2, 5\]"
    ):
        _call(scale=torch.ones(3))
    with pytest.raises(
        RuntimeError, match=r"scale of shape \[2, 2, 5\] does not broadcast to x of shape \[2, 5\]"
    ):
        _call(scale=torch.ones(2, 2, 5))  # would expand x
    with pytest.raises(
        RuntimeError, match=r"scale of shape \[3, 1\] does not broadcast to x of shape \[1, 5\]"
    ):
        _call(x=_rand((1, 5)), scale=torch.ones(3, 1))  # would expand x's dim 0
    with pytest.raises(RuntimeError, match=r"zero_point of shape \[5, 2\] does not broadcast"):
        _call(zero_point=torch.zeros(5, 2))
    with pytest.raises(
        RuntimeError, match=r"scale of shape \[1, 2, 5\] does not broadcast to x of shape \[2, 5\]"
    ):
        _call(scale=torch.ones(1, 2, 5))  # would add a leading dim to x


@pytest.mark.parametrize(
    "value,text",
    [
        (0.0, "0"),
        (-0.5, "-0.5"),
        (float("inf"), "inf"),
        (float("nan"), "nan"),
        (-float("inf"), "-inf"),
    ],
)
def test_bad_scale_value(value, text):
    normal = r"scale must be a normal positive finite number \(>= 1.17549e-38 for float32\)"
    with pytest.raises(RuntimeError, match=rf"int_quant: {normal}, got {text}\b"):
        _call(scale=torch.tensor(value))
    per_channel = torch.tensor([[0.5], [value]])
    with pytest.raises(RuntimeError, match=rf"{normal}, got {text} at flat index 1\b"):
        _call(scale=per_channel)


@pytest.mark.parametrize(
    "value,text", [(float("inf"), "inf"), (float("nan"), "nan"), (-float("inf"), "-inf")]
)
def test_bad_zero_point_value(value, text):
    with pytest.raises(RuntimeError, match=rf"int_quant: zero_point must be finite, got {text}\b"):
        _call(zero_point=torch.tensor(value))


@pytest.mark.parametrize(
    "value,text",
    [(0, "0"), (-1, "-1"), (33, "33"), (2.5, "2.5"), (float("nan"), "nan"), (float("inf"), "inf")],
)
def test_bad_bit_width_value(value, text):
    with pytest.raises(
        RuntimeError, match=rf"int_quant: bit_width must be an integer in \[1, 32\], got {text}\b"
    ):
        _call(bit_width=torch.tensor(value))


def test_bad_bit_width_shape():
    with pytest.raises(
        RuntimeError, match=r"int_quant: bit_width must hold exactly one value.*\[2\]"
    ):
        _call(bit_width=torch.tensor([4.0, 4.0]))
    with pytest.raises(RuntimeError, match=r"bit_width must hold exactly one value"):
        _call(bit_width=torch.empty(0))


def test_bad_rounding_mode():
    with pytest.raises(
        RuntimeError,
        match=r"rounding_mode 'foo' is unknown; accepted.*round.*ceil.*floor.*round_to_zero.*dpu",
    ):
        _call(rounding_mode="foo")
    with pytest.raises(RuntimeError, match=r"rounding_mode 'round_half_up' is unknown"):
        int_quant(
            _rand((2, 5)),
            torch.tensor(0.5),
            torch.tensor(0.0),
            torch.tensor(4.0),
            True,
            False,
            "round_half_up",
        )


def test_bad_device():
    with pytest.raises(RuntimeError, match=r"scale is on meta but x is on cpu"):
        _call(scale=torch.tensor(0.5, device="meta"))
    with pytest.raises(RuntimeError, match=r"zero_point is on meta but x is on cpu"):
        _call(zero_point=torch.tensor(0.0, device="meta"))
    with pytest.raises(RuntimeError, match=r"bit_width"):
        _call(bit_width=torch.tensor(4.0, device="meta"))


def test_bad_input_backward_op():
    x, s, z, g = _grad_inputs("per_tensor", torch.float32)
    with pytest.raises(
        RuntimeError,
        match=r"_int_quant_backward: bit_width must be an integer in \[1, 32\], got 40",
    ):
        OPS._int_quant_backward(
            g, x, None, s, z, torch.tensor(40.0), True, False, "round", False, [True] * 4
        )
    with pytest.raises(RuntimeError, match=r"_int_quant_backward: grad of shape"):
        OPS._int_quant_backward(
            g[:2], x, None, s, z, torch.tensor(4.0), True, False, "round", False, [True] * 4
        )
    with pytest.raises(RuntimeError, match=r"rounding_mode 'x' is unknown"):
        OPS._int_quant_backward(
            g, x, None, s, z, torch.tensor(4.0), True, False, "x", False, [True] * 4
        )


# ---- large tensors (several parallel chunks) and overflowing integer bit widths -------------


LARGE_CASES = {
    "rows_per_channel": ((3, 40001), (3, 1), ()),
    "cols_per_channel": ((4, 20003), (1, 20003), (1, 20003)),
    "channels_last_per_channel": ((4, 16, 40, 41), (1, 16, 1, 1), (1, 16, 1, 1)),
    "per_group": ((64, 40, 33), (64, 40, 1), (64, 40, 1)),
}


@pytest.mark.parametrize("case", list(LARGE_CASES))
def test_large_tensors_forward_and_gradients(case):
    xs, ss, zs = LARGE_CASES[case]
    x64 = _rand(xs, torch.float64, spread=2.0)
    if case == "channels_last_per_channel":
        x64 = x64.contiguous(memory_format=torch.channels_last)
    s64, z64 = rand_pos(ss, torch.float64) * 0.5, _ints(zs, torch.float64, lo=-1, hi=2)
    g64 = _rand(xs, torch.float64, seed=11)
    for mode in ("round", "dpu"):
        x, s, z = x64.float(), s64.float(), z64.float()
        assert_bitwise(
            int_quant(x, s, z, _bw(4), True, False, mode),
            ref_int_quant(x, s, z, _bw(4), True, False, mode),
        )
    for clamp_ste in (False, True):
        bw = torch.tensor(4.0, dtype=torch.float64)
        y, (gx, gs, gz, gb) = grads(
            lambda a, b_, c, d: int_quant(a, b_, c, d, True, False, "round", clamp_ste),
            (x64, s64, z64, bw),
            g64,
            (1,) * 4,
        )
        yr, (rx, rs, rz, rb) = grads(
            lambda a, b_, c, d: ref_int_quant(a, b_, c, d, True, False, "round", clamp_ste),
            (x64, s64, z64, bw),
            g64,
            (1,) * 4,
        )
        assert_bitwise(y, yr, signed_zero=False)  # the STE reference adds +0
        assert torch.equal(gx, rx)
        torch.testing.assert_close(gs, rs, rtol=1e-9, atol=1e-8)
        torch.testing.assert_close(gz, rz, rtol=1e-9, atol=1e-8)
        if not clamp_ste:
            torch.testing.assert_close(gb, rb, rtol=1e-9, atol=1e-8)
    # Only x requiring grad (the saved-mask path), float32.
    x = x64.float()
    y, (gx, *_) = grads(
        lambda a, b_, c, d: int_quant(a, b_, c, d, True, False),
        (x, s64.float(), z64.float(), _bw(4)),
        g64.float(),
        (1, 0, 0, 0),
    )
    yr, (rx, *_) = grads(
        lambda a, b_, c, d: ref_int_quant(a, b_, c, d, True, False),
        (x, s64.float(), z64.float(), _bw(4)),
        g64.float(),
        (1, 0, 0, 0),
    )
    assert torch.equal(gx, rx)


@pytest.mark.parametrize(
    "bw_dtype,b",
    [
        (torch.int32, 32),
        (torch.int32, 31),
        (torch.int16, 16),
        (torch.int8, 8),
        (torch.uint8, 8),
        (torch.int8, 7),
    ],
)
def test_integer_bit_width_overflow_wraps_like_composition(bw_dtype, b):
    """2 ** bit_width is computed in bit_width's dtype, overflow included (Brevitas's max_int)."""
    x = torch.tensor([-3.0, -0.0, 0.0, 1.0, 5.0, 70000.0, 5e9, 3e9, -5e9, 126.6, 255.4])
    one, zero = torch.tensor(1.0), torch.tensor(0.0)
    bw = torch.tensor(b, dtype=bw_dtype)
    for signed, narrow in SIGNED_NARROW:
        assert_bitwise(
            int_quant(x, one, zero, bw, signed, narrow),
            ref_int_quant(x, one, zero, bw, signed, narrow),
        )


def test_zero_dim_x():
    for v in [2.5, -3.5, 100.0, -100.0, 0.3]:
        x = torch.tensor(v)
        s, z = torch.tensor(0.5), torch.tensor(1.0)
        y = int_quant(x, s, z, _bw(4), True, False, "dpu")
        assert y.shape == ()
        assert_bitwise(y, ref_int_quant(x, s, z, _bw(4), True, False, "dpu"))
    with pytest.raises(
        RuntimeError, match=r"scale of shape \[1\] does not broadcast to x of shape \[\]"
    ):
        int_quant(torch.tensor(1.0), torch.tensor([0.5]), torch.tensor(0.0), _bw(4), True, False)


@pytest.mark.parametrize("bw", [torch.tensor(True), torch.tensor(4 + 0j)], ids=["bool", "complex"])
def test_bad_bit_width_dtype(bw):
    with pytest.raises(
        RuntimeError, match=r"int_quant: bit_width must be a real \(integer or floating\) tensor"
    ):
        _call(bit_width=bw)


# ---- stride-0 (expanded) parameters -----------------------------------------------------------


def test_expanded_params_forward():
    x = _rand((4, 6))
    s = torch.tensor(0.5).expand(1, 6)
    z = torch.tensor([[1.0], [0.0], [-1.0], [2.0]]).expand(4, 6)
    y = int_quant(x, s, z, _bw(3), True, False)
    assert_bitwise(y, ref_int_quant(x, s, z, _bw(3), True, False))


@pytest.mark.parametrize("which", ["scale", "zero_point"])
def test_expanded_param_gradient(which):
    x = _rand((4, 6))
    base = torch.tensor(0.5 if which == "scale" else 1.0, dtype=torch.float64, requires_grad=True)
    ref_base = base.detach().clone().requires_grad_()
    xd = x.double()
    other_s, other_z = (
        torch.tensor(0.5, dtype=torch.float64),
        torch.tensor(0.0, dtype=torch.float64),
    )

    def args(b):
        p = b.expand(1, 6)
        return (p, other_z) if which == "scale" else (other_s, p)

    int_quant(xd, *args(base), _bw(3), True, False).sum().backward()
    ref_int_quant(xd, *args(ref_base), _bw(3), True, False).sum().backward()
    torch.testing.assert_close(base.grad, ref_base.grad, rtol=1e-10, atol=1e-10)


def test_expanded_per_group_scale_gradient():
    # Per-group shape [C, G, 1] built from a per-channel [C, 1, 1] by expand.
    x = _rand((3, 4, 5), torch.float64)
    base = rand_pos((3, 1, 1), torch.float64).requires_grad_()
    ref_base = base.detach().clone().requires_grad_()
    z = torch.tensor(0.0, dtype=torch.float64)
    int_quant(x, base.expand(3, 4, 1), z, _bw(4), True, False).sum().backward()
    ref_int_quant(x, ref_base.expand(3, 4, 1), z, _bw(4), True, False).sum().backward()
    torch.testing.assert_close(base.grad, ref_base.grad, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("layout", ["channels_last", "permuted"])
@pytest.mark.parametrize("requires_grad", [False, True])
def test_opcheck_int_quant_dense_layouts(layout, requires_grad):
    base = _rand((2, 6, 3, 5), spread=2.0)
    x = (
        base.contiguous(memory_format=torch.channels_last)
        if layout == "channels_last"
        else base.permute(0, 2, 1, 3)
    )
    pshape = [1, 6, 1, 1] if layout == "channels_last" else [1, 1, 6, 1]
    s, z, bw = rand_pos(pshape) * 0.5, _ints(pshape), torch.tensor(3.0)
    if requires_grad:
        x, s, z, bw = (t.clone().requires_grad_() for t in (x, s, z, bw))
    torch.library.opcheck(OPS.int_quant, (x, s, z, bw, True, False, "round", False))
    torch.library.opcheck(
        OPS._int_quant_with_mask,
        (x, s, z, bw, True, False, "round"),
        test_utils=backward_op_utils(requires_grad),
    )
    g = _rand(x.shape, seed=3)
    torch.library.opcheck(
        OPS._int_quant_backward,
        (
            g,
            x.detach(),
            None,
            s.detach(),
            z.detach(),
            bw.detach(),
            True,
            False,
            "round",
            False,
            [True, True, True, True],
        ),
    )


# ---- _int_quant_backward's own argument checks -------------------------------------------------


def _backward_args(**overrides):
    x = torch.tensor([-10.0, -1.2, 0.3, 10.0])
    args = dict(
        grad=torch.ones(4),
        x=x,
        mask=None,
        scale=torch.tensor(1.0),
        zero_point=torch.tensor(0.0),
        bit_width=torch.tensor(3.0),
        signed=True,
        narrow_range=False,
        rounding_mode="round",
        clamp_ste=False,
        output_mask=[True, False, False, False],
    )
    args.update(overrides)
    return list(args.values())


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_int_quant_backward_rejects_grad_of_another_dtype(device):
    args = _backward_args(grad=torch.ones(4, dtype=torch.float64))
    args = [a.to(device) if isinstance(a, torch.Tensor) else a for a in args]
    with pytest.raises(RuntimeError, match=r"_int_quant_backward: grad must have the dtype of x"):
        OPS._int_quant_backward(*args)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_int_quant_backward_rejects_bad_mask(device):
    def on(args):
        return [a.to(device) if isinstance(a, torch.Tensor) else a for a in args]

    with pytest.raises(RuntimeError, match=r"mask must be a bool tensor, got Float"):
        OPS._int_quant_backward(*on(_backward_args(x=None, mask=torch.ones(4))))
    with pytest.raises(
        RuntimeError, match=r"mask of shape \[3\] must have the shape of grad \[4\]"
    ):
        OPS._int_quant_backward(*on(_backward_args(mask=torch.ones(3, dtype=torch.bool))))
    with pytest.raises(RuntimeError, match=r"grad of shape \[5\] must have the shape of x \[4\]"):
        OPS._int_quant_backward(*on(_backward_args(grad=torch.ones(5))))
