"""One call from a config to a quantized model: replacement, insertion and the controller.

``quantize_model(model, config, *example_inputs)`` runs the Quantizer with the config's
arguments, inserts the quantizers its ``insertions`` list (each ``{"scope": ..., "where":
"inputs" | "output", "act_quant": <name>, ...Brevitas keywords}``, scopes as ``trace`` names
them), with ``functional_activations: true`` also an output quantizer at every functional
activation of the model's own code (graph.functional), and returns the model and its
QuantizationController.

``functional_quantization_mode`` (graph.functional_mode) is Brevitas's: a model's calls of a
function (F.scaled_dot_product_attention) routed to a child module while it is on.
"""

import pathlib
from typing import Any, Dict, List, Mapping, Tuple, Union

from torch import nn

from brevitas_cpp._unsupported import unsupported_getattr
from brevitas_cpp.core._checks import checked_bool
from brevitas_cpp.graph.config import load_config, resolve_quantizers
from brevitas_cpp.graph.controller import QuantizationController
from brevitas_cpp.graph.functional import quantize_functional_activations
from brevitas_cpp.graph.functional_mode import functional_quantization_mode
from brevitas_cpp.graph.insertion import QuantizerInsertion
from brevitas_cpp.graph.quantizer import Quantizer

__all__ = ["functional_quantization_mode", "quantize_model"]


def _insertion_kwargs(entry: Mapping[str, Any], index: int) -> Dict[str, Any]:
    where = f"insertions[{index}]"
    if not isinstance(entry, Mapping) or "scope" not in entry:
        raise ValueError(f"{where}: an insertion is a mapping with a 'scope', got {entry!r}")
    return resolve_quantizers(entry, where)


def quantize_model(
    model: nn.Module,
    config: Union[str, pathlib.Path, Mapping[str, Any]],
    *example_inputs: Any,
    **quantizer_kwargs: Any,
) -> Tuple[nn.Module, QuantizationController]:
    """The model quantized as the config says (see the module docstring); quantizer_kwargs
    (optimizer, replacement_factory, ...) go to the Quantizer."""
    settings = load_config(config, extra_keys=("insertions", "functional_activations"))
    insertions: List[Mapping[str, Any]] = list(settings.pop("insertions", None) or [])
    functional = checked_bool(
        "quantize_model", "functional_activations", settings.pop("functional_activations", False)
    )
    if (insertions or functional) and not example_inputs:
        raise ValueError(
            "quantize_model: insertions need example inputs to trace the model (so do "
            "functional_activations)"
        )
    quantizer = Quantizer(model, **{**settings, **quantizer_kwargs})
    model = quantizer.prepare_model()
    if insertions or functional:
        insertion = QuantizerInsertion(model, *example_inputs)
        if functional:
            quantize_functional_activations(insertion)
        for i, entry in enumerate(insertions):
            kwargs = _insertion_kwargs(entry, i)
            scope, where = kwargs.pop("scope"), kwargs.pop("where", "inputs")
            if where == "inputs":
                insertion.quantize_inputs(scope, **kwargs)
            elif where == "output":
                insertion.quantize_output(scope, **kwargs)
            else:
                raise ValueError(
                    f"insertions[{i}]: where must be 'inputs' or 'output', got {where!r}"
                )
        insertion.apply()
    return model, quantizer.controller()


# Brevitas names brevitas_cpp does not support raise on use (brevitas_cpp._unsupported).
__getattr__ = unsupported_getattr(__name__)
