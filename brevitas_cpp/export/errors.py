"""What export raises when a model can not be written as QCDQ, and how it names the layer."""

from typing import Dict

from torch import nn

__all__ = ["ExportError", "module_names", "describe_proxy"]


class ExportError(RuntimeError):
    """A part of the model that export can not represent; the message names the layer and the
    quantizer, says why, and what to change."""


def module_names(model: nn.Module) -> Dict[int, str]:
    """id(module) -> its first qualified name in model ('' for the model itself)."""
    names: Dict[int, str] = {}
    for name, module in model.named_modules(remove_duplicate=False):
        names.setdefault(id(module), name)
    return names


def describe_proxy(names: Dict[int, str], proxy: nn.Module) -> str:
    """How errors name a quantizer: its layer(s) and its attribute, e.g.
    "QuantConv2d 'features.0', weight_quant" ('<model>' for the model itself)."""
    proxy_name = names.get(id(proxy), type(proxy).__name__)
    attr = proxy_name.rpartition(".")[2]
    layers = getattr(proxy, "tracked_module_list", [])
    if not layers:
        return f"'{proxy_name}' ({type(proxy).__name__})"
    layer_text = " and ".join(
        f"{type(m).__name__} '{names.get(id(m)) or '<model>'}'" for m in layers
    )
    return f"{layer_text}, {attr}"
