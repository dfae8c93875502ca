"""``quant_inference_mode`` (Brevitas's ``brevitas.export.inference.manager``): the context in
which Brevitas runs an eval-mode model on quantization metadata cached by its first forward,
and returns plain tensors from every later call.

Here an eval-mode model already computes each quantized weight and bias once (the proxies'
eval caches), so the context runs the model as it is and, from its second call on, returns the
output's values in place of QuantTensors, as Brevitas does. The outputs are Brevitas's: in eval
mode the cached metadata equals what every call computes. As in Brevitas, a model in training
mode is refused (Brevitas refuses at the first forward, when it enters export mode)."""

from typing import Any, Optional

from torch import nn
from torch.utils.hooks import RemovableHandle

from brevitas_cpp._unsupported import UnsupportedError, unsupported_getattr
from brevitas_cpp.quant_tensor import _unpack_quant_tensor

__all__ = ["quant_inference_mode"]


def _checked_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"quant_inference_mode: {name} must be a bool, got {value!r}")
    return value


class quant_inference_mode:  # noqa: N801  (Brevitas's name)
    """``with quant_inference_mode(model): ...``. ``cache_quant_weight`` is accepted (an eval
    model keeps its quantized weights anyway); ``compile=True`` (Brevitas compiles each
    quantizer) raises on entry: compile the model with torch.compile instead. ``enabled=False``
    makes the context do nothing."""

    def __init__(
        self,
        model: nn.Module,
        cache_quant_weight: bool = False,
        compile: bool = False,  # noqa: A002  (Brevitas's keyword)
        enabled: bool = True,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(
                f"quant_inference_mode: model must be a torch.nn.Module, got {type(model).__name__}"
            )
        self.model = model
        self.cache_quant_weight = _checked_bool("cache_quant_weight", cache_quant_weight)
        self.compile = _checked_bool("compile", compile)
        self.enabled = _checked_bool("enabled", enabled)
        self._handle: Optional[RemovableHandle] = None
        self._calls = 0

    def __enter__(self) -> None:
        if not self.enabled:
            return
        if self.compile:
            raise UnsupportedError(
                "brevitas_cpp does not support quant_inference_mode(compile=True) (Brevitas "
                "compiles each quantizer); use torch.compile(model) instead"
            )
        if self.model.training:
            raise RuntimeError(
                "quant_inference_mode: the model is in training mode; call model.eval() first "
                "(Brevitas: can't enter export mode during training, only during inference)"
            )
        self._calls = 0
        self._handle = self.model.register_forward_hook(self._hook)

    def _hook(self, module: nn.Module, args: Any, output: Any) -> Any:
        # Brevitas switches return_quant_tensor off after the first call, from its caches.
        self._calls += 1
        return output if self._calls == 1 else _unpack_quant_tensor(output)

    def __exit__(self, *exc_info: Any) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None


__getattr__ = unsupported_getattr(__name__)
