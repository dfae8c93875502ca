"""``export_int_weights``: the integer view of a quantized model, for hardware people.

For every quant layer, what its quantizers store, as a plain dict that ``torch.save`` writes:

    {"conv1": {"type": "QuantConv2d",
               "weight": {"int": int8 tensor, "scale": float32, "zero_point": int64,
                          "bit_width": 8, "signed": True, "narrow_range": True, "axis": 0,
                          "qmin": -127, "qmax": 127},
               "bias": {... int32 for Int32Bias ...},
               "input": {... the same keys without "int" ...}},
     ...}

so that value == (int - zero_point) * scale along ``axis`` (None: one scale per tensor). The
numbers are those QCDQ export writes (the same checks: whole bit widths, integer zero points).
Without example inputs only the weights and the biases with their own scale are reported;
with them, one eval forward also gives the activations' grids and the biases whose scale is the
accumulator's (Int32Bias).
"""

from typing import Any, Dict

import torch
from torch import nn

from brevitas_cpp.export.errors import module_names
from brevitas_cpp.export.handlers import ActQcdq, BinaryAct, IntParameter, TernaryAct
from brevitas_cpp.export.mode import build_handler
from brevitas_cpp.export.record import ACT, BIAS, WEIGHT, ProxyRecord, recording

__all__ = ["export_int_weights"]


def _grid_entry(handler: Any) -> Dict[str, Any]:
    return {
        "scale": handler.scale.clone(),
        "zero_point": handler.zero_point.clone(),
        "bit_width": handler.bit_width,
        "signed": handler.signed,
        "narrow_range": handler.narrow_range,
        "axis": handler.axis,
        "qmin": handler.qmin,
        "qmax": handler.qmax,
    }


def _call_parameters(records: Dict[int, ProxyRecord]) -> None:
    """Without example inputs: each weight quantizer, and each bias quantizer with its own
    scale, called on its layers' parameters (the recording hooks see them)."""
    for record in records.values():
        proxy = record.proxy
        if record.kind == WEIGHT or (record.kind == BIAS and not proxy.requires_input_scale):
            attr = "weight" if record.kind == WEIGHT else "bias"
            for module in proxy.tracked_module_list:
                parameter = getattr(module, attr, None)
                if parameter is not None:
                    proxy(parameter)


def export_int_weights(model: nn.Module, *inputs: Any, **kwargs: Any) -> Dict[str, Dict[str, Any]]:
    """The integer view (see the module docstring) of model in eval mode; inputs (optional)
    are passed to one forward. The model's modes are restored after."""
    names = module_names(model)
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        with torch.no_grad(), recording(model) as records:
            if inputs or kwargs:
                model(*inputs, **kwargs)
            else:
                _call_parameters(records)
    finally:
        for module, training in modes:
            module.training = training
    view: Dict[str, Dict[str, Any]] = {}

    def layer_entry(layer_name: str, layer: nn.Module) -> Dict[str, Any]:
        return view.setdefault(layer_name, {"type": type(layer).__name__})

    for record in records.values():
        if not record.calls or record.kind not in (WEIGHT, BIAS, ACT):
            continue
        handler = build_handler(record)
        if isinstance(handler, IntParameter):
            for i, layer in enumerate(handler.sources):
                entry = {"int": handler.int_value(i).clone(), **_grid_entry(handler)}
                layer_entry(names.get(id(layer), ""), layer)[record.kind] = entry
            continue
        # An activation quantizer: named by its attribute, e.g. "input" for input_quant.
        layer_name, _, attr = record.name.rpartition(".")
        layer = record.proxy.tracked_module_list[0]
        role = attr.removesuffix("_quant") or attr
        if isinstance(handler, ActQcdq):
            entry = _grid_entry(handler)
        elif isinstance(handler, (BinaryAct, TernaryAct)):
            entry = {
                "scale": torch.tensor(handler.scale_value),
                "bit_width": 1 if isinstance(handler, BinaryAct) else 2,
                "kind": "binary" if isinstance(handler, BinaryAct) else "ternary",
            }
        else:  # pragma: no cover - build_handler makes only the types above
            continue
        layer_entry(layer_name, layer)[role] = entry
    return view
