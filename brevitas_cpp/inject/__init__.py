"""Declarative quantizer assembly: enums, ExtendedInjector, and (in ``solver``) the mixins
that turn enum settings into core blocks."""

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
    "QuantType",
    "RestrictValueType",
    "ScalingImplType",
    "ScalingPerOutputType",
    "StatsOp",
    "TruncScalingImplType",
]
