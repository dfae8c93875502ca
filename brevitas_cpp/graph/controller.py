"""NNCF's controller for brevitas_cpp.graph: what owns the quantizers of a prepared model.

``QuantizationController(model, scheduler)`` reports ``statistics()`` (each quantizer's bit
width and scale, and the fraction of quant layers whose weights and activations are quantized),
gives the training loop a ``loss()`` (the mean bit width of the weights, weighted by their
element counts: differentiable where bit widths are learned, a constant otherwise, so that a
coefficient times it trades accuracy for size), and keeps the scheduler's state with its own in
``state_dict``.
"""

from typing import Any, Dict, List, Mapping, Optional

import torch
from torch import Tensor, nn

from brevitas_cpp.graph.scheduler import CompressionScheduler
from brevitas_cpp.nn.mixin import QuantLayerMixin, QuantWeightMixin
from brevitas_cpp.proxy.quant_proxy import QuantProxyFromInjector

__all__ = ["QuantizationController"]


class QuantizationController:
    def __init__(self, model: nn.Module, scheduler: Optional[CompressionScheduler] = None) -> None:
        self.model = model
        self.scheduler = scheduler if scheduler is not None else CompressionScheduler(model)

    def _weight_layers(self) -> List[Any]:
        return [
            (name, m)
            for name, m in self.model.named_modules()
            if isinstance(m, QuantWeightMixin) and m.weight_quant.is_quant_enabled
        ]

    def loss(self) -> Tensor:
        """Mean weight bit width, weighted by element counts (see the module docstring)."""
        total, count = None, 0
        for _, layer in self._weight_layers():
            bits = layer.quant_weight().bit_width
            numel = layer.weight.numel()
            term = bits * numel
            total = term if total is None else total + term
            count += numel
        if total is None:
            return torch.zeros(())
        return total / count

    def statistics(self) -> Dict[str, Any]:
        quantizers = []
        for name, module in self.model.named_modules():
            if not isinstance(module, QuantProxyFromInjector) or not module.is_quant_enabled:
                continue
            entry: Dict[str, Any] = {"name": name, "kind": type(module).__name__}
            with torch.no_grad():
                for what in ("bit_width", "scale"):
                    reader = getattr(module, what, None)
                    try:
                        value = reader() if reader is not None else None
                    except RuntimeError:  # a dynamic quantizer has no scale of its own
                        value = None
                    if value is not None:
                        entry[what] = value.detach().flatten().tolist()
            quantizers.append(entry)
        layers = [m for m in self.model.modules() if isinstance(m, QuantLayerMixin)]
        quantized = [m for m in layers if any(p.is_quant_enabled for p in _own_proxies(m))]
        return {
            "quantizers": quantizers,
            "quant_layers": len(layers),
            "fraction_quantized": len(quantized) / len(layers) if layers else 0.0,
            "weight_bit_width_loss": float(self.loss()),
        }

    def state_dict(self) -> Dict[str, Any]:
        return {"scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.scheduler.load_state_dict(state["scheduler"])


def _own_proxies(layer: nn.Module) -> List[QuantProxyFromInjector]:
    return [m for m in layer.children() if isinstance(m, QuantProxyFromInjector)]
