"""TernaryQuant: every element becomes -scale, 0 or +scale (Brevitas's
``brevitas.core.quant.ternary``). Returns (y, scale, zero_point = 0, bit_width = 2).

    y = (|x| > threshold * scale) * sign(x) * scale     (sign straight-through)

computed by the fused C++ op ternary_quant when it takes the operands as they are.
"""

import math
from typing import Optional

import torch
from torch import Tensor
from torch.nn import Module

from brevitas_cpp import jit
from brevitas_cpp.core.quant._checks import check_module, check_quant_delay_steps
from brevitas_cpp.core.quant.block_output import QuantBlockOutput
from brevitas_cpp.core.quant.delay import DelayWrapper
from brevitas_cpp.core.quant.plan.operands import scaled_operands_fit
from brevitas_cpp.core.utils import StatelessBuffer
from brevitas_cpp.function import ternary_quant
from brevitas_cpp.function.ops_ste import ternary_sign_ste


def _ternary_fusable(x: Tensor, scale: Tensor) -> bool:
    # Brevitas's mask is float32 whatever x is, so half-precision x gives a float32 result
    # there; the op would keep x's dtype. Only float32 and float64 agree.
    return (x.dtype == torch.float32 or x.dtype == torch.float64) and scaled_operands_fit(x, scale)


class TernaryQuant(jit.ScriptModule):
    """forward(x) -> (y, scale, zero_point, bit_width), with scale = scaling_impl(x) and
    elements whose magnitude is at most threshold * scale set to zero."""

    __constants__ = ["threshold"]

    def __init__(
        self, scaling_impl: Module, threshold: float, quant_delay_steps: Optional[int] = None
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        check_module(owner, "scaling_impl", scaling_impl)
        # A negative threshold would keep every element (nothing ever rounds to zero), NaN would
        # zero them all: both silently stop being ternary.
        if (
            isinstance(threshold, bool)
            or not isinstance(threshold, (int, float))
            or not math.isfinite(threshold)
            or threshold < 0
        ):
            raise ValueError(
                f"{owner}: threshold must be a finite number >= 0 (a fraction of the scale, e.g. "
                f"0.5), got {threshold!r}"
            )
        check_quant_delay_steps(owner, quant_delay_steps)
        self.scaling_impl = scaling_impl
        self.threshold = float(threshold)
        self.bit_width = StatelessBuffer(torch.tensor(2.0))
        self.zero_point = StatelessBuffer(torch.tensor(0.0))
        self.delay_wrapper = DelayWrapper(quant_delay_steps)

    @jit.script_method
    def forward(self, x: Tensor) -> QuantBlockOutput:
        scale = self.scaling_impl(x)
        if _ternary_fusable(x, scale):
            y = ternary_quant(x, scale, self.threshold)
        else:
            mask = x.abs().gt(self.threshold * scale)
            y = mask.float() * ternary_sign_ste(x)
            y = y * scale
        y = self.delay_wrapper(x, y)
        return y, scale, self.zero_point(), self.bit_width()
