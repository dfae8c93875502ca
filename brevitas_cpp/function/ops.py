"""TorchScript-compatible helpers with Brevitas's formulas (not straight-through)."""

from typing import Union

import torch
from torch import Tensor


def _as_bool_tensor(flag: Union[bool, Tensor], like: Tensor) -> Tensor:
    if isinstance(flag, Tensor):
        return flag.to(device=like.device, dtype=torch.bool)
    return torch.tensor(flag, device=like.device)


def max_int(signed: Union[bool, Tensor], narrow_range: Union[bool, Tensor], bit_width: Tensor) -> Tensor:
    """Largest integer of the range: 2^(b-1)-1 signed, 2^b-1 unsigned (2^b-2 narrow)."""
    if isinstance(signed, bool) and isinstance(narrow_range, bool):
        if not signed and not narrow_range:
            return (2**bit_width) - 1
        if not signed and narrow_range:
            return (2**bit_width) - 2
        return (2 ** (bit_width - 1)) - 1
    # Tensor flags stay on their device (no .item() synchronisation).
    s = _as_bool_tensor(signed, bit_width)
    n = _as_bool_tensor(narrow_range, bit_width)
    unsigned = torch.where(n, (2**bit_width) - 2, (2**bit_width) - 1)
    return torch.where(s, (2 ** (bit_width - 1)) - 1, unsigned)


def min_int(signed: Union[bool, Tensor], narrow_range: Union[bool, Tensor], bit_width: Tensor) -> Tensor:
    """Smallest integer of the range: -2^(b-1) signed (-2^(b-1)+1 narrow), 0 unsigned."""
    if isinstance(signed, bool) and isinstance(narrow_range, bool):
        if signed and narrow_range:
            return -(2 ** (bit_width - 1)) + 1
        if signed and not narrow_range:
            return -(2 ** (bit_width - 1))
        return 0 * bit_width
    s = _as_bool_tensor(signed, bit_width)
    n = _as_bool_tensor(narrow_range, bit_width)
    signed_min = torch.where(n, -(2 ** (bit_width - 1)) + 1, -(2 ** (bit_width - 1)))
    return torch.where(s, signed_min, 0 * bit_width)


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
