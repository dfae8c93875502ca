"""Construction-time argument checks shared by the quantizer blocks. Each error names the
block, the argument, the value received and what is accepted."""

from typing import Any, Optional

import torch


def check_bool(owner: str, name: str, value: Any) -> None:
    """value must be a Python bool (it becomes a TorchScript constant)."""
    if not isinstance(value, bool):
        raise TypeError(
            f"{owner}: {name} must be a bool (True or False), got {value!r} of type "
            f"{type(value).__name__}"
        )


def check_module(owner: str, name: str, value: Any) -> None:
    """value must be a torch.nn.Module (it is registered and called as a submodule)."""
    if not isinstance(value, torch.nn.Module):
        raise TypeError(
            f"{owner}: {name} must be a torch.nn.Module, got {value!r} of type "
            f"{type(value).__name__}"
        )


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
