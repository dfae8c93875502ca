"""Brevitas's ``functional_quantization_mode``: functional calls of a model routed to modules.

``functional_quantization_mode(model, {F.scaled_dot_product_attention: ScaledDotProductAttention})``
adds one module per mapped function to the model (a child named ``str(function)``, unless the
model has that attribute already), and while the mode is on every call of the function, from
any code, runs that child instead, with the call's arguments (Brevitas routes any function
whose name the model has as an attribute; here the mapped functions). After ``Quantizer`` (or a
replacement factory) has replaced the child by its quant counterpart, the same mode makes the
model's attention calls quantized ones, as Brevitas's LLM flow does. As in Brevitas, one child
serves every call of its function: the calls of all layers share its quantizers.

Where Brevitas is silent: a map that is not ``{callable: nn.Module subclass}`` raises on
construction, and a mode left with none of its functions called (the model calls the function
under another name, or not at all) raises on exit, since nothing was routed.
"""

from typing import Any, Callable, Dict, Mapping, Optional, Type

from torch import nn
from torch.overrides import TorchFunctionMode

__all__ = ["functional_quantization_mode"]


class functional_quantization_mode(TorchFunctionMode):  # noqa: N801 (Brevitas's name)
    """Routes the mapped functions' calls to the model's children while on (see the module
    docstring); ``enabled=False`` adds the children but routes nothing."""

    def __init__(
        self,
        model: nn.Module,
        quant_map: Mapping[Callable[..., Any], Type[nn.Module]],
        enabled: bool = True,
    ) -> None:
        super().__init__()
        if not isinstance(model, nn.Module):
            raise TypeError(
                f"functional_quantization_mode: model must be an nn.Module, got "
                f"{type(model).__name__}"
            )
        if not isinstance(quant_map, Mapping) or not quant_map:
            raise ValueError(
                "functional_quantization_mode: quant_map must map functions to module classes, "
                f"e.g. {{F.scaled_dot_product_attention: ScaledDotProductAttention}}, got "
                f"{quant_map!r}"
            )
        for function, module_class in quant_map.items():
            if not callable(function):
                raise TypeError(
                    f"functional_quantization_mode: quant_map key {function!r} is not a function"
                )
            if not (isinstance(module_class, type) and issubclass(module_class, nn.Module)):
                raise TypeError(
                    f"functional_quantization_mode: quant_map[{function!r}] must be an nn.Module "
                    f"class to instantiate, got {module_class!r}"
                )
        self.model = model
        self.quant_map = dict(quant_map)
        self.enabled = enabled
        for function, module_class in self.quant_map.items():
            if not hasattr(model, str(function)):
                model.add_module(str(function), module_class())
        # Looked up by the function, not by getattr(model, str(func)) on every torch call as
        # Brevitas does: torch.compile can not trace an attribute name with dots in it.
        self._names: Dict[Callable[..., Any], str] = {f: str(f) for f in self.quant_map}
        self._routed = False

    def __enter__(self) -> "functional_quantization_mode":
        self._routed = False
        return super().__enter__()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = self._names.get(func) if self.enabled else None
        module: Optional[nn.Module] = None
        if name is not None:
            module = self.model._modules.get(name)
        if module is None:
            return func(*args, **kwargs)
        # The mode is off inside its own handler, so the module's own call of func is plain.
        self._routed = True
        return module(*args, **kwargs)

    def __exit__(self, exc_type, exc_value, traceback) -> None:
        super().__exit__(exc_type, exc_value, traceback)
        if exc_type is None and self.enabled and not self._routed:
            names = ", ".join(str(function) for function in self.quant_map)
            raise RuntimeError(
                f"functional_quantization_mode: no call of {names} was made while the mode was "
                f"on, so nothing was routed to the model's modules; the model computes it by "
                f"another function (transformers: attn_implementation='sdpa' calls "
                f"F.scaled_dot_product_attention), or nothing ran"
            )
