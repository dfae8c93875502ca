"""Construction-time argument checks shared by the quantizer blocks. Each error names the
block, the argument, the value received and what is accepted."""

import numbers
from typing import Any, Optional, Tuple

from brevitas_cpp.core._checks import checked_module


def check_bool(owner: str, name: str, value: Any) -> None:
    """value must be a Python bool (it becomes a TorchScript constant)."""
    if not isinstance(value, bool):
        raise TypeError(
            f"{owner}: {name} must be a bool (True or False), got {value!r} of type "
            f"{type(value).__name__}"
        )


def check_module(owner: str, name: str, value: Any) -> None:
    """value must be a block: a torch.nn.Module, or another callable (see core._checks.is_block)."""
    checked_module(owner, name, value)


def check_quant_delay_steps(owner: str, quant_delay_steps: Optional[int]) -> None:
    """quant_delay_steps must be an int or None (None or <= 0 means no delay)."""
    # bool is an int subclass; True as a step count is almost certainly a wiring mistake.
    if quant_delay_steps is not None and (
        isinstance(quant_delay_steps, bool) or not isinstance(quant_delay_steps, int)
    ):
        raise TypeError(
            f"{owner}: quant_delay_steps must be an int (or None for no delay), got "
            f"{quant_delay_steps!r} of type {type(quant_delay_steps).__name__}"
        )


def check_int(
    owner: str,
    name: str,
    value: Any,
    what: str,
    low: Optional[int] = None,
    high: Optional[int] = None,
) -> int:
    """value must be an int (not a bool) in [low, high] (None: unbounded on that side); what
    says what the number means."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{owner}: {name} must be an int ({what}), got {value!r} of type {type(value).__name__}"
        )
    if (low is not None and value < low) or (high is not None and value > high):
        bound = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{owner}: {name} must be {bound} ({what}), got {value!r}")
    return int(value)


def check_open_unit_interval(owner: str, name: str, value: Any, what: str) -> float:
    """value must be a real number strictly between 0 and 1 (NaN fails the comparison)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{owner}: {name} must be a float in (0, 1) ({what}), got {value!r} of type "
            f"{type(value).__name__}"
        )
    if not 0.0 < float(value) < 1.0:
        raise ValueError(
            f"{owner}: {name} must be in the open interval (0, 1) ({what}), got {value!r}"
        )
    return float(value)


def check_choice(owner: str, name: str, value: Any, choices: Tuple[str, ...]) -> str:
    """value must name one of choices (case-insensitive); returns it lower-cased."""
    if isinstance(value, str) and value.lower() in choices:
        return value.lower()
    accepted = ", ".join(repr(c) for c in choices)
    raise ValueError(f"{owner}: {name} must be one of {accepted}, got {value!r}")
