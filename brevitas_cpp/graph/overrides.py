"""Per-module settings from ordered name patterns: Distiller's overrides, resolved as Distiller's
Quantizer resolves them (distiller/quantization/quantizer.py): a pattern equal to the module's
name wins; otherwise the first pattern, in order, that matches the whole name.

A pattern is a regular expression matched against the whole module name (``conv1`` does not
match ``conv10``; ``layer1\\..*`` matches every module of a block). Distiller looks the exact name
up before it tries the patterns, so ``{"conv.*": 4, "conv1": 8}`` gives conv1 8 bits although
``conv.*`` comes first (its documentation's "the first match wins" holds among patterns).

A value is a bit width for weights and activations, None (leave the module in float), or a dict
of ``bits_weights``, ``bits_activations`` and Brevitas keywords (``weight_quant``,
``weight_bit_width``, ``act_quant``, ``input_quant``, ...), given to the replacement layer's
constructor. In the dict, a null bit width keeps that tensor type in float, as Distiller writes it
(``{bits_weights: null}``): a weight layer stays float without weight bits, an activation
without activation bits.
"""

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

__all__ = ["KeepInFloat", "LayerSettings", "OverrideTable", "OverrideValue", "check_bit_width"]

OverrideValue = Union[None, int, Mapping[str, Any]]
_BIT_KEYS = ("bits_weights", "bits_activations")


# Which override keywords a kind of layer takes: weight layers their weight_, bias_, input_ and
# output_ quantizers' keywords; activation layers the unprefixed ones (act_quant, bit_width, ...)
# and input_. A block pattern may so set both kinds; a keyword no matched module took is reported.
_WEIGHT_LAYER_PREFIXES = ("weight_", "bias_", "input_", "output_")
_ACT_LAYER_EXCLUDED_PREFIXES = ("weight_", "bias_", "output_")
_EVERY_LAYER_KEYS = ("return_quant_tensor",)


class KeepInFloat(Exception):
    """Raised by a LayerSettings asked for the keywords of a tensor type whose bit width is
    null: the replacement is abandoned and the module kept in float."""


@dataclass
class LayerSettings:
    """What a replacement factory gets for one module: its bit widths and the Brevitas keywords
    of its quant layer, the quantizer's defaults for the kind of layer under the override's
    (``weight_layer_kwargs`` or ``act_layer_kwargs``, which also record what was taken)."""

    bits_weights: Optional[int]  # None: weights stay float (Distiller's null)
    bits_activations: Optional[int]
    keywords: Dict[str, Any] = field(default_factory=dict)  # the override's
    weight_defaults: Dict[str, Any] = field(default_factory=dict)
    act_defaults: Dict[str, Any] = field(default_factory=dict)
    pattern: Optional[str] = None  # the override pattern that matched, if any
    used_keywords: set = field(default_factory=set)

    def weight_layer_kwargs(self) -> Dict[str, Any]:
        if self.bits_weights is None:
            raise KeepInFloat()
        taken = {
            k: v
            for k, v in self.keywords.items()
            if k.startswith(_WEIGHT_LAYER_PREFIXES) or k in _EVERY_LAYER_KEYS
        }
        self.used_keywords.update(taken)
        return {"weight_bit_width": self.bits_weights, **self.weight_defaults, **taken}

    def prefixed_layer_kwargs(
        self, prefixes: Tuple[str, ...], names: Tuple[str, ...] = ()
    ) -> Dict[str, Any]:
        """The override's keywords a layer of several named quantizers takes (a recurrent or
        attention layer: io_*, gate_acc_*, in_proj_*, ..., and its own options named in
        ``names``), recorded as taken."""
        taken = {
            k: v
            for k, v in self.keywords.items()
            if k.startswith(prefixes) or k in names or k in _EVERY_LAYER_KEYS
        }
        self.used_keywords.update(taken)
        return taken

    def act_layer_kwargs(self) -> Dict[str, Any]:
        if self.bits_activations is None:
            raise KeepInFloat()
        taken = {
            k: v for k, v in self.keywords.items() if not k.startswith(_ACT_LAYER_EXCLUDED_PREFIXES)
        }
        self.used_keywords.update(taken)
        return {"bit_width": self.bits_activations, **self.act_defaults, **taken}


def check_bit_width(value: Any, what: str) -> int:
    """value, if it is an integer bit width in [1, 32]; a ValueError naming what otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 32:
        raise ValueError(f"{what} must be an integer bit width in [1, 32], got {value!r}")
    return value


class OverrideTable:
    """The ordered (pattern, value) overrides; ``settings_for(name, ...)`` resolves a module."""

    def __init__(self, overrides: Optional[Mapping[str, OverrideValue]] = None) -> None:
        items = list((overrides or {}).items())
        self._entries: List[Tuple[str, "re.Pattern[str]", OverrideValue]] = []
        for pattern, value in items:
            if not isinstance(pattern, str):
                raise TypeError(f"overrides: a pattern must be a string, got {pattern!r}")
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"overrides: {pattern!r} is not a regular expression ({exc})")
            self._check_value(pattern, value)
            self._entries.append((pattern, compiled, value))
        self._matched: set = set()

    @staticmethod
    def _check_value(pattern: str, value: OverrideValue) -> None:
        if value is None:
            return
        if isinstance(value, Mapping):
            for key in _BIT_KEYS:
                if key in value and value[key] is not None:  # null: that type stays float
                    check_bit_width(value[key], f"overrides[{pattern!r}][{key!r}]")
            return
        check_bit_width(value, f"overrides[{pattern!r}]")

    def match(self, name: str) -> Optional[Tuple[str, OverrideValue]]:
        """(pattern, value) of the override of module ``name`` (see the module docstring: the
        pattern equal to the name, else the first matching the whole name), or None."""
        for pattern, _, value in self._entries:
            if pattern == name:
                self._matched.add(pattern)
                return pattern, value
        for pattern, compiled, value in self._entries:
            if compiled.fullmatch(name):
                self._matched.add(pattern)
                return pattern, value
        return None

    def unmatched(self) -> List[str]:
        """The patterns no module name matched so far, in their order."""
        return [pattern for pattern, _, _ in self._entries if pattern not in self._matched]

    def settings_for(
        self,
        name: str,
        bits_weights: Optional[int],
        bits_activations: Optional[int],
        weight_defaults: Mapping[str, Any],
        act_defaults: Mapping[str, Any],
    ) -> Optional[LayerSettings]:
        """The settings of module ``name``: the defaults, with the first matching override on
        top; None when the override leaves the module in float."""
        found = self.match(name)
        defaults = dict(weight_defaults=dict(weight_defaults), act_defaults=dict(act_defaults))
        if found is None:
            return LayerSettings(bits_weights, bits_activations, **defaults)
        pattern, value = found
        if value is None:
            return None
        if not isinstance(value, Mapping):
            return LayerSettings(value, value, pattern=pattern, **defaults)
        return LayerSettings(
            value.get("bits_weights", bits_weights),
            value.get("bits_activations", bits_activations),
            keywords={k: v for k, v in value.items() if k not in _BIT_KEYS},
            pattern=pattern,
            **defaults,
        )
