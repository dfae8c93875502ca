"""Constant bit-widths, with or without a place in the state_dict, and the MSB-clamp block
that lowers an incoming bit-width by a (constant or learned) number of bits."""

import numbers
from typing import Optional

import torch
from torch import Tensor
from torch.nn import Module

from brevitas_cpp import jit
from brevitas_cpp.core._checks import checked_module
from brevitas_cpp.core._state_dict import KeyPolicy
from brevitas_cpp.core.utils import StatelessBuffer
from brevitas_cpp.function.ops_ste import tensor_clamp_ste

__all__ = ["BitWidthConst", "BitWidthStatefulConst", "MAX_BIT_WIDTH", "MsbClampBitWidth"]

# The widest integer grid the ops take (a loaded bit width above it is refused).
MAX_BIT_WIDTH = 32


def _checked_bit_width(owner: str, arg: str, bit_width, minimum: int = 1) -> int:
    """An integer bit-width >= minimum (bools are rejected: True is not a bit-width)."""
    if isinstance(bit_width, bool) or not isinstance(bit_width, numbers.Integral):
        raise TypeError(f"{owner}: {arg} must be an int, got {bit_width!r}")
    if bit_width < minimum:
        raise ValueError(f"{owner}: {arg} must be >= {minimum}, got {bit_width}")
    return int(bit_width)


class BitWidthConst(jit.ScriptModule):
    """A constant bit-width as a float tensor, e.g. BitWidthConst(8)() == tensor(8.).

    It is derived from the quantizer's settings, so it is not saved in the state_dict."""

    def __init__(
        self,
        bit_width: int,
        dtype: Optional[torch.dtype] = None,
        device: Optional[torch.device] = None,
    ) -> None:
        super().__init__()
        bit_width = _checked_bit_width(type(self).__name__, "bit_width", bit_width)
        self.bit_width = StatelessBuffer(torch.tensor(float(bit_width), dtype=dtype, device=device))

    @jit.script_method
    def forward(self) -> Tensor:
        # StatelessBuffer's forward, inlined: one module call fewer per quantizer call.
        return self.bit_width.value


class BitWidthStatefulConst(KeyPolicy, jit.ScriptModule):
    """A constant bit-width as a float tensor kept as the buffer "bit_width", so that it is saved
    with (and restored from) a checkpoint."""

    INIT_KEPT_KEYS = ("bit_width",)

    def _refusal(self, name: str, value: Tensor) -> Optional[str]:
        if name == "bit_width" and not (
            value.numel() == 1 and float(value) in range(1, MAX_BIT_WIDTH + 1)
        ):
            return f"must be a whole number of bits in [1, {MAX_BIT_WIDTH}], got {value.tolist()}"
        return super()._refusal(name, value)

    def __init__(
        self,
        bit_width: int,
        dtype: Optional[torch.dtype] = None,
        device: Optional[torch.device] = None,
    ) -> None:
        super().__init__()
        bit_width = _checked_bit_width(type(self).__name__, "bit_width", bit_width)
        self.register_buffer(
            "bit_width", torch.tensor(float(bit_width), dtype=dtype, device=device)
        )

    @jit.script_method
    def forward(self) -> Tensor:
        return self.bit_width


class MsbClampBitWidth(jit.ScriptModule):
    """|input_bit_width - bit_width_to_remove_impl()| clamped to
    [min_overall_bit_width, max_overall_bit_width], with a straight-through gradient."""

    def __init__(
        self,
        bit_width_to_remove_impl: Module,
        min_overall_bit_width: int,
        max_overall_bit_width: int,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        checked_module(owner, "bit_width_to_remove_impl", bit_width_to_remove_impl)
        low = _checked_bit_width(owner, "min_overall_bit_width", min_overall_bit_width)
        high = _checked_bit_width(owner, "max_overall_bit_width", max_overall_bit_width)
        if low > high:
            raise ValueError(
                f"{owner}: min_overall_bit_width ({low}) must be <= max_overall_bit_width ({high})"
            )
        self.min_overall_bit_width = BitWidthConst(low)
        self.max_overall_bit_width = BitWidthConst(high)
        self.bit_width_to_remove_impl = bit_width_to_remove_impl

    @jit.script_method
    def forward(self, input_bit_width: Tensor) -> Tensor:
        bit_width_to_remove = self.bit_width_to_remove_impl()
        output_bit_width = torch.abs(input_bit_width - bit_width_to_remove)
        return tensor_clamp_ste(
            output_bit_width, self.min_overall_bit_width(), self.max_overall_bit_width()
        )
