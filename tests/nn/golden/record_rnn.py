"""Record Brevitas 0.12's QuantRNN / QuantLSTM numbers for tests/nn/test_quant_rnn.py.

Run by hand, in the environment scripts/make_brevitas_env.sh builds, with BREVITAS_JIT unset:

    bash scripts/make_brevitas_env.sh /tmp/brevenv
    /tmp/brevenv/bin/python tests/nn/golden/record_rnn.py

It writes brevitas_0_12_rnn.pt next to this file. The cases are defined in rnn_cases.py. For each
case, in float32 on one thread:
  - the state_dict right after seeded construction;
  - STEPS training steps: the input (and initial states), every output (every QuantTensor
    field), the upstream gradients g of the loss sum(output * g), the gradients to the input and
    to every parameter, and the parameters after an SGD step;
  - the eval-mode outputs after training, on a fixed input;
  - the state_dict of the plain torch twin (nn.RNN / nn.LSTM) loaded with strict=False into a
    fresh quant layer: the reported keys, the state_dict after the load and the eval outputs.
"""

import os
import sys
from typing import Any, Dict, List

import brevitas.nn as bnn
import brevitas.quant as bquant
import torch
from brevitas.quant_tensor import QuantTensor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import rnn_cases as rc  # noqa: E402

OUT_FILE = os.path.join(HERE, "brevitas_0_12_rnn.pt")
SEED = 2024
DATA_SEED = 7
FLOAT_SEED = 99

# torch 2.13 has dropped named tensors; Brevitas 0.12 still calls Tensor.rename(None) on inputs
# (see generate.py): the stand-in returns the unnamed tensor unchanged.
if not hasattr(torch.Tensor, "rename"):

    def _rename_none(self, *names, **rename_map):
        if names != (None,) or rename_map:
            raise NotImplementedError("named tensors are not available in this torch")
        return self

    torch.Tensor.rename = _rename_none


def flatten(out: Any, prefix: str = "out") -> Dict[str, Any]:
    """A layer's (out, h) / (out, (h, c)) as name -> tensor; a QuantTensor as its fields."""
    flat: Dict[str, Any] = {}
    if isinstance(out, QuantTensor):
        flat[prefix] = out.value.detach().clone()
        flat[prefix + ".scale"] = out.scale.detach().clone()
        flat[prefix + ".zero_point"] = out.zero_point.detach().clone()
        flat[prefix + ".bit_width"] = out.bit_width.detach().clone()
    elif isinstance(out, torch.Tensor):
        flat[prefix] = out.detach().clone()
    else:
        for i, item in enumerate(out):
            flat.update(flatten(item, f"{prefix}.{i}"))
    return flat


def values(out: Any) -> List[torch.Tensor]:
    if isinstance(out, QuantTensor):
        return [out.value]
    if isinstance(out, torch.Tensor):
        return [out]
    return [v for item in out for v in values(item)]


def run_layer(model, x, states):
    return model(x, *states)


def record_case(name: str) -> Dict[str, Any]:
    torch.manual_seed(SEED)
    model = rc.build(bnn, bquant, name)
    rec: Dict[str, Any] = {"init_state": {k: v.clone() for k, v in model.state_dict().items()}}
    gen = torch.Generator().manual_seed(DATA_SEED)
    with_state = rc.CASES[name]["with_state"]
    n_states = 2 if rc.CASES[name]["cls"] == "QuantLSTM" else 1
    model.train()
    steps = []
    for _ in range(rc.STEPS):
        x = torch.randn(rc.input_shape(name), generator=gen).requires_grad_(True)
        states = (
            [torch.randn(rc.state_shape(name), generator=gen) for _ in range(n_states)]
            if with_state
            else []
        )
        out = run_layer(model, x, states)
        outs = values(out)
        gs = [torch.randn(o.shape, generator=gen) for o in outs]
        loss = sum((o * g).sum() for o, g in zip(outs, gs))
        loss.backward()
        step = {
            "x": x.detach().clone(),
            "states": [s.clone() for s in states],
            "out": flatten(out),
            "g": gs,
            "x_grad": x.grad.clone(),
            "grads": {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None},
            "params": [n for n, _ in model.named_parameters()],
        }
        with torch.no_grad():
            for n, p in model.named_parameters():
                if p.grad is not None:
                    p -= rc.lr_of(n) * p.grad
                    p.grad = None
        step["params_after"] = {n: p.detach().clone() for n, p in model.named_parameters()}
        steps.append(step)
    rec["steps"] = steps
    model.eval()
    x_eval = torch.randn(rc.input_shape(name), generator=gen)
    rec["x_eval"] = x_eval
    with torch.no_grad():
        rec["eval_out"] = flatten(model(x_eval))
    rec["trained_state"] = {k: v.clone() for k, v in model.state_dict().items()}

    torch.manual_seed(FLOAT_SEED)
    float_sd = rc.float_twin(name).state_dict()
    torch.manual_seed(SEED)
    fresh = rc.build(bnn, bquant, name)
    report = fresh.load_state_dict({k: v.clone() for k, v in float_sd.items()}, strict=False)
    fresh.eval()
    with torch.no_grad():
        float_out = flatten(fresh(x_eval))
    rec["float"] = {
        "state_dict": float_sd,
        "missing": list(report.missing_keys),
        "unexpected": list(report.unexpected_keys),
        "loaded_state": {k: v.clone() for k, v in fresh.state_dict().items()},
        "eval_out": float_out,
    }
    return rec


def main() -> None:
    assert "BREVITAS_JIT" not in os.environ, "record with BREVITAS_JIT unset"
    torch.set_num_threads(1)
    import brevitas

    out = {
        "brevitas": brevitas.__version__,
        "torch": str(torch.__version__),
        "cases": {name: record_case(name) for name in rc.CASES},
    }
    torch.save(out, OUT_FILE)
    print(f"wrote {OUT_FILE} ({os.path.getsize(OUT_FILE)} bytes)")


if __name__ == "__main__":
    main()
