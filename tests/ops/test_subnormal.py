"""Subnormal scales and inputs in every op (issue 29): each op gives the numbers of a formula
written out here, or raises at the scale check naming the op, the scale, its dtype's smallest
normal and the value given. Where the CPU kernel raises, the composite kernel (what devices
without a kernel of their own run; CUDA follows the same rule) gives NaN, reading no value.

    int_quant, relu_int_quant, float_quant (and their backward ops): the scale must be normal,
        positive and finite; below the smallest normal m, x / s overflows once |x| > 4 s / m
        and the scale's gradient, (x / s) / s, once |x / s| does.
    binary, clamped binary and ternary quantizers: any positive finite scale, exactly.
    abs_max_int_quant, abs_percentile_int_quant: the scale they compute (statistic, clamped by
        scaling_min_val, / threshold) must be normal, as int_quant's.
    quantization_int8, the STE and clamp ops: subnormal values give the formula's numbers.

Subnormal inputs x (with a normal scale) give the formula's numbers everywhere."""

import re

import pytest
import torch
from helpers import (
    DTYPE_IDS,
    DTYPES,
    ROUND,
    assert_bitwise,
    ref_binary_sign,
    ref_int_quant,
    ref_ternary_sign,
)

import brevitas_cpp  # noqa: F401  (registers the ops)

OPS = torch.ops.brevitas_cpp
COMPOSITE = torch._C.DispatchKey.CompositeExplicitAutograd
NAMES = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
}


# float_quant's format arguments: OCP e4m3 (largest value 448), saturating, round to nearest.
E4M3 = (4, 3, 7, 448.0, True, True, False, False, "round")


def int_quant_backward_args(x, s, z, b, mask):
    """_int_quant_backward's arguments: a gradient of ones, signed 8 bits, round, no clamp STE."""
    return (torch.ones_like(x), x, None, s, z, b, True, False, "round", False, list(mask))


def composite(name, *args):
    return getattr(OPS, name).default._op_dk(COMPOSITE, *args)


def smallest_normal(dtype):
    return torch.finfo(dtype).tiny


def subnormals(dtype):
    """A quarter of the smallest normal, and the smallest subnormal (tiny * eps): both exact."""
    tiny, eps = torch.finfo(dtype).tiny, torch.finfo(dtype).eps
    return [tiny / 4, tiny * eps]


def with_subnormals(dtype):
    """x with subnormal values of both signs among ordinary ones (and +-0)."""
    sub = subnormals(dtype)
    v = (
        [-2.5, -1.0, -0.3, 0.0, -0.0, 0.4, 1.0, 3.0]
        + sub
        + [-s for s in sub]
        + [3 * sub[0], -sub[0] / 2]
    )
    return torch.tensor(v, dtype=torch.float64).to(dtype)


def normal_scale_message(op, dtype):
    """The check's message up to the value given (the bound formatted as C++ streams it)."""
    return rf"brevitas_cpp::{op}: scale must be a normal positive finite number \(>= {smallest_normal(dtype):g} for {NAMES[dtype]}\), got"


def all_nan(*tensors):
    return all(bool(torch.isnan(t).all()) for t in tensors if t is not None)


# ---- ops that need a normal scale ----------------------------------------------------------------


def normal_scale_ops(dtype):
    """(name, call(x, scale) on the CPU kernel or, with via_composite, the composite one)."""
    z, b = torch.zeros((), dtype=dtype), torch.tensor(8.0)
    mask = [True, True, True, True]

    def ops(call):
        return {
            "int_quant": lambda x, s: call("int_quant", x, s, z, b, True, False, "round", False),
            "_int_quant_with_mask": lambda x, s: call(
                "_int_quant_with_mask", x, s, z, b, True, False, "round"
            )[0],
            "relu_int_quant": lambda x, s: call(
                "relu_int_quant", x, s, z, b, True, False, "round", False
            ),
            "_int_quant_backward": lambda x, s: call(
                "_int_quant_backward", *int_quant_backward_args(x, s, z, b, mask)
            ),
            "_int_quant_backward-mask-only": lambda x, s: call(
                "_int_quant_backward",
                torch.ones_like(x),
                None,
                torch.ones_like(x, dtype=torch.bool),
                s,
                z,
                b,
                True,
                False,
                "round",
                False,
                [True, False, False, False],
            ),
            "_relu_int_quant_backward": lambda x, s: call(
                "_relu_int_quant_backward",
                torch.ones_like(x),
                x,
                s,
                z,
                b,
                True,
                False,
                "round",
                False,
                mask,
            ),
            "float_quant": lambda x, s: call("float_quant", x, s, *E4M3),
            "_float_quant_backward": lambda x, s: call(
                "_float_quant_backward",
                torch.ones_like(x),
                x,
                s,
                *E4M3,
                [True, True],
            ),
        }

    return ops(lambda name, *a: getattr(OPS, name)(*a)), ops(composite)


def _outputs(result):
    """The defined outputs of an op, as a list."""
    outs = list(result) if isinstance(result, (tuple, list)) else [result]
    return [t for t in outs if t is not None]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_subnormal_scale_raises_on_cpu_and_gives_nan_in_the_composite(dtype):
    x = with_subnormals(dtype).reshape(2, -1)
    cpu, comp = normal_scale_ops(dtype)
    for name, call in cpu.items():
        # The mask-keeping forward reports as int_quant, the op the user called.
        op = "int_quant" if name == "_int_quant_with_mask" else name.split("-")[0]
        for bad in subnormals(dtype):
            for scale in (
                torch.tensor(bad, dtype=dtype),
                torch.tensor([[1.0], [bad]], dtype=dtype),
            ):
                with pytest.raises(RuntimeError, match=normal_scale_message(op, dtype)):
                    call(x, scale)
                if name.startswith(("relu", "_relu")):
                    continue  # its composite calls int_quant's kernel of the device (the CPU's here)
                got = _outputs(comp[name](x, scale))
                if name == "_int_quant_backward":
                    # The bit width's gradient reads only where the clamp acted, which a NaN
                    # scale (as a NaN x) never is: it gets nothing from these elements.
                    assert float(got.pop()) == 0.0
                if scale.dim() == 0:
                    assert all_nan(*got), name
                else:  # NaN in the invalid channel's outputs; the valid channel's stay finite
                    assert all_nan(*[t[1] for t in got if t.dim() == 2]), name
                    assert torch.isfinite(got[0][0]).all(), name


def test_the_issue_calls():
    # float_quant at a float32 scale of 1e-40 (all NaN before), its backward at 1e-45.
    x = torch.randn(4)
    for v in (1e-40, 1e-45):
        s = torch.tensor(v)
        with pytest.raises(RuntimeError, match="float_quant: scale must be a normal"):
            OPS.float_quant(x, s, *E4M3)
        with pytest.raises(RuntimeError, match="_float_quant_backward: scale must be a normal"):
            OPS._float_quant_backward(x, x, s, *E4M3, [True, True])


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_smallest_normal_scale_is_accepted(dtype):
    """At the bound itself: the composition's numbers (x / s may overflow to inf there and
    clamp, as in Brevitas), x's gradient the STE's."""
    x = with_subnormals(dtype)
    s = torch.tensor(smallest_normal(dtype), dtype=dtype)
    z, b = torch.zeros((), dtype=dtype), torch.tensor(8.0)
    y = OPS.int_quant(x, s, z, b, True, False, "round", False)
    assert_bitwise(y, ref_int_quant(x, s, z, b, True, False))
    yr = OPS.relu_int_quant(x, s, z, b, True, False, "round", False)
    assert_bitwise(yr, ref_int_quant(torch.relu(x), s, z, b, True, False))
    # Every |x| >= 1 / 128 is beyond 127 * s: clamped, no gradient; the rest passes it.
    inside = (x / s).abs() <= 127
    gx = OPS._int_quant_backward(*int_quant_backward_args(x, s, z, b, [True, False, False, False]))[
        0
    ]
    assert_bitwise(gx, inside.to(dtype), signed_zero=False)
    # float_quant (e4m3, largest value 448): |x| / s beyond 448 saturates to +-448 s.
    fy = OPS.float_quant(x, s, *E4M3)
    big = (x.double() / s.double()).abs() > 448
    assert_bitwise(fy[big], (torch.sign(x[big]) * 448 * s).to(dtype))


# ---- ops that take any positive finite scale -------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("kernel", ["cpu", "composite"])
def test_binary_and_ternary_quantizers_are_exact_at_subnormal_scales(dtype, kernel):
    call = (lambda name, *a: getattr(OPS, name)(*a)) if kernel == "cpu" else composite
    x = with_subnormals(dtype)
    g = torch.arange(x.numel(), dtype=torch.float64).sub(4).to(dtype)
    for v in subnormals(dtype):
        s = torch.tensor(v, dtype=dtype)
        # binary: y = sign(x) * s (binary sign: +1 at +-0); dx = g * s, ds = sum(g * sign(x)).
        sign = ref_binary_sign(x)
        assert_bitwise(call("binary_quant", x, s), sign * s)
        gx, gs = call("_binary_quant_backward", g, x, s, [True, True])
        assert_bitwise(gx, g * s)
        assert_bitwise(gs, (g * sign).sum())
        # clamped binary: the sign of clamp(x, -s, s), times s; dx = g * s inside [-s, s].
        c = torch.maximum(torch.minimum(x, s), -s)
        assert_bitwise(call("clamped_binary_quant", x, s), ref_binary_sign(c) * s)
        gx, _ = call("_clamped_binary_quant_backward", g, x, s, [True, True])
        assert_bitwise(gx, torch.where(x.abs() <= s, g * s, torch.zeros_like(g)), signed_zero=False)
        # ternary (threshold 0.5): sign(x) * s where |x| > 0.5 s, else 0.
        m = (x.abs() > (s.double() * 0.5).to(dtype)).to(dtype)
        assert_bitwise(call("ternary_quant", x, s, 0.5), m * ref_ternary_sign(x) * s)
        gx, gs = call("_ternary_quant_backward", g, x, s, 0.5, [True, True])
        assert_bitwise(gx, (g * s) * m)


# ---- subnormal inputs with a normal scale -----------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_int_quant_of_subnormal_x(dtype):
    """The composition's values and gradients: x / s of a subnormal x is a tiny number that
    rounds to +-0, and the scale's gradient is finite."""
    x = with_subnormals(dtype)
    s, z = torch.tensor(0.25, dtype=dtype), torch.tensor(0.0, dtype=dtype)
    b = torch.tensor(4.0, dtype=dtype)
    g = torch.linspace(-1, 1, x.numel(), dtype=torch.float64).to(dtype)
    for mode in ROUND:
        xx, ss = x.clone().requires_grad_(), s.clone().requires_grad_()
        want = ref_int_quant(xx, ss, z, b, True, False, mode)
        want.backward(g)
        y = OPS.int_quant(x, s, z, b, True, False, mode, False)
        assert_bitwise(y, want.detach())
        gx, gs, _, _ = OPS._int_quant_backward(
            g, x, None, s, z, b, True, False, mode, False, [True, True, True, True]
        )
        assert_bitwise(gx, xx.grad)
        assert torch.isfinite(gs).all()
        torch.testing.assert_close(gs, ss.grad, rtol=1e-2, atol=1e-2)
        yr = OPS.relu_int_quant(x, s, z, b, True, False, mode, False)
        assert_bitwise(yr, ref_int_quant(torch.relu(x), s, z, b, True, False, mode))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_float_quant_of_subnormal_x(dtype):
    """e4m3's smallest step is 2^-9: u = x / s of a subnormal x rounds to +-0 (its sign kept),
    with x's gradient g (the grid's slope is 1 below the normal range) and the scale's g * (0 - u)."""
    sub = subnormals(dtype)
    x = torch.tensor(sub + [-v for v in sub], dtype=torch.float64).to(dtype)
    s = torch.tensor(0.5, dtype=dtype)
    g = torch.tensor([1.0, -2.0, 3.0, 0.5], dtype=dtype)
    for kernel in ("cpu", "composite"):
        if kernel == "cpu":
            y = OPS.float_quant(x, s, *E4M3)
            gx, gs = OPS._float_quant_backward(g, x, s, *E4M3, [True, True])
        else:
            y = composite("float_quant", x, s, *E4M3)
            gx, gs = composite(
                "_float_quant_backward",
                g,
                x,
                s,
                *E4M3,
                [True, True],
            )
        assert_bitwise(y, x * 0)  # +-0 with x's sign
        assert_bitwise(gx, g)
        u = x / s
        torch.testing.assert_close(gs, (g * (0 - u)).sum(), rtol=1e-3, atol=0)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_ste_and_clamp_ops_of_subnormal_x(dtype):
    x = with_subnormals(dtype)
    for name, fn in ROUND.items():
        op = "dpu_round_ste" if name == "dpu" else f"{name}_ste"
        assert_bitwise(getattr(OPS, op)(x), fn(x))
    assert_bitwise(OPS.binary_sign_ste(x), ref_binary_sign(x))
    assert_bitwise(OPS.ternary_sign_ste(x), ref_ternary_sign(x))
    assert_bitwise(OPS.abs_binary_sign_grad(x), x.abs())
    lo = torch.tensor(-subnormals(dtype)[0], dtype=dtype)
    hi = torch.tensor(subnormals(dtype)[1], dtype=dtype)
    assert_bitwise(
        OPS.tensor_clamp_ste(x, lo, hi), torch.where(x > hi, hi, torch.where(x < lo, lo, x))
    )


def test_quantization_int8_with_a_subnormal_threshold():
    """Every |x| subnormal: threshold = max|x|, scale = threshold / 127 (subnormal, float32), and
    y = clamp(round(x / scale), -127, 127) * scale, finite; the clip gradient passes |x| <= t."""
    sub = subnormals(torch.float32)
    x = torch.tensor([3 * sub[0], -sub[0], sub[1], 0.0, -2 * sub[0]])
    threshold, iteration = torch.zeros(()), torch.zeros((), dtype=torch.int64)
    y, scale, clip = OPS.quantization_int8(x, threshold, iteration)
    t = x.abs().max()
    want_scale = t / 127
    assert_bitwise(scale, want_scale)
    assert_bitwise(y, torch.clamp(torch.round(x / want_scale), -127, 127) * want_scale)
    assert torch.isfinite(y).all() and float(clip) == float(t)
    g = torch.ones_like(x)
    assert_bitwise(OPS._quantization_int8_backward(g, x, clip), g)


# ---- the statistics ops --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_a_subnormal_statistic_raises_without_scaling_min_val(dtype):
    """max|w| (the k-th |x|) subnormal: the scale would be subnormal (or 0), which int_quant
    rejects; the fused ops say so at their own check, as the composition's int_quant does."""
    sub = subnormals(dtype)[0]
    w = torch.tensor([[sub, -sub / 2], [1.0, 0.5]], dtype=torch.float64).to(dtype)
    b = torch.tensor(8.0)
    normal = re.escape(": the scale max|w| / threshold must be a normal positive finite number")
    with pytest.raises(RuntimeError, match="abs_max_int_quant" + normal):
        OPS.abs_max_int_quant(w, b, 0, True, True, None, "round", False)
    # The composite kernel (on the CPU here) hands the scale to int_quant, whose check raises.
    with pytest.raises(RuntimeError, match="int_quant: scale must be a normal"):
        composite("abs_max_int_quant", w, b, 0, True, True, None, "round", False)
    x = w.reshape(-1)
    kth = re.escape(": the scale (the k-th smallest |x|, clamped, / threshold) must be a normal")
    with pytest.raises(RuntimeError, match="abs_percentile_int_quant" + kth):
        OPS.abs_percentile_int_quant(x, None, b, 2, True, False, None, "round", False, False)
