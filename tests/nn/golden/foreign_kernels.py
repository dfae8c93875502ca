"""A stand-in for another CPU's float kernels: every output of ATen's convolution and matrix
products (forward and backward) moves by -1, 0 or +1 ulp per element, pseudo-randomly. Kernels
of other CPUs, oneDNN builds or torch versions sum in another order and differ in the last bits of
exactly these ops; the golden replays must hold under them (test_golden_models.py and
tests/nn/test_quant_{rnn,mha,sdpa}.py).

Only a float32 element that was not computed exactly moves: the op is recomputed in float64 from
the same arguments, and an element equal to its float64 value (small integers times powers of
two, say) is what every summation order gives, so it stays. float64 results all move (no wider
type to check them with)."""

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten
FLOAT_KERNELS = {
    aten.convolution.default,
    aten.convolution_backward.default,
    aten.mm.default,
    aten.addmm.default,
    aten.bmm.default,
    aten.baddbmm.default,
}


def _perturbable(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() > 0


def _ulp_noise(t: Any, gen: torch.Generator, exact: Any = None) -> Any:
    """t moved by -1, 0 or +1 ulp per element, except where `exact` (a float64 recomputation of
    t) equals t."""
    if not _perturbable(t):
        return t
    direction = torch.randint(-1, 2, t.shape, generator=gen)
    if exact is not None:
        direction = direction.masked_fill(exact == t.double(), 0)
    up = torch.nextafter(t, torch.full_like(t, float("inf")))
    down = torch.nextafter(t, torch.full_like(t, float("-inf")))
    return torch.where(direction > 0, up, torch.where(direction < 0, down, t))


def _in_float64(func, args, kwargs) -> Any:
    def wide(a: Any) -> Any:
        if isinstance(a, torch.Tensor) and a.dtype == torch.float32:
            return a.double()
        if isinstance(a, (list, tuple)):
            return type(a)(wide(x) for x in a)
        return a

    return func(*wide(args), **{k: wide(v) for k, v in kwargs.items()})


class ForeignFloatKernels(TorchDispatchMode):
    def __init__(self, seed: int) -> None:
        super().__init__()
        self.gen = torch.Generator().manual_seed(seed)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func not in FLOAT_KERNELS:
            return out
        outs = out if isinstance(out, tuple) else (out,)
        if any(_perturbable(o) and o.dtype == torch.float32 for o in outs):
            wide = _in_float64(func, args, kwargs)
            exact = wide if isinstance(wide, tuple) else (wide,)
        else:
            exact = (None,) * len(outs)
        moved = tuple(
            _ulp_noise(o, self.gen, e if _perturbable(o) and o.dtype == torch.float32 else None)
            for o, e in zip(outs, exact)
        )
        return moved if isinstance(out, tuple) else moved[0]
