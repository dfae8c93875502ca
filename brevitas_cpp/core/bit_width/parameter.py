"""Learned bit-widths: BitWidthParameter learns an offset above a minimum bit-width, and
RemoveBitwidthParameter learns how many bits an MSB clamp removes (through 1 / coefficient, so
the learned quantity can never reach zero)."""

import math
import numbers
from typing import Optional

import torch
from torch import Tensor
from torch.nn import Module, Parameter

from brevitas_cpp import config, jit
from brevitas_cpp.core._state_dict import describe_values
from brevitas_cpp.core.bit_width.const import MAX_BIT_WIDTH
from brevitas_cpp.core.function_wrapper import RoundSte
from brevitas_cpp.core.restrict_val import IntRestrictValue
from brevitas_cpp.function.ops_ste import abs_binary_sign_grad

MIN_INT_BIT_WIDTH = 2
NON_ZERO_EPSILON = 1e-6
REMOVE_ZERO_BIT_WIDTH = 0.1

__all__ = [
    "BitWidthParameter",
    "MIN_INT_BIT_WIDTH",
    "NON_ZERO_EPSILON",
    "REMOVE_ZERO_BIT_WIDTH",
    "RemoveBitwidthParameter",
]


def _offset_refusal(offset: Tensor, bit_width_base: float) -> Optional[str]:
    """Why a checkpoint's bit_width_offset can not be loaded (None: it can). The layer runs at
    round(|offset| + base) bits (Brevitas's |.|: an offset that crossed 0 in training keeps
    learning); a negative offset is taken as what it says, offset + base bits, which must not
    round below min_bit_width (the parameterisation can not express it) nor |offset| + base
    above 32."""
    if not bool(torch.isfinite(offset).all()):
        return f"must be finite, got {describe_values(offset)}"
    signed_bits = float(torch.round(offset.detach().double() + bit_width_base).min())
    run_bits = float(torch.round(offset.detach().double().abs() + bit_width_base).max())
    if signed_bits < bit_width_base:
        return (
            f"gives {signed_bits:g} bits (min_bit_width {bit_width_base:g} + offset "
            f"{describe_values(offset)}), below min_bit_width: this layer can not run it"
        )
    if run_bits > MAX_BIT_WIDTH:
        return f"gives {run_bits:g} bits, above {MAX_BIT_WIDTH}"
    return None


def _checked_int(owner: str, arg: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{owner}: {arg} must be an int, got {value!r}")
    return int(value)


class BitWidthParameter(jit.ScriptModule):
    """A learned bit-width: restrict_bit_width_impl(|offset| + min_bit_width), where offset is
    the parameter "bit_width_offset" (|.| with a sign gradient so it keeps learning at 0) and
    the default restriction rounds to an integer with a straight-through gradient.

    Loading a state_dict accepts a constant "bit_width" key (a checkpoint of a constant
    bit-width) and turns it into the offset; override_pretrained_bit_width keeps the
    initial bit-width instead of the loaded one."""

    __constants__ = ["bit_width_base", "override_pretrained"]

    # The default restriction is stateless, so sharing one instance (as Brevitas) is safe.
    def __init__(
        self,
        bit_width: int,
        min_bit_width: int = MIN_INT_BIT_WIDTH,
        restrict_bit_width_impl: Module = IntRestrictValue(RoundSte()),
        override_pretrained_bit_width: bool = False,
        dtype: Optional[torch.dtype] = None,
        device: Optional[torch.device] = None,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        bit_width = _checked_int(owner, "bit_width", bit_width)
        min_bit_width = _checked_int(owner, "min_bit_width", min_bit_width)
        # RuntimeError, as Brevitas raises for these.
        if min_bit_width < MIN_INT_BIT_WIDTH:
            raise RuntimeError(
                f"{owner}: min_bit_width must be >= {MIN_INT_BIT_WIDTH}, got {min_bit_width}"
            )
        if bit_width < MIN_INT_BIT_WIDTH or bit_width < min_bit_width:
            raise RuntimeError(
                f"{owner}: bit_width must be >= max({MIN_INT_BIT_WIDTH}, min_bit_width="
                f"{min_bit_width}), got {bit_width}"
            )
        if not isinstance(restrict_bit_width_impl, Module) or not hasattr(
            restrict_bit_width_impl, "restrict_init_float"
        ):
            raise TypeError(
                f"{owner}: restrict_bit_width_impl must be a restrict-value module (with "
                f"restrict_init_float), got {restrict_bit_width_impl!r}"
            )
        bit_width_base = restrict_bit_width_impl.restrict_init_float(float(min_bit_width))
        bit_width_init = restrict_bit_width_impl.restrict_init_float(float(bit_width))
        self.bit_width_offset = Parameter(
            torch.tensor(bit_width_init - bit_width_base, dtype=dtype, device=device)
        )
        self.bit_width_base = float(bit_width_base)
        self.restrict_bit_width_impl = restrict_bit_width_impl
        self.override_pretrained = bool(override_pretrained_bit_width)

    @jit.script_method
    def forward(self) -> Tensor:
        bit_width = abs_binary_sign_grad(self.bit_width_offset) + self.bit_width_base
        return self.restrict_bit_width_impl(bit_width)

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        bit_width_key = prefix + "bit_width"
        offset_key = prefix + "bit_width_offset"
        if bit_width_key in state_dict:
            # A checkpoint of a constant bit-width: learn on from the same bit-width.
            if offset_key in state_dict:
                raise RuntimeError(
                    f"{type(self).__name__}: the state_dict has both {bit_width_key!r} and "
                    f"{offset_key!r}; expected only one of them"
                )
            state_dict[offset_key] = state_dict.pop(bit_width_key) - self.bit_width_base
        if self.override_pretrained and offset_key in state_dict:
            del state_dict[offset_key]
        refused = offset_key in state_dict and _offset_refusal(
            state_dict[offset_key], self.bit_width_base
        )
        if refused:
            # torch's load works on a copy of the checkpoint: dropping the entry keeps ours.
            del state_dict[offset_key]
            error_msgs.append(f"{type(self).__name__} at {offset_key!r}: {refused}")
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
        if (
            config.IGNORE_MISSING_KEYS or self.override_pretrained or refused
        ) and offset_key in missing_keys:
            missing_keys.remove(offset_key)


class RemoveBitwidthParameter(jit.ScriptModule):
    """A learned number of bits to remove: 1 / (non_zero_epsilon + |bit_width_coeff|), with the
    parameter "bit_width_coeff" initialised to 1 / bit_width_to_remove (1 / remove_zero_bit_width
    when removing 0 bits, as 1 / 0 cannot be learned from)."""

    __constants__ = ["non_zero_epsilon", "override_pretrained"]

    def __init__(
        self,
        bit_width_to_remove: int,
        override_pretrained_bit_width: bool = False,
        non_zero_epsilon: float = NON_ZERO_EPSILON,
        remove_zero_bit_width: float = REMOVE_ZERO_BIT_WIDTH,
        dtype: Optional[torch.dtype] = None,
        device: Optional[torch.device] = None,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        if (
            isinstance(bit_width_to_remove, bool)
            or not isinstance(bit_width_to_remove, numbers.Real)
            or not math.isfinite(bit_width_to_remove)
        ):
            raise TypeError(
                f"{owner}: bit_width_to_remove must be a number, got {bit_width_to_remove!r}"
            )
        if bit_width_to_remove < 0:
            # RuntimeError, as Brevitas raises for this.
            raise RuntimeError(
                f"{owner}: bit_width_to_remove must be >= 0, got {bit_width_to_remove}"
            )
        if not (
            isinstance(remove_zero_bit_width, numbers.Real)
            and remove_zero_bit_width > 0
            and math.isfinite(remove_zero_bit_width)
        ):
            raise ValueError(
                f"{owner}: remove_zero_bit_width must be a finite number > 0, "
                f"got {remove_zero_bit_width!r}"
            )
        if not (
            isinstance(non_zero_epsilon, numbers.Real)
            and math.isfinite(non_zero_epsilon)
            and non_zero_epsilon >= 0
        ):
            raise ValueError(
                f"{owner}: non_zero_epsilon must be a finite number >= 0, got {non_zero_epsilon!r}"
            )
        removed = remove_zero_bit_width if bit_width_to_remove == 0 else bit_width_to_remove
        self.bit_width_coeff = Parameter(torch.tensor(1 / removed, dtype=dtype, device=device))
        self.non_zero_epsilon = float(non_zero_epsilon)
        self.override_pretrained = bool(override_pretrained_bit_width)

    @jit.script_method
    def forward(self) -> Tensor:
        return 1.0 / (self.non_zero_epsilon + torch.abs(self.bit_width_coeff))

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        coeff_key = prefix + "bit_width_coeff"
        if self.override_pretrained and coeff_key in state_dict:
            del state_dict[coeff_key]
        if coeff_key in state_dict and not bool(torch.isfinite(state_dict[coeff_key]).all()):
            error_msgs.append(
                f"{type(self).__name__} at {coeff_key!r}: must be finite, got "
                f"{describe_values(state_dict.pop(coeff_key))}"
            )
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
        if (config.IGNORE_MISSING_KEYS or self.override_pretrained) and coeff_key in missing_keys:
            missing_keys.remove(coeff_key)
