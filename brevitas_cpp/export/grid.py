"""The integer grid of one quantized tensor as QCDQ stores it.

    value = (int - zero_point) * scale,   int in [qmin, qmax], held in ``dtype``

with one scale (and zero point) per tensor, or one per channel along ``axis``. ``IntGrid.of``
derives it from what a quantizer returned (value, scale, zero point, bit width) and refuses,
naming the quantizer, what ONNX's QuantizeLinear/DequantizeLinear can not carry: a bit width
that is not a whole number, zero points that are not integers, scales that vary along more than
one axis (groups), scales that are not positive and finite.
"""

import math
from dataclasses import dataclass
from typing import Optional, Tuple

import torch
from torch import Tensor

from brevitas_cpp.export.errors import ExportError

__all__ = ["IntGrid", "storage_dtype", "int_range"]

# Storage types of ONNX's QuantizeLinear/DequantizeLinear outputs and inputs, by bit width.
_SIGNED = ((8, torch.int8), (16, torch.int16), (32, torch.int32))
_UNSIGNED = ((8, torch.uint8), (16, torch.uint16))


def int_range(bit_width: int, signed: bool, narrow_range: bool) -> Tuple[int, int]:
    """[min_int, max_int] of brevitas_cpp.function.min_int/max_int, as Python ints."""
    if signed:
        return -(2 ** (bit_width - 1)) + int(narrow_range), 2 ** (bit_width - 1) - 1
    return 0, 2**bit_width - 1 - int(narrow_range)


def storage_dtype(bit_width: int, signed: bool) -> Optional[torch.dtype]:
    """The narrowest integer dtype QCDQ stores bit_width-bit integers in; None if none."""
    for bits, dtype in _SIGNED if signed else _UNSIGNED:
        if bit_width <= bits:
            return dtype
    return None


def _whole_bit_width(owner: str, bit_width: Tensor) -> int:
    if bit_width.numel() != 1:
        raise ExportError(
            f"{owner}: the bit width has {bit_width.numel()} values (shape "
            f"{list(bit_width.shape)}); QCDQ gives a tensor one bit width"
        )
    bits = float(bit_width.detach().reshape(()).item())
    if not math.isfinite(bits) or bits != round(bits):
        raise ExportError(
            f"{owner}: bit width {bits:g} is not an integer; QCDQ stores integers of a whole "
            f"number of bits. Round the learned bit width (the default restrict_bit_width_impl, "
            f"IntRestrictValue(RoundSte())) or use a constant bit width"
        )
    if not 1 <= bits <= 32:
        raise ExportError(f"{owner}: bit width {bits:g} is outside [1, 32]")
    return int(bits)


def _padded_shape(t: Tensor, ndim: int) -> Tuple[int, ...]:
    return (1,) * (ndim - t.dim()) + tuple(t.shape)


def _channel_axis(owner: str, value: Tensor, scale: Tensor, zero_point: Tensor) -> Optional[int]:
    """None for one scale per tensor, else the one axis of value that scale/zero point run
    along."""
    if scale.dim() > value.dim() or zero_point.dim() > value.dim():
        raise ExportError(
            f"{owner}: scale {list(scale.shape)} / zero point {list(zero_point.shape)} have more "
            f"dimensions than the tensor {list(value.shape)}"
        )
    axes = set()
    for t in (scale, zero_point):
        for d, size in enumerate(_padded_shape(t, value.dim())):
            if size != 1:
                axes.add(d)
    if not axes:
        return None
    if len(axes) > 1 or any(
        _padded_shape(t, value.dim())[d] not in (1, value.shape[d])
        for t in (scale, zero_point)
        for d in axes
    ):
        raise ExportError(
            f"{owner}: scale {list(scale.shape)} and zero point {list(zero_point.shape)} vary "
            f"along more than one axis of the tensor {list(value.shape)} (groupwise or "
            f"per-element quantization); QCDQ (opset 13) carries one scale per tensor or per "
            f"channel of one axis"
        )
    return axes.pop()


@dataclass(frozen=True)
class IntGrid:
    """See the module docstring. scale: float32, shape [] or [C]; zero_point: int64, same."""

    scale: Tensor
    zero_point: Tensor
    bit_width: int
    signed: bool
    narrow_range: bool
    qmin: int
    qmax: int
    axis: Optional[int]
    dtype: torch.dtype

    @property
    def per_channel(self) -> bool:
        return self.axis is not None

    @property
    def full_range(self) -> bool:
        """Whether [qmin, qmax] is all of dtype (no Clip needed after QuantizeLinear)."""
        info = torch.iinfo(self.dtype)
        return (self.qmin, self.qmax) == (info.min, info.max)

    def view(self, t: Tensor, ndim: int) -> Tensor:
        """scale or zero_point shaped to broadcast against a tensor of ndim dims."""
        if self.axis is None:
            return t.reshape(())
        shape = [1] * ndim
        shape[self.axis] = t.numel()
        return t.reshape(shape)

    def to_int(self, value: Tensor) -> Tensor:
        """The integers (int64) of a value that lies on this grid."""
        ndim = value.dim()
        # float64: an int32 bias's integers pass 2^24, beyond float32's integers.
        scale = self.view(self.scale, ndim).to(torch.float64)
        q = value.detach().to(torch.float64) / scale + self.view(self.zero_point, ndim)
        return torch.round(q).to(torch.int64)

    def dequantize(self, ints: Tensor) -> Tensor:
        ndim = ints.dim()
        return (ints - self.view(self.zero_point, ndim)).to(torch.float32) * self.view(
            self.scale, ndim
        )

    @classmethod
    def of(
        cls,
        owner: str,
        value: Tensor,
        scale: Tensor,
        zero_point: Tensor,
        bit_width: Tensor,
        signed: bool,
        narrow_range: bool,
        int_bounds: Optional[Tuple[int, int]] = None,
    ) -> "IntGrid":
        """The grid of a quantizer output; owner names the quantizer in errors. int_bounds
        replaces the range the bit width gives (binary quantizers: [-1, 1] at 1 bit)."""
        if value.dtype != torch.float32:
            raise ExportError(
                f"{owner}: the tensor is {value.dtype}; QCDQ export takes float32 models "
                f"(call model.float() first)"
            )
        bits = _whole_bit_width(owner, bit_width)
        scale = scale.detach().to(torch.float32)
        zero_point = zero_point.detach().to(value.device)
        if not bool(torch.all(torch.isfinite(scale) & (scale > 0))):
            raise ExportError(f"{owner}: scales must be positive and finite, got {scale}")
        if not bool(torch.all(zero_point == torch.round(zero_point))):
            raise ExportError(
                f"{owner}: zero point {zero_point.flatten()[:8].tolist()} is not an integer; "
                f"QuantizeLinear takes integer zero points (round it, e.g. "
                f"zero_point_impl with an integer restriction)"
            )
        axis = _channel_axis(owner, value, scale, zero_point)
        if axis is None:
            scale, zero_point = scale.reshape(()), zero_point.reshape(())
        else:
            shape = [1] * value.dim()
            shape[axis] = value.shape[axis]
            scale = scale.reshape(_padded_shape(scale, value.dim())).expand(shape).flatten()
            zero_point = (
                zero_point.reshape(_padded_shape(zero_point, value.dim())).expand(shape).flatten()
            )
        qmin, qmax = int_bounds if int_bounds is not None else int_range(bits, signed, narrow_range)
        dtype = storage_dtype(max(bits, 2) if int_bounds is not None else bits, qmin < 0)
        if dtype is None:
            raise ExportError(
                f"{owner}: {bits}-bit {'signed' if signed else 'unsigned'} integers have no "
                f"QCDQ storage type (unsigned: at most 16 bits)"
            )
        info = torch.iinfo(dtype)
        zp_min, zp_max = int(zero_point.min()), int(zero_point.max())
        if zp_min < info.min or zp_max > info.max:
            raise ExportError(
                f"{owner}: zero point range [{zp_min}, {zp_max}] does not fit {dtype} (the "
                f"storage type of {bits}-bit integers)"
            )
        return cls(
            scale=scale.contiguous().clone(),
            zero_point=zero_point.to(torch.int64).contiguous().clone(),
            bit_width=bits,
            signed=qmin < 0,
            narrow_range=narrow_range,
            qmin=qmin,
            qmax=qmax,
            axis=axis,
            dtype=dtype,
        )

    def same_as(self, other: "IntGrid") -> bool:
        return (
            (self.bit_width, self.qmin, self.qmax, self.axis, self.dtype)
            == (other.bit_width, other.qmin, other.qmax, other.axis, other.dtype)
            and self.scale.shape == other.scale.shape
            and bool(torch.equal(self.scale, other.scale))
            and bool(torch.equal(self.zero_point, other.zero_point))
        )
