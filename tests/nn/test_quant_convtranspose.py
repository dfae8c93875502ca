"""QuantConvTranspose1d/2d/3d against torch's transposed convolutions run on explicitly quantized
operands (layer_refs.py spells out the quantizer formulas). The weight is [C_in, C_out / groups,
*kernel], so per-channel scales run along dim 1."""

import importlib.util
import math
import os

import pytest
import torch
import torch.nn.functional as F
from helpers import rand
from torch import nn

from brevitas_cpp.nn import QuantConvTranspose1d, QuantConvTranspose2d, QuantConvTranspose3d
from brevitas_cpp.quant import Int8WeightPerChannelFloat, Int32Bias
from brevitas_cpp.quant_tensor import IntQuantTensor


def _load_refs():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "layer_refs.py")
    spec = importlib.util.spec_from_file_location("nn_layer_refs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


R = _load_refs()
SX = R.const_act_scale(1.28, 8, True)

CONVS = {
    1: (QuantConvTranspose1d, nn.ConvTranspose1d, F.conv_transpose1d, (2, 4, 5)),
    2: (QuantConvTranspose2d, nn.ConvTranspose2d, F.conv_transpose2d, (2, 4, 4, 3)),
    3: (QuantConvTranspose3d, nn.ConvTranspose3d, F.conv_transpose3d, (1, 4, 3, 2, 3)),
}
DIMS = [1, 2, 3]
DIM_IDS = ["1d", "2d", "3d"]


def convt(dims, *args, seed=0, **kwargs):
    return R.seeded_(CONVS[dims][0](*args, **kwargs), seed)


def run_ref(dims, m, x, w, b):
    return CONVS[dims][2](x, w, b, m.stride, m.padding, m.output_padding, m.groups, m.dilation)


@pytest.mark.parametrize("dims", DIMS, ids=DIM_IDS)
def test_defaults(dims):
    m = convt(dims, 4, 6, 3)
    assert isinstance(m, CONVS[dims][1])
    assert m.weight_quant.is_quant_enabled and not m.input_quant.is_quant_enabled
    assert m.output_channel_dim == 1
    assert convt(dims, 4, 4, 3, groups=4).channelwise_separable
    with pytest.raises(NotImplementedError, match="per_elem_ops"):
        m.per_elem_ops
    R.assert_scripted_quantizers(m)


@pytest.mark.parametrize(
    "dims,config",
    [
        (2, dict()),
        (2, dict(stride=2, padding=1, output_padding=1)),
        (2, dict(groups=2, dilation=2)),
        (1, dict(stride=2, groups=2)),
        (3, dict(stride=2, padding=1, dilation=2)),
    ],
    ids=["2d-plain", "2d-stride-pad", "2d-groups-dilation", "1d", "3d"],
)
def test_forward_quantizes_weight(dims, config):
    m = convt(dims, 4, 6, 3, **config)
    x = rand(CONVS[dims][3], seed=1)
    assert torch.equal(m(x), run_ref(dims, m, x, R.ref_weight(m.weight.detach()), m.bias.detach()))


@pytest.mark.parametrize("groups", [1, 2])
def test_per_channel_weight_along_dim_1(groups):
    m = convt(2, 4, 6, 3, stride=2, groups=groups, weight_quant=Int8WeightPerChannelFloat)
    x = rand((2, 4, 4, 3), seed=1)
    wq = R.ref_weight(m.weight.detach(), channel_dim=1)
    assert torch.equal(m(x), run_ref(2, m, x, wq, m.bias.detach()))
    assert m.quant_weight().scale.shape == (1, 6 // groups, 1, 1)


def test_backward_matches_written_out_formula():
    m = convt(2, 4, 6, 3, stride=2)
    x = rand((2, 4, 4, 3), seed=1).requires_grad_()
    y = m(x)
    g = rand(y.shape, seed=2)
    (y * g).sum().backward()
    gx, gw, gb = R.grad_of(
        lambda x, w, b: F.conv_transpose2d(x, R.ref_weight(w), b, stride=2),
        (x.detach(), m.weight.detach(), m.bias.detach()),
        g,
    )
    R.assert_grads_close(x.grad, gx)
    R.assert_grads_close(m.weight.grad, gw)
    R.assert_grads_close(m.bias.grad, gb)


@pytest.mark.parametrize("dilation", [1, 2])
def test_output_size(dilation):
    m = convt(2, 4, 6, 3, stride=2, dilation=dilation)
    ref = R.seeded_(nn.ConvTranspose2d(4, 6, 3, stride=2, dilation=dilation))
    with torch.no_grad():
        ref.weight.copy_(R.ref_weight(m.weight.detach()))
    x = rand((2, 4, 4, 3), seed=1)
    size = [10, 8] if dilation == 1 else [12, 10]
    y = m(x, output_size=size)
    assert tuple(y.shape[2:]) == tuple(size)
    assert torch.equal(y, ref(x, output_size=size))
    # Passed down as an argument, not kept for the next call.
    assert tuple(m(x).shape[2:]) != tuple(size)
    # With a QuantTensor requested too (the handler derives the accumulator's metadata).
    mq = convt(
        2,
        4,
        6,
        3,
        stride=2,
        dilation=dilation,
        input_quant=R.ConstInt8Act,
        return_quant_tensor=True,
    )
    assert tuple(mq(x, output_size=size).value.shape[2:]) == tuple(size)


@pytest.mark.parametrize("dims", DIMS, ids=DIM_IDS)
def test_quantized_input_and_bias_give_accumulator_quant_tensor(dims):
    m = convt(
        dims,
        4,
        6,
        3,
        stride=2,
        input_quant=R.ConstInt8Act,
        bias_quant=Int32Bias,
        return_quant_tensor=True,
    )
    x = rand(CONVS[dims][3], seed=1)
    y = m(x)
    assert isinstance(y, IntQuantTensor)
    w = m.weight.detach()
    scale = SX * R.weight_scale(w)
    expected = run_ref(
        dims, m, R.ref_act(x, SX), R.ref_weight(w), R.ref_bias(m.bias.detach(), scale.view(1))
    )
    assert torch.equal(y.value, expected)
    assert torch.equal(y.scale, scale.view((1,) * (dims + 2)))
    # Brevitas's bound: overlapping kernel taps summed over dims (ceil(3 / 2) each) x C_out.
    acc_bits = math.ceil(math.log2(255 * 255 * (2 * dims) * 6))
    assert float(y.bit_width) == max(acc_bits, 32) + 1


@pytest.mark.parametrize("dims", DIMS, ids=DIM_IDS)
def test_disabled_quantization_is_the_float_layer(dims):
    quant_cls, float_cls, _, shape = CONVS[dims]
    m = R.seeded_(quant_cls(4, 6, 3, stride=2, groups=2, weight_quant=None))
    ref = R.seeded_(float_cls(4, 6, 3, stride=2, groups=2))
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


def test_only_zeros_padding():
    with pytest.raises(ValueError, match="zeros"):
        QuantConvTranspose2d(4, 6, 3, padding_mode="reflect")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_low_precision_dtype(dtype):
    m = convt(2, 4, 6, 3, dtype=dtype, input_quant=R.ConstInt8Act)
    x = rand((2, 4, 4, 3), dtype=dtype, seed=1)
    y = m(x)
    assert y.dtype == dtype
    sx = R.const_act_scale(1.28, 8, True, dtype)
    assert torch.equal(
        y, run_ref(2, m, R.ref_act(x, sx), R.ref_weight(m.weight.detach()), m.bias.detach())
    )


def test_loads_float_checkpoint_without_flags():
    float_layer = R.seeded_(nn.ConvTranspose2d(4, 6, 3, stride=2), seed=5)
    m = convt(2, 4, 6, 3, stride=2, weight_quant=Int8WeightPerChannelFloat)
    m.load_state_dict(float_layer.state_dict())
    x = rand((2, 4, 4, 3), seed=1)
    expected = run_ref(
        2, m, x, R.ref_weight(float_layer.weight.detach(), channel_dim=1), float_layer.bias.detach()
    )
    assert torch.equal(m(x), expected)


@pytest.mark.parametrize("groups", [1, 2])
def test_merged_float_layer_equals_convtranspose_then_bn(groups):
    """Grouped: the weight is [C_in, C_out / groups, ...] and input group g feeds output channels
    g * C_out / groups onwards (Brevitas 0.12 can not fold a grouped transposed conv)."""
    m = convt(2, 4, 6, 3, stride=2, groups=groups, weight_quant=None)
    bn = nn.BatchNorm2d(6).eval()
    with torch.no_grad():
        bn.running_mean.copy_(rand((6,), seed=3))
        bn.running_var.copy_(rand((6,), seed=4).abs() + 0.5)
        bn.weight.copy_(rand((6,), seed=5))
        bn.bias.copy_(rand((6,), seed=6))
    x = rand((2, 4, 4, 3), seed=1)
    expected = bn(m(x)).detach()
    w = m.weight.detach().clone()
    m.merge_bn_in(bn)
    torch.testing.assert_close(m(x).detach(), expected, rtol=1e-5, atol=1e-6)
    if groups == 1:
        mul = bn.weight.detach() / torch.sqrt(bn.running_var + bn.eps)
        assert torch.equal(m.weight.detach(), w * mul.view(1, -1, 1, 1))
