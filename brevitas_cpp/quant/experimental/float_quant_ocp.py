"""OCP FP8 quantizers (Brevitas's ``brevitas.quant.experimental.float_quant_ocp``), following
the OCP 8-bit floating point specification: E4M3 reserves the top code S.1111.111 for NaN and
has no inf (largest value 448); E5M2 keeps the IEEE-style top exponent for inf (mantissa 00) and
NaN (01, 10, 11; largest value 57344). Other widths reserve nothing. Saturating.
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
from brevitas_cpp.utils.float_quant_utils import get_max_available_float

TENSOR = ScalingPerOutputType.TENSOR
CHANNEL = ScalingPerOutputType.CHANNEL
# Per-channel activation statistics of NCHW inputs: channels first, then everything else.
NCHW_CHANNELS_FIRST = (1, 0, 2, 3)


class FpOCPMixin(ExtendedInjector):
    """The OCP special codes for 8-bit E4M3 and E5M2, none for other formats, and the largest
    value left once they are reserved."""

    saturating = True

    @value
    def inf_values(bit_width, mantissa_bit_width, exponent_bit_width):
        if (bit_width, exponent_bit_width, mantissa_bit_width) == (8, 5, 2):
            return ("00",)
        return None

    @value
    def nan_values(bit_width, mantissa_bit_width, exponent_bit_width):
        if (bit_width, exponent_bit_width, mantissa_bit_width) == (8, 4, 3):
            return ("111",)
        if (bit_width, exponent_bit_width, mantissa_bit_width) == (8, 5, 2):
            return ("01", "11", "10")
        return None

    @value
    def max_available_float(
        exponent_bit_width, mantissa_bit_width, exponent_bias, nan_values, inf_values, saturating
    ):
        return get_max_available_float(
            exponent_bit_width,
            mantissa_bit_width,
            exponent_bias,
            nan_values,
            inf_values,
            saturating,
        )


__all__ = [
    "Fp8e4m3OCPAct",
    "Fp8e4m3OCPActPerTensorFloat",
    "Fp8e4m3OCPActPerTensorFloatMSE",
    "Fp8e4m3OCPWeight",
    "Fp8e4m3OCPWeightPerChannelFloat",
    "Fp8e4m3OCPWeightPerChannelFloatMSE",
    "Fp8e4m3OCPWeightPerTensorFloat",
    "Fp8e4m3OCPWeightPerTensorFloatMSE",
    "Fp8e5m2OCPAct",
    "Fp8e5m2OCPActPerTensorFloat",
    "Fp8e5m2OCPActPerTensorFloatMSE",
    "Fp8e5m2OCPWeight",
    "Fp8e5m2OCPWeightPerChannelFloat",
    "Fp8e5m2OCPWeightPerChannelFloatMSE",
    "Fp8e5m2OCPWeightPerTensorFloat",
    "Fp8e5m2OCPWeightPerTensorFloatMSE",
    "FpOCPAct",
    "FpOCPActPerChannelFloat2d",
    "FpOCPActPerChannelFloat2dMSE",
    "FpOCPActPerTensorFloat",
    "FpOCPActPerTensorFloatMSE",
    "FpOCPMixin",
    "FpOCPWeight",
    "FpOCPWeightPerChannelFloat",
    "FpOCPWeightPerChannelFloatMSE",
    "FpOCPWeightPerTensorFloat",
    "FpOCPWeightPerTensorFloatMSE",
]


class FpOCPWeight(FpOCPMixin, FloatWeightBase):
    """OCP minifloat weights, scale 1 (set exponent_bit_width and mantissa_bit_width)."""

    scaling_per_output_type = TENSOR


class FpOCPAct(FpOCPMixin, FloatActBase):
    """OCP minifloat activations, scale 1 (set exponent_bit_width and mantissa_bit_width)."""

    scaling_per_output_type = TENSOR


class FpOCPWeightPerTensorFloat(FpOCPMixin, ScaledFloatWeightBase):
    """OCP minifloat weights, per-tensor max |w| scale (set exponent_bit_width and mantissa_bit_width)."""

    scaling_per_output_type = TENSOR


class FpOCPActPerTensorFloat(FpOCPMixin, ScaledFloatActBase):
    """OCP minifloat activations, per-tensor learned scale initialised from running max |x| (set exponent_bit_width and mantissa_bit_width)."""

    scaling_per_output_type = TENSOR


class FpOCPWeightPerChannelFloat(FpOCPMixin, ScaledFloatWeightBase):
    """OCP minifloat weights, per-output-channel max |w| scale (set exponent_bit_width and mantissa_bit_width)."""

    scaling_per_output_type = CHANNEL


class FpOCPActPerChannelFloat2d(FpOCPMixin, ScaledFloatActBase):
    """OCP minifloat NCHW activations, per-channel learned scale initialised from running max |x| (set exponent_bit_width and mantissa_bit_width)."""

    scaling_per_output_type = CHANNEL
    scaling_stats_permute_dims = NCHW_CHANNELS_FIRST


class FpOCPActPerTensorFloatMSE(FpOCPMixin, MSESymmetricScale, ScaledFloatActBase):
    """OCP minifloat activations, per-tensor scale from an MSE search (set exponent_bit_width and mantissa_bit_width)."""

    scaling_per_output_type = TENSOR


class FpOCPActPerChannelFloat2dMSE(FpOCPMixin, MSESymmetricScale, ScaledFloatActBase):
    """OCP minifloat NCHW activations, per-channel scale from an MSE search (set exponent_bit_width and mantissa_bit_width)."""

    scaling_per_output_type = CHANNEL
    scaling_stats_permute_dims = NCHW_CHANNELS_FIRST


class FpOCPWeightPerChannelFloatMSE(FpOCPMixin, MSESymmetricScale, ScaledFloatWeightBase):
    """OCP minifloat weights, per-output-channel scale from an MSE search (set exponent_bit_width and mantissa_bit_width)."""

    scaling_per_output_type = CHANNEL


class FpOCPWeightPerTensorFloatMSE(FpOCPMixin, MSESymmetricScale, ScaledFloatWeightBase):
    """OCP minifloat weights, per-tensor scale from an MSE search (set exponent_bit_width and mantissa_bit_width)."""

    scaling_per_output_type = TENSOR


class Fp8e4m3OCPWeight(FpOCPWeight, Fp8e4m3Mixin):
    """OCP FP8 E4M3: FpOCPWeight."""


class Fp8e4m3OCPAct(FpOCPAct, Fp8e4m3Mixin):
    """OCP FP8 E4M3: FpOCPAct."""


class Fp8e4m3OCPWeightPerTensorFloat(FpOCPWeightPerTensorFloat, Fp8e4m3Mixin):
    """OCP FP8 E4M3: FpOCPWeightPerTensorFloat."""


class Fp8e4m3OCPWeightPerChannelFloat(FpOCPWeightPerChannelFloat, Fp8e4m3Mixin):
    """OCP FP8 E4M3: FpOCPWeightPerChannelFloat."""


class Fp8e4m3OCPActPerTensorFloat(FpOCPActPerTensorFloat, Fp8e4m3Mixin):
    """OCP FP8 E4M3: FpOCPActPerTensorFloat."""


class Fp8e4m3OCPActPerTensorFloatMSE(FpOCPActPerTensorFloatMSE, Fp8e4m3Mixin):
    """OCP FP8 E4M3: FpOCPActPerTensorFloatMSE."""


class Fp8e4m3OCPWeightPerTensorFloatMSE(FpOCPWeightPerTensorFloatMSE, Fp8e4m3Mixin):
    """OCP FP8 E4M3: FpOCPWeightPerTensorFloatMSE."""


class Fp8e4m3OCPWeightPerChannelFloatMSE(FpOCPWeightPerChannelFloatMSE, Fp8e4m3Mixin):
    """OCP FP8 E4M3: FpOCPWeightPerChannelFloatMSE."""


class Fp8e5m2OCPWeight(FpOCPWeight, Fp8e5m2Mixin):
    """OCP FP8 E5M2: FpOCPWeight."""


class Fp8e5m2OCPAct(FpOCPAct, Fp8e5m2Mixin):
    """OCP FP8 E5M2: FpOCPAct."""


class Fp8e5m2OCPWeightPerTensorFloat(FpOCPWeightPerTensorFloat, Fp8e5m2Mixin):
    """OCP FP8 E5M2: FpOCPWeightPerTensorFloat."""


class Fp8e5m2OCPWeightPerChannelFloat(FpOCPWeightPerChannelFloat, Fp8e5m2Mixin):
    """OCP FP8 E5M2: FpOCPWeightPerChannelFloat."""


class Fp8e5m2OCPActPerTensorFloat(FpOCPActPerTensorFloat, Fp8e5m2Mixin):
    """OCP FP8 E5M2: FpOCPActPerTensorFloat."""


class Fp8e5m2OCPActPerTensorFloatMSE(FpOCPActPerTensorFloatMSE, Fp8e5m2Mixin):
    """OCP FP8 E5M2: FpOCPActPerTensorFloatMSE."""


class Fp8e5m2OCPWeightPerTensorFloatMSE(FpOCPWeightPerTensorFloatMSE, Fp8e5m2Mixin):
    """OCP FP8 E5M2: FpOCPWeightPerTensorFloatMSE."""


class Fp8e5m2OCPWeightPerChannelFloatMSE(FpOCPWeightPerChannelFloatMSE, Fp8e5m2Mixin):
    """OCP FP8 E5M2: FpOCPWeightPerChannelFloatMSE."""
