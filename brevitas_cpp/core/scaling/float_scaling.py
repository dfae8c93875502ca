"""The largest value of a minifloat format (Brevitas's ``FloatScaling``): the threshold a
minifloat quantizer's statistic is divided by, as an integer quantizer divides by max_int."""

from typing import Optional, Sequence

import torch
from torch import Tensor

from brevitas_cpp import jit
from brevitas_cpp.core.utils import StatelessBuffer
from brevitas_cpp.function.ops import max_float

__all__ = ["FloatScaling"]


class FloatScaling(jit.ScriptModule):
    """forward(exponent_bit_width, max_mantissa, exponent_bias) -> the format's largest value,
    max_float(...) capped at max_available_float (the largest value left once codes are reserved
    for inf and NaN) when one is given. inf_values, nan_values and saturating are kept as
    Brevitas keeps them (they do not change the threshold)."""

    def __init__(
        self,
        max_available_float: Optional[float] = None,
        inf_values: Optional[Sequence[str]] = None,
        nan_values: Optional[Sequence[str]] = None,
        saturating: bool = True,
        device: Optional[torch.device] = None,
        dtype: Optional[torch.dtype] = None,
    ) -> None:
        super().__init__()
        self.inf_values = inf_values
        self.nan_values = nan_values
        self.saturating = saturating
        self.dtype = dtype
        # Brevitas tests truthiness: 0 (or None) means no cap.
        if max_available_float:
            cap = torch.tensor(max_available_float, device=device, dtype=dtype)
            self.max_available_float = StatelessBuffer(cap)
        else:
            self.max_available_float = None

    @jit.script_method
    def forward(
        self, exponent_bit_width: Tensor, max_mantissa: Tensor, exponent_bias: Tensor
    ) -> Tensor:
        max_value = max_float(exponent_bit_width, max_mantissa, exponent_bias)
        if self.dtype is not None:
            max_value = max_value.to(self.dtype)
        cap = self.max_available_float
        if cap is not None:
            max_value = torch.min(max_value, cap())
        return max_value
