"""Declarative quantizer assembly: enums (and, later, ExtendedInjector and the solvers)."""

from brevitas_cpp.inject.enum import (
    BitWidthImplType,
    FloatToIntImplType,
    QuantType,
    RestrictValueType,
    ScalingImplType,
    ScalingPerOutputType,
    StatsOp,
    TruncScalingImplType,
)

__all__ = [
    "BitWidthImplType",
    "FloatToIntImplType",
    "QuantType",
    "RestrictValueType",
    "ScalingImplType",
    "ScalingPerOutputType",
    "StatsOp",
    "TruncScalingImplType",
]
