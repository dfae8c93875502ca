"""float_quant (+ _float_quant_backward): minifloat fake quantization, Brevitas's FloatQuant with
its FloatClamp in one op.

References, none of them the code under test:
- Brevitas 0.12.1's own FloatQuant, recorded by golden/record_float_quant.py (forward bit for bit,
  float32 and float64; x's gradient to float rounding; the scale's in float64, where Brevitas's
  sum of cancelling terms keeps its digits);
- every value of each format enumerated from its bit fields, and the nearest one (ties to the even
  mantissa) picked by search, written out here."""

import math
from pathlib import Path

import pytest
import torch
from helpers import DTYPE_IDS, DTYPES, assert_bitwise, format_values, nearest

import brevitas_cpp  # noqa: F401  (registers the ops)

OPS = torch.ops.brevitas_cpp
COMPOSITE = torch._C.DispatchKey.CompositeExplicitAutograd
GOLDEN = torch.load(Path(__file__).parent / "golden" / "float_quant.pt")

# (exponent bits, mantissa bits, bias, largest value): OCP's e4m3 (its top code is NaN) and e5m2,
# FNUZ's e4m3 (bias 8), FP6 e3m2 and FP4 e2m1.
FORMATS = {
    "ocp_e4m3": (4, 3, 7, 448.0),
    "ocp_e5m2": (5, 2, 15, 57344.0),
    "fnuz_e4m3": (4, 3, 8, 240.0),
    "e3m2": (3, 2, 3, 28.0),
    "e2m1": (2, 1, 1, 6.0),
}


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(torch.nan_to_num(a, nan=1234.5), torch.nan_to_num(b, nan=1234.5))


def call(c, x, scale):
    e, m, b, signed, saturating, inf_values, nan_values = c["format"]
    return OPS.float_quant(
        x, scale, e, m, b, c["max_value"], signed, saturating, inf_values, nan_values
    )


# ---- against Brevitas ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_equals_brevitas(name):
    c = GOLDEN[name]
    x = c["x"].clone().requires_grad_()
    scale = c["scale"].clone().requires_grad_()
    y = call(c, x, scale)
    assert same(y.detach(), c["y"])
    # Infinities, NaN, 0 and beyond the range, recorded in float32 with scale 1.
    assert same(call(c, c["specials"], torch.ones(())), c["special_y"])
    y.backward(c["upstream"])
    eps = torch.finfo(c["x"].dtype).eps
    # x's gradient: Brevitas's chain of float ops against one product, a few ulps apart.
    torch.testing.assert_close(x.grad, c["grad_x"], rtol=8 * eps, atol=8 * eps)
    if c["x"].dtype == torch.float64:
        torch.testing.assert_close(
            scale.grad, c["grad_scale"], rtol=1e-6, atol=1e-9, equal_nan=True
        )
    else:
        # Brevitas's float32 sum cancels (its error is up to 2.6x the value); against its own
        # float64 result instead.
        ref = GOLDEN[name.replace("float32", "float64")]["grad_scale"].float()
        torch.testing.assert_close(scale.grad, ref, rtol=1e-3, atol=1e-4, equal_nan=True)


# ---- against the enumerated formats --------------------------------------------------------------


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_each_format_rounds_to_its_nearest_value(fmt):
    e, m, bias, max_value = FORMATS[fmt]
    grid = format_values(e, m, bias, max_value)
    assert max(v for v, _ in grid) == max_value
    values = [v for v, _ in grid]
    # The values themselves, the midpoints between neighbours (ties), and random points.
    points = values + [(a + b) / 2 for a, b in zip(values, values[1:])]
    points += (
        torch.rand(300, generator=torch.Generator().manual_seed(1)) * 1.2 * max_value
    ).tolist()
    u = torch.tensor(points + [-p for p in points], dtype=torch.float64)
    y = OPS.float_quant(u, torch.ones((), dtype=torch.float64), e, m, bias, max_value)
    expected = torch.tensor([nearest(p, grid) for p in u.tolist()], dtype=torch.float64)
    assert torch.equal(y, expected)


def test_non_saturating_and_unsigned_ranges():
    e, m, bias, max_value = FORMATS["ocp_e5m2"]
    x = torch.tensor([1e6, -1e6, 57344.0, float("inf")])
    one = torch.ones(())
    inf, nan = float("inf"), float("nan")
    y = OPS.float_quant(x, one, e, m, bias, max_value, True, False, True, False)
    assert same(y, torch.tensor([inf, -inf, 57344.0, nan]))  # Brevitas: inf / inf is NaN
    y = OPS.float_quant(x, one, e, m, bias, max_value, True, False, False, True)
    assert same(y, torch.tensor([nan, nan, 57344.0, nan]))
    # Unsigned: [0, max]; negative values clamp to 0 (and get no gradient).
    x = torch.tensor([-3.0, 3.0], requires_grad=True)
    y = OPS.float_quant(x, one, e, m, bias, max_value, False)
    assert same(y.detach(), torch.tensor([0.0, 3.0]))
    y.sum().backward()
    assert torch.equal(x.grad, torch.tensor([0.0, 1.0]))


def test_straight_through_slope_written_out():
    """dy/dx = 1 + I sign(u) / |u| (round(u / I) - u / I) where the grid's exponent is above its
    minimum, 1 below it (subnormals), 0 where clamped; I = 2^(floor(log2|u|) - m)."""
    e, m, bias, max_value = FORMATS["ocp_e4m3"]
    x = torch.tensor([1.3, -2.7, 100.5, 0.001, 1000.0], dtype=torch.float64, requires_grad=True)
    OPS.float_quant(x, torch.ones((), dtype=torch.float64), e, m, bias, max_value).sum().backward()
    expected = []
    for u in x.tolist():
        if abs(u) > max_value:
            expected.append(0.0)
            continue
        exponent = math.floor(math.log2(abs(u))) - m
        if exponent < 1 - bias - m:
            expected.append(1.0)
            continue
        i = 2.0**exponent
        v = u / i
        expected.append(1 + i * math.copysign(1, u) / abs(u) * (round(v) - v))
    torch.testing.assert_close(x.grad, torch.tensor(expected, dtype=torch.float64))


# ---- every kernel, layouts, dtypes -----------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_composite_kernel_equals_the_cpu_kernel(dtype):
    e, m, bias, max_value = FORMATS["ocp_e4m3"]
    x = (torch.randn(4, 6, 5, generator=torch.Generator().manual_seed(2)) * 50).to(dtype)
    x[0, 0, :3] = torch.tensor([float("inf"), float("nan"), 0.0])
    scale = torch.tensor([0.5, 0.25, 2.0, 1.0]).view(4, 1, 1).to(dtype)
    args = (e, m, bias, max_value, True, True, False, False, "round")
    y = OPS.float_quant(x, scale, *args)
    assert same(OPS.float_quant.default._op_dk(COMPOSITE, x, scale, *args), y)
    g = torch.randn(4, 6, 5, generator=torch.Generator().manual_seed(3)).to(dtype)
    gx, gs = OPS._float_quant_backward(g, x, scale, *args, [True, True])
    cx, cs = OPS._float_quant_backward.default._op_dk(COMPOSITE, g, x, scale, *args, [True, True])
    assert same(cx, gx)
    tol = {torch.float64: 1e-12, torch.float32: 1e-5}.get(dtype, 5e-2)
    torch.testing.assert_close(cs, gs, rtol=tol, atol=tol, equal_nan=True)


@pytest.mark.parametrize("layout", ["channels_last", "transposed", "sliced"])
def test_layouts_keep_strides_and_values(layout):
    e, m, bias, max_value = FORMATS["e3m2"]
    base = torch.randn(2, 3, 4, 5, generator=torch.Generator().manual_seed(4)) * 5
    x = {
        "channels_last": base.contiguous(memory_format=torch.channels_last),
        "transposed": base.transpose(1, 3),
        "sliced": base[:, :, ::2],
    }[layout]
    scale = torch.full((), 0.5)
    y = OPS.float_quant(x, scale, e, m, bias, max_value)
    assert_bitwise(y, OPS.float_quant(x.contiguous(), scale, e, m, bias, max_value))
    assert y.stride() == torch.empty_like(x).stride()


def test_opcheck_and_gradcheck():
    e, m, bias, max_value = FORMATS["ocp_e4m3"]
    x = torch.randn(3, 4, dtype=torch.float64) * 20
    scale = torch.tensor([0.5, 1.0, 2.0, 4.0], dtype=torch.float64)
    args = (e, m, bias, max_value)
    torch.library.opcheck(
        OPS.float_quant.default, (x.requires_grad_(), scale.requires_grad_(), *args)
    )
    g = torch.randn(3, 4, dtype=torch.float64)
    full = (*args, True, True, False, False, "round", [True, True])
    # The backward op is deliberately not differentiable (autogradNotImplementedFallback).
    torch.library.opcheck(
        OPS._float_quant_backward.default,
        (g, x.detach(), scale.detach(), *full),
        test_utils=("test_schema", "test_autograd_registration", "test_faketensor"),
    )
    # gradcheck in float64 where the forward has an ordinary derivative that the straight-through
    # one must equal: beyond the range, y = +-max_value * s (dy/dx = 0, dy/ds = +-max_value).
    beyond = torch.tensor([1000.0, -2000.0, 5000.0], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda x_, s_: OPS.float_quant(x_, s_, *args),
        (beyond, torch.ones((), dtype=torch.float64, requires_grad=True)),
    )


def test_torchscript_and_compile():
    e, m, bias, max_value = FORMATS["ocp_e4m3"]

    def f(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return torch.ops.brevitas_cpp.float_quant(x, s, 4, 3, 7, 448.0)

    x = torch.randn(8, 8) * 30
    s = torch.tensor(0.5)
    y = f(x, s)
    assert torch.equal(torch.jit.script(f)(x, s), y)
    assert torch.equal(torch.compile(f, backend="aot_eager", fullgraph=True)(x, s), y)


@pytest.mark.parametrize(
    "kwargs,fragment",
    [
        (dict(mantissa_bit_width=0), "mantissa_bit_width must be in [1, 23]"),
        (dict(exponent_bit_width=0), "exponent_bit_width must be in [1, 8]"),
        (dict(max_value=481.0), "at most the format's largest value 480"),
        (dict(max_value=float("nan")), "max_value must be positive, finite"),
        (dict(saturating=False), "needs inf_values or nan_values"),
        (dict(rounding_mode="nearest"), "rounding_mode"),
    ],
)
def test_bad_input_names_the_argument(kwargs, fragment):
    args = dict(
        exponent_bit_width=4,
        mantissa_bit_width=3,
        exponent_bias=7,
        max_value=448.0,
        signed=True,
        saturating=True,
        inf_values=False,
        nan_values=False,
        rounding_mode="round",
    )
    args.update(kwargs)
    with pytest.raises(RuntimeError, match="brevitas_cpp::float_quant") as error:
        OPS.float_quant(torch.randn(3), torch.ones(()), *args.values())
    assert fragment in str(error.value)
    with pytest.raises(RuntimeError, match="scale must be a normal positive finite number"):
        OPS.float_quant(torch.randn(3), torch.zeros(()), 4, 3, 7, 448.0)
    with pytest.raises(RuntimeError, match="scale must have the dtype of x"):
        OPS.float_quant(torch.randn(3), torch.ones((), dtype=torch.float64), 4, 3, 7, 448.0)
