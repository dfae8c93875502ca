"""transformers' Conv1D (GPT-2's projections) quantized: QuantTransformersConv1D against a
Conv1D written out here from transformers' definition (pytorch_utils.Conv1D: weight (nx, nf),
y = addmm(bias, x, weight)), its state_dict in Conv1D's layout, and the graph.Quantizer
replacing it through transformers_conv1d."""

import pytest
import torch
from torch import nn

from brevitas_cpp.graph import Quantizer
from brevitas_cpp.graph.replacement import default_replacement_factory, transformers_conv1d
from brevitas_cpp.nn import QuantTransformersConv1D


class Conv1D(nn.Module):
    """transformers.pytorch_utils.Conv1D, as transformers defines it."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)
        self.bias = nn.Parameter(torch.randn(nf) * 0.02)

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class Block(nn.Module):  # GPT-2's MLP: c_fc and c_proj are Conv1D
    def __init__(self):
        super().__init__()
        self.c_fc, self.c_proj, self.act = Conv1D(16, 8), Conv1D(8, 16), nn.GELU()

    def forward(self, x):
        return self.c_proj(self.act(self.c_fc(x)))


def _int8_per_tensor(w):
    # Int8WeightPerTensorFloat: scale max|w| / 127, narrow signed 8-bit, half to even.
    scale = w.abs().max() / 127
    return torch.clamp(torch.round(w / scale), -127, 127) * scale


def test_unquantized_it_computes_conv1d():
    torch.manual_seed(0)
    float_layer = Conv1D(6, 4)
    layer = QuantTransformersConv1D(6, 4, weight_quant=None)
    layer.load_state_dict(float_layer.state_dict())
    x = torch.randn(2, 3, 4)
    torch.testing.assert_close(layer(x), float_layer(x), rtol=1e-6, atol=1e-6)


def test_quantized_weight_is_the_transposed_conv1d_weight_quantized():
    torch.manual_seed(0)
    float_layer = Conv1D(6, 4)
    layer = QuantTransformersConv1D(6, 4)
    layer.load_state_dict(float_layer.state_dict())
    x = torch.randn(5, 4)
    expected = x @ _int8_per_tensor(float_layer.weight.detach()) + float_layer.bias.detach()
    torch.testing.assert_close(layer(x), expected, rtol=1e-6, atol=1e-6)


def test_state_dict_keeps_conv1ds_layout_both_ways():
    layer = QuantTransformersConv1D(6, 4)
    assert layer.weight.shape == (6, 4)  # Linear's layout in memory
    state = layer.state_dict()
    assert state["weight"].shape == (4, 6)  # Conv1D's in checkpoints
    float_layer = Conv1D(6, 4)
    float_layer.load_state_dict({"weight": state["weight"], "bias": state["bias"]})
    assert torch.equal(float_layer.weight.detach().t(), layer.weight.detach())
    with pytest.raises(RuntimeError, match="size mismatch for weight"):
        layer.load_state_dict({**state, "weight": torch.zeros(5, 6)})


def test_quantizer_replaces_conv1d_and_the_optimizer_trains_the_copy():
    torch.manual_seed(0)
    model = Block()
    x = torch.randn(2, 3, 8)
    factory = {**default_replacement_factory(), Conv1D: transformers_conv1d}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    float_c_fc = model.c_fc
    Quantizer(model, replacement_factory=factory, optimizer=optimizer).prepare_model()
    assert isinstance(model.c_fc, QuantTransformersConv1D) and model.c_fc.bias is float_c_fc.bias
    assert type(model.act).__name__ == "QuantGELU"
    # The transposed weight is a new Parameter in the float weight's optimizer group.
    assert any(p is model.c_fc.weight for p in optimizer.param_groups[0]["params"])
    before = model.c_fc.weight.detach().clone()
    model(x).sum().backward()
    optimizer.step()
    assert not torch.equal(model.c_fc.weight.detach(), before)
