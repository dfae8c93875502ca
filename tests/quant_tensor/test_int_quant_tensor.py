"""IntQuantTensor fields, construction, copies, shape methods, is_valid and int()."""

import pytest
import torch

from brevitas_cpp.quant_tensor import IntQuantTensor, QuantTensor, _unpack_quant_tensor

FIELDS = ("value", "scale", "zero_point", "bit_width", "signed_t", "training_t")


def make(
    ints,
    scale=0.25,
    zero_point=0.0,
    bit_width=8.0,
    signed=True,
    training=False,
    dtype=torch.float32,
):
    """An IntQuantTensor whose value is (ints - zero_point) * scale."""
    ints = torch.as_tensor(ints, dtype=torch.float64)
    scale_t = torch.as_tensor(scale, dtype=torch.float64)
    zp_t = torch.as_tensor(zero_point, dtype=torch.float64)
    value = ((ints - zp_t) * scale_t).to(dtype)
    return IntQuantTensor(
        value, scale_t.to(dtype), zp_t.to(dtype), torch.tensor(float(bit_width)), signed, training
    )


# ---- construction --------------------------------------------------------------------------------


def test_fields_in_brevitas_order():
    assert IntQuantTensor._fields == FIELDS


def test_python_numbers_become_tensors_on_the_value_device():
    v = torch.tensor([0.5, -1.0])
    qt = IntQuantTensor(v, 0.5, 0, 8, True, False)
    assert qt.value is v
    assert torch.equal(qt.scale, torch.tensor(0.5)) and qt.scale.dtype == torch.float32
    assert torch.equal(qt.zero_point, torch.tensor(0.0)) and qt.zero_point.dtype == torch.float32
    assert torch.equal(qt.bit_width, torch.tensor(8.0)) and qt.bit_width.dtype == torch.float32
    assert qt.signed_t.dtype == torch.bool and qt.signed_t.item() is True
    assert qt.training_t.dtype == torch.bool and qt.training_t.item() is False
    meta = IntQuantTensor(torch.empty(3, device="meta"), 0.5, 0.0, 8.0, True, False)
    assert meta.scale.device.type == "meta" and meta.device.type == "meta"


def test_tensor_metadata_is_kept_as_given():
    s, z, b = torch.tensor([0.1, 0.2]), torch.tensor(0.0, dtype=torch.float64), torch.tensor(4.0)
    sig, tr = torch.tensor(False), torch.tensor(True)
    qt = IntQuantTensor(torch.zeros(2), s, z, b, sig, tr)
    assert qt.scale is s and qt.zero_point is z and qt.bit_width is b
    assert qt.signed_t is sig and qt.training_t is tr
    assert qt.signed is False and qt.training is True


def test_keyword_construction():
    qt = IntQuantTensor(
        value=torch.ones(2), scale=1.0, zero_point=0.0, bit_width=2.0, signed=False, training=True
    )
    assert qt.signed is False and qt.training is True


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(value=[1.0, 2.0]), r"IntQuantTensor: value must be a Tensor, got list"),
        (dict(scale="0.1"), r"IntQuantTensor: scale must be a Tensor or a real number, got str"),
        (
            dict(zero_point=None),
            r"IntQuantTensor: zero_point must be a Tensor or a real number, got NoneType",
        ),
        (
            dict(bit_width=[8]),
            r"IntQuantTensor: bit_width must be a Tensor or a real number, got list",
        ),
        (
            dict(signed=None),
            r"IntQuantTensor: signed must be a bool or a bool Tensor, got NoneType",
        ),
        (
            dict(training="yes"),
            r"IntQuantTensor: training must be a bool or a bool Tensor, got str",
        ),
        (dict(signed=2), r"IntQuantTensor: signed must be a bool or a bool Tensor, got int \(2\)"),
    ],
)
def test_bad_arguments(kwargs, match):
    args = dict(
        value=torch.zeros(2), scale=1.0, zero_point=0.0, bit_width=8.0, signed=True, training=False
    )
    args.update(kwargs)
    with pytest.raises(TypeError, match=match):
        IntQuantTensor(**args)


# ---- properties and tuple behaviour --------------------------------------------------------------


def test_shape_queries():
    qt = make(torch.zeros(2, 3, 4))
    assert qt.shape == torch.Size([2, 3, 4]) and qt.size() == torch.Size([2, 3, 4])
    assert qt.size(1) == 3 and qt.size(-1) == 4
    assert qt.dim() == 3 and qt.ndim == 3
    assert qt.dtype == torch.float32 and make([1.0], dtype=torch.float64).dtype == torch.float64
    assert qt.tensor is qt.value


def test_is_a_named_tuple_with_brevitas_indexing():
    qt = make([1.0, 2.0])
    assert isinstance(qt, tuple) and isinstance(qt, QuantTensor) and len(qt) == 6
    assert qt[0] is qt.value and qt[1] is qt.scale and qt[-1] is qt.training_t
    value, scale, zero_point, bit_width, signed_t, training_t = qt
    assert value is qt.value and bit_width is qt.bit_width


def test_set_replaces_fields_without_conversion():
    qt = make([1.0, 2.0])
    new_value = torch.tensor([3.0])
    out = qt.set(value=new_value, bit_width=torch.tensor(4.0))
    assert isinstance(out, IntQuantTensor)
    assert out.value is new_value and torch.equal(out.bit_width, torch.tensor(4.0))
    assert out.scale is qt.scale and qt.value is not new_value
    # metadata-only copies (value=None) are allowed and survive detach
    meta_only = qt.set(value=None).detach()
    assert meta_only.value is None and torch.equal(meta_only.scale, qt.scale)


def test_str_names_every_field():
    text = str(make([1.0]))
    for name in ("value=", "scale=", "zero_point=", "bit_width=", "signed_t=", "training_t="):
        assert name in text
    assert text.startswith("IntQuantTensor(")


def test_unpack_quant_tensor_through_containers():
    qt = make([1.0, 2.0])
    t = torch.ones(1)
    out = _unpack_quant_tensor({"a": [qt, (qt, 3)], "b": t, "c": "x"})
    assert out["a"][0] is qt.value and out["a"][1][0] is qt.value and out["a"][1][1] == 3
    assert out["b"] is t and out["c"] == "x"
    assert isinstance(out["a"], list) and isinstance(out["a"][1], tuple)


# ---- copies ---------------------------------------------------------------------------------------


def test_detach_and_detach_in_place():
    v = torch.tensor([0.5, 1.0], requires_grad=True)
    s = torch.tensor(0.5, requires_grad=True)
    qt = IntQuantTensor(v * 1.0, s * 1.0, 0.0, 8.0, True, True)
    d = qt.detach()
    assert isinstance(d, IntQuantTensor)
    assert all(not getattr(d, f).requires_grad for f in FIELDS)
    assert qt.value.requires_grad and qt.scale.requires_grad
    assert torch.equal(d.value, qt.value) and d.signed is True and d.training is True
    qt.detach_()
    assert not qt.value.requires_grad and not qt.scale.requires_grad


def test_contiguous():
    qt = make(torch.arange(6.0).view(2, 3)).transpose(0, 1)
    assert not qt.value.is_contiguous()
    c = qt.contiguous()
    assert c.value.is_contiguous() and torch.equal(c.value, qt.value)


def test_to_dtype_keeps_flags_bool():
    qt = make([1.0, -2.0])
    half = qt.to(torch.float16)
    assert half.value.dtype == half.scale.dtype == half.zero_point.dtype == torch.float16
    assert half.bit_width.dtype == torch.float16
    assert half.signed_t.dtype == torch.bool and half.signed is True
    assert torch.equal(half.value, torch.tensor([0.25, -0.5], dtype=torch.float16))
    # Tensor.to's other forms
    assert qt.to(torch.zeros(1, dtype=torch.float64)).value.dtype == torch.float64
    assert qt.to("cpu", torch.float64).scale.dtype == torch.float64
    assert qt.to(dtype=torch.float64, device="cpu").zero_point.dtype == torch.float64


def test_to_and_cpu_devices():
    qt = make([1.0, -2.0])
    on_meta = qt.to("meta")
    for f in ("value", "scale", "zero_point", "bit_width"):
        assert getattr(on_meta, f).device.type == "meta"
    assert on_meta.signed is True and on_meta.training is False  # flags stay readable on the host
    back = qt.cpu()
    assert isinstance(back, IntQuantTensor) and back.device.type == "cpu"
    assert all(torch.equal(getattr(back, f), getattr(qt, f)) for f in FIELDS)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda():
    qt = make([1.0, -2.0]).cuda()
    assert qt.device.type == "cuda" and qt.signed_t.device.type == "cpu"


# ---- device ---------------------------------------------------------------------------------------


def test_device_property():
    assert make([1.0]).device == torch.device("cpu")


@pytest.mark.parametrize("field", ["scale", "zero_point", "bit_width"])
def test_device_mismatch_between_value_and_metadata(field):
    qt = make([1.0]).set(**{field: torch.tensor(1.0, device="meta")})
    with pytest.raises(RuntimeError, match=rf"value is on cpu but {field} is on meta"):
        qt.device


# ---- shape methods ----------------------------------------------------------------------------------


def test_view_reshape_flatten_keep_metadata():
    qt = make(torch.arange(-6.0, 6.0).view(2, 3, 2))
    for out, ref in [
        (qt.view(6, 2), qt.value.view(6, 2)),
        (qt.reshape(-1), qt.value.reshape(-1)),
        (qt.flatten(1), qt.value.flatten(1)),
        (qt.flatten(), qt.value.flatten()),
    ]:
        assert isinstance(out, IntQuantTensor) and torch.equal(out.value, ref)
        assert (
            out.scale is qt.scale
            and out.zero_point is qt.zero_point
            and out.bit_width is qt.bit_width
        )


def test_transpose_and_permute_move_per_channel_metadata():
    scale = torch.tensor([0.5, 0.25, 0.125]).view(1, 3, 1)
    ints = torch.arange(24.0).view(2, 3, 4) - 12
    qt = IntQuantTensor(ints * scale, scale, torch.tensor(0.0), torch.tensor(8.0), True, False)
    t = qt.transpose(1, 2)
    assert torch.equal(t.value, qt.value.transpose(1, 2)) and t.scale.shape == (1, 1, 3)
    assert torch.equal(t.scale, scale.transpose(1, 2))
    assert t.zero_point is qt.zero_point  # rank 0: broadcasts as it is
    p = qt.permute(2, 0, 1)
    assert torch.equal(p.value, qt.value.permute(2, 0, 1)) and p.scale.shape == (1, 1, 3)
    # the per-channel scale still dequantizes the permuted integers
    assert torch.equal(p.value / p.scale, ints.permute(2, 0, 1))


# ---- is_valid ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_is_valid_on_grid(dtype):
    assert make([-128.0, 0.0, 127.0], scale=0.125, dtype=dtype).is_valid
    assert make([0.0, 255.0], scale=0.125, signed=False, dtype=dtype).is_valid
    assert make([0.0, 255.0], zero_point=128.0, signed=False, dtype=dtype).is_valid


def test_is_valid_false_cases():
    assert not make([128.0], bit_width=8.0).is_valid  # above 2^7 - 1
    assert not make([-129.0], bit_width=8.0).is_valid  # below -2^7
    assert not make([-1.0], signed=False).is_valid  # negative unsigned
    assert not make([256.0], signed=False).is_valid  # above 2^8 - 1
    assert not make([0.3], scale=1.0).is_valid  # 0.3 from an integer > 0.2 (float32 tolerance)
    assert make([0.1], scale=1.0).is_valid  # within the tolerance
    assert not make([0.45], scale=1.0).is_valid
    assert not make([0.5], scale=1.0, dtype=torch.float16).is_valid  # half tolerance is 0.5
    assert make([0.45], scale=1.0, dtype=torch.float16).is_valid


def test_is_valid_binary():
    assert make([-1.0, 1.0, 1.0], bit_width=1.0, signed=True).is_valid
    assert make([0.0, 1.0], bit_width=1.0, signed=False).is_valid
    assert not make([1.0, 1.0], bit_width=1.0).is_valid  # one level only
    assert not make([-1.0, 0.0, 1.0], bit_width=1.0).is_valid  # three levels
    assert not make([0.0, 1.0], bit_width=1.0, signed=True).is_valid  # sign mismatch


def test_is_valid_rejects_integer_values():
    qt = IntQuantTensor(torch.tensor([1, 2]), torch.tensor(1), torch.tensor(0), 8.0, True, False)
    with pytest.raises(TypeError, match=r"IntQuantTensor.is_valid: value dtype torch.int64"):
        qt.is_valid


# ---- int() -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bit_width, signed, expected",
    [
        (8.0, True, torch.int8),
        (4.0, True, torch.int8),
        (8.0, False, torch.uint8),
        (2.0, False, torch.uint8),
        (9.0, True, torch.int32),
        (16.0, False, torch.int32),
        (32.0, True, torch.int32),
    ],
)
def test_int_dtypes(bit_width, signed, expected):
    ints = [0.0, 1.0, 2.0] if not signed else [-2.0, 0.0, 1.0]
    out = make(ints, bit_width=bit_width, signed=signed).int()
    assert out.dtype == expected
    assert torch.equal(out, torch.tensor(ints).to(expected))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_int_float_datatype(dtype):
    ints = [-100.0, 3.0, 127.0]
    out8 = make(ints, scale=0.03125, dtype=dtype).int(float_datatype=True)
    assert out8.dtype == dtype and torch.equal(out8, torch.tensor(ints, dtype=dtype))
    # above 8 bits half precision would not be exact: float32
    out16 = make([-30720.0, 3.0], scale=2.0**-10, bit_width=16.0, dtype=dtype).int(
        float_datatype=True
    )
    assert out16.dtype == torch.float32 and torch.equal(out16, torch.tensor([-30720.0, 3.0]))


def test_int_with_zero_point_and_per_channel_scale():
    scale = torch.tensor([[0.5], [0.1]])
    ints = torch.tensor([[0.0, 10.0, 255.0], [3.0, 7.0, 128.0]])
    qt = IntQuantTensor(
        (ints - 3.0) * scale, scale, torch.tensor(3.0), torch.tensor(8.0), False, False
    )
    assert torch.equal(qt.int(), ints.to(torch.uint8))


def test_int_rounds_with_straight_through_gradient():
    v = torch.tensor([0.49, -1.02, 2.9], requires_grad=True)  # within tolerance of 0.5 * [1, -2, 6]
    qt = IntQuantTensor(v, torch.tensor(0.5), torch.tensor(0.0), torch.tensor(8.0), True, False)
    out = qt.int(float_datatype=True)
    assert torch.equal(out, torch.tensor([1.0, -2.0, 6.0]))
    out.backward(torch.tensor([1.0, 2.0, 3.0]))
    assert torch.equal(v.grad, torch.tensor([1.0, 2.0, 3.0]) / 0.5)


def test_int_of_invalid_tensor_raises():
    with pytest.raises(RuntimeError, match=r"IntQuantTensor.int\(\): .*bit_width=8.0, signed=True"):
        make([200.0]).int()


def test_set_unknown_field():
    with pytest.raises(
        ValueError,
        match=r"IntQuantTensor.set: unknown field\(s\) \['signed'\]; accepted: \['value'",
    ):
        make([1.0]).set(signed=False)


def test_check_input_type_and_zero_zero_point():
    qt = make([1.0])
    IntQuantTensor.check_input_type(qt)
    with pytest.raises(RuntimeError, match=r"Tensor is not a IntQuantTensor, got Tensor"):
        IntQuantTensor.check_input_type(qt.value)
    assert bool(QuantTensor.is_zero_zero_point(qt))
    assert not bool(
        QuantTensor.is_zero_zero_point(make([1.0], zero_point=torch.tensor([0.0, 2.0])))
    )
