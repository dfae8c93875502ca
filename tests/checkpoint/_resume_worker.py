"""Child side of the resume tests, run as ``python -P _resume_worker.py MODE MODEL OUT_DIR`` in a
fresh interpreter (BREVITAS_JIT set by the parent):

- ``straight``: trains STEPS steps and saves every step's loss, a checkpoint (model and optimizer)
  after each step of CHECKPOINT_STEPS, and the final state;
- ``resume``: for each checkpoint and each optimizer order (built before the load, as
  ``examples/ddp_qat.py --resume`` does, or after it), builds a fresh model and optimizer, loads,
  trains the remaining steps and saves their losses and the final state.

The optimizer has momentum and weight decay, so a learned scale that a load left out of the
optimizer, or a warm-up state that a load changed, shows in the numbers."""

import sys
from pathlib import Path
from typing import Callable, Dict, Tuple

import torch
import torch.nn.functional as F
from torch import nn

import brevitas_cpp.nn as qnn
from brevitas_cpp.graph import Quantizer
from brevitas_cpp.quant import ShiftedUint8ActPerTensorFloat

COLLECT_STATS_STEPS = 3
STEPS = 6
# Within the statistics phase, at the hand-over (the next call initialises the scales), learned.
CHECKPOINT_STEPS = (2, 3, 5)
ORDERS = ("optimizer_before_load", "optimizer_after_load")
# Both optimizer orders in each phase, one at the hand-over (each case builds a model: seconds
# with BREVITAS_JIT=1).
RESUMES = ((2, ORDERS[0]), (2, ORDERS[1]), (3, ORDERS[0]), (5, ORDERS[0]), (5, ORDERS[1]))


def cnn() -> nn.Module:
    return nn.Sequential(
        qnn.QuantIdentity(
            act_quant=ShiftedUint8ActPerTensorFloat, collect_stats_steps=COLLECT_STATS_STEPS
        ),
        qnn.QuantConv2d(1, 4, 3),
        qnn.QuantReLU(collect_stats_steps=COLLECT_STATS_STEPS),
        qnn.QuantConv2d(4, 4, 3, weight_scaling_per_output_channel=True),
        qnn.QuantReLU(collect_stats_steps=COLLECT_STATS_STEPS),
        nn.Flatten(),
        qnn.QuantLinear(4 * 4 * 4, 3, bias=True),
    )


class LstmAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = qnn.QuantLSTM(4, 8, batch_first=True)
        self.attention = qnn.QuantMultiheadAttention(8, 2, batch_first=True)
        self.head = qnn.QuantLinear(8, 3, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        out, _ = self.attention(out, out, out, need_weights=False)
        return self.head(out.mean(1))


def graph_quantized() -> nn.Module:
    float_model = nn.Sequential(
        nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Conv2d(4, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(64, 3)
    )
    return Quantizer(
        float_model, act_kwargs={"collect_stats_steps": COLLECT_STATS_STEPS}
    ).prepare_model()


MODELS: Dict[str, Tuple[Callable[[], nn.Module], Tuple[int, ...]]] = {
    "cnn": (cnn, (8, 1, 8, 8)),
    "lstm_mha": (LstmAttention, (8, 5, 4)),
    "graph": (graph_quantized, (8, 1, 8, 8)),
}


def batches(shape: Tuple[int, ...]):
    gen = torch.Generator().manual_seed(1)
    return [
        (torch.randn(shape, generator=gen), torch.randint(0, 3, (shape[0],), generator=gen))
        for _ in range(STEPS)
    ]


def build(name: str) -> nn.Module:
    torch.manual_seed(0)
    return MODELS[name][0]().train()


def optimizer_of(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-2)


def train(model, optimizer, data, first: int, last: int, on_step=None):
    losses = []
    for step in range(first, last):
        x, y = data[step]
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
        if on_step is not None:
            on_step(step + 1)
    return torch.stack(losses)


def straight(name: str, out: Path) -> None:
    model = build(name)
    optimizer = optimizer_of(model)
    data = batches(MODELS[name][1])

    def checkpoint(done: int) -> None:
        if done in CHECKPOINT_STEPS:
            state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
            torch.save(state, out / f"checkpoint_{done}.pt")

    losses = train(model, optimizer, data, 0, STEPS, checkpoint)
    torch.save({"losses": losses, "model": model.state_dict()}, out / "straight.pt")


def resume(name: str, out: Path) -> None:
    data = batches(MODELS[name][1])
    for done, order in RESUMES:
        checkpoint = torch.load(out / f"checkpoint_{done}.pt", weights_only=True)
        model = build(name)
        if order == "optimizer_before_load":
            optimizer = optimizer_of(model)
            model.load_state_dict(checkpoint["model"])
        else:
            model.load_state_dict(checkpoint["model"])
            optimizer = optimizer_of(model)
        optimizer.load_state_dict(checkpoint["optimizer"])
        losses = train(model, optimizer, data, done, STEPS)
        result = {"losses": losses, "model": model.state_dict()}
        torch.save(result, out / f"resumed_{done}_{order}.pt")


if __name__ == "__main__":
    mode, model_name, out_dir = sys.argv[1:]
    {"straight": straight, "resume": resume}[mode](model_name, Path(out_dir))
