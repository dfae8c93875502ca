"""Seed 003's quantizers: symmetric narrow signed integers with a max-abs threshold, recomputed
at every call for weights and an exponential moving average for activations, computed by the
C++ op quantization_int8 (core block QuantizationInt8).

Their options are quantizer attributes, so layers take them as keywords with the quantizer's
prefix: ``QuantIdentity(act_quant=Int8ActPerTensorEma, delay_quant=1000)``,
``QuantConv2d(..., weight_quant=Int8WeightPerChannelMaxAbs, weight_grad_mode="clip")``.

- bit_width (8): QL = 2^(bit_width-1) - 1, integers [-QL, QL], in [2, 24];
- ema_decay (0.01): the weight of each training batch's max|x| in the activation threshold
  (the weights' threshold is max|w| at every call, ema_decay has no effect on it);
- delay_quant (0): training calls that return x unquantized while the threshold is tracked;
- grad_mode ("ste"): x's gradient passes straight through; "clip" zeroes it where |x| > t;
- quant_mode ("minmax"): scale t / QL; "power2" rounds t up to a power of two first.

They are signed: on a ReLU's output (QuantReLU) the negative half of the range stays unused,
as with Brevitas's signed quantizers there (7 bits of resolution out of 8).
"""

from typing import Any, Optional

from brevitas_cpp.core.quant import QuantizationInt8
from brevitas_cpp.core.quant.int8_ema import check_quantization_int8_args
from brevitas_cpp.inject.enum import FloatToIntImplType, QuantType, ScalingPerOutputType
from brevitas_cpp.inject.injector import ExtendedInjector, value
from brevitas_cpp.proxy.runtime_quant import ActQuantProxyFromInjector
from brevitas_cpp.proxy.weight_bias_quant import WeightQuantProxyFromInjector
from brevitas_cpp.quant.solver.common import QuantizerSolveError, quantizer_name, to_enum
from brevitas_cpp.quant.solver.parameter import require_module
from brevitas_cpp.quant.solver.weight import (
    layer_output_channel_dim,
    layer_output_channels,
    shared_property,
)

__all__ = [
    "Int8WeightPerTensorMaxAbs",
    "Int8WeightPerChannelMaxAbs",
    "Int8WeightPerChannelMaxAbsPower2",
    "Int8ActPerTensorEma",
    "Int8ActPerTensorEmaPower2",
]


def _per_channel(scaling_per_output_type: Any, quantizer: Any) -> bool:
    kind = to_enum(
        ScalingPerOutputType, scaling_per_output_type, "scaling_per_output_type", quantizer
    )
    if kind == ScalingPerOutputType.GROUP:
        raise QuantizerSolveError(
            f"{quantizer_name(quantizer)}: scaling_per_output_type=GROUP is not supported by "
            f"quantization_int8; accepted: TENSOR, CHANNEL"
        )
    return kind == ScalingPerOutputType.CHANNEL


class _Int8EmaQuant(ExtendedInjector):
    """What the seed-003 quantizers share: the block, its options and what the proxies read."""

    bit_width = 8
    ema_decay = 0.01
    delay_quant = 0
    grad_mode = "ste"
    quant_mode = "minmax"
    scaling_per_output_type = ScalingPerOutputType.TENSOR
    # Read by the proxies: the QuantTensor's sign, and what they report.
    quant_type = QuantType.INT
    signed = True
    narrow_range = True
    float_to_int_impl_type = FloatToIntImplType.ROUND  # half to even
    update_state_dict_impl = None

    @value
    def scaling_per_output(scaling_per_output_type, __self__):
        return to_enum(
            ScalingPerOutputType, scaling_per_output_type, "scaling_per_output_type", __self__
        )

    @value
    def tensor_quant(
        __self__,
        bit_width,
        is_weight,
        ema_decay,
        delay_quant,
        grad_mode,
        quant_mode,
        channel_axis=None,
        channels=None,
    ):
        # Checked here too, so that an error names the quantizer (the block names itself).
        check_quantization_int8_args(
            quantizer_name(__self__),
            bit_width,
            is_weight,
            channel_axis,
            channels,
            ema_decay,
            delay_quant,
            grad_mode,
            quant_mode,
        )
        return QuantizationInt8


class _Int8EmaWeight(_Int8EmaQuant):
    """Weights: the threshold is max|w| (per tensor, or per output channel of the layer)."""

    is_weight = True
    proxy_class = WeightQuantProxyFromInjector

    @value
    def channel_axis(scaling_per_output_type, __self__, module=None) -> Optional[int]:
        if not _per_channel(scaling_per_output_type, __self__):
            return None
        module = require_module(module, __self__, "channel_axis")
        return shared_property(module, layer_output_channel_dim, "output_channel_dim", __self__)

    @value
    def channels(scaling_per_output_type, __self__, module=None) -> Optional[int]:
        if not _per_channel(scaling_per_output_type, __self__):
            return None
        module = require_module(module, __self__, "channels")
        return shared_property(
            module, layer_output_channels, "the number of output channels", __self__
        )


class _Int8EmaAct(_Int8EmaQuant):
    """Activations: the threshold is an exponential moving average of max|x| over training
    batches, one per tensor (an activation's channel count is not known from a layer)."""

    is_weight = False
    proxy_class = ActQuantProxyFromInjector

    @value
    def channel_axis(scaling_per_output_type, __self__) -> None:
        if _per_channel(scaling_per_output_type, __self__):
            raise QuantizerSolveError(
                f"{quantizer_name(__self__)}: scaling_per_output_type=CHANNEL is not offered "
                f"for activations (the channel count of an activation is not known from the "
                f"layer); accepted: TENSOR"
            )
        return None


class Int8WeightPerTensorMaxAbs(_Int8EmaWeight):
    """Narrow signed 8-bit weights, scale max|w| / 127."""


class Int8WeightPerChannelMaxAbs(_Int8EmaWeight):
    """Narrow signed 8-bit weights, scale max|w_c| / 127 per output channel."""

    scaling_per_output_type = ScalingPerOutputType.CHANNEL


class Int8WeightPerChannelMaxAbsPower2(Int8WeightPerChannelMaxAbs):
    """As Int8WeightPerChannelMaxAbs with max|w_c| rounded up to a power of two."""

    quant_mode = "power2"


class Int8ActPerTensorEma(_Int8EmaAct):
    """Narrow signed 8-bit activations, scale t / 127, t the moving average of max|x|."""


class Int8ActPerTensorEmaPower2(Int8ActPerTensorEma):
    """As Int8ActPerTensorEma with t rounded up to a power of two."""

    quant_mode = "power2"
