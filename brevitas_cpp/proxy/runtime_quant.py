"""Proxies of runtime quantizers (Brevitas's brevitas.proxy.runtime_quant): activations, whose
quantizer runs fused after an optional activation function, and truncation of accumulators.
"""

from abc import ABC, abstractmethod
from typing import Any, Optional, Protocol, Tuple, Union, runtime_checkable

import torch
from torch import Tensor, nn

from brevitas_cpp import jit
from brevitas_cpp._unsupported import unsupported_getattr
from brevitas_cpp.core.hooks import any_hook_in, hook_dicts
from brevitas_cpp.core.quant.plan.forward import PLAN_HOOKS, PlannedQuant
from brevitas_cpp.core.quant.plan.match import relu_joins_plan
from brevitas_cpp.core.replan import Replans, invalidate_plans, refresh_plan
from brevitas_cpp.proxy.empty_batch import (
    is_empty_batch,
    linked_to_parameters,
    statistics_paused,
)
from brevitas_cpp.proxy.quant_proxy import (
    QuantProxyFromInjector,
    QuantProxyProtocol,
    RetrievedMetadata,
    wraps_quant_tuple,
)
from brevitas_cpp.proxy.script import QuantTuple, script_error
from brevitas_cpp.proxy.utils import _CachedIO
from brevitas_cpp.quant_tensor import IntQuantTensor, QuantTensor, _unpack_quant_tensor

__all__ = [
    "ActQuantProxyProtocol",
    "AccQuantProxyProtocol",
    "ActQuantProxyFromInjectorBase",
    "ActQuantProxyFromInjector",
    "DynamicActQuantProxyFromInjector",
    "FusedActivationQuantProxy",
    "TruncQuantProxyFromInjector",
]


def _is_passthrough_act(quant_injector) -> bool:
    """Whether the activation keeps its input's quantization (e.g. ReLU on a signed input):
    then a disabled output quantizer still returns the input's metadata."""
    if "act_impl" not in quant_injector or quant_injector.act_impl is None:
        return True
    if "passthrough_act" in quant_injector:
        return quant_injector.passthrough_act
    return False


def _is_act_enabled(act_impl: Optional[nn.Module], tensor_quant: Optional[nn.Module]) -> bool:
    if act_impl is None:
        return False
    # The quantizer's clamp already does what a HardTanh would.
    return not (isinstance(act_impl, nn.Hardtanh) and tensor_quant is not None)


@runtime_checkable
class ActQuantProxyProtocol(QuantProxyProtocol, Protocol):
    def forward(self, x: Union[Tensor, QuantTensor]) -> QuantTensor: ...

    def quantize(self, x: Tensor, as_quant_tensor: bool = False) -> QuantTuple: ...


@runtime_checkable
class AccQuantProxyProtocol(QuantProxyProtocol, Protocol):
    def forward(self, x: Union[Tensor, IntQuantTensor]) -> Union[Tensor, IntQuantTensor]: ...


class _TensorQuantDisabledIdentity(jit.ScriptModule):
    """Stands in for tensor_quant when only the activation runs: (x, None, None, None)."""

    def __init__(self, module_to_wrap: Optional[nn.Module] = None) -> None:
        super().__init__()

    @jit.script_method
    def forward(
        self, x: Tensor
    ) -> Tuple[Tensor, Optional[Tensor], Optional[Tensor], Optional[Tensor]]:
        return (x, None, None, None)


class FusedActivationQuantProxy(Replans, jit.ScriptModule):
    """activation_impl then tensor_quant, in one (scriptable) module. After an out-of-place
    nn.ReLU the stock activation quantizer's plan takes the ReLU into its op (learned_int_quant
    or abs_percentile_int_quant, see core/quant/plan): relu(x) is then never written nor read
    back. Autograd then keeps x,
    where ReLU kept relu(x): x must not be modified in place before backward."""

    __constants__ = ["relu_into_quant"]
    # A class default for modules pickled whole before it existed (derived again on their
    # first call).
    relu_into_quant: bool = False

    def __init__(self, activation_impl: nn.Module, tensor_quant: nn.Module) -> None:
        super().__init__()
        self.activation_impl = activation_impl
        self.tensor_quant = tensor_quant
        # With BREVITAS_JIT=1 the module compiles when built, with this value.
        self.replan()

    def derive_plan(self) -> None:
        quant = self.tensor_quant
        if isinstance(quant, PlannedQuant):
            refresh_plan(quant)  # the ReLU joins the quantizer's plan as it is now
        self.relu_into_quant = relu_joins_plan(self.activation_impl, quant)
        # The ReLU's hooks and the quantizer's (its own call's and its blocks').
        self.__dict__[PLAN_HOOKS] = hook_dicts(tuple(self.modules())[1:])

    def plan_holds(self) -> bool:
        quant = self.tensor_quant
        return (not isinstance(quant, PlannedQuant) or quant.plan_holds()) and (
            self.relu_into_quant == relu_joins_plan(self.activation_impl, quant)
        )

    def __prepare_scriptable__(self) -> "FusedActivationQuantProxy":
        # torch.jit.script of an eager model: the constant as blocks and hooks are now (TorchScript
        # runs no Python hook); derived again on the next eager call.
        refresh_plan(self)
        if any_hook_in(self.__dict__[PLAN_HOOKS]):
            self.relu_into_quant = False
            invalidate_plans()
        return self

    @jit.script_method
    def forward(self, x: Tensor):
        if not torch.jit.is_scripting():  # a static branch: TorchScript compiles none of it
            refresh_plan(self)  # the quantizer's plan too (derive_plan refreshes it)
            # PLAN_HOOKS holds the quantizer's blocks' hooks too: its own gate would add nothing.
            if self.relu_into_quant and not any_hook_in(self.__dict__[PLAN_HOOKS]):
                return self.tensor_quant.planned_after_relu(x)
        elif self.relu_into_quant:  # a constant: compiled only where it holds
            return self.tensor_quant.forward_after_relu(x)
        x = self.activation_impl(x)
        return self.tensor_quant(x)


class ActQuantProxyFromInjectorBase(QuantProxyFromInjector, ActQuantProxyProtocol, ABC):
    """Runs ``fused_activation_quant_proxy`` (activation and quantizer). ``tensor_quant`` stays
    None on activation proxies: the quantizer lives in the fused module (that is where the
    state_dict has it)."""

    def __init__(self, quant_layer: nn.Module, quant_injector) -> None:
        QuantProxyFromInjector.__init__(self, quant_layer, quant_injector)
        self.is_passthrough_act = _is_passthrough_act(quant_injector)
        self._cached_act = None
        self.cache_inference_quant_act = False
        self.cache_quant_io_metadata_only = True
        self.cache_class = None
        self.skip_create_quant_tensor = False

    def built_quantizer(self) -> Optional[nn.Module]:
        fused = self.fused_activation_quant_proxy
        if fused is None or isinstance(fused.tensor_quant, _TensorQuantDisabledIdentity):
            return None
        return fused.tensor_quant

    @property
    def input_view_impl(self) -> nn.Module:
        fused = self.fused_activation_quant_proxy
        if fused is not None and not isinstance(fused.tensor_quant, _TensorQuantDisabledIdentity):
            return fused.tensor_quant.int_quant.input_view_impl
        return nn.Identity()

    def internal_forward(self, force_eval: bool):
        """The quantizer run on a placeholder, to read its scale etc. (in eval if force_eval:
        the running statistics, without updating them)."""
        was_training = self.training
        if force_eval:
            self.eval()
        out = self.__call__(self._zero_hw_sentinel())
        self.train(was_training)
        return out

    def retrieve_attribute(self, attribute: str, force_eval: bool):
        if self._cached_act is not None:
            return getattr(self._cached_act, attribute)
        if self.is_quant_enabled:
            return getattr(self.internal_forward(force_eval), attribute)
        return None

    @property
    def is_quant_enabled(self) -> bool:
        return self._is_quant_enabled and not self.disable_quant

    @is_quant_enabled.setter
    def is_quant_enabled(self, is_quant_enabled: bool) -> None:
        self._is_quant_enabled = is_quant_enabled

    def init_tensor_quant(self) -> None:
        tensor_quant = self.quant_injector.tensor_quant
        act_impl = self.quant_injector.act_impl if "act_impl" in self.quant_injector else None
        is_act_enabled = _is_act_enabled(act_impl, tensor_quant)
        is_quant_enabled = tensor_quant is not None
        self.is_quant_enabled = is_quant_enabled
        if is_act_enabled and is_quant_enabled:
            fused = FusedActivationQuantProxy(act_impl, tensor_quant)
        elif is_act_enabled:
            fused = FusedActivationQuantProxy(act_impl, _TensorQuantDisabledIdentity())
        elif is_quant_enabled:
            fused = FusedActivationQuantProxy(nn.Identity(), tensor_quant)
        else:
            fused = None
        self.fused_activation_quant_proxy = fused

    @abstractmethod
    def create_quant_tensor(
        self, qt_args: Union[Tensor, Tuple[Any, ...]], x: Union[Tensor, QuantTensor]
    ) -> QuantTensor:
        """qt_args is either the quantizer's (value, scale, zero_point, bit_width), or a value
        that keeps the metadata of x (a passthrough activation)."""
        raise NotImplementedError

    def quant_tuple(self, x: Tensor) -> QuantTuple:
        """The activation and quantizer on x: (value, scale, zero_point, bit_width), with None
        metadata when nothing is quantized. What forward wraps, and what layers call."""
        return self.layout_quant_tuple(x)

    def layout_quant_tuple(self, x: Tensor) -> QuantTuple:
        """quant_tuple in the layout the quantizer works in (grouped, for per-group scales)."""
        # Static under TorchScript: fused is None (a NoneType attribute) or a module.
        if self.fused_activation_quant_proxy is None:
            return x, None, None, None
        # is_quant_enabled without the property (TorchScript compiles no property).
        if not self._is_quant_enabled or self.disable_quant:
            return self.fused_activation_quant_proxy.activation_impl(x), None, None, None
        value, scale, zero_point, bit_width = self.fused_activation_quant_proxy(x)
        return value, scale, zero_point, bit_width

    def quantizer_output(self, x: Tensor) -> Tuple[Any, ...]:
        """What forward wraps in a QuantTensor (eager mode): the activation and quantizer's whole
        output, which for integer quantizers is quant_tuple(x)."""
        return self.quant_tuple(x)

    def quantize(self, x: Tensor, as_quant_tensor: bool = False) -> QuantTuple:
        """What layers call: quant_tuple(x), or in eager mode the proxy's output (an
        IntQuantTensor is a QuantTuple too) when calling it does more (see _calls_itself)."""
        if torch.jit.is_scripting():
            return self.quant_tuple(x)
        # A disabled proxy (no activation, no quantizer) has no statistics to pause.
        if self.fused_activation_quant_proxy is not None and is_empty_batch(x):
            return self._quantize_empty_batch(x, as_quant_tensor)
        return self._eager_quantize(x, as_quant_tensor, x)

    def _quantize_empty_batch(self, x: Any, as_quant_tensor: bool) -> QuantTuple:
        """quantize(x) for an x without elements: no statistics step (see empty_batch.py)."""
        fused = self.fused_activation_quant_proxy
        with statistics_paused(fused):
            x = linked_to_parameters(x, fused)
            return self._eager_quantize(x, as_quant_tensor, x)

    def _fills_inference_cache(self) -> bool:
        return not self.training and self.cache_inference_quant_act

    # x: a Tensor, or in eager mode a QuantTensor (annotated as what TorchScript accepts).
    @wraps_quant_tuple
    def forward(self, x: Tensor):
        if torch.jit.is_scripting():
            return self.quant_tuple(x)
        # Neither activation nor quantization: the input as it came.
        if self.fused_activation_quant_proxy is None:
            return x
        y = _unpack_quant_tensor(x)
        if self.export_mode and self.is_quant_enabled:
            y = self.export_handler(self.fused_activation_quant_proxy.activation_impl(y))
        elif is_empty_batch(y):
            fused = self.fused_activation_quant_proxy
            with statistics_paused(fused):  # see empty_batch.py
                y = self.quantizer_output(linked_to_parameters(y, fused))
        else:
            y = self.quantizer_output(y)
        if self.skip_create_quant_tensor:
            out = y[0]
        elif y[1] is not None:
            out = self.create_quant_tensor(y, x=x)
        elif self.is_passthrough_act and isinstance(x, QuantTensor):
            # Not quantized here, but the activation keeps the input's quantization.
            out = self.create_quant_tensor(y[0], x=x)
        else:
            out = y[0]
        if self._fills_inference_cache() and isinstance(out, QuantTensor):
            self._cached_act = self.cache_class(out.detach(), self.cache_quant_io_metadata_only)
        return out


class ActQuantProxyFromInjector(ActQuantProxyFromInjectorBase):
    """Activation proxy returning IntQuantTensors. scale()/zero_point()/bit_width() run the
    quantizer in eval by default (force_eval), so reading them does not update statistics."""

    def __init__(self, quant_layer: nn.Module, quant_injector) -> None:
        super().__init__(quant_layer, quant_injector)
        self.cache_class = _CachedIO

    def scale(self, force_eval: bool = True) -> Optional[Tensor]:
        return self.retrieve_attribute("scale", force_eval)

    def zero_point(self, force_eval: bool = True) -> Optional[Tensor]:
        return self.retrieve_attribute("zero_point", force_eval)

    def bit_width(self, force_eval: bool = True) -> Optional[Tensor]:
        return self.retrieve_attribute("bit_width", force_eval)

    def create_quant_tensor(
        self, qt_args: Union[Tensor, Tuple[Any, ...]], x: Union[Tensor, IntQuantTensor]
    ) -> IntQuantTensor:
        if isinstance(qt_args, tuple):
            return IntQuantTensor(*qt_args, self.is_signed, self.training)
        return IntQuantTensor(qt_args, x.scale, x.zero_point, x.bit_width, x.signed, self.training)


class DynamicActQuantProxyFromInjector(ActQuantProxyFromInjector):
    """For quantizers whose scale and zero point are computed from each input."""

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


class TruncQuantProxyFromInjector(RetrievedMetadata, QuantProxyFromInjector, AccQuantProxyProtocol):
    """Requantizes an IntQuantTensor (an accumulator) to fewer bits. The sign is the input's;
    scale()/zero_point()/bit_width() are those of the last output produced in eval."""

    def __init__(self, quant_layer: nn.Module, quant_injector) -> None:
        super().__init__(quant_layer, quant_injector)
        self._cached_act = None
        self.cache_inference_quant_act = True
        self.cache_quant_io_metadata_only = True
        self.cache_class = _CachedIO
        self.skip_create_quant_tensor = False

    def retrieve_attribute(self, attribute: str):
        if self._cached_act is not None:
            return getattr(self._cached_act, attribute)
        return None

    @property
    def is_narrow_range(self) -> bool:
        narrow_range = super().is_narrow_range
        return narrow_range if narrow_range is not None else False

    def __prepare_scriptable__(self) -> "TruncQuantProxyFromInjector":
        if self.is_quant_enabled:
            raise script_error(
                self,
                "truncation requantizes an IntQuantTensor (an accumulator) and needs its "
                "scale and bit width",
                "Trace the model instead, or build the layer with trunc_quant=None.",
            )
        return super().__prepare_scriptable__()

    def forward(self, x: Union[Tensor, IntQuantTensor]):
        if torch.jit.is_scripting():
            # Only a disabled truncation scripts (see __prepare_scriptable__): the identity.
            assert isinstance(x, Tensor), (
                "trunc quant proxy: scripted quant layers exchange Tensors, not QuantTensors"
            )
            return x
        if not self.is_quant_enabled:
            return x
        if not isinstance(x, IntQuantTensor):
            raise TypeError(
                f"{type(self).__name__} of {type(self.tracked_module_list[0]).__name__}: "
                f"truncation requantizes an integer tensor and needs its scale, zero point and "
                f"bit width; expected an IntQuantTensor, got {type(x).__name__} (quantize the "
                f"input first, e.g. with an input quantizer returning QuantTensors)"
            )
        impl = self.export_handler if self.export_mode else self.tensor_quant
        out_value, out_scale, out_zp, out_bit_width = impl(
            x.value, x.scale, x.zero_point, x.bit_width, x.signed
        )
        if self.skip_create_quant_tensor:
            return out_value
        out = IntQuantTensor(out_value, out_scale, out_zp, out_bit_width, x.signed, self.training)
        if not self.training and self.cache_inference_quant_act:
            self._cached_act = self.cache_class(out.detach(), self.cache_quant_io_metadata_only)
        return out

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ) -> None:
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
        # Older checkpoints saved the sentinel under the layer's former accumulator_quant.
        old_key = ".".join(prefix.split(".")[:-2]) + ".accumulator_quant.zero_hw_sentinel"
        if old_key in unexpected_keys:
            unexpected_keys.remove(old_key)


# Brevitas names brevitas_cpp does not support raise on use (brevitas_cpp._unsupported).
__getattr__ = unsupported_getattr(__name__)
