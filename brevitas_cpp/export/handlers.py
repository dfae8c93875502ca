"""Export handlers: what a proxy runs instead of its quantizer while the model is exported
(``proxy.export_handler``, called by the proxies in export mode).

Each holds the constants of one quantizer of the eval model and computes with torch's
``quantized_decomposed`` ops, which torch.export keeps as they are and the ONNX writer maps to
QuantizeLinear / Clip / DequantizeLinear:

* ``ActQcdq``: x -> dequantize(quantize(x)), the clamp to the bit width's range included;
* ``IntParameter``: a weight or a bias as its stored integers, dequantized (the float
  parameter is not read);
* ``BinaryAct``, ``TernaryAct``: what binary and ternary activation quantizers compute, with
  plain torch ops (their rounding is not QuantizeLinear's).

Every handler returns the proxy's tuple (value, scale, zero_point, bit_width). The metadata of a
per-tensor grid is made of Python numbers inside forward, so that the layers' eager checks on it
(e.g. that both operands of an add share a scale) see constants while torch.export traces.
"""

import math
from typing import List, Optional, Sequence, Tuple

import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers torch.ops.quantized_decomposed)
from torch import Tensor, nn

from brevitas_cpp.export.errors import ExportError
from brevitas_cpp.export.grid import IntGrid

__all__ = ["ActQcdq", "BinaryAct", "IntParameter", "QcdqHandler", "TernaryAct"]

_qd = torch.ops.quantized_decomposed


class QcdqHandler(nn.Module):
    """The constants of one integer grid, as buffers (per-channel) and Python numbers."""

    def __init__(self, grid: IntGrid, scale_shape: Sequence[int], zero_point_shape: Sequence[int]):
        super().__init__()
        self.register_buffer("scale", grid.scale.clone())
        self.register_buffer("zero_point", grid.zero_point.clone())
        self.axis: Optional[int] = grid.axis
        self.qmin, self.qmax, self.dtype = grid.qmin, grid.qmax, grid.dtype
        self.bit_width = grid.bit_width
        self.signed, self.narrow_range = grid.signed, grid.narrow_range
        self.scale_shape, self.zero_point_shape = list(scale_shape), list(zero_point_shape)
        self.scale_value = float(grid.scale.reshape(-1)[0])
        self.zero_point_value = int(grid.zero_point.reshape(-1)[0])
        # Set by export: the proxy's name, appended to quantize_log at each quantize op traced,
        # so that each QuantizeLinear can be told which quantizer (and call) it is.
        self.proxy_name = ""
        self.quantize_log: Optional[List[str]] = None

    def metadata(self) -> Tuple[Tensor, Tensor, Tensor]:
        """(scale, zero_point, bit_width) in the shapes the quantizer returned them."""
        bit_width = torch.tensor(float(self.bit_width))
        if math.prod(self.scale_shape) == 1:
            scale = torch.full(self.scale_shape, self.scale_value)
        else:
            scale = self.scale.reshape(self.scale_shape)
        if math.prod(self.zero_point_shape) == 1:
            zero_point = torch.full(self.zero_point_shape, float(self.zero_point_value))
        else:
            zero_point = self.zero_point.to(torch.float32).reshape(self.zero_point_shape)
        return scale, zero_point, bit_width

    def quantize(self, x: Tensor) -> Tensor:
        if x.dtype != torch.float32:
            raise ExportError(
                f"QCDQ export quantizes float32 tensors, got {x.dtype} (call model.float())"
            )
        if self.quantize_log is not None:
            self.quantize_log.append(self.proxy_name)
        if self.axis is None:
            return _qd.quantize_per_tensor(
                x, self.scale_value, self.zero_point_value, self.qmin, self.qmax, self.dtype
            )
        return _qd.quantize_per_channel(
            x, self.scale, self.zero_point, self.axis, self.qmin, self.qmax, self.dtype
        )

    def dequantize(self, q: Tensor) -> Tensor:
        if self.axis is None:
            return _qd.dequantize_per_tensor(
                q, self.scale_value, self.zero_point_value, self.qmin, self.qmax, self.dtype
            )
        return _qd.dequantize_per_channel(
            q, self.scale, self.zero_point, self.axis, self.qmin, self.qmax, self.dtype
        )

    def extra_repr(self) -> str:
        per = "per tensor" if self.axis is None else f"per channel, axis={self.axis}"
        return f"{self.bit_width} bits in {self.dtype}, [{self.qmin}, {self.qmax}], {per}"


class ActQcdq(QcdqHandler):
    """An activation quantizer: QuantizeLinear -> (Clip) -> DequantizeLinear."""

    def forward(self, x: Tensor):
        value = self.dequantize(self.quantize(x))
        return (value, *self.metadata())


class IntParameter(QcdqHandler):
    """A weight or bias quantizer: the integers of each parameter it serves (a quantizer shared by
    several layers serves several), dequantized. ``sources`` are the layers, ``attr`` the
    parameter's name on them; forward picks the integers of the parameter it is given."""

    def __init__(
        self,
        grid: IntGrid,
        scale_shape: Sequence[int],
        zero_point_shape: Sequence[int],
        ints: List[Tensor],
        sources: Sequence[nn.Module],
        attr: str,
        owner: str,
    ):
        super().__init__(grid, scale_shape, zero_point_shape)
        for i, t in enumerate(ints):
            self.register_buffer(f"int_value_{i}", t.to(grid.dtype).contiguous())
        self.count = len(ints)
        # A tuple: not registered as submodules (they are the layers above this handler).
        self.sources = tuple(sources)
        self.attr, self.owner = attr, owner

    def int_value(self, index: int) -> Tensor:
        return getattr(self, f"int_value_{index}")

    def _index_of(self, x: Tensor) -> int:
        if self.count == 1:
            return 0
        for i, module in enumerate(self.sources):
            if getattr(module, self.attr, None) is x:
                return i
        raise ExportError(
            f"{self.owner}: the quantizer serves {self.count} layers and was given a {self.attr} "
            f"that is none of theirs"
        )

    def forward(self, x: Tensor, *_ignored):
        # *_ignored: a bias quantizer is also given the accumulator scale, already in the grid.
        value = self.dequantize(self.int_value(self._index_of(x)))
        return (value, *self.metadata())


class BinaryAct(nn.Module):
    """y = +scale where x >= 0, -scale elsewhere (brevitas_cpp's binary_sign)."""

    def __init__(self, scale: float, scale_shape: Sequence[int]) -> None:
        super().__init__()
        self.scale_value, self.scale_shape = float(scale), list(scale_shape)

    def forward(self, x: Tensor):
        s = torch.full((), self.scale_value)
        value = torch.where(x >= 0, s, -s)
        return (
            value,
            torch.full(self.scale_shape, self.scale_value),
            torch.zeros(()),
            torch.ones(()),
        )


class TernaryAct(nn.Module):
    """y = sign(x) * scale where |x| > threshold * scale, 0 elsewhere (core TernaryQuant)."""

    def __init__(self, scale: float, threshold: float, scale_shape: Sequence[int]) -> None:
        super().__init__()
        self.scale_value, self.threshold = float(scale), float(threshold)
        self.scale_shape = list(scale_shape)

    def forward(self, x: Tensor):
        s = torch.full((), self.scale_value)
        keep = x.abs() > self.threshold * self.scale_value
        value = torch.where(keep, torch.sign(x) * s, torch.zeros((), dtype=x.dtype))
        scale = torch.full(self.scale_shape, self.scale_value)
        return value, scale, torch.zeros(()), torch.tensor(2.0)
