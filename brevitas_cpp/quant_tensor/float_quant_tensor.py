"""FloatQuantTensor: a dequantized tensor that knows its minifloat grid.

value = minifloat * scale, the minifloat having exponent_bit_width exponent bits,
mantissa_bit_width mantissa bits and bias exponent_bias (e4m3: 4, 3, 7). The type is a NamedTuple
(value, scale, zero_point, exponent_bit_width, mantissa_bit_width, exponent_bias, saturating_t,
inf_values, nan_values, signed_t, training_t), as in Brevitas. No output format is derived for
minifloat arithmetic or layers: add, mul, div and the layers return plain tensors; negation,
abs, concatenation and the functions of QUANT_TENSOR_FN_HANDLER keep the grid."""

from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
from torch import Tensor

from brevitas_cpp.quant_tensor.base_quant_tensor import (
    FloatMixin,
    FloatQuantTensorBase,
    QuantTensor,
    _unpack_quant_tensor,
)
from brevitas_cpp.quant_tensor.fields import (
    _FALSE_FLAG,
    _TRUE_FLAG,
    _as_metadata,
    _flag_value,
    _minifloat_fields,
)
from brevitas_cpp.quant_tensor.float_torch_handler import FLOAT_QUANT_TENSOR_FN_HANDLER
from brevitas_cpp.quant_tensor.int_torch_handler import _check_same_device
from brevitas_cpp.quant_tensor.torch_handler import handle_torch_function

__all__ = ["FloatQuantTensor"]


# The tensor metadata concatenation merges: the first operand's in eval, the mean in training.
_MERGED_METADATA = (
    "scale",
    "zero_point",
    "exponent_bit_width",
    "mantissa_bit_width",
    "exponent_bias",
)


class FloatQuantTensor(FloatQuantTensorBase, FloatMixin, QuantTensor):
    """A quantized minifloat tensor (see the module docstring). Constructor arguments as
    Brevitas: value (Tensor); scale, zero_point, exponent_bit_width, mantissa_bit_width,
    exponent_bias (Tensors or numbers); saturating, signed, training (bools or bool tensors);
    inf_values, nan_values (None or tuples of bit strings)."""

    def __new__(
        cls,
        value: Tensor,
        scale: Any,
        zero_point: Any,
        exponent_bit_width: Any,
        mantissa_bit_width: Any,
        exponent_bias: Any,
        saturating: Any,
        inf_values: Optional[Sequence[str]],
        nan_values: Optional[Sequence[str]],
        signed: Any,
        training: Any,
    ) -> "FloatQuantTensor":
        if not isinstance(value, Tensor):
            raise TypeError(
                f"FloatQuantTensor: value must be a Tensor, got {type(value).__name__} ({value!r})"
            )
        return super().__new__(
            cls,
            value,
            _as_metadata(cls.__name__, scale, "scale", value),
            _as_metadata(cls.__name__, zero_point, "zero_point", value),
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
        )

    @classmethod
    def _from_fields(cls, fields: List[Any]) -> "FloatQuantTensor":
        return FloatQuantTensorBase.__new__(cls, *fields)

    @property
    def signed(self) -> bool:
        return _flag_value(self.signed_t)

    @property
    def training(self) -> bool:
        return _flag_value(self.training_t)

    @property
    def saturating(self) -> bool:
        return _flag_value(self.saturating_t)

    @property
    def eps(self) -> float:
        """The smallest normal number of the scale's dtype (keeps log2 of zero finite)."""
        return torch.finfo(self.scale.dtype).tiny

    @property
    def tensor(self) -> Tensor:
        return self.value

    @classmethod
    def __torch_function__(
        cls,
        func: Callable,
        types: Any,
        args: Sequence[Any] = (),
        kwargs: Optional[Dict[str, Any]] = None,
    ) -> Any:
        return handle_torch_function(FLOAT_QUANT_TENSOR_FN_HANDLER, func, args, kwargs)

    @staticmethod
    def check_input_type(tensor: Any) -> None:
        if not isinstance(tensor, FloatQuantTensor):
            raise RuntimeError(f"Tensor is not a FloatQuantTensor, got {type(tensor).__name__}")

    @staticmethod
    def cat(tensors: Sequence[Any], dim: int = 0, out: Optional[Tensor] = None) -> Any:
        """torch.cat of FloatQuantTensors on one grid (same scale and zero point in eval; same
        widths, bias, inf/NaN codes, saturation and sign always); a plain tensor if any operand
        is not a FloatQuantTensor."""
        if out is not None:
            raise RuntimeError("FloatQuantTensor.cat: out= is not supported")
        if len(tensors) < 2:
            return tensors[0]
        if not all(isinstance(qt, FloatQuantTensor) for qt in tensors):
            return torch.cat([_unpack_quant_tensor(qt) for qt in tensors], dim=dim)
        first = tensors[0]
        for i, qt in enumerate(tensors[1:], start=1):
            _check_same_device("FloatQuantTensor.cat", **{"tensors[0]": first, f"tensors[{i}]": qt})
            first.check_scaling_factors_same(qt)
            first.check_zero_points_same(qt)
            first.check_bit_width_same(qt)
            first.check_exponent_bias(qt)
            first.check_inf_nan_same(qt)
            first.check_saturating_same(qt)
            first.check_sign_same(qt)
        output_value = torch.cat([qt.value for qt in tensors], dim=dim)
        output_training = any(qt.training for qt in tensors)
        if output_training:
            # Training: scales and zero points may still differ; take their mean (left-to-right
            # sum, as Brevitas, which averages the checked-equal widths and bias too).
            count = len(tensors)
            meta = {n: sum(getattr(qt, n) for qt in tensors) / count for n in _MERGED_METADATA}
        else:
            meta = {name: getattr(first, name) for name in _MERGED_METADATA}
        return FloatQuantTensor(
            value=output_value,
            saturating=first.saturating,
            inf_values=first.inf_values,
            nan_values=first.nan_values,
            signed=first.signed,
            training=output_training,
            **meta,
        )

    # ---- arithmetic (https://docs.python.org/3/reference/datamodel.html#emulating-numeric-types)
    # Brevitas 0.12 derives no output grid for minifloat add, mul or div: plain tensors.

    def __add__(self, other: Any) -> Tensor:
        return self.value + _unpack_quant_tensor(other)

    def __sub__(self, other: Any) -> Tensor:
        # Brevitas computes self + (-other), which needs other valid and signed; the difference
        # of the values needs neither (and equals it on the grid).
        return self.value - _unpack_quant_tensor(other)

    def __rsub__(self, other: Any) -> Tensor:
        return _unpack_quant_tensor(other) - self.value

    def __mul__(self, other: Any) -> Tensor:
        return self.value * _unpack_quant_tensor(other)

    def __rmul__(self, other: Any) -> Tensor:
        # Defined here because tuple.__rmul__ (repetition) comes first in the MRO.
        return _unpack_quant_tensor(other) * self.value

    def __truediv__(self, other: Any) -> Tensor:
        return self.value / _unpack_quant_tensor(other)

    def __rtruediv__(self, other: Any) -> Tensor:
        return _unpack_quant_tensor(other) / self.value

    def __neg__(self) -> "FloatQuantTensor":
        """-value on the mirrored grid. An unsigned tensor becomes signed (same exponent and
        mantissa; Brevitas 0.12 raised NotImplementedError there)."""
        # Brevitas computes (-minifloat - zero_point) * scale; the zero point plays no part in
        # the minifloat view, and with the zero point 0 this gives the same bits.
        neg_value = (-self.minifloat(float_datatype=True) * self.scale).type(self.scale.dtype)
        return self.set(value=neg_value, signed_t=_TRUE_FLAG if not self.signed else self.signed_t)

    def __abs__(self) -> "FloatQuantTensor":
        """|value| as an unsigned tensor; unsigned tensors are returned as they are."""
        if not self.signed:
            return self
        # Brevitas computes (|minifloat| - zero_point) * scale; same bits with the zero point 0.
        abs_value = (torch.abs(self.minifloat(float_datatype=True)) * self.scale).type(
            self.scale.dtype
        )
        return self.set(value=abs_value, signed_t=_FALSE_FLAG)

    def __pos__(self) -> "FloatQuantTensor":
        return self

    def __str__(self) -> str:
        return (
            f"FloatQuantTensor(value={self.value}, scale={self.scale}, "
            f"zero_point={self.zero_point}, exponent_bit_width={self.exponent_bit_width}, "
            f"mantissa_bit_width={self.mantissa_bit_width}, exponent_bias={self.exponent_bias}, "
            f"saturating_t={self.saturating_t}, inf_values={self.inf_values}, "
            f"nan_values={self.nan_values}, signed_t={self.signed_t}, "
            f"training_t={self.training_t})"
        )
