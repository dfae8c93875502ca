"""Bit widths weighted by size (Brevitas's ``brevitas.loss.weighted_bit_width``).

Each regulariser hooks the modules whose bit width is learned (a ``BitWidthParameter``) and, on
every forward, records ``count * bit_width`` and adds ``count`` to a total, so ``retrieve()`` is
the bit width averaged over elements (weights: every element; activations: per sample) or over
millions of operations (quant layers' outputs). The recorded bit widths keep their graph, so the
average is a loss term whose gradient reaches the bit-width parameters."""

import math
from typing import Any, List, Sequence, Tuple, Type, Union

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from brevitas_cpp.nn import QuantConv2d, QuantLinear
from brevitas_cpp.quant_tensor import QuantTensor
from brevitas_cpp.utils.quant_utils import *  # noqa: F403  (re-exported, as in Brevitas)
from brevitas_cpp.utils.quant_utils import (
    has_learned_activation_bit_width,
    has_learned_weight_bit_width,
)

__all__ = [
    "MEGA",
    "ActivationBitWidthWeightedBySize",
    "BitWidthWeighted",
    "QuantLayerOutputBitWidthWeightedByOps",
    "WeightBitWidthWeightedBySize",
    "has_learned_activation_bit_width",
    "has_learned_weight_bit_width",
]

# Brevitas's constant, as written there: 10e6 is ten million, not one million. Kept, so that
# the loss has Brevitas's magnitude.
MEGA = 10e6


class BitWidthWeighted:
    """Collects ``count * bit_width`` per hooked call; ``register_hooks`` decides what is hooked
    and what is counted."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.weighted_bit_width_list: List[torch.Tensor] = []
        self.tot_num_elements: Union[int, float] = 0
        self._hook_handles: List[RemovableHandle] = []
        self.register_hooks()

    def register_hooks(self) -> None:
        """Registers the collecting hooks (none here)."""

    def _record(self, count: Union[int, float], weighted: torch.Tensor) -> None:
        self.weighted_bit_width_list.append(weighted)
        self.tot_num_elements += count

    def remove_hooks(self) -> None:
        """Detaches the regulariser from the model (an addition to Brevitas's API)."""
        for handle in self._hook_handles:
            handle.remove()
        self._hook_handles = []

    def zero_accumulated_values(self) -> None:
        """Forgets what was collected (call once per training step, after using the loss)."""
        self.weighted_bit_width_list = []
        self.tot_num_elements = 0

    def retrieve(self, as_average: bool = True) -> Union[torch.Tensor, List[torch.Tensor]]:
        """The weighted average bit width, or with ``as_average=False`` each recorded term
        divided by the total count."""
        if self.tot_num_elements == 0 or not self.weighted_bit_width_list:
            raise RuntimeError("Number of elements to penalize can't be zero")
        if as_average:
            # Python's sum (0 + t0 + t1 + ...), the order Brevitas adds them in.
            return sum(self.weighted_bit_width_list) / self.tot_num_elements
        return [term / self.tot_num_elements for term in self.weighted_bit_width_list]

    def log(self) -> torch.Tensor:
        return self.retrieve(as_average=True).detach().clone()  # type: ignore[union-attr]


class WeightBitWidthWeightedBySize(BitWidthWeighted):
    """Average learned weight bit width, weighted by each weight's number of elements."""

    def register_hooks(self) -> None:
        def hook(module: nn.Module, args: Tuple[Any, ...], output: QuantTensor) -> None:
            num_elements = math.prod(output.value.size())
            self._record(num_elements, num_elements * output.bit_width)

        for module in self.model.modules():
            if has_learned_weight_bit_width(module):
                self._hook_handles.append(module.register_forward_hook(hook))


class ActivationBitWidthWeightedBySize(BitWidthWeighted):
    """Average learned activation bit width, weighted by the elements of one sample (the batch
    dimension is left out)."""

    def register_hooks(self) -> None:
        def hook(module: nn.Module, args: Tuple[Any, ...], output: QuantTensor) -> None:
            num_elements = math.prod(output.value.size()[1:])
            self._record(num_elements, num_elements * output.bit_width)

        for module in self.model.modules():
            if has_learned_activation_bit_width(module):
                self._hook_handles.append(module.register_forward_hook(hook))


class QuantLayerOutputBitWidthWeightedByOps(BitWidthWeighted):
    """Average output (accumulator) bit width of quant layers that return QuantTensors,
    weighted by each layer's operations per sample, in units of ``MEGA``."""

    def __init__(
        self,
        model: nn.Module,
        layer_types: Sequence[Type[nn.Module]] = (QuantConv2d, QuantLinear),
    ) -> None:
        self.layer_types = tuple(layer_types)
        super().__init__(model)

    def register_hooks(self) -> None:
        def hook(module: nn.Module, args: Tuple[Any, ...], output: Any) -> None:
            if isinstance(output, QuantTensor):
                output_size = math.prod(output.size()[1:])
                num_mops = output_size * module.per_elem_ops / MEGA
                self._record(num_mops, output.bit_width * num_mops)

        for module in self.model.modules():
            if (
                isinstance(module, self.layer_types)
                and module.return_quant_tensor
                and module.per_elem_ops is not None
            ):
                self._hook_handles.append(module.register_forward_hook(hook))
