"""Regularisers that push learned bit widths down (Brevitas's ``brevitas.loss``): forward hooks
collect the bit widths a model used, weighted by how many elements or operations each covers,
and ``retrieve()`` returns their average as a differentiable loss term."""

from brevitas_cpp.loss.base_loss import SimpleBaseLoss
from brevitas_cpp.loss.weighted_bit_width import (
    MEGA,
    ActivationBitWidthWeightedBySize,
    BitWidthWeighted,
    QuantLayerOutputBitWidthWeightedByOps,
    WeightBitWidthWeightedBySize,
    has_learned_activation_bit_width,
    has_learned_weight_bit_width,
)

__all__ = [
    "MEGA",
    "ActivationBitWidthWeightedBySize",
    "BitWidthWeighted",
    "QuantLayerOutputBitWidthWeightedByOps",
    "SimpleBaseLoss",
    "WeightBitWidthWeightedBySize",
    "has_learned_activation_bit_width",
    "has_learned_weight_bit_width",
]
