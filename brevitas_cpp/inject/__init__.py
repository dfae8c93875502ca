"""Declarative quantizer assembly: the enums and ExtendedInjector. The solvers, which turn enum
settings into core blocks, are in brevitas_cpp.quant.solver."""

from brevitas_cpp.inject.enum import (
    BitWidthImplType,
    FloatToIntImplType,
    LearnedRoundImplType,
    QuantType,
    RestrictValueType,
    ScalingImplType,
    ScalingPerOutputType,
    StatsOp,
    TruncScalingImplType,
)
from brevitas_cpp.inject.injector import (
    BaseInjector,
    DependencyError,
    ExtendedInjector,
    Injector,
    MissingDependencyError,
    this,
    value,
)

__all__ = [
    "BaseInjector",
    "DependencyError",
    "ExtendedInjector",
    "Injector",
    "MissingDependencyError",
    "this",
    "value",
    "BitWidthImplType",
    "FloatToIntImplType",
    "LearnedRoundImplType",
    "QuantType",
    "RestrictValueType",
    "ScalingImplType",
    "ScalingPerOutputType",
    "StatsOp",
    "TruncScalingImplType",
]
