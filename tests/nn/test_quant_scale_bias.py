"""ScaleBias (y = x * weight + bias per channel) and QuantScaleBias against the affine written
out on explicitly quantized operands."""

import importlib.util
import os

import pytest
import torch
from helpers import rand

from brevitas_cpp.nn import QuantScaleBias, ScaleBias
from brevitas_cpp.quant import Int8ActPerTensorFloat, Int8WeightPerChannelFloat, Int16Bias
from brevitas_cpp.quant_tensor import IntQuantTensor


def _load_refs():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "layer_refs.py")
    spec = importlib.util.spec_from_file_location("nn_layer_refs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


R = _load_refs()
SX = R.const_act_scale(1.28, 8, True)
RS = (1, -1, 1, 1)


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_scale_bias(bias):
    m = R.seeded_(ScaleBias(4, bias))
    x = rand((2, 4, 3, 3), seed=1)
    expected = x * m.weight.detach().view(RS)
    if bias:
        expected = expected + m.bias.detach().view(RS)
    assert torch.equal(m(x).detach(), expected)


def test_scale_bias_initial_identity_and_runtime_shape():
    m = ScaleBias(5, True, runtime_shape=(1, 1, -1))
    assert torch.equal(m.weight, torch.ones(5)) and torch.equal(m.bias, torch.zeros(5))
    x = rand((2, 3, 5), seed=1)
    assert torch.equal(m(x).detach(), x)


def test_quant_scale_bias_defaults():
    m = QuantScaleBias(4, True)
    assert isinstance(m, ScaleBias)
    assert m.weight_quant.is_quant_enabled and not m.bias_quant.is_quant_enabled
    assert (m.output_channel_dim, m.out_channels, m.per_elem_ops) == (0, 4, 2)
    assert m.channelwise_separable
    R.assert_scripted_quantizers(m)


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_quant_scale_bias_forward_and_backward(bias):
    m = R.seeded_(QuantScaleBias(4, bias, weight_quant=Int8WeightPerChannelFloat))
    x = rand((2, 4, 3, 3), seed=1).requires_grad_()
    g = rand((2, 4, 3, 3), seed=2)

    def ref(x, w, *b):
        out = x * R.ref_weight(w, channel_dim=0).view(RS)
        return out + b[0].view(RS) if b else out

    leaves = (x.detach(), m.weight.detach()) + ((m.bias.detach(),) if bias else ())
    y = m(x)
    assert torch.equal(y.detach(), ref(*leaves))
    (y * g).sum().backward()
    grads = R.grad_of(ref, leaves, g)
    R.assert_grads_close(x.grad, grads[0])
    R.assert_grads_close(m.weight.grad, grads[1])
    if bias:
        R.assert_grads_close(m.bias.grad, grads[2])


def test_quantized_input_and_bias_return_quant_tensor():
    m = R.seeded_(
        QuantScaleBias(
            4, True, input_quant=R.ConstInt8Act, bias_quant=Int16Bias, return_quant_tensor=True
        )
    )
    x = rand((2, 4, 3, 3), seed=1)
    y = m(x)
    assert isinstance(y, IntQuantTensor)
    w = m.weight.detach()
    scale = SX * R.weight_scale(w)
    expected = R.ref_act(x, SX) * R.ref_weight(w).view(RS) + R.ref_bias(
        m.bias.detach(), scale.view(1), 16
    ).view(RS)
    assert torch.equal(y.value, expected)
    torch.testing.assert_close(y.scale.view(()), scale, rtol=0, atol=0)


def test_disabled_quantization_is_scale_bias():
    m = R.seeded_(QuantScaleBias(4, True, weight_quant=None))
    ref = R.seeded_(ScaleBias(4, True))
    x = rand((2, 4, 3, 3), seed=1)
    assert torch.equal(m(x), ref(x))


def test_custom_runtime_shape():
    m = R.seeded_(QuantScaleBias(5, True, runtime_shape=(1, 1, -1)))
    x = rand((2, 3, 5), seed=1)
    expected = x * R.ref_weight(m.weight.detach()).view(1, 1, -1) + m.bias.detach().view(1, 1, -1)
    assert torch.equal(m(x), expected)


def test_state_dict_round_trip():
    m = R.seeded_(QuantScaleBias(4, True))
    fresh = QuantScaleBias(4, True)
    fresh.load_state_dict(m.state_dict())
    x = rand((2, 4, 3, 3), seed=1)
    assert torch.equal(fresh(x), m(x))


def test_bad_keyword():
    with pytest.raises(
        TypeError, match="QuantScaleBias: unexpected keyword argument runtime_shap="
    ):
        QuantScaleBias(4, True, runtime_shap=(1, -1))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16], ids=["f64", "f16"])
def test_device_and_dtype_reach_parameters_and_activation_quantizers(dtype):
    # Like the torch-backed layers: the parameters are built in dtype on device, and a
    # half-precision layer's input quantizer gets a scale of its dtype (a float32 scale would
    # turn the activation into float32).
    m = QuantScaleBias(3, True, input_quant=Int8ActPerTensorFloat, device="cpu", dtype=dtype)
    assert m.weight.dtype == dtype and m.bias.dtype == dtype
    assert ScaleBias(3, True, device="cpu", dtype=dtype).weight.dtype == dtype
    x = rand((2, 3, 4, 4), seed=2).to(dtype)
    assert m(x).dtype == dtype
    assert m.input_quant.scale().dtype == (dtype if dtype == torch.float16 else torch.float32)


def test_unknown_dtype_like_keyword_is_still_rejected():
    with pytest.raises(TypeError, match="QuantScaleBias: unexpected keyword argument dtypes="):
        QuantScaleBias(4, True, dtypes=torch.float16)
