"""Post-training calibration (Brevitas's brevitas.graph.calibrate): activation statistics
collected over data with the model in float, bias correction, and BatchNorm folding.

- ``calibration_mode(model, enabled=True)``: inside, the model computes in float and without
  gradients while every enabled activation quantizer collects its statistics over all the
  batches into a plain average (Brevitas sets the warm-up's length and momentum aside; they are
  restored on leaving). The quantizers are in training mode, the rest of the model in eval, so
  BatchNorm statistics do not move; weights and biases are unquantized, as in Brevitas. On
  leaving, the scales (and zero points) that collected any statistics are fixed from them, and
  every module's mode and quantization is restored. Under DDP the statistics are averaged over
  the ranks, as in training.
- ``calibrate(model, data)``: runs calibration_mode over an iterable of batches, with a
  progress bar.
- ``bias_correction_mode(model)``: Brevitas's algorithm. Inside, output quantization is off, and
  after each call of a weight layer the layer runs again with all its quantizers off (input,
  weight, bias): the per-channel mean of that float output minus the mean of the quantized
  output is the batch's error, and the float output goes on to the next layers, so that errors
  do not pile up. On leaving, the mean of the batches' errors is added to each bias (a bias is
  created where there is none, unless skip_if_no_bias).
- As in Brevitas, return_quant_tensor is off while quantizers are (the outputs are float), and
  both modes take ``enabled`` (False: the mode does nothing).
- ``merge_bn`` (graph.fold) folds BatchNorms into the layers they follow.
"""

import contextlib
import sys
from typing import Any, ContextManager, Iterable, Iterator, List, Optional

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from brevitas_cpp._unsupported import unsupported_getattr
from brevitas_cpp.core._checks import checked_bool
from brevitas_cpp.core.scaling import ParameterFromRuntimeStatsScaling
from brevitas_cpp.core.zero_point import ParameterFromRuntimeZeroPoint
from brevitas_cpp.distributed import all_reduce_stats
from brevitas_cpp.graph.fold import merge_bn
from brevitas_cpp.graph.trace import evaluating
from brevitas_cpp.nn.quant_layer import QuantWeightBiasInputOutputLayer
from brevitas_cpp.proxy import ActQuantProxyFromInjectorBase, ParameterQuantProxyFromInjector
from brevitas_cpp.quant_tensor import _unpack_quant_tensor

__all__ = ["bias_correction_mode", "calibrate", "calibration_mode", "merge_bn"]


def _float_output(proxy: nn.Module, args: Any, output: Any) -> Tensor:
    """Forward hook: the proxy's activation without its quantizer (which has run, collecting)."""
    return proxy.fused_activation_quant_proxy.activation_impl(_unpack_quant_tensor(args[0]))


@contextlib.contextmanager
def _quant_disabled(proxies: List[nn.Module]) -> Iterator[None]:
    """disable_quant on those of the proxies that quantize, restored however it is left."""
    enabled = [proxy for proxy in proxies if not proxy.disable_quant]
    for proxy in enabled:
        proxy.disable_quant = True
    try:
        yield
    finally:
        for proxy in enabled:
            proxy.disable_quant = False


def _parameter_quant_disabled(model: nn.Module) -> ContextManager[None]:
    """Weight and bias quantization off. A float weight also needs no quantized input (an
    accumulator-aware quantizer's would be float here)."""
    proxies = [m for m in model.modules() if isinstance(m, ParameterQuantProxyFromInjector)]
    return _quant_disabled(proxies)


@contextlib.contextmanager
def _return_quant_tensor_off(model: nn.Module) -> Iterator[None]:
    """return_quant_tensor False on every module that has it (the outputs are float while
    quantizers are off), restored however it is left."""
    modules = [m for m in model.modules() if getattr(m, "return_quant_tensor", False) is True]
    for module in modules:
        module.return_quant_tensor = False
    try:
        yield
    finally:
        for module in modules:
            module.return_quant_tensor = True


@contextlib.contextmanager
def calibration_mode(model: nn.Module, enabled: bool = True) -> Iterator[nn.Module]:
    """See the module docstring; enabled=False leaves the model as it is."""
    if not checked_bool("calibration_mode", "enabled", enabled):
        yield model
        return
    proxies = [
        m
        for m in model.modules()
        if isinstance(m, ActQuantProxyFromInjectorBase) and m.is_quant_enabled
    ]
    handles = [proxy.register_forward_hook(_float_output) for proxy in proxies]
    warmups = [m for m in model.modules() if hasattr(m, "collect_stats_steps")]
    settings = [(m, m.collect_stats_steps, getattr(m, "momentum", None)) for m in warmups]
    # Brevitas's calibration: however many batches, all collected, into a plain average (the
    # quantizers' own setting is an EMA over collect_stats_steps training batches).
    for module in warmups:
        module.collect_stats_steps = sys.maxsize - 1
        if hasattr(module, "momentum"):
            module.momentum = None
    try:
        # An error inside leaves through evaluating's cleanup and skips the fixing below.
        with (
            evaluating(model, handles),
            _parameter_quant_disabled(model),
            _return_quant_tensor_off(model),
        ):
            for proxy in proxies:
                proxy.train()
            yield model
        for module in model.modules():
            # Only blocks that saw data: an empty running statistic would become a zero scale.
            if isinstance(module, ParameterFromRuntimeStatsScaling) and module.counter > 0:
                module.init_scale()
            elif isinstance(module, ParameterFromRuntimeZeroPoint) and module.counter > 0:
                module.init_zp()
    finally:
        # A block fixed above is past any warm-up (its counter too); the others are as before.
        for module, steps, momentum in settings:
            module.collect_stats_steps = steps
            if hasattr(module, "momentum"):
                module.momentum = momentum


def calibrate(
    model: nn.Module, data: Iterable[Any], max_batches: Optional[int] = None, progress: bool = True
) -> int:
    """calibration_mode over the batches of data (a Tensor, or a tuple/list whose first item is
    the input); returns the number of batches run."""
    count = 0
    with calibration_mode(model):
        for batch in tqdm(data, desc="calibration", disable=not progress, leave=False):
            if max_batches is not None and count >= max_batches:
                break
            model(batch[0] if isinstance(batch, (tuple, list)) else batch)
            count += 1
    return count


def _channel_mean(output: Tensor, channel_dim: int) -> Tensor:
    """The mean of each channel over everything else, as Brevitas computes it."""
    output = output.transpose(0, channel_dim)
    return output.reshape(output.shape[0], -1).mean(dim=1)


class _BiasError:
    """One layer's error: the sum over batches of the per-channel mean of its float output minus
    that of its quantized output, and the number of batches."""

    def __init__(self, layer: QuantWeightBiasInputOutputLayer) -> None:
        self.layer = layer
        self.total: Optional[Tensor] = None
        self.count = 0
        self.proxies = [layer.input_quant, layer.weight_quant, layer.bias_quant]

    def __call__(self, layer: nn.Module, args: Any, output: Any) -> Tensor:
        # forward, not the module call: the layer's other hooks (and this one) run once.
        with _quant_disabled(self.proxies), _return_quant_tensor_off(layer):
            float_output = layer.forward(*args)
        # Brevitas's channel: the last of a 3-d Linear output, else the second.
        channel_dim = 2 if float_output.dim() == 3 and isinstance(layer, nn.Linear) else 1
        error = _channel_mean(float_output, channel_dim) - _channel_mean(
            _unpack_quant_tensor(output), channel_dim
        )
        self.total = error if self.total is None else self.total + error
        self.count += 1
        return float_output

    def correct(self, skip_if_no_bias: bool) -> None:
        if self.total is None or (self.layer.bias is None and skip_if_no_bias):
            return
        # Averaged over the ranks too, when the batches were spread over a process group.
        correction = (all_reduce_stats(self.total) / self.count).to(self.layer.weight.dtype)
        with torch.no_grad():
            if self.layer.bias is None:
                self.layer.bias = nn.Parameter(correction.clone())
            else:
                self.layer.bias.add_(correction)


@contextlib.contextmanager
def bias_correction_mode(
    model: nn.Module, enabled: bool = True, skip_if_no_bias: bool = False
) -> Iterator[nn.Module]:
    """See the module docstring. Run calibration first: the input quantizers' scales must be
    fixed (eval) for the measured error to be the one QAT or inference will see.
    enabled=False leaves the model as it is; skip_if_no_bias leaves a layer without a bias as
    it is (Brevitas's keywords)."""
    skip_if_no_bias = checked_bool("bias_correction_mode", "skip_if_no_bias", skip_if_no_bias)
    if not checked_bool("bias_correction_mode", "enabled", enabled):
        yield model
        return
    layers = [
        m
        for m in model.modules()
        if isinstance(m, QuantWeightBiasInputOutputLayer) and m.weight_quant.is_quant_enabled
    ]
    errors = [_BiasError(m) for m in layers]
    output_proxies = [m.output_quant for m in model.modules() if hasattr(m, "output_quant")]
    with evaluating(model, [m.register_forward_hook(e) for m, e in zip(layers, errors)]):
        # The correction goes into the bias, ahead of any output quantizer: those are off.
        with _quant_disabled(output_proxies):
            yield model
    for error in errors:
        error.correct(skip_if_no_bias)


# Brevitas names brevitas_cpp does not support raise on use (brevitas_cpp._unsupported).
__getattr__ = unsupported_getattr(__name__)
