"""The base of every quantization proxy (Brevitas's brevitas.proxy.quant_proxy).

A proxy sits in a quant layer (``layer.weight_quant``, ``layer.act_quant``, ...) between the layer
and a quantizer injector: it injects the layer it serves (``module=``) and itself
(``proxy_module=``) into the injector, builds ``tensor_quant`` from it, rebuilds it when it starts
serving one more layer (a shared proxy) or when a state_dict is loaded, and wraps the quantizer's
outputs in QuantTensors (in the subclasses).
"""

import warnings
from typing import Any, Callable, Dict, List, Optional, Protocol, Tuple, runtime_checkable

import torch
from torch import nn

from brevitas_cpp import config
from brevitas_cpp._unsupported import UnsupportedError
from brevitas_cpp.core._state_dict import METADATA_KEY, saved_metadata
from brevitas_cpp.core.bit_width import BitWidthConst
from brevitas_cpp.core.function_wrapper import ROUNDING_MODE_OF_IMPL
from brevitas_cpp.core.hooks import global_module_hooks, module_hooks
from brevitas_cpp.core.utils import StatelessBuffer
from brevitas_cpp.inject.enum import ScalingPerOutputType
from brevitas_cpp.inject.injector import ExtendedInjector, Injector, MissingDependencyError
from brevitas_cpp.proxy.script import (
    ScriptableQuantModule,
    as_quant_tuple,
    mark_properties_unused_by_jit,
    script_error,
)
from brevitas_cpp.quant_tensor import QuantTensor

__all__ = ["QuantProxyProtocol", "QuantProxyFromInjector"]


def wraps_quant_tuple(forward: Callable) -> Callable:
    """Marks a proxy forward that only wraps ``quant_tuple``'s result (in a QuantTensor, and an
    inference cache): layers may then call quant_tuple directly. A subclass's own forward is
    not marked, so layers call the proxy and it runs."""
    forward._returns_quant_tuple_wrapped = True
    return forward


def _is_groupwise(quant_injector) -> bool:
    return (
        "scaling_per_output" in quant_injector
        and quant_injector.scaling_per_output == ScalingPerOutputType.GROUP
    )


def _is_narrow_range(quant_injector) -> Optional[bool]:
    return quant_injector.narrow_range if "narrow_range" in quant_injector else None


def _rounding_mode(quant_injector) -> Optional[str]:
    if "float_to_int_impl_type" in quant_injector:
        return str(quant_injector.float_to_int_impl_type)
    if "float_to_int_impl" in quant_injector:
        try:
            impl = quant_injector.float_to_int_impl
        except Exception:  # a quantizer that can not build it has no rounding mode to report
            return None
        # A subclass of a rounding block reports its base's mode.
        for impl_class, mode in ROUNDING_MODE_OF_IMPL.items():
            if isinstance(impl, impl_class):
                return mode.upper()
    return None


def _update_state_dict_impl(quant_injector):
    # Only quantizers that keep learned state in a convertible layout declare one.
    try:
        return quant_injector.update_state_dict_impl
    except MissingDependencyError:
        return None


# A checkpoint's record of the quantizer it was made for, in the proxy's metadata entry.
QUANTIZER_RECORD_KEY = "quantizer"


def _constant_bit_widths(quantizer: nn.Module) -> Dict[str, float]:
    """The quantizer's constant bit widths by block path: a checkpoint does not hold them."""
    return {
        name: float(module())
        for name, module in quantizer.named_modules()
        if isinstance(module, BitWidthConst)
    }


def _quantizer_record_mismatch(saved: Dict[str, Any], current: Dict[str, Any]) -> List[str]:
    return [
        f"{key}: checkpoint {saved[key]!r}, this layer {current.get(key)!r}"
        for key in sorted(saved)
        if saved[key] != current.get(key)
    ]


def _reuse_tensors(module: nn.Module, previous: Dict[str, torch.Tensor]) -> None:
    """Where the rebuilt tree has a parameter or buffer at the same path, of the same kind,
    shape, dtype and device as before, the earlier tensor object takes the new value and its
    place: an optimizer built before keeps stepping what the quantizer uses."""
    for module_name, sub in module.named_modules(remove_duplicate=False):
        for slots in (sub._parameters, sub._buffers):
            for name, tensor in list(slots.items()):
                old = previous.get(f"{module_name}.{name}" if module_name else name)
                if (
                    tensor is None
                    or old is None
                    or old is tensor
                    or type(old) is not type(tensor)
                    or (old.shape, old.dtype, old.device)
                    != (tensor.shape, tensor.dtype, tensor.device)
                ):
                    continue
                with torch.no_grad():
                    old.copy_(tensor)
                setattr(sub, name, old)


@runtime_checkable
class QuantProxyProtocol(Protocol):
    is_quant_enabled: bool
    is_signed: Optional[bool]
    is_narrow_range: Optional[bool]
    rounding_mode: Optional[str]

    def add_tracked_module(self, module: nn.Module) -> None: ...


class _ExportModeMixin:
    """The export switch quant modules share. brevitas_cpp.export sets a handler before entering
    export mode; without one, entering it is refused the way Brevitas refuses it for a module
    without a handler."""

    def _init_export_mode(self) -> None:
        self._export_mode = False
        self.export_debug_name = None
        self.export_handler = None
        self.export_input_debug = False
        self.export_output_debug = False

    @property
    def export_mode(self) -> bool:
        return self._export_mode

    @export_mode.setter
    def export_mode(self, value: bool) -> None:
        if value and self.training:
            raise RuntimeError(
                f"{type(self).__name__}: export mode can only be entered in eval mode, not "
                f"during training"
            )
        if value and self.export_handler is None:
            if self.requires_export_handler:
                warnings.warn(f"{type(self).__name__}: skipped by export, it has no export handler")
            return
        if not value:
            self.export_handler = None
        self._export_mode = value


class QuantProxyFromInjector(
    ScriptableQuantModule, _ExportModeMixin, nn.Module, QuantProxyProtocol
):
    """Serves one or more layers (``tracked_module_list``) with the quantizer built by
    ``quant_injector``; ``tensor_quant`` is None when the injector quantizes nothing.

    Under torch.jit.script the subclasses' forward takes and returns plain tensors (see
    brevitas_cpp.proxy.script)."""

    eager_only_attributes = (
        "quant_injector",
        "update_state_dict_impl",
        "tracked_module_list",
        "cache_class",
    )

    def __init__(self, quant_layer: nn.Module, quant_injector) -> None:
        if not (
            isinstance(quant_injector, type)
            and issubclass(quant_injector, (ExtendedInjector, Injector))
        ):
            raise TypeError(
                f"{type(self).__name__}: quant_injector must be a quantizer class (an "
                f"ExtendedInjector subclass, e.g. Int8WeightPerTensorFloat), got "
                f"{quant_injector!r} ({type(quant_injector).__name__})"
            )
        if not isinstance(quant_layer, nn.Module):
            raise TypeError(
                f"{type(self).__name__}: quant_layer must be the layer to quantize for (an "
                f"nn.Module), got {quant_layer!r} ({type(quant_layer).__name__})"
            )
        nn.Module.__init__(self)
        self._init_export_mode()
        self.update_state_dict_impl = _update_state_dict_impl(quant_injector)
        self.quant_injector = quant_injector.let(proxy_module=self)
        self._zero_hw_sentinel = StatelessBuffer(torch.tensor(0.0))
        self.tensor_quant = None
        # A plain list, not a ModuleList: these are the parents, not submodules.
        self.tracked_module_list: List[nn.Module] = []
        self.add_tracked_module(quant_layer)
        self.disable_quant = False
        self.is_signed = quant_injector.signed if "signed" in quant_injector else None

    @property
    def requires_export_handler(self) -> bool:
        return self.is_quant_enabled

    def update_tracked_modules(self) -> None:
        """Inject the tracked layers: the layer itself, or a tuple of them when shared."""
        if len(self.tracked_module_list) == 1:
            self.quant_injector = self.quant_injector.let(module=self.tracked_module_list[0])
        else:
            # A tuple, so that later appends to the list do not change what was injected.
            self.quant_injector = self.quant_injector.let(module=tuple(self.tracked_module_list))

    def init_tensor_quant(self) -> None:
        self.tensor_quant = self.quant_injector.tensor_quant

    def rebuild_tensor_quant(self) -> None:
        """init_tensor_quant() over a quantizer built before: the new one goes where the old
        one was (a model moved with .cuda() or .double() stays so) and keeps the old parameter
        and buffer objects wherever they line up, so that an optimizer built before the rebuild
        (e.g. before load_state_dict) keeps stepping the scales the quantizer uses."""
        previous = dict(self.named_parameters(remove_duplicate=False))
        previous.update(self.named_buffers(remove_duplicate=False))
        placement = _placement(self)
        self.init_tensor_quant()
        if placement is not None:
            self.to(device=placement[0], dtype=placement[1])
        _reuse_tensors(self, previous)
        # The placeholder input scale() reads with is a constant 0, not state: after to_empty()
        # it holds whatever the memory held.
        with torch.no_grad():
            self._zero_hw_sentinel.value.zero_()

    def built_quantizer(self) -> Optional[nn.Module]:
        """The quantizer block tree the proxy runs (None when it quantizes nothing)."""
        return self.tensor_quant

    def quantizer_record(self) -> Dict[str, Any]:
        """What a checkpoint records of the quantizer beyond its state_dict entries, so that a
        checkpoint made for another quantizer or bit width is recognised at load."""
        quantizer = self.built_quantizer()
        return {
            "tensor_quant": None if quantizer is None else type(quantizer).__name__,
            "signed": self.is_signed,
            "narrow_range": self.is_narrow_range,
            "constant_bit_widths": {} if quantizer is None else _constant_bit_widths(quantizer),
        }

    @property
    def is_quant_enabled(self) -> bool:
        return not self.disable_quant and self.tensor_quant is not None

    @property
    def is_groupwise(self) -> bool:
        return _is_groupwise(self.quant_injector)

    @property
    def is_narrow_range(self) -> Optional[bool]:
        return _is_narrow_range(self.quant_injector)

    @property
    def rounding_mode(self) -> Optional[str]:
        return _rounding_mode(self.quant_injector)

    def add_tracked_module(self, module: nn.Module) -> None:
        """Serve one more layer: the quantizer is rebuilt over all tracked layers."""
        if module is None:
            raise RuntimeError(
                f"{type(self).__name__}.add_tracked_module: module must be a layer "
                f"(an nn.Module), got None"
            )
        self.tracked_module_list.append(module)
        self.update_tracked_modules()
        self.init_tensor_quant()

    def _calls_itself(self, x: Any, as_quant_tensor: bool) -> bool:
        """Whether ``quantize`` must call the proxy (``__call__``, then ``forward``) rather than
        ``quant_tuple``: a QuantTensor is wanted or given, hooks must run, an export handler or a
        subclass's own forward replaces ours, or forward fills an inference cache."""
        return (
            as_quant_tensor
            or not isinstance(x, torch.Tensor)
            or self._export_mode
            or module_hooks(self)
            or global_module_hooks()
            or not getattr(type(self).forward, "_returns_quant_tuple_wrapped", False)
            or self._fills_inference_cache()
        )

    def _fills_inference_cache(self) -> bool:
        """Whether forward would cache its output (eval mode with a cache switched on)."""
        return False

    def _eager_quantize(self, x: Any, as_quant_tensor: bool, *call_args: Any) -> Any:
        """What ``quantize`` does in eager mode: ``quant_tuple(x)``, or the proxy called with
        call_args when that does more (its output, an IntQuantTensor being a QuantTuple too)."""
        if self._calls_itself(x, as_quant_tensor):
            out = self(*call_args)
            # A wanted QuantTensor goes to the float op's torch handler as it is; otherwise the
            # layer reads a tuple (a per-group QuantTensor's fields are grouped: ungrouped here).
            if as_quant_tensor and isinstance(out, QuantTensor):
                return out
            return as_quant_tuple(out)
        return self.quant_tuple(x)

    def compile_quant(self, compile_export: bool = False) -> None:
        """Brevitas's torch.compile of this quantizer alone (which also renames its state_dict
        keys under ``_orig_mod``): not supported; compile the model instead."""
        raise UnsupportedError(
            f"brevitas_cpp does not support {type(self).__name__}.compile_quant (Brevitas "
            f"compiles each quantizer on its own); use torch.compile(model) instead, which "
            f"compiles the quantizers with the layers around them"
        )

    def apply_input_view(self, x: torch.Tensor) -> torch.Tensor:
        return self.input_view_impl(x)

    def __prepare_scriptable__(self) -> "QuantProxyFromInjector":
        """Called by torch.jit.script: refuses what the scripted forward can not do, and
        returns the proxy itself (see brevitas_cpp.proxy.script)."""
        if self.export_mode:
            raise script_error(self, "export_mode is on", "Leave export mode first.")
        if len(self.tracked_module_list) > 1:
            # TorchScript makes one copy of a module per place it is reached from.
            raise script_error(
                self,
                f"the quantizer is shared by {len(self.tracked_module_list)} layers "
                f"(scripted, each would get its own copy, no longer sharing statistics and "
                f"step counters)",
                "Give each layer its own quantizer, or trace the model.",
            )
        return self

    def _save_to_state_dict(self, destination, prefix, keep_vars) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars)
        entry = saved_metadata(destination, prefix)
        if entry is not None:
            entry[QUANTIZER_RECORD_KEY] = self.quantizer_record()

    def _load_from_state_dict(
        self,
        state_dict: Dict[str, Any],
        prefix: str,
        local_metadata,
        strict: bool,
        missing_keys: List[str],
        unexpected_keys: List[str],
        error_msgs: List[str],
    ) -> None:
        if self.update_state_dict_impl is not None:
            self.update_state_dict_impl(prefix, state_dict)
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
        # The parent layer's parameters are already loaded (parents load before children) and
        # tensor_quant's own state is loaded next: rebuilding here re-derives everything from
        # the new parameters, then lets the checkpoint's quantizer values override.
        if config.REINIT_ON_STATE_DICT_LOAD:
            self.rebuild_tensor_quant()
        self._check_quantizer_record(prefix, local_metadata, unexpected_keys)
        # Older checkpoints saved the sentinel.
        zero_hw_sentinel_key = prefix + "zero_hw_sentinel"
        if zero_hw_sentinel_key in unexpected_keys:
            unexpected_keys.remove(zero_hw_sentinel_key)

    def _check_quantizer_record(
        self, prefix: str, local_metadata: Dict[str, Any], unexpected_keys: List[str]
    ) -> None:
        """A checkpoint of ours records its quantizer (Brevitas's records none: not checked).
        One made for another is reported as an unexpected entry, the record itself, which says
        how: an error under strict=True, listed in the returned keys under strict=False (the
        kernels' state_dict loads ignore strict, so only the report can honour it)."""
        saved = (local_metadata or {}).get(METADATA_KEY, {}).get(QUANTIZER_RECORD_KEY)
        if saved is None or config.IGNORE_QUANTIZER_MISMATCH:
            return
        mismatch = _quantizer_record_mismatch(saved, self.quantizer_record())
        if mismatch:
            unexpected_keys.append(
                f"{prefix}<{METADATA_KEY} quantizer record: made for another quantizer, "
                f"{'; '.join(mismatch)}; to load it into this one (e.g. to fine-tune at a new bit "
                f"width) set brevitas_cpp.config.IGNORE_QUANTIZER_MISMATCH = True or "
                f"BREVITAS_IGNORE_QUANTIZER_MISMATCH=1>"
            )


class RetrievedMetadata:
    """scale(), zero_point() and bit_width() of a proxy that reads them with
    ``retrieve_attribute`` (the weight proxies and truncation)."""

    def scale(self) -> Optional[torch.Tensor]:
        return self.retrieve_attribute("scale")

    def zero_point(self) -> Optional[torch.Tensor]:
        return self.retrieve_attribute("zero_point")

    def bit_width(self) -> Optional[torch.Tensor]:
        return self.retrieve_attribute("bit_width")


def _placement(module: nn.Module) -> Optional[Tuple[torch.device, Optional[torch.dtype]]]:
    """The device of a module's tensors and the dtype of its floating ones (None: no tensors)."""
    tensors = [*module.parameters(), *module.buffers()]
    if not tensors:
        return None
    floating = [t.dtype for t in tensors if t.is_floating_point()]
    return tensors[0].device, (floating[0] if floating else None)


# __init_subclass__ lists the properties of subclasses only.
mark_properties_unused_by_jit(QuantProxyFromInjector)
