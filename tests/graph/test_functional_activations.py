"""Quantizers on functional activations (graph.functional): the calls of the model's own forward
get an output quantizer, signed or unsigned by the function's range, and the quantized model
computes the activation then its quantization (written out here from the inserted quantizer's
scale); activation layers, quant or float, are left alone."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from brevitas_cpp.graph import QuantizerInsertion, quantize_model
from brevitas_cpp.graph.functional import quantize_functional_activations


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, 4), nn.Linear(4, 4)
        self.act = nn.GELU()  # a layer: the Quantizer's business

    def forward(self, x):
        x = F.gelu(self.fc1(x))
        x = torch.sigmoid(self.fc2(x)) + F.silu(x)
        return self.act(x).relu()


def test_the_functional_calls_get_signed_or_unsigned_output_quantizers():
    torch.manual_seed(0)
    model = Net()
    x = torch.randn(3, 4)
    insertion = QuantizerInsertion(model, x)
    scopes = quantize_functional_activations(insertion)
    assert scopes == ["Net/gelu_0", "Net/sigmoid_0", "Net/silu_0", "Net/relu_0"]
    signs = {key: quant.act_quant.is_signed for key, quant in model.inserted_quantizers.items()}
    assert list(signs.values()) == [True, False, True, False]


def test_quantize_model_with_functional_activations_quantizes_each_output():
    torch.manual_seed(0)
    model = Net()
    x = torch.randn(3, 4)
    config = {"overrides": {"act": None}, "functional_activations": True}
    model, _ = quantize_model(model, config, x)
    assert type(model.act) is nn.GELU  # kept float by the override, and not re-quantized
    model.eval()
    outputs = {}
    for key, quant in model.inserted_quantizers.items():
        quant.register_forward_hook(lambda m, i, o, key=key: outputs.__setitem__(key, (i[0], o)))
    model(x)
    for key, quant in model.inserted_quantizers.items():
        value, out = outputs[key]
        scale = quant.act_quant.scale()
        low, high = (-128, 127) if quant.act_quant.is_signed else (0, 255)
        expected = torch.clamp(torch.round(value / scale), low, high) * scale
        torch.testing.assert_close(out, expected, rtol=0, atol=1e-7)


def test_functional_activations_need_example_inputs():
    model = Net()
    with pytest.raises(ValueError, match="need example inputs"):
        quantize_model(model, {"functional_activations": True})
    assert type(model.fc1) is nn.Linear  # refused before anything was replaced
