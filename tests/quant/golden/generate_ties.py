"""Record Brevitas 0.12's per-channel percentile activation quantizers on inputs whose percentile
is tied, as golden numbers for test_golden_ties.py.

Run by hand, from anywhere, in the environment scripts/make_brevitas_env.sh builds (Brevitas
0.12.1 beside torch 2.13), with BREVITAS_JIT unset:

    bash scripts/make_brevitas_env.sh /tmp/brevenv
    env -u BREVITAS_JIT /tmp/brevenv/bin/python tests/quant/golden/generate_ties.py

It writes brevitas_0_12_ties.pt next to this file; the test reads it with plain torch and never
imports brevitas.

While a runtime-statistics activation quantizer collects statistics, its scale is the batch's
99.999th percentile of |x| per channel (and a shifted one's zero point the 0.001th percentile of
x): torch.kthvalue along the channel's values, whose selected element gets the statistic's
gradient. Where several elements hold that value, the element kthvalue picks decides which one
gets it, so the recorded inputs tie on purpose, channel by channel:
  - channel 0: values on a grid of 1/4 with the largest one planted three times;
  - channel 1: Gaussian values, no tie (the fast path's unique element);
  - channel 2: +m and -m (tied in |x|: the gradient goes through the sign of the one picked),
    and on step 1 the whole channel zero (tied everywhere: a dead ReLU channel);
  - step 2 quantizes every channel to a grid of 1/2 clamped to [-1.5, 1.5], so every
    channel's maximum and minimum tie.
Each case runs STEPS training steps with collect_stats_steps=3 (three statistics steps, then the
learned scale initialised from their average): forward, loss = sum(out.value * g), backward, one
SGD step on the learned parameters. Recorded per step: x, g, every field of the output
IntQuantTensor, the gradients to x and to the parameters, and the parameters after the step.
"""

import os
from typing import Any, Dict, List

import brevitas
import brevitas.nn as bnn
import brevitas.quant as bquant
import torch

OUT_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "brevitas_0_12_ties.pt")
SEED = 2027
DATA_SEED = 17
LR = 0.01
STEPS = 4
X_SHAPE = (4, 3, 6, 6)  # 144 values per channel: enough for the near-end selection (>= 64)

# Brevitas 0.12 strips names from layer inputs with Tensor.rename(None), which torch 2.13 no
# longer has; for an unnamed tensor that call is the identity.
if not hasattr(torch.Tensor, "rename"):

    def _rename_none(self: torch.Tensor, *names: Any, **rename_map: Any) -> torch.Tensor:
        if names != (None,) or rename_map:
            raise NotImplementedError("only rename(None) is stood in for")
        return self

    torch.Tensor.rename = _rename_none

# Per channel over dim 1 of a (N, C, H, W) activation, as Brevitas's docs compose it.
PER_CHANNEL = {
    "scaling_per_output_channel": True,
    "per_channel_broadcastable_shape": (1, X_SHAPE[1], 1, 1),
    "scaling_stats_permute_dims": (1, 0, 2, 3),
    "collect_stats_steps": 3,
}

SPECS: List[Dict[str, Any]] = [
    {
        "name": "Int8ActPerChannel_QuantIdentity",
        "layer": "QuantIdentity",
        "quant": "Int8ActPerTensorFloat",
    },
    {
        "name": "Uint8ActPerChannel_QuantReLU",
        "layer": "QuantReLU",
        "quant": "Uint8ActPerTensorFloat",
    },
    {
        "name": "ShiftedUint8ActPerChannel_QuantIdentity",
        "layer": "QuantIdentity",
        "quant": "ShiftedUint8ActPerTensorFloat",
    },
]
for _spec in SPECS:
    _spec["let"] = dict(PER_CHANNEL)


def build(spec: Dict[str, Any]) -> torch.nn.Module:
    quant = getattr(bquant, spec["quant"]).let(**spec["let"])
    return getattr(bnn, spec["layer"])(act_quant=quant, return_quant_tensor=True)


def tied_input(step: int, gen: torch.Generator) -> torch.Tensor:
    """A (N, C, H, W) input whose per-channel extremes tie as the module docstring lists."""
    x = torch.randn(X_SHAPE, generator=gen)
    channels = x.transpose(0, 1).reshape(X_SHAPE[1], -1)  # a copy: edited, then put back
    grid = torch.round(channels[0] * 4.0) / 4.0
    where = torch.randperm(grid.numel(), generator=gen)[:3]
    grid[where] = grid.max() + 0.25
    channels[0] = grid
    m = float(channels[2].abs().max()) + 0.5
    plus_minus = torch.randperm(channels.shape[1], generator=gen)[:2]
    channels[2, plus_minus[0]], channels[2, plus_minus[1]] = m, -m
    if step == 1:
        channels[2] = 0.0
    if step == 2:  # a saturated quantized activation: many elements at either end
        channels = (torch.round(channels * 2.0) / 2.0).clamp(-1.5, 1.5)
    return channels.reshape(X_SHAPE[1], X_SHAPE[0], *X_SHAPE[2:]).transpose(0, 1).contiguous()


def qt_fields(qt: Any) -> Dict[str, Any]:
    return {
        name: getattr(qt, name).detach().clone()
        if isinstance(getattr(qt, name), torch.Tensor)
        else getattr(qt, name)
        for name in qt._fields
    }


def record(spec: Dict[str, Any]) -> Dict[str, Any]:
    torch.manual_seed(SEED)
    layer = build(spec)
    gen = torch.Generator().manual_seed(DATA_SEED)
    init_state = {k: v.detach().clone() for k, v in layer.state_dict().items()}
    params = dict(layer.named_parameters())
    steps = []
    layer.train()
    for k in range(STEPS):
        x = tied_input(k, gen).requires_grad_(True)
        out = layer(x)
        g = torch.randn(out.value.shape, generator=gen)
        (out.value * g).sum().backward()
        steps.append(
            {
                "x": x.detach().clone(),
                "g": g,
                "out_fields": qt_fields(out),
                "x_grad": x.grad.detach().clone(),
                "grads": {
                    n: None if p.grad is None else p.grad.detach().clone()
                    for n, p in params.items()
                },
            }
        )
        with torch.no_grad():
            for p in params.values():
                if p.grad is not None:
                    p -= LR * p.grad
                    p.grad = None
        steps[-1]["params_after"] = {n: p.detach().clone() for n, p in params.items()}
    return {"spec": spec, "init_state": init_state, "steps": steps}


def main() -> None:
    cases = {}
    for spec in SPECS:
        cases[spec["name"]] = record(spec)
        print("recorded", spec["name"])
    torch.save(
        {
            "brevitas_version": brevitas.__version__,
            "torch_version": str(torch.__version__),
            "seed": SEED,
            "lr": LR,
            "cases": cases,
        },
        OUT_FILE,
    )
    print(f"wrote {len(cases)} cases to {OUT_FILE}")


if __name__ == "__main__":
    main()
