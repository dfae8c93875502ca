"""How the QuantTensor constructors turn their arguments into fields: metadata tensors, flag
tensors and minifloat codes, with errors naming the type and the argument. One home for the
integer, minifloat and groupwise types."""

import numbers
from typing import Any, Optional, Sequence

import torch
from torch import Tensor

__all__: list = []

# The flag tensors built from Python bools. Every quantizer call builds a QuantTensor, so fresh
# torch.tensor(flag) calls (and .item() reads back) would cost dispatcher calls per layer; these
# two are shared instead. Flags stay on the host (see QuantTensor.to) and are never written to,
# so sharing them is safe.
_TRUE_FLAG = torch.tensor(True)
_FALSE_FLAG = torch.tensor(False)


def _as_metadata(owner: str, field: Any, name: str, value: Tensor) -> Tensor:
    """A metadata tensor: tensors as given, Python numbers as float32 on value's device."""
    if isinstance(field, Tensor):
        return field
    if isinstance(field, numbers.Real):
        return torch.tensor(field, dtype=torch.float, device=value.device)
    raise TypeError(
        f"{owner}: {name} must be a Tensor or a real number, got {type(field).__name__} ({field!r})"
    )


def _as_flag(owner: str, flag: Any, name: str) -> Tensor:
    """A flag tensor: tensors as given, Python bools (or 0/1) as a (shared) bool tensor."""
    if isinstance(flag, Tensor):
        return flag
    if isinstance(flag, bool) or (isinstance(flag, int) and flag in (0, 1)):
        return _TRUE_FLAG if flag else _FALSE_FLAG
    raise TypeError(
        f"{owner}: {name} must be a bool or a bool Tensor, got {type(flag).__name__} ({flag!r})"
    )


def _flag_value(flag: Tensor) -> bool:
    """The Python bool of a flag tensor; the shared flags answer without an .item() call."""
    if flag is _TRUE_FLAG:
        return True
    if flag is _FALSE_FLAG:
        return False
    return flag.item()


def _as_codes(owner: str, codes: Any, name: str) -> Optional[Sequence[str]]:
    """inf_values / nan_values: None, or a list or tuple of mantissa bit strings, kept as given."""
    if codes is None:
        return None
    if isinstance(codes, (list, tuple)) and all(isinstance(c, str) for c in codes):
        return codes
    raise TypeError(
        f"{owner}: {name} must be None or a list or tuple of bit strings such as "
        f"('111',), got {type(codes).__name__} ({codes!r})"
    )


def _minifloat_fields(
    owner: str,
    value: Tensor,
    exponent_bit_width: Any,
    mantissa_bit_width: Any,
    exponent_bias: Any,
    saturating: Any,
    inf_values: Any,
    nan_values: Any,
    signed: Any,
    training: Any,
) -> tuple:
    """The minifloat types' fields from exponent_bit_width to training, in their order."""
    return (
        _as_metadata(owner, exponent_bit_width, "exponent_bit_width", value),
        _as_metadata(owner, mantissa_bit_width, "mantissa_bit_width", value),
        _as_metadata(owner, exponent_bias, "exponent_bias", value),
        _as_flag(owner, saturating, "saturating"),
        _as_codes(owner, inf_values, "inf_values"),
        _as_codes(owner, nan_values, "nan_values"),
        _as_flag(owner, signed, "signed"),
        _as_flag(owner, training, "training"),
    )
