"""Distiller's compression scheduler for QAT: training-loop callbacks that drive policies.

The loop calls ``on_epoch_begin(epoch)``, per minibatch ``on_minibatch_begin``,
``before_backward_pass`` (which returns the loss plus the policies' extra losses),
``on_minibatch_end``, then ``on_epoch_end``. Each policy acts from its ``starting_epoch``
until its ``ending_epoch`` (None: to the end), every ``frequency`` epochs:

- ``QuantizationDelay``: quantization off (every quant proxy's ``disable_quant``) before the
  starting epoch, on from it (so no statistics are collected before);
- ``FreezeBatchNorm``: batch norms in eval from the starting epoch (running statistics kept,
  even after ``model.train()``);
- ``FreezeScales``, ``FreezeBitWidths``: the learned scales or bit widths stop training;
- ``BitWidthRamp``: weight or activation bit widths from start_bits down (or up) to end_bits.

``state_dict()`` keeps the epoch and the policies; ``load_state_dict`` checks that the policies
match and applies their state for the loaded epoch, so training resumes where it stopped.
"""

import inspect
from typing import Any, Dict, List, Mapping, Optional, Type

import torch
from torch import Tensor, nn

from brevitas_cpp.core.bit_width import BitWidthStatefulConst
from brevitas_cpp.graph.overrides import check_bit_width
from brevitas_cpp.proxy import ActQuantProxyFromInjectorBase, WeightQuantProxyFromInjectorBase
from brevitas_cpp.proxy.quant_proxy import QuantProxyFromInjector

__all__ = [
    "CompressionScheduler",
    "FreezeBatchNorm",
    "FreezeBitWidths",
    "FreezeScales",
    "BitWidthRamp",
    "Policy",
    "QuantizationDelay",
    "POLICIES",
]


class Policy:
    """One algorithm the scheduler drives; subclasses override the callbacks they need."""

    def __init__(
        self, starting_epoch: int = 0, ending_epoch: Optional[int] = None, frequency: int = 1
    ) -> None:
        name = type(self).__name__
        for what, value in (("starting_epoch", starting_epoch), ("frequency", frequency)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name}: {what} must be a non-negative integer, got {value!r}")
        if frequency < 1:
            raise ValueError(f"{name}: frequency must be at least 1, got {frequency}")
        if ending_epoch is not None and (
            isinstance(ending_epoch, bool)
            or not isinstance(ending_epoch, int)
            or ending_epoch <= starting_epoch
        ):
            raise ValueError(
                f"{name}: ending_epoch must be an integer after starting_epoch "
                f"({starting_epoch}) or None, got {ending_epoch!r}"
            )
        self.starting_epoch = starting_epoch
        self.ending_epoch = ending_epoch
        self.frequency = frequency

    def is_active(self, epoch: int) -> bool:
        if epoch < self.starting_epoch:
            return False
        if self.ending_epoch is not None and epoch >= self.ending_epoch:
            return False
        return (epoch - self.starting_epoch) % self.frequency == 0

    def config(self) -> Dict[str, Any]:
        return {
            "policy": type(self).__name__,
            "starting_epoch": self.starting_epoch,
            "ending_epoch": self.ending_epoch,
            "frequency": self.frequency,
        }

    def on_epoch_begin(self, model: nn.Module, epoch: int) -> None:
        pass

    def on_minibatch_begin(self, model: nn.Module, epoch: int, minibatch: int) -> None:
        pass

    def before_backward_pass(
        self, model: nn.Module, epoch: int, minibatch: int, loss: Tensor
    ) -> Optional[Tensor]:
        """An extra loss term, or None."""
        return None

    def on_minibatch_end(self, model: nn.Module, epoch: int, minibatch: int) -> None:
        pass

    def on_epoch_end(self, model: nn.Module, epoch: int) -> None:
        pass


def _quant_proxies(model: nn.Module) -> List[QuantProxyFromInjector]:
    return [m for m in model.modules() if isinstance(m, QuantProxyFromInjector)]


class QuantizationDelay(Policy):
    """Quantization off before starting_epoch, on from it (ending_epoch and frequency unused:
    once on, it stays on)."""

    def on_epoch_begin(self, model: nn.Module, epoch: int) -> None:
        for proxy in _quant_proxies(model):
            proxy.disable_quant = epoch < self.starting_epoch


class FreezeBatchNorm(Policy):
    """Batch norms in eval mode from starting_epoch: re-applied at every minibatch, since the
    training loop's model.train() puts them back in training mode."""

    def _freeze(self, model: nn.Module, epoch: int) -> None:
        if epoch >= self.starting_epoch:
            for module in model.modules():
                if isinstance(module, nn.modules.batchnorm._BatchNorm):
                    module.eval()

    def on_epoch_begin(self, model: nn.Module, epoch: int) -> None:
        self._freeze(model, epoch)

    def on_minibatch_begin(self, model: nn.Module, epoch: int, minibatch: int) -> None:
        self._freeze(model, epoch)


class _FreezeParameters(Policy):
    """Parameters of the quant proxies whose name contains one of ``markers`` stop training
    from starting_epoch (requires_grad False); before it they train."""

    markers: tuple = ()

    def on_epoch_begin(self, model: nn.Module, epoch: int) -> None:
        for proxy in _quant_proxies(model):
            for name, param in proxy.named_parameters():
                if any(marker in name for marker in self.markers):
                    param.requires_grad_(epoch < self.starting_epoch)


class FreezeScales(_FreezeParameters):
    markers = ("scaling_impl",)


class FreezeBitWidths(_FreezeParameters):
    markers = ("bit_width_impl",)


class BitWidthRamp(Policy):
    """The bit width of the weight (target="weights") or activation (target="activations")
    quantizers goes from start_bits at starting_epoch to end_bits at ending_epoch - 1, in
    rounded linear steps, and stays there. The quantizers need a bit width that can change in
    place (bit_width_impl_type="stateful_const", a buffer saved with the checkpoint)."""

    def __init__(
        self,
        starting_epoch: int,
        ending_epoch: int,
        start_bits: int,
        end_bits: int,
        target: str = "weights",
    ) -> None:
        if ending_epoch is None:
            raise ValueError("BitWidthRamp: ending_epoch must be given (the end of the ramp)")
        super().__init__(starting_epoch, ending_epoch)
        check_bit_width(start_bits, "BitWidthRamp: start_bits")
        check_bit_width(end_bits, "BitWidthRamp: end_bits")
        if target not in ("weights", "activations"):
            raise ValueError(
                f"BitWidthRamp: target must be 'weights' or 'activations', got {target!r}"
            )
        self.start_bits, self.end_bits, self.target = start_bits, end_bits, target

    def config(self) -> Dict[str, Any]:
        config = super().config()
        del config["frequency"]
        return {
            **config,
            "start_bits": self.start_bits,
            "end_bits": self.end_bits,
            "target": self.target,
        }

    def bits_at(self, epoch: int) -> int:
        steps = max(self.ending_epoch - 1 - self.starting_epoch, 1)
        fraction = min(max((epoch - self.starting_epoch) / steps, 0.0), 1.0)
        return round(self.start_bits + (self.end_bits - self.start_bits) * fraction)

    def on_epoch_begin(self, model: nn.Module, epoch: int) -> None:
        kind = (
            WeightQuantProxyFromInjectorBase
            if self.target == "weights"
            else ActQuantProxyFromInjectorBase
        )
        blocks = [
            block
            for proxy in _quant_proxies(model)
            if isinstance(proxy, kind)
            for block in proxy.modules()
            if isinstance(block, BitWidthStatefulConst)
        ]
        if not blocks:
            raise RuntimeError(
                f"BitWidthRamp: no {self.target} quantizer of the model has a bit width that "
                f"can change in place; build them with bit_width_impl_type='stateful_const'"
            )
        with torch.no_grad():
            for block in blocks:
                block.bit_width.fill_(self.bits_at(epoch))


POLICIES: Dict[str, Type[Policy]] = {
    cls.__name__: cls
    for cls in (QuantizationDelay, FreezeBatchNorm, FreezeScales, FreezeBitWidths, BitWidthRamp)
}


class CompressionScheduler:
    """Calls the policies from the training loop (see the module docstring)."""

    def __init__(self, model: nn.Module, policies: Optional[List[Policy]] = None) -> None:
        self.model = model
        self.policies: List[Policy] = []
        self.epoch: Optional[int] = None
        for policy in policies or []:
            self.add_policy(policy)

    @classmethod
    def from_config(
        cls, model: nn.Module, policies: List[Mapping[str, Any]]
    ) -> "CompressionScheduler":
        """Policies from config entries such as {"policy": "FreezeBatchNorm", "starting_epoch": 3}."""
        built = []
        for i, entry in enumerate(policies):
            entry = dict(entry)
            name = entry.pop("policy", None)
            if name not in POLICIES:
                raise ValueError(
                    f"policies[{i}]: unknown policy {name!r}; accepted: {', '.join(POLICIES)}"
                )
            try:
                built.append(POLICIES[name](**entry))
            except TypeError as exc:
                accepted = ["policy", *list(inspect.signature(POLICIES[name]).parameters)]
                raise ValueError(
                    f"policies[{i}] ({name}): {exc}; accepted keys: {', '.join(accepted)}"
                ) from exc
        return cls(model, built)

    def add_policy(self, policy: Policy) -> None:
        if not isinstance(policy, Policy):
            raise TypeError(f"CompressionScheduler: expected a Policy, got {type(policy).__name__}")
        self.policies.append(policy)

    def _active(self, epoch: int) -> List[Policy]:
        return [p for p in self.policies if p.is_active(epoch)]

    def on_epoch_begin(self, epoch: int) -> None:
        self.epoch = epoch
        # Every policy sees every epoch begin: the delays and freezes hold state by epoch.
        for policy in self.policies:
            policy.on_epoch_begin(self.model, epoch)

    def on_minibatch_begin(self, epoch: int, minibatch: int = 0) -> None:
        for policy in self.policies:
            policy.on_minibatch_begin(self.model, epoch, minibatch)

    def before_backward_pass(self, epoch: int, minibatch: int, loss: Tensor) -> Tensor:
        """The loss plus the active policies' extra losses."""
        for policy in self._active(epoch):
            extra = policy.before_backward_pass(self.model, epoch, minibatch, loss)
            if extra is not None:
                loss = loss + extra
        return loss

    def on_minibatch_end(self, epoch: int, minibatch: int = 0) -> None:
        for policy in self._active(epoch):
            policy.on_minibatch_end(self.model, epoch, minibatch)

    def on_epoch_end(self, epoch: int) -> None:
        for policy in self._active(epoch):
            policy.on_epoch_end(self.model, epoch)

    def state_dict(self) -> Dict[str, Any]:
        return {"epoch": self.epoch, "policies": [p.config() for p in self.policies]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Check that the policies are the ones saved, and apply them for the saved epoch."""
        saved = list(state.get("policies", []))
        mine = [p.config() for p in self.policies]
        if saved != mine:
            raise ValueError(
                f"CompressionScheduler.load_state_dict: the checkpoint's policies {saved} are not "
                f"this scheduler's {mine}"
            )
        self.epoch = state.get("epoch")
        if self.epoch is not None:
            self.on_epoch_begin(self.epoch)
