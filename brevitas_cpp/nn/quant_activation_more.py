"""Quantized activations of modern networks that Brevitas 0.12 has no layers for: GELU, SiLU,
Hardswish, Hardsigmoid and LeakyReLU.

Built as brevitas_cpp.nn.quant_activation's QuantSigmoid and QuantTanh are: a
QuantNonLinearActLayer whose act_impl is the float activation, fused with its output quantizer
(``act_quant``), with Brevitas's keyword conventions (act_quant, input_quant,
return_quant_tensor, bit_width, ...). The output quantizer is signed where the activation can go
negative and unsigned for Hardsigmoid, whose output lies in [0, 1]. A shared act_quant proxy
instance brings its own activation, as with QuantSigmoid: ``approximate`` and ``negative_slope``
then go unused."""

import math
from numbers import Real
from typing import Optional

from torch import nn

from brevitas_cpp.nn.mixin.base import mark_internal_kwargs
from brevitas_cpp.nn.quant_layer import ActQuantType, QuantNonLinearActLayer
from brevitas_cpp.quant import Int8ActPerTensorFloat, Uint8ActPerTensorFloat

__all__ = [
    "QuantGELU",
    "QuantSiLU",
    "QuantHardswish",
    "QuantHardsigmoid",
    "QuantLeakyReLU",
    "GELU",
    "SiLU",
    "Hardswish",
    "Hardsigmoid",
    "LeakyReLU",
]

_GELU_APPROXIMATIONS = ("none", "tanh")


# The injector builds act_impl from its named constructor arguments. These subclasses name only
# the activation's own hyper-parameters: no ``inplace``, since writing into the input in place
# would corrupt the tensor the caller and autograd still hold.
class GELU(nn.GELU):
    """nn.GELU built from ``approximate`` alone."""

    def __init__(self, approximate: str = "none") -> None:
        super().__init__(approximate=approximate)


class SiLU(nn.SiLU):
    """nn.SiLU, never in place."""

    def __init__(self) -> None:
        super().__init__()


class Hardswish(nn.Hardswish):
    """nn.Hardswish, never in place."""

    def __init__(self) -> None:
        super().__init__()


class Hardsigmoid(nn.Hardsigmoid):
    """nn.Hardsigmoid, never in place."""

    def __init__(self) -> None:
        super().__init__()


class LeakyReLU(nn.LeakyReLU):
    """nn.LeakyReLU built from ``negative_slope`` alone, never in place."""

    def __init__(self, negative_slope: float = 0.01) -> None:
        super().__init__(negative_slope=negative_slope)


def _check_approximate(approximate: object) -> str:
    if not isinstance(approximate, str) or approximate not in _GELU_APPROXIMATIONS:
        raise ValueError(
            f"QuantGELU: approximate must be one of {_GELU_APPROXIMATIONS} (as nn.GELU), "
            f"got {approximate!r}"
        )
    return approximate


def _check_negative_slope(negative_slope: object) -> float:
    # bool is a Real too, but True as a slope is surely a mistake.
    valid = isinstance(negative_slope, Real) and not isinstance(negative_slope, bool)
    if not valid or not math.isfinite(float(negative_slope)):
        raise ValueError(
            f"QuantLeakyReLU: negative_slope must be a finite real number, got {negative_slope!r}"
        )
    return float(negative_slope)


class QuantGELU(QuantNonLinearActLayer):
    """GELU (exact, or its tanh approximation with ``approximate="tanh"``) followed by signed
    8-bit quantization with a learned per-tensor scale."""

    def __init__(
        self,
        act_quant: Optional[ActQuantType] = Int8ActPerTensorFloat,
        input_quant: Optional[ActQuantType] = None,
        return_quant_tensor: bool = False,
        approximate: str = "none",
        **kwargs,
    ) -> None:
        # The layer's own argument, read by act_impl's constructor: not a quantizer keyword.
        mark_internal_kwargs(self, "approximate")
        QuantNonLinearActLayer.__init__(
            self,
            act_impl=GELU,
            passthrough_act=False,
            input_quant=input_quant,
            act_quant=act_quant,
            return_quant_tensor=return_quant_tensor,
            approximate=_check_approximate(approximate),
            **kwargs,
        )


class QuantSiLU(QuantNonLinearActLayer):
    """SiLU (x * sigmoid(x)) followed by signed 8-bit quantization with a learned per-tensor
    scale."""

    def __init__(
        self,
        act_quant: Optional[ActQuantType] = Int8ActPerTensorFloat,
        input_quant: Optional[ActQuantType] = None,
        return_quant_tensor: bool = False,
        **kwargs,
    ) -> None:
        QuantNonLinearActLayer.__init__(
            self,
            act_impl=SiLU,
            passthrough_act=False,
            input_quant=input_quant,
            act_quant=act_quant,
            return_quant_tensor=return_quant_tensor,
            **kwargs,
        )


class QuantHardswish(QuantNonLinearActLayer):
    """Hardswish (x * relu6(x + 3) / 6) followed by signed 8-bit quantization with a learned
    per-tensor scale."""

    def __init__(
        self,
        act_quant: Optional[ActQuantType] = Int8ActPerTensorFloat,
        input_quant: Optional[ActQuantType] = None,
        return_quant_tensor: bool = False,
        **kwargs,
    ) -> None:
        QuantNonLinearActLayer.__init__(
            self,
            act_impl=Hardswish,
            passthrough_act=False,
            input_quant=input_quant,
            act_quant=act_quant,
            return_quant_tensor=return_quant_tensor,
            **kwargs,
        )


class QuantHardsigmoid(QuantNonLinearActLayer):
    """Hardsigmoid (relu6(x + 3) / 6, in [0, 1]) followed by unsigned 8-bit quantization with a
    learned per-tensor scale."""

    def __init__(
        self,
        act_quant: Optional[ActQuantType] = Uint8ActPerTensorFloat,
        input_quant: Optional[ActQuantType] = None,
        return_quant_tensor: bool = False,
        **kwargs,
    ) -> None:
        QuantNonLinearActLayer.__init__(
            self,
            act_impl=Hardsigmoid,
            passthrough_act=False,
            input_quant=input_quant,
            act_quant=act_quant,
            return_quant_tensor=return_quant_tensor,
            **kwargs,
        )


class QuantLeakyReLU(QuantNonLinearActLayer):
    """LeakyReLU (slope ``negative_slope`` below zero) followed by signed 8-bit quantization with
    a learned per-tensor scale."""

    def __init__(
        self,
        act_quant: Optional[ActQuantType] = Int8ActPerTensorFloat,
        input_quant: Optional[ActQuantType] = None,
        return_quant_tensor: bool = False,
        negative_slope: float = 0.01,
        **kwargs,
    ) -> None:
        mark_internal_kwargs(self, "negative_slope")  # as approximate in QuantGELU
        QuantNonLinearActLayer.__init__(
            self,
            act_impl=LeakyReLU,
            passthrough_act=False,
            input_quant=input_quant,
            act_quant=act_quant,
            return_quant_tensor=return_quant_tensor,
            negative_slope=_check_negative_slope(negative_slope),
            **kwargs,
        )
