"""A stand-in for another CPU's float kernels: every output of ATen's convolution and matrix
products (forward and backward) moves by -1, 0 or +1 ulp per element, pseudo-randomly. Kernels
of other CPUs, oneDNN builds or torch versions sum in another order and differ in the last bits of
exactly these ops; the model-level golden replay must hold under them (test_golden_models.py)."""

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


def _ulp_noise(t: Any, gen: torch.Generator) -> Any:
    if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.numel() == 0:
        return t
    direction = torch.randint(-1, 2, t.shape, generator=gen)
    up = torch.nextafter(t, torch.full_like(t, float("inf")))
    down = torch.nextafter(t, torch.full_like(t, float("-inf")))
    return torch.where(direction > 0, up, torch.where(direction < 0, down, t))


class ForeignFloatKernels(TorchDispatchMode):
    def __init__(self, seed: int) -> None:
        super().__init__()
        self.gen = torch.Generator().manual_seed(seed)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func not in FLOAT_KERNELS:
            return out
        if isinstance(out, tuple):
            return tuple(_ulp_noise(o, self.gen) for o in out)
        return _ulp_noise(out, self.gen)
