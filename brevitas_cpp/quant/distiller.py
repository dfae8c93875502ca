"""Distiller's quantization-aware-training methods as quantizers (core blocks in
brevitas_cpp.core.quant.distiller):

- PACTActQuant: PACT's learned clipping of ReLU outputs (LearnedClippedLinearQuantization),
  ``QuantReLU(act_quant=PACTActQuant, bit_width=4, act_clip_init_val=8.0)``; the learned
  Parameter is named ``clip_val`` (Distiller's PACTQuantizer gives it its own optimizer group);
- ClippedActQuant: DoReFa's activations, clamped to [0, 1] (ClippedLinearQuantization),
  ``QuantReLU(act_quant=ClippedActQuant, bit_width=8)``;
- DorefaWeightQuant: DoReFa weights (dorefa_quantize_param),
  ``QuantConv2d(..., weight_quant=DorefaWeightQuant, weight_bit_width=3)``;
- RangeLinearActQuant: QuantAwareTrainRangeLinearQuantizer's activations
  (FakeLinearQuantization: an EMA of the range with bias correction), keywords bit_width,
  linear_quant_mode, ema_decay;
- RangeLinearWeightQuant, RangeLinearBiasQuant: its parameters (linear_quantize_param), from the
  tensor's range at every call; weights per output channel with ``weight_per_channel=True``.

linear_quant_mode is Distiller's LinearQuantMode by name: "SYMMETRIC" (default; its integers
reach +-2^(b-1), so layers report b + 1 bits), "SYMMETRIC_RESTRICTED" (narrow, [-(2^(b-1) - 1),
2^(b-1) - 1]), "ASYMMETRIC_UNSIGNED" ([0, 2^b - 1]), "ASYMMETRIC_SIGNED" ([-2^(b-1),
2^(b-1) - 1]). Rounding is half to even, as Distiller's torch.round.
"""

from typing import Any, Optional

from torch import nn

from brevitas_cpp.core.quant.distiller import (
    ASYMMETRIC_UNSIGNED,
    SYMMETRIC_RESTRICTED,
    ClippedLinearQuant,
    DorefaParamQuant,
    LearnedClippedLinearQuant,
    RangeLinearFakeQuant,
    RangeLinearParamQuant,
    check_act_clip_init_val,
    check_ema_decay,
    check_linear_quant_mode,
    check_pact_dorefa_bit_width,
    check_per_channel,
    check_range_linear_bit_width,
)
from brevitas_cpp.inject.enum import FloatToIntImplType, QuantType
from brevitas_cpp.inject.injector import ExtendedInjector, value
from brevitas_cpp.proxy.runtime_quant import ActQuantProxyFromInjector
from brevitas_cpp.proxy.weight_bias_quant import (
    BiasQuantProxyFromInjector,
    WeightQuantProxyFromInjector,
)
from brevitas_cpp.quant.solver.common import quantizer_name
from brevitas_cpp.quant.solver.parameter import require_module
from brevitas_cpp.quant.solver.weight import layer_output_channel_dim, shared_property

__all__ = [
    "ClippedActQuant",
    "PACTActQuant",
    "DorefaWeightQuant",
    "RangeLinearActQuant",
    "RangeLinearWeightQuant",
    "RangeLinearBiasQuant",
]


class _DistillerQuant(ExtendedInjector):
    """What the proxies read of every Distiller quantizer."""

    quant_type = QuantType.INT
    float_to_int_impl_type = FloatToIntImplType.ROUND  # half to even
    narrow_range = False
    update_state_dict_impl = None
    bit_width = 8


class PACTActQuant(_DistillerQuant):
    """PACT: relu(x) clipped at the learned clip_val (initialised to act_clip_init_val),
    unsigned bit_width integers, scale clip_val / (2^b - 1), zero point 0."""

    proxy_class = ActQuantProxyFromInjector
    signed = False
    act_clip_init_val = 8.0

    @value
    def tensor_quant(__self__, bit_width, act_clip_init_val):
        # Checked here too, so that an error names the quantizer (the block names itself).
        check_pact_dorefa_bit_width(quantizer_name(__self__), bit_width)
        check_act_clip_init_val(quantizer_name(__self__), act_clip_init_val)
        return LearnedClippedLinearQuant


class ClippedActQuant(_DistillerQuant):
    """DoReFa's activations (Distiller's ClippedLinearQuantization): x clamped to [0,
    act_clip_val] (1.0, Distiller's value), unsigned bit_width integers, scale
    act_clip_val / (2^b - 1), zero point 0."""

    proxy_class = ActQuantProxyFromInjector
    signed = False
    act_clip_val = 1.0

    @value
    def tensor_quant(__self__, bit_width, act_clip_val):
        check_pact_dorefa_bit_width(quantizer_name(__self__), bit_width)
        check_act_clip_init_val(quantizer_name(__self__), act_clip_val, "act_clip_val", "the")
        return ClippedLinearQuant


class DorefaWeightQuant(_DistillerQuant):
    """DoReFa weights: for bit_width >= 2, unsigned integers [0, 2^b - 1] with scale
    2 / (2^b - 1) and zero point (2^b - 1) / 2 (values in [-1, 1]); for 1 bit, signed +-1 with
    scale mean|w| (Brevitas's binary convention)."""

    proxy_class = WeightQuantProxyFromInjector

    @value
    def signed(bit_width, __self__) -> bool:
        return check_pact_dorefa_bit_width(quantizer_name(__self__), bit_width) == 1

    @value
    def tensor_quant(__self__, bit_width):
        check_pact_dorefa_bit_width(quantizer_name(__self__), bit_width)
        return DorefaParamQuant


class _RangeLinearQuant(_DistillerQuant):
    """The mode decides the sign and narrow range the proxies report."""

    linear_quant_mode = "SYMMETRIC"

    @value
    def signed(linear_quant_mode, __self__) -> bool:
        return check_linear_quant_mode(quantizer_name(__self__), linear_quant_mode) != (
            ASYMMETRIC_UNSIGNED
        )

    @value
    def narrow_range(linear_quant_mode, __self__) -> bool:
        mode = check_linear_quant_mode(quantizer_name(__self__), linear_quant_mode)
        return mode == SYMMETRIC_RESTRICTED


def _check_range_linear(quantizer: Any, bit_width: Any, linear_quant_mode: Any) -> None:
    check_range_linear_bit_width(quantizer_name(quantizer), bit_width)
    check_linear_quant_mode(quantizer_name(quantizer), linear_quant_mode)


class RangeLinearActQuant(_RangeLinearQuant):
    """Activations clamped to an EMA-tracked range (ema_decay, default 0.999, bias-corrected)
    and quantized per tensor. In eval before any training step the range is [0, 0] and the
    output 0, as in Distiller."""

    proxy_class = ActQuantProxyFromInjector
    ema_decay = 0.999

    @value
    def tensor_quant(__self__, bit_width, linear_quant_mode, ema_decay):
        _check_range_linear(__self__, bit_width, linear_quant_mode)
        check_ema_decay(quantizer_name(__self__), ema_decay)
        return RangeLinearFakeQuant


def _is_per_channel_layer(layer: nn.Module) -> bool:
    # Distiller's rule: linear and conv weights (2 or 4 dims), never an embedding's rows.
    weight = getattr(layer, "weight", None)
    return not isinstance(layer, nn.Embedding) and weight is not None and weight.dim() in (2, 4)


class RangeLinearWeightQuant(_RangeLinearQuant):
    """Weights quantized from their own range at every call, no clamp. per_channel (False):
    one scale per output channel where Distiller allows it (a 2- or 4-dim weight, not an
    Embedding's), per tensor elsewhere. The output channel is the layer's (dim 1 of a
    transposed convolution, where Distiller always takes dim 0)."""

    proxy_class = WeightQuantProxyFromInjector
    per_channel = False

    @value
    def channel_axis(per_channel, __self__, module=None) -> Optional[int]:
        if not check_per_channel(quantizer_name(__self__), per_channel):
            return None
        module = require_module(module, __self__, "channel_axis")
        layers = module if isinstance(module, tuple) else (module,)
        if not all(_is_per_channel_layer(layer) for layer in layers):
            return None
        return shared_property(module, layer_output_channel_dim, "output_channel_dim", __self__)

    @value
    def tensor_quant(__self__, bit_width, linear_quant_mode):
        _check_range_linear(__self__, bit_width, linear_quant_mode)
        return RangeLinearParamQuant


class RangeLinearBiasQuant(_RangeLinearQuant):
    """Biases quantized per tensor from their own range (no input scale needed), 32 bits by
    default as Distiller's bits_bias."""

    proxy_class = BiasQuantProxyFromInjector
    requires_input_scale = False
    bit_width = 32
    channel_axis = None

    @value
    def tensor_quant(__self__, bit_width, linear_quant_mode):
        _check_range_linear(__self__, bit_width, linear_quant_mode)
        return RangeLinearParamQuant
