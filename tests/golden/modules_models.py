"""The model and optimizer cases recorded from Brevitas 0.12 by generate_modules.py and replayed
on brevitas_cpp by tests/test_loss.py and tests/test_optim.py. Shared so both sides build the
same thing; this file imports neither library (the library is passed in)."""

from typing import Any, Dict, List, NamedTuple

import torch
from torch import nn


class Lib(NamedTuple):
    nn: Any  # brevitas.nn or brevitas_cpp.nn
    enum: Any  # brevitas.inject.enum or brevitas_cpp.inject.enum


class BitWidthNet(nn.Module):
    """Learned bit widths on two activations (QuantIdentity, QuantReLU) and two weights, constant
    ones elsewhere, quant layers returning QuantTensors (hooked by the by-ops loss) or not."""

    def __init__(self, lib: Lib) -> None:
        super().__init__()
        qnn, learned = lib.nn, lib.enum.BitWidthImplType.PARAMETER
        self.inp = qnn.QuantIdentity(
            bit_width=6, bit_width_impl_type=learned, return_quant_tensor=True
        )
        self.conv = qnn.QuantConv2d(
            3,
            4,
            3,
            bias=False,
            weight_bit_width=5,
            weight_bit_width_impl_type=learned,
            return_quant_tensor=True,
        )
        self.relu = qnn.QuantReLU(
            bit_width=4, bit_width_impl_type=learned, return_quant_tensor=True
        )
        self.conv2 = qnn.QuantConv2d(4, 4, 1, bias=False, return_quant_tensor=True)
        self.fc = qnn.QuantLinear(
            4 * 4 * 4,
            5,
            bias=False,
            weight_bit_width=7,
            weight_bit_width_impl_type=learned,
            return_quant_tensor=True,
        )
        self.fc2 = qnn.QuantLinear(5, 3, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.conv(self.inp(x)))
        return self.fc2(self.fc(self.conv2(y).flatten(1)))


LOSS_INPUT_SHAPE = (2, 3, 6, 6)
LOSS_NAMES = [
    "WeightBitWidthWeightedBySize",
    "ActivationBitWidthWeightedBySize",
    "QuantLayerOutputBitWidthWeightedByOps",
]

# ---- optimizers: parameter shapes, and the hyper-parameters of each case -----------------------

PARAM_SHAPES = {
    "wide": (4, 6),  # p <= n: a Stiefel step
    "conv": (3, 2, 2, 2),  # p = 3, n = 8: a Stiefel step on the flattened rows
    "tall": (6, 2),  # p > n: always a plain SGD step
    "vector": (5,),  # p = 5, n = 1: a plain SGD step
}
OPTIM_STEPS = 3

# Each case: optimizer name and its param groups (names of PARAM_SHAPES, and keywords).
OPTIM_CASES: Dict[str, Dict[str, Any]] = {
    "sign_default": dict(opt="SignSGD", groups=[dict(params=list(PARAM_SHAPES), kw={})]),
    "sign_momentum_wd": dict(
        opt="SignSGD",
        groups=[dict(params=list(PARAM_SHAPES), kw=dict(lr=0.01, momentum=0.9, weight_decay=0.01))],
    ),
    "sign_nesterov": dict(
        opt="SignSGD",
        groups=[dict(params=list(PARAM_SHAPES), kw=dict(lr=0.02, momentum=0.8, nesterov=True))],
    ),
    "sign_dampening_maximize": dict(
        opt="SignSGD",
        groups=[
            dict(params=["wide", "conv"], kw=dict(lr=0.05, momentum=0.5, dampening=0.3)),
            dict(params=["tall", "vector"], kw=dict(lr=0.03, maximize=True, weight_decay=0.2)),
        ],
    ),
    # Stiefel steps (alpha = lr), then the tall matrix's SGD step with the momentum and the
    # weight decay carried over from the Stiefel steps.
    "cayley_stiefel": dict(
        opt="CaileySGD",
        groups=[
            dict(
                params=["wide", "conv", "tall"],
                kw=dict(lr=0.05, momentum=0.9, weight_decay=0.01, stiefel=True),
            )
        ],
    ),
    # A large lr: alpha = 1 / ||W||_1 instead.
    "cayley_large_lr": dict(
        opt="CaileySGD", groups=[dict(params=["wide", "conv"], kw=dict(lr=10.0, stiefel=True))]
    ),
    # Plain SGD only: Brevitas never applies its weight decay here.
    "cayley_sgd_only": dict(
        opt="CaileySGD",
        groups=[dict(params=list(PARAM_SHAPES), kw=dict(lr=0.05, weight_decay=0.1))],
    ),
    # A Stiefel group, then an SGD group with momentum: dampening, nesterov and weight decay of
    # the SGD steps come from the Stiefel group.
    "cayley_mixed_groups": dict(
        opt="CaileySGD",
        groups=[
            dict(params=["wide"], kw=dict(lr=0.1, weight_decay=0.05, dampening=0.25, stiefel=True)),
            dict(params=["vector", "conv"], kw=dict(lr=0.02, momentum=0.5, dampening=0.0)),
        ],
    ),
}


def optim_params(seed: int) -> Dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {name: torch.randn(shape, generator=gen) for name, shape in PARAM_SHAPES.items()}


def optim_grads(seed: int, steps: int) -> List[Dict[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed + 1)
    return [
        {name: torch.randn(shape, generator=gen) for name, shape in PARAM_SHAPES.items()}
        for _ in range(steps)
    ]


# ---- learned rounding: implementation name and keywords --------------------------------------

LEARNED_ROUND_CASES = {
    "hard_sigmoid": ("LearnedRoundHardSigmoid", {}),
    "hard_sigmoid_stretched": (
        "LearnedRoundHardSigmoid",
        dict(learned_round_zeta=1.2, learned_round_gamma=-0.2),
    ),
    "sigmoid": ("LearnedRoundSigmoid", {}),
    "sigmoid_t05": ("LearnedRoundSigmoid", dict(learned_round_temperature=0.5)),
    "identity": ("LearnedRoundIdentity", {}),
}
