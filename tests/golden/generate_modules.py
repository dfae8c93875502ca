"""Record what Brevitas 0.12 returns for the modules user code imports (brevitas.torch_version,
brevitas.utils.torch_utils, brevitas.inject.defaults, brevitas.loss, brevitas.optim) as golden
numbers for tests/test_torch_version.py, tests/utils/test_torch_utils.py,
tests/inject/test_defaults.py, tests/test_loss.py and tests/test_optim.py.

Run by hand in the environment scripts/make_brevitas_env.sh builds, with BREVITAS_JIT unset:

    bash scripts/make_brevitas_env.sh /tmp/brevenv
    /tmp/brevenv/bin/python tests/golden/generate_modules.py

It writes brevitas_0_12_modules.pt next to this file; the tests read it with plain torch and
never import brevitas. The loss model and the optimizer cases are in modules_models.py, shared
with the tests.
"""

import os
import random
import sys
from typing import Any, Dict

import brevitas
import brevitas.inject.defaults as bdefaults
import brevitas.inject.enum as benum
import brevitas.loss as bloss
import brevitas.nn as bnn
import torch
from brevitas.core.function_wrapper import learned_round as blr
from brevitas.inject.enum import FloatToIntImplType, LearnedRoundImplType
from brevitas.optim.cailey_sgd import CaileySGD
from brevitas.optim.sign_sgd import SignSGD
from brevitas.quant import Int8WeightPerTensorFloat
from brevitas.utils import torch_utils as btu

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import modules_models as mm  # noqa: E402

OUT_FILE = os.path.join(HERE, "brevitas_0_12_modules.pt")

# torch 2.13 dropped named tensors, but Brevitas 0.12's layers call Tensor.rename(None) on every
# input; for an unnamed tensor that returns the tensor itself, all this stand-in does.
if not hasattr(torch.Tensor, "rename"):

    def _rename_none(self: torch.Tensor, *names: Any, **rename_map: Any) -> torch.Tensor:
        if names != (None,) or rename_map:
            raise NotImplementedError("named tensors are not available in this torch")
        return self

    torch.Tensor.rename = _rename_none


def record_torch_utils() -> Dict[str, Any]:
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(5, 8, generator=gen) * 4.0
    # Exact powers of two, zero, a subnormal-range value and a negative one.
    x[0, :6] = torch.tensor([0.0, 1e-12, 0.5, -2.0, 0.015625, 3.0e-3])
    mantissa, internal_min, eps = torch.tensor(3.0), torch.tensor(-6.0), 1e-8
    xr = x.clone().requires_grad_(True)
    scale = btu.float_internal_scale(xr, mantissa, internal_min, eps)
    g = torch.randn(x.shape, generator=gen)
    (scale * g).sum().backward()

    padded = {}
    y = torch.randn(2, 5, 3, generator=gen)
    for dim, multiple in [(0, 4), (1, 4), (1, 5), (2, 2), (-1, 4), (-2, 3)]:
        padded[(dim, multiple)] = btu.padding_to_multiple(y, dim, multiple)
    to_dim = {}
    for dim, new in [(0, 3), (1, 7), (2, 3), (-1, 6), (-3, 4)]:
        to_dim[(dim, new)] = btu.pad_to_dim(y, dim, new)

    half = (torch.randn(4, 9, generator=gen) * 10).to(torch.float16)
    kth = {
        (k, dim, keepdim): btu.kthvalue(half, k, dim=dim, keepdim=keepdim)
        for k, dim, keepdim in [(3, None, False), (2, 0, True), (5, 1, False)]
    }
    shapes = [
        ((3, 1, 5), (4, 5)),
        ((3, 2, 5), (4, 5)),
        ((1,), (7, 3)),
        ((2, 3), (3, 2)),
        ((), (4,)),
        ((6, 1), (1, 6)),
    ]
    return dict(
        float_internal_scale=dict(
            x=x,
            mantissa_bit_width=mantissa,
            fp_internal_scale_min=internal_min,
            eps=eps,
            out=scale.detach(),
            g=g,
            x_grad=xr.grad,
        ),
        padding_input=y,
        padding_to_multiple=padded,
        pad_to_dim=to_dim,
        kthvalue_input=half,
        kthvalue=kth,
        is_broadcastable={pair: btu.is_broadcastable(*pair) for pair in shapes},
        channel_view_shape={
            (shape, dim): btu.compute_channel_view_shape(torch.zeros(shape), dim)
            for shape, dim in [((2, 3, 4, 5), 1), ((2, 3), 0), ((4, 5, 6), -1)]
        },
    )


def record_loss() -> Dict[str, Any]:
    torch.manual_seed(11)
    model = mm.BitWidthNet(mm.Lib(bnn, benum))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    losses = {name: getattr(bloss, name)(model) for name in mm.LOSS_NAMES}
    gen = torch.Generator().manual_seed(12)
    inputs = [torch.randn(mm.LOSS_INPUT_SHAPE, generator=gen) for _ in range(3)]
    model.train()
    rounds = []
    # Two forwards accumulate, then the losses are zeroed and one more forward is collected.
    for batch in (inputs[:2], inputs[2:]):
        for loss in losses.values():
            loss.zero_accumulated_values()
        for x in batch:
            model(x)
        record = {}
        for name, loss in losses.items():
            model.zero_grad()
            value = loss.retrieve()
            value.backward(retain_graph=True)
            record[name] = dict(
                value=value.detach(),
                terms=[t.detach() for t in loss.retrieve(as_average=False)],
                log=loss.log(),
                tot=loss.tot_num_elements,
                grads={
                    n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None
                },
            )
        rounds.append(record)
    return dict(state_dict=state, inputs=inputs, rounds=rounds)


def count_stiefel_steps(case: Dict[str, Any]) -> int:
    if case["opt"] != "CaileySGD":
        return 0
    per_step = 0
    for group in case["groups"]:
        if group["kw"].get("stiefel", False):
            for name in group["params"]:
                shape = mm.PARAM_SHAPES[name]
                rows, cols = shape[0], int(torch.Size(shape).numel()) // shape[0]
                per_step += rows <= cols
    return per_step * mm.OPTIM_STEPS


def python_seed_with_retraction(draws: int) -> int:
    """The smallest seed of Python's random whose first draws re-project by QR at least once."""
    seed = 0
    while True:
        random.seed(seed)
        if any(random.randint(1, 101) == 1 for _ in range(draws)):
            return seed
        seed += 1


def record_optim() -> Dict[str, Any]:
    out = {}
    for index, (case_name, case) in enumerate(mm.OPTIM_CASES.items()):
        seed = 100 + 10 * index
        init = mm.optim_params(seed)
        grads = mm.optim_grads(seed, mm.OPTIM_STEPS)
        params = {n: torch.nn.Parameter(t.clone()) for n, t in init.items()}
        groups = [
            dict(params=[params[n] for n in group["params"]], **group["kw"])
            for group in case["groups"]
        ]
        cls = {"SignSGD": SignSGD, "CaileySGD": CaileySGD}[case["opt"]]
        opt = cls(groups)
        draws = count_stiefel_steps(case)
        py_seed = python_seed_with_retraction(draws) if draws else 0
        random.seed(py_seed)
        steps = []
        for step_grads in grads:
            used = {n for g in case["groups"] for n in g["params"]}
            for n, p in params.items():
                p.grad = step_grads[n].clone() if n in used else None
            opt.step()
            steps.append(
                dict(
                    params={n: p.detach().clone() for n, p in params.items()},
                    grads_after={n: p.grad.clone() for n, p in params.items() if n in used},
                    buffers={
                        n: opt.state[p]["momentum_buffer"].clone()
                        for n, p in params.items()
                        if "momentum_buffer" in opt.state.get(p, {})
                    },
                )
            )
        random.seed(py_seed)
        out[case_name] = dict(
            init=init,
            grads=grads,
            python_seed=py_seed,
            qr_draws=[random.randint(1, 101) for _ in range(draws)],
            steps=steps,
        )
    return out


def record_learned_round() -> Dict[str, Any]:
    """Each implementation inside LearnedRoundSte on its own (train: output and gradients of
    sum(out * g) to x and value; eval: output), and a per-tensor weight quantizer with learned
    rounding in a QuantLinear (the solver's LEARNED_ROUND path, value loaded at random)."""
    gen = torch.Generator().manual_seed(21)
    blocks = {}
    for name, (impl_name, kwargs) in mm.LEARNED_ROUND_CASES.items():
        value = torch.randn(4, 6, generator=gen) * 2.0
        x = torch.randn(4, 6, generator=gen) * 3.0
        g = torch.randn(4, 6, generator=gen)
        impl = getattr(blr, impl_name)(**kwargs)
        block = blr.LearnedRoundSte(impl, value.clone(), torch.nn.Identity())
        xr = x.clone().requires_grad_(True)
        out = block(xr)
        (out * g).sum().backward()
        block.eval()
        blocks[name] = dict(
            value=value,
            x=x,
            g=g,
            out=out.detach(),
            x_grad=xr.grad,
            value_grad=block.value.grad,
            eval_out=block(x),
            keys=list(block.state_dict()),
        )
    quantizers = {}
    for impl in ("HARD_SIGMOID", "SIGMOID", "IDENTITY"):
        torch.manual_seed(22)
        layer = bnn.QuantLinear(
            6,
            4,
            bias=False,
            weight_quant=Int8WeightPerTensorFloat.let(
                float_to_int_impl_type=FloatToIntImplType.LEARNED_ROUND,
                learned_round_impl_type=getattr(LearnedRoundImplType, impl),
            ),
        )
        key = [k for k in layer.state_dict() if k.endswith("float_to_int_impl.value")][0]
        value = torch.randn(4, 6, generator=gen)
        layer.load_state_dict({**layer.state_dict(), key: value})
        qw = layer.quant_weight()
        g = torch.randn(4, 6, generator=gen)
        (qw.value * g).sum().backward()
        layer.eval()
        quantizers[impl] = dict(
            state_dict={k: v.clone() for k, v in layer.state_dict().items()},
            value=qw.value.detach(),
            scale=qw.scale.detach(),
            g=g,
            grads={n: p.grad.clone() for n, p in layer.named_parameters() if p.grad is not None},
            eval_value=layer.quant_weight().value.detach(),
        )
    return dict(blocks=blocks, quantizers=quantizers)


def main() -> None:
    torch.set_num_threads(1)
    golden = dict(
        brevitas_version=brevitas.__version__,
        torch_version=str(brevitas.torch_version),
        torch_version_raw=str(torch.__version__),
        defaults={
            name: getattr(bdefaults, name).__module__
            for name in dir(bdefaults)
            if not name.startswith("_")
        },
        torch_utils=record_torch_utils(),
        loss=record_loss(),
        optim=record_optim(),
        learned_round=record_learned_round(),
    )
    torch.save(golden, OUT_FILE)
    print("wrote", OUT_FILE)


if __name__ == "__main__":
    main()
