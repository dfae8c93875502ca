"""A program written for Brevitas 0.12.1, as its users write them: it imports ``brevitas``, and is
run unchanged by golden/record_program.py (on Brevitas) and test_brevitas_program.py (on
brevitas_cpp, ``brevitas`` resolving to it).

It uses what issue 32 found failing in real programs: one set of layer keywords for several
weight quantizers (``weight_accumulator_bit_width`` is read by the A2Q+ quantizer and ignored by
the others), ``HadamardClassifier``, and an A2Q+ layer through calibration and bias correction.
``run`` trains 3 steps from the statistics phase, calibrates, corrects the biases and returns
what a user would compare."""

from typing import Dict

import brevitas.nn as qnn
import torch
import torch.nn.functional as F
from brevitas.graph.calibrate import bias_correction_mode, calibration_mode
from brevitas.nn import HadamardClassifier
from brevitas.quant import (
    Int8AccumulatorAwareZeroCenterWeightQuant,
    Int8ActPerTensorFloat,
    Int8WeightPerTensorFloat,
    Int32Bias,
    Uint8ActPerTensorFloat,
)
from torch import Tensor, nn

LAYER_KWARGS = dict(weight_accumulator_bit_width=16, bias=True, bias_quant=Int32Bias)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            qnn.QuantIdentity(act_quant=Int8ActPerTensorFloat, return_quant_tensor=True),
            qnn.QuantConv2d(
                3, 8, 3, padding=1, weight_quant=Int8WeightPerTensorFloat, **LAYER_KWARGS
            ),
            qnn.QuantReLU(act_quant=Uint8ActPerTensorFloat, return_quant_tensor=True),
            qnn.QuantConv2d(
                8, 8, 3, weight_quant=Int8AccumulatorAwareZeroCenterWeightQuant, **LAYER_KWARGS
            ),
            qnn.QuantReLU(return_quant_tensor=True),
        )
        # Brevitas's HadamardClassifier takes only a QuantTensor: it follows the quantizers.
        self.head = HadamardClassifier(8 * 6 * 6, 10, return_quant_tensor=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x).flatten(1)).value


def run() -> Dict[str, Tensor]:
    torch.manual_seed(0)
    model = Net()
    data = torch.randn(6, 4, 3, 8, 8)
    labels = torch.randint(0, 10, (6, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    losses = []
    for x, y in zip(data[:3], labels[:3]):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    result = {"losses": torch.stack(losses)}
    result.update({"trained." + k: v.clone() for k, v in model.state_dict().items()})
    model.eval()
    with torch.no_grad():
        # The modes switch quantization off, which the classifier cannot take: they run on the
        # quantized features.
        with calibration_mode(model.features):
            for x in data[3:5]:
                model.features(x)
        result.update({"calibrated." + k: v.clone() for k, v in model.state_dict().items()})
        with bias_correction_mode(model.features):
            for x in data[3:5]:
                model.features(x)
        result.update({"corrected." + k: v.clone() for k, v in model.state_dict().items()})
        result["output"] = model(data[5])
    return result
