"""Quantized activation layers (Brevitas's brevitas.nn.quant_activation).

Each layer is a QuantNonLinearActLayer wired with one float activation: an optional input
quantizer, then the activation fused with its output quantizer (``act_quant``). A quantizer
argument takes an injector class (configured by the layer's keyword arguments), a shared proxy
instance, or None (no quantization: the float activation alone)."""

from typing import Optional

from torch import nn

from brevitas_cpp.nn.quant_layer import ActQuantType, QuantNonLinearActLayer
from brevitas_cpp.quant import (
    Int8ActPerTensorFloat,
    Int8ActPerTensorFloatMinMaxInit,
    Uint8ActPerTensorFloat,
)

__all__ = [
    "QuantReLU",
    "QuantSigmoid",
    "QuantTanh",
    "QuantHardTanh",
    "QuantIdentity",
    "Sigmoid",
    "Tanh",
]


class Sigmoid(nn.Sigmoid):
    """nn.Sigmoid with an explicit empty constructor: the injector instantiates ``act_impl`` by
    reading its constructor arguments, and nn.Module's ``*args, **kwargs`` can not be wired."""

    def __init__(self) -> None:
        super().__init__()


class Tanh(nn.Tanh):
    """nn.Tanh with an explicit empty constructor (see Sigmoid)."""

    def __init__(self) -> None:
        super().__init__()


class QuantReLU(QuantNonLinearActLayer):
    """ReLU followed by unsigned 8-bit quantization with a learned per-tensor scale.

    ReLU is a passthrough activation: a QuantTensor input keeps its scale when act_quant=None."""

    def __init__(
        self,
        act_quant: Optional[ActQuantType] = Uint8ActPerTensorFloat,
        input_quant: Optional[ActQuantType] = None,
        return_quant_tensor: bool = False,
        **kwargs,
    ) -> None:
        QuantNonLinearActLayer.__init__(
            self,
            act_impl=nn.ReLU,
            passthrough_act=True,
            input_quant=input_quant,
            act_quant=act_quant,
            return_quant_tensor=return_quant_tensor,
            **kwargs,
        )


class QuantSigmoid(QuantNonLinearActLayer):
    """Sigmoid followed by unsigned 8-bit quantization with a learned per-tensor scale."""

    def __init__(
        self,
        act_quant: Optional[ActQuantType] = Uint8ActPerTensorFloat,
        input_quant: Optional[ActQuantType] = None,
        return_quant_tensor: bool = False,
        **kwargs,
    ) -> None:
        QuantNonLinearActLayer.__init__(
            self,
            act_impl=Sigmoid,
            passthrough_act=False,
            input_quant=input_quant,
            act_quant=act_quant,
            return_quant_tensor=return_quant_tensor,
            **kwargs,
        )


class QuantTanh(QuantNonLinearActLayer):
    """Tanh followed by signed 8-bit quantization with a learned per-tensor scale."""

    def __init__(
        self,
        act_quant: Optional[ActQuantType] = Int8ActPerTensorFloat,
        input_quant: Optional[ActQuantType] = None,
        return_quant_tensor: bool = False,
        **kwargs,
    ) -> None:
        QuantNonLinearActLayer.__init__(
            self,
            act_impl=Tanh,
            passthrough_act=False,
            input_quant=input_quant,
            act_quant=act_quant,
            return_quant_tensor=return_quant_tensor,
            **kwargs,
        )


class QuantHardTanh(QuantNonLinearActLayer):
    """HardTanh as a signed 8-bit quantizer whose scale starts from ``min_val``/``max_val``.

    With quantization on, the quantizer's clamp is the HardTanh, so nn.Hardtanh is not run; with
    act_quant=None it is nn.Hardtanh(min_val, max_val) in float."""

    def __init__(
        self,
        act_quant: Optional[ActQuantType] = Int8ActPerTensorFloatMinMaxInit,
        input_quant: Optional[ActQuantType] = None,
        return_quant_tensor: bool = False,
        **kwargs,
    ) -> None:
        # Without a quantizer the bounds can only come from the keywords; the injector would
        # otherwise fail deep inside with "can not resolve 'signed'".
        if act_quant is None and "min_val" not in kwargs and "signed" not in kwargs:
            raise TypeError(
                "QuantHardTanh: with act_quant=None the layer is the float "
                "nn.Hardtanh(min_val, max_val) and needs its bounds as keywords, e.g. "
                "QuantHardTanh(act_quant=None, min_val=-1.0, max_val=1.0); got keywords "
                f"{sorted(kwargs)}"
            )
        QuantNonLinearActLayer.__init__(
            self,
            act_impl=nn.Hardtanh,
            passthrough_act=True,
            input_quant=input_quant,
            act_quant=act_quant,
            return_quant_tensor=return_quant_tensor,
            **kwargs,
        )


class QuantIdentity(QuantNonLinearActLayer):
    """Signed 8-bit quantization of its input (no activation): the usual input quantizer of a
    network, or a requantization point between layers."""

    def __init__(
        self,
        act_quant: Optional[ActQuantType] = Int8ActPerTensorFloat,
        return_quant_tensor: bool = False,
        **kwargs,
    ) -> None:
        QuantNonLinearActLayer.__init__(
            self,
            input_quant=None,
            act_impl=None,
            passthrough_act=True,
            act_quant=act_quant,
            return_quant_tensor=return_quant_tensor,
            **kwargs,
        )
