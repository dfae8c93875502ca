"""FNUZ FP8 quantizers (Brevitas's ``brevitas.quant.experimental.float_quant_fnuz``): finite,
no negative zero, exponent bias 2^(e-1) (one more than IEEE's), every code a finite value
(E4M3's largest is 240, E5M2's 57344). Saturating.
"""

from brevitas_cpp.inject.enum import ScalingPerOutputType
from brevitas_cpp.inject.injector import ExtendedInjector, value
from brevitas_cpp.quant.base import MSESymmetricScale
from brevitas_cpp.quant.experimental.float_base import (
    FloatActBase,
    FloatWeightBase,
    Fp8e4m3Mixin,
    Fp8e5m2Mixin,
    ScaledFloatActBase,
    ScaledFloatWeightBase,
)

TENSOR = ScalingPerOutputType.TENSOR
CHANNEL = ScalingPerOutputType.CHANNEL
# Per-channel activation statistics of NCHW inputs: channels first, then everything else.
NCHW_CHANNELS_FIRST = (1, 0, 2, 3)


class FpFNUZMixin(ExtendedInjector):
    """FNUZ's bias, 2^(e-1)."""

    saturating = True

    @value
    def exponent_bias(exponent_bit_width):
        return 2 ** (exponent_bit_width - 1)


__all__ = [
    "Fp8e4m3FNUZAct",
    "Fp8e4m3FNUZActPerTensorFloat",
    "Fp8e4m3FNUZActPerTensorFloatMSE",
    "Fp8e4m3FNUZWeight",
    "Fp8e4m3FNUZWeightPerChannelFloat",
    "Fp8e4m3FNUZWeightPerChannelFloatMSE",
    "Fp8e4m3FNUZWeightPerTensorFloat",
    "Fp8e4m3FNUZWeightPerTensorFloatMSE",
    "Fp8e5m2FNUZAct",
    "Fp8e5m2FNUZActPerTensorFloat",
    "Fp8e5m2FNUZActPerTensorFloatMSE",
    "Fp8e5m2FNUZWeight",
    "Fp8e5m2FNUZWeightPerChannelFloat",
    "Fp8e5m2FNUZWeightPerChannelFloatMSE",
    "Fp8e5m2FNUZWeightPerTensorFloat",
    "Fp8e5m2FNUZWeightPerTensorFloatMSE",
    "FpFNUZAct",
    "FpFNUZActPerChannelFloat2d",
    "FpFNUZActPerChannelFloat2dMSE",
    "FpFNUZActPerTensorFloat",
    "FpFNUZActPerTensorFloatMSE",
    "FpFNUZMixin",
    "FpFNUZWeight",
    "FpFNUZWeightPerChannelFloat",
    "FpFNUZWeightPerChannelFloatMSE",
    "FpFNUZWeightPerTensorFloat",
    "FpFNUZWeightPerTensorFloatMSE",
]


class FpFNUZWeight(FpFNUZMixin, FloatWeightBase):
    """FNUZ minifloat weights, scale 1 (set exponent_bit_width and mantissa_bit_width)."""

    scaling_per_output_type = TENSOR


class FpFNUZAct(FpFNUZMixin, FloatActBase):
    """FNUZ minifloat activations, scale 1 (set exponent_bit_width and mantissa_bit_width)."""

    scaling_per_output_type = TENSOR


class FpFNUZWeightPerTensorFloat(FpFNUZMixin, ScaledFloatWeightBase):
    """FNUZ minifloat weights, per-tensor max |w| scale (set exponent_bit_width and mantissa_bit_width)."""

    scaling_per_output_type = TENSOR


class FpFNUZActPerTensorFloat(FpFNUZMixin, ScaledFloatActBase):
    """FNUZ minifloat activations, per-tensor learned scale initialised from running max |x| (set exponent_bit_width and mantissa_bit_width)."""

    scaling_per_output_type = TENSOR


class FpFNUZWeightPerChannelFloat(FpFNUZMixin, ScaledFloatWeightBase):
    """FNUZ minifloat weights, per-output-channel max |w| scale (set exponent_bit_width and mantissa_bit_width)."""

    scaling_per_output_type = CHANNEL


class FpFNUZActPerChannelFloat2d(FpFNUZMixin, ScaledFloatActBase):
    """FNUZ minifloat NCHW activations, per-channel learned scale initialised from running max |x| (set exponent_bit_width and mantissa_bit_width)."""

    scaling_per_output_type = CHANNEL
    scaling_stats_permute_dims = NCHW_CHANNELS_FIRST


class FpFNUZActPerTensorFloatMSE(FpFNUZMixin, MSESymmetricScale, ScaledFloatActBase):
    """FNUZ minifloat activations, per-tensor scale from an MSE search (set exponent_bit_width and mantissa_bit_width)."""

    scaling_per_output_type = TENSOR


class FpFNUZActPerChannelFloat2dMSE(FpFNUZMixin, MSESymmetricScale, ScaledFloatActBase):
    """FNUZ minifloat NCHW activations, per-channel scale from an MSE search (set exponent_bit_width and mantissa_bit_width)."""

    scaling_per_output_type = CHANNEL
    scaling_stats_permute_dims = NCHW_CHANNELS_FIRST


class FpFNUZWeightPerChannelFloatMSE(FpFNUZMixin, MSESymmetricScale, ScaledFloatWeightBase):
    """FNUZ minifloat weights, per-output-channel scale from an MSE search (set exponent_bit_width and mantissa_bit_width)."""

    scaling_per_output_type = CHANNEL


class FpFNUZWeightPerTensorFloatMSE(FpFNUZMixin, MSESymmetricScale, ScaledFloatWeightBase):
    """FNUZ minifloat weights, per-tensor scale from an MSE search (set exponent_bit_width and mantissa_bit_width)."""

    scaling_per_output_type = TENSOR


class Fp8e4m3FNUZWeight(FpFNUZWeight, Fp8e4m3Mixin):
    """FNUZ FP8 E4M3: FpFNUZWeight."""


class Fp8e4m3FNUZAct(FpFNUZAct, Fp8e4m3Mixin):
    """FNUZ FP8 E4M3: FpFNUZAct."""


class Fp8e4m3FNUZWeightPerTensorFloat(FpFNUZWeightPerTensorFloat, Fp8e4m3Mixin):
    """FNUZ FP8 E4M3: FpFNUZWeightPerTensorFloat."""


class Fp8e4m3FNUZWeightPerChannelFloat(FpFNUZWeightPerChannelFloat, Fp8e4m3Mixin):
    """FNUZ FP8 E4M3: FpFNUZWeightPerChannelFloat."""


class Fp8e4m3FNUZActPerTensorFloat(FpFNUZActPerTensorFloat, Fp8e4m3Mixin):
    """FNUZ FP8 E4M3: FpFNUZActPerTensorFloat."""


class Fp8e4m3FNUZActPerTensorFloatMSE(FpFNUZActPerTensorFloatMSE, Fp8e4m3Mixin):
    """FNUZ FP8 E4M3: FpFNUZActPerTensorFloatMSE."""


class Fp8e4m3FNUZWeightPerTensorFloatMSE(FpFNUZWeightPerTensorFloatMSE, Fp8e4m3Mixin):
    """FNUZ FP8 E4M3: FpFNUZWeightPerTensorFloatMSE."""


class Fp8e4m3FNUZWeightPerChannelFloatMSE(FpFNUZWeightPerChannelFloatMSE, Fp8e4m3Mixin):
    """FNUZ FP8 E4M3: FpFNUZWeightPerChannelFloatMSE."""


class Fp8e5m2FNUZWeight(FpFNUZWeight, Fp8e5m2Mixin):
    """FNUZ FP8 E5M2: FpFNUZWeight."""


class Fp8e5m2FNUZAct(FpFNUZAct, Fp8e5m2Mixin):
    """FNUZ FP8 E5M2: FpFNUZAct."""


class Fp8e5m2FNUZWeightPerTensorFloat(FpFNUZWeightPerTensorFloat, Fp8e5m2Mixin):
    """FNUZ FP8 E5M2: FpFNUZWeightPerTensorFloat."""


class Fp8e5m2FNUZWeightPerChannelFloat(FpFNUZWeightPerChannelFloat, Fp8e5m2Mixin):
    """FNUZ FP8 E5M2: FpFNUZWeightPerChannelFloat."""


class Fp8e5m2FNUZActPerTensorFloat(FpFNUZActPerTensorFloat, Fp8e5m2Mixin):
    """FNUZ FP8 E5M2: FpFNUZActPerTensorFloat."""


class Fp8e5m2FNUZActPerTensorFloatMSE(FpFNUZActPerTensorFloatMSE, Fp8e5m2Mixin):
    """FNUZ FP8 E5M2: FpFNUZActPerTensorFloatMSE."""


class Fp8e5m2FNUZWeightPerTensorFloatMSE(FpFNUZWeightPerTensorFloatMSE, Fp8e5m2Mixin):
    """FNUZ FP8 E5M2: FpFNUZWeightPerTensorFloatMSE."""


class Fp8e5m2FNUZWeightPerChannelFloatMSE(FpFNUZWeightPerChannelFloatMSE, Fp8e5m2Mixin):
    """FNUZ FP8 E5M2: FpFNUZWeightPerChannelFloatMSE."""
