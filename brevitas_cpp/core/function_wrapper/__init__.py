"""Module wrappers of elementwise functions, views and clamps used inside quantizers."""

from brevitas_cpp.core.function_wrapper.clamp import ClampMin, FloatClamp, ScalarClamp, TensorClamp
from brevitas_cpp.core.function_wrapper.learned_round import (
    LearnedRoundHardSigmoid,
    LearnedRoundIdentity,
    LearnedRoundSigmoid,
    LearnedRoundSte,
)
from brevitas_cpp.core.function_wrapper.misc import Abs, Identity, InplaceLogTwo, LogTwo, PowerOfTwo
from brevitas_cpp.core.function_wrapper.ops_ste import (
    ROUNDING_MODE_OF_IMPL,
    CeilSte,
    DPURoundSte,
    FloorSte,
    InplaceTensorClampSte,
    RoundSte,
    RoundToZeroSte,
    ScalarClampMinSte,
    ScalarSignedClampMinSte,
    TensorClampSte,
)
from brevitas_cpp.core.function_wrapper.shape import (
    DynamicOverSubChannelBlockView,
    OverBatchOverOutputChannelView,
    OverBatchOverTensorView,
    OverOutputChannelView,
    OverOutputFeaturesView,
    OverSubChannelBlockView,
    OverTensorView,
    PermuteDims,
    StatsInputViewShapeImpl,
)
from brevitas_cpp.core.function_wrapper.stochastic_round import StochasticRoundSte

__all__ = [
    "Abs",
    "CeilSte",
    "ClampMin",
    "DPURoundSte",
    "DynamicOverSubChannelBlockView",
    "FloatClamp",
    "FloorSte",
    "Identity",
    "LearnedRoundHardSigmoid",
    "LearnedRoundIdentity",
    "LearnedRoundSigmoid",
    "LearnedRoundSte",
    "InplaceLogTwo",
    "InplaceTensorClampSte",
    "LogTwo",
    "OverBatchOverOutputChannelView",
    "OverBatchOverTensorView",
    "OverOutputChannelView",
    "OverOutputFeaturesView",
    "OverSubChannelBlockView",
    "OverTensorView",
    "PermuteDims",
    "PowerOfTwo",
    "ROUNDING_MODE_OF_IMPL",
    "RoundSte",
    "RoundToZeroSte",
    "ScalarClamp",
    "ScalarClampMinSte",
    "ScalarSignedClampMinSte",
    "StatsInputViewShapeImpl",
    "StochasticRoundSte",
    "TensorClamp",
    "TensorClampSte",
]
