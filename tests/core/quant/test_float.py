"""FloatQuant, FloatClamp, FloatScaling and the format helpers (Brevitas's minifloat blocks).

References, none of them the code under test: every value of a format enumerated from its bit
fields and the nearest one picked by search (helpers.format_values / nearest); the formats'
published largest values (OCP 8-bit floating point spec: E4M3 448, E5M2 57344; FNUZ E4M3 240);
Brevitas's chain of elementwise steps, written out here."""

import math

import pytest
import torch
from helpers import format_values, nearest

from brevitas_cpp.core.function_wrapper import FloatClamp, Identity, RoundSte, TensorClamp
from brevitas_cpp.core.quant import FloatQuant
from brevitas_cpp.core.scaling import ConstScaling, FloatScaling, ParameterScaling
from brevitas_cpp.function import compute_max_mantissa, max_float
from brevitas_cpp.utils.float_quant_utils import (
    get_max_available_float,
    get_min_available_float,
    get_minifloat_value,
)

OCP_E4M3_NAN = ("111",)
OCP_E5M2_INF, OCP_E5M2_NAN = ("00",), ("01", "11", "10")


class RoundCopy(RoundSte):
    """The same rounding under another type: the block then takes the unfused composition."""


def block(
    e=4,
    m=3,
    bias=7,
    scaling_impl=None,
    signed=True,
    round_impl=None,
    dtype=None,
    float_scaling=False,
    **clamp,
):
    """A FloatQuant of the stock blocks. Without float_scaling the scale is scaling_impl's
    value itself (with it, that value over the format's largest value, as Brevitas divides)."""
    clamp.setdefault("nan_values", OCP_E4M3_NAN if (e, m) == (4, 3) else None)
    if clamp["nan_values"] is not None and "max_available_float" not in clamp:
        clamp["max_available_float"] = get_max_available_float(
            e, m, bias, clamp["nan_values"], clamp.get("inf_values"), True
        )
    return FloatQuant(
        bit_width=e + m + int(signed),
        signed=signed,
        exponent_bit_width=e,
        mantissa_bit_width=m,
        exponent_bias=bias,
        float_clamp_impl=FloatClamp(TensorClamp(), signed, dtype=dtype, **clamp),
        input_view_impl=Identity(),
        scaling_impl=scaling_impl,
        float_scaling_impl=(
            FloatScaling(clamp.get("max_available_float"), dtype=dtype) if float_scaling else None
        ),
        float_to_int_impl=round_impl if round_impl is not None else RoundSte(),
        dtype=dtype,
    )


# ---- the formats ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "e, m, bias, nan_values, inf_values, largest",
    [
        (4, 3, 7, OCP_E4M3_NAN, None, 448.0),  # OCP E4M3
        (5, 2, 15, OCP_E5M2_NAN, OCP_E5M2_INF, 57344.0),  # OCP E5M2
        (4, 3, 7, None, None, 480.0),  # IEEE-like bias, nothing reserved
        (4, 3, 8, None, None, 240.0),  # FNUZ E4M3
        (5, 2, 16, None, None, 57344.0),  # FNUZ E5M2
        (3, 2, 3, None, None, 28.0),  # FP6 E3M2
        (2, 3, 1, None, None, 7.5),  # FP6 E2M3
        (2, 1, 1, None, None, 6.0),  # FP4 E2M1
    ],
)
def test_largest_value_of_each_encoding(e, m, bias, nan_values, inf_values, largest):
    assert get_max_available_float(e, m, bias, nan_values, inf_values, True) == largest
    # The largest finite value of the enumerated grid, reserved codes removed.
    assert max(v for v, _ in format_values(e, m, bias, largest)) == largest


def test_smallest_value_and_bit_patterns():
    assert get_min_available_float(4, 3, 7) == 2.0**-9  # the smallest E4M3 subnormal
    assert get_min_available_float(5, 2, 15) == 2.0**-16
    assert get_minifloat_value("0111", "100", 7) == 1.5  # 2^0 * 1.100b
    assert get_minifloat_value("0000", "110", 7) == 0.75 * 2.0**-6  # subnormal 0.110b * 2^-6


def test_max_float_and_max_mantissa_written_out():
    for m in range(1, 8):
        assert compute_max_mantissa(torch.tensor(float(m))).item() == 2 - 2.0**-m
    value = max_float(torch.tensor(4.0), compute_max_mantissa(torch.tensor(3.0)), torch.tensor(7.0))
    assert value.item() == 1.875 * 2.0**8


@pytest.mark.parametrize(
    "args, fragment",
    [
        ((4, 3, 7, None, ("00",), True), "inf_values needs nan_values"),
        ((4, 3, 7, None, None, False), "non-saturating"),
        ((4, 3, 7, ("1111",), None, True), "at most mantissa_bit_width=3"),
        ((4, 3, 7, ("12",), None, True), "'0' and '1'"),
    ],
)
def test_bad_encodings_name_the_setting(args, fragment):
    with pytest.raises(ValueError, match=fragment):
        get_max_available_float(*args)


# ---- FloatQuant ----------------------------------------------------------------------------------


@pytest.mark.parametrize("e, m, bias", [(4, 3, 7), (5, 2, 15), (4, 3, 8), (2, 1, 1)])
def test_rounds_to_the_nearest_format_value_times_scale(e, m, bias):
    quant = block(
        e, m, bias, scaling_impl=ConstScaling(0.5, dtype=torch.float64), dtype=torch.float64
    )
    largest = quant.clamp_max_value
    grid = format_values(e, m, bias, largest)
    values = [v for v, _ in grid]
    points = values + [(a + b) / 2 for a, b in zip(values, values[1:])] + [1.5 * largest]
    u = torch.tensor(points + [-p for p in points], dtype=torch.float64)
    y, scale, zero_point, *_ = quant(u * 0.5)
    expected = torch.tensor([nearest(p, grid) for p in u.tolist()], dtype=torch.float64) * 0.5
    assert torch.equal(y, expected)
    assert scale.item() == 0.5 and zero_point.item() == 0.0


def zero_mantissa_reference(u: float, e: int, bias: int, signed: bool) -> float:
    """A format without mantissa bits (E8M0, the MX shared scale) holds 0 and the powers of two
    2^(1 - bias) ... 2^(2^e - 1 - bias). u in [2^k, 2^(k+1)) goes to the nearer one; at the
    midpoint 1.5 * 2^k the significand 1.5 rounds half to even, to 2. Below 2^(1 - bias): 0 or
    2^(1 - bias), 0 at the midpoint."""
    a = abs(u) if signed else max(u, 0.0)
    low = 2.0 ** (1 - bias)
    if a < low:
        q = 0.0 if a <= low / 2 else low
    else:
        k = 2.0 ** math.floor(math.log2(a))
        q = k if a < 1.5 * k else 2 * k
    return math.copysign(min(q, 2.0 ** (2**e - 1 - bias)), u) if signed else q


@pytest.mark.parametrize(
    "e, bias, signed, dtype",
    [(8, 127, False, torch.float64), (7, 63, True, torch.float32)],
    ids=["e8m0", "e7m0"],
)
def test_formats_without_mantissa_bits(e, bias, signed, dtype):
    quant = block(
        e, 0, bias, scaling_impl=ConstScaling(1.0, dtype=dtype), signed=signed, dtype=dtype
    )
    points = [0.0, 2.0**-130, 0.5 * 2.0 ** (1 - bias), 0.7 * 2.0 ** (1 - bias), 2.0**70]
    for j in (1 - bias, -3, 0, 1, 5, 2**e - 2 - bias):
        points += [2.0**j * f for f in (1.0, 1.25, 1.5, 1.75)]
    u = torch.tensor(points + [-p for p in points], dtype=dtype)
    y = quant(u)[0]
    expected = [zero_mantissa_reference(p, e, bias, signed) for p in u.tolist()]
    assert torch.equal(y, torch.tensor(expected, dtype=dtype))
    assert quant(u)[4].item() == 0.0  # mantissa_bit_width


def test_returns_brevitas_tuple():
    quant = block(
        5,
        2,
        15,
        nan_values=OCP_E5M2_NAN,
        inf_values=OCP_E5M2_INF,
        scaling_impl=ConstScaling(1.0),
        float_scaling=True,
    )
    out = quant(torch.randn(8))
    assert len(out) == 9
    _, scale, zero_point, e, m, bias, saturating, inf_values, nan_values = out
    assert (e.item(), m.item(), bias.item(), zero_point.item()) == (5.0, 2.0, 15.0, 0.0)
    assert saturating is True
    assert inf_values == OCP_E5M2_INF and nan_values == OCP_E5M2_NAN
    assert quant.bit_width().item() == 8.0
    assert out[1].item() == pytest.approx(1.0 / 57344.0)  # the constant over the largest value


@pytest.mark.parametrize(
    "settings",
    [
        dict(),
        dict(e=5, m=2, bias=15, nan_values=OCP_E5M2_NAN, inf_values=OCP_E5M2_INF),
        dict(e=5, m=2, bias=15, nan_values=OCP_E5M2_NAN, inf_values=OCP_E5M2_INF, saturating=False),
        dict(nan_values=OCP_E4M3_NAN, saturating=False),
        dict(e=2, m=1, bias=1, signed=False, nan_values=None),
    ],
    ids=["e4m3", "e5m2", "e5m2_inf", "e4m3_nan", "e2m1_unsigned"],
)
def test_fused_op_equals_brevitas_composition(settings):
    """The stock blocks run one fused op; a rounding block of another type takes Brevitas's
    chain of steps. Same values (NaN where NaN), gradients equal in float64."""
    dtype = torch.float64
    fused = block(scaling_impl=ParameterScaling(0.03, dtype=dtype), dtype=dtype, **settings)
    unfused = block(
        scaling_impl=ParameterScaling(0.03, dtype=dtype),
        round_impl=RoundCopy(),
        dtype=dtype,
        **settings,
    )
    assert fused.fused and not unfused.fused
    g = torch.Generator().manual_seed(0)
    x = torch.randn(512, generator=g, dtype=dtype) * 10.0
    edges = torch.tensor([0.0, -0.0, 1e-30, 1e6, -1e6], dtype=dtype)
    x = torch.cat([x, edges])
    upstream = torch.randn(x.shape, generator=g, dtype=dtype)
    grads = []
    for quant in (fused, unfused):
        xi = x.clone().requires_grad_()
        y = quant(xi)[0]
        kept = torch.isfinite(y)  # a non-saturating format's overflow (inf, NaN) takes no part
        (y[kept] * upstream[kept]).sum().backward()
        grads.append((xi.grad, quant.scaling_impl.value.grad))
    (gx0, gs0), (gx1, gs1) = grads
    torch.testing.assert_close(gx0, gx1, rtol=1e-12, atol=1e-12)
    # With overflow marked as inf/NaN the scale's gradient is NaN in both (0 * an infinite
    # slope); saturating formats have a finite one.
    torch.testing.assert_close(gs0, gs1, rtol=1e-9, atol=1e-12, equal_nan=True)
    if settings.get("saturating", True):
        assert gs0.isfinite() and gs0.abs().item() > 0.0
    specials = torch.tensor([math.inf, -math.inf, math.nan], dtype=dtype)
    with torch.no_grad():
        x = torch.cat([x, specials])
        y0, y1 = fused(x)[0], unfused(x)[0]
    assert torch.equal(torch.nan_to_num(y0, nan=7.5), torch.nan_to_num(y1, nan=7.5))


def test_observer_only_passes_x_through():
    quant = block(scaling_impl=ConstScaling(0.1))
    quant.observer_only = True
    x = torch.randn(16)
    assert quant(x)[0] is x


@pytest.mark.parametrize(
    "kwargs, error, fragment",
    [
        (dict(bit_width=7), ValueError, r"bit_width \(7\) must be exponent_bit_width"),
        (
            dict(exponent_bit_width=0, bit_width=4),
            ValueError,
            r"exponent_bit_width must be in \[1, 8\]",
        ),
        (
            dict(mantissa_bit_width=24, bit_width=29),
            ValueError,
            r"mantissa_bit_width must be in \[0, 23\]",
        ),
        (dict(mantissa_bit_width=2.5), TypeError, "mantissa_bit_width must be an integer"),
        (dict(signed="yes"), TypeError, "signed"),
    ],
)
def test_bad_settings_name_the_argument(kwargs, error, fragment):
    args = dict(
        bit_width=8,
        signed=True,
        exponent_bit_width=4,
        mantissa_bit_width=3,
        exponent_bias=7,
        float_clamp_impl=FloatClamp(TensorClamp(), True),
        input_view_impl=Identity(),
    )
    args.update(kwargs)
    with pytest.raises(error, match=fragment):
        FloatQuant(**args)


# ---- FloatClamp and FloatScaling -----------------------------------------------------------------


def clamp_args(e=5, m=2, bias=15):
    return (
        torch.tensor(float(e)),
        compute_max_mantissa(torch.tensor(float(m))),
        torch.tensor(float(bias)),
    )


def test_clamp_marks_overflow_as_its_format_says():
    inf, nan = math.inf, math.nan
    x = torch.tensor([1e6, -1e6, 57344.0, inf, -inf, nan, 3.0])
    with_inf = FloatClamp(
        TensorClamp(), True, OCP_E5M2_INF, OCP_E5M2_NAN, 57344.0, saturating=False
    )
    y, saturating, inf_values, nan_values = with_inf(x, *clamp_args())
    expected = torch.tensor([inf, -inf, 57344.0, inf, -inf, nan, 3.0])
    assert torch.equal(torch.nan_to_num(y, nan=1.5), torch.nan_to_num(expected, nan=1.5))
    assert (saturating, inf_values, nan_values) == (False, OCP_E5M2_INF, OCP_E5M2_NAN)
    nan_only = FloatClamp(TensorClamp(), True, None, OCP_E5M2_NAN, 57344.0, saturating=False)
    y = nan_only(x, *clamp_args())[0]
    expected = torch.tensor([nan, nan, 57344.0, nan, nan, nan, 3.0])
    assert torch.equal(torch.nan_to_num(y, nan=1.5), torch.nan_to_num(expected, nan=1.5))
    # Unsigned, nothing reserved: [0, 1.75 * 2^16].
    y = FloatClamp(TensorClamp(), False)(torch.tensor([-2.0, 1e9, 5.0]), *clamp_args())[0]
    assert torch.equal(y, torch.tensor([0.0, 114688.0, 5.0]))


def test_non_saturating_clamp_needs_special_codes():
    with pytest.raises(ValueError, match="needs inf_values or nan_values"):
        FloatClamp(TensorClamp(), True, saturating=False)


def test_float_scaling_is_the_capped_largest_value():
    assert FloatScaling()(*clamp_args(4, 3, 7)).item() == 480.0
    assert FloatScaling(448.0)(*clamp_args(4, 3, 7)).item() == 448.0
    assert FloatScaling(dtype=torch.float16)(*clamp_args(4, 3, 7)).dtype == torch.float16
