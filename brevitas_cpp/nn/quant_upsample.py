"""Upsampling of quantized tensors (Brevitas's brevitas.nn.quant_upsample).

Nearest-neighbour upsampling copies values, so a QuantTensor keeps its scale, zero point and bit
width. Any other mode (bilinear, bicubic, ...) mixes neighbouring levels, so the result is
rounded back onto the input's grid, ``round_ste(y / scale) * scale``, which needs a QuantTensor
input. The layers return QuantTensors by default (return_quant_tensor=True)."""

from typing import Optional, Union

import torch
from torch import Tensor
from torch.nn import Upsample, UpsamplingBilinear2d, UpsamplingNearest2d
from torch.nn.functional import interpolate

from brevitas_cpp.function import round_ste
from brevitas_cpp.nn._error_context import call_naming_layer
from brevitas_cpp.nn.mixin.base import QuantLayerMixin
from brevitas_cpp.proxy.script import script_error
from brevitas_cpp.quant_tensor import QuantTensor

__all__ = ["QuantUpsample", "QuantUpsamplingBilinear2d", "QuantUpsamplingNearest2d"]


def _upsample(
    layer: Upsample, x: Union[Tensor, QuantTensor], round_to_grid: bool
) -> Union[Tensor, QuantTensor]:
    """Interpolate x's value as the torch layer would; with round_to_grid, snap the result to
    x's scale (straight-through rounding, so gradients flow as through the interpolation)."""
    if round_to_grid and not isinstance(x, QuantTensor):
        raise TypeError(
            f"{type(layer).__name__}: mode={layer.mode!r} interpolates between quantization "
            f"levels and rounds the result back to the input's scale, so the input must be a "
            f"QuantTensor (e.g. the output of a quant layer with return_quant_tensor=True); got "
            f"{type(x).__name__}. mode='nearest' accepts plain tensors"
        )
    value = x.value if isinstance(x, QuantTensor) else x
    y_value = interpolate(value, layer.size, layer.scale_factor, layer.mode, layer.align_corners)
    if not isinstance(x, QuantTensor):
        return y_value
    if round_to_grid:
        y_value = round_ste(y_value / x.scale) * x.scale
    return x.set(value=y_value)


def _check_scriptable(layer: Upsample) -> None:
    if layer.mode != "nearest":
        raise script_error(
            layer,
            f"mode={layer.mode!r} rounds the interpolation to the input's scale, which "
            f"needs a QuantTensor input",
            "Trace the model instead; mode='nearest' scripts.",
        )


class _QuantUpsampleBase(QuantLayerMixin):
    """What the upsampling layers share: the forward (rounding to the grid in any mode but
    'nearest') and what scripts."""

    @property
    def channelwise_separable(self) -> bool:
        return True

    @property
    def requires_export_handler(self) -> bool:
        return False

    def __prepare_scriptable__(self) -> "_QuantUpsampleBase":
        _check_scriptable(self)
        return super().__prepare_scriptable__()

    # input: a Tensor, or in eager mode a QuantTensor (annotated as what TorchScript accepts).
    def forward(self, input: Tensor):
        if torch.jit.is_scripting():
            # 'nearest' (checked by __prepare_scriptable__): copies values, as in eager mode.
            return interpolate(input, self.size, self.scale_factor, self.mode, self.align_corners)
        # An error names the layer (TorchScript compiles no try statement: eager mode only).
        return call_naming_layer(self, self._layer_forward, input)

    def _layer_forward(self, input: Tensor):
        x = self.unpack_input(input)
        return self.pack_output(_upsample(self, x, round_to_grid=self.mode != "nearest"))


class QuantUpsample(_QuantUpsampleBase, Upsample):
    """nn.Upsample on QuantTensors: 'nearest' keeps the input's quantization; other modes round
    the interpolated values to the input's scale (QuantTensor input required)."""

    def __init__(
        self,
        size=None,
        scale_factor=None,
        mode: str = "nearest",
        align_corners: Optional[bool] = None,
        return_quant_tensor: bool = True,
    ) -> None:
        Upsample.__init__(
            self, size=size, scale_factor=scale_factor, mode=mode, align_corners=align_corners
        )
        QuantLayerMixin.__init__(self, return_quant_tensor)


class QuantUpsamplingBilinear2d(_QuantUpsampleBase, UpsamplingBilinear2d):
    """nn.UpsamplingBilinear2d (align_corners=True) on a QuantTensor, rounded to its scale."""

    def __init__(self, size=None, scale_factor=None, return_quant_tensor: bool = True) -> None:
        UpsamplingBilinear2d.__init__(self, size=size, scale_factor=scale_factor)
        QuantLayerMixin.__init__(self, return_quant_tensor)


class QuantUpsamplingNearest2d(_QuantUpsampleBase, UpsamplingNearest2d):
    """nn.UpsamplingNearest2d: copies values, so a QuantTensor keeps its quantization."""

    def __init__(self, size=None, scale_factor=None, return_quant_tensor: bool = True) -> None:
        UpsamplingNearest2d.__init__(self, size=size, scale_factor=scale_factor)
        QuantLayerMixin.__init__(self, return_quant_tensor)
