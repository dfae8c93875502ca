"""The composite kernels (ATen compositions registered for CompositeExplicitAutograd), which run
the ops on devices without a dedicated kernel. Called here on the CPU, directly through that
dispatch key, and compared with the CPU kernels: forward and x's gradient bit for bit (the
composition is the CPU kernels' reference), parameter gradients at the dtype's precision (ATen
sums in x's dtype where the CPU kernel sums in double)."""

import pytest
import torch
from helpers import DTYPE_IDS, DTYPES, MODES, assert_bitwise, rand, rand_pos

import brevitas_cpp  # noqa: F401  (registers the ops)

OPS = torch.ops.brevitas_cpp
COMPOSITE = torch._C.DispatchKey.CompositeExplicitAutograd

# Every op with a CPU kernel, except the distributed ones (composite already: test_stats_sync).
KERNEL_OPS = [
    "round_ste",
    "ceil_ste",
    "floor_ste",
    "round_to_zero_ste",
    "dpu_round_ste",
    "binary_sign_ste",
    "ternary_sign_ste",
    "abs_binary_sign_grad",
    "_abs_binary_sign_grad_backward",
    "tensor_clamp_ste",
    "scalar_clamp_ste",
    "scalar_clamp_min_ste",
    "scalar_signed_clamp_min_ste",
    "int_quant",
    "_int_quant_with_mask",
    "_int_quant_backward",
    "relu_int_quant",
    "_relu_int_quant_backward",
    "abs_max_int_quant",
    "_abs_max_int_quant_backward",
    "abs_percentile_int_quant",
    "_abs_percentile_int_quant_backward",
    "learned_int_quant",
    "_learned_int_quant_backward",
    "binary_quant",
    "clamped_binary_quant",
    "_binary_quant_backward",
    "_clamped_binary_quant_backward",
    "ternary_quant",
    "_ternary_quant_backward",
    "quantization_int8",
    "_quantization_int8_backward",
    "float_quant",
    "_float_quant_backward",
]


def composite(name, *args):
    return getattr(OPS, name).default._op_dk(COMPOSITE, *args)


def tolerance(dtype):
    return {
        torch.float64: dict(rtol=1e-12, atol=1e-12),
        torch.float32: dict(rtol=1e-5, atol=1e-5),
        torch.float16: dict(rtol=1e-2, atol=1e-2),
        torch.bfloat16: dict(rtol=5e-2, atol=5e-2),
    }[dtype]


def test_every_kernel_op_has_a_composite_kernel():
    for name in KERNEL_OPS:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(
            f"brevitas_cpp::{name}", "CompositeExplicitAutograd"
        )


def values(dtype):
    v = [k + 0.5 for k in range(-6, 6)] + [
        0.0,
        -0.0,
        1e4,
        -1e4,
        float("inf"),
        float("-inf"),
        float("nan"),
    ]
    v += rand((5, 31), dtype=torch.float64, seed=5, spread=4.0).flatten().tolist()
    return torch.tensor(v, dtype=torch.float64).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_elementwise_ops(dtype):
    x = values(dtype)
    for name in KERNEL_OPS[:8]:
        assert_bitwise(composite(name, x), getattr(OPS, name)(x))
    g = torch.flip(x, (0,))
    assert_bitwise(
        composite("_abs_binary_sign_grad_backward", g, x), OPS._abs_binary_sign_grad_backward(g, x)
    )
    lo, hi = torch.full((1,), -1.25, dtype=dtype), torch.full((1,), 2.5, dtype=dtype)
    assert_bitwise(composite("tensor_clamp_ste", x, lo, hi), OPS.tensor_clamp_ste(x, lo, hi))
    for name, args in [
        ("scalar_clamp_ste", (-1.3, 2.7)),
        ("scalar_clamp_min_ste", (0.3,)),
        ("scalar_signed_clamp_min_ste", (0.3,)),
        ("scalar_clamp_ste", (-1e3, 1e3)),
    ]:
        assert_bitwise(composite(name, x, *args), getattr(OPS, name)(x, *args))


def test_layout_follows_x():
    x = rand((2, 4, 3, 5)).contiguous(memory_format=torch.channels_last)
    for name in KERNEL_OPS[:8]:
        y = composite(name, x)
        assert y.stride() == x.stride(), name


SHAPES = {
    "per_tensor": ((4, 6, 5), ()),
    "dim1": ((4, 6, 5), (1, 6, 1)),
    "dim0": ((6, 4, 3, 3), (6, 1, 1, 1)),
    "per_group": ((3, 4, 8), (3, 4, 1)),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_int_quant(shape, mode, dtype):
    xs, ps = SHAPES[shape]
    x = rand(xs, dtype=torch.float64, seed=1, spread=4.0).to(dtype)
    s = (rand_pos(ps, dtype=torch.float64, seed=2) * 0.5).to(dtype)
    z = torch.round(rand_pos(ps, dtype=torch.float64, seed=3) * 2.0).to(dtype)
    b = torch.tensor(4.0)
    for signed, narrow in [(True, False), (True, True), (False, False)]:
        args = (x, s, z, b, signed, narrow, mode)
        y, m = composite("_int_quant_with_mask", *args)
        want_y, want_m = OPS._int_quant_with_mask(*args)
        assert_bitwise(y, want_y)
        assert torch.equal(m, want_m)
        assert_bitwise(composite("int_quant", *args, False), want_y)
        g = rand(xs, dtype=torch.float64, seed=4).to(dtype)
        for clamp_ste in (False, True):
            full = (g, x, None, s, z, b, signed, narrow, mode, clamp_ste, [True, True, True, True])
            got, want = composite("_int_quant_backward", *full), OPS._int_quant_backward(*full)
            assert_bitwise(got[0], want[0])
            for a, w in zip(got[1:], want[1:]):
                assert (a is None) == (w is None)
                if w is not None:
                    assert a.shape == w.shape and a.dtype == w.dtype
                    torch.testing.assert_close(a, w, **tolerance(dtype))
        from_mask = (
            g,
            None,
            want_m,
            s,
            z,
            b,
            signed,
            narrow,
            mode,
            False,
            [True, False, False, False],
        )
        assert_bitwise(
            composite("_int_quant_backward", *from_mask)[0], OPS._int_quant_backward(*from_mask)[0]
        )


def abs_max_weights(special: str, dtype) -> torch.Tensor:
    w = rand((6, 5, 3), dtype=torch.float64, seed=1, spread=2.0).to(dtype)
    w[0, 0, 0] = w[0, 1, 2] = -w.abs().max()  # tied maxima
    if special == "zeros":  # a zero statistic: the clamp decides, or the scale is 0
        w[1] = 0.0
        w[2] = -0.0
    elif special == "nan":
        w[3, 1, 1] = float("nan")
    elif special == "inf":
        w[4, 2, 0] = float("-inf")
    return w


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("dim", [None, 0, 1])
@pytest.mark.parametrize("special", ["none", "zeros", "nan", "inf"])
def test_abs_max_int_quant(dim, dtype, special):
    w = abs_max_weights(special, dtype)
    if special == "zeros" and dim is None:
        w.zero_()
    b = torch.tensor(5.0, dtype=dtype)
    for signed, narrow, min_val, mode in [
        (True, True, 1e-10, "round"),
        (True, False, None, "floor"),
        (False, False, 0.5, "dpu"),
    ]:
        args = (w, b, dim, signed, narrow, min_val, mode, True)
        try:
            want_y, want_s = OPS.abs_max_int_quant(*args)
        except RuntimeError as exc:  # a scale that is not normal, positive, finite raises in both
            assert "normal positive finite" in str(exc)
            with pytest.raises(RuntimeError, match="normal positive finite"):
                composite("abs_max_int_quant", *args)
            continue
        y, s = composite("abs_max_int_quant", *args)
        assert_bitwise(s, want_s)
        assert_bitwise(y, want_y)
        g = rand(w.shape, dtype=torch.float64, seed=4).to(dtype)
        gs = rand(want_s.shape, dtype=torch.float64, seed=5).to(dtype)
        for clamp_ste in (False, True):
            bargs = (g, gs, w, want_s, b, dim, signed, narrow, min_val, mode, clamp_ste)
            got = composite("_abs_max_int_quant_backward", *bargs)
            want = OPS._abs_max_int_quant_backward(*bargs)
            assert got.shape == want.shape and got.dtype == want.dtype
            torch.testing.assert_close(got, want, equal_nan=True, **tolerance(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", ["per_tensor", "dim1"])
def test_learned_int_quant(shape, dtype):
    """The composite (scalar_signed_clamp_min_ste, div, int_quant / relu_int_quant on the device's
    kernels) against the CPU kernel: y and scale bit for bit, x's gradient bit for bit, value's
    at the dtype's precision (int_quant's scale gradient is summed in another order)."""
    xs, ps = SHAPES[shape]
    x = rand(xs, dtype=torch.float64, seed=1, spread=4.0).to(dtype)
    value = (rand_pos(ps, dtype=torch.float64, seed=2) * 2.0).to(dtype)
    value.view(-1)[0] = 0.125  # below min_val: the clamp acts
    threshold, z, b = (
        torch.tensor(7.0, dtype=dtype),
        torch.zeros((), dtype=dtype),
        torch.tensor(4.0),
    )
    g = rand(xs, dtype=torch.float64, seed=4).to(dtype)
    for relu, min_val, mode in [(False, 0.25, "round"), (True, None, "floor"), (True, 0.25, "dpu")]:
        args = (x, value, threshold, z, b, True, False, min_val, mode, False, relu)
        got, want = composite("learned_int_quant", *args), OPS.learned_int_quant(*args)
        for a, w in zip(got, want):
            assert_bitwise(a, w)
            assert a.stride() == w.stride()
        scale = want[1]
        for grad_scale in (None, torch.full_like(scale, 0.5)):
            for clamp_ste in (False, True):
                bargs = (
                    g,
                    grad_scale,
                    x,
                    scale,
                    threshold,
                    z,
                    b,
                    True,
                    False,
                    mode,
                    clamp_ste,
                    relu,
                )
                bargs += ([True, True],)
                got = composite("_learned_int_quant_backward", *bargs)
                want = OPS._learned_int_quant_backward(*bargs)
                assert_bitwise(got[0], want[0])
                assert got[1].shape == want[1].shape and got[1].dtype == want[1].dtype
                torch.testing.assert_close(got[1], want[1], **tolerance(dtype))
        # Only the scale's gradient: the division alone, bit for bit.
        bargs = (None, torch.full_like(scale, 0.5), x, scale, threshold, z, b, True, False, mode)
        bargs += (False, relu, [True, True])
        got = composite("_learned_int_quant_backward", *bargs)
        want = OPS._learned_int_quant_backward(*bargs)
        assert got[0] is None and want[0] is None
        assert_bitwise(got[1], want[1])


def test_int_quant_bit_width_in_integer_dtypes():
    x, s, z = rand((4, 6)) * 3, torch.tensor(0.1), torch.tensor(0.0)
    for bdtype in [
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
        torch.float16,
        torch.float64,
    ]:
        b = torch.tensor(5, dtype=bdtype)
        for signed, narrow in [(True, True), (False, True)]:
            args = (x, s, z, b, signed, narrow, "round", False)
            assert_bitwise(composite("int_quant", *args), OPS.int_quant(*args))


def test_invalid_values_give_nan():
    """What the CPU kernels raise on (they read the values): NaN, as on the GPU."""
    x = torch.linspace(-2, 2, 8)
    s = torch.tensor([1.0, 0.0, -1.0, float("inf")]).repeat_interleave(2)
    z, b = torch.zeros(8), torch.tensor(4.0)
    y = composite("int_quant", x, s, z, b, True, False, "round", False)
    assert torch.isfinite(y[:2]).all() and torch.isnan(y[2:]).all()
    for bad in [0.0, 4.5, 33.0, float("nan")]:
        y = composite(
            "int_quant", x, torch.ones(8), z, torch.tensor(bad), True, False, "round", False
        )
        assert torch.isnan(y).all(), bad
    y = composite(
        "int_quant",
        x,
        torch.ones(8),
        torch.full((8,), float("nan")),
        b,
        True,
        False,
        "round",
        False,
    )
    assert torch.isnan(y).all()
    for name, extra in [
        ("binary_quant", ()),
        ("clamped_binary_quant", ()),
        ("ternary_quant", (0.5,)),
    ]:
        y = composite(name, x, s, *extra)
        assert torch.isfinite(y[:2]).all() and torch.isnan(y[2:]).all(), name


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_scaled_quant_ops(shape, dtype):
    xs, ps = SHAPES[shape]
    x = rand(xs, dtype=torch.float64, seed=1, spread=1.0).to(dtype)
    s = (rand_pos(ps, dtype=torch.float64, seed=2) * 0.8).to(dtype)
    g = rand(xs, dtype=torch.float64, seed=4).to(dtype)
    for fwd, bwd, extra in [
        ("binary_quant", "_binary_quant_backward", ()),
        ("clamped_binary_quant", "_clamped_binary_quant_backward", ()),
        ("ternary_quant", "_ternary_quant_backward", (0.5,)),
    ]:
        assert_bitwise(composite(fwd, x, s, *extra), getattr(OPS, fwd)(x, s, *extra))
        args = (g, x, s, *extra, [True, True])
        got, want = composite(bwd, *args), getattr(OPS, bwd)(*args)
        assert_bitwise(got[0], want[0])
        assert got[1].shape == want[1].shape
        torch.testing.assert_close(got[1], want[1], **tolerance(dtype))
    assert_bitwise(
        composite("_binary_quant_backward", g, None, s, [True, False])[0],
        OPS._binary_quant_backward(g, None, s, [True, False])[0],
    )


# (is_weight, channel_axis, quant_mode, nbits, threshold shape, x's layout)
INT8_CASES = {
    "act_tensor": (False, None, "minmax", 8, (), "contiguous"),
    "act_tensor_1": (False, None, "power2", 5, (1,), "contiguous"),
    "act_dim1_channels_last": (False, 1, "minmax", 4, (6,), "channels_last"),
    "act_last_power2": (False, -1, "power2", 8, (5,), "contiguous"),
    "w_tensor": (True, None, "power2", 3, (), "contiguous"),
    "w_dim0": (True, 0, "minmax", 8, (4,), "contiguous"),
    "w_dim1_sliced": (True, 1, "minmax", 6, (3,), "sliced"),
}


def _int8_x(layout, dtype, seed):
    x = rand((4, 6, 3, 5), dtype=torch.float64, seed=seed, spread=1.0 + seed)
    x[:, 2] = 0.0  # a zero channel along dim 1 (a zero scale per channel there)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    elif layout == "sliced":
        x = x[:, ::2]
    return x.to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", sorted(INT8_CASES))
def test_quantization_int8(case, dtype):
    """A sequence of training calls (the delay phase, then the EMA), then eval calls: outputs,
    scale, clip_threshold and the buffers bit for bit; the clip gradient from both backward ops."""
    is_weight, axis, quant_mode, nbits, th_shape, layout = INT8_CASES[case]
    states = [
        (torch.zeros(th_shape), torch.zeros((), dtype=torch.int64)) for _ in ("composite", "cpu")
    ]
    for step in range(6):
        x = _int8_x(layout, dtype, seed=step)
        training = step < 4
        args = (nbits, is_weight, axis, 0.1, 1, "clip", quant_mode, training)
        got = composite("quantization_int8", x, *states[0], *args)
        want = OPS.quantization_int8(x, *states[1], *args)
        for a, w in zip(got, want):
            assert_bitwise(a, w)
        assert got[0].stride() == want[0].stride()
        assert_bitwise(states[0][0], states[1][0])
        assert torch.equal(states[0][1], states[1][1])
        g = rand(x.shape, dtype=torch.float64, seed=40 + step).to(dtype)
        clip = want[2]
        assert_bitwise(
            composite("_quantization_int8_backward", g, x, clip),
            OPS._quantization_int8_backward(g, x, clip),
        )
    assert states[1][1].item() == 4


def test_bad_input_raises_the_cpu_messages():
    """The metadata checks are the CPU kernels' own: the same messages."""
    x = torch.ones(2, 5, dtype=torch.int32)
    with pytest.raises(RuntimeError, match="x must be a floating-point tensor"):
        composite("round_ste", x)
    with pytest.raises(RuntimeError, match="scale of shape \\[3\\] does not broadcast"):
        composite(
            "int_quant",
            torch.ones(2, 5),
            torch.ones(3),
            torch.zeros(()),
            torch.tensor(8.0),
            True,
            False,
            "round",
            False,
        )
    with pytest.raises(RuntimeError, match="rounding_mode 'nearest' is unknown"):
        composite(
            "int_quant",
            torch.ones(2, 5),
            torch.ones(()),
            torch.zeros(()),
            torch.tensor(8.0),
            True,
            False,
            "nearest",
            False,
        )
    with pytest.raises(RuntimeError, match="threshold"):
        composite("ternary_quant", torch.ones(2, 5), torch.ones(()), -0.5)
    it = torch.zeros((), dtype=torch.int64)

    def q8(
        threshold=None, nbits=8, axis=None, ema_decay=0.01, grad_mode="ste", quant_mode="minmax"
    ):
        threshold = torch.zeros(()) if threshold is None else threshold
        args = (nbits, False, axis, ema_decay, 0, grad_mode, quant_mode, True)
        return composite("quantization_int8", torch.ones(2, 5), threshold, it, *args)

    for kw, name in [
        (dict(nbits=1), "nbits"),
        (dict(ema_decay=1.0), "ema_decay"),
        (dict(grad_mode="STE"), "grad_mode"),
        (dict(quant_mode="log"), "quant_mode"),
        (dict(threshold=torch.zeros(3), axis=1), "threshold"),
        (dict(threshold=torch.zeros(5), axis=2), "channel_axis"),
    ]:
        with pytest.raises(RuntimeError, match=rf"(?s)brevitas_cpp::quantization_int8.*{name}"):
            q8(**kw)
    with pytest.raises(RuntimeError, match="clip_threshold"):
        composite("_quantization_int8_backward", torch.ones(2, 5), torch.ones(2, 5), torch.ones(3))
