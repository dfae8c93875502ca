"""Argument handling shared by the recurrent layers: routing of the quantizer keywords by
prefix, building an activation proxy as Brevitas does, and the up-front checks whose errors name
the layer and the argument."""

import difflib
import inspect
from typing import Any, Dict, Tuple

from torch import nn

from brevitas_cpp.nn.mixin._brevitas_keywords import QUANTIZER_NAMES as BREVITAS_QUANTIZER_NAMES
from brevitas_cpp.nn.mixin.utils import is_brevitas_keyword


def _split_kwargs(
    layer_name: str, kwargs: Dict[str, Any], prefixes: Tuple[str, ...]
) -> Dict[str, Dict[str, Any]]:
    """kwargs by quantizer prefix (longest match first). A keyword with no prefix is ignored when
    Brevitas knows it (one layer definition serves several quantizers), an error otherwise."""
    routed: Dict[str, Dict[str, Any]] = {p: {} for p in prefixes}
    for name, value in kwargs.items():
        match = max((p for p in prefixes if name.startswith(p)), key=len, default=None)
        if match is None and is_brevitas_keyword(name):
            continue
        if match is None:
            known = [p + attribute for p in prefixes for attribute in BREVITAS_QUANTIZER_NAMES]
            close = difflib.get_close_matches(name, known, n=3)
            raise TypeError(
                f"{layer_name}: unexpected keyword argument {name}={value!r}. Keywords beyond the "
                f"layer's own arguments set quantizer attributes and must start with a quantizer "
                f"prefix; accepted prefixes: {', '.join(repr(p) for p in prefixes)}."
                + (f" Did you mean {', '.join(close)}?" if close else "")
            )
        routed[match][name] = value
    return routed


# What the stack passes each layer itself; a user keyword of that name is a quantizer keyword.
_STACK_SUPPLIED = frozenset(
    {
        "input_size",
        "hidden_size",
        "reverse_input",
        "quantize_output_only",
        "shared_input_hidden_weights",
        "dtype",
        "device",
        "return_quant_tensor",
        "io_quant",
        "routed",
    }
)


def _layer_arguments(
    layer_impl: type, kwargs: Dict[str, Any]
) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """kwargs split into the arguments layer_impl's constructor names (batch_first, bias,
    weight_quant, ...) and the rest, the prefixed quantizer keywords."""
    named = set(inspect.signature(layer_impl.__init__).parameters) - _STACK_SUPPLIED
    layer = {k: v for k, v in kwargs.items() if k in named}
    return layer, {k: v for k, v in kwargs.items() if k not in named}


def _act_proxy(
    layer_name: str, layer_class: type, quant: Any, prefix: str, kwargs: Dict[str, Any]
) -> nn.Module:
    """The proxy of an activation quantizer built as Brevitas builds it (an inner QuantIdentity,
    QuantSigmoid or QuantTanh whose act_quant it is), configured by the ``prefix`` keywords."""
    unprefixed = {k[len(prefix) :]: v for k, v in kwargs.items()}
    try:
        return layer_class(quant, **unprefixed).act_quant
    except TypeError as error:
        raise TypeError(
            f"{layer_name}: the {prefix}* keywords {sorted(kwargs)} configure the "
            f"{layer_class.__name__} quantizer {getattr(quant, '__name__', type(quant).__name__)}"
            f": {error}"
        ) from error


def _check_bool(layer_name: str, **flags: Any) -> None:
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise TypeError(
                f"{layer_name}: {name} must be a bool, got {value!r} ({type(value).__name__})"
            )


def _check_size(layer_name: str, **sizes: Any) -> None:
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{layer_name}: {name} must be a positive int, got {value!r}")
