"""FP8 quantizers (Brevitas's ``brevitas.quant.experimental.float``): e4m3 and e5m2 with bias
2^(e-1) - 1 and every code a finite value (no inf or NaN), saturating. ``Fp8*Weight``/``Act``
have a scale of 1; the ``PerTensorFloat``/``PerChannelFloat`` ones scale by a max statistic
over the format's largest value; ``MSE`` ones pick the scale minimising the quantization error.
"""

from brevitas_cpp.inject.enum import ScalingPerOutputType
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

__all__ = [
    "Fp8e4m3Act",
    "Fp8e4m3ActPerChannelFloat2d",
    "Fp8e4m3ActPerChannelFloat2dMSE",
    "Fp8e4m3ActPerTensorFloat",
    "Fp8e4m3ActPerTensorFloatMSE",
    "Fp8e4m3Weight",
    "Fp8e4m3WeightPerChannelFloat",
    "Fp8e4m3WeightPerChannelFloatMSE",
    "Fp8e4m3WeightPerTensorFloat",
    "Fp8e4m3WeightPerTensorFloatMSE",
    "Fp8e5m2Act",
    "Fp8e5m2ActPerChannelFloat2d",
    "Fp8e5m2ActPerChannelFloat2dMSE",
    "Fp8e5m2ActPerTensorFloat",
    "Fp8e5m2ActPerTensorFloatMSE",
    "Fp8e5m2Weight",
    "Fp8e5m2WeightPerChannelFloat",
    "Fp8e5m2WeightPerTensorFloat",
]


class Fp8e4m3Weight(Fp8e4m3Mixin, FloatWeightBase):
    """FP8 E4M3 weights, scale 1."""

    scaling_per_output_type = TENSOR


class Fp8e5m2Weight(Fp8e5m2Mixin, FloatWeightBase):
    """FP8 E5M2 weights, scale 1."""

    scaling_per_output_type = TENSOR


class Fp8e4m3Act(Fp8e4m3Mixin, FloatActBase):
    """FP8 E4M3 activations, scale 1."""

    scaling_per_output_type = TENSOR


class Fp8e5m2Act(Fp8e5m2Mixin, FloatActBase):
    """FP8 E5M2 activations, scale 1."""

    scaling_per_output_type = TENSOR


class Fp8e4m3WeightPerTensorFloat(Fp8e4m3Mixin, ScaledFloatWeightBase):
    """FP8 E4M3 weights, per-tensor max |w| scale."""

    scaling_per_output_type = TENSOR


class Fp8e5m2WeightPerTensorFloat(Fp8e5m2Mixin, ScaledFloatWeightBase):
    """FP8 E5M2 weights, per-tensor max |w| scale."""

    scaling_per_output_type = TENSOR


class Fp8e4m3ActPerTensorFloat(Fp8e4m3Mixin, ScaledFloatActBase):
    """FP8 E4M3 activations, per-tensor learned scale initialised from running max |x|."""

    scaling_per_output_type = TENSOR


class Fp8e5m2ActPerTensorFloat(Fp8e5m2Mixin, ScaledFloatActBase):
    """FP8 E5M2 activations, per-tensor learned scale initialised from running max |x|."""

    scaling_per_output_type = TENSOR


class Fp8e4m3WeightPerChannelFloat(Fp8e4m3Mixin, ScaledFloatWeightBase):
    """FP8 E4M3 weights, per-output-channel max |w| scale."""

    scaling_per_output_type = CHANNEL


class Fp8e5m2WeightPerChannelFloat(Fp8e5m2Mixin, ScaledFloatWeightBase):
    """FP8 E5M2 weights, per-output-channel max |w| scale."""

    scaling_per_output_type = CHANNEL


class Fp8e4m3ActPerChannelFloat2d(Fp8e4m3Mixin, ScaledFloatActBase):
    """FP8 E4M3 NCHW activations, per-channel learned scale initialised from running max |x|."""

    scaling_per_output_type = CHANNEL
    scaling_stats_permute_dims = NCHW_CHANNELS_FIRST


class Fp8e5m2ActPerChannelFloat2d(Fp8e5m2Mixin, ScaledFloatActBase):
    """FP8 E5M2 NCHW activations, per-channel learned scale initialised from running max |x|."""

    scaling_per_output_type = CHANNEL
    scaling_stats_permute_dims = NCHW_CHANNELS_FIRST


class Fp8e4m3ActPerTensorFloatMSE(Fp8e4m3Mixin, MSESymmetricScale, ScaledFloatActBase):
    """FP8 E4M3 activations, per-tensor scale from an MSE search."""

    scaling_per_output_type = TENSOR


class Fp8e5m2ActPerTensorFloatMSE(Fp8e5m2Mixin, MSESymmetricScale, ScaledFloatActBase):
    """FP8 E5M2 activations, per-tensor scale from an MSE search."""

    scaling_per_output_type = TENSOR


class Fp8e4m3ActPerChannelFloat2dMSE(Fp8e4m3Mixin, MSESymmetricScale, ScaledFloatActBase):
    """FP8 E4M3 NCHW activations, per-channel scale from an MSE search."""

    scaling_per_output_type = CHANNEL
    scaling_stats_permute_dims = NCHW_CHANNELS_FIRST


class Fp8e5m2ActPerChannelFloat2dMSE(Fp8e5m2Mixin, MSESymmetricScale, ScaledFloatActBase):
    """FP8 E5M2 NCHW activations, per-channel scale from an MSE search."""

    scaling_per_output_type = CHANNEL
    scaling_stats_permute_dims = NCHW_CHANNELS_FIRST


class Fp8e4m3WeightPerChannelFloatMSE(Fp8e4m3Mixin, MSESymmetricScale, ScaledFloatWeightBase):
    """FP8 E4M3 weights, per-output-channel scale from an MSE search."""

    scaling_per_output_type = CHANNEL


class Fp8e4m3WeightPerTensorFloatMSE(Fp8e4m3Mixin, MSESymmetricScale, ScaledFloatWeightBase):
    """FP8 E4M3 weights, per-tensor scale from an MSE search."""

    scaling_per_output_type = TENSOR
