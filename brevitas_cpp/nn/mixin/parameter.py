"""Mixins that quantize a layer's parameters: ``weight_quant`` (keywords ``weight_*``) and
``bias_quant`` (keywords ``bias_*``)."""

from typing import List, Optional, Tuple, Type, Union

from torch import Tensor

from brevitas_cpp.inject import ExtendedInjector, Injector
from brevitas_cpp.proxy.weight_bias_quant import BiasQuantProxyProtocol, WeightQuantProxyProtocol
from brevitas_cpp.quant import NoneBiasQuant, NoneWeightQuant
from brevitas_cpp.quant_tensor import QuantTensor

from .base import QuantProxyMixin

__all__ = ["WeightQuantType", "BiasQuantType", "QuantWeightMixin", "QuantBiasMixin"]

WeightQuantType = Union[WeightQuantProxyProtocol, Type[Injector], Type[ExtendedInjector]]
BiasQuantType = Union[BiasQuantProxyProtocol, Type[Injector], Type[ExtendedInjector]]


def _reinit_on_new_parameter(layer, proxy_name: str, name: str, value) -> None:
    """A replaced weight or bias (e.g. ``layer.bias = Parameter(...)``) changes what the
    quantizer tracks: rebuild it, as Brevitas does."""
    proxy = getattr(layer, proxy_name, None)  # None while the torch layer registers it first
    if proxy is not None and value is not None:
        proxy.rebuild_tensor_quant()
        proxy.to(value.device)


class QuantWeightMixin(QuantProxyMixin):
    """Adds ``weight_quant`` and ``quant_weight()``; the layer defines ``weight`` and
    ``output_channel_dim``."""

    def __init__(self, weight_quant: Optional[WeightQuantType], **kwargs):
        QuantProxyMixin.__init__(
            self,
            quant=weight_quant,
            proxy_protocol=WeightQuantProxyProtocol,
            none_quant_injector=NoneWeightQuant,
            kwargs_prefix="weight_",
            proxy_prefix="weight_",
            **kwargs,
        )
        self._cached_sub_tensor_slice_list_modules = None

    @property
    def output_channel_dim(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} does not define output_channel_dim")

    def quant_weight(
        self,
        quant_input: Optional[QuantTensor] = None,
        subtensor_slice_list: Optional[List[Optional[Tuple[int, int]]]] = None,
    ) -> Union[Tensor, QuantTensor]:
        """The quantized weight (a QuantTensor), or the weight itself when quantization is off.
        subtensor_slice_list quantizes only a slice ((start, stop) or None per dim) with the
        quantizer told about the slice, for algorithms that quantize a weight piecewise."""
        weight = self.weight
        if subtensor_slice_list is None:
            return self._call_weight_quant(weight, quant_input)
        if self._cached_sub_tensor_slice_list_modules is None:
            self._cached_sub_tensor_slice_list_modules = [
                m for m in self.weight_quant.modules() if hasattr(m, "subtensor_slice_list")
            ]
        for m in self._cached_sub_tensor_slice_list_modules:
            m.subtensor_slice_list = subtensor_slice_list
        try:
            index = tuple(slice(*s) if s is not None else slice(None) for s in subtensor_slice_list)
            return self._call_weight_quant(weight[index], quant_input)
        finally:
            for m in self._cached_sub_tensor_slice_list_modules:
                m.subtensor_slice_list = [None]

    def _call_weight_quant(self, weight: Tensor, quant_input) -> Union[Tensor, QuantTensor]:
        if getattr(self.weight_quant, "requires_quant_input", False):
            return self.weight_quant(weight, quant_input)
        return self.weight_quant(weight)

    def register_parameter(self, name, value):
        super(QuantWeightMixin, self).register_parameter(name, value)
        if name == "weight":
            _reinit_on_new_parameter(self, "weight_quant", name, value)


class QuantBiasMixin(QuantProxyMixin):
    """Adds ``bias_quant`` and ``quant_bias()``; the layer defines ``bias`` (possibly None).
    cache_inference_bias is accepted for Brevitas compatibility and unused, as there."""

    def __init__(
        self, bias_quant: Optional[BiasQuantType], cache_inference_bias: bool = False, **kwargs
    ):
        QuantProxyMixin.__init__(
            self,
            quant=bias_quant,
            proxy_protocol=BiasQuantProxyProtocol,
            none_quant_injector=NoneBiasQuant,
            kwargs_prefix="bias_",
            proxy_prefix="bias_",
            **kwargs,
        )

    def quant_bias(self) -> Optional[Union[Tensor, QuantTensor]]:
        """The bias quantized on its own (no input scale), None without a bias."""
        if self.bias is None:
            return None
        return self.bias_quant(self.bias)

    def register_parameter(self, name, value):
        super(QuantBiasMixin, self).register_parameter(name, value)
        if name == "bias":
            _reinit_on_new_parameter(self, "bias_quant", name, value)
