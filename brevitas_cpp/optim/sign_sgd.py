"""Sign SGD (Brevitas's ``brevitas.optim.sign_sgd``): SGD's update direction, with optional
weight decay, momentum and Nesterov momentum, reduced to its sign, so every element moves by
exactly ``lr``:

    g = ±grad (+ weight_decay * p);  b = g on the first step, else momentum * b + (1 - dampening) * g
    d = g + momentum * b (nesterov) or b (momentum) or g;  p -= lr * sign(d)
"""

from typing import Any, Callable, Iterable, List, Optional

import torch
from torch import Tensor
from torch.optim.optimizer import Optimizer

__all__ = ["SignSGD", "sign_sgd"]

try:  # torch's decorator: no_grad, unless the optimizer was built differentiable=True
    from torch.optim.optimizer import _use_grad_for_differentiable
except ImportError:  # pragma: no cover  (every torch this library supports has it)
    _use_grad_for_differentiable = torch.no_grad  # type: ignore[assignment]


class SignSGD(Optimizer):
    """Signed stochastic gradient descent, with torch.optim.SGD's arguments (``foreach`` is
    accepted; the per-tensor and the multi-tensor update give the same numbers here)."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        momentum: float = 0,
        dampening: float = 0,
        weight_decay: float = 0,
        nesterov: bool = False,
        *,
        maximize: bool = False,
        foreach: Optional[bool] = None,
        differentiable: bool = False,
        fused: Optional[bool] = None,
    ) -> None:
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        if fused:  # Brevitas accepts the flag and raises at the first step
            raise NotImplementedError("Fused SignSGD is not implemented.")
        defaults = dict(
            lr=lr,
            momentum=momentum,
            dampening=dampening,
            weight_decay=weight_decay,
            nesterov=nesterov,
            maximize=maximize,
            foreach=foreach,
            differentiable=differentiable,
            fused=fused,
        )
        super().__init__(params, defaults)

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("nesterov", False)
            group.setdefault("maximize", False)
            group.setdefault("foreach", None)
            group.setdefault("differentiable", False)
            group.setdefault("fused", False)

    @_use_grad_for_differentiable
    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        """One update of every parameter that has a gradient; returns the closure's loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            uses_momentum = group["momentum"] != 0
            buffers: List[Optional[Tensor]] = [
                self.state[p].get("momentum_buffer") if uses_momentum else None for p in params
            ]
            sign_sgd(
                params,
                [p.grad for p in params],
                buffers,
                foreach=group["foreach"],
                fused=group["fused"],
                weight_decay=group["weight_decay"],
                momentum=group["momentum"],
                lr=group["lr"],
                dampening=group["dampening"],
                nesterov=group["nesterov"],
                maximize=group["maximize"],
            )
            if uses_momentum:
                for p, buffer in zip(params, buffers):
                    self.state[p]["momentum_buffer"] = buffer
        return loss


def sign_sgd(
    params: List[Tensor],
    d_p_list: List[Tensor],
    momentum_buffer_list: List[Optional[Tensor]],
    has_sparse_grad: bool = False,
    foreach: Optional[bool] = None,
    fused: Optional[bool] = None,
    grad_scale: Optional[Tensor] = None,
    found_inf: Optional[Tensor] = None,
    *,
    weight_decay: float,
    momentum: float,
    lr: float,
    dampening: float,
    nesterov: bool,
    maximize: bool,
) -> None:
    """The functional form: updates ``params`` in place and fills ``momentum_buffer_list``
    (a None entry becomes the first step's buffer)."""
    if fused:
        raise NotImplementedError("Fused SignSGD is not implemented.")
    if grad_scale is not None or found_inf is not None:
        raise NotImplementedError("SignSGD does not take grad_scale or found_inf")
    for i, param in enumerate(params):
        grad = -d_p_list[i] if maximize else d_p_list[i]
        if weight_decay != 0:
            grad = grad.add(param, alpha=weight_decay)
        if momentum != 0:
            buf = momentum_buffer_list[i]
            if buf is None:
                buf = torch.clone(grad).detach()
                momentum_buffer_list[i] = buf
            else:
                buf.mul_(momentum).add_(grad, alpha=1 - dampening)
            grad = grad.add(buf, alpha=momentum) if nesterov else buf
        param.add_(torch.sign(grad), alpha=-lr)
