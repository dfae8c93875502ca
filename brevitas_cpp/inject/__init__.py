"""Declarative quantizer assembly: the enums and ExtendedInjector. The solvers, which turn enum
settings into core blocks, are in brevitas_cpp.quant.solver."""

# dependencies' own names, which Brevitas's brevitas.inject re-exports too.
from _dependencies.injector import injector_doc, let
from _dependencies.this import This

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
    "This",
    "injector_doc",
    "let",
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
