"""Main job, part two: assemble Brevitas quantizers by injection and train through them.

A two-layer MLP whose weights go through 4-bit per-channel quantizers and whose hidden
activation goes through an 8-bit unsigned runtime-statistics quantizer; a few hundred SGD
steps on a synthetic regression task; then the quantizers' learned scales, their
TorchScript form, and the integer weights.

Run after set-up:  python3 examples/demo_quantizers.py   (BREVITAS_JIT=1 to script the blocks)
"""

from __future__ import annotations

import torch
from torch import nn

from brevitas_cpp import config
from brevitas_cpp.quant import Int8WeightPerChannelFloat, Uint8ActPerTensorFloat


class Int4WeightPerChannelFloat(Int8WeightPerChannelFloat):
    """Users compose quantizers by inheritance, as in Brevitas."""

    bit_width = 4


def weight_quantizer(layer: nn.Module) -> nn.Module:
    # What a quant layer's weight proxy does: inject the layer and its tracked weight.
    return Int4WeightPerChannelFloat.let(
        module=layer, tracked_parameter_list=[layer.weight]
    ).tensor_quant


class QuantMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 32), nn.Linear(32, 1)
        self.w1_quant, self.w2_quant = weight_quantizer(self.fc1), weight_quantizer(self.fc2)
        # collect_stats_steps=20: statistics warm-up, then the scale becomes a learned parameter.
        self.act_quant = Uint8ActPerTensorFloat.let(collect_stats_steps=20).tensor_quant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w1, _, _, _ = self.w1_quant(self.fc1.weight)
        h, _, _, _ = self.act_quant(torch.relu(nn.functional.linear(x, w1, self.fc1.bias)))
        w2, _, _, _ = self.w2_quant(self.fc2.weight)
        return nn.functional.linear(h, w2, self.fc2.bias)


def main() -> None:
    torch.manual_seed(0)
    print(
        f"BREVITAS_JIT={int(config.JIT_ENABLED)}: quantizer blocks are "
        f"{'TorchScript modules' if config.JIT_ENABLED else 'plain nn.Modules'}"
    )
    x = torch.randn(512, 8)
    target = torch.sin(x @ torch.randn(8, 1))
    model = QuantMLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for step in range(301):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), target)
        loss.backward()
        optimizer.step()
        if step in (0, 19, 20, 100, 300):
            scale = model.act_quant.scaling_impl(torch.empty(0)) if step >= 20 else None
            note = "statistics warm-up" if step < 20 else f"learned act scale {scale.item():.5f}"
            print(f"step {step:3d}  loss {loss.item():.5f}  ({note})")

    model.eval()
    with torch.no_grad():
        w1, scale1, zero_point1, bit_width1 = model.w1_quant(model.fc1.weight)
        integers = torch.round(w1 / scale1)
        print(
            f"\nfc1 weight: bit width {int(bit_width1)}, per-channel scales {tuple(scale1.shape)}, "
            f"integers in [{int(integers.min())}, {int(integers.max())}]"
        )
        print("eval loss:", round(nn.functional.mse_loss(model(x), target).item(), 5))
    learned = [n for n, p in model.named_parameters() if "quant" in n]
    print("learned quantizer parameters:", learned)
    print(
        "state_dict keys of the activation quantizer:",
        [k for k in model.state_dict() if k.startswith("act_quant")],
    )


if __name__ == "__main__":
    main()
