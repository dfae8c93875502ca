"""The size of an integer range as a scale factor, used as the threshold a float range is
divided by: the magnitude of the signed minimum (or the unsigned maximum) for IntScaling, a
power of two for PowerOfTwoIntScaling."""

from typing import Optional, Union

from torch import Tensor

from brevitas_cpp import jit
from brevitas_cpp.function.ops import max_int

__all__ = ["IntScaling", "PowerOfTwoIntScaling"]


def _check_flag(owner: str, arg: str, flag, optional: bool) -> None:
    if (optional and flag is None) or isinstance(flag, bool):
        return
    accepted = "a bool or None" if optional else "a bool"
    raise TypeError(f"{owner}: {arg} must be {accepted}, got {flag!r}")


class IntScaling(jit.ScriptModule):
    """-min_int(bit_width) when signed (2^(b-1), or 2^(b-1)-1 narrow), max_int(bit_width) when
    unsigned (2^b-1, or 2^b-2 narrow). signed is fixed here or given on each call."""

    __constants__ = ["signed", "narrow_range"]

    def __init__(self, narrow_range: bool, signed: Optional[bool] = None) -> None:
        super().__init__()
        owner = type(self).__name__
        _check_flag(owner, "narrow_range", narrow_range, optional=False)
        _check_flag(owner, "signed", signed, optional=True)
        self.signed = signed
        self.narrow_range = narrow_range

    @jit.script_method
    def forward(self, bit_width: Tensor, signed: Optional[Union[bool, Tensor]] = None) -> Tensor:
        is_signed = signed if signed is not None else self.signed
        if is_signed is None:
            raise ValueError(
                "IntScaling: signed is None both at construction and in the call; pass signed"
            )
        # A tensor flag (from a signed_impl) picks the branch, so it becomes a Python bool.
        flag = bool(is_signed.item()) if isinstance(is_signed, Tensor) else is_signed
        if flag:
            # -min_int with fewer negations: -(-(2^(b-1))) is 2^(b-1) exactly, and
            # -(-(2^(b-1)) + 1) is -(1 - 2^(b-1)) exactly (the sign of a zero included), and so
            # are their gradients for a learned bit width (negation is exact).
            if self.narrow_range:
                return -(1 - 2 ** (bit_width - 1))
            return 2 ** (bit_width - 1)
        return max_int(flag, self.narrow_range, bit_width)


class PowerOfTwoIntScaling(jit.ScriptModule):
    """2^(b-1) when signed, 2^b when unsigned (the full range, never narrowed)."""

    __constants__ = ["signed"]

    def __init__(self, signed: Optional[bool] = None) -> None:
        super().__init__()
        _check_flag(type(self).__name__, "signed", signed, optional=True)
        self.signed = signed

    @jit.script_method
    def forward(self, bit_width: Tensor, signed: Optional[Union[bool, Tensor]] = None) -> Tensor:
        is_signed = signed if signed is not None else self.signed
        if is_signed is None:
            raise ValueError(
                "PowerOfTwoIntScaling: signed is None both at construction and in the call; "
                "pass signed"
            )
        flag = bool(is_signed.item()) if isinstance(is_signed, Tensor) else is_signed
        return max_int(flag, False, bit_width) + 1
