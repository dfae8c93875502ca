"""Brevitas's ``brevitas.utils.quant_utils``: which proxies learn their bit width, the enum of a
rounding block, the ungrouping of a groupwise quantizer's output, and the ``_CachedIO*`` records
of a quantized tensor that layers keep for inference (Brevitas's example code imports them);
core.function_wrapper's blocks too, which Brevitas's module star-imports.

Ranked apart from ``utils`` (tests/test_import_direction.py): it reads core blocks, proxies and
QuantTensors, so it sits above proxy, where Brevitas imports them inside its functions."""

from typing import Any, Optional, Tuple

from torch import Tensor, nn

from brevitas_cpp.core import function_wrapper as _function_wrapper
from brevitas_cpp.core.bit_width import BitWidthParameter
from brevitas_cpp.core.function_wrapper import *  # noqa: F403  (re-exported, as in Brevitas)
from brevitas_cpp.core.function_wrapper import (
    CeilSte,
    DPURoundSte,
    FloorSte,
    LearnedRoundSte,
    RoundSte,
    RoundToZeroSte,
    StochasticRoundSte,
)
from brevitas_cpp.core.quant import RescalingIntQuant
from brevitas_cpp.function.shape import ungroup
from brevitas_cpp.inject.enum import FloatToIntImplType
from brevitas_cpp.proxy import ActQuantProxyFromInjector, WeightQuantProxyFromInjector
from brevitas_cpp.proxy.runtime_quant import FusedActivationQuantProxy

__all__ = [
    "float_to_int_impl_to_enum",
    "groupwise_dequant_expand",
    "has_learned_activation_bit_width",
    "has_learned_weight_bit_width",
] + list(_function_wrapper.__all__)


def _learned_bit_width(tensor_quant: Any) -> bool:
    return isinstance(tensor_quant, RescalingIntQuant) and isinstance(
        tensor_quant.msb_clamp_bit_width_impl, BitWidthParameter
    )


def has_learned_weight_bit_width(module: nn.Module) -> bool:
    """Whether ``module`` is a weight proxy whose integer quantizer learns its bit width."""
    return isinstance(module, WeightQuantProxyFromInjector) and _learned_bit_width(
        module.tensor_quant
    )


def has_learned_activation_bit_width(module: nn.Module) -> bool:
    """Whether ``module`` is an activation proxy whose integer quantizer learns its bit width."""
    if not isinstance(module, ActQuantProxyFromInjector):
        return False
    fused = module.fused_activation_quant_proxy
    return isinstance(fused, FusedActivationQuantProxy) and _learned_bit_width(fused.tensor_quant)


# Exact types first: StochasticRoundSte answers by its deterministic_inference flag.
_ROUNDING_ENUMS = (
    (RoundSte, FloatToIntImplType.ROUND),
    (RoundToZeroSte, FloatToIntImplType.ROUND_TO_ZERO),
    (FloorSte, FloatToIntImplType.FLOOR),
    (CeilSte, FloatToIntImplType.CEIL),
    (DPURoundSte, FloatToIntImplType.DPU),
    (LearnedRoundSte, FloatToIntImplType.LEARNED_ROUND),
)


def float_to_int_impl_to_enum(module: nn.Module) -> Optional[FloatToIntImplType]:
    """The FloatToIntImplType of a rounding block (``float_to_int_impl``), None for any other
    module. A stochastic rounding that rounds to nearest in eval counts as ROUND."""
    for block_type, enum in _ROUNDING_ENUMS:
        if isinstance(module, block_type):
            return enum
    if isinstance(module, StochasticRoundSte):
        if module.deterministic_inference:
            return FloatToIntImplType.ROUND
        return FloatToIntImplType.STOCHASTIC_ROUND
    return None


def groupwise_dequant_expand(
    value_: Tensor,
    scale_: Tensor,
    zero_point_: Tensor,
    group_dim: int,
    dequant_shape: Tuple[int, ...],
) -> Tuple[Tensor, Tensor, Tensor]:
    """A groupwise quantizer's grouped value, scale and zero point in the tensor's own shape
    (``dequant_shape``): the (groups, group_size) dims merged, the padding dropped. A 0-dim
    scale or zero point is returned as it is; any other is broadcast to the value first."""
    dim = group_dim if group_dim >= 0 else value_.dim() - 1 + group_dim
    group_size, size = value_.shape[dim + 1], dequant_shape[group_dim]

    def expand(field: Tensor) -> Tensor:
        if field.dim() == 0:
            return field
        return ungroup(field.expand(value_.shape), group_dim, group_size, size)

    return ungroup(value_, group_dim, group_size, size), expand(scale_), expand(zero_point_)


class _CachedIOBase:
    """What a layer keeps of a quantized input or output for inference: the shape, the scale
    (and, unless ``metadata_only``, the value), and the QuantTensor whose other fields the
    subclasses' properties read (its value dropped when ``metadata_only``)."""

    _value_field = "value"

    def __init__(self, quant_tensor: Any, metadata_only: bool) -> None:
        self.shape = quant_tensor.value.shape
        if metadata_only:
            self.value = None
            self.quant_tensor = quant_tensor.set(**{self._value_field: None})
        else:
            self.quant_tensor = quant_tensor
            self.value = quant_tensor.value


def _fields_of_quant_tensor(*names: str):
    """Read-only properties forwarding ``names`` to ``self.quant_tensor``."""

    def decorate(cls: type) -> type:
        for name in names:
            setattr(cls, name, property(lambda self, name=name: getattr(self.quant_tensor, name)))
        return cls

    return decorate


@_fields_of_quant_tensor("zero_point", "bit_width", "signed")
class _CachedIO(_CachedIOBase):
    """The record of an IntQuantTensor."""

    def __init__(self, quant_tensor: Any, metadata_only: bool) -> None:
        super().__init__(quant_tensor, metadata_only)
        self.scale = quant_tensor.scale


_MINIFLOAT_FIELDS = (
    "exponent_bit_width",
    "mantissa_bit_width",
    "exponent_bias",
    "saturating",
    "inf_values",
    "nan_values",
    "signed",
)


@_fields_of_quant_tensor("zero_point", *_MINIFLOAT_FIELDS)
class _CachedIOFloat(_CachedIOBase):
    """The record of a FloatQuantTensor."""

    def __init__(self, quant_tensor: Any, metadata_only: bool) -> None:
        super().__init__(quant_tensor, metadata_only)
        self.scale = quant_tensor.scale


class _CachedIOGroupwise(_CachedIOBase):
    """The grouped scale and zero point of a groupwise QuantTensor (fields ``scale_`` and
    ``zero_point_``; its value field is ``value_``)."""

    _value_field = "value_"

    def __init__(self, quant_tensor: Any, metadata_only: bool) -> None:
        super().__init__(quant_tensor, metadata_only)
        self.scale_ = quant_tensor.scale_
        self.zero_point_ = quant_tensor.zero_point_


@_fields_of_quant_tensor(*_MINIFLOAT_FIELDS, "group_size", "group_dim")
class _CachedIOGroupwiseFloat(_CachedIOGroupwise):
    """The record of a GroupwiseFloatQuantTensor."""


@_fields_of_quant_tensor("bit_width", "signed", "group_size", "group_dim")
class _CachedIOGroupwiseInt(_CachedIOGroupwise):
    """The record of a GroupwiseIntQuantTensor."""
