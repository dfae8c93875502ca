"""Distiller's own learning-rate schedulers (distiller/learning_rate.py), which its schedules name
beside torch's: a schedule's ``PolynomialLR`` is Distiller's (T_max, power), not torch's.

Both are closed forms of the epoch, so Distiller's ``step(epoch)`` jumps straight to an epoch.
"""

from bisect import bisect_right
from typing import List, Sequence

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

__all__ = ["MultiStepMultiGammaLR", "PolynomialLR"]


class MultiStepMultiGammaLR(LRScheduler):
    """MultiStepLR with one gamma per milestone: from milestone i on, the learning rate is the
    base rate times gammas[0] * ... * gammas[i]."""

    def __init__(
        self,
        optimizer: Optimizer,
        milestones: Sequence[int],
        gammas: Sequence[float],
        last_epoch: int = -1,
    ) -> None:
        milestones, gammas = list(milestones), list(gammas)
        if milestones != sorted(milestones):
            raise ValueError(
                f"MultiStepMultiGammaLR: milestones must be increasing epochs, got {milestones}"
            )
        if len(milestones) != len(gammas):
            raise ValueError(
                f"MultiStepMultiGammaLR: one gamma per milestone, got {len(milestones)} "
                f"milestones and {len(gammas)} gammas"
            )
        self.milestones = milestones
        self.cumulative_gammas = [1.0]
        for gamma in gammas:
            self.cumulative_gammas.append(self.cumulative_gammas[-1] * gamma)
        super().__init__(optimizer, last_epoch)

    def _get_closed_form_lr(self) -> List[float]:
        factor = self.cumulative_gammas[bisect_right(self.milestones, self.last_epoch)]
        return [base_lr * factor for base_lr in self.base_lrs]

    def get_lr(self) -> List[float]:
        return self._get_closed_form_lr()


class PolynomialLR(LRScheduler):
    """lr = base_lr * (1 - epoch / T_max) ** power (Distiller's PolynomialLR)."""

    def __init__(
        self, optimizer: Optimizer, T_max: int, power: float, last_epoch: int = -1
    ) -> None:
        if isinstance(T_max, bool) or not isinstance(T_max, int) or T_max < 1:
            raise ValueError(f"PolynomialLR: T_max must be a positive integer, got {T_max!r}")
        self.T_max, self.power = T_max, power
        super().__init__(optimizer, last_epoch)

    def _get_closed_form_lr(self) -> List[float]:
        return [
            base_lr * (1 - self.last_epoch / self.T_max) ** self.power for base_lr in self.base_lrs
        ]

    def get_lr(self) -> List[float]:
        return self._get_closed_form_lr()
