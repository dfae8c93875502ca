"""brevitas_cpp.optim against Brevitas 0.12: every case of tests/golden/modules_models.py
(SignSGD with momentum, Nesterov, dampening, weight decay, maximize; CaileySGD's Stiefel steps,
with and without the QR re-projection, and its plain SGD steps) replayed from Brevitas's
recorded initial parameters and gradients, with Python's random seeded as in the recording;
parameters, gradients (CaileySGD applies weight decay to them in place) and momentum buffers
after every step. Formulas written out check sign SGD and the Stiefel constraint."""

import importlib.util
import os
import random
from typing import Any, Dict

import pytest
import torch

from brevitas_cpp.optim import CaileySGD, SignSGD, sign_sgd
from brevitas_cpp.optim import cailey_sgd as cs

GOLDEN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")
GOLDEN: Dict[str, Any] = torch.load(os.path.join(GOLDEN_DIR, "brevitas_0_12_modules.pt"))["optim"]

_spec = importlib.util.spec_from_file_location(
    "modules_models", os.path.join(GOLDEN_DIR, "modules_models.py")
)
mm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mm)

OPTIMIZERS = {"SignSGD": SignSGD, "CaileySGD": CaileySGD}


def _assert_equal(actual: torch.Tensor, expected: torch.Tensor, what: str, exact: bool) -> None:
    if exact:
        assert torch.equal(actual, expected), what
    else:
        # Stiefel steps run matrix products, whose last bits are the BLAS kernel's (they can
        # differ on another CPU); within 16 ulps of the largest magnitude. Bit-identical on the
        # recording's machine.
        atol = 16 * torch.finfo(expected.dtype).eps * float(expected.abs().max())
        torch.testing.assert_close(actual, expected, rtol=0, atol=atol, msg=what)


def _takes_stiefel_steps(name: str) -> bool:
    """A p-by-n parameter (rows flattened) with p <= n; a taller one takes plain SGD steps."""
    shape = torch.Size(mm.PARAM_SHAPES[name])
    return shape[0] <= shape.numel() // shape[0]


@pytest.mark.parametrize("case_name", list(mm.OPTIM_CASES))
def test_optimizer_matches_brevitas(case_name):
    case, golden = mm.OPTIM_CASES[case_name], GOLDEN[case_name]
    params = {n: torch.nn.Parameter(t.clone()) for n, t in golden["init"].items()}
    groups = [dict(params=[params[n] for n in g["params"]], **g["kw"]) for g in case["groups"]]
    opt = OPTIMIZERS[case["opt"]](groups)
    used = {n for g in case["groups"] for n in g["params"]}
    stiefel = {n for g in case["groups"] if g["kw"].get("stiefel") for n in g["params"]}
    random.seed(golden["python_seed"])
    for step, (grads, expected) in enumerate(zip(golden["grads"], golden["steps"])):
        for n, p in params.items():
            p.grad = grads[n].clone() if n in used else None
        opt.step()
        for n, p in params.items():
            exact = n not in stiefel or not _takes_stiefel_steps(n)
            _assert_equal(p.detach(), expected["params"][n], f"{case_name} {step} {n}", exact)
        for n, grad in expected["grads_after"].items():
            assert torch.equal(params[n].grad, grad), f"{case_name} {step} grad {n}"
        buffers = {
            n: opt.state[p]["momentum_buffer"]
            for n, p in params.items()
            if "momentum_buffer" in opt.state.get(p, {})
        }
        assert sorted(buffers) == sorted(expected["buffers"]), case_name
        for n, buf in buffers.items():
            assert torch.equal(buf, expected["buffers"][n]), f"{case_name} {step} buffer {n}"


def test_the_recording_covers_the_qr_retraction():
    assert 1 in GOLDEN["cayley_stiefel"]["qr_draws"]


def test_sign_sgd_formula():
    """p -= lr * sign(g + wd * p) without momentum; with momentum the buffer is g on the first
    step, then momentum * b + (1 - dampening) * g."""
    torch.manual_seed(0)
    p0, g1, g2 = torch.randn(7), torch.randn(7), torch.randn(7)
    p = torch.nn.Parameter(p0.clone())
    opt = SignSGD([p], lr=0.1, momentum=0.5, dampening=0.25, weight_decay=0.01)
    p.grad = g1.clone()
    opt.step()
    d1 = g1 + 0.01 * p0
    assert torch.equal(p.detach(), p0 - 0.1 * torch.sign(d1))
    p_1 = p.detach().clone()
    p.grad = g2.clone()
    opt.step()
    d2 = g2 + 0.01 * p_1
    b2 = 0.5 * d1 + 0.75 * d2
    assert torch.allclose(opt.state[p]["momentum_buffer"], b2)
    assert torch.equal(p.detach(), p_1 - 0.1 * torch.sign(b2))


def test_sign_sgd_functional_and_errors():
    p, g = torch.zeros(3), torch.tensor([1.0, -2.0, 0.0])
    buffers = [None]
    sign_sgd(
        [p], [g], buffers, weight_decay=0, momentum=0.9, lr=0.5, dampening=0, nesterov=False,
        maximize=False,
    )  # fmt: skip
    assert p.tolist() == [-0.5, 0.5, 0.0] and torch.equal(buffers[0], g)
    with pytest.raises(ValueError, match="Invalid learning rate"):
        SignSGD([torch.nn.Parameter(p)], lr=-1.0)
    with pytest.raises(ValueError, match="Nesterov"):
        SignSGD([torch.nn.Parameter(p)], nesterov=True)
    with pytest.raises(NotImplementedError):
        SignSGD([torch.nn.Parameter(p)], fused=True)


def test_cayley_step_keeps_rows_orthonormal():
    """Starting from orthonormal rows, a Stiefel step stays on the manifold (the Cayley
    transform of a skew-symmetric W is orthogonal; 5 fixed-point iterations leave ~t^6)."""
    torch.manual_seed(3)
    q, _ = torch.linalg.qr(torch.randn(8, 3, dtype=torch.float64))
    p = torch.nn.Parameter(q.t().contiguous())
    opt = CaileySGD([p], lr=0.01, stiefel=True)
    random.seed(5)
    for _ in range(3):
        p.grad = torch.randn(3, 8, dtype=torch.float64)
        opt.step()
    eye = torch.eye(3, dtype=torch.float64)
    assert torch.allclose(p.detach() @ p.detach().t(), eye, atol=1e-9)
    assert torch.count_nonzero(opt.state[p]["momentum_buffer"]) == 0  # Brevitas never updates it


def test_cayley_helpers():
    w = torch.tensor([[1.0, -2.0], [3.0, 0.5]])
    assert cs.matrix_norm_one(w).item() == 4.0  # column sums of |w|: 4, 2.5
    rows, norms = cs.unit(torch.tensor([[3.0, 4.0], [0.0, 2.0]]))
    assert torch.allclose(norms.flatten(), torch.tensor([5.0, 2.0]))
    assert torch.allclose(rows, torch.tensor([[0.6, 0.8], [0.0, 1.0]]))
    x = torch.randn(2, 5)
    q = cs.qr_retraction(x)
    assert q.shape == (2, 5) and torch.allclose(q @ q.t(), torch.eye(2), atol=1e-6)
    # The sign fix: each row of q points the way of the corresponding row of x.
    assert bool(((q * x).sum(1) > 0).all())
    with pytest.raises(ValueError, match="matrix"):
        cs.norm(torch.zeros(2, 2, 2))
