"""TorchScript-compatible helpers with Brevitas's formulas (not straight-through)."""

from typing import Optional, Union

import torch
from torch import Tensor


def _as_bool_tensor(flag: Union[bool, Tensor], like: Tensor) -> Tensor:
    if isinstance(flag, Tensor):
        return flag.to(device=like.device, dtype=torch.bool)
    return torch.tensor(flag, device=like.device)


def _python_flag(flag: Union[bool, Tensor]) -> Optional[bool]:
    """flag when it is a Python bool, None for a tensor. Callers refine this Optional instead of
    the Union itself: TorchScript's serialized code of a Union refined across an early return
    does not compile back (torch.jit.load fails with "set to type bool in the true branch and
    type Tensor in the false branch")."""
    if isinstance(flag, bool):
        return flag
    return None


def max_int(
    signed: Union[bool, Tensor], narrow_range: Union[bool, Tensor], bit_width: Tensor
) -> Tensor:
    """Largest integer of the range: 2^(b-1)-1 signed, 2^b-1 unsigned (2^b-2 narrow)."""
    s_flag, n_flag = _python_flag(signed), _python_flag(narrow_range)
    if s_flag is not None:
        if n_flag is not None:
            if not s_flag and not n_flag:
                return (2**bit_width) - 1
            if not s_flag and n_flag:
                return (2**bit_width) - 2
            return (2 ** (bit_width - 1)) - 1
    # Tensor flags stay on their device (no .item() synchronisation).
    s = _as_bool_tensor(signed, bit_width)
    n = _as_bool_tensor(narrow_range, bit_width)
    unsigned = torch.where(n, (2**bit_width) - 2, (2**bit_width) - 1)
    return torch.where(s, (2 ** (bit_width - 1)) - 1, unsigned)


def min_int(
    signed: Union[bool, Tensor], narrow_range: Union[bool, Tensor], bit_width: Tensor
) -> Tensor:
    """Smallest integer of the range: -2^(b-1) signed (-2^(b-1)+1 narrow), 0 unsigned."""
    s_flag, n_flag = _python_flag(signed), _python_flag(narrow_range)
    if s_flag is not None:
        if n_flag is not None:
            if s_flag and n_flag:
                return -(2 ** (bit_width - 1)) + 1
            if s_flag and not n_flag:
                return -(2 ** (bit_width - 1))
            return 0 * bit_width
    s = _as_bool_tensor(signed, bit_width)
    n = _as_bool_tensor(narrow_range, bit_width)
    signed_min = torch.where(n, -(2 ** (bit_width - 1)) + 1, -(2 ** (bit_width - 1)))
    return torch.where(s, signed_min, 0 * bit_width)


def get_upper_bound_on_l1_norm(
    accumulator_bit_width: Tensor, input_bit_width: Tensor, input_is_signed: bool
) -> Tensor:
    """A2Q's bound T on the L1 norm of a channel's integer weights that no P-bit accumulator of
    N-bit inputs overflows under: (2^(P-1) - 1) * 2^(signed - N), i.e. the largest accumulator
    magnitude over the largest input magnitude (2^(N-1) signed, 2^N unsigned)."""
    signed = float(input_is_signed)  # 1. if signed else 0.
    max_accumulator_mag = pow(2.0, accumulator_bit_width - 1.0) - 1.0  # 2^(P-1) - 1
    max_input_mag_inverse = pow(2.0, signed - input_bit_width)
    return max_accumulator_mag * max_input_mag_inverse


def binary_sign(x: Tensor) -> Tensor:
    """+1 for x >= 0, -1 otherwise (NaN gives -1, as Brevitas)."""
    positive_mask = torch.ge(x, 0.0)
    return positive_mask.to(x.dtype) * 2.0 - 1.0


def round_to_zero(x: Tensor) -> Tensor:
    """sign(x) * floor(|x|)."""
    return torch.sign(x) * torch.floor(torch.abs(x))


def dpu_round(x: Tensor) -> Tensor:
    """Round half to even, except a negative x.5 rounds up."""
    return torch.where((x < 0.0) & (x - torch.floor(x) == 0.5), torch.ceil(x), torch.round(x))


def tensor_clamp(x: Tensor, min_val: Tensor, max_val: Tensor) -> Tensor:
    """Clamp to tensor bounds, differentiable in x and both bounds."""
    out = torch.where(x > max_val, max_val.type_as(x), x)
    out = torch.where(out < min_val, min_val.type_as(out), out)
    return out


def tensor_clamp_(x: Tensor, min_val: Tensor, max_val: Tensor) -> Tensor:
    """In-place tensor_clamp (not differentiable)."""
    torch.min(x, max_val, out=x)
    torch.max(x, min_val, out=x)
    return x


def identity(x: Tensor) -> Tensor:
    """x."""
    return x


def compute_max_mantissa(mantissa_bit_width: Tensor) -> Tensor:
    """The largest significand of m mantissa bits, 1.11...1 = 2 - 2^-m (as Brevitas: a sum of
    powers of two, exact in float32)."""
    return torch.sum(2.0 ** torch.arange(0, -1.0 * mantissa_bit_width - 1.0, -1.0))


def max_float(exponent_bit_width: Tensor, max_mantissa: Tensor, exponent_bias: Tensor) -> Tensor:
    """The largest value of a minifloat format whose top exponent code is a normal one:
    max_mantissa * 2^(2^e - 1 - bias)."""
    max_exponent = (2.0**exponent_bit_width) - 1.0 - exponent_bias
    return max_mantissa * (2**max_exponent)
