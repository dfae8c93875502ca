"""QuantConv1d/2d/3d against torch's convolutions run on explicitly quantized operands
(layer_refs.py spells out the quantizer formulas): forward bit for bit, gradients, padding modes,
strided 'same' padding, QuantTensor outputs, disabled quantization, dtypes, checkpoints and
batch-norm folding."""

import importlib.util
import inspect
import math
import os

import pytest
import torch
import torch.nn.functional as F
from helpers import rand
from torch import nn

from brevitas_cpp.nn import QuantConv1d, QuantConv2d, QuantConv3d
from brevitas_cpp.quant import Int8WeightPerChannelFloat, Int8WeightPerTensorFloat, Int32Bias
from brevitas_cpp.quant_tensor import IntQuantTensor


def _load_refs():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "layer_refs.py")
    spec = importlib.util.spec_from_file_location("nn_layer_refs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


R = _load_refs()
SX = R.const_act_scale(1.28, 8, True)

# dims -> (quant class, float class, functional conv, input shape)
CONVS = {
    1: (QuantConv1d, nn.Conv1d, F.conv1d, (2, 4, 9)),
    2: (QuantConv2d, nn.Conv2d, F.conv2d, (2, 4, 7, 6)),
    3: (QuantConv3d, nn.Conv3d, F.conv3d, (1, 4, 5, 6, 5)),
}
DIMS = [1, 2, 3]
DIM_IDS = ["1d", "2d", "3d"]


def conv(dims, *args, seed=0, **kwargs):
    return R.seeded_(CONVS[dims][0](*args, **kwargs), seed)


@pytest.mark.parametrize("dims", DIMS, ids=DIM_IDS)
def test_defaults(dims):
    m = conv(dims, 4, 6, 3)
    assert isinstance(m, CONVS[dims][1])
    assert m.weight_quant.is_quant_enabled
    assert not (
        m.bias_quant.is_quant_enabled
        or m.input_quant.is_quant_enabled
        or m.output_quant.is_quant_enabled
    )
    assert m.output_channel_dim == 0
    assert m.per_elem_ops == 2 * 3**dims * 4
    assert not m.channelwise_separable
    assert conv(dims, 4, 4, 3, groups=4).channelwise_separable
    params = inspect.signature(CONVS[dims][0]).parameters
    assert params["weight_quant"].default is Int8WeightPerTensorFloat
    assert params["padding_mode"].default == "zeros"
    R.assert_scripted_quantizers(m)


@pytest.mark.parametrize(
    "dims,config",
    [
        (2, dict()),
        (2, dict(stride=2, padding=1)),
        (2, dict(dilation=2, groups=2)),
        (2, dict(padding="same")),
        (1, dict(stride=2, dilation=2, groups=2)),
        (3, dict(stride=2, padding=1, groups=2)),
    ],
    ids=["2d-plain", "2d-stride-pad", "2d-dilation-groups", "2d-same", "1d", "3d"],
)
def test_forward_quantizes_weight(dims, config):
    m = conv(dims, 4, 6, 3, **config)
    x = rand(CONVS[dims][3], seed=1)
    expected = CONVS[dims][2](
        x,
        R.ref_weight(m.weight.detach()),
        m.bias.detach(),
        m.stride,
        m.padding,
        m.dilation,
        m.groups,
    )
    assert torch.equal(m(x), expected)


def test_backward_matches_written_out_formula():
    m = conv(2, 4, 6, 3, padding=1, weight_quant=Int8WeightPerChannelFloat)
    x = rand((2, 4, 5, 5), seed=1).requires_grad_()
    g = rand((2, 6, 5, 5), seed=2)
    (m(x) * g).sum().backward()
    gx, gw, gb = R.grad_of(
        lambda x, w, b: F.conv2d(x, R.ref_weight(w, channel_dim=0), b, padding=1),
        (x.detach(), m.weight.detach(), m.bias.detach()),
        g,
    )
    R.assert_grads_close(x.grad, gx)
    R.assert_grads_close(m.weight.grad, gw)
    R.assert_grads_close(m.bias.grad, gb)


@pytest.mark.parametrize("padding_mode", ["reflect", "replicate", "circular"])
def test_padding_modes(padding_mode):
    m = conv(2, 4, 6, 3, padding=1, padding_mode=padding_mode, input_quant=R.ConstInt8Act)
    ref = nn.Conv2d(4, 6, 3, padding=1, padding_mode=padding_mode)
    with torch.no_grad():
        ref.weight.copy_(R.ref_weight(m.weight.detach()))
        ref.bias.copy_(m.bias)
    x = rand((2, 4, 6, 6), seed=1)
    assert torch.equal(m(x), ref(R.ref_act(x, SX)))


def _tf_same_pad(x, kernel, stride, dilation):
    """TensorFlow's 'same': output ceil(i / s), odd padding element at the end; F.pad order."""
    pads = []
    for i, k, s, d in reversed(list(zip(x.shape[2:], kernel, stride, dilation))):
        total = max((math.ceil(i / s) - 1) * s + (k - 1) * d + 1 - i, 0)
        pads += [total // 2, total - total // 2]
    return F.pad(x, pads)


@pytest.mark.parametrize(
    "dims,kernel,shape",
    [
        (1, (3,), (2, 4, 9)),
        (2, (3, 2), (2, 4, 8, 7)),
        (3, (3, 3, 3), (1, 4, 5, 6, 7)),
        # Only the depth needs padding (Brevitas 0.12 pads 3-d inputs only for height or width).
        (3, (3, 1, 1), (1, 4, 5, 6, 6)),
    ],
    ids=["1d", "2d", "3d", "3d-depth-only"],
)
def test_same_padding_with_stride(dims, kernel, shape):
    m = conv(dims, 4, 6, kernel, stride=2, padding="same")
    assert m.is_same_padded_strided
    x = rand(shape, seed=1)
    y = m(x)
    assert tuple(y.shape[2:]) == tuple(math.ceil(i / 2) for i in shape[2:])
    padded = _tf_same_pad(x, kernel, (2,) * dims, (1,) * dims)
    expected = CONVS[dims][2](padded, R.ref_weight(m.weight.detach()), m.bias.detach(), 2)
    assert torch.equal(y, expected)


@pytest.mark.parametrize("dims", DIMS, ids=DIM_IDS)
def test_quantized_input_and_bias_give_accumulator_quant_tensor(dims):
    m = conv(
        dims,
        4,
        6,
        2,
        groups=2,
        input_quant=R.ConstInt8Act,
        bias_quant=Int32Bias,
        return_quant_tensor=True,
    )
    x = rand(CONVS[dims][3], seed=1)
    y = m(x)
    assert isinstance(y, IntQuantTensor)
    w = m.weight.detach()
    scale = SX * R.weight_scale(w)
    expected = CONVS[dims][2](
        R.ref_act(x, SX), R.ref_weight(w), R.ref_bias(m.bias.detach(), scale.view(1)), groups=2
    )
    assert torch.equal(y.value, expected)
    assert torch.equal(y.scale, scale.view((1,) * (dims + 2)))
    assert torch.equal(y.zero_point, torch.zeros(1))
    acc_bits = math.ceil(math.log2(255 * 255 * 2**dims * 2))  # kernel volume x C_in / groups
    assert float(y.bit_width) == max(acc_bits, 32) + 1


def test_per_channel_weight_output_scale():
    m = conv(
        2,
        4,
        6,
        3,
        weight_quant=Int8WeightPerChannelFloat,
        bias=False,
        input_quant=R.ConstInt8Act,
        return_quant_tensor=True,
    )
    x = rand((2, 4, 5, 5), seed=1)
    y = m(x)
    sw = R.weight_scale(m.weight.detach(), channel_dim=0)
    assert torch.equal(y.scale, (sw.view(1, -1, 1, 1) * SX))
    assert torch.equal(y.value, F.conv2d(R.ref_act(x, SX), R.ref_weight(m.weight.detach(), 8, 0)))


def test_quant_tensor_input():
    m = conv(2, 4, 6, 3, bias=False, return_quant_tensor=True)
    s = torch.tensor(0.05)
    value = torch.clamp(torch.round(rand((1, 4, 5, 5), seed=2) / s), 0, 255) * s
    y = m(IntQuantTensor(value, s, torch.tensor(0.0), torch.tensor(8.0), False, False))
    assert torch.equal(y.value, F.conv2d(value, R.ref_weight(m.weight.detach())))
    assert torch.equal(y.scale, (s * R.weight_scale(m.weight.detach())).view(1, 1, 1, 1))


@pytest.mark.parametrize("dims", DIMS, ids=DIM_IDS)
@pytest.mark.parametrize("padding_mode", ["zeros", "reflect"])
def test_disabled_quantization_is_the_float_layer(dims, padding_mode):
    quant_cls, float_cls, _, shape = CONVS[dims]
    m = R.seeded_(quant_cls(4, 6, 3, padding=1, padding_mode=padding_mode, weight_quant=None))
    ref = R.seeded_(float_cls(4, 6, 3, padding=1, padding_mode=padding_mode))
    x = rand(shape, seed=1)
    xq, xr = x.clone().requires_grad_(), x.clone().requires_grad_()
    y, yr = m(xq), ref(xr)
    assert torch.equal(y, yr)
    g = rand(y.shape, seed=2)
    (y * g).sum().backward()
    (yr * g).sum().backward()
    assert torch.equal(xq.grad, xr.grad)
    assert torch.equal(m.weight.grad, ref.weight.grad)
    assert torch.equal(m.bias.grad, ref.bias.grad)


@pytest.mark.parametrize(
    "dtype", [torch.float64, torch.float16, torch.bfloat16], ids=["f64", "f16", "bf16"]
)
def test_dtype_argument(dtype):
    m = conv(
        2, 4, 6, 3, weight_quant=Int8WeightPerChannelFloat, dtype=dtype, input_quant=R.ConstInt8Act
    )
    x = rand((2, 4, 5, 5), dtype=dtype, seed=1)
    y = m(x)
    assert y.dtype == dtype
    sx = R.const_act_scale(1.28, 8, True, dtype if dtype != torch.float64 else torch.float32)
    expected = F.conv2d(
        R.ref_act(x, sx), R.ref_weight(m.weight.detach(), channel_dim=0), m.bias.detach()
    )
    assert torch.equal(y, expected)


def test_loads_float_checkpoint_without_flags():
    float_layer = R.seeded_(nn.Conv2d(4, 6, 3), seed=5)
    m = conv(2, 4, 6, 3, input_quant=R.ConstInt8Act, output_quant=R.ConstInt8Act)
    m.load_state_dict(float_layer.state_dict())
    x = rand((2, 4, 5, 5), seed=1)
    acc = F.conv2d(
        R.ref_act(x, SX), R.ref_weight(float_layer.weight.detach()), float_layer.bias.detach()
    )
    assert torch.equal(m(x), R.ref_act(acc, SX))


def test_state_dict_round_trip():
    m = conv(
        2,
        4,
        6,
        3,
        weight_quant=Int8WeightPerChannelFloat,
        weight_scaling_impl_type="parameter_from_stats",
        weight_bit_width=6,
    )
    x = rand((2, 4, 5, 5), seed=1)
    m(x)
    with torch.no_grad():
        m.weight_quant.tensor_quant.scaling_impl.value.mul_(0.8)
    fresh = conv(
        2,
        4,
        6,
        3,
        seed=9,
        weight_quant=Int8WeightPerChannelFloat,
        weight_scaling_impl_type="parameter_from_stats",
        weight_bit_width=6,
    )
    fresh.load_state_dict(m.state_dict())
    assert torch.equal(fresh(x), m(x))


def _bn(channels, dims):
    bn = {1: nn.BatchNorm1d, 2: nn.BatchNorm2d, 3: nn.BatchNorm3d}[dims](channels).eval()
    with torch.no_grad():
        bn.running_mean.copy_(rand((channels,), seed=3))
        bn.running_var.copy_(rand((channels,), seed=4).abs() + 0.5)
        bn.weight.copy_(rand((channels,), seed=5))
        bn.bias.copy_(rand((channels,), seed=6))
    return bn


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_merge_bn_in(bias):
    m = conv(2, 4, 6, 3, bias=bias)
    bn = _bn(6, 2)
    w = m.weight.detach().clone()
    b = m.bias.detach().clone() if bias else None
    m.merge_bn_in(bn)
    mul = bn.weight.detach() / torch.sqrt(bn.running_var + bn.eps)
    add = -bn.running_mean * mul + bn.bias.detach()
    assert torch.equal(m.weight.detach(), w * mul.view(-1, 1, 1, 1))
    assert torch.equal(m.bias.detach(), b * mul + add if bias else add)
    x = rand((2, 4, 5, 5), seed=1)
    assert torch.equal(m(x), F.conv2d(x, R.ref_weight(m.weight.detach()), m.bias.detach()))


def test_merged_float_layer_equals_conv_then_bn():
    m = conv(2, 4, 6, 3, weight_quant=None, groups=2)
    bn = _bn(6, 2)
    x = rand((2, 4, 5, 5), seed=1)
    expected = bn(m(x)).detach()
    m.merge_bn_in(bn)
    torch.testing.assert_close(m(x).detach(), expected, rtol=1e-5, atol=1e-6)


def test_bad_keyword_names_layer_and_prefixes():
    with pytest.raises(
        TypeError,
        match=r"QuantConv2d: unknown keyword argument "
        r"weight_scaling_per_output_chanel=True.*accepted prefixes: 'input_' "
        r"\(input_quant\), 'output_' \(output_quant\), 'weight_' \(weight_quant\), "
        r"'bias_' \(bias_quant\)",
    ):
        QuantConv2d(4, 6, 3, weight_scaling_per_output_chanel=True)
