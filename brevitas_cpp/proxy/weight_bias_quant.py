"""Proxies of parameter quantizers: weights and biases (brevitas.proxy.parameter_quant re-exports
them, with the decoupled weight proxies built on them).

The quantizer is built over the tracked layers' parameters (``tracked_parameter_list``), so a
proxy shared by several layers takes its statistics over all their weights (or biases).
"""

import warnings
from abc import ABC, abstractmethod
from typing import Any, List, Optional, Protocol, Tuple, Union, runtime_checkable

import torch
from torch import Tensor, nn

from brevitas_cpp import config
from brevitas_cpp.core.function_wrapper import Identity
from brevitas_cpp.function import max_int
from brevitas_cpp.function.shape import accumulator_channel_dim, accumulator_scale
from brevitas_cpp.proxy.quant_proxy import (
    QuantProxyFromInjector,
    QuantProxyProtocol,
    RetrievedMetadata,
    wraps_quant_tuple,
)
from brevitas_cpp.proxy.script import QuantTuple, as_quant_tuple, script_error
from brevitas_cpp.proxy.utils import _CachedIO
from brevitas_cpp.quant_tensor import IntQuantTensor, QuantTensor

__all__ = [
    "WeightQuantProxyFromInjector",
    "WeightQuantProxyFromInjectorBase",
    "BiasQuantProxyFromInjector",
    "BiasQuantProxyFromInjectorBase",
    "ParameterQuantProxyFromInjector",
    "WeightQuantProxyProtocol",
    "BiasQuantProxyProtocol",
]


@runtime_checkable
class WeightQuantProxyProtocol(QuantProxyProtocol, Protocol):
    def forward(self, x: torch.Tensor) -> QuantTensor: ...

    def quantize(
        self, x: Tensor, quant_input: Optional[QuantTuple] = None, as_quant_tensor: bool = False
    ) -> QuantTuple: ...


@runtime_checkable
class BiasQuantProxyProtocol(QuantProxyProtocol, Protocol):
    requires_input_scale: bool

    def forward(
        self, x: Tensor, input_scale: Optional[Tensor], input_bit_width: Optional[Tensor]
    ) -> QuantTensor: ...

    def quantize(
        self,
        x: Tensor,
        quant_input: QuantTuple,
        quant_weight: QuantTuple,
        as_quant_tensor: bool = False,
    ) -> QuantTuple: ...


def _layer_names(modules: List[nn.Module]) -> str:
    return ", ".join(type(m).__name__ for m in modules)


class ParameterQuantProxyFromInjector(QuantProxyFromInjector):
    """A proxy whose quantizer is built from parameters of the tracked layers."""

    @property
    @abstractmethod
    def tracked_parameter_list(self) -> List[nn.Parameter]:
        pass

    def init_tensor_quant(self, preserve_state_dict: bool = False) -> None:
        """(Re)build tensor_quant over the tracked parameters; with preserve_state_dict, the
        current quantizer state (e.g. a learned scale) is carried over into the new one."""
        param_list = self.tracked_parameter_list
        # A layer may have no such parameter yet (e.g. a bias added later by merge_bn_in).
        if not param_list:
            return
        if not preserve_state_dict:
            self.quant_injector = self.quant_injector.let(tracked_parameter_list=param_list)
            super().init_tensor_quant()
            return
        # Saved without re-initialisation on load, and loaded back tolerating the entries the
        # new quantizer adds (they keep their fresh values).
        saved_flags = (config.REINIT_ON_STATE_DICT_LOAD, config.IGNORE_MISSING_KEYS)
        config.REINIT_ON_STATE_DICT_LOAD, config.IGNORE_MISSING_KEYS = False, True
        try:
            state_dict = self.state_dict()
            self.quant_injector = self.quant_injector.let(tracked_parameter_list=param_list)
            super().init_tensor_quant()
            self.load_state_dict(state_dict)
        finally:
            config.REINIT_ON_STATE_DICT_LOAD, config.IGNORE_MISSING_KEYS = saved_flags

    def max_uint_value(self, bit_width: Tensor) -> Tensor:
        return max_int(False, self.is_narrow_range, bit_width)


class WeightQuantProxyFromInjectorBase(
    ParameterQuantProxyFromInjector, WeightQuantProxyProtocol, ABC
):
    def __init__(self, quant_layer: nn.Module, quant_injector) -> None:
        super().__init__(quant_layer, quant_injector)
        self._cached_weight = None
        self._cache_inference_quant_weight = False
        self.cache_inference_quant_weight_metadata_only = False
        self.cache_class = None  # set by each concrete proxy
        self.quant_tensor_class = None  # set by each concrete proxy
        self.skip_create_quant_tensor = False

    @property
    def input_view_impl(self) -> nn.Module:
        if self.tensor_quant is not None:
            return self.tensor_quant.int_quant.input_view_impl
        return Identity()

    @property
    def cache_inference_quant_weight(self) -> bool:
        return self._cache_inference_quant_weight

    @cache_inference_quant_weight.setter
    def cache_inference_quant_weight(self, value: bool) -> None:
        if not value:
            self._cached_weight = None
        self._cache_inference_quant_weight = value

    @property
    def tracked_parameter_list(self) -> List[nn.Parameter]:
        return [m.weight for m in self.tracked_module_list if m.weight is not None]

    def retrieve_attribute(self, attribute: str):
        """scale/zero_point/bit_width of the first tracked weight quantized now (or cached)."""
        if not self.is_quant_enabled:
            return None
        if self._cached_weight is not None:
            return getattr(self._cached_weight, attribute)
        out = self.__call__(self.tracked_parameter_list[0])
        return getattr(out, attribute)

    @property
    def requires_quant_input(self) -> bool:
        return False

    @abstractmethod
    def create_quant_tensor(self, qt_args: Tuple[Any, ...]) -> Union[Tensor, QuantTensor]:
        raise NotImplementedError

    def __prepare_scriptable__(self) -> "WeightQuantProxyFromInjectorBase":
        if self.requires_quant_input:
            raise script_error(
                self,
                "the weight quantizer needs the quantized input",
                "Use a weight quantizer that does not (requires_quant_input).",
            )
        return super().__prepare_scriptable__()

    def quant_tuple(self, x: Tensor) -> QuantTuple:
        """The quantizer on x: (value, scale, zero_point, bit_width), with None metadata when
        nothing is quantized. What forward wraps, and what layers call."""
        return self.layout_quant_tuple(x)

    def layout_quant_tuple(self, x: Tensor) -> QuantTuple:
        """quant_tuple in the layout the quantizer works in (grouped, for per-group scales)."""
        # Static under TorchScript: tensor_quant is None (a NoneType attribute) or a module.
        if self.tensor_quant is None:
            return x, None, None, None
        if self.disable_quant:
            return x, None, None, None
        value, scale, zero_point, bit_width = self.tensor_quant(x)
        return value, scale, zero_point, bit_width

    def quantizer_output(self, x: Tensor) -> Tuple[Any, ...]:
        """What forward wraps in a QuantTensor (eager mode): the quantizer's whole output, which
        for integer quantizers is quant_tuple(x)."""
        return self.quant_tuple(x)

    def quantize(
        self, x: Tensor, quant_input: Optional[QuantTuple] = None, as_quant_tensor: bool = False
    ) -> QuantTuple:
        """What layers call: quant_tuple(x), or in eager mode the proxy's output (an
        IntQuantTensor is a QuantTuple too) when calling it does more (see _calls_itself).
        quant_input reaches quantizers that need it (requires_quant_input)."""
        if torch.jit.is_scripting():
            return self.quant_tuple(x)
        if self.requires_quant_input:
            return self._eager_quantize(x, True, x, quant_input)
        return self._eager_quantize(x, as_quant_tensor, x)

    def _fills_inference_cache(self) -> bool:
        return not self.training and self._cache_inference_quant_weight

    @wraps_quant_tuple
    def forward(self, x: torch.Tensor):
        if torch.jit.is_scripting():
            return self.quant_tuple(x)
        if not self.is_quant_enabled:
            return x
        out = self.export_handler(x) if self.export_mode else self.quantizer_output(x)
        if self.skip_create_quant_tensor:
            return out[0]
        out = self.create_quant_tensor(out)
        if not self.export_mode and self._fills_inference_cache() and self._cached_weight is None:
            self._cached_weight = self.cache_class(
                out.detach(), metadata_only=self.cache_inference_quant_weight_metadata_only
            )
        return out


class BiasQuantProxyFromInjectorBase(ParameterQuantProxyFromInjector, BiasQuantProxyProtocol, ABC):
    # A TorchScript constant: the quantizer takes (bias, accumulator scale) with it, (bias)
    # without, so the scripted forward must compile only the matching call.
    __constants__ = ["requires_input_scale"]

    def __init__(self, quant_layer: nn.Module, quant_injector) -> None:
        super().__init__(quant_layer, quant_injector)
        self._cached_bias = None
        self.cache_inference_quant_bias = False
        self.cache_inference_quant_bias_metadata_only = False
        self.requires_input_scale = self.quant_injector.requires_input_scale
        self.skip_create_quant_tensor = False
        # The accumulator's channel dim, that of the first layer served (layers of another type
        # may not share a quantizer that needs it: see compute_bias_scale).
        self._acc_channel_dim = accumulator_channel_dim(isinstance(quant_layer, nn.Linear))

    @property
    def tracked_parameter_list(self) -> List[nn.Parameter]:
        return [m.bias for m in self.tracked_module_list if m.bias is not None]

    def get_cached(self, attr: str):
        if self._cached_bias is None:
            warnings.warn(
                "No quant bias cache found, set cache_inference_quant_bias=True and run an "
                "inference pass first"
            )
            return None
        if self.training:
            warnings.warn("Cached quant bias scale is being used in training mode.")
        return getattr(self._cached_bias, attr)


class WeightQuantProxyFromInjector(RetrievedMetadata, WeightQuantProxyFromInjectorBase):
    """Quantizes the weight it is given (the tracked layer's) and returns an IntQuantTensor."""

    def __init__(self, quant_layer: nn.Module, quant_injector) -> None:
        super().__init__(quant_layer, quant_injector)
        self.cache_class = _CachedIO

    def create_quant_tensor(self, qt_args: Tuple[Any, ...]) -> IntQuantTensor:
        return IntQuantTensor(*qt_args, self.is_signed, self.training)


class BiasQuantProxyFromInjector(BiasQuantProxyFromInjectorBase):
    """Quantizes the bias. With ``requires_input_scale`` the scale is the accumulator's, input
    scale * weight scale, worked out from the layer's quantized input and weight."""

    def scale(self) -> Optional[Tensor]:
        if not self.is_quant_enabled:
            return None
        if self.requires_input_scale:
            return self.get_cached("scale")
        zhs = self._zero_hw_sentinel()
        return self.__call__(self.tracked_parameter_list[0], zhs).scale

    def zero_point(self) -> Optional[Tensor]:
        if not self.is_quant_enabled:
            return None
        zhs = self._zero_hw_sentinel()
        return self.__call__(self.tracked_parameter_list[0], zhs).zero_point

    def bit_width(self) -> Optional[Tensor]:
        if not self.is_quant_enabled:
            return None
        zhs = self._zero_hw_sentinel()
        return self.__call__(self.tracked_parameter_list[0], zhs).bit_width

    def compute_bias_scale(self, input: Any, weight: Any) -> Optional[Tensor]:
        """The accumulator scale, input scale x weight scale viewed along the output channels,
        from the layer's quantized input and weight (IntQuantTensors or QuantTuples); None when
        either is not quantized or the two scales do not broadcast."""
        if not self.requires_input_scale and self.is_quant_enabled:
            return None
        input_scale, weight_scale = _scale_of(input), _scale_of(weight)
        if input_scale is None or weight_scale is None:
            return None
        first = self.tracked_module_list[0]
        if any(type(m) is not type(first) for m in self.tracked_module_list):
            raise RuntimeError(
                f"{type(self).__name__}: a bias quantizer that takes its scale from the input "
                f"(requires_input_scale=True) can not be shared by layers of different types "
                f"(got {_layer_names(self.tracked_module_list)})"
            )
        input_value = input.value if isinstance(input, QuantTensor) else input[0]
        return accumulator_scale(
            input_scale, weight_scale, input_value.dim(), self._acc_channel_dim
        )

    def _eager_accumulator_scale(self, input: Any, weight: Any) -> Tensor:
        """compute_bias_scale, flat; without the operands' scales (e.g. an export-time call),
        the scale cached in eval; an error naming what is missing otherwise."""
        scale = self.compute_bias_scale(input, weight)
        if scale is not None:
            return scale.view(-1)
        if self._cached_bias is None:
            raise self._missing_input_scale_error(input, weight)
        return self.get_cached("scale")

    def _missing_input_scale_error(self, input, weight) -> RuntimeError:
        what = []
        for name, arg in (("input", input), ("weight", weight)):
            if arg is None:
                what.append(f"no {name} was passed")
            elif _scale_of(arg) is None:
                what.append(f"the {name} is not quantized (a {type(arg).__name__})")
        if not what:
            what.append(
                "the input scale and the weight scale do not broadcast along the output channels"
            )
        # Brevitas's phrase first: code that catches its error by the text still does.
        return RuntimeError(
            f"Input scale required: {type(self).__name__} of "
            f"{_layer_names(self.tracked_module_list)}: bias quantizer "
            f"{self.quant_injector.__name__} has requires_input_scale=True, so it needs the "
            f"accumulator scale (input scale * weight scale), but {' and '.join(what)} and no "
            f"bias scale was cached. Quantize the layer's input (e.g. input_quant=..., or pass "
            f"an IntQuantTensor) and its weight, or use a bias quantizer with its own scale "
            f"(requires_input_scale=False, e.g. Int8BiasPerTensorFloatInternalScaling)"
        )

    def _script_accumulator_scale(
        self, quant_input: QuantTuple, quant_weight: QuantTuple
    ) -> Optional[Tensor]:
        """compute_bias_scale, flat, under TorchScript (no cache to fall back on)."""
        input_scale = quant_input[1]
        weight_scale = quant_weight[1]
        if input_scale is None or weight_scale is None:
            raise RuntimeError(
                "scripted bias quant proxy: the bias quantizer has requires_input_scale=True "
                "and needs the scales of the quantized input and weight"
            )
        scale = accumulator_scale(
            input_scale, weight_scale, quant_input[0].dim(), self._acc_channel_dim
        )
        if scale is None:
            raise RuntimeError(
                "scripted bias quant proxy: the input scale and the weight scale do not "
                "broadcast along the output channels"
            )
        return scale.view(-1)

    def quant_tuple(self, x: Tensor, acc_scale: Optional[Tensor]) -> QuantTuple:
        """The quantizer on the bias x: (value, scale, zero_point, bit_width), with None
        metadata when nothing is quantized; acc_scale (flat) is the scale a quantizer with
        requires_input_scale takes."""
        if self.tensor_quant is None:
            return x, None, None, None
        if self.disable_quant:
            return x, None, None, None
        if self.requires_input_scale:
            if acc_scale is None:
                raise RuntimeError(
                    "bias quant proxy: the bias quantizer has requires_input_scale=True and "
                    "needs the accumulator scale (input scale * weight scale)"
                )
            value, scale, zero_point, bit_width = self.tensor_quant(x, acc_scale)
        else:
            value, scale, zero_point, bit_width = self.tensor_quant(x)
        return value, scale, zero_point, bit_width

    def quantize(
        self,
        x: Tensor,
        quant_input: QuantTuple,
        quant_weight: QuantTuple,
        as_quant_tensor: bool = False,
    ) -> QuantTuple:
        """What layers call: quant_tuple of the bias x, with the accumulator scale of the
        layer's quantized input and weight when requires_input_scale; in eager mode the proxy's
        output when calling it does more (see _calls_itself)."""
        if torch.jit.is_scripting():
            acc_scale: Optional[Tensor] = None
            if self.requires_input_scale and not self.disable_quant:
                acc_scale = self._script_accumulator_scale(quant_input, quant_weight)
            return self.quant_tuple(x, acc_scale)
        if self._calls_itself(x, as_quant_tensor):
            return as_quant_tuple(self(x, quant_input, quant_weight))
        acc_scale = None
        if self.requires_input_scale and self.is_quant_enabled:
            acc_scale = self._eager_accumulator_scale(quant_input, quant_weight)
        return self.quant_tuple(x, acc_scale)

    def _fills_inference_cache(self) -> bool:
        return not self.training and self.cache_inference_quant_bias

    @wraps_quant_tuple
    def forward(
        self,
        x: Tensor,
        input: Optional[Union[Tensor, IntQuantTensor]] = None,
        weight: Optional[Union[Tensor, IntQuantTensor]] = None,
    ):
        if torch.jit.is_scripting():
            # Alone, a scripted bias proxy quantizes with its own scale only.
            return self.quant_tuple(x, None)
        if not self.is_quant_enabled:
            return x
        acc_scale = None
        if self.requires_input_scale:
            acc_scale = self._eager_accumulator_scale(input, weight)
        if self.export_mode:
            impl_args = (x, acc_scale) if self.requires_input_scale else (x,)
            out = self.export_handler(*impl_args)
        else:
            out = self.quant_tuple(x, acc_scale)
        if self.skip_create_quant_tensor:
            return out[0]
        out = IntQuantTensor(*out, self.is_signed, self.training)
        if self._fills_inference_cache():
            self._cached_bias = _CachedIO(
                out.detach(), metadata_only=self.cache_inference_quant_bias_metadata_only
            )
        return out


def _scale_of(quant: Any) -> Optional[Tensor]:
    """The scale of a quantized operand (a QuantTensor or a QuantTuple), None otherwise."""
    if isinstance(quant, QuantTensor):
        return quant.scale
    if isinstance(quant, tuple) and len(quant) >= 4 and isinstance(quant[1], Tensor):
        return quant[1]
    return None
