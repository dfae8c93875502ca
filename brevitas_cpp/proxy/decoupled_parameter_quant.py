"""Proxies of the decoupled weight quantizers (Brevitas's DecoupledWeightQuantProxyFromInjector
and DecoupledWeightQuantWithInputProxyFromInjector, in brevitas.proxy.parameter_quant).

Their quantizer (DecoupledRescalingIntQuant) returns (value, scale, zero_point, bit_width,
pre_scale, pre_zero_point); the proxies hand layers the first four, as every weight proxy does.
The with-input proxy serves accumulator-aware quantizers (A2Q, A2Q+), whose pre-clipping scale
depends on the bit width and sign of the layer's quantized input."""

from typing import Any, Optional, Tuple

from torch import Tensor, nn

from brevitas_cpp.core.function_wrapper import Identity
from brevitas_cpp.proxy.script import QuantTuple
from brevitas_cpp.proxy.utils import _CachedIO
from brevitas_cpp.proxy.weight_bias_quant import WeightQuantProxyFromInjector
from brevitas_cpp.quant_tensor import IntQuantTensor, QuantTensor

__all__ = [
    "DecoupledWeightQuantProxyFromInjector",
    "DecoupledWeightQuantWithInputProxyFromInjector",
    "QuantInputRequiredError",
]

# Brevitas asserts with this phrase: it leads ours.
NO_CACHED_INPUT = "No cached quant input found"


class QuantInputRequiredError(RuntimeError, AssertionError):
    """An accumulator-aware weight quantizer used without a quantized input. Brevitas raises an
    AssertionError here (scale() included); this is also a RuntimeError, as our other refusals
    of a missing input are."""


class DecoupledWeightQuantProxyFromInjector(WeightQuantProxyFromInjector):
    """Quantizes the weight with a decoupled quantizer and returns an IntQuantTensor of its
    post-clipping (dequantizing) scale; ``pre_scale()`` and ``pre_zero_point()`` read the
    pre-clipping ones."""

    @property
    def input_view_impl(self) -> nn.Module:
        if self.tensor_quant is not None:
            return self.tensor_quant.decoupled_int_quant.input_view_impl
        return Identity()

    def _decoupled_output(self) -> Tuple[Tensor, ...]:
        return self.tensor_quant(self.tracked_parameter_list[0])

    def pre_scale(self) -> Optional[Tensor]:
        if not self.is_quant_enabled:
            return None
        return self._decoupled_output()[4]

    def pre_zero_point(self) -> Optional[Tensor]:
        if not self.is_quant_enabled:
            return None
        return self._decoupled_output()[5]

    def create_quant_tensor(self, qt_args: Tuple[Any, ...]) -> IntQuantTensor:
        # The quantizer's six fields or an export handler's four: the pre-clipping pair is not
        # part of the quantized weight.
        value, scale, zero_point, bit_width = qt_args[:4]
        return IntQuantTensor(value, scale, zero_point, bit_width, self.is_signed, self.training)

    def quant_tuple(self, x: Tensor) -> QuantTuple:
        """The quantizer on x without its pre-clipping scale and zero point; what forward wraps
        and layers call."""
        if self.tensor_quant is None:
            return x, None, None, None
        if self.disable_quant:
            return x, None, None, None
        value, scale, zero_point, bit_width, pre_scale, pre_zero_point = self.tensor_quant(x)
        return value, scale, zero_point, bit_width


class DecoupledWeightQuantWithInputProxyFromInjector(DecoupledWeightQuantProxyFromInjector):
    """The weight proxy of accumulator-aware quantizers: ``forward(weight, quant_input)``
    passes the quantized input's bit width and sign to the quantizer.

    In a quant layer quant_input is what the layer's input quantizer returned: an
    IntQuantTensor, or (value, scale, zero_point, bit_width) with the sign read from that input
    quantizer. Without a quantized input (no input quantizer and a float input, or a call
    without one such as ``quant_weight()``), the input metadata cached in eval mode with
    ``cache_inference_quant_act`` is used; otherwise it is an error. Scripting is refused (a
    scripted layer passes plain tensors between layers)."""

    def __init__(self, quant_layer: nn.Module, quant_injector) -> None:
        super().__init__(quant_layer, quant_injector)
        self._cached_act: Optional[_CachedIO] = None
        self.cache_inference_quant_act = False
        self.cache_quant_io_metadata_only = True

    @property
    def requires_quant_input(self) -> bool:
        return True

    def pre_scale(self) -> Optional[Tensor]:
        raise NotImplementedError(
            f"{type(self).__name__}: the pre-clipping scale depends on the quantized input; "
            f"read it from tensor_quant(weight, input_bit_width, input_is_signed)[4]"
        )

    def pre_zero_point(self) -> Optional[Tensor]:
        raise NotImplementedError(
            f"{type(self).__name__}: the pre-clipping zero point depends on the quantized "
            f"input; read it from tensor_quant(weight, input_bit_width, input_is_signed)[5]"
        )

    def quant_tuple(self, x: Tensor) -> QuantTuple:
        raise RuntimeError(
            f"{type(self).__name__}: the weight quantizer needs the quantized input; call the "
            f"proxy as proxy(weight, quant_input)"
        )

    def forward(self, x: Tensor, quant_input: Optional[Any] = None):
        input_format = self._input_format(quant_input)
        if input_format is not None and self._caches_input():
            self._cache_input(quant_input, input_format[1])
        if not self.is_quant_enabled:
            return x
        if self.export_mode:
            # The handler holds the exported integers: the input format is already in them.
            out = self.export_handler(x)
        else:
            input_bit_width, input_is_signed = (
                input_format if input_format is not None else self._cached_input_format()
            )
            out = self.tensor_quant(x, input_bit_width, input_is_signed)
        if self.skip_create_quant_tensor:
            return out[0]
        out = self.create_quant_tensor(out)
        if not self.export_mode and self._fills_inference_cache() and self._cached_weight is None:
            self._cached_weight = self.cache_class(
                out.detach(), metadata_only=self.cache_inference_quant_weight_metadata_only
            )
        return out

    def _caches_input(self) -> bool:
        return not self.training and self.cache_inference_quant_act

    def _input_format(self, quant_input: Any) -> Optional[Tuple[Tensor, bool]]:
        """The bit width and sign of the quantized input; None when it is not quantized (see
        the class docstring)."""
        if isinstance(quant_input, IntQuantTensor):
            return quant_input.bit_width, bool(quant_input.signed)
        if isinstance(quant_input, QuantTensor):
            raise TypeError(
                f"{self._owner()}: the accumulator bound needs an integer-quantized input, got "
                f"a {type(quant_input).__name__}"
            )
        if isinstance(quant_input, tuple) and len(quant_input) == 4 and quant_input[3] is not None:
            return quant_input[3], self._layer_input_signed()
        return None

    def _cache_input(self, quant_input: Any, signed: bool) -> None:
        if not isinstance(quant_input, IntQuantTensor):
            quant_input = IntQuantTensor(*quant_input, signed, self.training)
        self._cached_act = _CachedIO(quant_input.detach(), self.cache_quant_io_metadata_only)

    def _cached_input_format(self) -> Tuple[Tensor, bool]:
        if self._cached_act is not None:
            return self._cached_act.bit_width, bool(self._cached_act.signed)
        raise QuantInputRequiredError(
            f"{NO_CACHED_INPUT}: {self._owner()}: weight quantizer "
            f"{self.quant_injector.__name__} bounds the accumulator (requires_quant_input), so "
            f"it needs the bit width and sign of the "
            f"layer's quantized input, but the input is not quantized and no input was cached. "
            f"Quantize the layer's input (input_quant=..., e.g. Int8ActPerTensorFloat, or pass "
            f"an IntQuantTensor), or set cache_inference_quant_act=True on this proxy and run "
            f"a quantized input through the layer in eval mode first"
        )

    def _layer_input_signed(self) -> bool:
        """The sign of the layer's input quantizer, which produced a plain QuantTuple input
        (these quantizers serve a single layer: see ParameterPreScalingWeightNorm)."""
        input_quant = getattr(self.tracked_module_list[0], "input_quant", None)
        signed = getattr(input_quant, "is_signed", None)
        if signed is None:
            raise RuntimeError(
                f"{self._owner()}: the layer's input is quantized but its input quantizer does "
                f"not say whether it is signed (is_signed is None); pass an IntQuantTensor"
            )
        return bool(signed)

    def _owner(self) -> str:
        layers = ", ".join(type(m).__name__ for m in self.tracked_module_list)
        return f"{type(self).__name__} of {layers}"
