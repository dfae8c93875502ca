"""Clamp blocks without straight-through gradients, and the minifloat clamp (FloatClamp)."""

from typing import Optional, Sequence

import torch
from torch import Tensor
from torch.nn import Module

from brevitas_cpp import jit
from brevitas_cpp.core.utils import StatelessBuffer
from brevitas_cpp.function.ops import max_float, tensor_clamp


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


class FloatClamp(jit.ScriptModule):
    """Clamp a minifloat-rounded tensor to its format's range (Brevitas's ``FloatClamp``).

    forward(x, exponent_bit_width, max_mantissa, exponent_bias) -> (x clamped, saturating,
    inf_values, nan_values). The range is +-max_float(...) (0 below when unsigned), capped at
    max_available_float. A non-saturating format then marks what lay beyond it: +-inf with
    inf_values; NaN with only nan_values, which also turns inf into NaN. inf_values and
    nan_values are the reserved mantissa codes (e.g. ('111',)); only whether they are given
    changes the numbers."""

    __constants__ = ["saturating", "inf_values", "nan_values", "signed"]

    def __init__(
        self,
        tensor_clamp_impl: Module,
        signed: bool,
        inf_values: Optional[Sequence[str]] = None,
        nan_values: Optional[Sequence[str]] = None,
        max_available_float: Optional[float] = None,
        saturating: bool = True,
        device: Optional[torch.device] = None,
        dtype: Optional[torch.dtype] = None,
    ) -> None:
        super().__init__()
        if not saturating and inf_values is None and nan_values is None:
            raise ValueError(
                "FloatClamp: a non-saturating format (saturating=False) needs inf_values or "
                "nan_values: what values beyond the largest one become"
            )
        self.tensor_clamp_impl = tensor_clamp_impl
        self.signed = signed
        self.saturating = saturating
        # Tuples: TorchScript constants, and what Brevitas's quantizers compare against.
        self.inf_values = tuple(inf_values) if inf_values is not None else None
        self.nan_values = tuple(nan_values) if nan_values is not None else None
        # Brevitas tests truthiness: 0 (or None) means no cap.
        if max_available_float:
            cap = torch.tensor(max_available_float, device=device, dtype=dtype)
            self.max_available_float = StatelessBuffer(cap)
        else:
            self.max_available_float = None

    @jit.script_method
    def forward(
        self, x: Tensor, exponent_bit_width: Tensor, max_mantissa: Tensor, exponent_bias: Tensor
    ):
        max_value = max_float(exponent_bit_width, max_mantissa, exponent_bias)
        cap = self.max_available_float
        if cap is not None:
            max_value = torch.min(max_value, cap())
        if self.signed:
            min_value = -max_value
        else:
            min_value = torch.zeros_like(max_value)
        beyond_max = x > max_value
        beyond_min = x < min_value
        is_inf = x.isinf()
        x = self.tensor_clamp_impl(x, min_val=min_value, max_val=max_value)
        if not self.saturating:
            if self.inf_values is not None:
                x = torch.where(beyond_max, torch.full_like(x, float("inf")), x)
                x = torch.where(beyond_min, torch.full_like(x, float("-inf")), x)
            else:
                beyond = beyond_max | beyond_min | is_inf
                x = torch.where(beyond, torch.full_like(x, float("nan")), x)
        return x, self.saturating, self.inf_values, self.nan_values
