"""Proxies of minifloat activation quantizers (Brevitas's ``brevitas.proxy.float_runtime_quant``).

As for weights: layers get (value, scale, zero_point, bit_width) from ``quant_tuple``, and
``forward`` returns a FloatQuantTensor with the quantizer's whole output.
"""

from typing import Any, Optional, Tuple, Union

from torch import Tensor, nn

from brevitas_cpp.proxy.float_format import MinifloatFormatQueries
from brevitas_cpp.proxy.runtime_quant import ActQuantProxyFromInjectorBase
from brevitas_cpp.proxy.script import QuantTuple
from brevitas_cpp.proxy.utils import _CachedIOFloat
from brevitas_cpp.quant_tensor import FloatQuantTensor

__all__ = [
    "ActFloatQuantProxyFromInjector",
    "ActFloatQuantProxyFromInjectorBase",
    "DynamicActFloatQuantProxyFromInjector",
]


class ActFloatQuantProxyFromInjectorBase(MinifloatFormatQueries, ActQuantProxyFromInjectorBase):
    """An activation proxy whose quantizer returns Brevitas's minifloat tuple (FloatQuant).
    The metadata getters run the quantizer in eval by default (force_eval), so reading them does
    not update statistics."""

    @property
    def input_view_impl(self) -> nn.Module:
        fused = self.fused_activation_quant_proxy
        if fused is not None and self._is_quant_enabled:
            return fused.tensor_quant.input_view_impl
        return nn.Identity()

    def quant_tuple(self, x: Tensor) -> QuantTuple:
        """(value, scale, zero_point, bit_width) of the activation and minifloat quantizer, None
        metadata when nothing is quantized."""
        return self.layout_quant_tuple(x)

    def layout_quant_tuple(self, x: Tensor) -> QuantTuple:
        """quant_tuple in the layout the quantizer works in (grouped, for per-group scales)."""
        if self.fused_activation_quant_proxy is None:
            return x, None, None, None
        if not self._is_quant_enabled or self.disable_quant:
            return self.fused_activation_quant_proxy.activation_impl(x), None, None, None
        out = self.fused_activation_quant_proxy(x)
        return out[0], out[1], out[2], self.fused_activation_quant_proxy.tensor_quant.bit_width()

    def quantizer_output(self, x: Tensor) -> Tuple[Any, ...]:
        if not self._is_quant_enabled or self.disable_quant:
            return self.quant_tuple(x)
        return self.fused_activation_quant_proxy(x)

    def scale(self, force_eval: bool = True) -> Optional[Tensor]:
        return self.retrieve_attribute("scale", force_eval)

    def zero_point(self, force_eval: bool = True) -> Optional[Tensor]:
        return self.retrieve_attribute("zero_point", force_eval)

    def exponent_bit_width(self, force_eval: bool = True) -> Optional[Tensor]:
        return self.retrieve_attribute("exponent_bit_width", force_eval)

    def mantissa_bit_width(self, force_eval: bool = True) -> Optional[Tensor]:
        return self.retrieve_attribute("mantissa_bit_width", force_eval)

    def exponent_bias(self, force_eval: bool = True) -> Optional[Tensor]:
        return self.retrieve_attribute("exponent_bias", force_eval)

    def is_saturating(self, force_eval: bool = True) -> Optional[bool]:
        return self.retrieve_attribute("saturating", force_eval)

    def inf_values(self, force_eval: bool = True) -> Optional[Tuple[str, ...]]:
        return self.retrieve_attribute("inf_values", force_eval)

    def nan_values(self, force_eval: bool = True) -> Optional[Tuple[str, ...]]:
        return self.retrieve_attribute("nan_values", force_eval)


class ActFloatQuantProxyFromInjector(ActFloatQuantProxyFromInjectorBase):
    """Activation proxy returning FloatQuantTensors."""

    def __init__(self, quant_layer: nn.Module, quant_injector) -> None:
        super().__init__(quant_layer, quant_injector)
        self.cache_class = _CachedIOFloat

    def create_quant_tensor(
        self, qt_args: Union[Tensor, Tuple[Any, ...]], x: Union[Tensor, FloatQuantTensor]
    ) -> FloatQuantTensor:
        if isinstance(qt_args, tuple):
            return FloatQuantTensor(*qt_args, self.is_signed, self.training)
        # A passthrough activation keeps the input's format. (Brevitas 0.12.1 swaps the
        # exponent and mantissa widths here; they are kept in place.)
        return FloatQuantTensor(
            qt_args,
            x.scale,
            x.zero_point,
            x.exponent_bit_width,
            x.mantissa_bit_width,
            x.exponent_bias,
            x.saturating,
            x.inf_values,
            x.nan_values,
            x.signed,
            self.training,
        )


class DynamicActFloatQuantProxyFromInjector(ActFloatQuantProxyFromInjector):
    """For minifloat quantizers whose scale is computed from each input."""

    def scale(self, force_eval: bool = True):
        raise RuntimeError(
            f"Scale for Dynamic Act Quant is input-dependant: {type(self).__name__}: the scale "
            f"depends on the input; read it from the QuantTensor the proxy returns"
        )

    def zero_point(self, force_eval: bool = True):
        raise RuntimeError(
            f"Zero point for Dynamic Act Quant is input-dependant: {type(self).__name__}: the "
            f"zero point depends on the input; read it from the QuantTensor the proxy returns"
        )
