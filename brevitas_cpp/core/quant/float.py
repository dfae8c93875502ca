"""Minifloat quantization (Brevitas's ``brevitas.core.quant.float``): x / scale rounded to the
grid of a format with exponent_bit_width exponent and mantissa_bit_width mantissa bits, clamped
by float_clamp_impl, times scale.

The stock composition (a rounding block the C++ ops know, FloatClamp over TensorClamp) runs as
one call to the fused ``float_quant`` op, which reproduces Brevitas's chain of elementwise steps
bit for bit; any other block takes that chain, written out here.
"""

from typing import Optional

import torch
from torch import Tensor
from torch.nn import Module

from brevitas_cpp import jit
from brevitas_cpp.core.function_wrapper import FloatClamp, RoundSte, TensorClamp
from brevitas_cpp.core.quant._checks import check_bool, check_module
from brevitas_cpp.core.quant.plan.operands import rounding_mode_of, scaled_operands_fit
from brevitas_cpp.core.replan import Replans
from brevitas_cpp.core.scaling import ConstScaling, FloatScaling
from brevitas_cpp.core.utils import StatelessBuffer
from brevitas_cpp.function.ops import compute_max_mantissa, max_float
from brevitas_cpp.function.quant import float_quant
from brevitas_cpp.utils.torch_utils import float_internal_scale

__all__ = ["FloatQuant"]

# Wider fields would leave float32's grid. A format without mantissa bits (E8M0, the MX shared
# scale: powers of two only) is valid; the fused op takes m >= 1 (csrc/ops/float_quant.h), so
# m = 0 runs the composition.
_EXPONENT_BITS = (1, 8)
_MANTISSA_BITS = (0, 23)
_FUSED_MIN_MANTISSA_BITS = 1


class FloatFormatError(ValueError, RuntimeError):
    """A minifloat format FloatQuant can not represent. Also a RuntimeError, the type Brevitas
    raises for these, so code written against it still catches it."""


def _check_width(owner: str, name: str, value: int, accepted: tuple) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{owner}: {name} must be an int, got {type(value).__name__} ({value!r})")
    low, high = accepted
    if not low <= value <= high:
        raise FloatFormatError(f"{owner}: {name} must be in [{low}, {high}], got {value}")


def _as_int(owner: str, name: str, value) -> int:
    """An integral setting given as an int, an integral float or a one-element tensor."""
    if isinstance(value, Tensor):
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{owner}: {name} must be an integer, got {value!r}")
    return value


class FloatQuant(Replans, jit.ScriptModule):
    """forward(x) -> (y, scale, zero_point, exponent_bit_width, mantissa_bit_width,
    exponent_bias, saturating, inf_values, nan_values), Brevitas's tuple, with

        scale = scaling_impl(x, float_scaling_impl(e, max_mantissa, bias))  # stat / max value
        y = float_clamp_impl(internal * float_to_int(view(x) / scale / internal)) * scale

    where internal = 2^max(floor(log2|x / scale|) - m, 1 - bias - m) is the grid spacing. The
    zero point is 0. With ``observer_only`` set, y is x itself (statistics are still collected)."""

    __constants__ = [
        "signed",
        "eps",
        "fused",
        "rounding_mode",
        "exponent_bits",
        "mantissa_bits",
        "bias_value",
        "clamp_max_value",
        "clamp_saturating",
        "clamp_has_inf",
        "clamp_has_nan",
        "threshold_is_constant",
    ]

    def __init__(
        self,
        bit_width: int,
        signed: bool,
        exponent_bit_width: int,
        mantissa_bit_width: int,
        exponent_bias: int,
        float_clamp_impl: Module,
        input_view_impl: Module,
        scaling_impl: Optional[Module] = None,
        float_scaling_impl: Optional[Module] = None,
        float_to_int_impl: Module = RoundSte(),  # stateless: one instance serves every quantizer
        device: Optional[torch.device] = None,
        dtype: Optional[torch.dtype] = None,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        check_bool(owner, "signed", signed)
        exponent_bit_width = _as_int(owner, "exponent_bit_width", exponent_bit_width)
        mantissa_bit_width = _as_int(owner, "mantissa_bit_width", mantissa_bit_width)
        bit_width = _as_int(owner, "bit_width", bit_width)
        # The format first, as Brevitas (a RuntimeError for e = 0, whatever the bias).
        _check_width(owner, "exponent_bit_width", exponent_bit_width, _EXPONENT_BITS)
        _check_width(owner, "mantissa_bit_width", mantissa_bit_width, _MANTISSA_BITS)
        if bit_width != exponent_bit_width + mantissa_bit_width + int(signed):
            raise FloatFormatError(
                f"{owner}: bit_width ({bit_width}) must be exponent_bit_width "
                f"({exponent_bit_width}) + mantissa_bit_width ({mantissa_bit_width}) + the sign "
                f"bit ({int(signed)})"
            )
        exponent_bias = _as_int(owner, "exponent_bias", exponent_bias)
        check_module(owner, "float_clamp_impl", float_clamp_impl)
        check_module(owner, "input_view_impl", input_view_impl)
        check_module(owner, "float_to_int_impl", float_to_int_impl)
        if dtype is None:
            dtype = torch.get_default_dtype()

        def constant(value: float) -> StatelessBuffer:
            return StatelessBuffer(torch.tensor(value, device=device, dtype=dtype))

        self.signed = signed
        self.bit_width = constant(float(bit_width))
        self.exponent_bit_width = constant(float(exponent_bit_width))
        self.mantissa_bit_width = constant(float(mantissa_bit_width))
        self.exponent_bias = constant(float(exponent_bias))
        self.fp_internal_scale_min = constant(float(1 - exponent_bias - mantissa_bit_width))
        self.pre_compute_max_mantissa = StatelessBuffer(
            compute_max_mantissa(torch.tensor(float(mantissa_bit_width))).to(device)
        )
        self.zero_point_impl = constant(0.0)
        self.input_view_impl = input_view_impl
        self.scaling_impl = scaling_impl if scaling_impl is not None else ConstScaling(1.0)
        self.float_scaling_impl = float_scaling_impl
        self.float_to_int_impl = float_to_int_impl
        self.float_clamp_impl = float_clamp_impl
        # log2(0) is avoided by adding the dtype's smallest normal number.
        self.eps = torch.finfo(dtype).tiny
        self.observer_only = jit.Attribute(False, bool)
        # The fused op's integer fields (TorchScript constants).
        self.exponent_bits = exponent_bit_width
        self.mantissa_bits = mantissa_bit_width
        self.bias_value = exponent_bias
        # The stock FloatScaling gives the same value on every call: computed once (its few
        # small ops otherwise run on every step).
        self.threshold_is_constant = type(float_scaling_impl) is FloatScaling
        self.constant_threshold = StatelessBuffer(
            self._threshold_of(float_scaling_impl)
            if self.threshold_is_constant
            else torch.ones((), device=device, dtype=dtype)
        )
        self.replan()

    def _threshold_of(self, float_scaling_impl: Module) -> Tensor:
        with torch.no_grad():
            return float_scaling_impl(
                self.exponent_bit_width(), self.pre_compute_max_mantissa(), self.exponent_bias()
            ).detach()

    def derive_plan(self) -> None:
        """Whether the fused op reproduces this composition (exact block types, as the integer
        quantizers decide), and the clamp's settings it then takes."""
        mode = rounding_mode_of(self.float_to_int_impl)
        clamp = self.float_clamp_impl
        stock_clamp = type(clamp) is FloatClamp and type(clamp.tensor_clamp_impl) is TensorClamp
        self.fused = (
            mode is not None
            and stock_clamp
            and clamp.signed == self.signed
            and self.mantissa_bits >= _FUSED_MIN_MANTISSA_BITS
        )
        self.rounding_mode = mode if mode is not None else "round"
        max_value, saturating, has_inf, has_nan = 1.0, True, False, False
        if stock_clamp:
            max_value = float(
                max_float(
                    torch.tensor(float(self.exponent_bits)),
                    compute_max_mantissa(torch.tensor(float(self.mantissa_bits))),
                    torch.tensor(float(self.bias_value)),
                )
            )
            if clamp.max_available_float is not None:
                max_value = min(max_value, float(clamp.max_available_float()))
            saturating = clamp.saturating
            has_inf, has_nan = clamp.inf_values is not None, clamp.nan_values is not None
        self.clamp_max_value = max_value
        self.clamp_saturating = saturating
        self.clamp_has_inf = has_inf
        self.clamp_has_nan = has_nan

    @jit.script_method
    def quantize(self, x: Tensor, scale: Tensor):
        """(internal * float_to_int(view(x) / scale / internal), scale): on the minifloat grid,
        not yet clamped or dequantized (Brevitas's step)."""
        x = self.input_view_impl(x)
        scaled_x = x / scale
        internal_scale = float_internal_scale(
            scaled_x, self.mantissa_bit_width(), self.fp_internal_scale_min(), self.eps
        )
        return internal_scale * self.float_to_int_impl(scaled_x / internal_scale), scale

    @jit.script_method
    def dequantize(self, y: Tensor, scale: Tensor) -> Tensor:
        return y * scale

    @jit.script_method
    def _threshold(self) -> Optional[Tensor]:
        float_scaling_impl = self.float_scaling_impl
        if float_scaling_impl is None:
            return None
        if self.threshold_is_constant:
            return self.constant_threshold()
        return float_scaling_impl(
            self.exponent_bit_width(), self.pre_compute_max_mantissa(), self.exponent_bias()
        )

    @jit.script_method
    def forward(self, x: Tensor):
        scale = self.scaling_impl(x, self._threshold())
        saturating = self.float_clamp_impl.saturating
        inf_values = self.float_clamp_impl.inf_values
        nan_values = self.float_clamp_impl.nan_values
        if self.observer_only:
            y = x
        else:
            viewed = self.input_view_impl(x)
            if self.fused and scaled_operands_fit(viewed, scale):
                y = float_quant(
                    viewed,
                    scale,
                    self.exponent_bits,
                    self.mantissa_bits,
                    self.bias_value,
                    self.clamp_max_value,
                    self.signed,
                    self.clamp_saturating,
                    self.clamp_has_inf,
                    self.clamp_has_nan,
                    self.rounding_mode,
                )
            else:
                y, scale = self.quantize(x, scale)
                y, saturating, inf_values, nan_values = self.float_clamp_impl(
                    y,
                    self.exponent_bit_width(),
                    self.pre_compute_max_mantissa(),
                    self.exponent_bias(),
                )
                y = self.dequantize(y, scale)
        return (
            y,
            scale,
            self.zero_point_impl(),
            self.exponent_bit_width(),
            self.mantissa_bit_width(),
            self.exponent_bias(),
            saturating,
            inf_values,
            nan_values,
        )
