"""Models built on the ``meta`` device (``with torch.device("meta"):``, or moved there with
``.to("meta")``), then given memory with ``to_empty()``: how large models are built for FSDP.

Two things make that work for quant layers:

* ``apply_keeping_ties``: a quantizer block holds the layer's weight it takes statistics of as a
  parameter of its own (the same Parameter object). Moving to or from ``meta`` makes a new
  Parameter of every occurrence, which would leave the quantizer with a copy of the weight; the
  quant layers' ``_apply`` ties the occurrences back together.
* ``reset_quantizers``: ``to_empty()`` leaves every tensor holding whatever memory held, the
  quantizers' constants (bit widths, thresholds) as much as their state. The quant layers'
  ``reset_parameters`` (after the float weights) and ``load_state_dict`` rebuild the quantizers
  from their settings.
"""

from typing import Callable, Dict, List, Tuple

from torch import nn

from brevitas_cpp.proxy.quant_proxy import QuantProxyFromInjector

__all__ = ["apply_keeping_ties", "reset_quantizers"]


def _occurrences(module: nn.Module) -> Dict[int, List[Tuple[nn.Module, str]]]:
    """Every place below module (itself included) that holds a parameter, by parameter."""
    places: Dict[int, List[Tuple[nn.Module, str]]] = {}
    for sub in module.modules():
        for name, param in sub._parameters.items():
            if param is not None:
                places.setdefault(id(param), []).append((sub, name))
    return places


def apply_keeping_ties(module: nn.Module, apply: Callable[[], nn.Module]) -> nn.Module:
    """apply() (the module's Module._apply), then every group of places that held one parameter
    before holds one again: the first place's (the outermost holder, e.g. the layer's weight)."""
    tied = [places for places in _occurrences(module).values() if len(places) > 1]
    out = apply()
    for places in tied:
        owner, name = places[0]
        param = owner._parameters[name]
        for sub, other in places[1:]:
            if sub._parameters[other] is not param:
                sub._parameters[other] = param
    return out


def reset_quantizers(module: nn.Module) -> None:
    """Rebuild every quantizer (proxy) in module: scales, zero points and statistics as when the
    layer was built, over its current weights, on the device and in the dtype of the tensors it
    held; the same parameter and buffer objects keep the new values (an optimizer built before
    keeps stepping them)."""
    for proxy in module.modules():
        if isinstance(proxy, QuantProxyFromInjector):
            proxy.rebuild_tensor_quant()
