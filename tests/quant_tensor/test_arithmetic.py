"""IntQuantTensor arithmetic: the output grid of +, -, unary -, abs, * and / (Brevitas's rules),
written out by hand in each test."""

import pytest
import torch

from brevitas_cpp.quant_tensor import IntQuantTensor


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


def bits(t):
    return t.contiguous().view(torch.int32)


# ---- + of two IntQuantTensors ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "a_bits, a_signed, b_bits, b_signed, expected",
    [
        # ceil(log2((max_a + max_b) - (min_a + min_b)))
        (8, True, 8, True, 9),  # (127 + 127) - (-128 - 128) = 510
        (8, False, 8, False, 9),  # 510 - 0
        (8, True, 4, False, 9),  # (127 + 15) - (-128) = 270
        (4, True, 4, True, 5),  # (7 + 7) - (-16) = 30
        (2, False, 2, False, 3),  # 6
        (8, True, 16, True, 17),  # (127 + 32767) - (-128 - 32768) = 65790
        # the log2 of the span, not of the number of levels (Brevitas's rule): 2 - 0 -> 1 bit
        (1, False, 1, False, 1),
    ],
)
def test_add_bit_width(a_bits, a_signed, b_bits, b_signed, expected):
    a = make([1.0, 0.0], bit_width=a_bits, signed=a_signed)
    b = make([1.0, 1.0], bit_width=b_bits, signed=b_signed)
    out = a + b
    assert isinstance(out, IntQuantTensor)
    assert torch.equal(out.bit_width, torch.tensor(float(expected)))
    assert out.signed is (a_signed or b_signed)


def test_add_values_and_metadata():
    a = make([3.0, -5.0, 100.0], scale=0.125)
    b = make([-1.0, 7.0, 27.0], scale=0.125, signed=True, training=False)
    out = a + b
    assert torch.equal(out.value, a.value + b.value)
    assert torch.equal(out.value, torch.tensor([2.0, 2.0, 127.0]) * 0.125)
    assert torch.equal(out.scale, torch.tensor(0.125))  # (0.125 + 0.125) / 2
    assert torch.equal(out.zero_point, torch.tensor(0.0))
    assert out.training is False and out.is_valid
    assert torch.equal(out.int(float_datatype=True), torch.tensor([2.0, 2.0, 127.0]))


def test_add_zero_points_add():
    a = make([10.0, 20.0], zero_point=3.0, signed=False)
    b = make([5.0, 1.0], zero_point=4.0, signed=False)
    out = a + b
    assert torch.equal(out.zero_point, torch.tensor(7.0))
    # value / scale + zero_point: (10 - 3) + (5 - 4) + 7 = 15, (20 - 3) + (1 - 4) + 7 = 21
    assert torch.equal(out.value / out.scale + out.zero_point, torch.tensor([15.0, 21.0]))


def test_add_in_training_averages_the_scales():
    a = make([1.0, 2.0], scale=0.5, training=True)
    b = make([1.0, 2.0], scale=0.25, training=False)
    out = a + b
    assert torch.equal(out.scale, torch.tensor(0.375))  # (0.5 + 0.25) / 2
    assert out.training is True
    assert torch.equal(out.value, torch.tensor([0.75, 1.5]))


def test_add_in_eval_requires_equal_scales():
    a = make([1.0], scale=0.5)
    b = make([1.0], scale=0.25, training=True)  # the left operand's mode decides, as Brevitas
    with pytest.raises(
        RuntimeError, match=r"scaling factors are different in eval mode: 0.5 vs 0.25"
    ):
        a + b
    with pytest.raises(RuntimeError, match=r"scaling factors are different in eval mode"):
        a - b
    per_channel = make([[1.0, 2.0]], scale=torch.tensor([[0.5, 0.25]]))
    with pytest.raises(RuntimeError, match=r"\[\[0.5, 0.25\]\] vs 0.5"):
        per_channel + a
    assert isinstance(b + a, IntQuantTensor)  # training left operand: no check


def test_add_learned_bit_width_gradient():
    ba = torch.tensor(8.0, requires_grad=True)
    bb = torch.tensor(5.0, requires_grad=True)
    a = IntQuantTensor(torch.tensor([0.5]), 0.5, 0.0, ba, True, True)
    b = IntQuantTensor(torch.tensor([0.5]), 0.5, 0.0, bb, False, True)
    out = a + b
    # (127 + 31) - (-128 + 0) = 286 -> ceil(log2) = 9
    assert torch.equal(out.bit_width.detach(), torch.tensor(9.0))
    out.bit_width.backward()
    # the ceil is straight-through: the gradient of log2((2^(a-1) - 1 + 2^b - 1) + 2^(a-1))
    ra, rb = ba.detach().clone().requires_grad_(), bb.detach().clone().requires_grad_()
    torch.log2((2 ** (ra - 1) - 1 + 2**rb - 1) - (-(2 ** (ra - 1)) + 0 * rb)).backward()
    torch.testing.assert_close(ba.grad, ra.grad)
    torch.testing.assert_close(bb.grad, rb.grad)


def test_add_value_and_scale_gradients():
    va = torch.tensor([0.5, 1.0], requires_grad=True)
    sa = torch.tensor(0.5, requires_grad=True)
    sb = torch.tensor(0.25, requires_grad=True)
    out = IntQuantTensor(va, sa, 0.0, 8.0, True, True) + IntQuantTensor(
        torch.tensor([0.25, 0.5]), sb, 0.0, 8.0, True, True
    )
    (out.value.sum() + 3 * out.scale).backward()
    assert torch.equal(va.grad, torch.ones(2))
    assert torch.equal(sa.grad, torch.tensor(1.5)) and torch.equal(sb.grad, torch.tensor(1.5))


# ---- + with tensors and numbers ----------------------------------------------------------------------


def test_add_tensor_shifts_the_zero_point():
    qt = make([1.0, -2.0], scale=0.5)
    t = torch.tensor([0.25, 1.0])
    out = qt + t
    assert isinstance(out, IntQuantTensor)
    assert torch.equal(out.value, torch.tensor([0.75, 0.0]))  # [0.5, -1] + t
    assert torch.equal(out.zero_point, torch.tensor([-0.5, -2.0]))  # 0 - t / 0.5
    assert out.scale is qt.scale and out.bit_width is qt.bit_width and out.signed is True
    # the integers are unchanged: value / scale + zero_point
    assert torch.equal(out.value / out.scale + out.zero_point, torch.tensor([1.0, -2.0]))


def test_add_number_both_sides():
    qt = make([1.0, -2.0], scale=0.5, zero_point=1.0)
    for out in (qt + 0.25, 0.25 + qt, qt.add(0.25)):
        assert isinstance(out, IntQuantTensor)
        assert torch.equal(out.zero_point, torch.tensor(0.5))  # 1 - 0.25 / 0.5
        assert torch.equal(out.value, qt.value + 0.25)


def test_sub_number():
    out = make([4.0], scale=0.5) - 1.0
    assert isinstance(out, IntQuantTensor)
    assert torch.equal(out.value, torch.tensor([1.0])) and torch.equal(
        out.zero_point, torch.tensor(2.0)
    )


def test_tensor_plus_quant_tensor_is_a_plain_tensor():
    qt = make([1.0, -2.0], scale=0.5)
    t = torch.tensor([0.25, 1.0])
    for out in (t + qt, t - qt, t * qt, torch.add(t, qt)):
        assert type(out) is torch.Tensor
    assert torch.equal(t + qt, t + qt.value) and torch.equal(t - qt, t - qt.value)


def test_sub_of_two_quant_tensors():
    a = make([10.0, -3.0], scale=0.5)
    b = make([4.0, 250.0], scale=0.5, signed=False)
    out = a - b  # a + (-b): -b is signed 9 bits
    assert torch.equal(out.value, torch.tensor([3.0, -126.5]))  # (10 - 4) * 0.5, (-3 - 250) * 0.5
    # (127 + 255) - (-128 - 256) = 766 -> 10 bits
    assert torch.equal(out.bit_width, torch.tensor(10.0)) and out.signed is True


# ---- unary -------------------------------------------------------------------------------------------


def test_neg_signed():
    qt = make([-128.0, 0.0, 5.0], scale=0.25)
    out = -qt
    assert torch.equal(out.value, torch.tensor([32.0, 0.0, -1.25]))
    # -(0 - 0) * 0.25 is -0.0, as Brevitas's (-0 - 0) * 0.25
    assert bits(out.value)[1] == bits(torch.tensor(-0.0))
    assert torch.equal(out.bit_width, torch.tensor(8.0)) and out.signed is True
    assert out.scale is qt.scale and out.zero_point is qt.zero_point


def test_neg_unsigned_gains_a_bit():
    out = -make([0.0, 255.0], scale=0.5, signed=False)
    assert torch.equal(out.value, torch.tensor([-0.0, -127.5]))
    assert torch.equal(out.bit_width, torch.tensor(9.0)) and out.signed is True and out.is_valid


def test_neg_with_zero_point_negates_the_value():
    qt = make([12.0, 0.0, 255.0], scale=0.5, zero_point=10.0, signed=False)  # values 1, -5, 122.5
    out = -qt
    assert torch.equal(out.value, torch.tensor([-1.0, 5.0, -122.5]))
    assert torch.equal(out.zero_point, torch.tensor(-10.0))
    assert torch.equal(out.int(float_datatype=True), torch.tensor([-12.0, 0.0, -255.0]))


def test_neg_half_precision_keeps_dtype():
    qt = make([3.0, -7.0], scale=0.5, bit_width=12.0, dtype=torch.float16)
    out = -qt  # int() is float32 above 8 bits, the value goes back to float16
    assert out.value.dtype == torch.float16 and torch.equal(out.value, -qt.value)


def test_pos_is_identity():
    qt = make([1.0])
    assert +qt is qt


def test_abs_signed():
    qt = make([-5.0, 0.0, 7.0], scale=0.5, bit_width=8.0)
    out = abs(qt)
    assert torch.equal(out.value, torch.tensor([2.5, 0.0, 3.5]))
    assert torch.equal(out.bit_width, torch.tensor(7.0)) and out.signed is False
    assert out.zero_point is qt.zero_point


def test_abs_unsigned_is_self():
    qt = make([5.0], signed=False)
    assert abs(qt) is qt


def test_abs_with_zero_point():
    out = abs(make([-5.0, 2.0, 7.0], scale=0.5, zero_point=2.0))  # values -3.5, 0, 2.5
    assert torch.equal(out.value, torch.tensor([3.5, 0.0, 2.5]))
    assert torch.equal(out.zero_point, torch.tensor(0.0))


# ---- * and / -----------------------------------------------------------------------------------------


def test_mul_of_two_quant_tensors():
    a = make([3.0, -4.0], scale=0.5, bit_width=8.0)
    b = make([2.0, 15.0], scale=0.25, bit_width=4.0, signed=False, training=True)
    out = a * b
    assert torch.equal(out.value, torch.tensor([0.75, -7.5]))  # (3 * 2, -4 * 15) * 0.125
    assert torch.equal(out.scale, torch.tensor(0.125))
    assert torch.equal(out.bit_width, torch.tensor(12.0))
    assert torch.equal(out.zero_point, torch.tensor(0.0))
    assert out.signed is True and out.training is True and out.is_valid


def test_mul_scale_gradients():
    sa = torch.tensor(0.5, requires_grad=True)
    sb = torch.tensor(0.25, requires_grad=True)
    out = IntQuantTensor(torch.tensor([1.0]), sa, 0.0, 8.0, True, True) * IntQuantTensor(
        torch.tensor([0.5]), sb, 0.0, 8.0, True, True
    )
    out.scale.backward()
    assert torch.equal(sa.grad, torch.tensor(0.25)) and torch.equal(sb.grad, torch.tensor(0.5))


def test_mul_needs_zero_zero_points():
    with pytest.raises(
        RuntimeError,
        match=r"IntQuantTensor mul: zero points of the operands must be zero, got 0.0 and 3.0",
    ):
        make([1.0]) * make([4.0], zero_point=3.0, signed=False)


def test_mul_with_numbers_and_tensors_is_plain():
    qt = make([3.0, -4.0], scale=0.5)
    for out in (qt * 3, 3 * qt, qt * torch.tensor(3.0), torch.tensor(3.0) * qt):
        assert type(out) is torch.Tensor and torch.equal(out, torch.tensor([4.5, -6.0]))


@pytest.mark.parametrize("signed, expected_scale", [(False, 0.125), (True, 0.25)])
def test_truediv_of_two_quant_tensors(signed, expected_scale):
    a = make([3.0, -4.0], scale=0.5)
    b = make([2.0, 1.0], scale=0.25, bit_width=4.0, signed=signed)
    out = a / b
    assert torch.equal(out.value, torch.tensor([3.0, -8.0]))  # 1.5 / 0.5, -2 / 0.25
    # 0.5 / (0.25 * 2^(4 - signed))
    assert torch.equal(out.scale, torch.tensor(expected_scale))
    assert torch.equal(out.bit_width, torch.tensor(12.0)) and out.signed is True


def test_truediv_needs_zero_zero_points():
    with pytest.raises(RuntimeError, match=r"IntQuantTensor div: zero points"):
        make([1.0], zero_point=1.0, signed=False) / make([4.0])


def test_truediv_by_number_is_plain():
    out = make([3.0], scale=0.5) / 2
    assert type(out) is torch.Tensor and torch.equal(out, torch.tensor([0.75]))


# ---- devices -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "op, name",
    [
        (lambda a, b: a + b, "__add__"),
        (lambda a, b: a * b, "__mul__"),
        (lambda a, b: a / b, "__truediv__"),
    ],
)
def test_device_mismatch(op, name):
    a = make([1.0, 2.0])
    b = a.to("meta")
    with pytest.raises(
        RuntimeError, match=rf"IntQuantTensor.{name}: left is on cpu but right is on meta"
    ):
        op(a, b)
    with pytest.raises(
        RuntimeError, match=rf"IntQuantTensor.{name}: left is on meta but right is on cpu"
    ):
        op(b, a)
