"""Proxies of parameter quantizers (Brevitas's brevitas.proxy.parameter_quant): weights and biases.

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
from brevitas_cpp.proxy.quant_proxy import QuantProxyFromInjector, QuantProxyProtocol
from brevitas_cpp.proxy.script import QuantTuple, script_error
from brevitas_cpp.proxy.utils import _CachedIO, compute_channel_view_shape, is_broadcastable
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

    def forward(self, x: torch.Tensor) -> QuantTensor:
        ...


@runtime_checkable
class BiasQuantProxyProtocol(QuantProxyProtocol, Protocol):
    requires_input_scale: bool

    def forward(
            self, x: Tensor, input_scale: Optional[Tensor],
            input_bit_width: Optional[Tensor]) -> QuantTensor:
        ...


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


class WeightQuantProxyFromInjectorBase(ParameterQuantProxyFromInjector,
                                       WeightQuantProxyProtocol,
                                       ABC):

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
            raise script_error(self, "the weight quantizer needs the quantized input",
                               "Use a weight quantizer that does not (requires_quant_input).")
        return super().__prepare_scriptable__()

    def _script_forward(self, x: Tensor) -> QuantTuple:
        """The TorchScript path of forward: (value, scale, zero_point, bit_width)."""
        # Static under TorchScript: tensor_quant is None (a NoneType attribute) or a module.
        if self.tensor_quant is None:
            return x, None, None, None
        if self.disable_quant:
            return x, None, None, None
        value, scale, zero_point, bit_width = self.tensor_quant(x)
        return value, scale, zero_point, bit_width

    def _tuple_forward_ok(self) -> bool:
        # forward returns _script_forward's value, unless a subclass changed forward, the
        # quantizer needs the quantized input, or forward would cache the output (eval with
        # cache_inference_quant_weight).
        return (type(self).forward is WeightQuantProxyFromInjectorBase.forward
                and not self.requires_quant_input
                and (self.training or not self._cache_inference_quant_weight)
                and self._plain_call_ok())

    def forward(self, x: torch.Tensor):
        if torch.jit.is_scripting():
            return self._script_forward(x)
        if not self.is_quant_enabled:
            return x
        out = self.export_handler(x) if self.export_mode else self.tensor_quant(x)
        if self.skip_create_quant_tensor:
            return out[0]
        out = self.create_quant_tensor(out)
        if (not self.export_mode and not self.training and self.cache_inference_quant_weight
                and self._cached_weight is None):
            self._cached_weight = self.cache_class(
                out.detach(), metadata_only=self.cache_inference_quant_weight_metadata_only)
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

    @property
    def tracked_parameter_list(self) -> List[nn.Parameter]:
        return [m.bias for m in self.tracked_module_list if m.bias is not None]

    def get_cached(self, attr: str):
        if self._cached_bias is None:
            warnings.warn(
                "No quant bias cache found, set cache_inference_quant_bias=True and run an "
                "inference pass first")
            return None
        if self.training:
            warnings.warn("Cached quant bias scale is being used in training mode.")
        return getattr(self._cached_bias, attr)


class WeightQuantProxyFromInjector(WeightQuantProxyFromInjectorBase):
    """Quantizes the weight it is given (the tracked layer's) and returns an IntQuantTensor."""

    def __init__(self, quant_layer: nn.Module, quant_injector) -> None:
        super().__init__(quant_layer, quant_injector)
        self.cache_class = _CachedIO

    def scale(self) -> Optional[Tensor]:
        return self.retrieve_attribute("scale")

    def zero_point(self) -> Optional[Tensor]:
        return self.retrieve_attribute("zero_point")

    def bit_width(self) -> Optional[Tensor]:
        return self.retrieve_attribute("bit_width")

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

    def quant_output_scale_impl(
            self, input: IntQuantTensor, weight: IntQuantTensor,
            module: nn.Module) -> Optional[Tensor]:
        """input scale * weight scale, viewed along the layer output's channel dim (None when the
        two do not broadcast)."""
        channel_dim = -1 if isinstance(module, nn.Linear) else 1
        output_scale_shape = compute_channel_view_shape(input, channel_dim=channel_dim)
        output_scale = weight.scale.view(output_scale_shape)
        input_scale_view = input.scale.view(output_scale_shape)
        if not is_broadcastable(output_scale.shape, input_scale_view.shape):
            return None
        return output_scale * input_scale_view

    def compute_bias_scale(
            self, input: Optional[Union[Tensor, IntQuantTensor]],
            weight: Optional[Union[Tensor, IntQuantTensor]]) -> Optional[Tensor]:
        if not self.requires_input_scale and self.is_quant_enabled:
            return None
        if not isinstance(input, IntQuantTensor) or not isinstance(weight, IntQuantTensor):
            return None
        first = self.tracked_module_list[0]
        if any(type(m) is not type(first) for m in self.tracked_module_list):
            raise RuntimeError(
                f"{type(self).__name__}: a bias quantizer that takes its scale from the input "
                f"(requires_input_scale=True) can not be shared by layers of different types "
                f"(got {_layer_names(self.tracked_module_list)})")
        return self.quant_output_scale_impl(input, weight, first)

    def _missing_input_scale_error(self, input, weight) -> RuntimeError:
        what = []
        for name, arg in (("input", input), ("weight", weight)):
            if arg is None:
                what.append(f"no {name} was passed")
            elif not isinstance(arg, IntQuantTensor):
                what.append(f"the {name} is a {type(arg).__name__}, not an IntQuantTensor")
        if not what:
            what.append("the input scale and the weight scale do not broadcast along the output "
                        "channels")
        return RuntimeError(
            f"{type(self).__name__} of {_layer_names(self.tracked_module_list)}: bias quantizer "
            f"{self.quant_injector.__name__} has requires_input_scale=True, so it needs the "
            f"accumulator scale (input scale * weight scale), but {' and '.join(what)} and no "
            f"bias scale was cached. Quantize the layer's input (e.g. input_quant=..., or pass "
            f"an IntQuantTensor) and its weight, or use a bias quantizer with its own scale "
            f"(requires_input_scale=False, e.g. Int8BiasPerTensorFloatInternalScaling)")

    def __prepare_scriptable__(self) -> "BiasQuantProxyFromInjector":
        if self.requires_input_scale:
            # The output channel dim the accumulator scale is viewed along, as in
            # quant_output_scale_impl: snapshotted, since isinstance on layers does not script.
            # (Set even with quantization disabled: _script_forward compiles the path anyway.)
            first = self.tracked_module_list[0]
            self._script_channel_dim = -1 if isinstance(first, nn.Linear) else 1
        return super().__prepare_scriptable__()

    def _script_forward(self, x: Tensor, quant_input: Tensor, input_scale: Optional[Tensor],
                        weight_scale: Optional[Tensor]) -> QuantTuple:
        """The TorchScript path: the bias x quantized, with the accumulator scale (input scale x
        weight scale, viewed as quant_output_scale_impl does) when requires_input_scale."""
        if self.tensor_quant is None:
            return x, None, None, None
        if self.disable_quant:
            return x, None, None, None
        if self.requires_input_scale:
            if input_scale is None or weight_scale is None:
                raise RuntimeError(
                    "scripted bias quant proxy: the bias quantizer has requires_input_scale=True "
                    "and needs the scales of the quantized input and weight")
            shape = [1] * quant_input.dim()
            shape[self._script_channel_dim] = -1
            acc_scale = weight_scale.view(shape) * input_scale.view(shape)
            value, scale, zero_point, bit_width = self.tensor_quant(x, acc_scale.view(-1))
        else:
            value, scale, zero_point, bit_width = self.tensor_quant(x)
        return value, scale, zero_point, bit_width

    def _tuple_forward_ok(self) -> bool:
        # With its own scale, forward returns _script_forward's value, unless a subclass changed
        # forward or forward would cache the output (eval with cache_inference_quant_bias). The
        # accumulator scale (requires_input_scale) is left to forward, whose checks and errors
        # (unquantized input, scales that do not broadcast, a cached scale) need the layer's
        # QuantTensors.
        return (type(self).forward is BiasQuantProxyFromInjector.forward
                and not (self.requires_input_scale and self.is_quant_enabled)
                and (self.training or not self.cache_inference_quant_bias)
                and self._plain_call_ok())

    def forward(self, x: Tensor, input: Optional[Union[Tensor, IntQuantTensor]] = None,
                weight: Optional[Union[Tensor, IntQuantTensor]] = None):
        if torch.jit.is_scripting():
            # Scripted layers call _script_forward with the scales; alone, the bias proxy
            # quantizes with its own scale only.
            return self._script_forward(x, x, None, None)
        if not self.is_quant_enabled:
            return x
        impl = self.export_handler if self.export_mode else self.tensor_quant
        if self.requires_input_scale:
            input_scale = self.compute_bias_scale(input, weight)
            if input_scale is None:
                # Export-time calls pass no input: fall back to the scale cached in eval.
                if self._cached_bias is None:
                    raise self._missing_input_scale_error(input, weight)
                input_scale = self.get_cached("scale")
            else:
                input_scale = input_scale.view(-1)
            out, out_scale, out_zp, out_bit_width = impl(x, input_scale)
        else:
            out, out_scale, out_zp, out_bit_width = impl(x)
        if self.skip_create_quant_tensor:
            return out
        out = IntQuantTensor(out, out_scale, out_zp, out_bit_width, self.is_signed, self.training)
        if not self.training and self.cache_inference_quant_bias:
            self._cached_bias = _CachedIO(
                out.detach(), metadata_only=self.cache_inference_quant_bias_metadata_only)
        return out
