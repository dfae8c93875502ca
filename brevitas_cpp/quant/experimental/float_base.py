"""Bases of the minifloat quantizers (Brevitas's ``brevitas.quant.experimental.float_base``).

A minifloat quantizer sets exponent_bit_width and mantissa_bit_width (bit_width is their sum
plus the sign); the scale is a statistic divided by the format's largest value (FloatScaling),
as an integer quantizer divides by max_int. The exponent bias defaults to IEEE's 2^(e-1) - 1.
"""

from brevitas_cpp.core.function_wrapper import FloatClamp, TensorClamp
from brevitas_cpp.core.quant.float import FloatQuant
from brevitas_cpp.core.scaling.float_scaling import FloatScaling
from brevitas_cpp.inject.injector import ExtendedInjector, value
from brevitas_cpp.proxy.float_parameter_quant import WeightFloatQuantProxyFromInjector
from brevitas_cpp.proxy.float_runtime_quant import ActFloatQuantProxyFromInjector
from brevitas_cpp.quant.solver.act import ActQuantSolver
from brevitas_cpp.quant.solver.common import SolveTensorQuantFloatToIntImplFromEnum
from brevitas_cpp.quant.solver.weight import WeightQuantSolver

__all__ = [
    "FloatActBase",
    "FloatBase",
    "FloatWeightBase",
    "Fp4e2m1Mixin",
    "Fp6e2m3Mixin",
    "Fp6e3m2Mixin",
    "Fp8e4m3Mixin",
    "Fp8e5m2Mixin",
    "ScaledFloatActBase",
    "ScaledFloatWeightBase",
]


class FloatBase(SolveTensorQuantFloatToIntImplFromEnum):
    """A signed minifloat quantizer rounding to nearest (ties to even), saturating at the
    format's largest value."""

    tensor_quant = FloatQuant
    signed = True
    float_to_int_impl_type = "round"
    scaling_min_val = 1e-10
    float_clamp_impl = FloatClamp
    tensor_clamp_impl = TensorClamp

    @value
    def exponent_bias(exponent_bit_width):
        return 2 ** (exponent_bit_width - 1) - 1


class FloatWeightBase(FloatBase, WeightQuantSolver):
    """Weights, with a scale of 1 unless a scaled base sets one."""

    proxy_class = WeightFloatQuantProxyFromInjector


class FloatActBase(FloatBase, ActQuantSolver):
    """Activations, with a scale of 1 unless a scaled base sets one."""

    proxy_class = ActFloatQuantProxyFromInjector


class ScaledFloatWeightBase(FloatWeightBase, WeightQuantSolver):
    """Weights scaled by their max |w| (per tensor or per channel) over the format's largest
    value."""

    scaling_stats_op = "max"
    scaling_impl_type = "stats"
    restrict_scaling_type = "fp"
    float_scaling_impl = FloatScaling


class ScaledFloatActBase(FloatActBase, ActQuantSolver):
    """Activations scaled by a learned scale, initialised from their running max |x| over the
    first 300 training steps, over the format's largest value."""

    scaling_stats_op = "max"
    scaling_impl_type = "parameter_from_stats"
    restrict_scaling_type = "fp"
    collect_stats_steps = 300
    float_scaling_impl = FloatScaling


class Fp8e4m3Mixin(ExtendedInjector):
    bit_width = 8
    exponent_bit_width = 4
    mantissa_bit_width = 3
    saturating = True


class Fp8e5m2Mixin(ExtendedInjector):
    bit_width = 8
    exponent_bit_width = 5
    mantissa_bit_width = 2
    saturating = True


class Fp6e3m2Mixin(ExtendedInjector):
    bit_width = 6
    exponent_bit_width = 3
    mantissa_bit_width = 2
    saturating = True


class Fp6e2m3Mixin(ExtendedInjector):
    bit_width = 6
    exponent_bit_width = 2
    mantissa_bit_width = 3
    saturating = True


class Fp4e2m1Mixin(ExtendedInjector):
    bit_width = 4
    exponent_bit_width = 2
    mantissa_bit_width = 1
    saturating = True
