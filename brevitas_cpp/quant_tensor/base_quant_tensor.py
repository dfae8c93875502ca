"""The QuantTensor base: a named tuple of a dequantized value and the metadata that makes it
an integer tensor (scale, zero point, bit width, signedness, training flag).

`QuantTensor` holds the behaviour shared by every quantized tensor type (copying the tuple
with each tensor field transformed, shape queries); `IntMixin` adds the integer view:
`is_valid`, `int()`, the compatibility checks used by the arithmetic, and the shape methods
that keep per-channel metadata aligned with the value. `FloatMixin` is the same for minifloat
tensors: `is_valid`, `minifloat()`, `int()` (the significands) and their checks."""

from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor

from brevitas_cpp.function import round_ste
from brevitas_cpp.utils.torch_utils import float_internal_scale

__all__ = [
    "FloatMixin",
    "FloatQuantTensorBase",
    "GroupwisIntQuantTensorBase",
    "GroupwiseFloatQuantTensorBase",
    "GroupwiseIntQuantTensorBase",
    "IntMixin",
    "IntQuantTensorBase",
    "QuantTensor",
    "TOLERANCE",
]

# How far value / scale + zero_point may sit from an integer and still count as one, per dtype.
# float64 is not in Brevitas 0.12's table (is_valid raises KeyError there); it gets float32's.
TOLERANCE: Dict[torch.dtype, float] = {
    torch.float64: 2e-1,
    torch.float32: 2e-1,
    torch.float16: 0.5,
    torch.bfloat16: 0.5,
}

# Fields holding flags: they stay bool tensors when the tuple is cast to another dtype.
_FLAG_FIELDS = ("signed_t", "training_t", "saturating_t")


class QuantTensor:
    """Behaviour shared by quantized tensors. Subclasses are NamedTuples with a `value` field;
    everything here works field by field, so it needs nothing else."""

    def _map_tensor_fields(self, fn: Callable[[Tensor], Tensor], skip_flags: bool = False) -> Any:
        """A copy of self with fn applied to each tensor field (flags left alone if skip_flags)."""
        fields = []
        for name in self._fields:
            field = getattr(self, name)
            if isinstance(field, Tensor) and not (skip_flags and name in _FLAG_FIELDS):
                field = fn(field)
            fields.append(field)
        return self._from_fields(fields)

    @classmethod
    def _from_fields(cls, fields: List[Any]) -> Any:
        """A new tuple of these fields, without the constructor's conversions (the fields are
        tensors already, or None in a metadata-only copy). Subclasses call their NamedTuple
        base's __new__: torch.compile loses the items of tuples built by NamedTuple._make."""
        return cls._make(fields)

    def detach_(self) -> None:
        for name in self._fields:
            field = getattr(self, name)
            if isinstance(field, Tensor):
                field.detach_()

    def detach(self) -> Any:
        return self._map_tensor_fields(lambda t: t.detach())

    def contiguous(self) -> Any:
        return self._map_tensor_fields(lambda t: t.contiguous())

    def to(self, *args: Any, **kwargs: Any) -> Any:
        """Tensor.to on every field except the bool flags (signed_t, training_t, saturating_t),
        which stay host side bools: casting them would turn `signed` into 1.0, and on another
        device reading them with .item() would synchronise (or fail, on 'meta')."""
        return self._map_tensor_fields(lambda t: t.to(*args, **kwargs), skip_flags=True)

    def cuda(self, *args: Any, **kwargs: Any) -> Any:
        """Tensor.cuda on every field except the flags (see `to`)."""
        return self._map_tensor_fields(lambda t: t.cuda(*args, **kwargs), skip_flags=True)

    def cpu(self, *args: Any, **kwargs: Any) -> Any:
        return self._map_tensor_fields(lambda t: t.cpu(*args, **kwargs))

    def set(self, **kwargs: Any) -> Any:
        """A copy with the given fields replaced (no conversion or checks, like NamedTuple._replace)."""
        unknown = set(kwargs) - set(self._fields)
        if unknown:
            raise ValueError(
                f"{type(self).__name__}.set: unknown field(s) {sorted(unknown)}; accepted: "
                f"{list(self._fields)}"
            )
        return self._from_fields([kwargs.get(name, getattr(self, name)) for name in self._fields])

    @property
    def shape(self) -> torch.Size:
        return self.value.shape

    @property
    def ndim(self) -> int:
        return self.value.dim()

    @property
    def dtype(self) -> torch.dtype:
        return self.value.dtype

    def dim(self) -> int:
        return self.value.dim()

    def size(self, *args: Any, **kwargs: Any) -> Any:
        return self.value.size(*args, **kwargs)

    def add(self, other: Any) -> Any:
        return self + other

    def __radd__(self, other: Any) -> Any:
        return self.__add__(other)

    def __rmul__(self, other: Any) -> Any:
        return self.__mul__(other)

    def __sub__(self, other: Any) -> Any:
        return self.__add__(-other)

    def __pos__(self) -> Any:
        return self

    @staticmethod
    def is_zero_zero_point(tensor: Any) -> Tensor:
        return (tensor.zero_point == 0.0).all()


class IntQuantTensorBase(NamedTuple):
    """The fields of an integer QuantTensor, in Brevitas's order."""

    value: Tensor
    scale: Tensor
    zero_point: Tensor
    bit_width: Tensor
    signed_t: Tensor
    training_t: Tensor


class FloatQuantTensorBase(NamedTuple):
    """The fields of a minifloat QuantTensor, in Brevitas's order. inf_values and nan_values are
    the mantissa bit strings reserved for inf and NaN at the top exponent (None for none)."""

    value: Tensor
    scale: Tensor
    zero_point: Tensor
    exponent_bit_width: Tensor
    mantissa_bit_width: Tensor
    exponent_bias: Tensor
    saturating_t: Tensor
    inf_values: Optional[Sequence[str]]
    nan_values: Optional[Sequence[str]]
    signed_t: Tensor
    training_t: Tensor


class GroupwiseIntQuantTensorBase(NamedTuple):
    """The fields of a groupwise integer QuantTensor, in Brevitas's order."""

    value_: Tensor
    scale_: Tensor
    zero_point_: Tensor
    group_size: int
    group_dim: int
    bit_width: Tensor
    signed_t: Tensor
    training_t: Tensor
    dequant_shape: Optional[Tuple[int, ...]] = None


class GroupwiseFloatQuantTensorBase(NamedTuple):
    """The fields of a groupwise minifloat QuantTensor, in Brevitas's order."""

    value_: Tensor
    scale_: Tensor
    zero_point_: Tensor
    group_size: int
    group_dim: int
    exponent_bit_width: Tensor
    mantissa_bit_width: Tensor
    exponent_bias: Tensor
    saturating_t: Tensor
    inf_values: Optional[Sequence[str]]
    nan_values: Optional[Sequence[str]]
    signed_t: Tensor
    training_t: Tensor
    dequant_shape: Optional[Tuple[int, ...]] = None


# Brevitas's name (sic).
GroupwisIntQuantTensorBase = GroupwiseIntQuantTensorBase


def _describe(t: Tensor) -> str:
    """A short rendering of a metadata tensor for error messages."""
    return str(t.detach().cpu().tolist()) if t.numel() <= 8 else f"tensor of shape {tuple(t.shape)}"


class _MetadataMixin:
    """What integer and minifloat QuantTensors share: the eval-mode checks of scale, zero point
    and sign, and the shape methods, which move each metadata tensor named in _METADATA that has
    the value's rank along with it (a per-channel scale of shape (1, C, 1, 1) follows its channel
    dim; lower-rank metadata broadcasts as it is)."""

    _METADATA: Tuple[str, ...] = ("scale", "zero_point")

    def check_scaling_factors_same(self, other: Any) -> bool:
        """In eval, both operands must share a scale (in training the output scale averages them)."""
        if self.training:
            return True
        if not torch.allclose(self.scale, other.scale):
            raise RuntimeError(
                f"{type(self).__name__}: scaling factors are different in eval mode: "
                f"{_describe(self.scale)} vs {_describe(other.scale)}; requantize the operands "
                f"with a shared quantizer so they have the same scale"
            )
        return True

    def check_zero_points_same(self, other: Any) -> bool:
        if self.training:
            return True
        if not torch.allclose(self.zero_point, other.zero_point):
            raise RuntimeError(
                f"{type(self).__name__}: zero points are different in eval mode: "
                f"{_describe(self.zero_point)} vs {_describe(other.zero_point)}"
            )
        return True

    def check_sign_same(self, other: Any) -> bool:
        if not self.signed == other.signed:
            raise RuntimeError(
                f"{type(self).__name__}: signs are different: signed={self.signed} vs "
                f"signed={other.signed}"
            )
        return True

    def view(self, *args: Any, **kwargs: Any) -> Any:
        return self.set(value=self.value.view(*args, **kwargs))

    def reshape(self, *args: Any, **kwargs: Any) -> Any:
        return self.set(value=self.value.reshape(*args, **kwargs))

    def flatten(self, *args: Any, **kwargs: Any) -> Any:
        return self.set(value=self.value.flatten(*args, **kwargs))

    def transpose(self, *args: Any, **kwargs: Any) -> Any:
        return self._rearrange_dims(lambda t: t.transpose(*args, **kwargs))

    def permute(self, *args: Any, **kwargs: Any) -> Any:
        return self._rearrange_dims(lambda t: t.permute(*args, **kwargs))

    def _rearrange_dims(self, fn: Callable[[Tensor], Tensor]) -> Any:
        value = fn(self.value)
        meta = {}
        for name in self._METADATA:
            field = getattr(self, name)
            meta[name] = fn(field) if field.dim() == value.dim() else field
        return self.set(value=value, **meta)


class IntMixin(_MetadataMixin):
    """Integer view and checks of a QuantTensor with scale, zero_point, bit_width and flags."""

    _METADATA = ("scale", "zero_point", "bit_width")

    @property
    def _pre_round_int_value(self) -> Tensor:
        """value / scale + zero_point, computed in float32 for bfloat16 (too coarse otherwise)."""
        value, scale, zero_point = self.value, self.scale, self.zero_point
        if scale.dtype == torch.bfloat16:
            value = value.type(torch.float32)
            scale = scale.type(torch.float32)
            zero_point = zero_point.type(torch.float32)
        return value / scale + zero_point

    @property
    def is_valid(self) -> bool:
        """Whether value / scale + zero_point is (within TOLERANCE) an integer of the range.

        The range is the full one of bit_width (narrow range is not known here); below 2 bits the
        tensor must hold exactly two integer levels whose sign matches `signed`."""
        with torch.no_grad():
            pre_round = self._pre_round_int_value
            rounded = torch.round(pre_round)
            dtype = self.value.dtype
            if dtype not in TOLERANCE:
                raise TypeError(
                    f"{type(self).__name__}.is_valid: value dtype {dtype} is not a floating point "
                    f"dtype; accepted: {sorted(str(d) for d in TOLERANCE)}"
                )
            is_int = torch.max(torch.abs(pre_round - rounded)) < TOLERANCE[dtype]
            if self.bit_width >= 2:
                if self.signed:
                    in_upper = (2.0 ** (self.bit_width - 1) - 1 >= rounded).all()
                    in_lower = (-(2.0 ** (self.bit_width - 1)) <= rounded).all()
                else:
                    in_upper = (2.0**self.bit_width - 1 >= rounded).all()
                    in_lower = (0.0 <= rounded).all()
                return bool((is_int & in_upper & in_lower).item())
            levels = rounded.unique(sorted=False)
            is_binary = levels.numel() == 2
            has_negative = bool((levels < 0.0).any().item())
            return bool(is_int.item()) and is_binary and has_negative == self.signed

    def int(self, float_datatype: bool = False) -> Tensor:
        """The integers value / scale + zero_point (rounded, straight-through gradient).

        With float_datatype the scale's dtype up to 8 bits (exact there even in half precision)
        and float32 above; otherwise int8/uint8 up to 8 bits, int32 above."""
        if not self.is_valid:
            raise RuntimeError(
                f"{type(self).__name__}.int(): value / scale + zero_point is not an integer tensor "
                f"within the range of bit_width={_describe(self.bit_width)}, "
                f"signed={self.signed} (is_valid is False)"
            )
        int_value = round_ste(self._pre_round_int_value)
        fits_8_bits = bool(self.bit_width <= 8.0)
        if float_datatype:
            return int_value.type(self.scale.dtype if fits_8_bits else torch.float32)
        if fits_8_bits:
            return int_value.to(torch.int8 if self.signed else torch.uint8)
        return int_value.to(torch.int32)

    def check_bit_width_same(self, other: Any) -> bool:
        if not torch.allclose(self.bit_width, other.bit_width):
            raise RuntimeError(
                f"{type(self).__name__}: bit widths are different: "
                f"{_describe(self.bit_width)} vs {_describe(other.bit_width)}"
            )
        return True


class FloatMixin(_MetadataMixin):
    """Minifloat view and checks of a QuantTensor with scale, zero_point, exponent and mantissa
    bit widths, exponent bias, inf/NaN codes and flags.

    value / scale is a minifloat: a significand integer times the grid spacing at its exponent,
    2 ** max(floor(log2|x|) - mantissa_bit_width, 1 - exponent_bias - mantissa_bit_width).
    As in Brevitas, the zero point plays no part in the minifloat view."""

    # Metadata tensors that must live on the value's device and follow its dims.
    _METADATA = ("scale", "zero_point", "exponent_bit_width", "mantissa_bit_width", "exponent_bias")

    def _scaled_and_grid_spacing(self) -> Tuple[Tensor, Tensor]:
        """value / scale and the minifloat grid spacing around each element; in float32 for
        bfloat16 (too coarse otherwise)."""
        value, scale = self.value, self.scale
        if scale.dtype == torch.bfloat16:
            value = value.type(torch.float32)
            scale = scale.type(torch.float32)
        scaled = value / scale
        # The subnormal spacing: the least exponent (1 - bias) less the mantissa bits.
        min_internal_scale = 1.0 - self.exponent_bias - self.mantissa_bit_width
        eps = torch.finfo(scale.dtype).tiny  # keeps log2 of zero finite
        spacing = float_internal_scale(scaled, self.mantissa_bit_width, min_internal_scale, eps)
        return scaled, spacing

    @property
    def _pre_round_float_value(self) -> Tensor:
        """value / scale in units of its minifloat grid spacing (integers on the grid)."""
        scaled, spacing = self._scaled_and_grid_spacing()
        return scaled / spacing

    @property
    def is_valid(self) -> bool:
        """Whether value / scale is (within TOLERANCE of the grid spacing) a minifloat of these
        exponent and mantissa widths. As in Brevitas, the range (max value, inf/NaN codes,
        saturation) is not checked."""
        dtype = self.value.dtype
        if dtype not in TOLERANCE:
            raise TypeError(
                f"{type(self).__name__}.is_valid: value dtype {dtype} is not a floating point "
                f"dtype; accepted: {sorted(str(d) for d in TOLERANCE)}"
            )
        with torch.no_grad():
            pre_round = self._pre_round_float_value
            max_abs_diff = torch.max(torch.abs(pre_round - torch.round(pre_round)))
            return bool((max_abs_diff < TOLERANCE[dtype]).item())

    def minifloat(self, float_datatype: bool = True) -> Tensor:
        """value / scale snapped to the minifloat grid, in the scale's dtype (no float8 dtype is
        returned, as in Brevitas: float_datatype must be True)."""
        if not float_datatype:
            raise ValueError(
                f"{type(self).__name__}.minifloat: float_datatype must be True (minifloats are "
                f"returned in the scale's dtype), got {float_datatype!r}"
            )
        if not self.is_valid:
            raise RuntimeError(
                f"{type(self).__name__}.minifloat(): value / scale is not on the minifloat grid "
                f"of exponent_bit_width={_describe(self.exponent_bit_width)}, "
                f"mantissa_bit_width={_describe(self.mantissa_bit_width)}, "
                f"exponent_bias={_describe(self.exponent_bias)} (is_valid is False)"
            )
        scaled, spacing = self._scaled_and_grid_spacing()
        return (torch.round(scaled / spacing) * spacing).type(self.scale.dtype)

    @property
    def device(self) -> torch.device:
        """The value's device; an error if a metadata tensor lives elsewhere."""
        value_device = self.value.device
        for name in self._METADATA:
            field_device = getattr(self, name).device
            if field_device != value_device:
                raise RuntimeError(
                    f"{type(self).__name__}: value and metadata are on different devices: value "
                    f"is on {value_device} but {name} is on {field_device}"
                )
        return value_device

    def check_bit_width_same(self, other: Any) -> bool:
        """Exponent and mantissa widths must both match (Brevitas 0.12 raised only when both
        differed, so e4m3 and e4m2 passed)."""
        for name in ("exponent_bit_width", "mantissa_bit_width"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if not torch.allclose(mine, theirs):
                raise RuntimeError(
                    f"{type(self).__name__}: bit widths are different: {name} "
                    f"{_describe(mine)} vs {_describe(theirs)}"
                )
        return True

    def check_exponent_bias(self, other: Any) -> bool:
        if not torch.allclose(self.exponent_bias, other.exponent_bias):
            raise RuntimeError(
                f"{type(self).__name__}: exponent biases are different: "
                f"{_describe(self.exponent_bias)} vs {_describe(other.exponent_bias)}"
            )
        return True

    def check_inf_nan_same(self, other: Any) -> bool:
        """The inf and the NaN codes must both match, None counting as no code (Brevitas 0.12
        raised only when both differed, and failed on None)."""
        for name in ("inf_values", "nan_values"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if set(mine or ()) != set(theirs or ()):
                raise RuntimeError(
                    f"{type(self).__name__}: floating point representations are different: "
                    f"{name} {mine!r} vs {theirs!r}"
                )
        return True

    def check_saturating_same(self, other: Any) -> bool:
        """Not checked by Brevitas 0.12, whose outputs silently took the first operand's flag."""
        if not self.saturating == other.saturating:
            raise RuntimeError(
                f"{type(self).__name__}: saturation is different: saturating={self.saturating} "
                f"vs saturating={other.saturating}"
            )
        return True

    # Last in the class: later annotations naming `int` would otherwise see this method.
    def int(self) -> Tensor:
        """The significand integers: value / scale in units of its grid spacing, rounded. Not
        checked for validity, and no gradient through the rounding (both as Brevitas)."""
        return torch.round(self._pre_round_float_value)


def _unpack_quant_tensor(input_data: Any) -> Any:
    """input_data with every QuantTensor replaced by its value, through tuples, lists and dicts."""
    if isinstance(input_data, Tensor):  # the common case first: layers call this on every call
        return input_data
    if isinstance(input_data, QuantTensor):
        return input_data.value
    if isinstance(input_data, tuple):
        return tuple(_unpack_quant_tensor(v) for v in input_data)
    if isinstance(input_data, list):
        return [_unpack_quant_tensor(v) for v in input_data]
    if isinstance(input_data, dict):
        return {k: _unpack_quant_tensor(v) for k, v in input_data.items()}
    return input_data
