"""Distiller's policies of a schedule, on graph.scheduler's Policy: ``quantizer`` and
``lr_scheduler`` entries, each over ``epochs`` or range(starting_epoch, ending_epoch, frequency).

- QuantizationPolicy: Distiller prepares the model when it reads the schedule and, in the
  policy's epochs, re-quantizes the weights after every optimizer step; outside them the forward
  keeps the weights it last quantized. Here weights are quantized in every forward, so from the
  policy's ending_epoch on the quantized layers' float weights (and quantized biases) stop
  training, which keeps them, and so their quantized values, as Distiller's forward sees them.
  A policy that starts after epoch 0 or skips epochs (Distiller: weights quantized once at
  load, then stale until the policy's epochs) is refused.
- LRPolicy: after each of its epochs, ``lr_scheduler.step(epoch + 1)`` as Distiller calls it
  (torch's closed form for that epoch); a ReduceLROnPlateau gets ``metrics[mode]`` from
  on_epoch_end's metrics, as Distiller's training application passes them.
"""

import warnings
from typing import Any, Dict, List, Mapping, Optional, Sequence

import torch
from torch import nn

from brevitas_cpp.graph.quantizer import Quantizer
from brevitas_cpp.graph.scheduler import Policy
from brevitas_cpp.nn.mixin import QuantWeightMixin

__all__ = ["DistillerPolicy", "LRPolicy", "QuantizationPolicy"]


class DistillerPolicy(Policy):
    """A Policy over Distiller's epochs: an explicit list, or starting_epoch, ending_epoch and
    frequency, checked as Distiller's CompressionScheduler.add_policy checks them."""

    def __init__(
        self,
        instance_name: str,
        starting_epoch: Optional[int] = None,
        ending_epoch: Optional[int] = None,
        frequency: Optional[int] = 1,
        epochs: Optional[Sequence[int]] = None,
    ) -> None:
        kind = type(self).__name__
        if epochs is not None:
            if starting_epoch is not None or ending_epoch is not None:
                raise ValueError(
                    f"{kind} {instance_name!r}: give either epochs or starting_epoch/ending_epoch"
                )
            epochs = list(epochs)
            if not epochs or any(
                isinstance(e, bool) or not isinstance(e, int) or e < 0 for e in epochs
            ):
                raise ValueError(
                    f"{kind} {instance_name!r}: epochs must be a non-empty list of non-negative "
                    f"integers, got {epochs!r}"
                )
            super().__init__(min(epochs), max(epochs) + 1, 1)
            self.epochs: Optional[frozenset] = frozenset(epochs)
        else:
            if starting_epoch is None or ending_epoch is None:
                raise ValueError(
                    f"{kind} {instance_name!r}: starting_epoch and ending_epoch are required "
                    f"(or an epochs list)"
                )
            super().__init__(starting_epoch, ending_epoch, frequency)
            if frequency > ending_epoch - starting_epoch:
                raise ValueError(
                    f"{kind} {instance_name!r}: frequency {frequency} exceeds the policy's "
                    f"{ending_epoch - starting_epoch} epochs"
                )
            self.epochs = None
        self.instance_name = instance_name

    def is_active(self, epoch: int) -> bool:
        if self.epochs is not None:
            return epoch in self.epochs
        return super().is_active(epoch)

    def config(self) -> Dict[str, Any]:
        config = {**super().config(), "instance_name": self.instance_name}
        if self.epochs is not None:
            config["epochs"] = sorted(self.epochs)
        return config


class QuantizationPolicy(DistillerPolicy):
    """A prepared quantizer over its epochs (see the module docstring)."""

    def __init__(self, instance_name: str, quantizer: Quantizer, **epochs: Any) -> None:
        super().__init__(instance_name, **epochs)
        _check_from_epoch_zero(self)
        if not quantizer.prepared:
            raise ValueError(f"quantizer policy {instance_name!r}: the quantizer is not prepared")
        self.quantizer = quantizer
        self._weights = _quantized_parameters(quantizer.model)

    @staticmethod
    def check_epochs(instance_name: str, **epochs: Any) -> None:
        """The checks of a quantizer policy's epochs, before the quantizer exists."""
        _check_from_epoch_zero(DistillerPolicy(instance_name, **epochs))

    def on_epoch_begin(self, model: nn.Module, epoch: int) -> None:
        trainable = epoch < self.ending_epoch
        for param in self._weights:
            param.requires_grad_(trainable)

    def config(self) -> Dict[str, Any]:
        return {**super().config(), "quantizer": type(self.quantizer).__name__}


def _check_from_epoch_zero(policy: DistillerPolicy) -> None:
    contiguous = policy.epochs is None or policy.epochs == frozenset(
        range(policy.starting_epoch, policy.ending_epoch)
    )
    if policy.starting_epoch != 0 or policy.frequency != 1 or not contiguous:
        raise ValueError(
            f"quantizer policy {policy.instance_name!r}: a quantizer policy must run every epoch "
            f"from epoch 0 (starting_epoch 0, frequency 1). Distiller prepares the model when it "
            f"reads the schedule and re-quantizes weights only in the policy's epochs, so in the "
            f"others it trains on weights quantized earlier, which brevitas_cpp does not "
            f"reproduce; to delay quantization use brevitas_cpp.graph.QuantizationDelay"
        )


def _quantized_parameters(model: nn.Module) -> List[nn.Parameter]:
    """The float weights of the quant layers whose weights are quantized, and their biases
    where those are quantized."""
    params: List[nn.Parameter] = []
    for module in model.modules():
        if not isinstance(module, QuantWeightMixin) or not module.weight_quant.is_quant_enabled:
            continue
        params.append(module.weight)
        bias_quant = getattr(module, "bias_quant", None)
        if getattr(module, "bias", None) is not None and getattr(
            bias_quant, "is_quant_enabled", False
        ):
            params.append(module.bias)
    return params


class LRPolicy(DistillerPolicy):
    """A learning-rate scheduler stepped after each of its epochs (see the module docstring)."""

    def __init__(self, instance_name: str, lr_scheduler: Any, **epochs: Any) -> None:
        super().__init__(instance_name, **epochs)
        self.lr_scheduler = lr_scheduler
        self.metrics: Optional[Mapping[str, float]] = None

    def on_epoch_end(self, model: nn.Module, epoch: int) -> None:
        with warnings.catch_warnings():
            # step(epoch) is deprecated in torch but is Distiller's call, and still defined.
            warnings.simplefilter("ignore", UserWarning)
            if isinstance(self.lr_scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
                mode = self.lr_scheduler.mode
                if self.metrics is None or mode not in self.metrics:
                    raise ValueError(
                        f"lr_scheduler {self.instance_name!r} (ReduceLROnPlateau, mode {mode!r}) "
                        f"needs on_epoch_end(epoch, metrics={{{mode!r}: value}})"
                    )
                self.lr_scheduler.step(self.metrics[mode], epoch=epoch + 1)
            else:
                self.lr_scheduler.step(epoch + 1)

    def config(self) -> Dict[str, Any]:
        return {**super().config(), "lr_scheduler": type(self.lr_scheduler).__name__}
