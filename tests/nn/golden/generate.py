"""Record training runs of small Brevitas 0.12 models as golden numbers for test_golden_models.py.

Run by hand, from anywhere, in the environment scripts/make_brevitas_env.sh builds (Brevitas
0.12.1 beside torch 2.13), with BREVITAS_JIT unset:

    bash scripts/make_brevitas_env.sh /tmp/brevenv
    /tmp/brevenv/bin/python tests/nn/golden/generate.py

It writes brevitas_0_12_models.pt next to this file. Besides tests/quant/golden/generate.py this is
the only file of the project that imports brevitas; the test reads the recording with plain torch.
The models themselves are defined once, in golden_models.py, for both libraries.

For every model of golden_models.MODELS and for float32 and float64 it records:
  - the state_dict right after construction (seeded) and the keys missing / unexpected when that
    state_dict is loaded back into the same model (strict=False): the replay starts from the same
    load, so both sides run the state-dict reinitialisation of the quantizers identically;
  - eval-mode outputs of the fresh model on two fixed inputs;
  - STEPS training steps: input, output (every QuantTensor field), upstream gradient g of the loss
    sum(out.value * g), gradients to the input and to every parameter, the float32 summation bound
    of the step (see summation_bound), the parameters and the state_dict after one SGD step;
  - eval outputs after training, and of a fresh model loaded with the trained state_dict;
  - a float checkpoint (the state_dict of the plain-torch twin, seeded differently) loaded into a
    fresh quant model with strict=False: missing / unexpected keys, the state_dict after the load
    and the eval outputs.
A float64 run builds the model in float32 exactly as the float32 run does, loads the same initial
state, then converts it with .to(torch.float64) (what .double() does) and feeds float64 inputs.
"""

import os
from typing import Any, Dict, List, Optional

import brevitas
import brevitas.inject.enum as benum
import brevitas.nn as bnn
import brevitas.quant as bquant
import golden_models as gm
import torch
from brevitas.proxy.quant_proxy import QuantProxyFromInjector
from brevitas.quant_tensor import IntQuantTensor, QuantTensor

OUT_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "brevitas_0_12_models.pt")
SEED = 2024  # module initialisation
DATA_SEED = 7  # inputs and upstream gradients
FLOAT_SEED = 99  # the plain-torch twin whose state_dict is the float checkpoint
STEPS = 6
LAYER_LR = 0.02  # SGD on the layers' own weights, biases and embeddings
QUANT_LR = 0.005  # SGD on the quantizers' learned scales and bit widths
EPS32 = torch.finfo(torch.float32).eps
LIB = gm.Lib(nn=bnn, quant=bquant, enum=benum)

# torch 2.13 has dropped named tensors, but Brevitas 0.12's QuantLayerMixin.unpack_input still
# strips names from every layer input with Tensor.rename(None). For an unnamed tensor that call
# returns the tensor itself, which is all this stand-in does (it refuses any real renaming).
if not hasattr(torch.Tensor, "rename"):

    def _rename_none(self: torch.Tensor, *names: Any, **rename_map: Any) -> torch.Tensor:
        if names != (None,) or rename_map:
            raise NotImplementedError("named tensors are not available in this torch")
        return self

    torch.Tensor.rename = _rename_none

# Brevitas 0.12's QuantCat.forward calls QuantTensor.cat, which only its subclasses define, so
# QuantCat always fails with AttributeError. The recording uses what the call evidently means and
# what torch.cat of IntQuantTensors already does in Brevitas: IntQuantTensor.cat.
if not hasattr(QuantTensor, "cat"):
    QuantTensor.cat = staticmethod(IntQuantTensor.cat)


def snap(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    # clone: torch.save would otherwise store the whole storage behind a view
    return None if t is None else t.detach().clone()


def state_of(model: torch.nn.Module) -> Dict[str, torch.Tensor]:
    return {k: snap(v) for k, v in model.state_dict().items()}


def unpack(out: Any) -> Dict[str, Any]:
    """A model output as plain data: every field of a QuantTensor, or just the value."""
    if isinstance(out, QuantTensor):
        return {
            "value": snap(out.value),
            "scale": snap(out.scale),
            "zero_point": snap(out.zero_point),
            "bit_width": snap(out.bit_width),
            "signed": bool(out.signed),
            "training": bool(out.training),
        }
    return {"value": snap(out)}


def value_of(out: Any) -> torch.Tensor:
    return out.value if isinstance(out, QuantTensor) else out


def load_report(result) -> Dict[str, List[str]]:
    return {"missing": sorted(result.missing_keys), "unexpected": sorted(result.unexpected_keys)}


def is_quantizer_param(name: str) -> bool:
    """Learned tensors of the quantizers (scales, bit widths) live under a *_quant proxy."""
    return any(part.endswith("_quant") for part in name.split("."))


class QuantizerCalls:
    """Collects, for every quantizer call of a forward, its output value, scale and the upstream
    gradient reaching that output, to compute the step's float32 summation bound."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.calls: List[Dict[str, Any]] = []
        self.handles = [
            m.register_forward_hook(self.hook)
            for m in model.modules()
            if isinstance(m, QuantProxyFromInjector)
        ]

    def hook(self, module, args, out) -> None:
        if not isinstance(out, QuantTensor) or not out.value.requires_grad:
            return
        call = {"value": out.value.detach(), "scale": out.scale.detach(), "g": None}

        def keep_grad(grad: torch.Tensor) -> None:
            call["g"] = grad.detach() if call["g"] is None else call["g"] + grad.detach()

        out.value.register_hook(keep_grad)
        self.calls.append(call)

    def summation_bound(self) -> float:
        """The quantizer-level golden bound eps32 * sum|g| * max(1, max|value / scale|), summed
        over every quantizer call of the step: what reordering the sums inside the fused
        quantizer ops can move the gradients by, before it propagates through the layers."""
        total = 0.0
        for call in self.calls:
            if call["g"] is None:
                continue
            q_max = (
                float((call["value"] / call["scale"]).abs().max()) if call["value"].numel() else 1.0
            )
            total += EPS32 * float(call["g"].abs().sum()) * max(1.0, q_max)
        self.calls = []
        return total

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def build(name: str, dtype: torch.dtype):
    """The quant model as both sides build it: seeded construction in float32, its own initial
    state_dict loaded back (strict=False), then the conversion to dtype."""
    torch.manual_seed(SEED)
    model = gm.MODELS[name].quant(LIB)
    init_state = state_of(model)
    report = load_report(model.load_state_dict(init_state, strict=False))
    model.to(dtype)
    model.train()
    return model, init_state, report


def eval_outputs(model: torch.nn.Module, inputs: List[torch.Tensor]) -> List[Dict[str, Any]]:
    model.eval()
    with torch.no_grad():
        outs = [unpack(model(x)) for x in inputs]
    model.train()
    return outs


def record_model(name: str, dtype: torch.dtype) -> Dict[str, Any]:
    spec = gm.MODELS[name]
    gen = torch.Generator().manual_seed(DATA_SEED)
    model, init_state, init_load = build(name, dtype)
    record: Dict[str, Any] = {
        "name": name,
        "dtype": str(dtype).replace("torch.", ""),
        "init_state": init_state,  # float32, as loaded before the conversion
        "init_load": init_load,
        "state_keys": list(model.state_dict().keys()),
        "param_names": [n for n, _ in model.named_parameters()],
        "lr": {"layer": LAYER_LR, "quant": QUANT_LR},
    }
    record["converted_state"] = state_of(model)  # init_state after the conversion to dtype
    eval_inputs = [spec.make_input(gen, dtype) for _ in range(2)]
    record["eval_inputs"] = eval_inputs
    record["fresh_eval"] = eval_outputs(model, eval_inputs)

    named = list(model.named_parameters())
    opt = torch.optim.SGD(
        [
            {"params": [p for n, p in named if not is_quantizer_param(n)], "lr": LAYER_LR},
            {"params": [p for n, p in named if is_quantizer_param(n)], "lr": QUANT_LR},
        ]
    )
    calls = QuantizerCalls(model)
    steps = []
    for _ in range(STEPS):
        x = spec.make_input(gen, dtype)
        if x.is_floating_point():
            x.requires_grad_()
        out = model(x)
        g = torch.randn(value_of(out).shape, generator=gen, dtype=torch.float64).to(dtype)
        (value_of(out) * g).sum().backward()
        step = {
            "x": snap(x),
            "out": unpack(out),
            "g": g,
            "grad_x": snap(x.grad) if x.is_floating_point() else None,
            "grads": {n: snap(p.grad) for n, p in named},
            "bound": calls.summation_bound(),
        }
        opt.step()
        opt.zero_grad(set_to_none=True)
        step["params"] = {n: snap(p) for n, p in named}
        step["state"] = state_of(model)
        steps.append(step)
    calls.remove()
    record["steps"] = steps
    record["final_eval"] = eval_outputs(model, eval_inputs)
    record["final_state"] = state_of(model)

    reloaded, _, _ = build(name, dtype)
    record["reload_load"] = load_report(reloaded.load_state_dict(model.state_dict(), strict=False))
    record["reload_eval"] = eval_outputs(reloaded, eval_inputs)

    torch.manual_seed(FLOAT_SEED)
    float_state = state_of(spec.float())
    quant_model, _, _ = build(name, torch.float32)
    report = load_report(quant_model.load_state_dict(float_state, strict=False))
    quant_model.to(dtype)
    record["float_ckpt"] = {
        "state": float_state,
        "load": report,
        "state_after": state_of(quant_model),
        "eval": eval_outputs(quant_model, eval_inputs),
    }
    return record


def main() -> None:
    torch.set_default_dtype(torch.float32)
    # One thread, as the replay runs: the recorded numbers do not depend on how a kernel splits work.
    torch.set_num_threads(1)
    golden = {
        "brevitas": brevitas.__version__,
        "torch": str(torch.__version__),
        "seed": SEED,
        "steps": STEPS,
        "float32": {},
        "float64": {},
    }
    for dtype in (torch.float32, torch.float64):
        key = str(dtype).replace("torch.", "")
        for name in gm.MODELS:
            golden[key][name] = record_model(name, dtype)
            print("recorded", key, name)
    torch.save(golden, OUT_FILE)
    print(f"wrote {OUT_FILE}: {os.path.getsize(OUT_FILE)} bytes")


if __name__ == "__main__":
    main()
