"""Quantized tensors with a scale (and zero point) per group of elements along one dimension:
the outputs of the MX and groupwise quantizers (Brevitas's GroupwiseIntQuantTensor and
GroupwiseFloatQuantTensor).

The fields hold the grouped layout the quantizer works in: value_ is the tensor padded along
group_dim to whole groups and split into (groups, group_size); scale_ and zero_point_ have 1 in
place of group_size. `value`, `scale` and `zero_point` give them back in the tensor's own shape
(dequant_shape): merged, expanded over each group and without the padding, so the integer and
minifloat views (`int()`, `is_valid`, `minifloat()`) work as for the per-tensor types.

No output grid is derived for groupwise operands: arithmetic, shape methods and torch functions
run on the dequantized values and return plain tensors (a per-group scale does not survive a
matmul or a transpose as a per-group scale)."""

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from brevitas_cpp.function.shape import group_view, ungroup
from brevitas_cpp.quant_tensor.base_quant_tensor import (
    FloatMixin,
    GroupwiseFloatQuantTensorBase,
    GroupwiseIntQuantTensorBase,
    IntMixin,
    QuantTensor,
    _unpack_quant_tensor,
)
from brevitas_cpp.quant_tensor.fields import (
    _as_flag,
    _as_metadata,
    _flag_value,
    _minifloat_fields,
)

__all__ = [
    "GroupwiseFloatQuantTensor",
    "GroupwiseFloatQuantTensorBase",
    "GroupwiseIntQuantTensor",
    "GroupwiseIntQuantTensorBase",
    "GroupwiseQuantTensor",
    "regroup_like",
]


def _checked_group(cls: type, value_: Any, group_size: Any, group_dim: Any) -> Tuple[int, int]:
    if not isinstance(value_, Tensor):
        raise TypeError(f"{cls.__name__}: value must be a Tensor, got {type(value_).__name__}")
    if isinstance(group_size, Tensor):
        group_size = int(group_size.item())
    if isinstance(group_dim, Tensor):
        group_dim = int(group_dim.item())
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"{cls.__name__}: group_size must be a positive int, got {group_size!r}")
    if isinstance(group_dim, bool) or not isinstance(group_dim, int):
        raise ValueError(f"{cls.__name__}: group_dim must be an int, got {group_dim!r}")
    return group_size, group_dim


def _group_size_dim(value_: Tensor, group_size: int, group_dim: int) -> int:
    """The dim of value_ holding the elements of a group."""
    return group_dim + 1 if group_dim >= 0 else value_.dim() + group_dim


class GroupwiseQuantTensor:
    """What the groupwise types share: the ungrouped views of the grouped fields, and plain-tensor
    results for everything that would need a grid of its own (see the module docstring)."""

    def _ungrouped(self, field: Tensor) -> Tensor:
        # Metadata of lower rank (a per-tensor zero point) broadcasts as it is.
        if field.dim() != self.value_.dim():
            return field
        size = self.dequant_shape[self.group_dim] if self.dequant_shape is not None else None
        if size is None:
            dim = _group_size_dim(self.value_, self.group_size, self.group_dim)
            size = self.value_.shape[dim - 1] * self.group_size
        return ungroup(field, self.group_dim, self.group_size, size)

    def expand(self) -> Tuple[Tensor, Tensor, Tensor]:
        """(value, scale, zero_point) in the tensor's own shape."""
        return (
            self._ungrouped(self.value_),
            self._ungrouped(self.scale_),
            self._ungrouped(self.zero_point_),
        )

    @staticmethod
    def from_expanded(value: Tensor, group_size: int, group_dim: int, compress: bool = False):
        """value (whose group_dim is a multiple of group_size) viewed as its groups; compress
        puts 1 in place of the group count (a tensor constant over each group)."""
        dim = group_dim if group_dim >= 0 else value.dim() + group_dim
        shape = list(value.shape)
        if shape[dim] % group_size != 0:
            raise ValueError(
                f"from_expanded: dim {group_dim} of size {shape[dim]} is not a multiple of "
                f"group_size {group_size}"
            )
        shape[dim] = 1 if compress else shape[dim] // group_size
        shape.insert(dim + 1, group_size)
        return value.view(shape)

    @property
    def value(self) -> Tensor:
        return self._ungrouped(self.value_)

    @property
    def scale(self) -> Tensor:
        return self._ungrouped(self.scale_)

    @property
    def zero_point(self) -> Tensor:
        return self._ungrouped(self.zero_point_)

    @property
    def tensor(self) -> Tensor:
        return self.value

    @property
    def signed(self) -> bool:
        return _flag_value(self.signed_t)

    @property
    def training(self) -> bool:
        return _flag_value(self.training_t)

    @property
    def device(self) -> torch.device:
        """value_'s device; an error if a metadata tensor lives elsewhere."""
        value_device = self.value_.device
        for name in self._GROUPED_METADATA:
            field_device = getattr(self, name).device
            if field_device != value_device:
                raise RuntimeError(
                    f"{type(self).__name__}: value and metadata are on different devices: "
                    f"value is on {value_device} but {name} is on {field_device}"
                )
        return value_device

    def as_quant_tuple(self) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        """(value, scale, zero_point, bit_width) in the tensor's own shape: what a layer
        computes with (a minifloat's bit_width is exponent + mantissa + sign)."""
        value, scale, zero_point = self.expand()
        return value, scale, zero_point, self._total_bit_width()

    def is_zero_zero_point(self) -> Tensor:
        return (self.zero_point_ == 0.0).all()

    @classmethod
    def check_input_type(cls, tensor: Any) -> None:
        if not isinstance(tensor, cls):
            raise RuntimeError(f"Tensor is not a {cls.__name__}, got {type(tensor).__name__}")

    # Torch functions, shape methods and arithmetic: on the dequantized values, plain tensors.
    @classmethod
    def __torch_function__(
        cls,
        func: Callable,
        types: Any,
        args: Sequence[Any] = (),
        kwargs: Optional[Dict[str, Any]] = None,
    ) -> Any:
        return func(*_unpack_quant_tensor(args), **_unpack_quant_tensor(kwargs or {}))

    def view(self, *args: Any, **kwargs: Any) -> Tensor:
        return self.value.view(*args, **kwargs)

    def reshape(self, *args: Any, **kwargs: Any) -> Tensor:
        return self.value.reshape(*args, **kwargs)

    def flatten(self, *args: Any, **kwargs: Any) -> Tensor:
        return self.value.flatten(*args, **kwargs)

    def transpose(self, *args: Any, **kwargs: Any) -> Tensor:
        return self.value.transpose(*args, **kwargs)

    def permute(self, *args: Any, **kwargs: Any) -> Tensor:
        return self.value.permute(*args, **kwargs)

    def __add__(self, other: Any) -> Tensor:
        return self.value + _unpack_quant_tensor(other)

    def __sub__(self, other: Any) -> Tensor:
        return self.value - _unpack_quant_tensor(other)

    def __rsub__(self, other: Any) -> Tensor:
        return _unpack_quant_tensor(other) - self.value

    def __mul__(self, other: Any) -> Tensor:
        return self.value * _unpack_quant_tensor(other)

    def __truediv__(self, other: Any) -> Tensor:
        return self.value / _unpack_quant_tensor(other)

    def __neg__(self) -> Tensor:
        return -self.value

    def __abs__(self) -> Tensor:
        return self.value.abs()

    def __str__(self) -> str:
        fields = ", ".join(f"{n}={getattr(self, n)}" for n in self._fields)
        return f"{type(self).__name__}({fields})"


def _dequant_shape(shape: Any) -> Optional[Tuple[int, ...]]:
    return tuple(shape) if shape is not None else None


class GroupwiseIntQuantTensor(
    GroupwiseQuantTensor, GroupwiseIntQuantTensorBase, IntMixin, QuantTensor
):
    """An integer tensor with a scale and zero point per group (MX INT8, groupwise weights).
    Constructor arguments as Brevitas: value (grouped), scale, zero_point, group_size, group_dim,
    bit_width, signed, training, dequant_shape (the ungrouped shape)."""

    _GROUPED_METADATA = ("scale_", "zero_point_", "bit_width")

    def __new__(
        cls,
        value: Tensor,
        scale: Any,
        zero_point: Any,
        group_size: Any,
        group_dim: Any,
        bit_width: Any,
        signed: Any,
        training: Any,
        dequant_shape: Optional[Sequence[int]] = None,
    ) -> "GroupwiseIntQuantTensor":
        group_size, group_dim = _checked_group(cls, value, group_size, group_dim)
        return super().__new__(
            cls,
            value,
            _as_metadata(cls.__name__, scale, "scale", value),
            _as_metadata(cls.__name__, zero_point, "zero_point", value),
            group_size,
            group_dim,
            _as_metadata(cls.__name__, bit_width, "bit_width", value),
            _as_flag(cls.__name__, signed, "signed"),
            _as_flag(cls.__name__, training, "training"),
            _dequant_shape(dequant_shape),
        )

    @classmethod
    def _from_fields(cls, fields: List[Any]) -> "GroupwiseIntQuantTensor":
        return GroupwiseIntQuantTensorBase.__new__(cls, *fields)

    def _total_bit_width(self) -> Tensor:
        return self.bit_width


class GroupwiseFloatQuantTensor(
    GroupwiseQuantTensor, GroupwiseFloatQuantTensorBase, FloatMixin, QuantTensor
):
    """A minifloat tensor with a scale per group (MX FP8). Constructor arguments as Brevitas:
    value (grouped), scale, zero_point, group_size, group_dim, exponent_bit_width,
    mantissa_bit_width, exponent_bias, saturating, inf_values, nan_values, signed, training,
    dequant_shape (the ungrouped shape)."""

    _GROUPED_METADATA = (
        "scale_",
        "zero_point_",
        "exponent_bit_width",
        "mantissa_bit_width",
        "exponent_bias",
    )

    def __new__(
        cls,
        value: Tensor,
        scale: Any,
        zero_point: Any,
        group_size: Any,
        group_dim: Any,
        exponent_bit_width: Any,
        mantissa_bit_width: Any,
        exponent_bias: Any,
        saturating: Any,
        inf_values: Optional[Sequence[str]],
        nan_values: Optional[Sequence[str]],
        signed: Any,
        training: Any,
        dequant_shape: Optional[Sequence[int]] = None,
    ) -> "GroupwiseFloatQuantTensor":
        group_size, group_dim = _checked_group(cls, value, group_size, group_dim)
        return super().__new__(
            cls,
            value,
            _as_metadata(cls.__name__, scale, "scale", value),
            _as_metadata(cls.__name__, zero_point, "zero_point", value),
            group_size,
            group_dim,
            *_minifloat_fields(
                cls.__name__,
                value,
                exponent_bit_width,
                mantissa_bit_width,
                exponent_bias,
                saturating,
                inf_values,
                nan_values,
                signed,
                training,
            ),
            _dequant_shape(dequant_shape),
        )

    @classmethod
    def _from_fields(cls, fields: List[Any]) -> "GroupwiseFloatQuantTensor":
        return GroupwiseFloatQuantTensorBase.__new__(cls, *fields)

    def _total_bit_width(self) -> Tensor:
        return self.exponent_bit_width + self.mantissa_bit_width + int(self.signed)

    @property
    def saturating(self) -> bool:
        return _flag_value(self.saturating_t)

    @property
    def eps(self) -> float:
        return torch.finfo(self.scale_.dtype).tiny


def regroup_like(like: GroupwiseQuantTensor, value: Tensor, training: bool) -> GroupwiseQuantTensor:
    """value (in like's ungrouped shape) with like's groups and metadata: what an activation
    that keeps its input's quantization (a ReLU after a quantizer) returns."""
    grouped = group_view(value, like.group_dim, like.group_size)
    return like.set(value_=grouped, training_t=_as_flag(type(like).__name__, training, "training"))
