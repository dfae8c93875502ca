"""Record Brevitas 0.12's QuantMultiheadAttention numbers for tests/nn/test_quant_mha.py.

Run by hand, in the environment scripts/make_brevitas_env.sh builds, with BREVITAS_JIT unset:

    /tmp/brevenv/bin/python tests/nn/golden/record_mha.py

It writes brevitas_0_12_mha.pt next to this file, for the QuantMultiheadAttention cases of
mha_cases.py (and its QuantScaledDotProductAttention cases: training steps, eval outputs, the
trained state_dict), in float32 on
one thread: the seeded initial state_dict; STEPS training steps (inputs, masks, the output and
attention weights, every QuantTensor field, the upstream gradients g of sum(output * g), the
gradients to the inputs and every parameter, the parameters after an SGD step); eval outputs on
a fixed input (and, for self-attention, on an unbatched one); an nn.MultiheadAttention
state_dict loaded with strict=False into a fresh layer (reports, state, eval outputs).

Brevitas 0.12's attention names tensor dimensions (Tensor.rename_ / rename), which torch 2.13
no longer has; the stand-ins here return the tensor unchanged (the names are labels only).
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
import mha_cases as mc  # noqa: E402

OUT_FILE = os.path.join(HERE, "brevitas_0_12_mha.pt")
SEED, DATA_SEED, FLOAT_SEED = 2024, 7, 99


def _no_names(self, *names, **rename_map):
    return self


for _method in ("rename", "rename_"):
    if not hasattr(torch.Tensor, _method):
        setattr(torch.Tensor, _method, _no_names)


def flatten(out: Any, prefix: str = "out") -> Dict[str, Any]:
    flat: Dict[str, Any] = {}
    if out is None:
        return flat
    if isinstance(out, QuantTensor):
        for field in ("value", "scale", "zero_point", "bit_width"):
            name = prefix if field == "value" else f"{prefix}.{field}"
            flat[name] = getattr(out, field).detach().clone()
    elif isinstance(out, torch.Tensor):
        flat[prefix] = out.detach().clone()
    else:
        for i, item in enumerate(out):
            flat.update(flatten(item, f"{prefix}.{i}"))
    return flat


def values(out: Any) -> List[torch.Tensor]:
    if out is None:
        return []
    if isinstance(out, QuantTensor):
        return [out.value]
    if isinstance(out, torch.Tensor):
        return [out]
    return [v for item in out for v in values(item)]


def leaves(args):
    """The distinct input tensors, made leaves that require grad (a shared one stays shared)."""
    seen: Dict[int, torch.Tensor] = {}
    out = []
    for a in args:
        if id(a) not in seen:
            seen[id(a)] = a.clone().requires_grad_(True)
        out.append(seen[id(a)])
    return out


def record_case(name: str) -> Dict[str, Any]:
    torch.manual_seed(SEED)
    model = mc.build(bnn, bquant, name)
    rec: Dict[str, Any] = {"init_state": {k: v.clone() for k, v in model.state_dict().items()}}
    gen = torch.Generator().manual_seed(DATA_SEED)
    model.train()
    steps = []
    for _ in range(mc.STEPS):
        data = mc.inputs(name, gen)
        args = leaves(data["args"])
        out = model(*args, **data["kwargs"])
        outs = values(out)
        gs = [torch.randn(o.shape, generator=gen) for o in outs]
        sum((o * g).sum() for o, g in zip(outs, gs)).backward()
        distinct = list({id(a): a for a in args}.values())
        step = {
            "data": data,
            "out": flatten(out),
            "g": gs,
            "input_grads": [a.grad.clone() for a in distinct],
            "grads": {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None},
            "params": [n for n, _ in model.named_parameters()],
        }
        with torch.no_grad():
            for n, p in model.named_parameters():
                if p.grad is not None:
                    p -= mc.lr_of(n) * p.grad
                    p.grad = None
        step["params_after"] = {n: p.detach().clone() for n, p in model.named_parameters()}
        steps.append(step)
    rec["steps"] = steps
    model.eval()
    rec["eval_data"] = mc.inputs(name, gen)
    with torch.no_grad():
        rec["eval_out"] = flatten(model(*rec["eval_data"]["args"], **rec["eval_data"]["kwargs"]))
        if mc.CASES[name]["self_attention"]:
            x = rec["eval_data"]["args"][0][:, 0]
            rec["eval_unbatched"] = flatten(model(x, x, x))
    torch.manual_seed(FLOAT_SEED)
    float_sd = mc.float_twin(name).state_dict()
    torch.manual_seed(SEED)
    fresh = mc.build(bnn, bquant, name)
    report = fresh.load_state_dict({k: v.clone() for k, v in float_sd.items()}, strict=False)
    fresh.eval()
    with torch.no_grad():
        float_out = flatten(fresh(*rec["eval_data"]["args"], **rec["eval_data"]["kwargs"]))
    rec["float"] = {
        "state_dict": float_sd,
        "missing": list(report.missing_keys),
        "unexpected": list(report.unexpected_keys),
        "loaded_state": {k: v.clone() for k, v in fresh.state_dict().items()},
        "eval_out": float_out,
    }
    return rec


def record_sdpa_case(name: str) -> Dict[str, Any]:
    torch.manual_seed(SEED)
    model = mc.build_sdpa(bnn, bquant, name)
    gen = torch.Generator().manual_seed(DATA_SEED)
    model.train()
    steps = []
    for _ in range(mc.STEPS):
        data = mc.sdpa_inputs(name, gen)
        args = leaves(data["args"])
        out = model(*args, **data["kwargs"])
        g = torch.randn(out.shape, generator=gen)
        (out * g).sum().backward()
        step = {
            "data": data,
            "out": flatten(out),
            "g": g,
            "input_grads": [a.grad.clone() for a in args],
            "grads": {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None},
        }
        with torch.no_grad():
            for n, p in model.named_parameters():
                if p.grad is not None:
                    p -= mc.lr_of(n) * p.grad
                    p.grad = None
        step["params_after"] = {n: p.detach().clone() for n, p in model.named_parameters()}
        steps.append(step)
    model.eval()
    eval_data = mc.sdpa_inputs(name, gen)
    with torch.no_grad():
        eval_out = flatten(model(*eval_data["args"], **eval_data["kwargs"]))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    return {"steps": steps, "eval_data": eval_data, "eval_out": eval_out, "state": state}


def main() -> None:
    assert "BREVITAS_JIT" not in os.environ, "record with BREVITAS_JIT unset"
    torch.set_num_threads(1)
    import brevitas

    out = {
        "brevitas": brevitas.__version__,
        "torch": str(torch.__version__),
        "cases": {name: record_case(name) for name in mc.CASES},
        "sdpa_cases": {name: record_sdpa_case(name) for name in mc.SDPA_CASES},
    }
    torch.save(out, OUT_FILE)
    print(f"wrote {OUT_FILE} ({os.path.getsize(OUT_FILE)} bytes)")


if __name__ == "__main__":
    main()
