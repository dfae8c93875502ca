"""Quantized layers (Brevitas's brevitas.nn): drop-in subclasses of the torch layers with
weight, bias, input and output quantizers given as quantizer classes, shared proxies or None."""

from brevitas_cpp._unsupported import unsupported_getattr

from .hadamard_classifier import HadamardClassifier
from .quant_activation import QuantHardTanh, QuantIdentity, QuantReLU, QuantSigmoid, QuantTanh
from .quant_activation_more import (
    QuantGELU,
    QuantHardsigmoid,
    QuantHardswish,
    QuantLeakyReLU,
    QuantSiLU,
)
from .quant_avg_pool import TruncAdaptiveAvgPool2d, TruncAvgPool2d
from .quant_bn import BatchNorm1dToQuantScaleBias, BatchNorm2dToQuantScaleBias
from .quant_conv import QuantConv1d, QuantConv2d, QuantConv3d
from .quant_convtranspose import QuantConvTranspose1d, QuantConvTranspose2d, QuantConvTranspose3d
from .quant_eltwise import QuantCat, QuantEltwiseAdd
from .quant_embedding import QuantEmbedding
from .quant_linear import QuantLinear, QuantTransformersConv1D
from .quant_mha import QuantMultiheadAttention
from .quant_rnn import QuantLSTM, QuantRNN
from .quant_scale_bias import QuantScaleBias, ScaleBias
from .quant_sdpa import QuantScaledDotProductAttention, ScaledDotProductAttention
from .quant_upsample import QuantUpsample, QuantUpsamplingBilinear2d, QuantUpsamplingNearest2d

__all__ = [
    "BatchNorm1dToQuantScaleBias",
    "BatchNorm2dToQuantScaleBias",
    "HadamardClassifier",
    "QuantCat",
    "QuantConv1d",
    "QuantConv2d",
    "QuantConv3d",
    "QuantConvTranspose1d",
    "QuantConvTranspose2d",
    "QuantConvTranspose3d",
    "QuantEltwiseAdd",
    "QuantEmbedding",
    "QuantGELU",
    "QuantHardsigmoid",
    "QuantHardswish",
    "QuantHardTanh",
    "QuantIdentity",
    "QuantLeakyReLU",
    "QuantLinear",
    "QuantTransformersConv1D",
    "QuantLSTM",
    "QuantMultiheadAttention",
    "QuantReLU",
    "QuantRNN",
    "QuantScaleBias",
    "QuantScaledDotProductAttention",
    "QuantSigmoid",
    "QuantSiLU",
    "QuantTanh",
    "QuantUpsample",
    "QuantUpsamplingBilinear2d",
    "QuantUpsamplingNearest2d",
    "ScaleBias",
    "ScaledDotProductAttention",
    "TruncAdaptiveAvgPool2d",
    "TruncAvgPool2d",
]

# Brevitas names brevitas_cpp does not support raise on use (brevitas_cpp._unsupported).
__getattr__ = unsupported_getattr(__name__)
