"""The model in QCDQ export mode, for the length of a ``with`` block.

``qcdq_export(model, args, kwargs)``:

1. puts the model in eval mode and runs it once on the example inputs, recording what every
   enabled quantization proxy returns (brevitas_cpp.export.record): the eager reference;
2. builds one constant handler per proxy (brevitas_cpp.export.handlers) from those outputs and
   puts each proxy in export mode with it, so that the proxy runs the handler instead of its
   quantizer;
3. turns QuantTensor outputs off (``return_quant_tensor``) for the length of the block: every
   quantizer now has its constants, so the metadata the QuantTensors carried between layers
   (and the data-dependent checks on it, which torch.export can not trace) is not needed; a
   bias quantizer that took its scale from the input and weight (Int32Bias) has it in its
   integers already.

On leaving, however it is left, every proxy, flag and mode is restored.
"""

import contextlib
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch
from torch import Tensor, nn

from brevitas_cpp.core.function_wrapper import ROUNDING_MODE_OF_IMPL
from brevitas_cpp.core.quant import (
    BinaryQuant,
    ClampedBinaryQuant,
    DecoupledIntQuant,
    IntQuant,
    QuantizationInt8,
    TernaryQuant,
)
from brevitas_cpp.export.errors import ExportError
from brevitas_cpp.export.grid import IntGrid
from brevitas_cpp.export.handlers import (
    ActQcdq,
    BinaryAct,
    IntParameter,
    QcdqHandler,
    TernaryAct,
)
from brevitas_cpp.export.record import (
    ACT,
    BIAS,
    TRUNC,
    WEIGHT,
    ProxyRecord,
    quant_fields,
    recording,
)
from brevitas_cpp.nn.mixin import QuantLayerMixin
from brevitas_cpp.proxy import DynamicActQuantProxyFromInjector
from brevitas_cpp.quant_tensor import QuantTensor

__all__ = ["ExportSession", "qcdq_export", "unpack_quant_tensors", "quantizer_block"]

# Inference caches a proxy fills in eval mode; export's forward must not leave traced values there.
_CACHES = ("_cached_weight", "_cached_bias", "_cached_act")


def unpack_quant_tensors(value: Any) -> Any:
    """value with every QuantTensor replaced by its float value (tuples, lists, dicts too)."""
    if isinstance(value, QuantTensor):
        return value.value
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(unpack_quant_tensors(v) for v in value)
    if isinstance(value, dict):
        return {k: unpack_quant_tensors(v) for k, v in value.items()}
    return value


def quantizer_block(record: ProxyRecord) -> nn.Module:
    """The core block a proxy runs (for activations, the one after the activation function)."""
    if record.kind == ACT:
        return record.proxy.fused_activation_quant_proxy.tensor_quant
    return record.proxy.tensor_quant


def _injector_name(record: ProxyRecord) -> str:
    return getattr(record.proxy.quant_injector, "__name__", "?")


@dataclass(frozen=True)
class _IntSettings:
    signed: bool
    narrow_range: bool
    rounding: Optional[str]  # "round" (half to even), "floor", ...; None: unknown block


def _int_settings(record: ProxyRecord, block: nn.Module) -> Optional[_IntSettings]:
    """How an integer block rounds and clamps; None for blocks that are not integer ones."""
    if isinstance(block, QuantizationInt8):
        return _IntSettings(True, True, "round")  # clamp(round_half_even(x / scale), -QL, QL)
    int_quant = getattr(block, "int_quant", None)
    if int_quant is None:
        # Decoupled weight quantizers: their integers are dequantized with the post-clipping
        # scale, which is what QCDQ stores.
        int_quant = getattr(block, "decoupled_int_quant", None)
    if isinstance(int_quant, (IntQuant, DecoupledIntQuant)):
        rounding = ROUNDING_MODE_OF_IMPL.get(type(int_quant.float_to_int_impl))
        return _IntSettings(bool(int_quant.signed), bool(int_quant.narrow_range), rounding)
    return None


def _unsupported(record: ProxyRecord, block: nn.Module, why: str) -> ExportError:
    return ExportError(
        f"{record.owner}: quantizer {_injector_name(record)} (block {type(block).__name__}) {why}"
    )


def _parameter_handler(record: ProxyRecord, block: nn.Module) -> IntParameter:
    """Weights and biases: the integers of each parameter the proxy quantized."""
    binary = isinstance(block, (BinaryQuant, ClampedBinaryQuant))
    settings = _int_settings(record, block)
    if not binary and settings is None and not isinstance(block, TernaryQuant):
        raise _unsupported(
            record, block, "is not an integer, binary or ternary quantizer export knows"
        )
    signed = True if settings is None else settings.signed
    narrow = True if settings is None else settings.narrow_range
    bounds = (-1, 1) if binary or isinstance(block, TernaryQuant) else None
    grid: Optional[IntGrid] = None
    ints: List[Tensor] = []
    sources: List[nn.Module] = []
    attr = "weight" if record.kind == WEIGHT else "bias"
    seen = set()
    for call in record.calls:
        if id(call.input) in seen:
            continue
        seen.add(id(call.input))
        value, scale, zero_point, bit_width = quant_fields(call.output)
        call_grid = IntGrid.of(
            record.owner, value, scale, zero_point, bit_width, signed, narrow, bounds
        )
        if grid is not None and not grid.same_as(call_grid):
            raise ExportError(
                f"{record.owner}: the quantizer is shared by layers whose {attr}s get different "
                f"scales or shapes; export one quantizer per layer"
            )
        grid = call_grid
        q = grid.to_int(value)
        if (
            int(q.min()) < grid.qmin
            or int(q.max()) > grid.qmax
            or not torch.equal(grid.dequantize(q), value.detach())
        ):
            raise ExportError(
                f"{record.owner}: the quantized {attr} is not (int - zero_point) * scale with "
                f"integers in [{grid.qmin}, {grid.qmax}]"
            )
        ints.append(q)
        sources.append(_source_layer(record, call.input, attr))
    assert grid is not None
    _, scale, zero_point, _ = quant_fields(record.calls[0].output)
    return IntParameter(
        grid, scale.shape, zero_point.shape, ints, sources, attr=attr, owner=record.owner
    )


def _source_layer(record: ProxyRecord, parameter: Any, attr: str) -> nn.Module:
    for module in record.proxy.tracked_module_list:
        if getattr(module, attr, None) is parameter:
            return module
    raise ExportError(
        f"{record.owner}: it quantized a {attr} that belongs to none of its layers; export "
        f"handles quantizers called on their layers' own parameters"
    )


def _act_handler(record: ProxyRecord, block: nn.Module) -> nn.Module:
    if isinstance(record.proxy, DynamicActQuantProxyFromInjector):
        raise _unsupported(
            record,
            block,
            "computes its scale from each input (dynamic quantization); QCDQ stores constant "
            "scales",
        )
    first = quant_fields(record.calls[0].output)
    if isinstance(block, (BinaryQuant, ClampedBinaryQuant, TernaryQuant)):
        scale = first[1]
        if scale.numel() != 1:
            raise _unsupported(record, block, "has more than one scale")
        if isinstance(block, TernaryQuant):
            return TernaryAct(float(scale.reshape(())), block.threshold, scale.shape)
        return BinaryAct(float(scale.reshape(())), scale.shape)
    settings = _int_settings(record, block)
    if settings is None:
        raise _unsupported(record, block, "is not an integer, binary or ternary quantizer")
    if settings.rounding != "round":
        raise _unsupported(
            record,
            block,
            f"rounds with {settings.rounding or type(block.int_quant.float_to_int_impl).__name__}"
            f"; QuantizeLinear rounds half to even (float_to_int_impl_type=ROUND)",
        )
    grids = [
        IntGrid.of(record.owner, *quant_fields(call.output), settings.signed, settings.narrow_range)
        for call in record.calls
    ]
    if any(not grids[0].same_as(g) for g in grids[1:]):
        raise _unsupported(
            record,
            block,
            "gave different scales or zero points for different inputs in eval mode; QCDQ "
            "stores one constant grid per quantizer",
        )
    return ActQcdq(grids[0], first[1].shape, first[2].shape)


def build_handler(record: ProxyRecord) -> nn.Module:
    """The export handler of one recorded proxy, or an ExportError naming it."""
    if record.kind is None:
        raise ExportError(
            f"{record.owner}: proxy type {type(record.proxy).__name__} has no QCDQ export"
        )
    block = quantizer_block(record)
    if record.kind == TRUNC:
        raise _unsupported(
            record,
            block,
            "requantizes an accumulator (truncation); QCDQ export of truncation is not "
            "implemented: build the pooling with trunc_quant=None, or quantize its output "
            "with a QuantIdentity",
        )
    if record.kind in (WEIGHT, BIAS):
        return _parameter_handler(record, block)
    return _act_handler(record, block)


@dataclass
class ExportSession:
    """What the block of qcdq_export sees: the example inputs as the exported model takes them
    (QuantTensors as their values), the eager eval output, the recorded proxies and their
    handlers (by the proxy's qualified name)."""

    args: Tuple[Any, ...]
    kwargs: Dict[str, Any]
    reference: Any
    records: Dict[int, ProxyRecord]
    handlers: Dict[str, nn.Module]
    # The proxy name of each quantize op the handlers trace, in order.
    quantize_log: List[str]


class _Unused(nn.Module):
    """Stands in for a proxy's TorchScript block while it exports: the proxy only checks that it
    is there, and torch.export's tracer can not look into TorchScript modules (its stand-ins for
    submodules share their __dict__, which a ScriptModule refuses)."""


class _Activation(nn.Module):
    """Stands in for a TorchScript FusedActivationQuantProxy while it exports: the activation
    function, in eager form, before the handler."""

    def __init__(self, activation_impl: nn.Module) -> None:
        super().__init__()
        self.activation_impl = activation_impl


def _hide_script_blocks(record: ProxyRecord, undo: contextlib.ExitStack) -> None:
    """With BREVITAS_JIT=1 the quantizer blocks are TorchScript modules; in export mode the proxy
    runs its handler instead, so they are set aside for the length of the export."""
    proxy = record.proxy
    modules = proxy._modules
    for name in ("tensor_quant", "fused_activation_quant_proxy"):
        block = modules.get(name)
        if not isinstance(block, torch.jit.ScriptModule):
            continue
        stand_in: nn.Module = _Unused()
        if name == "fused_activation_quant_proxy":
            injector = proxy.quant_injector
            activation = injector.act_impl if "act_impl" in injector else None
            stand_in = _Activation(activation if activation is not None else nn.Identity())
        modules[name] = stand_in
        undo.callback(modules.__setitem__, name, block)


def _leave_export_mode(proxy: nn.Module) -> None:
    proxy.export_mode = False
    # The handler was a submodule; make the attribute a plain None again, as before.
    proxy._modules.pop("export_handler", None)
    proxy.__dict__["export_handler"] = None


@contextlib.contextmanager
def qcdq_export(
    model: nn.Module, args: Tuple[Any, ...], kwargs: Optional[Dict[str, Any]] = None
) -> Iterator[ExportSession]:
    """See the module docstring."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"export: model must be an nn.Module, got {type(model).__name__}")
    kwargs = dict(kwargs or {})
    with contextlib.ExitStack() as undo:
        modes = [(m, m.training) for m in model.modules()]
        undo.callback(lambda: [setattr(m, "training", t) for m, t in modes])
        model.eval()
        with torch.no_grad(), recording(model) as records:
            reference = unpack_quant_tensors(model(*args, **kwargs))
        used = [r for r in records.values() if r.calls]
        handlers = {r.name: build_handler(r) for r in used}
        quantize_log: List[str] = []
        for name, handler in handlers.items():
            if isinstance(handler, QcdqHandler):
                handler.proxy_name, handler.quantize_log = name, quantize_log
        for record in used:
            proxy = record.proxy
            undo.callback(_leave_export_mode, proxy)
            for cache in _CACHES:
                if cache in proxy.__dict__:
                    undo.callback(setattr, proxy, cache, proxy.__dict__[cache])
            proxy.export_handler = handlers[record.name]
            proxy.export_mode = True
            _hide_script_blocks(record, undo)
            if record.kind == BIAS and proxy.requires_input_scale:
                # The accumulator scale is in the handler's integers already.
                proxy.requires_input_scale = False
                undo.callback(setattr, proxy, "requires_input_scale", True)
        for module in model.modules():
            if isinstance(module, QuantLayerMixin) and module.return_quant_tensor:
                module.return_quant_tensor = False
                undo.callback(setattr, module, "return_quant_tensor", True)
        yield ExportSession(
            args=unpack_quant_tensors(tuple(args)),
            kwargs=unpack_quant_tensors(kwargs),
            reference=reference,
            records=records,
            handlers=handlers,
            quantize_log=quantize_log,
        )
