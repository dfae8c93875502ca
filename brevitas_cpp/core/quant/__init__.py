"""Quantizer blocks (Brevitas's ``brevitas.core.quant``): integer quantization (IntQuant and
the wrappers that compute or take its scale, zero point and bit width, TruncIntQuant), binary
and ternary quantization, minifloat quantization (FloatQuant), the delayed-quantization wrapper
they share, seed 003's EMA-threshold quantizer (QuantizationInt8) and Distiller's QAT methods
(PACT, DoReFa, range-linear: core.quant.distiller)."""

from brevitas_cpp.core.quant.binary import BinaryQuant, ClampedBinaryQuant
from brevitas_cpp.core.quant.delay import DelayWrapper
from brevitas_cpp.core.quant.distiller import (
    ClippedLinearQuant,
    DorefaParamQuant,
    LearnedClippedLinearQuant,
    RangeLinearFakeQuant,
    RangeLinearParamQuant,
)
from brevitas_cpp.core.quant.float import FloatQuant
from brevitas_cpp.core.quant.int import (
    DecoupledRescalingIntQuant,
    DecoupledRescalingIntQuantWithInput,
    PrescaledRestrictIntQuant,
    PrescaledRestrictIntQuantWithInputBitWidth,
    RescalingIntQuant,
    TruncIntQuant,
)
from brevitas_cpp.core.quant.int8_ema import QuantizationInt8
from brevitas_cpp.core.quant.int_base import DecoupledIntQuant, IntQuant
from brevitas_cpp.core.quant.ternary import TernaryQuant

# Brevitas keeps QuantType importable from here for older code.
from brevitas_cpp.inject.enum import QuantType

__all__ = [
    "BinaryQuant",
    "ClampedBinaryQuant",
    "DecoupledIntQuant",
    "DecoupledRescalingIntQuant",
    "DecoupledRescalingIntQuantWithInput",
    "DelayWrapper",
    "ClippedLinearQuant",
    "DorefaParamQuant",
    "FloatQuant",
    "IntQuant",
    "LearnedClippedLinearQuant",
    "PrescaledRestrictIntQuant",
    "PrescaledRestrictIntQuantWithInputBitWidth",
    "QuantType",
    "QuantizationInt8",
    "RangeLinearFakeQuant",
    "RangeLinearParamQuant",
    "RescalingIntQuant",
    "TernaryQuant",
    "TruncIntQuant",
]
