"""Record Brevitas 0.12's MX and groupwise quantizers as golden numbers for test_golden_groupwise.py.

Run by hand, from anywhere, in the environment scripts/make_brevitas_env.sh builds (Brevitas
0.12.1 beside torch 2.13), with BREVITAS_JIT unset:

    bash scripts/make_brevitas_env.sh /tmp/brevenv
    env -u BREVITAS_JIT /tmp/brevenv/bin/python tests/quant/golden/generate_groupwise.py

It writes brevitas_0_12_groupwise.pt next to this file; the test reads it with plain torch and
never imports brevitas.

The cases: every quantizer class of brevitas.quant.experimental.mx_quant_ocp,
ShiftedUint8WeightGroupQuantFloat (which ships without a group size: recorded with
let(group_size=16)) and ShiftedUint8WeightPerGroupFloatHQO (a zero point per group of 32 found by
half-quadratic optimization), driven through layers as users drive them:
  - a weight quantizer in QuantLinear(40, 3) (40 input features: one whole group of 32 and one
    padded group), in QuantConv2d(64, 4, 3) (two whole groups) and, for the integer ones, in
    QuantConvTranspose2d(40, 4, 3) (groups along the weight's dim 0);
  - an activation quantizer as input_quant of QuantLinear(40, 3, weight_quant=MXInt8Weight) on
    a (2, 5, 40) input, of QuantConv2d(40, 4, 3, weight_quant=MXInt8Weight) on (2, 40, 5, 5),
    and in QuantIdentity(act_quant=<q>.let(group_dim=-1), return_quant_tensor=True) on (3, 40).

Each runs WEIGHT_STEPS training steps: forward, loss = sum(out * g) for a random g, backward, one
SGD step on the layer's weight and bias. Recorded per step: the input, the quantizer outputs as
every field of Brevitas's Groupwise*QuantTensor (the weight's after the backward, the input's by
a forward hook), the layer output, g, the input and parameter gradients and the parameters after
the step; then the eval output of the trained layer. Inputs and weights are scaled group by group
by powers of two from 2^-6 to 2^6, so the groups' shared scales differ.

Every case is recorded in float32 and, from the same float32 start converted with .double(), in
float64 (*_float64).
"""

import os
from typing import Any, Dict, List, Optional

import brevitas
import brevitas.nn as bnn
import brevitas.quant.experimental.mx_quant_ocp as bmx
import brevitas.quant.shifted_scaled_int as bshifted
import torch

OUT_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "brevitas_0_12_groupwise.pt")
SEED = 2026
DATA_SEED = 13
LR = 0.01
WEIGHT_STEPS = 3

# Brevitas 0.12 strips names from layer inputs with Tensor.rename(None), which torch 2.13 no
# longer has; for an unnamed tensor that call is the identity.
if not hasattr(torch.Tensor, "rename"):

    def _rename_none(self: torch.Tensor, *names: Any, **rename_map: Any) -> torch.Tensor:
        if names != (None,) or rename_map:
            raise NotImplementedError("only rename(None) is stood in for")
        return self

    torch.Tensor.rename = _rename_none

WEIGHT_QUANTS = [
    ("mx_quant_ocp", "MXInt8Weight", {}),
    ("mx_quant_ocp", "ShiftedMXUInt8Weight", {}),
    ("mx_quant_ocp", "MXFloat8e4m3Weight", {}),
    ("mx_quant_ocp", "MXInt8WeightMSE", {}),
    ("mx_quant_ocp", "ShiftedMXUInt8WeightMSE", {}),
    ("mx_quant_ocp", "MXFloat8e4m3WeightMSE", {}),
    ("shifted_scaled_int", "ShiftedUint8WeightGroupQuantFloat", {"group_size": 16}),
    ("shifted_scaled_int", "ShiftedUint8WeightPerGroupFloatHQO", {}),
]
ACT_QUANTS = [("mx_quant_ocp", "MXInt8Act", {}), ("mx_quant_ocp", "MXFloat8e4m3Act", {})]
MODULES = {"mx_quant_ocp": bmx, "shifted_scaled_int": bshifted}
INT_CLASSES = {"MXInt8Weight", "ShiftedMXUInt8Weight", "MXInt8WeightMSE", "ShiftedMXUInt8WeightMSE"}


def quantizer(ref: Dict[str, Any]):
    q = getattr(MODULES[ref["module"]], ref["name"])
    return q.let(**ref["let"]) if ref["let"] else q


def qref(module: str, name: str, let: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    return {"module": module, "name": name, "let": dict(let or {})}


def build(spec: Dict[str, Any]) -> torch.nn.Module:
    kwargs = dict(spec["kwargs"])
    for key, ref in spec["quants"].items():
        kwargs[key] = quantizer(ref)
    return getattr(bnn, spec["layer"])(*spec["args"], **kwargs)


def all_specs() -> List[Dict[str, Any]]:
    specs = []
    for module, name, let in WEIGHT_QUANTS:
        q = qref(module, name, let)
        layers = [("QuantLinear", (40, 3), (2, 40)), ("QuantConv2d", (64, 4, 3), (2, 64, 5, 5))]
        if name in INT_CLASSES:
            layers.append(("QuantConvTranspose2d", (40, 4, 3), (2, 40, 4, 4)))
        for layer, args, x_shape in layers:
            specs.append(
                {
                    "name": f"{name}_{layer}",
                    "layer": layer,
                    "args": args,
                    "kwargs": {"bias": True},
                    "quants": {"weight_quant": q},
                    "x_shape": x_shape,
                    "group_dim_x": None,
                }
            )
    mx_weight = qref("mx_quant_ocp", "MXInt8Weight")
    for module, name, let in ACT_QUANTS:
        q = qref(module, name, let)
        specs.append(
            {
                "name": f"{name}_QuantLinear",
                "layer": "QuantLinear",
                "args": (40, 3),
                "kwargs": {"bias": True},
                "quants": {"weight_quant": mx_weight, "input_quant": q},
                "x_shape": (2, 5, 40),
                "group_dim_x": -1,
            }
        )
        specs.append(
            {
                "name": f"{name}_QuantConv2d",
                "layer": "QuantConv2d",
                "args": (40, 4, 3),
                "kwargs": {"bias": True},
                "quants": {"weight_quant": mx_weight, "input_quant": q},
                "x_shape": (2, 40, 5, 5),
                "group_dim_x": 1,
            }
        )
        specs.append(
            {
                "name": f"{name}_QuantIdentity",
                "layer": "QuantIdentity",
                "args": (),
                "kwargs": {"return_quant_tensor": True},
                "quants": {"act_quant": qref(module, name, {**let, "group_dim": -1})},
                "x_shape": (3, 40),
                "group_dim_x": -1,
            }
        )
    return specs


def scaled_by_group(t: torch.Tensor, dim: int, group: int, gen: torch.Generator) -> torch.Tensor:
    """t with each run of `group` elements along dim multiplied by its own power of two."""
    dim = dim % t.dim()
    n = (t.shape[dim] + group - 1) // group
    exps = torch.randint(-6, 7, (n,), generator=gen).to(t.dtype)
    factors = torch.pow(2.0, exps).repeat_interleave(group)[: t.shape[dim]]
    view = [1] * t.dim()
    view[dim] = -1
    return t * factors.view(view)


def qt_fields(qt: Any) -> Dict[str, Any]:
    fields = {}
    for name in qt._fields:
        field = getattr(qt, name)
        if isinstance(field, torch.Tensor):
            field = field.detach().clone()
        elif isinstance(field, torch.Size):
            field = tuple(field)
        fields[name] = field
    return fields


def record(spec: Dict[str, Any], dtype: torch.dtype) -> Dict[str, Any]:
    torch.manual_seed(SEED)
    layer = build(spec)
    gen = torch.Generator().manual_seed(DATA_SEED)
    if hasattr(layer, "weight") and layer.weight is not None:
        with torch.no_grad():
            layer.weight.copy_(scaled_by_group(layer.weight, layer.weight_quant.group_dim, 32, gen))
    layer = layer.to(dtype)
    init_state = {k: v.detach().clone() for k, v in layer.state_dict().items()}
    seen: Dict[str, Any] = {}
    if "input_quant" in spec["quants"]:
        layer.input_quant.register_forward_hook(
            lambda m, i, o: seen.__setitem__("input", qt_fields(o))
        )
    params = dict(layer.named_parameters())
    steps = []
    layer.train()
    for _ in range(WEIGHT_STEPS):
        x = torch.randn(spec["x_shape"], generator=gen, dtype=torch.float32)
        if spec["group_dim_x"] is not None:
            x = scaled_by_group(x, spec["group_dim_x"], 32, gen)
        x = x.to(dtype).requires_grad_(True)
        out = layer(x)
        value = out.value if hasattr(out, "value_") else out
        g = torch.randn(value.shape, generator=gen, dtype=torch.float32).to(dtype)
        (value * g).sum().backward()
        step = {
            "x": x.detach().clone(),
            "g": g,
            "out": value.detach().clone(),
            "x_grad": x.grad.detach().clone(),
            "grads": {n: p.grad.detach().clone() for n, p in params.items()},
        }
        if hasattr(out, "value_"):
            step["out_fields"] = qt_fields(out)
        if "input" in seen:
            step["input_fields"] = seen.pop("input")
        if "weight_quant" in spec["quants"]:
            step["weight_fields"] = qt_fields(layer.quant_weight())
        with torch.no_grad():
            for p in params.values():
                p -= LR * p.grad
                p.grad = None
        step["params_after"] = {n: p.detach().clone() for n, p in params.items()}
        steps.append(step)
    layer.eval()
    with torch.no_grad():
        x_eval = torch.randn(spec["x_shape"], generator=gen, dtype=torch.float32).to(dtype)
        out = layer(x_eval)
        eval_out = (out.value if hasattr(out, "value_") else out).clone()
    return {
        "spec": spec,
        "init_state": init_state,
        "steps": steps,
        "x_eval": x_eval,
        "eval_out": eval_out,
    }


def main() -> None:
    cases, failures = {}, {}
    for spec in all_specs():
        for dtype, suffix in ((torch.float32, ""), (torch.float64, "_float64")):
            name = spec["name"] + suffix
            try:
                cases[name] = record(spec, dtype)
                print("recorded", name)
            except Exception as error:  # Brevitas refusing a case is recorded, not hidden
                failures[name] = f"{type(error).__name__}: {error}"
                print("BREVITAS FAILS", name, failures[name])
    torch.save(
        {
            "brevitas_version": brevitas.__version__,
            "torch_version": str(torch.__version__),
            "seed": SEED,
            "lr": LR,
            "cases": cases,
            "brevitas_failures": failures,
        },
        OUT_FILE,
    )
    print(f"wrote {len(cases)} cases, {len(failures)} Brevitas failures to {OUT_FILE}")


if __name__ == "__main__":
    main()
