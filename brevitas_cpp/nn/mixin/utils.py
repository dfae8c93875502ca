"""Keyword routing for quant layers.

A layer forwards ``weight_bit_width=4`` to its weight quantizer as ``bit_width=4``: the prefix
picks the quantizer, the rest names one of its attributes. Brevitas silently drops a name no
quantizer uses, so a typo (``weight_bitwidth``) quietly keeps the default; here a keyword must
be one a quantizer of the layer can consume, or else one Brevitas knows (``is_brevitas_keyword``:
some Brevitas layer or quantizer takes it), which is accepted unused as Brevitas does: programs
pass one set of keywords to layers whose quantizers differ. This module decides which names
those are.

A quantizer can consume a name when it is
  * one of its attributes (declared on it, on a base, on a solver, or by ``.let``),
  * an argument of one of its attributes (a ``@value`` function or a class it instantiates),
  * a constructor argument of any core block (a ``@value`` may pick the block only at
    injection time, so the blocks it could pick are not known beforehand), or
  * an attribute the quant proxies read from their quantizer directly.
"""

import functools
import importlib
import inspect
import pkgutil
from typing import Any, Dict, FrozenSet, Iterable, Mapping

import brevitas_cpp.core as core

from ._brevitas_keywords import LAYER_KEYWORDS, PREFIXES, QUANTIZER_NAMES

__all__ = [
    "filter_kwargs",
    "core_block_argument_names",
    "is_brevitas_keyword",
    "quantizer_vocabulary",
]

# Read by brevitas_cpp.proxy straight off the quantizer, not through any core block.
PROXY_READ_ATTRIBUTES: FrozenSet[str] = frozenset(
    {
        "proxy_class",
        "tensor_quant",
        "signed",
        "narrow_range",
        "float_to_int_impl_type",
        "float_to_int_impl",
        "update_state_dict_impl",
        "requires_input_scale",
        "scaling_per_output",
        "act_impl",
        "passthrough_act",
    }
)


def filter_kwargs(kwargs_prefix: str, kwargs: Mapping[str, Any]) -> Dict[str, Any]:
    """The entries of kwargs whose name starts with kwargs_prefix, with the prefix removed."""
    return {k[len(kwargs_prefix) :]: v for k, v in kwargs.items() if k.startswith(kwargs_prefix)}


def _init_argument_names(cls: type) -> Iterable[str]:
    try:
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    except (TypeError, ValueError):  # builtins without a Python signature
        return ()
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in params if p.kind in named]


@functools.lru_cache(maxsize=None)
def core_block_argument_names() -> FrozenSet[str]:
    """Constructor argument names of every class defined under brevitas_cpp.core."""
    names = set()
    for info in pkgutil.walk_packages(core.__path__, core.__name__ + "."):
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if inspect.isclass(obj) and obj.__module__.startswith(core.__name__):
                names.update(_init_argument_names(obj))
    return frozenset(names)


def quantizer_vocabulary(injector: Any) -> FrozenSet[str]:
    """The attribute names ``injector`` (a quantizer class) can consume; see the module doc."""
    dependencies = getattr(injector, "__dependencies__", {})
    names = set(dependencies)
    for spec in dependencies.values():
        # spec: (marker, factory, argument names, number of required arguments)
        if isinstance(spec, tuple) and len(spec) > 2:
            names.update(a for a in spec[2] if not a.startswith("__"))
    return frozenset(names) | core_block_argument_names() | PROXY_READ_ATTRIBUTES


def is_brevitas_keyword(name: str) -> bool:
    """Whether some Brevitas layer takes keyword ``name``: a constructor argument of one of its
    layers, or ``<prefix><attribute>`` with a prefix its layers route to a quantizer
    (``weight_``, ``input_``, ``''`` ...) and an attribute a Brevitas quantizer, core block or
    proxy knows. Recorded from Brevitas's sources in ``_brevitas_keywords``."""
    if name in LAYER_KEYWORDS:
        return True
    return any(name.startswith(p) and name[len(p) :] in QUANTIZER_NAMES for p in PREFIXES)
