"""torch.compile on a model of quant layers returning plain tensors: forward, parameter
gradients and eval equal eager mode bit for bit. With BREVITAS_JIT=0 the whole model is one
graph (fullgraph=True); TorchScript blocks (BREVITAS_JIT=1) are opaque to dynamo, so there the
compiled model runs with graph breaks and must still give the same numbers."""

import torch
from torch import nn

import brevitas_cpp.nn as qnn
from brevitas_cpp import config


class SmallNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = qnn.QuantIdentity()
        self.conv = qnn.QuantConv2d(3, 4, 3, weight_bit_width=4)
        self.relu = qnn.QuantReLU()
        self.fc = qnn.QuantLinear(4 * 6 * 6, 5, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.relu(self.conv(self.inp(x))), 1))


def test_compiled_quant_model_matches_eager():
    torch.manual_seed(0)
    eager, twin = SmallNet(), SmallNet()
    twin.load_state_dict(eager.state_dict())
    compiled = torch.compile(twin, backend="aot_eager", fullgraph=not config.JIT_ENABLED)
    x = torch.randn(2, 3, 8, 8)
    for _ in range(3):  # statistics warm-up steps of the activation quantizers
        y_eager, y_compiled = eager(x), compiled(x)
        assert torch.equal(y_eager, y_compiled)
        y_eager.square().sum().backward()
        y_compiled.square().sum().backward()
    for (name, a), b in zip(eager.named_parameters(), twin.parameters()):
        assert (a.grad is None) == (b.grad is None), name
        if a.grad is not None:
            assert torch.equal(a.grad, b.grad), name
    eager.eval()
    compiled.eval()
    assert torch.equal(eager(x), compiled(x))
