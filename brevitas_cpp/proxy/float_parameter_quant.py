"""Proxies of minifloat weight quantizers (Brevitas's ``brevitas.proxy.float_parameter_quant``).

Layers get (value, scale, zero_point, bit_width) from ``quant_tuple`` like from any weight proxy
(bit_width being exponent + mantissa + sign); ``forward`` returns a FloatQuantTensor with the
quantizer's whole output (exponent and mantissa widths, bias, saturation, inf/NaN codes).
"""

from typing import Any, Optional, Tuple

from torch import Tensor, nn

from brevitas_cpp._unsupported import unsupported_getattr
from brevitas_cpp.core.function_wrapper import Identity
from brevitas_cpp.proxy.float_format import MinifloatFormatQueries, minifloat_bit_width
from brevitas_cpp.proxy.script import QuantTuple
from brevitas_cpp.proxy.utils import _CachedIOFloat
from brevitas_cpp.proxy.weight_bias_quant import WeightQuantProxyFromInjectorBase
from brevitas_cpp.quant_tensor import FloatQuantTensor

__all__ = ["WeightFloatQuantProxyFromInjector", "WeightFloatQuantProxyFromInjectorBase"]


class WeightFloatQuantProxyFromInjectorBase(
    MinifloatFormatQueries, WeightQuantProxyFromInjectorBase
):
    """A weight proxy whose quantizer returns Brevitas's minifloat tuple (FloatQuant)."""

    @property
    def input_view_impl(self) -> nn.Module:
        if self.tensor_quant is not None:
            return self.tensor_quant.input_view_impl
        return Identity()

    def quant_tuple(self, x: Tensor) -> QuantTuple:
        """(value, scale, zero_point, bit_width) of the minifloat quantizer, None metadata when
        nothing is quantized."""
        return self.layout_quant_tuple(x)

    def layout_quant_tuple(self, x: Tensor) -> QuantTuple:
        """quant_tuple in the layout the quantizer works in (grouped, for per-group scales)."""
        if self.tensor_quant is None:
            return x, None, None, None
        if self.disable_quant:
            return x, None, None, None
        out = self.tensor_quant(x)
        return out[0], out[1], out[2], self.tensor_quant.bit_width()

    def quantizer_output(self, x: Tensor) -> Tuple[Any, ...]:
        return self.tensor_quant(x)

    def retrieve_attribute(self, attribute: str) -> Any:
        if not self.is_quant_enabled:
            return None
        if self._cached_weight is not None:
            return getattr(self._cached_weight, attribute)
        return getattr(self.__call__(self.tracked_parameter_list[0]), attribute)

    def bit_width(self) -> Optional[Tensor]:
        if not self.is_quant_enabled:
            return None
        out = self.__call__(self.tracked_parameter_list[0])
        return minifloat_bit_width(out.exponent_bit_width, out.mantissa_bit_width, out.signed)

    def scale(self) -> Optional[Tensor]:
        return self.retrieve_attribute("scale")

    def zero_point(self) -> Optional[Tensor]:
        return self.retrieve_attribute("zero_point")

    def exponent_bit_width(self) -> Optional[Tensor]:
        return self.retrieve_attribute("exponent_bit_width")

    def mantissa_bit_width(self) -> Optional[Tensor]:
        return self.retrieve_attribute("mantissa_bit_width")

    def exponent_bias(self) -> Optional[Tensor]:
        return self.retrieve_attribute("exponent_bias")

    def is_saturating(self) -> Optional[bool]:
        return self.retrieve_attribute("saturating")

    def inf_values(self) -> Optional[Tuple[str, ...]]:
        return self.retrieve_attribute("inf_values")

    def nan_values(self) -> Optional[Tuple[str, ...]]:
        return self.retrieve_attribute("nan_values")


class WeightFloatQuantProxyFromInjector(WeightFloatQuantProxyFromInjectorBase):
    """Quantizes the weight it is given and returns a FloatQuantTensor."""

    def __init__(self, quant_layer: nn.Module, quant_injector) -> None:
        super().__init__(quant_layer, quant_injector)
        self.cache_class = _CachedIOFloat

    def create_quant_tensor(self, qt_args: Tuple[Any, ...]) -> FloatQuantTensor:
        return FloatQuantTensor(*qt_args, self.is_signed, self.training)


# Brevitas names brevitas_cpp does not support raise on use (brevitas_cpp._unsupported).
__getattr__ = unsupported_getattr(__name__)
