"""Weight layers and average pooling on IntQuantTensors: output values against F.<op> on the
values, output scale and accumulator bit width against Brevitas's formulas worked out by hand."""

import math

import pytest
import torch
import torch.nn.functional as F

from brevitas_cpp.quant_tensor import IntQuantTensor


def quant(
    ints, scale, bit_width=8.0, signed=True, zero_point=0.0, training=False, dtype=torch.float32
):
    ints = torch.as_tensor(ints, dtype=dtype)
    scale = torch.as_tensor(scale, dtype=dtype)
    zero_point = torch.as_tensor(zero_point, dtype=dtype)
    return IntQuantTensor(
        (ints - zero_point) * scale, scale, zero_point, torch.tensor(bit_width), signed, training
    )


def ints(shape, lo, hi, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(lo, hi + 1, shape, generator=g).float()


def act(shape, seed=0, scale=2.0**-5, **kw):
    """Unsigned 8-bit activations."""
    return quant(ints(shape, 0, 255, seed), scale, 8.0, signed=False, **kw)


def weight(shape, seed=1, scale=2.0**-3, **kw):
    """Signed 4-bit weights."""
    return quant(ints(shape, -8, 7, seed), scale, 4.0, signed=True, **kw)


def check_accumulator(out, ref_value, scale, bit_width, signed=True, training=False):
    assert isinstance(out, IntQuantTensor)
    assert torch.equal(out.value, ref_value)
    assert out.scale.shape == scale.shape and torch.equal(out.scale, scale)
    assert torch.equal(out.bit_width, torch.tensor(float(bit_width)))
    assert out.signed is signed and out.training is training


# ---- linear -------------------------------------------------------------------------------------


def test_linear_per_tensor():
    x, w = act((4, 7)), weight((5, 7))
    out = F.linear(x, w)
    # 255 * 15 * 7 = 26775 -> ceil(log2) = 15
    check_accumulator(out, F.linear(x.value, w.value), torch.tensor([[2.0**-8]]), 15)
    assert torch.equal(out.zero_point, torch.zeros(1))
    assert out.is_valid
    assert torch.equal(out.int(), F.linear(x.value / x.scale, w.value / w.scale).to(torch.int32))


def test_linear_per_channel_weight_and_3d_input():
    sw = torch.tensor([0.5, 0.25, 0.125, 1.0, 2.0]).view(5, 1)
    x, w = act((2, 3, 7)), weight((5, 7), scale=sw)
    out = F.linear(x, w)
    check_accumulator(out, F.linear(x.value, w.value), sw.view(1, 1, 5) * 2.0**-5, 15)
    assert out.is_valid


def test_linear_with_float_bias_goes_to_the_zero_point():
    x, w = act((4, 7)), weight((5, 7))
    b = torch.tensor([0.5, -1.0, 0.25, 3.0, -0.125])
    out = F.linear(x, w, b)
    scale = torch.tensor([[2.0**-8]])
    check_accumulator(out, F.linear(x.value, w.value, b), scale, 15)
    assert torch.equal(out.zero_point, -b.view(1, 5) / scale)
    # value = (acc - zero_point) * scale with acc the integer accumulator
    acc = F.linear(x.value / x.scale, w.value / w.scale)
    assert torch.equal(out.value / out.scale + out.zero_point, acc)


def test_linear_bias_on_a_3d_input_is_per_output_feature():
    x, w = act((2, 3, 7)), weight((5, 7))
    b = torch.tensor([0.5, -1.0, 0.25, 3.0, -0.125])
    out = F.linear(x, w, b)
    assert out.zero_point.shape == (1, 1, 5)
    assert torch.equal(out.zero_point, -b.view(1, 1, 5) / out.scale)


def test_linear_with_bias_on_the_accumulator_grid():
    x, w = act((4, 7)), weight((5, 7))
    b = quant([3.0, -7.0, 0.0, 100.0, -1000.0], 2.0**-8, bit_width=32.0)
    out = F.linear(x, w, b)
    # max(32, 15) + 1
    check_accumulator(out, F.linear(x.value, w.value, b.value), torch.tensor([[2.0**-8]]), 33)
    assert torch.equal(out.zero_point, torch.zeros(1))


def test_linear_with_bias_on_another_grid():
    x, w = act((4, 7)), weight((5, 7))
    b = quant([3.0, -7.0, 0.0, 100.0, -1000.0], 2.0**-10, bit_width=8.0)
    out = F.linear(x, w, b)
    # max(8, 15) + 1
    check_accumulator(out, F.linear(x.value, w.value, b.value), torch.tensor([[2.0**-8]]), 16)
    assert torch.equal(out.zero_point, -b.value.view(1, 5) / out.scale)


def test_linear_returns_plain_tensors_unless_both_operands_are_quantized():
    x, w = act((4, 7)), weight((5, 7))
    for out, ref in [
        (F.linear(x, w.value), F.linear(x.value, w.value)),
        (F.linear(x.value, w), F.linear(x.value, w.value)),
        (F.linear(x.value, w, torch.ones(5)), F.linear(x.value, w.value, torch.ones(5))),
    ]:
        assert type(out) is torch.Tensor and torch.equal(out, ref)


def test_linear_with_input_zero_point_warns_and_returns_plain():
    x = act((4, 7), zero_point=3.0)
    w = weight((5, 7))
    with pytest.warns(
        UserWarning, match=r"linear: computing the zero point of the output accumulator"
    ):
        out = F.linear(x, w)
    assert type(out) is torch.Tensor and torch.equal(out, F.linear(x.value, w.value))


def test_linear_training_flag_and_sign():
    x, w = act((4, 7), training=True), quant(ints((5, 7), 0, 15), 0.5, 4.0, signed=False)
    out = F.linear(x, w)
    assert out.training is True and out.signed is False


def test_linear_gradients():
    xv, wv = act((4, 7)), weight((5, 7))
    sx = torch.tensor(2.0**-5, requires_grad=True)
    sw = torch.tensor([0.5, 0.25, 0.125, 1.0, 2.0]).view(5, 1).requires_grad_()
    x_leaf, w_leaf = xv.value.clone().requires_grad_(), wv.value.clone().requires_grad_()
    b = torch.tensor([0.5, -1.0, 0.25, 3.0, -0.125], requires_grad=True)
    out = F.linear(
        IntQuantTensor(x_leaf, sx, 0.0, 8.0, False, True),
        IntQuantTensor(w_leaf, sw, 0.0, 4.0, True, True),
        b,
    )
    g_value, g_zp = torch.randn(4, 5), torch.randn(1, 5)
    torch.autograd.backward([out.value, out.zero_point], [g_value, g_zp])
    # reference: the same formulas on plain leaves
    rx, rw, rb = (t.detach().clone().requires_grad_() for t in (x_leaf, w_leaf, b))
    rsx, rsw = sx.detach().clone().requires_grad_(), sw.detach().clone().requires_grad_()
    ref_value = F.linear(rx, rw, rb)
    ref_zp = -rb.view(1, 5) / (rsw.view(1, 5) * rsx)
    torch.autograd.backward([ref_value, ref_zp], [g_value, g_zp])
    for got, ref in [(x_leaf, rx), (w_leaf, rw), (b, rb), (sx, rsx), (sw, rsw)]:
        assert torch.equal(got.grad, ref.grad)


def test_linear_gradcheck_float64():
    def fn(x, w, sx, sw, b):
        out = F.linear(
            IntQuantTensor(x, sx, 0.0, 8.0, False, True),
            IntQuantTensor(w, sw, 0.0, 4.0, True, True),
            b,
        )
        return out.value, out.scale, out.zero_point

    args = [
        t.double().requires_grad_()
        for t in (
            act((3, 4)).value,
            weight((2, 4)).value,
            torch.tensor(0.1),
            torch.tensor([[0.3], [0.7]]),
            torch.tensor([0.5, -2.0]),
        )
    ]
    assert torch.autograd.gradcheck(fn, args)


def test_accumulator_learned_bit_width_gradient():
    bx = torch.tensor(8.0, requires_grad=True)
    bw = torch.tensor(4.0, requires_grad=True)
    x, w = act((2, 7)), weight((5, 7))
    out = F.linear(x.set(bit_width=bx), w.set(bit_width=bw))
    assert torch.equal(out.bit_width.detach(), torch.tensor(15.0))
    out.bit_width.backward()
    # straight-through ceil: the gradient of log2((2^bx - 1) * (2^bw - 1) * 7)
    rx, rw = bx.detach().clone().requires_grad_(), bw.detach().clone().requires_grad_()
    torch.log2((2**rx - 1) * (2**rw - 1) * 7).backward()
    torch.testing.assert_close(bx.grad, rx.grad)
    torch.testing.assert_close(bw.grad, rw.grad)


def test_linear_device_mismatch():
    x, w = act((4, 7)), weight((5, 7))
    with pytest.raises(
        RuntimeError, match=r"linear on an IntQuantTensor: input is on cpu but weight is on meta"
    ):
        F.linear(x, w.to("meta"))


# ---- convolutions -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fn, x_shape, w_shape, args, bit_width",
    [
        # 255 * 15 * prod(kernel) * in_channels_per_group
        (F.conv1d, (2, 3, 9), (5, 3, 3), (), 16),  # 34425
        (F.conv2d, (2, 3, 8, 8), (5, 3, 3, 3), (), 17),  # 103275
        (F.conv2d, (2, 3, 8, 8), (5, 3, 3, 3), (2, 1), 17),  # stride, padding positional
        (F.conv2d, (2, 4, 8, 8), (6, 2, 3, 3), (1, 0, 1, 2), 17),  # groups = 2: 68850
        (F.conv2d, (2, 3, 8, 8), (5, 3, 1, 1), (), 14),  # 11475
        (F.conv3d, (1, 3, 5, 5, 5), (5, 3, 2, 2, 2), (), 17),  # 91800
    ],
)
def test_conv_per_tensor(fn, x_shape, w_shape, args, bit_width):
    x, w = act(x_shape), weight(w_shape)
    out = fn(x, w, None, *args)
    scale = torch.full([1, 1] + [1] * (len(x_shape) - 2), 2.0**-8)
    check_accumulator(out, fn(x.value, w.value, None, *args), scale, bit_width)
    assert out.is_valid


def test_conv2d_per_channel_weight_bias_and_keywords():
    sw = torch.tensor([0.5, 0.25, 0.125, 1.0, 2.0]).view(5, 1, 1, 1)
    x, w = act((2, 3, 8, 8)), weight((5, 3, 3, 3), scale=sw)
    b = torch.tensor([0.5, -1.0, 0.25, 3.0, -0.125])
    out = F.conv2d(x, w, b, stride=2, padding=1)
    scale = sw.view(1, 5, 1, 1) * 2.0**-5
    check_accumulator(out, F.conv2d(x.value, w.value, b, stride=2, padding=1), scale, 17)
    assert torch.equal(out.zero_point, -b.view(1, 5, 1, 1) / scale)


def test_conv_input_scale_not_along_output_channels_warns():
    x = quant(
        ints((1, 3, 4, 4), 0, 255), torch.tensor([0.1, 0.2, 0.3]).view(1, 3, 1, 1), signed=False
    )
    w = weight((5, 3, 3, 3), scale=torch.rand(5, 1, 1, 1) + 0.1)
    with pytest.warns(
        UserWarning, match=r"conv2d: the input scale \(1, 3, 1, 1\) and weight scale \(5, 1, 1, 1\)"
    ):
        out = F.conv2d(x, w)
    assert type(out) is torch.Tensor and torch.equal(out, F.conv2d(x.value, w.value))


def test_conv_with_weight_zero_point_warns():
    x = act((1, 3, 4, 4))
    w = quant(ints((5, 3, 3, 3), 0, 15), 0.5, 4.0, signed=False, zero_point=8.0)
    with pytest.warns(UserWarning, match=r"conv2d: computing the zero point"):
        assert type(F.conv2d(x, w)) is torch.Tensor


@pytest.mark.parametrize(
    "fn, x_shape, w_shape, kwargs, bit_width",
    [
        # 255 * 15 * sum_d max(ceil(k_d / s_d), 1) * weight_shape[1]
        (F.conv_transpose2d, (2, 3, 5, 5), (3, 5, 3, 3), dict(stride=2), 17),  # (2 + 2) * 5: 76500
        (F.conv_transpose2d, (2, 3, 5, 5), (3, 5, 3, 3), dict(stride=(2, 2), padding=(1, 1)), 17),
        (F.conv_transpose2d, (2, 3, 5, 5), (3, 5, 2, 2), dict(stride=4), 16),  # (1 + 1) * 5: 38250
        (F.conv_transpose1d, (2, 3, 9), (3, 5, 4), dict(stride=3), 16),  # 2 * 5: 38250
        (
            F.conv_transpose3d,
            (1, 3, 4, 4, 4),
            (3, 5, 2, 3, 2),
            dict(stride=(1, 2, 1)),
            17,
        ),  # 6 * 5: 114750
        (
            F.conv_transpose2d,
            (2, 4, 5, 5),
            (4, 3, 3, 3),
            dict(stride=1, groups=2),
            17,
        ),  # 6 * 3: 68850
        (
            F.conv_transpose2d,
            (2, 3, 5, 5),
            (3, 5, 3, 3),
            dict(),
            17,
        ),  # stride 1: (3 + 3) * 5: 114750
    ],
)
def test_conv_transpose(fn, x_shape, w_shape, kwargs, bit_width):
    x, w = act(x_shape), weight(w_shape)
    out = fn(x, w, **kwargs)
    groups = kwargs.get("groups", 1)
    scale = torch.full([1, 1] + [1] * (len(x_shape) - 2), 2.0**-8)
    ref = fn(x.value, w.value, **kwargs)
    assert out.value.shape[1] == w_shape[1] * groups
    check_accumulator(out, ref, scale, bit_width)


def test_conv_transpose_positional_stride_and_bias():
    x, w = act((2, 3, 5, 5)), weight((3, 5, 3, 3))
    b = torch.tensor([0.5, -1.0, 0.25, 3.0, -0.125])
    out = F.conv_transpose2d(x, w, b, 2, 1, 1)
    check_accumulator(
        out, F.conv_transpose2d(x.value, w.value, b, 2, 1, 1), torch.full((1, 1, 1, 1), 2.0**-8), 17
    )
    assert torch.equal(out.zero_point, -b.view(1, 5, 1, 1) / out.scale)


# ---- embedding -------------------------------------------------------------------------------------


def test_embedding_keeps_the_weight_metadata():
    w = weight((6, 4))
    idx = torch.tensor([[0, 5, 2], [1, 1, 3]])
    out = F.embedding(idx, w)
    assert isinstance(out, IntQuantTensor)
    assert torch.equal(out.value, F.embedding(idx, w.value))
    for name in ("scale", "zero_point", "bit_width"):
        assert getattr(out, name) is getattr(w, name)
    assert out.signed is True and out.training is False
    out = F.embedding(idx, w, padding_idx=1)
    assert torch.equal(out.value, F.embedding(idx, w.value, padding_idx=1))


def test_embedding_per_channel_weight_raises():
    w = weight((6, 4), scale=torch.rand(6, 1) + 0.1)
    with pytest.raises(
        RuntimeError,
        match=r"embedding on an IntQuantTensor weight: only per-tensor quantization is supported, got scale of shape \(6, 1\)",
    ):
        F.embedding(torch.tensor([0, 1]), w)


def test_embedding_plain_weight_is_plain():
    # indices carried by a QuantTensor (the dispatch reaches the handler) with a float weight
    indices = IntQuantTensor(torch.tensor([0, 2]), 1.0, 0.0, 8.0, False, False)
    out = F.embedding(indices, torch.eye(3))
    assert type(out) is torch.Tensor and torch.equal(out, torch.eye(3)[[0, 2]])


# ---- average pooling ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, window, bit_width",
    [
        # the scale divides by the window; bit width ceil(log2(255 * window))
        ((2,), 4, 10),  # 1020
        ((2, 2, 0, False, True, None), 4, 10),  # all positional, as nn.AvgPool2d passes them
        (((2, 3),), 6, 11),  # 1530
        (([3],), 9, 12),  # 2295
        (((2, 3), (2, 3), 0, False, True, 5), 5, 11),  # divisor_override: 1275
    ],
)
def test_avg_pool2d(args, window, bit_width):
    x = quant(ints((2, 3, 8, 9), -128, 127), 2.0**-4)
    out = F.avg_pool2d(x, *args)
    check_accumulator(out, F.avg_pool2d(x.value, *args), torch.tensor(2.0**-4 / window), bit_width)
    assert out.zero_point is x.zero_point


def test_avg_pool2d_sums_the_integers():
    x = quant(ints((1, 2, 4, 4), -128, 127), 2.0**-4)
    out = F.avg_pool2d(x, 2)
    sums = F.avg_pool2d(x.value / x.scale, 2, divisor_override=1)
    assert torch.equal(out.int(), sums.to(torch.int32)) and out.is_valid


@pytest.mark.parametrize(
    "shape, output_size, window, bit_width",
    [
        # stride = in // out, kernel = in - (out - 1) * stride per dim
        ((2, 3, 8, 8), (3, 3), 16, 12),  # stride 2, kernel 4: 4 * 4; 255 * 16 = 4080
        ((2, 3, 8, 8), 1, 64, 14),  # kernel 8 * 8: 16320
        ((2, 3, 8, 6), (4, 3), 4, 10),  # kernels 2 and 2
        ((3, 8, 8), (2, 2), 16, 12),  # unbatched input: the last two dims are spatial
    ],
)
def test_adaptive_avg_pool2d(shape, output_size, window, bit_width):
    x = quant(ints(shape, -128, 127), 0.5)
    out = F.adaptive_avg_pool2d(x, output_size)
    check_accumulator(
        out, F.adaptive_avg_pool2d(x.value, output_size), torch.tensor(0.5 / window), bit_width
    )


def test_avg_pool_learned_bit_width_gradient():
    b = torch.tensor(6.0, requires_grad=True)
    x = quant(ints((1, 1, 4, 4), -32, 31), 0.5).set(bit_width=b)
    out = F.avg_pool2d(x, 2)
    out.bit_width.backward()
    ref = b.detach().clone().requires_grad_()
    torch.log2((2**ref - 1) * 4).backward()
    torch.testing.assert_close(b.grad, ref.grad)
    assert math.isclose(b.grad.item(), 64 / 63, rel_tol=1e-6)
