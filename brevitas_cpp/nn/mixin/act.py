"""Mixins that quantize activations: a layer's input (``input_quant``, keywords ``input_*``), its
output (``output_quant``, keywords ``output_*``) and a quantized activation function
(``act_quant``, by default every keyword without another quantizer's prefix)."""

from typing import Optional, Type, Union

from torch.nn import Module

from brevitas_cpp.inject import ExtendedInjector, Injector
from brevitas_cpp.proxy.runtime_quant import ActQuantProxyProtocol
from brevitas_cpp.quant import NoneActQuant

from .base import QuantProxyMixin, mark_internal_kwargs

__all__ = ["ActQuantType", "QuantInputMixin", "QuantOutputMixin", "QuantNonLinearActMixin"]

ActQuantType = Union[ActQuantProxyProtocol, Type[Injector], Type[ExtendedInjector]]


class QuantInputMixin(QuantProxyMixin):
    """Adds ``input_quant``: quantizes the layer's input, with no activation function."""

    def __init__(self, input_quant: Optional[ActQuantType], **kwargs):
        mark_internal_kwargs(self, "input_act_impl", "input_passthrough_act")
        QuantProxyMixin.__init__(
            self,
            quant=input_quant,
            proxy_protocol=ActQuantProxyProtocol,
            none_quant_injector=NoneActQuant,
            proxy_prefix="input_",
            kwargs_prefix="input_",
            input_act_impl=None,
            input_passthrough_act=True,
            **kwargs,
        )


class QuantOutputMixin(QuantProxyMixin):
    """Adds ``output_quant``: quantizes the layer's output, with no activation function."""

    def __init__(self, output_quant: Optional[ActQuantType], **kwargs):
        mark_internal_kwargs(self, "output_act_impl", "output_passthrough_act")
        QuantProxyMixin.__init__(
            self,
            quant=output_quant,
            proxy_protocol=ActQuantProxyProtocol,
            none_quant_injector=NoneActQuant,
            proxy_prefix="output_",
            kwargs_prefix="output_",
            output_act_impl=None,
            output_passthrough_act=True,
            **kwargs,
        )


class QuantNonLinearActMixin(QuantProxyMixin):
    """Adds ``<act_proxy_prefix>quant`` (``act_quant``): applies ``act_impl`` then quantizes.
    passthrough_act says the activation keeps a quantized input's scale and bit width (ReLU,
    Identity), so a QuantTensor input stays a QuantTensor with quantization off."""

    def __init__(
        self,
        act_impl: Optional[Type[Module]],
        passthrough_act: bool,
        act_quant: Optional[ActQuantType],
        act_proxy_prefix="act_",
        act_kwargs_prefix="",
        **kwargs,
    ):
        prefixed_kwargs = {
            act_kwargs_prefix + "act_impl": act_impl,
            act_kwargs_prefix + "passthrough_act": passthrough_act,
        }
        mark_internal_kwargs(self, *prefixed_kwargs)
        QuantProxyMixin.__init__(
            self,
            quant=act_quant,
            proxy_prefix=act_proxy_prefix,
            kwargs_prefix=act_kwargs_prefix,
            proxy_protocol=ActQuantProxyProtocol,
            none_quant_injector=NoneActQuant,
            **prefixed_kwargs,
            **kwargs,
        )
