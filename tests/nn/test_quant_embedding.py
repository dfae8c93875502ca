"""QuantEmbedding against F.embedding on an explicitly quantized table: rows, gradients,
QuantTensor outputs (per-tensor and per-row scales), disabled quantization and errors."""

import importlib.util
import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from brevitas_cpp.nn import QuantEmbedding
from brevitas_cpp.quant import Int8WeightPerChannelFloat
from brevitas_cpp.quant_tensor import IntQuantTensor


def _load_refs():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "layer_refs.py")
    spec = importlib.util.spec_from_file_location("nn_layer_refs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


R = _load_refs()
IDX = torch.tensor([[1, 0, 3, 9], [4, 4, 2, 0]])


def embedding(**kwargs):
    return R.seeded_(QuantEmbedding(10, 6, **kwargs))


def test_defaults():
    m = embedding()
    assert isinstance(m, nn.Embedding)
    assert m.weight_quant.is_quant_enabled
    assert (m.output_channel_dim, m.out_channels, m.return_quant_tensor) == (0, 10, False)
    assert m.accept_quant_tensor is False
    R.assert_scripted_quantizers(m)


def test_rows_of_the_quantized_table():
    m = embedding()
    y = m(IDX)
    assert type(y) is torch.Tensor
    assert torch.equal(y, F.embedding(IDX, R.ref_weight(m.weight.detach())))


def test_backward():
    m = embedding(padding_idx=0)
    g = R.seeded_(nn.Linear(6, 1), seed=3).weight.detach().expand(2, 4, 6)
    (m(IDX) * g).sum().backward()
    (gw,) = R.grad_of(
        lambda w: F.embedding(IDX, R.ref_weight(w), padding_idx=0), (m.weight.detach(),), g
    )
    R.assert_grads_close(m.weight.grad, gw)


def test_return_quant_tensor_per_tensor():
    m = embedding(return_quant_tensor=True, weight_bit_width=4)
    y = m(IDX)
    assert isinstance(y, IntQuantTensor)
    w = m.weight.detach()
    assert torch.equal(y.value, F.embedding(IDX, R.ref_weight(w, bit_width=4)))
    assert torch.equal(y.scale, R.weight_scale(w, 4))
    assert float(y.bit_width) == 4.0 and y.signed


def test_return_quant_tensor_per_row_scales_follow_the_rows():
    """Brevitas 0.12 rejects per-channel scales here; the rows' scales are looked up with them."""
    m = embedding(weight_quant=Int8WeightPerChannelFloat, return_quant_tensor=True)
    y = m(IDX)
    w = m.weight.detach()
    row_scale = R.weight_scale(w, channel_dim=0)  # [10, 1]
    assert torch.equal(y.value, F.embedding(IDX, R.ref_weight(w, channel_dim=0)))
    assert torch.equal(y.scale, row_scale[IDX])
    assert y.scale.shape == (2, 4, 1)
    # value / scale is on the integer grid (up to the rounding of the division)
    ints = (y.value / y.scale).detach()
    torch.testing.assert_close(ints, torch.round(ints), rtol=0, atol=1e-4)


def test_disabled_quantization_is_the_float_layer():
    m = embedding(weight_quant=None, padding_idx=2)
    ref = R.seeded_(nn.Embedding(10, 6, padding_idx=2))
    assert torch.equal(m(IDX), ref(IDX))


def test_return_quant_tensor_needs_weight_quant():
    m = embedding(weight_quant=None, return_quant_tensor=True)
    with pytest.raises(RuntimeError, match="QuantEmbedding: return_quant_tensor=True"):
        m(IDX)


def test_rejects_quant_tensor_input():
    m = embedding()
    qt = IntQuantTensor(IDX.float(), 1.0, 0.0, 8.0, False, False)
    with pytest.raises(TypeError, match="QuantEmbedding: the input must be an integer index"):
        m(qt)


def test_keyword_errors():
    with pytest.raises(
        TypeError,
        match="QuantEmbedding: unexpected keyword argument "
        "input_bitwidth=4.*accepted prefixes: 'weight_' \\(weight_quant\\)\\.",
    ):
        QuantEmbedding(10, 6, input_bitwidth=4)
    with pytest.raises(TypeError, match="return_quant_tensor must be a bool"):
        QuantEmbedding(10, 6, return_quant_tensor="yes")


def test_loads_float_checkpoint():
    float_layer = R.seeded_(nn.Embedding(10, 6), seed=4)
    m = embedding()
    m.load_state_dict(float_layer.state_dict())
    assert torch.equal(m(IDX), F.embedding(IDX, R.ref_weight(float_layer.weight.detach())))
