"""Elementwise blocks used to restrict scales: identity, abs, powers and logarithms of two."""

import torch
from torch import Tensor

from brevitas_cpp import jit


class Identity(jit.ScriptModule):
    """x."""

    def __init__(self) -> None:
        super().__init__()

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        return x


class Abs(jit.ScriptModule):
    """|x|."""

    def __init__(self) -> None:
        super().__init__()

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        return torch.abs(x)


class PowerOfTwo(jit.ScriptModule):
    """2 ** x."""

    def __init__(self) -> None:
        super().__init__()

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        return 2.0**x


class LogTwo(jit.ScriptModule):
    """log2(x)."""

    def __init__(self) -> None:
        super().__init__()

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        return torch.log2(x)


class InplaceLogTwo(torch.nn.Module):
    """log2 in place, for restricting a freshly computed, not yet learned, initial value."""

    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        x.log2_()
        return x
