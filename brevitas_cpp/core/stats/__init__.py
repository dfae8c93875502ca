"""Statistics blocks: the ops that reduce a tensor to a statistic, the wrappers that shape and
accumulate them, and the views of tracked parameters they read from."""

from brevitas_cpp.inject.enum import StatsOp

from .hqo import HalfQuadraticOptimizerScale, HalfQuadraticOptimizerZeroPoint
from .mse import MSE
from .stats_op import (
    AbsAve,
    AbsMax,
    AbsMaxAve,
    AbsMaxL2,
    AbsMinMax,
    AbsPercentile,
    L1Norm,
    L2Norm,
    MeanSigmaStd,
    NegativeMinOrZero,
    NegativePercentileOrZero,
    PercentileInterval,
)
from .stats_wrapper import (
    DEFAULT_MOMENTUM,
    SCALAR_SHAPE,
    _ParameterListStats,
    _RuntimeStats,
    _Stats,
)

__all__ = [
    "AbsAve",
    "AbsMax",
    "AbsMaxAve",
    "AbsMaxL2",
    "AbsMinMax",
    "AbsPercentile",
    "DEFAULT_MOMENTUM",
    "HalfQuadraticOptimizerScale",
    "HalfQuadraticOptimizerZeroPoint",
    "L1Norm",
    "L2Norm",
    "MSE",
    "MeanSigmaStd",
    "NegativeMinOrZero",
    "NegativePercentileOrZero",
    "PercentileInterval",
    "SCALAR_SHAPE",
    "StatsOp",
    "_ParameterListStats",
    "_RuntimeStats",
    "_Stats",
]
