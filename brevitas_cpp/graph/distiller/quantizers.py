"""Distiller's QAT quantizers (distiller/quantization: clipped_linear.py, range_linear.py) with
Distiller's constructors, on graph.Quantizer and the brevitas_cpp.quant classes of their methods.

As in Distiller:
- weights are quantized in Conv2d, Conv3d, Linear and Embedding layers only
  (``Quantizer._add_qbits_entry``), activations after ReLU only (each class's replacement
  factory), and inputs of the whole model with QuantAwareTrainRangeLinearQuantizer's
  ``quantize_inputs``;
- the bit widths default to 32 and None keeps a tensor type in float; ``overrides`` are Distiller's:
  ordered {name or pattern: {bits_activations, bits_weights, bits_bias}}, where a name wins over
  the patterns and otherwise the first pattern matching the whole module name wins;
- PACT's learned clipping values get an optimizer group of their own, with ``act_clip_decay`` as
  its weight decay when given.

Weights are quantized from their float copy in every forward, which is what Distiller's
``train_with_fp_copy`` computes when its QuantizationPolicy re-quantizes after every step.
"""

from collections import OrderedDict
from enum import Enum
from typing import Any, Dict, Mapping, Optional, Tuple, Union

import torch
from torch import Tensor, nn

from brevitas_cpp import nn as qnn
from brevitas_cpp.graph.quantizer import Quantizer
from brevitas_cpp.graph.replacement import ReplacementFactory, default_replacement_factory
from brevitas_cpp.quant import (
    ClippedActQuant,
    DorefaWeightQuant,
    PACTActQuant,
    RangeLinearActQuant,
    RangeLinearBiasQuant,
    RangeLinearWeightQuant,
)

__all__ = [
    "DorefaQuantizer",
    "LinearQuantMode",
    "PACTQuantizer",
    "QuantAwareTrainRangeLinearQuantizer",
]

# The layer types whose weights Distiller quantizes (Quantizer._add_qbits_entry).
WEIGHT_LAYER_TYPES = (nn.Conv2d, nn.Conv3d, nn.Linear, nn.Embedding)
_OVERRIDE_KEYS = ("bits_activations", "bits_weights", "bits_bias")
_LEGACY_OVERRIDE_KEYS = ("acts", "wts", "bias")


class LinearQuantMode(Enum):
    """Distiller's range-linear modes (q_utils.LinearQuantMode)."""

    SYMMETRIC = 1
    SYMMETRIC_RESTRICTED = 2
    ASYMMETRIC_UNSIGNED = 3
    ASYMMETRIC_SIGNED = 4


ModeSpec = Union[str, LinearQuantMode, Mapping[str, Union[str, LinearQuantMode]]]


def _mode(value: Any, what: str) -> str:
    if isinstance(value, LinearQuantMode):
        return value.name
    if isinstance(value, str) and value in LinearQuantMode.__members__:
        return value
    raise ValueError(
        f"{what} must be one of {', '.join(LinearQuantMode.__members__)} (a name or a "
        f"LinearQuantMode), got {value!r}"
    )


def quant_modes(mode: ModeSpec) -> Tuple[str, str]:
    """(activations' mode, weights' mode) from Distiller's ``mode``: one mode for both, or
    {activations: ..., weights: ...} (range_linear.verify_quant_mode)."""
    if isinstance(mode, Mapping):
        unknown = sorted(set(mode) - {"activations", "weights"})
        if unknown or len(mode) != 2:
            raise ValueError(
                f"mode: a mapping must have exactly the keys 'activations' and 'weights', got "
                f"{sorted(mode)}"
            )
        return _mode(mode["activations"], "mode['activations']"), _mode(
            mode["weights"], "mode['weights']"
        )
    both = _mode(mode, "mode")
    return both, both


class DistillerQuantizer(Quantizer):
    """What Distiller's QAT quantizers share (see the module docstring); subclasses give the
    weight, bias and activation quantizers of their method."""

    # The bias quantizer of the method, when it has one that brevitas_cpp offers.
    bias_quant: Optional[type] = None

    def __init__(
        self,
        model: nn.Module,
        optimizer: Optional[torch.optim.Optimizer],
        bits_activations: Optional[int],
        bits_weights: Optional[int],
        bits_bias: Optional[int],
        overrides: Optional[Mapping[str, Mapping[str, Any]]],
        weight_kwargs: Mapping[str, Any],
        act_kwargs: Mapping[str, Any],
        quant_param_group: Optional[Mapping[str, Any]] = None,
    ) -> None:
        name = type(self).__name__
        if isinstance(model, (nn.DataParallel, nn.parallel.DistributedDataParallel)):
            raise TypeError(
                f"{name}: quantize the model before wrapping it in {type(model).__name__} "
                f"(the wrapper would keep the float layers' parameters)"
            )
        if overrides is not None and not isinstance(overrides, Mapping):
            raise TypeError(
                f"{name}: overrides must be an ordered mapping of module names or patterns "
                f"(an OrderedDict or a dict), got {type(overrides).__name__}"
            )
        super().__init__(
            model,
            bits_activations=bits_activations,
            bits_weights=bits_weights,
            overrides=self._overrides(overrides or OrderedDict()),
            weight_kwargs={**weight_kwargs, **self._bias_kwargs(bits_bias, "bits_bias")},
            act_kwargs=act_kwargs,
            replacement_factory=self._factory(),
            optimizer=optimizer,
            quant_param_group=quant_param_group,
        )
        self.bits_bias = bits_bias

    @staticmethod
    def _factory() -> ReplacementFactory:
        # Distiller's layers: weights of WEIGHT_LAYER_TYPES, activations of ReLU.
        default = default_replacement_factory()
        return {kind: default[kind] for kind in (*WEIGHT_LAYER_TYPES, nn.ReLU)}

    def _bias_kwargs(self, bits: Any, what: str) -> Dict[str, Any]:
        if bits is None:
            return {"bias_quant": None}
        if self.bias_quant is None:
            raise ValueError(
                f"{type(self).__name__}: {what}={bits!r}: quantizing biases with this method is "
                f"not supported; leave {what} null (Distiller's default for it)"
            )
        return {"bias_quant": self.bias_quant, "bias_bit_width": bits}

    def _overrides(self, overrides: Mapping[str, Any]) -> "OrderedDict[str, Dict[str, Any]]":
        """Distiller's overrides as graph.Quantizer's: its three bit widths (bits_bias as the
        bias quantizer's keywords); any other key is refused, as Distiller's replacement
        functions accept none."""
        name = type(self).__name__
        translated: "OrderedDict[str, Dict[str, Any]]" = OrderedDict()
        for pattern, entry in overrides.items():
            if not isinstance(entry, Mapping):
                raise ValueError(
                    f"{name}: overrides[{pattern!r}] must be a mapping of "
                    f"{', '.join(_OVERRIDE_KEYS)}, got {entry!r}"
                )
            if any(key in entry for key in _LEGACY_OVERRIDE_KEYS):
                raise ValueError(
                    f"{name}: overrides[{pattern!r}]: 'acts' / 'wts' / 'bias' are Distiller's "
                    f"deprecated keys; write 'bits_activations' / 'bits_weights' / 'bits_bias'"
                )
            unknown = sorted(set(entry) - set(_OVERRIDE_KEYS))
            if unknown:
                raise ValueError(
                    f"{name}: overrides[{pattern!r}]: {type(self).__name__} does not accept "
                    f"{unknown} as override arguments; accepted: {', '.join(_OVERRIDE_KEYS)}"
                )
            value = {k: v for k, v in entry.items() if k != "bits_bias"}
            if "bits_bias" in entry:
                value.update(
                    self._bias_kwargs(entry["bits_bias"], f"overrides[{pattern!r}]['bits_bias']")
                )
            translated[pattern] = value
        return translated


def _check_optimizer(optimizer: Any, name: str) -> None:
    if optimizer is None:
        raise ValueError(
            f"{name}: optimizer cannot be None: the learned clipping values are given to it "
            f"as a parameter group of their own (as in Distiller)"
        )


class PACTQuantizer(DistillerQuantizer):
    """PACT (Choi et al., 2018): ReLU outputs clipped at a learned value per layer (initialised to
    act_clip_init_val) and quantized unsigned; DoReFa weights."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        bits_activations: Optional[int] = 32,
        bits_weights: Optional[int] = 32,
        bits_bias: Optional[int] = None,
        overrides: Optional[Mapping[str, Mapping[str, Any]]] = None,
        act_clip_init_val: float = 8.0,
        act_clip_decay: Optional[float] = None,
    ) -> None:
        _check_optimizer(optimizer, "PACTQuantizer")
        group = {} if act_clip_decay is None else {"weight_decay": act_clip_decay}
        super().__init__(
            model,
            optimizer,
            bits_activations,
            bits_weights,
            bits_bias,
            overrides,
            weight_kwargs={"weight_quant": DorefaWeightQuant},
            act_kwargs={"act_quant": PACTActQuant, "act_clip_init_val": act_clip_init_val},
            quant_param_group=group,
        )
        self.act_clip_init_val, self.act_clip_decay = act_clip_init_val, act_clip_decay


class DorefaQuantizer(DistillerQuantizer):
    """DoReFa (Zhou et al., 2016) weights (tanh-normalised to [-1, 1]); ReLU outputs clamped to
    [0, 1] and quantized unsigned (Distiller's ClippedLinearQuantization with clip value 1)."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: Optional[torch.optim.Optimizer] = None,
        bits_activations: Optional[int] = 32,
        bits_weights: Optional[int] = 32,
        bits_bias: Optional[int] = None,
        overrides: Optional[Mapping[str, Mapping[str, Any]]] = None,
    ) -> None:
        super().__init__(
            model,
            optimizer,
            bits_activations,
            bits_weights,
            bits_bias,
            overrides,
            weight_kwargs={"weight_quant": DorefaWeightQuant},
            act_kwargs={"act_quant": ClippedActQuant},
        )


class QuantAwareTrainRangeLinearQuantizer(DistillerQuantizer):
    """Range-linear QAT (Jacob et al., 2017, as Distiller implements it): weights quantized from
    their own range (per output channel with per_channel_wts), ReLU outputs and the model's
    input from ranges tracked by an exponential moving average; symmetric or asymmetric."""

    bias_quant = RangeLinearBiasQuant

    def __init__(
        self,
        model: nn.Module,
        optimizer: Optional[torch.optim.Optimizer] = None,
        bits_activations: Optional[int] = 32,
        bits_weights: Optional[int] = 32,
        bits_bias: Optional[int] = 32,
        overrides: Optional[Mapping[str, Mapping[str, Any]]] = None,
        mode: ModeSpec = LinearQuantMode.SYMMETRIC,
        ema_decay: float = 0.999,
        per_channel_wts: bool = False,
        quantize_inputs: bool = True,
        num_bits_inputs: Optional[int] = None,
    ) -> None:
        act_mode, weight_mode = quant_modes(mode)
        self.act_mode, self.weight_mode = act_mode, weight_mode
        self.ema_decay, self.per_channel_wts = ema_decay, per_channel_wts
        self.quantize_inputs = quantize_inputs
        self.num_bits_inputs = bits_activations if num_bits_inputs is None else num_bits_inputs
        if quantize_inputs:
            check_inputs_quantizable(model)
        if quantize_inputs and self.num_bits_inputs is None:
            raise ValueError(
                "QuantAwareTrainRangeLinearQuantizer: quantize_inputs=True needs a bit width for "
                "the inputs: give num_bits_inputs or bits_activations, or quantize_inputs=False"
            )
        super().__init__(
            model,
            optimizer,
            bits_activations,
            bits_weights,
            bits_bias,
            overrides,
            weight_kwargs={
                "weight_quant": RangeLinearWeightQuant,
                "weight_linear_quant_mode": weight_mode,
                "weight_per_channel": per_channel_wts,
            },
            act_kwargs={
                "act_quant": RangeLinearActQuant,
                "linear_quant_mode": act_mode,
                "ema_decay": ema_decay,
            },
        )

    def _bias_kwargs(self, bits: Any, what: str) -> Dict[str, Any]:
        kwargs = super()._bias_kwargs(bits, what)
        if bits is not None:
            kwargs["bias_linear_quant_mode"] = self.weight_mode
        return kwargs

    def prepare_model(self) -> nn.Module:
        root = super().prepare_model()
        if self.quantize_inputs:
            quantize_model_inputs(
                root,
                qnn.QuantIdentity(
                    act_quant=RangeLinearActQuant,
                    bit_width=self.num_bits_inputs,
                    linear_quant_mode=self.act_mode,
                    ema_decay=self.ema_decay,
                ),
            )
        return root


def check_inputs_quantizable(model: nn.Module) -> None:
    """That model can take an ``inputs_quant`` child and a pre-hook (before anything changes)."""
    if hasattr(model, "inputs_quant"):
        raise ValueError("quantize_inputs: the model already has an 'inputs_quant' attribute")
    if isinstance(model, (nn.Sequential, nn.ModuleList, nn.ModuleDict)):
        # A container's forward runs every child: inputs_quant would also be its last layer
        # (Distiller patches the container class's forward, breaking every other instance).
        raise ValueError(
            f"quantize_inputs: the model is an nn.{type(model).__name__}, whose forward would "
            f"run inputs_quant as a layer too; wrap it in a module of its own, or pass "
            f"quantize_inputs=False"
        )


def quantize_model_inputs(model: nn.Module, quantizer: nn.Module) -> None:
    """The model's first positional input through ``quantizer`` (kept as ``model.inputs_quant``,
    Distiller's name) before its forward, by a forward pre-hook."""
    check_inputs_quantizable(model)
    model.inputs_quant = quantizer
    model.register_forward_pre_hook(_quantize_first_input)


def _quantize_first_input(module, args: Tuple[Tensor]) -> Tuple[Tensor]:
    # Typed for TorchScript (which compiles hooks with the forward): one tensor input, as in
    # Distiller's wrapped forward(self, input); in eager mode any further inputs pass through.
    return (module.inputs_quant(args[0]),) + args[1:]
