"""Clamp blocks without straight-through gradients."""

import torch
from torch import Tensor

from brevitas_cpp import jit
from brevitas_cpp.function.ops import tensor_clamp


class TensorClamp(jit.ScriptModule):
    """Clamp between tensor bounds (broadcasting); gradients are zero outside the range."""

    def __init__(self) -> None:
        super().__init__()

    @jit.script_method
    def forward(self, x: Tensor, min_val: Tensor, max_val: Tensor) -> Tensor:
        return tensor_clamp(x, min_val=min_val, max_val=max_val)


class ScalarClamp(jit.ScriptModule):
    """torch.clamp between two Python numbers."""

    __constants__ = ["min_val", "max_val"]

    def __init__(self, min_val: float, max_val: float) -> None:
        super().__init__()
        if min_val > max_val:
            raise ValueError(
                f"ScalarClamp: min_val ({min_val}) must not exceed max_val ({max_val})"
            )
        self.min_val = min_val
        self.max_val = max_val

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        return torch.clamp(x, min=self.min_val, max=self.max_val)


class ClampMin(jit.ScriptModule):
    """x.clamp_min(min_val)."""

    __constants__ = ["min_val"]

    def __init__(self, min_val: float) -> None:
        super().__init__()
        self.min_val = min_val

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        return x.clamp_min(self.min_val)
