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
    "binary_quant",
    "clamped_binary_quant",
    "_binary_quant_backward",
    "_clamped_binary_quant_backward",
    "ternary_quant",
    "_ternary_quant_backward",
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
