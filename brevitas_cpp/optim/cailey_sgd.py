"""Cayley SGD (Brevitas's ``brevitas.optim.cailey_sgd``, spelled as there): SGD on the Stiefel
manifold, for weights that must stay orthonormal (rotation matrices). A parameter whose rows,
flattened to a p-by-n matrix X (p <= n), are to stay orthonormal takes the SGD-G step of Li et
al. (Efficient Riemannian Optimization on the Stiefel Manifold via the Cayley Transform):

    X <- X / (||rows of X|| + 1e-8)     (re-projected by QR, with probability 1/101)
    V = momentum * buffer - grad^T      M = V X
    W = W_hat - W_hat^T                 W_hat = M - 0.5 * X^T (X M)
    t = min(lr, 1 / (||W||_1 + 1e-8))   Y_0 = X^T + t V,   Y_k+1 = X^T + t W (X^T + Y_k) / 2  (5 times)
    X <- Y_5^T

Other parameters (``stiefel=False``, or a tall p > n matrix) take a plain SGD step.

The numbers are Brevitas 0.12's, including what its implementation does beyond the paper:

- ``momentum_buffer`` stays zero: Brevitas rebinds the local ``V`` before writing the new
  momentum into it, so the state is never updated and each Stiefel step uses only its gradient;
- ``omega`` and ``grad_clip`` are stored but not used (``omega`` is stored as 0);
- the random QR re-projection draws ``random.randint(1, 101)`` from Python's global ``random``
  for every Stiefel step, so seeding ``random`` reproduces Brevitas's steps;
- the plain SGD step takes weight decay, dampening and Nesterov from the last Stiefel step of
  the same ``step()`` call (Brevitas reads them from loop variables only that path assigns).
  Without one, Brevitas skips weight decay (its NameError is swallowed), which is kept, and it
  raises UnboundLocalError for momentum, where this uses the group's dampening and Nesterov.
"""

import random
from typing import Any, Callable, Iterable, Optional, Tuple, Union

import torch
from torch import Tensor
from torch.optim.optimizer import Optimizer

__all__ = [
    "CaileySGD",
    "Cayley_loop",
    "episilon",
    "matrix_norm_one",
    "norm",
    "qr_retraction",
    "unit",
]

episilon = 1e-8  # Brevitas's name (sic): keeps 1 / ||W||_1 finite
CAYLEY_ITERATIONS = 5
QR_RETRACTION_ODDS = 101  # one Stiefel step in 101 re-projects X by QR


def norm(v: Tensor, dim: int = 1) -> Tensor:
    """Euclidean norms of the rows (dim=1) or columns (dim=0) of a matrix, kept as a column."""
    if v.dim() != 2:
        raise ValueError(f"norm: expected a matrix, got a tensor of shape {tuple(v.shape)}")
    return v.norm(p=2, dim=dim, keepdim=True)


def unit(v: Tensor, dim: int = 1, eps: float = 1e-8) -> Tuple[Tensor, Tensor]:
    """The rows of ``v`` scaled to unit norm (``eps`` guards a zero row), and their norms."""
    vnorm = norm(v, dim)
    return v / vnorm.add(eps), vnorm


def matrix_norm_one(W: Tensor) -> Tensor:
    """The 1-norm of a matrix: its largest column sum of absolute values."""
    return torch.abs(W).sum(dim=0).max()


def Cayley_loop(X: Tensor, W: Tensor, tan_vec: Tensor, t: Union[float, Tensor]) -> Tensor:
    """The Cayley transform (I - t/2 W)^-1 (I + t/2 W) X by fixed-point iteration, started from
    X + t * tan_vec; returns the transpose of the result."""
    Y = X + t * tan_vec
    for _ in range(CAYLEY_ITERATIONS):
        Y = X + t * torch.matmul(W, 0.5 * (X + Y))
    return Y.t()


def qr_retraction(tan_vec: Tensor) -> Tensor:
    """Re-orthonormalises the rows of a p-by-n matrix (p <= n) by the QR decomposition of its
    transpose, with the signs fixed so that R has a positive diagonal. QR runs in float32
    (torch has no half kernel) and the result is cast back. Unlike Brevitas's, the argument is
    not transposed in place."""
    dtype = tan_vec.dtype
    q, r = torch.linalg.qr(tan_vec.t().to(torch.float32))
    q, r = q.to(dtype), r.to(dtype)
    q = q * torch.diag(r, 0).sign().expand_as(q)
    return q.t()


class CaileySGD(Optimizer):
    """SGD-G on the Stiefel manifold for ``stiefel=True`` parameters, SGD otherwise.

    Args: lr (default 0.1), momentum, dampening, weight_decay, nesterov (SGD's), stiefel
    (default False), omega and grad_clip (accepted, unused, as in Brevitas)."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-1,
        momentum: float = 0,
        dampening: float = 0,
        weight_decay: float = 0,
        nesterov: bool = False,
        stiefel: bool = False,
        omega: float = 0,
        grad_clip: Optional[float] = None,
    ) -> None:
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        defaults = dict(
            lr=lr,
            momentum=momentum,
            dampening=dampening,
            weight_decay=weight_decay,
            nesterov=nesterov,
            stiefel=stiefel,
            omega=0,  # Brevitas stores 0 whatever is passed; the update never reads it
            grad_clip=grad_clip,
        )
        super().__init__(params, defaults)

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("nesterov", False)

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        """One update of every parameter that has a gradient; returns the closure's loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        # The settings of the last Stiefel step in this call (see the module docstring).
        last_stiefel: Optional[dict] = None
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                rows = p.data.view(p.size(0), -1)
                if group["stiefel"] and rows.size(0) <= rows.size(1):
                    last_stiefel = group
                    self._stiefel_step(p, rows, group)
                else:
                    self._sgd_step(p, group, last_stiefel)
        return loss

    def _stiefel_step(self, p: Tensor, rows: Tensor, group: dict) -> None:
        X, _ = unit(rows)
        if random.randint(1, QR_RETRACTION_ODDS) == 1:
            X = qr_retraction(X)
        g = p.grad.view(p.size(0), -1)
        state = self.state[p]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = torch.zeros_like(g.t())
        V = group["momentum"] * state["momentum_buffer"] - g.t()
        MX = torch.mm(V, X)
        W_hat = MX - 0.5 * torch.mm(X.t(), torch.mm(X, MX))
        W = W_hat - W_hat.t()
        t = 1.0 / (matrix_norm_one(W) + episilon)
        lr = group["lr"]
        alpha = lr if lr < t else t  # Python's min(t, lr): t on a tie
        p.data.copy_(Cayley_loop(X.t(), W, V, alpha).view(p.size()))

    def _sgd_step(self, p: Tensor, group: dict, last_stiefel: Optional[dict]) -> None:
        d_p = p.grad
        if last_stiefel is not None and last_stiefel["weight_decay"] != 0:
            d_p.add_(p.data, alpha=last_stiefel["weight_decay"])  # in place, as Brevitas
        momentum = group["momentum"]
        if momentum != 0:
            settings = last_stiefel if last_stiefel is not None else group
            state = self.state[p]
            if "momentum_buffer" not in state:
                buf = state["momentum_buffer"] = d_p.clone()
            else:
                buf = state["momentum_buffer"]
                buf.mul_(momentum).add_(d_p, alpha=1 - settings["dampening"])
            d_p = d_p.add(buf, alpha=momentum) if settings["nesterov"] else buf
        p.data.add_(d_p, alpha=-group["lr"])
