"""Scale factors of quantizers: constant, learned, from statistics of weights or of runtime
inputs (optionally learned afterwards), integer-range thresholds and truncation scales."""

from brevitas_cpp.core.scaling.float_scaling import FloatScaling
from brevitas_cpp.core.scaling.int_scaling import IntScaling, PowerOfTwoIntScaling
from brevitas_cpp.core.scaling.pre_scaling import (
    AccumulatorAwareParameterPreScaling,
    AccumulatorAwareZeroCenterParameterPreScaling,
    ParameterPreScalingWeightNorm,
)
from brevitas_cpp.core.scaling.runtime import (
    RuntimeDynamicGroupStatsScaling,
    RuntimeStatsScaling,
    StatsFromParameterScaling,
)
from brevitas_cpp.core.scaling.standalone import (
    ConstScaling,
    ParameterFromRuntimeStatsScaling,
    ParameterFromStatsFromParameterScaling,
    ParameterScaling,
    TruncMsbScaling,
    TruncScalingWrapper,
)
from brevitas_cpp.core.stats import SCALAR_SHAPE
from brevitas_cpp.inject.enum import ScalingImplType, ScalingPerOutputType

# Dimension of a [channels, rest] view that per-channel statistics reduce over.
SCALING_STATS_REDUCE_DIM = 1

__all__ = [
    "AccumulatorAwareParameterPreScaling",
    "AccumulatorAwareZeroCenterParameterPreScaling",
    "ConstScaling",
    "FloatScaling",
    "IntScaling",
    "ParameterFromRuntimeStatsScaling",
    "ParameterFromStatsFromParameterScaling",
    "ParameterPreScalingWeightNorm",
    "ParameterScaling",
    "PowerOfTwoIntScaling",
    "RuntimeDynamicGroupStatsScaling",
    "RuntimeStatsScaling",
    "SCALAR_SHAPE",
    "SCALING_STATS_REDUCE_DIM",
    "ScalingImplType",
    "ScalingPerOutputType",
    "StatsFromParameterScaling",
    "TruncMsbScaling",
    "TruncScalingWrapper",
]
