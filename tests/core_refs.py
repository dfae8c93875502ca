"""References and test doubles shared by the core block tests (tests/core/...), imported by name
(``pyproject``'s pytest pythonpath holds tests/, as for helpers.py).

The references spell out Brevitas's formulas with plain torch ops, independent of the library's
arithmetic; from brevitas_cpp come only the jit switch (so that the test statistics script like
the blocks they plug into), the restrict-value classes the tests pick by name, and, for the
user-supplied clamp double, the library's tensor_clamp function."""

from typing import Callable, Dict, Optional

import torch
from torch import Tensor

from brevitas_cpp import config, jit
from brevitas_cpp.core.restrict_val import (
    FloatRestrictValue,
    IntRestrictValue,
    LogFloatRestrictValue,
    PowerOfTwoRestrictValue,
)
from brevitas_cpp.function import tensor_clamp

# ---- straight-through references -------------------------------------------------------------------


def ste(value: Tensor, x: Tensor) -> Tensor:
    """value, with x's gradient passed straight through."""
    return value.detach() + (x - x.detach())


def signed_clamp_min(x: Tensor, min_val: Optional[float]) -> Tensor:
    """sign(x) * max(|x|, min_val) (sign(0) = +1), identity gradient; x itself without a bound."""
    if min_val is None:
        return x
    sign = torch.where(x >= 0, 1.0, -1.0).to(x.dtype)
    return ste(sign * torch.clamp_min(torch.abs(x), min_val), x)


# ---- restrict-value blocks by name, and what they compute -----------------------------------------

RESTRICTS = {
    "float": FloatRestrictValue,
    "log": LogFloatRestrictValue,
    "po2": PowerOfTwoRestrictValue,
    "int": IntRestrictValue,
}
# restrict domain -> scale
RESTRICT: Dict[str, Callable[[Tensor], Tensor]] = {
    "float": lambda v: v,
    "log": lambda v: 2.0**v,
    "po2": lambda v: 2.0 ** ste(torch.round(v), v),
    "int": lambda v: ste(torch.round(v), v),
}
# scale -> restrict domain (initial values)
TO_DOMAIN: Dict[str, Callable[[Tensor], Tensor]] = {
    "float": lambda x: x,
    "log": torch.log2,
    "po2": torch.log2,
    "int": lambda x: x,
}


# ---- running statistics ----------------------------------------------------------------------------


def ref_momentum_update(running: Tensor, s: Tensor, step: int, momentum: Optional[float]) -> Tensor:
    """The running statistic after the (0-based) step-th batch, of statistic s: a cumulative
    average when momentum is None, else an EMA. (The first batch is written in by each block its
    own way, so callers spell that step out.)"""
    if momentum is None:
        return running * (step / (step + 1)) + s / (step + 1)
    return running * (1 - momentum) + momentum * s


# ---- assertions ------------------------------------------------------------------------------------


def assert_grad_close(actual: Tensor, expected: Tensor) -> None:
    # TorchScript's autodiff may order a backward differently from eager autograd (a few ulps).
    torch.testing.assert_close(actual, expected, rtol=1e-6, atol=1e-12)


def assert_scripted(block: torch.nn.Module) -> None:
    assert isinstance(block, torch.jit.ScriptModule) == config.JIT_ENABLED


def backward_same(out: Tensor, expected: Tensor) -> None:
    """Backpropagates one random upstream gradient (global generator) through both graphs."""
    g = torch.randn(out.shape)
    out.backward(g)
    expected.backward(g)


# ---- test doubles ----------------------------------------------------------------------------------


class AbsMaxOverTensor(jit.ScriptModule):
    """Test-local statistic: max |x| over everything."""

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        return torch.max(torch.abs(x))


class AbsMaxOverDim1(jit.ScriptModule):
    """Test-local statistic: max |x| along dim 1 of a [channels, rest] view."""

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        return torch.max(torch.abs(x), dim=1)[0]


class LearnedScale(torch.nn.Module):
    """scale = |value|, ignoring x: a learned, per tensor or per channel scale."""

    def __init__(self, init: Tensor) -> None:
        super().__init__()
        self.value = torch.nn.Parameter(init.clone())

    def forward(self, x: Tensor) -> Tensor:
        return self.value.abs()


class UserTensorClamp(torch.nn.Module):
    """TensorClamp's arithmetic under a type the quantizers do not recognise (so they take the
    step-by-step composition instead of a fused op)."""

    def forward(self, x: Tensor, min_val: Tensor, max_val: Tensor) -> Tensor:
        return tensor_clamp(x, min_val, max_val)
