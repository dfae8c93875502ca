"""Statistics blocks: the ops that reduce a tensor to a statistic, the wrappers that shape and
accumulate them, and the views of tracked parameters they read from."""

from brevitas_cpp._unsupported import unsupported_getattr
from brevitas_cpp.inject.enum import StatsOp

from . import hqo as _hqo
from . import stats_op as _stats_op
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

# Brevitas defines these in stats_op; here they live in mse.py and hqo.py, which import
# stats_op's helpers, so stats_op can not import them back: they are set on it once all exist.
_stats_op.MSE = MSE
for _obj in (
    HalfQuadraticOptimizerScale,
    HalfQuadraticOptimizerZeroPoint,
    _hqo.masked_median,
    _hqo.shrink_lp_op,
):
    setattr(_stats_op, _obj.__name__, _obj)
del _obj

# Brevitas names brevitas_cpp does not support raise on use (brevitas_cpp._unsupported).
__getattr__ = unsupported_getattr(__name__)
