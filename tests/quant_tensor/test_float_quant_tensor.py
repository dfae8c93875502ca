"""FloatQuantTensor: construction, copies, the minifloat view (is_valid, minifloat(), int())
against grids enumerated from the minifloat formula, arithmetic, the torch handlers, torch.cat
and _CachedIOFloat. A few numbers were recorded from Brevitas 0.12.1 (marked where used)."""

import pytest
import torch
import torch.nn.functional as F

from brevitas_cpp.proxy.utils import _CachedIOFloat
from brevitas_cpp.quant_tensor import (
    FloatMixin,
    FloatQuantTensor,
    FloatQuantTensorBase,
    IntQuantTensor,
    QuantTensor,
)

FIELDS = (
    "value",
    "scale",
    "zero_point",
    "exponent_bit_width",
    "mantissa_bit_width",
    "exponent_bias",
    "saturating_t",
    "inf_values",
    "nan_values",
    "signed_t",
    "training_t",
)
TENSOR_META = ("scale", "zero_point", "exponent_bit_width", "mantissa_bit_width", "exponent_bias")
FLAGS = ("saturating_t", "signed_t", "training_t")

# OCP formats: e4m3 has no inf and NaN at mantissa 111 of the top exponent; e5m2 IEEE-like.
E4M3 = dict(exponent_bit_width=4.0, mantissa_bit_width=3.0, exponent_bias=7.0)
E4M3_CODES = dict(inf_values=None, nan_values=("111",))
E5M2 = dict(exponent_bit_width=5.0, mantissa_bit_width=2.0, exponent_bias=15.0)
E5M2_CODES = dict(inf_values=("00",), nan_values=("01", "11", "10"))


def grid(exponent_bits, mantissa_bits, bias, top_exponent=True):
    """Every non-negative minifloat of the format with its significand integer: exponent field e
    and mantissa field m give m * 2^(1 - bias - mantissa_bits) (e = 0, subnormal, integer m) or
    (2^mantissa_bits + m) * 2^(e - bias - mantissa_bits) (integer 2^mantissa_bits + m)."""
    values, ints = [], []
    top = 2**exponent_bits if top_exponent else 2**exponent_bits - 1
    for e in range(top):
        for m in range(2**mantissa_bits):
            significand = m if e == 0 else 2**mantissa_bits + m
            values.append(significand * 2.0 ** (max(e, 1) - bias - mantissa_bits))
            ints.append(float(significand))
    return values, ints


def make(
    minifloats,
    scale=0.5,
    fmt=E4M3,
    codes=E4M3_CODES,
    zero_point=0.0,
    saturating=True,
    signed=True,
    training=False,
    dtype=torch.float32,
):
    """A FloatQuantTensor whose value is minifloats * scale (computed in float64)."""
    minifloats = torch.as_tensor(minifloats, dtype=torch.float64)
    scale_t = torch.as_tensor(scale, dtype=torch.float64)
    return FloatQuantTensor(
        (minifloats * scale_t).to(dtype),
        scale_t.to(dtype),
        torch.tensor(zero_point, dtype=dtype),
        torch.tensor(fmt["exponent_bit_width"]),
        torch.tensor(fmt["mantissa_bit_width"]),
        torch.tensor(fmt["exponent_bias"]),
        saturating,
        codes["inf_values"],
        codes["nan_values"],
        signed,
        training,
    )


def assert_metadata_kept(out, qt):
    assert isinstance(out, FloatQuantTensor)
    for name in FIELDS[1:]:
        assert getattr(out, name) is getattr(qt, name), name


# ---- construction --------------------------------------------------------------------------------


def test_fields_in_brevitas_order():
    assert FloatQuantTensor._fields == FIELDS
    assert FloatQuantTensorBase._fields == FIELDS
    assert issubclass(FloatQuantTensor, FloatMixin) and issubclass(FloatQuantTensor, QuantTensor)


def test_python_numbers_become_tensors_on_the_value_device():
    v = torch.tensor([0.5, -1.0])
    qt = FloatQuantTensor(v, 0.5, 0, 4, 3, 7, True, None, ("111",), True, False)
    assert qt.value is v
    for name, expected in zip(TENSOR_META, (0.5, 0.0, 4.0, 3.0, 7.0)):
        field = getattr(qt, name)
        assert field.dtype == torch.float32 and torch.equal(field, torch.tensor(expected)), name
    for name, expected in zip(FLAGS, (True, True, False)):
        field = getattr(qt, name)
        assert field.dtype == torch.bool and field.item() is expected, name
    assert qt.inf_values is None and qt.nan_values == ("111",)
    meta = FloatQuantTensor(torch.empty(3, device="meta"), 0.5, 0, 4, 3, 7, 1, None, None, 0, 0)
    assert meta.scale.device.type == "meta" and meta.device.type == "meta"


def test_tensor_metadata_and_codes_are_kept_as_given():
    meta = [torch.tensor([0.1, 0.2]), torch.tensor(0.0), torch.tensor(5.0)]
    meta += [torch.tensor(2.0), torch.tensor(15.0)]
    flags = [torch.tensor(False), torch.tensor(True), torch.tensor(True)]
    inf, nan = ["00"], ["01", "11"]
    qt = FloatQuantTensor(torch.zeros(2), *meta, flags[0], inf, nan, flags[1], flags[2])
    for name, field in zip(TENSOR_META, meta):
        assert getattr(qt, name) is field
    assert qt.saturating_t is flags[0] and qt.signed_t is flags[1] and qt.training_t is flags[2]
    assert qt.inf_values is inf and qt.nan_values is nan
    assert qt.saturating is False and qt.signed is True and qt.training is True


def test_keyword_construction_and_properties():
    qt = FloatQuantTensor(
        value=torch.ones(2),
        scale=1.0,
        zero_point=0.0,
        exponent_bit_width=5.0,
        mantissa_bit_width=2.0,
        exponent_bias=15.0,
        saturating=False,
        inf_values=("00",),
        nan_values=("01", "11", "10"),
        signed=False,
        training=True,
    )
    assert qt.saturating is False and qt.signed is False and qt.training is True
    assert qt.tensor is qt.value
    assert qt.eps == 2.0**-126  # smallest normal float32
    assert make([1.0], dtype=torch.float16).eps == 2.0**-14
    assert make([1.0], dtype=torch.bfloat16).eps == 2.0**-126


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(value=[1.0]), r"FloatQuantTensor: value must be a Tensor, got list"),
        (dict(scale="0.1"), r"FloatQuantTensor: scale must be a Tensor or a real number, got str"),
        (dict(zero_point=None), r"zero_point must be a Tensor or a real number, got NoneType"),
        (dict(exponent_bit_width=[4]), r"exponent_bit_width must be a Tensor or a real number"),
        (dict(mantissa_bit_width="3"), r"mantissa_bit_width must be a Tensor or a real number"),
        (dict(exponent_bias=None), r"exponent_bias must be a Tensor or a real number"),
        (dict(saturating=None), r"saturating must be a bool or a bool Tensor, got NoneType"),
        (dict(signed=2), r"signed must be a bool or a bool Tensor, got int \(2\)"),
        (dict(training="yes"), r"training must be a bool or a bool Tensor, got str"),
        (dict(inf_values="00"), r"inf_values must be None or a list or tuple of bit strings"),
        (dict(nan_values=[1]), r"nan_values must be None or a list or tuple of bit strings"),
    ],
)
def test_bad_arguments(kwargs, match):
    args = dict(value=torch.zeros(2), scale=1.0, zero_point=0.0, **E4M3, **E4M3_CODES)
    args.update(saturating=True, signed=True, training=False)
    args.update(kwargs)
    with pytest.raises(TypeError, match=match):
        FloatQuantTensor(**args)


# ---- tuple behaviour, copies, devices --------------------------------------------------------------


def test_is_a_named_tuple_with_brevitas_indexing():
    qt = make([1.0, 2.0])
    assert isinstance(qt, tuple) and len(qt) == 11
    assert qt[0] is qt.value and qt[6] is qt.saturating_t and qt[-1] is qt.training_t
    assert qt.shape == torch.Size([2]) and qt.dim() == 1 and qt.size(0) == 2


def test_set_detach_and_contiguous_keep_flags_and_codes():
    v = torch.tensor([0.5, 1.0], requires_grad=True)
    qt = make([1.0, 2.0], saturating=False, training=True).set(value=v * 1.0)
    d = qt.detach()
    assert isinstance(d, FloatQuantTensor) and not d.value.requires_grad
    assert torch.equal(d.value, qt.value)
    assert d.saturating is False and d.signed is True and d.training is True
    assert d.inf_values is None and d.nan_values == ("111",)
    out = qt.set(exponent_bias=torch.tensor(8.0))
    assert out.exponent_bias.item() == 8.0 and out.scale is qt.scale
    assert qt.set(value=None).detach().value is None  # metadata-only copies
    c = make(torch.ones(2, 3)).transpose(0, 1).contiguous()
    assert c.value.is_contiguous() and c.saturating is True
    with pytest.raises(ValueError, match=r"FloatQuantTensor.set: unknown field\(s\) \['signed'\]"):
        qt.set(signed=False)


def test_to_casts_metadata_but_not_the_flags():
    qt = make([1.0, -2.0], saturating=False)
    half = qt.to(torch.float16)
    for name in ("value",) + TENSOR_META:
        assert getattr(half, name).dtype == torch.float16, name
    for name in FLAGS:
        assert getattr(half, name).dtype == torch.bool, name
    assert half.saturating is False and half.signed is True and half.training is False
    assert half.nan_values == ("111",)
    on_meta = qt.to("meta")
    assert on_meta.device.type == "meta" and on_meta.saturating is False  # flags stay on the host
    back = qt.cpu()
    assert back.device.type == "cpu" and torch.equal(back.value, qt.value)


@pytest.mark.parametrize("field", TENSOR_META)
def test_device_mismatch_between_value_and_metadata(field):
    qt = make([1.0]).set(**{field: torch.tensor(1.0, device="meta")})
    with pytest.raises(RuntimeError, match=rf"value is on cpu but {field} is on meta"):
        qt.device


def test_str_names_every_field():
    text = str(make([1.0]))
    assert text.startswith("FloatQuantTensor(")
    for name in FIELDS:
        assert f"{name}=" in text, name


def test_check_input_type():
    FloatQuantTensor.check_input_type(make([1.0]))
    with pytest.raises(RuntimeError, match=r"Tensor is not a FloatQuantTensor, got Tensor"):
        FloatQuantTensor.check_input_type(torch.ones(1))


# ---- shape methods ------------------------------------------------------------------------------------


def test_view_reshape_flatten_keep_metadata():
    qt = make(torch.arange(12.0).view(2, 3, 2))
    for out, ref in [
        (qt.view(6, 2), qt.value.view(6, 2)),
        (qt.reshape(-1), qt.value.reshape(-1)),
        (qt.flatten(1), qt.value.flatten(1)),
    ]:
        assert torch.equal(out.value, ref)
        assert_metadata_kept(out, qt)


def test_transpose_and_permute_move_per_channel_metadata():
    scale = torch.tensor([0.5, 0.25, 0.125]).view(1, 3, 1)
    values, _ = grid(4, 3, 7)
    minifloats = torch.tensor(values[:24]).view(2, 3, 4)
    qt = make(minifloats, scale=scale)
    t = qt.transpose(1, 2)
    assert torch.equal(t.value, qt.value.transpose(1, 2)) and t.scale.shape == (1, 1, 3)
    assert t.exponent_bias is qt.exponent_bias  # rank 0: broadcasts as it is
    p = qt.permute(2, 0, 1)
    assert torch.equal(p.minifloat(), minifloats.permute(2, 0, 1))


# ---- the minifloat view -------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [0.5, 0.0123])
def test_e4m3_grid_minifloat_and_int(scale):
    # Every e4m3 code but the NaN one (e=15, m=7), both signs.
    values, ints = grid(4, 3, 7)
    values, ints = values[:-1], ints[:-1]
    minifloats = torch.tensor([-v for v in values] + values)
    qt = make(minifloats, scale=scale)
    assert qt.is_valid is True
    assert torch.equal(qt.minifloat(), minifloats)
    assert torch.equal(qt.int(), torch.tensor([-i for i in ints] + ints))
    assert max(values) == 448.0 and min(v for v in values if v > 0) == 2.0**-9


def test_e5m2_grid_minifloat_and_int():
    values, ints = grid(5, 2, 15, top_exponent=False)  # the top exponent holds inf and NaN
    qt = make(values, scale=2.0**-12, fmt=E5M2, codes=E5M2_CODES)
    assert qt.is_valid is True
    assert torch.equal(qt.minifloat(), torch.tensor(values))
    assert torch.equal(qt.int(), torch.tensor(ints))
    assert max(values) == 57344.0


def test_per_channel_scale():
    values, ints = grid(4, 3, 7)
    minifloats = torch.tensor([values[10:20], values[100:110]])
    qt = make(minifloats, scale=torch.tensor([[0.03], [7.5]]))
    assert qt.is_valid and torch.equal(qt.minifloat(), minifloats)
    assert torch.equal(qt.int(), torch.tensor([ints[10:20], ints[100:110]]))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_grid_in_other_dtypes(dtype):
    values, _ = grid(4, 3, 7)
    minifloats = torch.tensor(values[:-1], dtype=dtype)
    qt = make(minifloats, scale=0.5, dtype=dtype)
    assert qt.is_valid
    out = qt.minifloat()
    assert out.dtype == dtype and torch.equal(out, minifloats)


def test_off_grid_values():
    # e4m3 around 1: spacing 2^-3, so 1.125 is the integer 9 and 1.1875 is 9.5.
    assert not make([1.1875]).is_valid
    assert not make([1.17]).is_valid  # 9.36: further than the float32 tolerance 0.2
    assert make([1.13]).is_valid  # 9.04: within it
    assert torch.equal(make([1.13]).minifloat(), torch.tensor([1.125]))
    assert not make([1.5 * 2.0**-9]).is_valid  # halfway between two subnormals
    assert not make([1.1875], dtype=torch.float16).is_valid  # half precision tolerance is 0.5
    assert make([1.17], dtype=torch.float16).is_valid
    # The range is not checked (as Brevitas): 480 is e4m3's NaN code and 512 is past it.
    assert make([480.0, 512.0]).is_valid


def test_int_ignores_validity_and_minifloat_checks_it():
    qt = make([1.17, -0.3])
    assert torch.equal(qt.int(), torch.tensor([9.0, -10.0]))  # 9.36 and -0.3 / 2^-5 = -9.6
    with pytest.raises(RuntimeError, match=r"minifloat\(\): .*mantissa_bit_width=3.0"):
        qt.minifloat()
    with pytest.raises(ValueError, match=r"float_datatype must be True"):
        make([1.0]).minifloat(float_datatype=False)


def test_is_valid_rejects_integer_values():
    qt = FloatQuantTensor(torch.tensor([1, 2]), 1.0, 0.0, 4, 3, 7, True, None, None, True, False)
    with pytest.raises(TypeError, match=r"FloatQuantTensor.is_valid: value dtype torch.int64"):
        qt.is_valid


def test_recorded_brevitas_e4m3_quantizer_output():
    # Recorded from Brevitas 0.12.1: QuantIdentity(Fp8e4m3OCPActPerTensorFloat) in eval on
    # [[-3.1, -0.4, 0.0, 0.013], [0.77, 1.9, 2.5, 5.0]] (scale 1/448: its threshold starts at 1).
    value = [[-1.0, -0.392857164144516, 0.0, 0.0133928582072258], [0.785714328289032] + [1.0] * 3]
    scale = torch.tensor(0.0022321429569274187)
    qt = FloatQuantTensor(
        torch.tensor(value),
        scale,
        0.0,
        **E4M3,
        saturating=True,
        **E4M3_CODES,
        signed=True,
        training=False,
    )
    assert qt.is_valid
    minifloat = [[-448.0, -176.0, 0.0, 6.0], [352.0, 448.0, 448.0, 448.0]]
    assert torch.equal(qt.minifloat(), torch.tensor(minifloat))
    assert torch.equal(
        qt.int(), torch.tensor([[-14.0, -11.0, 0.0, 12.0], [11.0, 14.0, 14.0, 14.0]])
    )
    # Brevitas's -qt and abs(qt) values, bit for bit (-qt has -0.0 where qt has 0.0).
    neg = (-qt).value
    assert torch.equal(neg, -torch.tensor(value)) and torch.signbit(neg[0, 2])
    assert torch.equal(abs(qt).value, torch.tensor(value).abs()) and abs(qt).signed is False


def test_recorded_brevitas_e5m2_quantizer_output():
    # Recorded from Brevitas 0.12.1: QuantIdentity(Fp8e5m2OCPActPerTensorFloat), same input.
    value = [[-1.0, -0.4285714626312256, 0.0, 0.0133928582072258], [0.7142857313156128] + [1.0] * 3]
    qt = make(torch.zeros(2, 4), fmt=E5M2, codes=E5M2_CODES).set(
        value=torch.tensor(value), scale=torch.tensor(1.743861685099546e-05)
    )
    assert qt.is_valid
    minifloat = [[-57344.0, -24576.0, 0.0, 768.0], [40960.0, 57344.0, 57344.0, 57344.0]]
    assert torch.equal(qt.minifloat(), torch.tensor(minifloat))
    assert torch.equal(qt.int(), torch.tensor([[-7.0, -6.0, 0.0, 6.0], [5.0, 7.0, 7.0, 7.0]]))


# Recorded from Brevitas 0.12.1: _pre_round_float_value, int() and is_valid of an e4m3 tensor
# with scale 0.75 and these (off-grid) values, per dtype.
RECORDED_X = [-300.7, -3.3, -0.0071, 0.0, 0.000811, 0.2, 1.06, 13.9, 440.0]
RECORDED = {
    torch.float32: (
        [-12.529167175292969, -8.800000190734863, -4.846933364868164, 0.0, 0.5536426901817322,
         8.533333778381348, 11.306666374206543, 9.266666412353516, 9.166666984558105],
        [-13.0, -9.0, -5.0, 0.0, 1.0, 9.0, 11.0, 9.0, 9.0],
        False,
    ),
    torch.float16: (
        [-12.53125, -8.8046875, -4.84765625, 0.0, 0.5537109375, 8.53125, 11.3046875, 9.265625,
         9.1640625],
        [-13.0, -9.0, -5.0, 0.0, 1.0, 9.0, 11.0, 9.0, 9.0],
        True,
    ),
    torch.bfloat16: (
        [-12.5, -8.791666984558105, -4.854166507720947, 0.0, 0.5546875, 8.541666984558105,
         11.333333015441895, 9.25, 9.166666984558105],
        [-12.0, -9.0, -5.0, 0.0, 1.0, 9.0, 11.0, 9.0, 9.0],
        False,
    ),
}  # fmt: skip


@pytest.mark.parametrize("dtype", list(RECORDED))
def test_recorded_brevitas_pre_round_values(dtype):
    pre_round, ints, valid = RECORDED[dtype]
    qt = make(torch.zeros(9), dtype=dtype).set(
        value=torch.tensor(RECORDED_X).to(dtype), scale=torch.tensor(0.75, dtype=dtype)
    )
    # bfloat16 is divided in float32 (its 8 bits of precision would blur the grid)
    pre_round_dtype = torch.float32 if dtype == torch.bfloat16 else dtype
    assert qt._pre_round_float_value.dtype == pre_round_dtype
    assert torch.equal(qt._pre_round_float_value, torch.tensor(pre_round, dtype=pre_round_dtype))
    assert torch.equal(qt.int(), torch.tensor(ints)) and qt.is_valid is valid


# ---- arithmetic ---------------------------------------------------------------------------------------


def test_add_mul_div_return_plain_tensors():
    a, b = make([1.0, -2.0, 0.5]), make([3.0, 0.25, -4.0], scale=0.25)
    iq = IntQuantTensor(torch.tensor([1.0, 2.0, 3.0]), 1.0, 0.0, 8.0, True, False)
    t = torch.tensor([0.5, 1.5, -2.0])
    for other, raw in [(b, b.value), (t, t), (2.0, 2.0), (iq, iq.value)]:
        for out, ref in [
            (a + other, a.value + raw),
            (a - other, a.value - raw),
            (a * other, a.value * raw),
            (a / other, a.value / raw),
            (a.add(other), a.value + raw),
        ]:
            assert type(out) is torch.Tensor and torch.equal(out, ref)
    for out, ref in [
        (2.0 + a, 2.0 + a.value),
        (2.0 - a, 2.0 - a.value),
        (2 * a, 2 * a.value),  # not a tuple repeated twice
        (2.0 / a, 2.0 / a.value),
        (t + a, t + a.value),
        (t * a, t * a.value),
    ]:
        assert type(out) is torch.Tensor and torch.equal(out, ref)


def test_neg_and_abs():
    qt = make([-448.0, -1.125, 0.0, 2.0**-9, 240.0], scale=0.0123, saturating=False)
    neg = -qt
    assert torch.equal(neg.value, -qt.value) and neg.signed is True and neg.is_valid
    assert torch.equal(neg.minifloat(), -qt.minifloat())
    for name in FIELDS[1:]:
        assert getattr(neg, name) is getattr(qt, name), name
    a = abs(qt)
    assert torch.equal(a.value, qt.value.abs()) and a.signed is False and a.saturating is False
    assert a.scale is qt.scale and abs(a) is a
    assert +qt is qt
    # Unsigned: the negation is signed, same exponent and mantissa.
    u = make([0.0, 3.0, 448.0], signed=False)
    nu = -u
    assert nu.signed is True and torch.equal(nu.minifloat(), torch.tensor([-0.0, -3.0, -448.0]))
    assert nu.exponent_bit_width is u.exponent_bit_width


# ---- torch handlers -----------------------------------------------------------------------------------


def seeded_grid(*shape, seed=0, fmt=(4, 3, 7)):
    """Seeded minifloats of the format (finite, both signs)."""
    values, _ = grid(*fmt, top_exponent=False)
    g = torch.Generator().manual_seed(seed)
    pick = torch.randint(0, len(values), shape, generator=g)
    sign = torch.randint(0, 2, shape, generator=g) * 2.0 - 1.0
    return torch.tensor(values)[pick] * sign


def test_linear_returns_plain_tensor():
    x = make(seeded_grid(3, 5), scale=0.01)
    w = make(seeded_grid(4, 5, seed=1), scale=0.002)
    b = make(seeded_grid(4, seed=2), scale=0.05)
    for bias in (None, b, b.value):
        out = F.linear(x, w, bias)
        ref = F.linear(x.value, w.value, None if bias is None else b.value)
        assert type(out) is torch.Tensor and torch.equal(out, ref)
    out = F.linear(x.value, w)  # plain input, quantized weight
    assert type(out) is torch.Tensor and torch.equal(out, F.linear(x.value, w.value))


@pytest.mark.parametrize(
    "fn, x_shape, w_shape, kwargs",
    [
        (F.conv1d, (2, 3, 9), (4, 3, 3), dict(stride=2, padding=1)),
        (F.conv2d, (2, 3, 6, 6), (4, 3, 3, 3), dict(padding=1)),
        (F.conv2d, (1, 4, 5, 5), (4, 2, 3, 3), dict(groups=2)),
        (F.conv3d, (1, 2, 4, 4, 4), (3, 2, 2, 2, 2), dict(stride=2)),
        (F.conv_transpose1d, (2, 3, 5), (3, 4, 3), dict(stride=2)),
        (F.conv_transpose2d, (1, 3, 4, 4), (3, 2, 3, 3), dict(stride=2, output_padding=1)),
        (F.conv_transpose3d, (1, 2, 3, 3, 3), (2, 3, 2, 2, 2), dict(stride=1)),
    ],
)
def test_convolutions_return_plain_tensors(fn, x_shape, w_shape, kwargs):
    x = make(seeded_grid(*x_shape), scale=0.01)
    w = make(seeded_grid(*w_shape, seed=1), scale=0.003)
    out_channels = w_shape[1] if "transpose" in fn.__name__ else w_shape[0]
    bias = make(seeded_grid(out_channels, seed=2), scale=0.1)
    out = fn(x, w, bias, **kwargs)
    assert type(out) is torch.Tensor
    assert torch.equal(out, fn(x.value, w.value, bias.value, **kwargs))
    assert torch.equal(fn(x, w, **kwargs), fn(x.value, w.value, **kwargs))


def test_pooling_returns_plain_tensors():
    x = make(seeded_grid(2, 3, 6, 6), scale=0.01)
    out = F.avg_pool2d(x, 2)
    assert type(out) is torch.Tensor and torch.equal(out, F.avg_pool2d(x.value, 2))
    out = F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False)
    ref = F.avg_pool2d(x.value, 3, stride=2, padding=1, count_include_pad=False)
    assert torch.equal(out, ref)
    out = F.adaptive_avg_pool2d(x, (2, 3))
    assert type(out) is torch.Tensor and torch.equal(out, F.adaptive_avg_pool2d(x.value, (2, 3)))


def test_embedding_keeps_the_weight_metadata():
    w = make(seeded_grid(6, 4), scale=0.02, saturating=False)
    idx = torch.tensor([[0, 5], [2, 2]])
    out = F.embedding(idx, w)
    assert torch.equal(out.value, F.embedding(idx, w.value))
    assert_metadata_kept(out, w)
    assert out.is_valid
    per_channel = make(seeded_grid(6, 4), scale=torch.full((6, 1), 0.02))
    with pytest.raises(
        RuntimeError, match=r"only per-tensor quantization.*scale of shape \(6, 1\)"
    ):
        F.embedding(idx, per_channel)


def test_shared_handlers_keep_metadata_and_others_return_plain_tensors():
    qt = make(seeded_grid(1, 2, 4, 4), scale=0.01)
    for out, ref in [
        (F.relu(qt), F.relu(qt.value)),
        (F.max_pool2d(qt, 2), F.max_pool2d(qt.value, 2)),
        (torch.flatten(qt, 1), qt.value.flatten(1)),
        (F.interpolate(qt, scale_factor=2.0), F.interpolate(qt.value, scale_factor=2.0)),
    ]:
        assert torch.equal(out.value, ref)
        assert_metadata_kept(out, qt)
    for out, ref in [
        (torch.exp(qt), torch.exp(qt.value)),
        (torch.sum(qt), torch.sum(qt.value)),
        (F.softmax(qt, dim=1), F.softmax(qt.value, dim=1)),
    ]:
        assert type(out) is torch.Tensor and torch.equal(out, ref)


# ---- torch.cat ----------------------------------------------------------------------------------------


def test_cat_in_eval_keeps_the_first_operands_metadata():
    a, b = make(seeded_grid(2, 3)), make(seeded_grid(1, 3, seed=1))
    for out in (torch.cat([a, b]), torch.cat((a, b), dim=0), FloatQuantTensor.cat([a, b], 0)):
        assert torch.equal(out.value, torch.cat([a.value, b.value]))
        for name in TENSOR_META + ("inf_values", "nan_values"):
            assert getattr(out, name) is getattr(a, name), name
        assert out.signed is True and out.saturating is True and out.training is False
    assert torch.cat([a]) is a


def test_cat_in_training_averages_the_metadata():
    a = make(seeded_grid(2, 3), scale=0.5, training=True)
    b = make(seeded_grid(2, 3, seed=1), scale=0.25)
    c = make(seeded_grid(2, 3, seed=2), scale=0.125, zero_point=1.0)
    out = torch.cat([a, b, c], dim=1)
    assert torch.equal(out.value, torch.cat([a.value, b.value, c.value], dim=1))
    assert out.training is True
    assert torch.equal(out.scale, torch.tensor((0.5 + 0.25 + 0.125) / 3))
    assert torch.equal(out.zero_point, torch.tensor(1.0 / 3))
    assert torch.equal(out.mantissa_bit_width, torch.tensor(3.0))
    assert torch.equal(out.exponent_bias, torch.tensor(7.0))


def test_cat_works_without_inf_codes():
    # Brevitas 0.12.1 raised TypeError here (set(None)) for every OCP e4m3 tensor.
    a, b = make([1.0]), make([2.0])
    assert a.inf_values is None and torch.equal(torch.cat([a, b]).value, torch.tensor([0.5, 1.0]))


@pytest.mark.parametrize(
    "other, match",
    [
        (dict(scale=0.25), r"scaling factors are different in eval mode: 0.5 vs 0.25"),
        (dict(zero_point=1.0), r"zero points are different in eval mode"),
        (
            dict(fmt=dict(E4M3, mantissa_bit_width=2.0)),
            r"bit widths are different: mantissa_bit_width 3.0 vs 2.0",
        ),
        (dict(fmt=E5M2), r"bit widths are different: exponent_bit_width 4.0 vs 5.0"),
        (dict(fmt=dict(E4M3, exponent_bias=8.0)), r"exponent biases are different: 7.0 vs 8.0"),
        (
            dict(codes=dict(E4M3_CODES, nan_values=("110", "111"))),
            r"representations are different: nan_values",
        ),
        (dict(codes=E5M2_CODES), r"representations are different: inf_values None vs \('00',\)"),
        (dict(saturating=False), r"saturation is different"),
        (dict(signed=False), r"signs are different: signed=True vs signed=False"),
    ],
)
def test_cat_rejects_mismatched_metadata(other, match):
    with pytest.raises(RuntimeError, match=match):
        torch.cat([make([1.0]), make([1.0], **other)])


def test_cat_in_training_allows_different_scales_only():
    a = make([1.0], training=True)
    assert torch.cat([a, make([1.0], scale=0.25)]).training is True
    with pytest.raises(RuntimeError, match=r"exponent_bit_width"):
        torch.cat([a, make([1.0], fmt=E5M2, codes=E4M3_CODES)])


def test_cat_with_other_types_returns_a_plain_tensor():
    a = make([1.0, 2.0])
    iq = IntQuantTensor(torch.tensor([3.0]), 1.0, 0.0, 8.0, True, False)
    t = torch.tensor([4.0])
    for others, ref in [([t], t), ([iq], iq.value)]:
        out = torch.cat([a] + others)
        assert type(out) is torch.Tensor and torch.equal(out, torch.cat([a.value, ref]))
    with pytest.raises(RuntimeError, match=r"out= is not supported"):
        torch.cat([a, a], out=torch.empty(4))


# ---- _CachedIOFloat -----------------------------------------------------------------------------------


@pytest.mark.parametrize("metadata_only", [False, True])
def test_cached_io_float(metadata_only):
    qt = make(seeded_grid(2, 3), fmt=E5M2, codes=E5M2_CODES, saturating=False, signed=False)
    cached = _CachedIOFloat(qt, metadata_only=metadata_only)
    assert cached.shape == (2, 3) and cached.scale is qt.scale
    for name in TENSOR_META[1:] + ("inf_values", "nan_values"):
        assert getattr(cached, name) is getattr(qt, name), name
    assert cached.saturating is False and cached.signed is False
    if metadata_only:
        assert cached.value is None and cached.quant_tensor.value is None
    else:
        assert cached.value is qt.value and cached.quant_tensor is qt
