"""Quantizers on functional activations: the output of every F.gelu, F.silu, torch.sigmoid,
x.relu(), ... that a model's own forward calls, where no layer (quant or float) computes it.

``quantize_functional_activations(insertion)`` finds them in the insertion's trace (their
module scope is a module of the model's own code, not an activation or brevitas_cpp module) and
adds an output quantizer at each: signed (Int8ActPerTensorFloat) where the function reaches
below zero, unsigned (Uint8ActPerTensorFloat) where it does not, as the quant layers'
defaults. An activation module the Quantizer left in float is left alone: its call is inside it.
"""

from typing import Any, Dict, List

from torch import nn

from brevitas_cpp.graph.insertion import QuantizerInsertion
from brevitas_cpp.graph.trace import module_scopes
from brevitas_cpp.quant import Int8ActPerTensorFloat, Uint8ActPerTensorFloat

__all__ = ["FUNCTIONAL_ACTIVATIONS", "quantize_functional_activations"]

# The traced operator names of functional activations, and whether their outputs are signed.
FUNCTIONAL_ACTIVATIONS: Dict[str, bool] = {
    "relu": False,
    "relu_": False,
    "relu6": False,
    "sigmoid": False,
    "hardsigmoid": False,
    "gelu": True,
    "silu": True,
    "hardswish": True,
    "leaky_relu": True,
    "tanh": True,
}


def quantize_functional_activations(
    insertion: QuantizerInsertion,
    signed_quant: Any = Int8ActPerTensorFloat,
    unsigned_quant: Any = Uint8ActPerTensorFloat,
    **kwargs: Any,
) -> List[str]:
    """Output quantizers at the functional activations of the model's own code (see the module
    docstring); kwargs are Brevitas keywords for each. Returns the scopes quantized."""
    scopes_of = module_scopes(insertion.model)
    owners = {scopes_of[id(m)]: m for m in insertion.model.modules() if id(m) in scopes_of}
    quantized = []
    for node in insertion.graph.nodes:
        signed = FUNCTIONAL_ACTIVATIONS.get(node.op)
        owner = owners.get(node.module_scope)
        if signed is None or owner is None or not _own_code(owner):
            continue
        quant = signed_quant if signed else unsigned_quant
        insertion.quantize_output(node.scope, act_quant=quant, **kwargs)
        quantized.append(node.scope)
    return quantized


def _own_code(module: nn.Module) -> bool:
    """Whether module's forward is the user's code: not torch.nn's nor brevitas_cpp's (whose
    activation calls are layers of their own, replaced or kept in float on purpose)."""
    origin = type(module).__module__
    return not origin.startswith(("torch.nn.", "brevitas_cpp."))
