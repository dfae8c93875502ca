"""Models of the export tests: the digits CNN of the main job (conv-relu-conv-relu-avgpool-linear on
8x8 images) built from brevitas_cpp.nn, and a reduced ResNet (torchvision's BasicBlock, narrow,
on 16x16 inputs) quantized automatically by brevitas_cpp.graph with its residual adds quantized
by insertion."""

from typing import Any, Dict, Optional

import torch
from graph_models import BasicBlock
from torch import Tensor, nn

from brevitas_cpp import nn as qnn
from brevitas_cpp.graph import Quantizer, QuantizerInsertion, trace
from brevitas_cpp.quant import Int8WeightPerChannelFloat, Uint8ActPerTensorFloat


class DigitsCNN(nn.Module):
    """The main job's QuantNet: input quantizer, two convolutions with quantized ReLUs, a float
    2x2 average pool and a linear classifier."""

    def __init__(
        self,
        weight: Dict[str, Any],
        act: Dict[str, Any],
        input_act: Optional[Dict[str, Any]] = None,
        return_quant_tensor: bool = False,
        seed: int = 0,
    ) -> None:
        super().__init__()
        torch.manual_seed(seed)  # the same weights every run
        rqt = {"return_quant_tensor": return_quant_tensor}
        self.inp = qnn.QuantIdentity(**(input_act if input_act is not None else act), **rqt)
        self.conv1 = qnn.QuantConv2d(1, 16, 3, padding=1, **weight, **rqt)
        self.relu1 = qnn.QuantReLU(**act, **rqt)
        self.conv2 = qnn.QuantConv2d(16, 32, 3, padding=1, **weight, **rqt)
        self.relu2 = qnn.QuantReLU(**act)
        self.pool = nn.AvgPool2d(2)
        self.fc = qnn.QuantLinear(32 * 4 * 4, 10, bias=True, **weight)

    def forward(self, x: Tensor) -> Tensor:
        x = self.relu1(self.conv1(self.inp(x)))
        x = self.pool(self.relu2(self.conv2(x)))
        return self.fc(torch.flatten(x, 1))


def digits_cnn(bits: int = 8, per_channel: bool = True, **kwargs: Any) -> DigitsCNN:
    """W<bits>A<bits> as the main job builds it: per-channel (or per-tensor) weights, unsigned
    activations with a few statistics steps."""
    weight: Dict[str, Any] = {"weight_bit_width": bits}
    if per_channel:
        weight["weight_quant"] = Int8WeightPerChannelFloat
    act = {"act_quant": Uint8ActPerTensorFloat, "bit_width": bits, "collect_stats_steps": 2}
    return DigitsCNN(weight, act, **kwargs)


def images(n: int, seed: int) -> Tensor:
    """Digit-like inputs: 8x8 images in [0, 1]."""
    return torch.rand(n, 1, 8, 8, generator=torch.Generator().manual_seed(seed))


def calibrate(model: nn.Module, x: Tensor, steps: int = 3) -> nn.Module:
    """Training-mode forwards (statistics, EMA thresholds), then eval mode."""
    model.train()
    with torch.no_grad():
        for _ in range(steps):
            model(x)
    return model.eval()


class SmallResNet(nn.Module):
    """ResNet-18's stem and first stage (torchvision's names), 8 and 16 channels wide."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = nn.Sequential(BasicBlock(8, 8), BasicBlock(8, 16, 2))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x: Tensor) -> Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer1(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


def quantized_resnet(x: Tensor) -> nn.Module:
    """SmallResNet through brevitas_cpp.graph: W8A8 replacement, an input quantizer on each
    residual add, BatchNorm statistics and activation scales calibrated in training mode."""
    torch.manual_seed(0)
    model = SmallResNet()
    Quantizer(model, bits_weights=8, bits_activations=8).prepare_model()
    graph = trace(model, x)
    adds = [n.scope for n in graph.nodes if n.op == "__iadd__"]  # the residual out += identity
    insertion = QuantizerInsertion(model, x)
    for scope in adds:
        insertion.quantize_inputs(scope)
    insertion.apply()
    return calibrate(model, x)
