"""Post-training calibration (Brevitas's brevitas.graph.calibrate): activation statistics
collected over data with the model in float, bias correction, and BatchNorm folding.

- ``calibration_mode(model)``: inside, the model computes in float and without gradients while
  every enabled activation quantizer collects its statistics (the quantizers in training mode,
  the rest of the model in eval, so BatchNorm statistics do not move; weights and biases
  unquantized, as in Brevitas); on leaving, the scales (and zero points) that collected any
  statistics are fixed from them, and every module's mode and quantization is restored. Under
  DDP the statistics are averaged over the ranks, as in training.
- ``calibrate(model, data)``: runs calibration_mode over an iterable of batches, with a
  progress bar.
- ``bias_correction_mode(model)``: inside, each weight layer measures, per output channel, the
  mean of (float weight - quantized weight) applied to its quantized input; on leaving, that
  mean is added to its bias (a bias is created where there is none).
- ``merge_bn`` (graph.fold) folds BatchNorms into the layers they follow.
"""

import contextlib
from typing import Any, Iterable, Iterator, Optional

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from brevitas_cpp._unsupported import unsupported_getattr
from brevitas_cpp.core.scaling import ParameterFromRuntimeStatsScaling
from brevitas_cpp.core.zero_point import ParameterFromRuntimeZeroPoint
from brevitas_cpp.function.shape import accumulator_channel_dim
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
def _parameter_quant_disabled(model: nn.Module) -> Iterator[None]:
    """Weight and bias quantization off inside, restored however it is left. A float weight
    also needs no quantized input (an accumulator-aware quantizer's would be float here)."""
    proxies = [
        m
        for m in model.modules()
        if isinstance(m, ParameterQuantProxyFromInjector) and not m.disable_quant
    ]
    for proxy in proxies:
        proxy.disable_quant = True
    try:
        yield
    finally:
        for proxy in proxies:
            proxy.disable_quant = False


@contextlib.contextmanager
def calibration_mode(model: nn.Module) -> Iterator[nn.Module]:
    """See the module docstring."""
    proxies = [
        m
        for m in model.modules()
        if isinstance(m, ActQuantProxyFromInjectorBase) and m.is_quant_enabled
    ]
    handles = [proxy.register_forward_hook(_float_output) for proxy in proxies]
    # An error inside leaves through evaluating's cleanup and skips the fixing below.
    with evaluating(model, handles), _parameter_quant_disabled(model):
        for proxy in proxies:
            proxy.train()
        yield model
    for module in model.modules():
        # Only blocks that saw data: an empty running statistic would become a zero scale.
        if isinstance(module, ParameterFromRuntimeStatsScaling) and module.counter > 0:
            module.init_scale()
        elif isinstance(module, ParameterFromRuntimeZeroPoint) and module.counter > 0:
            module.init_zp()


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


class _BiasError:
    """The running per-channel mean error of one layer."""

    def __init__(self, layer: QuantWeightBiasInputOutputLayer) -> None:
        self.layer = layer
        self.total: Optional[Tensor] = None
        self.count = 0

    def __call__(self, layer: nn.Module, args: Any, output: Any) -> None:
        # The operands as the layer's forward quantizes them: an accumulator-aware weight
        # quantizer (A2Q, A2Q+) bounds the weight by the quantized input's bit width and sign.
        as_quant_tensor = layer._wants_quant_tensor(args[0])
        quant_input = layer.input_quant.quantize(args[0], as_quant_tensor)
        quant_w = layer.weight_quant.quantize(layer.weight, quant_input, as_quant_tensor)
        quant_x = _unpack_quant_tensor(quant_input[0])
        quant_w = _unpack_quant_tensor(quant_w[0])
        error = layer.inner_forward_impl(quant_x, layer.weight, None) - layer.inner_forward_impl(
            quant_x, quant_w, None
        )
        channel_dim = accumulator_channel_dim(isinstance(layer, nn.Linear)) % error.dim()
        dims = [d for d in range(error.dim()) if d != channel_dim]
        batch_sum = error.sum(dim=dims)
        self.total = batch_sum if self.total is None else self.total + batch_sum
        self.count += error.numel() // error.shape[channel_dim]

    def correct(self) -> None:
        if self.total is None:
            return
        correction = (self.total / self.count).to(self.layer.weight.dtype)
        with torch.no_grad():
            if self.layer.bias is None:
                self.layer.bias = nn.Parameter(correction.clone())
            else:
                self.layer.bias.add_(correction)


@contextlib.contextmanager
def bias_correction_mode(model: nn.Module) -> Iterator[nn.Module]:
    """See the module docstring. Run calibration first: the input quantizers' scales must be
    fixed (eval) for the measured error to be the one QAT or inference will see."""
    layers = [
        m
        for m in model.modules()
        if isinstance(m, QuantWeightBiasInputOutputLayer) and m.weight_quant.is_quant_enabled
    ]
    errors = [_BiasError(m) for m in layers]
    with evaluating(model, [m.register_forward_hook(e) for m, e in zip(layers, errors)]):
        yield model
    for error in errors:
        error.correct()


# Brevitas names brevitas_cpp does not support raise on use (brevitas_cpp._unsupported).
__getattr__ = unsupported_getattr(__name__)
