"""Brevitas's ``SimpleBaseLoss``: a regulariser that accumulates a loss in forward hooks."""

from typing import Any, Union

import torch
from torch import nn

__all__ = ["SimpleBaseLoss"]


class SimpleBaseLoss:
    """Base of a hook-collected regulariser: a subclass's ``register_hooks`` adds to
    ``tot_loss`` during forward; ``retrieve()`` is ``tot_loss * reg_coeff``."""

    def __init__(self, model: nn.Module, reg_coeff: float) -> None:
        self.model = model
        self.reg_coeff = reg_coeff
        self.tot_loss: Union[float, torch.Tensor] = 0.0
        self.register_hooks()

    def register_hooks(self) -> None:
        """Registers the hooks that accumulate ``tot_loss`` (none here)."""

    def zero_accumulated_values(self) -> None:
        self.tot_loss = 0.0

    def retrieve(self) -> Any:
        return self.tot_loss * self.reg_coeff

    def log(self) -> torch.Tensor:
        # A tensor is expected (accumulated by the hooks); detached for logging.
        return self.tot_loss.detach().clone() * self.reg_coeff  # type: ignore[union-attr]
