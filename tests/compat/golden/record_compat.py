"""Record Brevitas 0.12.1's numbers for the names tests/compat checks against Brevitas:
HadamardClassifier (forward and gradients) and StochasticRoundSte (the draws of a seeded
generator).

Run by hand in the environment scripts/make_brevitas_env.sh builds, plus scipy (Brevitas's
HadamardClassifier builds its matrix with scipy.linalg.hadamard), with BREVITAS_JIT unset:

    bash scripts/make_brevitas_env.sh /tmp/brevenv && /tmp/brevenv/bin/pip install scipy
    /tmp/brevenv/bin/python tests/compat/golden/record_compat.py

It writes brevitas_0_12_compat.pt next to this file; the tests read it with plain torch.

HadamardClassifier runs in Brevitas 0.12.1 only on an IntQuantTensor input with
return_quant_tensor=True (a plain input has no .value there, and return_quant_tensor=False fails
in its zero-point test), so that is what is recorded: for each case the input's fields, the
output's value, scale and bit width, and the gradients of sum(value * g) + sum(scale * h) with
respect to the input value and the classifier's scale, in training and in eval mode.
"""

import os

import torch

# torch 2.13 dropped named tensors; Brevitas 0.12's layers call Tensor.rename(None), which for an
# unnamed tensor returns it (tests/nn/golden/generate.py installs the same stand-in).
if not hasattr(torch.Tensor, "rename"):

    def _rename_none(self, *names, **rename_map):
        if names != (None,) or rename_map:
            raise NotImplementedError("named tensors are not available in this torch")
        return self

    torch.Tensor.rename = _rename_none

from brevitas.core.function_wrapper.stochastic_round import StochasticRoundSte  # noqa: E402
from brevitas.nn import HadamardClassifier  # noqa: E402
from brevitas.quant_tensor import IntQuantTensor  # noqa: E402

OUT_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "brevitas_0_12_compat.pt")

# (in_channels, out_channels, fixed_scale, batch, input bit width, signed input)
HADAMARD_CASES = [
    (5, 3, False, 2, 8, True),
    (16, 10, False, 4, 4, False),
    (12, 20, True, 3, 6, True),
]


def record_hadamard(case, training):
    in_channels, out_channels, fixed_scale, batch, bit_width, signed = case
    torch.manual_seed(11 + in_channels)
    layer = HadamardClassifier(in_channels, out_channels, fixed_scale, return_quant_tensor=True)
    layer.train(training)
    scale = torch.tensor(0.05)
    low, high = (
        (-(2 ** (bit_width - 1)), 2 ** (bit_width - 1) - 1) if signed else (0, 2**bit_width - 1)
    )
    ints = torch.randint(low, high + 1, (batch, in_channels)).float()
    value = (ints * scale).requires_grad_(True)
    inp = IntQuantTensor(
        value, scale, torch.tensor(0.0), torch.tensor(float(bit_width)), signed, training
    )
    out = layer(inp)
    g = torch.randn(out.value.shape)
    h = torch.randn(out.scale.shape)
    (out.value * g).sum().backward(
        inputs=[value] + ([layer.scale] if not fixed_scale else []), retain_graph=True
    )
    (out.scale * h).sum().backward(inputs=[value] + ([layer.scale] if not fixed_scale else []))
    return {
        "case": case,
        "training": training,
        "value": value.detach(),
        "input_scale": scale,
        "g": g,
        "h": h,
        "out_value": out.value.detach(),
        "out_scale": out.scale.detach(),
        "out_zero_point": out.zero_point.detach(),
        "out_bit_width": out.bit_width.detach(),
        "out_signed": bool(out.signed),
        "grad_value": value.grad.clone(),
        "grad_scale": None if fixed_scale else layer.scale.grad.clone(),
        "state_dict_keys": sorted(layer.state_dict().keys()),
    }


def record_stochastic_round():
    x = torch.linspace(-3.0, 3.0, 61, dtype=torch.float32) + 0.013
    block = StochasticRoundSte(deterministic_inference=True, seed=123)
    draws = [block(x).detach() for _ in range(3)]  # the generator advances between calls
    block.eval()
    return {"x": x, "seed": 123, "train_draws": draws, "eval": block(x).detach()}


def main():
    record = {
        "hadamard": [
            record_hadamard(case, training) for case in HADAMARD_CASES for training in (True, False)
        ],
        "stochastic_round": record_stochastic_round(),
    }
    torch.save(record, OUT_FILE)
    print("wrote", OUT_FILE)


if __name__ == "__main__":
    main()
