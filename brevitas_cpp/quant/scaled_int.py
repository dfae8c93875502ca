"""Ready-made integer quantizers with floating-point scale factors (Brevitas's
brevitas.quant.scaled_int). Derive from one to change a setting, e.g.
``class Int4WeightPerChannelFloat(Int8WeightPerChannelFloat): bit_width = 4``."""

from brevitas_cpp.core.function_wrapper import TensorClamp
from brevitas_cpp.quant.base import (
    IntQuant,
    MaxStatsScaling,
    NarrowIntQuant,
    ParamFromRuntimePercentileScaling,
    ParamMinMaxInitScaling,
    PerChannelFloatScaling8bit,
    PerTensorFloatScaling8bit,
    UintQuant,
)
from brevitas_cpp.quant.solver.act import ActQuantSolver
from brevitas_cpp.quant.solver.bias import BiasQuantSolver
from brevitas_cpp.quant.solver.trunc import TruncQuantSolver
from brevitas_cpp.quant.solver.weight import WeightQuantSolver

__all__ = [
    "IntBias",
    "Int8Bias",
    "Int16Bias",
    "Int24Bias",
    "Int32Bias",
    "Int8BiasPerTensorFloatInternalScaling",
    "Int8ActPerTensorFloatMinMaxInit",
    "Uint8ActPerTensorFloatMaxInit",
    "Int8ActPerTensorFloat",
    "Int8WeightPerTensorFloat",
    "Int8WeightPerChannelFloat",
    "Uint8ActPerTensorFloat",
    "TruncTo8bit",
    "RoundTo8bit",
]


class Int8ActPerTensorFloatMinMaxInit(
    IntQuant, ParamMinMaxInitScaling, PerTensorFloatScaling8bit, ActQuantSolver
):
    """Signed 8-bit activations, learned float scale initialised to max(|min_val|, |max_val|)
    (both given by the user)."""


class Uint8ActPerTensorFloatMaxInit(
    UintQuant, ParamMinMaxInitScaling, PerTensorFloatScaling8bit, ActQuantSolver
):
    """Unsigned 8-bit activations, learned float scale initialised to |max_val| (given by the
    user)."""

    min_val = 0.0


class IntBias(IntQuant, BiasQuantSolver):
    """Signed int bias with the scale of the accumulator it is added to (input scale times weight
    scale), passed in at call time; set bit_width (see Int8Bias, ..., Int32Bias)."""

    tensor_clamp_impl = TensorClamp
    requires_input_scale = True


class Int8Bias(IntBias):
    """IntBias on 8 bits."""

    bit_width = 8


class Int16Bias(IntBias):
    """IntBias on 16 bits."""

    bit_width = 16


class Int24Bias(IntBias):
    """IntBias on 24 bits."""

    bit_width = 24


class Int32Bias(IntBias):
    """IntBias on 32 bits."""

    bit_width = 32


class Int8BiasPerTensorFloatInternalScaling(
    IntQuant, MaxStatsScaling, PerTensorFloatScaling8bit, BiasQuantSolver
):
    """Signed 8-bit bias with its own float scale max|b| / 127."""

    requires_input_scale = False


class Int8WeightPerTensorFloat(
    NarrowIntQuant, MaxStatsScaling, PerTensorFloatScaling8bit, WeightQuantSolver
):
    """Narrow signed 8-bit weights, one float scale max|w| / 127."""


class Int8WeightPerChannelFloat(
    NarrowIntQuant, MaxStatsScaling, PerChannelFloatScaling8bit, WeightQuantSolver
):
    """Narrow signed 8-bit weights, one float scale per output channel, max|w_c| / 127."""


class Int8ActPerTensorFloat(
    IntQuant, ParamFromRuntimePercentileScaling, PerTensorFloatScaling8bit, ActQuantSolver
):
    """Signed 8-bit activations, learned float scale initialised from runtime percentile
    statistics."""


class Uint8ActPerTensorFloat(
    UintQuant, ParamFromRuntimePercentileScaling, PerTensorFloatScaling8bit, ActQuantSolver
):
    """Unsigned 8-bit activations, learned float scale initialised from runtime percentile
    statistics."""


class TruncTo8bit(TruncQuantSolver):
    """Requantizes to 8 bits keeping the most significant bits, rounding down (floor); the zero
    point is kept."""

    bit_width = 8
    quant_type = "int"
    bit_width_impl_type = "const"
    float_to_int_impl_type = "floor"
    trunc_scaling_impl_type = "msb"


class RoundTo8bit(TruncQuantSolver):
    """As TruncTo8bit, rounding half to even."""

    bit_width = 8
    quant_type = "int"
    bit_width_impl_type = "const"
    float_to_int_impl_type = "round"
    trunc_scaling_impl_type = "msb"
