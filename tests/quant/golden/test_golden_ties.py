"""Per-channel percentile activation quantizers on tied inputs, against Brevitas 0.12.

brevitas_0_12_ties.pt is written by generate_ties.py (run by hand with Brevitas installed): three
per-channel runtime-statistics activation quantizers (signed, after a ReLU, shifted with a
percentile zero point) whose per-channel extremes are held by several elements, through three
statistics steps and one learned step. Brevitas sends each statistic's gradient to the element
torch.kthvalue selects; here the same layer, built from brevitas_cpp and started from Brevitas's
initial state_dict, replays every step:

- every IntQuantTensor field of the output: bit for bit;
- the gradients to x and to the learned parameters: within GRAD_RTOL plus the step's summation
  bound (tests/nn/golden/precision.py: SummationBound, assert_grad_close). A statistic's gradient
  sent to another of the tied elements moves two elements of x's gradient by the whole scale
  gradient, far outside it;
- the parameters are then set to Brevitas's, so that each forward is compared exactly.

Runs in both BREVITAS_JIT modes; never imports brevitas.
"""

import importlib.util
import os
from typing import Any, Dict

import pytest
import torch

import brevitas_cpp.nn as qnn
import brevitas_cpp.quant as qquant

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN: Dict[str, Any] = torch.load(os.path.join(HERE, "brevitas_0_12_ties.pt"))
CASES: Dict[str, Dict[str, Any]] = GOLDEN["cases"]
GRAD_RTOL = 1e-6


def _load_precision():
    # pytest runs with --import-mode=importlib: the nn golden helpers are loaded by path.
    path = os.path.join(HERE, os.pardir, os.pardir, "nn", "golden", "precision.py")
    spec = importlib.util.spec_from_file_location("nn_golden_precision_ties", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pr = _load_precision()


def test_golden_file_is_from_brevitas_0_12() -> None:
    assert GOLDEN["brevitas_version"].startswith("0.12")
    assert sorted(CASES) == sorted(
        [
            "Int8ActPerChannel_QuantIdentity",
            "Uint8ActPerChannel_QuantReLU",
            "ShiftedUint8ActPerChannel_QuantIdentity",
        ]
    )


def test_recorded_inputs_tie() -> None:
    """The recording tests what it claims: on every statistics step some channel's largest |x|
    is held by several elements (and on step 2 every channel's)."""
    for name, rec in CASES.items():
        for index, step in enumerate(rec["steps"][:3]):
            x = step["x"].transpose(0, 1).reshape(step["x"].shape[1], -1).abs()
            held = (x == x.max(dim=1, keepdim=True)[0]).sum(dim=1)
            assert int((held > 1).sum()) >= (3 if index == 2 else 1), (name, index)


def build(spec: Dict[str, Any]) -> torch.nn.Module:
    quant = getattr(qquant, spec["quant"]).let(**spec["let"])
    return getattr(qnn, spec["layer"])(act_quant=quant, return_quant_tensor=True)


@pytest.mark.parametrize("name", sorted(CASES))
def test_against_brevitas(name: str) -> None:
    rec = CASES[name]
    layer = build(rec["spec"])
    layer.load_state_dict(rec["init_state"])
    layer.train()
    params = dict(layer.named_parameters())
    for index, step in enumerate(rec["steps"]):
        what = f"{name} step {index}"
        x = step["x"].clone().requires_grad_(True)
        out = layer(x)
        assert list(out._fields) == list(step["out_fields"]), what
        for field, want in step["out_fields"].items():
            got = getattr(out, field)
            if isinstance(want, torch.Tensor):
                assert got.dtype == want.dtype and got.shape == want.shape, f"{what} {field}"
                assert torch.equal(got.detach(), want), f"{what} {field}"
            else:
                assert bool(got) == bool(want), f"{what} {field}"
        with pr.SummationBound() as summation:
            (out.value * step["g"]).sum().backward()
        bound = summation.take()
        pr.assert_grad_close(x.grad, step["x_grad"], f"{what} d loss / d x", bound, GRAD_RTOL)
        for key, want in step["grads"].items():
            pr.assert_grad_close(
                params[key].grad, want, f"{what} d loss / d {key}", bound, GRAD_RTOL
            )
        with torch.no_grad():
            for key, p in params.items():
                p.copy_(step["params_after"][key])
                p.grad = None
