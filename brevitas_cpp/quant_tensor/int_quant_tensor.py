"""IntQuantTensor: a dequantized tensor that knows its integer grid.

value = (int - zero_point) * scale, with int in the range of bit_width and signed. The type
is a NamedTuple (value, scale, zero_point, bit_width, signed_t, training_t), so indexing and
unpacking are tuple operations (qt[0] is the value), as in Brevitas. Arithmetic follows
Brevitas's rules for the output grid; torch functions dispatch through `__torch_function__`
to the handler tables, and any other torch function runs on the values and returns a Tensor."""

from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
from torch import Tensor

from brevitas_cpp.function import ceil_ste, max_int, min_int
from brevitas_cpp.quant_tensor.base_quant_tensor import (
    IntMixin,
    IntQuantTensorBase,
    QuantTensor,
    _describe,
    _unpack_quant_tensor,
)
from brevitas_cpp.quant_tensor.fields import _as_flag, _as_metadata, _flag_value
from brevitas_cpp.quant_tensor.int_torch_handler import (
    INT_QUANT_TENSOR_FN_HANDLER,
    _check_same_device,
)
from brevitas_cpp.quant_tensor.torch_handler import handle_torch_function

__all__ = ["IntQuantTensor"]


class IntQuantTensor(IntQuantTensorBase, IntMixin, QuantTensor):
    """A quantized integer tensor (see the module docstring). Constructor arguments as Brevitas:
    value (Tensor), scale, zero_point, bit_width (Tensors or numbers), signed, training (bools or
    bool tensors); stored as fields value, scale, zero_point, bit_width, signed_t, training_t."""

    def __new__(
        cls, value: Tensor, scale: Any, zero_point: Any, bit_width: Any, signed: Any, training: Any
    ) -> "IntQuantTensor":
        if not isinstance(value, Tensor):
            raise TypeError(
                f"IntQuantTensor: value must be a Tensor, got {type(value).__name__} ({value!r})"
            )
        return super().__new__(
            cls,
            value,
            _as_metadata(cls.__name__, scale, "scale", value),
            _as_metadata(cls.__name__, zero_point, "zero_point", value),
            _as_metadata(cls.__name__, bit_width, "bit_width", value),
            _as_flag(cls.__name__, signed, "signed"),
            _as_flag(cls.__name__, training, "training"),
        )

    @classmethod
    def _from_fields(cls, fields: List[Any]) -> "IntQuantTensor":
        return IntQuantTensorBase.__new__(cls, *fields)

    @property
    def signed(self) -> bool:
        return _flag_value(self.signed_t)

    @property
    def training(self) -> bool:
        return _flag_value(self.training_t)

    @property
    def tensor(self) -> Tensor:
        return self.value

    @property
    def device(self) -> torch.device:
        """The value's device; an error if scale, zero point or bit width live elsewhere."""
        value_device = self.value.device
        for name in ("scale", "zero_point", "bit_width"):
            field_device = getattr(self, name).device
            if field_device != value_device:
                raise RuntimeError(
                    f"IntQuantTensor: value and metadata are on different devices: value is on "
                    f"{value_device} but {name} is on {field_device}"
                )
        return value_device

    @classmethod
    def __torch_function__(
        cls,
        func: Callable,
        types: Any,
        args: Sequence[Any] = (),
        kwargs: Optional[Dict[str, Any]] = None,
    ) -> Any:
        return handle_torch_function(INT_QUANT_TENSOR_FN_HANDLER, func, args, kwargs)

    @staticmethod
    def check_input_type(tensor: Any) -> None:
        if not isinstance(tensor, IntQuantTensor):
            raise RuntimeError(f"Tensor is not a IntQuantTensor, got {type(tensor).__name__}")

    @staticmethod
    def cat(tensors: Sequence[Any], dim: int = 0, out: Optional[Tensor] = None) -> Any:
        """torch.cat of IntQuantTensors on one grid (same scale and zero point in eval, same bit
        width and sign always); a plain tensor if any operand is not an IntQuantTensor."""
        if out is not None:
            raise RuntimeError("IntQuantTensor.cat: out= is not supported")
        if len(tensors) < 2:
            return tensors[0]
        if not all(isinstance(qt, IntQuantTensor) for qt in tensors):
            return torch.cat([_unpack_quant_tensor(qt) for qt in tensors], dim=dim)
        first = tensors[0]
        for i, qt in enumerate(tensors[1:], start=1):
            _check_same_device("IntQuantTensor.cat", **{"tensors[0]": first, f"tensors[{i}]": qt})
            first.check_scaling_factors_same(qt)
            first.check_zero_points_same(qt)
            first.check_bit_width_same(qt)
            first.check_sign_same(qt)
        output_value = torch.cat([qt.value for qt in tensors], dim=dim)
        output_training = any(qt.training for qt in tensors)
        if output_training:
            # Training: the grids may still differ; take their mean (left-to-right sum, as Brevitas).
            count = len(tensors)
            output_scale = sum(qt.scale for qt in tensors) / count
            output_zero_point = sum(qt.zero_point for qt in tensors) / count
            output_bit_width = sum(qt.bit_width for qt in tensors) / count
        else:
            output_scale = first.scale
            output_zero_point = first.zero_point
            output_bit_width = first.bit_width
        return IntQuantTensor(
            value=output_value,
            scale=output_scale,
            zero_point=output_zero_point,
            bit_width=output_bit_width,
            signed=first.signed,
            training=output_training,
        )

    # ---- arithmetic (https://docs.python.org/3/reference/datamodel.html#emulating-numeric-types)

    def __neg__(self) -> "IntQuantTensor":
        """-value on the mirrored grid: integers -int with zero point -zero_point. An unsigned
        tensor becomes signed with one more bit."""
        int_value = self.int(float_datatype=True)
        zero_zp = bool(self.is_zero_zero_point(self))
        # Brevitas 0.12 computes (-int - zero_point) * scale, wrong unless zero_point is 0; this
        # form gives the same bits when it is 0 (including the sign of zeros).
        neg_value = (-(int_value - self.zero_point)) * self.scale
        neg_value = neg_value.type(self.scale.dtype)  # int() may be float32 above 8 bits
        neg_zero_point = self.zero_point if zero_zp else -self.zero_point
        return IntQuantTensor(
            value=neg_value,
            scale=self.scale,
            zero_point=neg_zero_point,
            bit_width=self.bit_width if self.signed else self.bit_width + 1,
            signed=True,
            training=self.training,
        )

    def __add__(self, other: Any) -> Any:
        """With an IntQuantTensor: the sum on the mean grid (scales must match in eval), zero points
        added, bit width that of the widest sum of the two integer ranges. With another
        QuantTensor: a plain tensor. With a tensor or number: the same grid, shifted through the
        zero point."""
        if isinstance(other, IntQuantTensor):
            _check_same_device("IntQuantTensor.__add__", left=self, right=other)
            self.check_scaling_factors_same(other)
            output_value = self.value + other.value
            output_scale = (self.scale + other.scale) / 2
            output_zero_point = self.zero_point + other.zero_point
            max_val = max_int(signed=self.signed, narrow_range=False, bit_width=self.bit_width)
            max_val = max_val + max_int(
                signed=other.signed, narrow_range=False, bit_width=other.bit_width
            )
            min_val = min_int(signed=self.signed, narrow_range=False, bit_width=self.bit_width)
            min_val = min_val + min_int(
                signed=other.signed, narrow_range=False, bit_width=other.bit_width
            )
            output_bit_width = ceil_ste(torch.log2(max_val - min_val))
            return IntQuantTensor(
                value=output_value,
                scale=output_scale,
                zero_point=output_zero_point,
                bit_width=output_bit_width,
                signed=self.signed or other.signed,
                training=self.training or other.training,
            )
        if isinstance(other, QuantTensor):
            return self.value + _unpack_quant_tensor(other)
        # value + c = (int - (zero_point - c / scale)) * scale: same integers, moved zero point.
        return IntQuantTensor(
            value=self.value + other,
            scale=self.scale,
            zero_point=self.zero_point - other / self.scale,
            bit_width=self.bit_width,
            signed=self.signed,
            training=self.training,
        )

    def __mul__(self, other: Any) -> Any:
        """With an IntQuantTensor (both zero points zero): scales multiply, bit widths add.
        With anything else: a plain tensor."""
        if not isinstance(other, IntQuantTensor):
            return self.value * _unpack_quant_tensor(other)
        _check_same_device("IntQuantTensor.__mul__", left=self, right=other)
        self._check_zero_zero_points(other, "mul")
        return IntQuantTensor(
            value=self.value * other.value,
            scale=self.scale * other.scale,
            zero_point=self.zero_point * other.zero_point,
            bit_width=self.bit_width + other.bit_width,
            signed=self.signed or other.signed,
            training=self.training or other.training,
        )

    def __rmul__(self, other: Any) -> Any:
        # Defined here because tuple.__rmul__ (repetition) comes first in the MRO: in Brevitas
        # 0.12, 2 * qt is a tuple of 12 fields.
        return self.__mul__(other)

    def __truediv__(self, other: Any) -> Any:
        """With an IntQuantTensor (both zero points zero): value ratio on a grid finer by the
        divisor's largest magnitude 2^(bits - signed); the output need not be is_valid. With
        anything else: a plain tensor."""
        if not isinstance(other, IntQuantTensor):
            return self.value / _unpack_quant_tensor(other)
        _check_same_device("IntQuantTensor.__truediv__", left=self, right=other)
        self._check_zero_zero_points(other, "div")
        max_int_denominator = 2 ** (other.bit_width - int(other.signed))
        return IntQuantTensor(
            value=self.value / other.value,
            scale=self.scale / (other.scale * max_int_denominator),
            zero_point=self.zero_point * other.zero_point,
            bit_width=self.bit_width + other.bit_width,
            signed=self.signed or other.signed,
            training=self.training or other.training,
        )

    def _check_zero_zero_points(self, other: "IntQuantTensor", op: str) -> None:
        if not (self.is_zero_zero_point(self) and self.is_zero_zero_point(other)):
            raise RuntimeError(
                f"IntQuantTensor {op}: zero points of the operands must be zero, got "
                f"{_describe(self.zero_point)} and {_describe(other.zero_point)}"
            )

    def __abs__(self) -> "IntQuantTensor":
        """|value| as an unsigned tensor with one bit less (Brevitas's rule; a signed minimum
        such as -128 does not fit it). Unsigned tensors are returned as they are."""
        if not self.signed:
            return self
        int_value = self.int(float_datatype=True)
        zero_zp = bool(self.is_zero_zero_point(self))
        # Brevitas 0.12 computes (|int| - zero_point) * scale; same bits when zero_point is 0.
        abs_value = torch.abs(int_value - self.zero_point) * self.scale
        abs_value = abs_value.type(self.scale.dtype)
        return IntQuantTensor(
            value=abs_value,
            scale=self.scale,
            zero_point=self.zero_point if zero_zp else torch.zeros_like(self.zero_point),
            bit_width=self.bit_width - 1,
            signed=False,
            training=self.training,
        )

    def __pos__(self) -> "IntQuantTensor":
        return self

    def __str__(self) -> str:
        return (
            f"IntQuantTensor(value={self.value}, scale={self.scale}, "
            f"zero_point={self.zero_point}, bit_width={self.bit_width}, "
            f"signed_t={self.signed_t}, training_t={self.training_t})"
        )
