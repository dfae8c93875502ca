"""One eager forward with every enabled quantization proxy observed: what each returned, call by
call. Export builds its constant QCDQ handlers from these outputs (the integers, scales, zero
points and bit widths of the eval model on the example inputs), and the onnxruntime check reads
the integers of the activations from them."""

import contextlib
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Tuple

from torch import Tensor, nn

from brevitas_cpp.export.errors import ExportError, describe_proxy, module_names
from brevitas_cpp.proxy import (
    ActQuantProxyFromInjectorBase,
    BiasQuantProxyFromInjector,
    TruncQuantProxyFromInjector,
    WeightQuantProxyFromInjectorBase,
)
from brevitas_cpp.proxy.quant_proxy import QuantProxyFromInjector
from brevitas_cpp.quant_tensor import QuantTensor

__all__ = ["ProxyCall", "ProxyRecord", "proxy_kind", "recording"]

WEIGHT, BIAS, ACT, TRUNC = "weight", "bias", "act", "trunc"


def proxy_kind(proxy: nn.Module) -> Optional[str]:
    """weight, bias, act or trunc for the library's proxies; None for anything else."""
    for proxy_class, kind in (
        (WeightQuantProxyFromInjectorBase, WEIGHT),
        (BiasQuantProxyFromInjector, BIAS),
        (ActQuantProxyFromInjectorBase, ACT),
        (TruncQuantProxyFromInjector, TRUNC),
    ):
        if isinstance(proxy, proxy_class):
            return kind
    return None


@dataclass
class ProxyCall:
    """One call: its first input (a weight or bias: the Parameter) and the quantized output."""

    input: Any
    output: QuantTensor


@dataclass
class ProxyRecord:
    proxy: nn.Module
    name: str  # qualified name in the model, e.g. "conv1.weight_quant"
    owner: str  # how errors name it: the proxy and the layers it serves
    kind: Optional[str]
    calls: List[ProxyCall] = field(default_factory=list)


def _enabled_proxies(model: nn.Module) -> List[QuantProxyFromInjector]:
    seen, proxies = set(), []
    for module in model.modules():
        if isinstance(module, QuantProxyFromInjector) and id(module) not in seen:
            seen.add(id(module))
            if module.is_quant_enabled:
                proxies.append(module)
    return proxies


@contextlib.contextmanager
def recording(model: nn.Module) -> Iterator[Dict[int, ProxyRecord]]:
    """Inside, every call of an enabled proxy of model is recorded into the yielded dict
    (id(proxy) -> ProxyRecord); the hooks are removed on leaving, however it is left. Hooks make
    the layers call their proxies (not quant_tuple), which return QuantTensors: same values."""
    names = module_names(model)
    records: Dict[int, ProxyRecord] = {}
    handles = []

    def hook(proxy: nn.Module, args: Tuple[Any, ...], output: Any) -> None:
        # A proxy that quantizes nothing for this call (a passthrough) returns its input.
        if isinstance(output, QuantTensor) and args:
            # A copy: the model may go on to write into the output in place (out += identity).
            fields = [f.detach().clone() if isinstance(f, Tensor) else f for f in output]
            records[id(proxy)].calls.append(ProxyCall(args[0], type(output)._from_fields(fields)))

    try:
        for proxy in _enabled_proxies(model):
            owner = describe_proxy(names, proxy)
            if proxy.is_groupwise:
                # QCDQ carries one scale per tensor or per axis; MX needs the ONNX MX ops.
                raise ExportError(
                    f"{owner}: per-group (MX or groupwise) scales are not exported: QCDQ has one "
                    f"scale per tensor or per axis"
                )
            records[id(proxy)] = ProxyRecord(
                proxy=proxy,
                name=names.get(id(proxy), type(proxy).__name__),
                owner=owner,
                kind=proxy_kind(proxy),
            )
            handles.append(proxy.register_forward_hook(hook))
        yield records
    finally:
        for handle in handles:
            handle.remove()


def quant_fields(qt: QuantTensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """(value, scale, zero_point, bit_width) of a recorded output."""
    return qt[0], qt[1], qt[2], qt[3]
