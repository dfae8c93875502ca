"""QuantLinear against nn.Linear run on explicitly quantized operands (layer_refs.py spells out
the quantizer formulas): forward bit for bit, gradients, QuantTensor outputs, keyword routing,
disabled quantization, dtypes, state_dict, sharing and batch-norm folding."""

import importlib.util
import inspect
import math
import os

import pytest
import torch
import torch.nn.functional as F
from helpers import rand, ref_int_quant
from torch import nn

from brevitas_cpp.nn import QuantLinear
from brevitas_cpp.quant import (
    Int8ActPerTensorFloat,
    Int8WeightPerChannelFloat,
    Int8WeightPerTensorFloat,
    Int16Bias,
    Int32Bias,
)
from brevitas_cpp.quant_tensor import IntQuantTensor


def _load_refs():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "layer_refs.py")
    spec = importlib.util.spec_from_file_location("nn_layer_refs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


R = _load_refs()
SX = R.const_act_scale(1.28, 8, True)  # ConstInt8Act's scale


def linear(fin=6, fout=5, seed=0, **kwargs):
    return R.seeded_(QuantLinear(fin, fout, **kwargs), seed)


def test_defaults():
    m = linear()
    assert isinstance(m, nn.Linear)
    assert m.weight_quant.is_quant_enabled
    assert not m.bias_quant.is_quant_enabled
    assert not m.input_quant.is_quant_enabled
    assert not m.output_quant.is_quant_enabled
    assert m.return_quant_tensor is False
    assert (m.output_channel_dim, m.out_channels, m.per_elem_ops) == (0, 5, 12)
    assert m.channelwise_separable is False
    R.assert_scripted_quantizers(m)


@pytest.mark.parametrize("shape", [(4, 6), (2, 3, 6), (6,)], ids=["2d", "3d", "1d"])
def test_forward_quantizes_weight_per_tensor(shape):
    m = linear()
    x = rand(shape, seed=1)
    expected = F.linear(x, R.ref_weight(m.weight.detach()), m.bias.detach())
    assert torch.equal(m(x), expected)


def test_backward_matches_written_out_formula():
    m = linear()
    x = rand((4, 6), seed=1).requires_grad_()
    g = rand((4, 5), seed=2)
    (m(x) * g).sum().backward()
    gx, gw, gb = R.grad_of(
        lambda x, w, b: F.linear(x, R.ref_weight(w), b),
        (x.detach(), m.weight.detach(), m.bias.detach()),
        g,
    )
    R.assert_grads_close(x.grad, gx)
    R.assert_grads_close(m.weight.grad, gw)
    assert torch.equal(m.bias.grad, gb)


def test_per_channel_weight_with_bit_width_keyword():
    m = linear(weight_quant=Int8WeightPerChannelFloat, weight_bit_width=4)
    x = rand((4, 6), seed=1)
    wq = R.ref_weight(m.weight.detach(), bit_width=4, channel_dim=0)
    assert torch.equal(m(x), F.linear(x, wq, m.bias.detach()))
    qw = m.quant_weight()
    assert torch.equal(qw.scale, R.weight_scale(m.weight.detach(), 4, channel_dim=0))
    assert float(qw.bit_width) == 4.0


def test_input_weight_bias_quant_returns_accumulator_quant_tensor():
    m = linear(input_quant=R.ConstInt8Act, bias_quant=Int32Bias, return_quant_tensor=True)
    x = rand((4, 6), seed=1)
    y = m(x)
    assert isinstance(y, IntQuantTensor)
    w = m.weight.detach()
    scale = SX * R.weight_scale(w)
    xq = R.ref_act(x, SX)
    expected = F.linear(xq, R.ref_weight(w), R.ref_bias(m.bias.detach(), scale.view(1)))
    assert torch.equal(y.value, expected)
    assert torch.equal(y.scale, scale.view(1, 1))
    assert torch.equal(y.zero_point, torch.zeros(1))
    # 8-bit unsigned magnitudes x 8-bit x 6 terms, then one more bit for the 32-bit bias.
    acc_bits = math.ceil(math.log2(255 * 255 * 6))
    assert float(y.bit_width) == max(acc_bits, 32) + 1
    assert y.signed


def test_float_bias_on_quantized_accumulator_goes_to_zero_point():
    m = linear(input_quant=R.ConstInt8Act, return_quant_tensor=True)
    x = rand((4, 6), seed=1)
    y = m(x)
    scale = SX * R.weight_scale(m.weight.detach())
    assert torch.equal(y.scale, scale.view(1, 1))
    assert torch.equal(y.zero_point, -m.bias.detach().view(1, -1) / scale.view(1, 1))
    assert float(y.bit_width) == math.ceil(math.log2(255 * 255 * 6))


def test_quant_tensor_input_scale_times_weight_scale():
    m = linear(bias=False, return_quant_tensor=True)
    s = torch.tensor(0.02)
    value = torch.clamp(torch.round(rand((3, 6), seed=4) / s), -8, 7) * s
    y = m(IntQuantTensor(value, s, torch.tensor(0.0), torch.tensor(4.0), True, False))
    assert torch.equal(y.scale, (s * R.weight_scale(m.weight.detach())).view(1, 1))
    assert torch.equal(y.value, F.linear(value, R.ref_weight(m.weight.detach())))
    assert float(y.bit_width) == math.ceil(math.log2(15 * 255 * 6))


def test_output_quant_alone_gives_quant_tensor():
    m = linear(output_quant=R.ConstInt8Act, return_quant_tensor=True)
    x = rand((4, 6), seed=1)
    y = m(x)
    acc = F.linear(x, R.ref_weight(m.weight.detach()), m.bias.detach())
    assert torch.equal(y.value, R.ref_act(acc, SX))
    assert torch.equal(y.scale, SX)


def test_return_quant_tensor_without_quantized_output_raises():
    m = linear(return_quant_tensor=True)
    with pytest.raises(RuntimeError, match="QuantLinear: return_quant_tensor=True"):
        m(rand((4, 6)))


def test_quant_tensor_output_unpacked_by_default():
    m = linear(input_quant=R.ConstInt8Act, bias_quant=Int32Bias)
    y = m(rand((4, 6), seed=1))
    assert type(y) is torch.Tensor


@pytest.mark.parametrize(
    "dtype",
    [torch.float32, torch.float64, torch.float16, torch.bfloat16],
    ids=["f32", "f64", "f16", "bf16"],
)
def test_disabled_quantization_is_the_float_layer(dtype):
    m = linear(weight_quant=None, dtype=dtype)
    ref = R.seeded_(nn.Linear(6, 5, dtype=dtype))
    x = rand((4, 6), dtype=dtype, seed=1)
    xr = x.clone().requires_grad_()
    xq = x.clone().requires_grad_()
    g = rand((4, 5), dtype=dtype, seed=2)
    y, yr = m(xq), ref(xr)
    assert torch.equal(y, yr)
    (y * g).sum().backward()
    (yr * g).sum().backward()
    assert torch.equal(xq.grad, xr.grad)
    assert torch.equal(m.weight.grad, ref.weight.grad)
    assert torch.equal(m.bias.grad, ref.bias.grad)


@pytest.mark.parametrize(
    "dtype", [torch.float64, torch.float16, torch.bfloat16], ids=["f64", "f16", "bf16"]
)
def test_dtype_argument(dtype):
    m = linear(dtype=dtype)
    assert m.weight.dtype == dtype
    x = rand((4, 6), dtype=dtype, seed=1)
    y = m(x)
    assert y.dtype == dtype
    assert torch.equal(y, F.linear(x, R.ref_weight(m.weight.detach()), m.bias.detach()))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_low_precision_dtype_reaches_activation_quantizers(dtype):
    """A float32 input scale would turn the float16 activation into float32 (Brevitas then fails
    in the matmul); the layer's dtype is given to its input and output quantizers."""
    m = linear(
        dtype=dtype,
        input_quant=R.ConstInt8Act,
        bias_quant=Int32Bias,
        output_quant=R.ConstInt8Act,
        return_quant_tensor=True,
    )
    x = rand((4, 6), dtype=dtype, seed=1)
    y = m(x)
    sx = R.const_act_scale(1.28, 8, True, dtype)
    w = m.weight.detach()
    scale = sx * R.weight_scale(w)
    acc = F.linear(R.ref_act(x, sx), R.ref_weight(w), R.ref_bias(m.bias.detach(), scale))
    assert y.value.dtype == dtype and y.scale.dtype == dtype
    assert torch.equal(y.value, R.ref_act(acc, sx))


def test_device_argument():
    m = QuantLinear(6, 5, device="cpu", input_quant=R.ConstInt8Act)
    assert m.weight.device.type == "cpu"
    assert m(rand((2, 6))).device.type == "cpu"


def test_train_and_eval_use_the_same_weight_quantization():
    m = linear(weight_quant=Int8WeightPerChannelFloat)
    x = rand((4, 6), seed=1)
    y_train = m(x)
    m.eval()
    assert torch.equal(m(x), y_train)


def test_train_and_eval_activation_statistics():
    """Batch statistics in training (max|x| / 128 for this signed 8-bit input quantizer), the
    collected ones in eval (after one batch: that batch's)."""
    m = linear(
        bias=False,
        weight_quant=None,
        input_quant=Int8ActPerTensorFloat,
        input_scaling_impl_type="stats",
        input_scaling_stats_op="max",
    )
    x1, x2 = rand((4, 6), seed=1), rand((4, 6), seed=2) * 2
    w = m.weight.detach()
    assert torch.equal(m(x1), F.linear(R.ref_act(x1, x1.abs().max() / 128), w))
    m.eval()
    assert torch.equal(m(x2), F.linear(R.ref_act(x2, x1.abs().max() / 128), w))
    m.train()
    assert torch.equal(m(x2), F.linear(R.ref_act(x2, x2.abs().max() / 128), w))


def test_learned_scale_state_dict_round_trip():
    m = linear(weight_scaling_impl_type="parameter_from_stats")
    key = "weight_quant.tensor_quant.scaling_impl.value"
    x = rand((4, 6), seed=1)
    m(x)  # the learned scale is initialised from the weight's statistics on first use
    assert key in m.state_dict()
    with torch.no_grad():
        m.weight_quant.tensor_quant.scaling_impl.value.mul_(1.5)
    fresh = linear(seed=7, weight_scaling_impl_type="parameter_from_stats")
    fresh.load_state_dict(m.state_dict())
    assert torch.equal(fresh(x), m(x))
    assert torch.equal(fresh.state_dict()[key], m.state_dict()[key])


def test_loads_float_checkpoint_without_flags():
    float_layer = R.seeded_(nn.Linear(6, 5), seed=3)
    m = linear(input_quant=R.ConstInt8Act, bias_quant=Int32Bias)
    m.load_state_dict(float_layer.state_dict())
    assert torch.equal(m.weight, float_layer.weight)
    x = rand((4, 6), seed=1)
    w = float_layer.weight.detach()
    expected = F.linear(
        R.ref_act(x, SX),
        R.ref_weight(w),
        R.ref_bias(float_layer.bias.detach(), (SX * R.weight_scale(w)).view(1)),
    )
    assert torch.equal(m(x), expected)


def test_shared_weight_quantizer_uses_joint_statistics():
    a = linear(seed=0)
    b = linear(seed=1, weight_quant=a.weight_quant)
    assert b.weight_quant is a.weight_quant
    assert a.weight_quant.tracked_module_list == [a, b]
    # Per-tensor AbsMax over both layers' weights.
    joint = torch.maximum(a.weight.abs().max(), b.weight.abs().max()).detach() / 127
    x = rand((4, 6), seed=1)
    for layer in (a, b):
        w = layer.weight.detach()
        wq = ref_int_quant(w, joint, R.ZERO, torch.tensor(8.0), True, True)
        assert torch.equal(layer(x), F.linear(x, wq, layer.bias.detach()))


def test_shared_input_quantizer_is_one_module():
    a = linear(input_quant=R.ConstInt8Act)
    b = linear(input_quant=a.input_quant)
    assert b.input_quant is a.input_quant
    x = rand((4, 6), seed=1)
    assert torch.equal(
        b(x), F.linear(R.ref_act(x, SX), R.ref_weight(b.weight.detach()), b.bias.detach())
    )


def test_merge_bn_in_folds_and_requantizes():
    m = linear(weight_scaling_impl_type="parameter_from_stats")
    bn = nn.BatchNorm1d(5).eval()
    with torch.no_grad():
        bn.running_mean.copy_(rand((5,), seed=3))
        bn.running_var.copy_(rand((5,), seed=4).abs() + 0.5)
        bn.weight.copy_(rand((5,), seed=5))
        bn.bias.copy_(rand((5,), seed=6))
    w, b = m.weight.detach().clone(), m.bias.detach().clone()
    m.merge_bn_in(bn)
    mul = bn.weight / torch.sqrt(bn.running_var + bn.eps)
    add = -bn.running_mean * mul + bn.bias
    assert torch.equal(m.weight, (w * mul.view(-1, 1)).detach())
    assert torch.equal(m.bias, (b * mul + add).detach())
    # The learned scale is re-initialised from the folded weight.
    assert torch.equal(m.quant_weight().scale.detach().view(()), R.weight_scale(m.weight.detach()))


def test_bias_false_has_no_bias_quant_input():
    m = linear(bias=False, bias_quant=Int16Bias, input_quant=R.ConstInt8Act)
    x = rand((4, 6), seed=1)
    assert m.bias is None
    assert torch.equal(m(x), F.linear(R.ref_act(x, SX), R.ref_weight(m.weight.detach())))


def test_unknown_prefixed_keyword_raises():
    with pytest.raises(
        TypeError,
        match=r"QuantLinear: unknown keyword argument weight_bitwidth=4.*"
        r"Did you mean weight_bit_width",
    ):
        QuantLinear(6, 5, weight_bitwidth=4)


def test_signature_defaults_as_brevitas():
    params = inspect.signature(QuantLinear).parameters
    assert params["weight_quant"].default is Int8WeightPerTensorFloat
    for name in ("bias_quant", "input_quant", "output_quant", "device", "dtype"):
        assert params[name].default is None
    assert params["return_quant_tensor"].default is False
    assert params["bias"].default is True
