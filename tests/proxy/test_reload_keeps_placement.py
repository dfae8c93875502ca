"""load_state_dict rebuilds each quantizer from its injector (REINIT_ON_STATE_DICT_LOAD, as in
Brevitas); the rebuilt quantizer must sit where the old one was. Before, a model moved with
.double() (or .cuda(): tests/nn/test_cuda_models.py) got float32 CPU quantizers back from
load_state_dict and computed something else than the model it was loaded from."""

import torch
from torch import nn

import brevitas_cpp.nn as qnn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = qnn.QuantIdentity(bit_width=8, collect_stats_steps=1)
        self.fc = qnn.QuantLinear(4, 3, bias=True, weight_bit_width=8)
        self.relu = qnn.QuantReLU(bit_width=8, collect_stats_steps=1)

    def forward(self, x):
        return self.relu(self.fc(self.inp(x)))


def test_reloaded_double_model_stays_double_and_equal():
    torch.manual_seed(0)
    trained = Net().double()
    x = torch.randn(5, 4, dtype=torch.float64)
    trained(x)
    trained(x)  # statistics, then learned scales
    model = Net().double()
    model.load_state_dict(trained.state_dict())
    floating = {t.dtype for t in [*model.parameters(), *model.buffers()] if t.is_floating_point()}
    assert floating == {torch.float64}
    trained.eval()
    model.eval()
    assert torch.equal(model(x), trained(x))


def test_reloaded_float_model_is_unchanged():
    torch.manual_seed(0)
    trained = Net()
    x = torch.randn(5, 4)
    trained(x)
    model = Net()
    model.load_state_dict(trained.state_dict())
    floating = {t.dtype for t in [*model.parameters(), *model.buffers()] if t.is_floating_point()}
    assert floating == {torch.float32}
