"""Restrictions on the values a learned or computed scale may take.

A restrict-value block is used in two halves by the scaling blocks: its ``restrict_init_*``
helpers move an initial value into the block's domain once (e.g. log2 for power-of-two scales),
and its forward maps a value of that domain back to a scale (e.g. 2 ** round(x)). The private
``_RestrictClampValue`` / ``_ClampValue`` / ``_AbsValue`` wrappers add the optional lower bound
(``scaling_min_val``) and the absolute value that scales go through afterwards."""

import math
import numbers
from typing import List, Optional, Tuple

import torch
from torch import Tensor
from torch.nn import Module

from brevitas_cpp import jit
from brevitas_cpp.core._checks import checked_module
from brevitas_cpp.core.function_wrapper import (
    Abs,
    Identity,
    InplaceLogTwo,
    LogTwo,
    PowerOfTwo,
    RoundSte,
    ScalarSignedClampMinSte,
)
from brevitas_cpp.core.utils import SkipsIdentities
from brevitas_cpp.inject.enum import FloatToIntImplType, RestrictValueType

__all__ = [
    "FloatRestrictValue",
    "FloatToIntImplType",
    "IntRestrictValue",
    "LogFloatRestrictValue",
    "PowerOfTwoRestrictValue",
    "QuantRestrictValue",
    "RestrictValueType",
    "_AbsValue",
    "_ClampValue",
    "_RestrictClampValue",
    "_RestrictValue",
]


def _checked_min_val(owner: str, scaling_min_val) -> Optional[float]:
    """scaling_min_val as a float (None stays None); NaN/inf or non-numbers are rejected here
    rather than surfacing later as a NaN scale."""
    if scaling_min_val is None:
        return None
    if isinstance(scaling_min_val, Tensor) and scaling_min_val.numel() == 1:
        scaling_min_val = scaling_min_val.item()
    if isinstance(scaling_min_val, bool) or not isinstance(scaling_min_val, numbers.Real):
        raise TypeError(
            f"{owner}: scaling_min_val must be a real number or None, got {scaling_min_val!r}"
        )
    value = float(scaling_min_val)
    if not math.isfinite(value):
        raise ValueError(f"{owner}: scaling_min_val must be finite, got {scaling_min_val!r}")
    return value


def _clamp_min_module(min_val: Optional[float]) -> Module:
    # A bound of 0 (or none) is the identity: a zero bound would only zero the gradient at 0.
    if min_val is not None and min_val != 0.0:
        return ScalarSignedClampMinSte(min_val)
    return Identity()


def _restrict_impl_or_identity(owner: str, restrict_value_impl: Optional[Module]) -> Module:
    # No restriction given: the identity.
    if restrict_value_impl is None:
        return Identity()
    return checked_module(owner, "restrict_value_impl", restrict_value_impl)


def _log2_float(owner: str, x: float) -> float:
    # math.log2's own error ("math domain error") does not say which block or value.
    if not x > 0:
        raise ValueError(
            f"{owner}: restrict_init_float needs a positive value (log2 domain), got {x!r}"
        )
    return math.log2(x)


class _LinearDomainInit:
    """restrict_init_* of a restriction whose values are scales as they are (no change of
    domain): initial values pass through, and there is nothing to apply to statistics."""

    def restrict_init_float(self, x: float) -> float:
        return x

    def restrict_init_tensor(self, x: Tensor) -> Tensor:
        return x

    def restrict_init_module(self) -> Module:
        return Identity()

    def restrict_init_inplace_module(self) -> Module:
        return Identity()


class _Log2DomainInit:
    """restrict_init_* of a restriction whose values live in the log2 domain (the forward maps
    them back with 2 ** x): initial values and statistics are taken to log2."""

    def restrict_init_float(self, x: float) -> float:
        return _log2_float(type(self).__name__, x)

    def restrict_init_tensor(self, x: Tensor) -> Tensor:
        return torch.log2(x)

    def restrict_init_module(self) -> Module:
        return LogTwo()

    def restrict_init_inplace_module(self) -> Module:
        return InplaceLogTwo()


class _SkipsRestrictIdentities(SkipsIdentities):
    """Identity and FloatRestrictValue (both return x) are skipped; IDENTITY_TYPES is set once
    FloatRestrictValue is defined, below."""


class _RestrictClampValue(_SkipsRestrictIdentities, jit.ScriptModule):
    """restrict_value_impl(x), then |x| >= scaling_min_val (sign kept), then |x| when unsigned."""

    IDENTITY_SLOTS = (
        ("restrict_value_impl", "restrict_is_identity"),
        ("clamp_min_ste", "clamp_is_identity"),
        ("apply_abs", "abs_is_identity"),
    )
    __constants__ = ["restrict_is_identity", "clamp_is_identity", "abs_is_identity"]

    def __init__(
        self,
        scaling_min_val: Optional[float] = None,
        restrict_value_impl: Optional[Module] = None,
        is_unsigned: bool = True,
    ) -> None:
        super().__init__()
        min_val = _checked_min_val(type(self).__name__, scaling_min_val)
        self.clamp_min_ste = _clamp_min_module(min_val)
        self.restrict_value_impl = _restrict_impl_or_identity(
            type(self).__name__, restrict_value_impl
        )
        # bool(): injection may hand over a truthy object (e.g. a stats op's is_scale_unsigned).
        self.apply_abs = Abs() if bool(is_unsigned) else Identity()
        self.replan()

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        if not self.restrict_is_identity:
            x = self.restrict_value_impl(x)
        if not self.clamp_is_identity:
            x = self.clamp_min_ste(x)
        if not self.abs_is_identity:
            x = self.apply_abs(x)
        return x


class _RestrictValue(_SkipsRestrictIdentities, jit.ScriptModule):
    """restrict_value_impl(x), or x when no restriction is given."""

    IDENTITY_SLOTS = (("restrict_value_impl", "restrict_is_identity"),)
    __constants__ = ["restrict_is_identity"]

    def __init__(self, restrict_value_impl: Optional[Module]) -> None:
        super().__init__()
        self.restrict_value_impl = _restrict_impl_or_identity(
            type(self).__name__, restrict_value_impl
        )
        self.replan()

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        if self.restrict_is_identity:
            return x
        return self.restrict_value_impl(x)


class _ClampValue(_SkipsRestrictIdentities, jit.ScriptModule):
    """|x| >= scaling_min_val with x's sign kept (straight-through); identity without a bound."""

    IDENTITY_SLOTS = (("clamp_min_ste", "clamp_is_identity"),)
    __constants__ = ["clamp_is_identity"]

    def __init__(self, scaling_min_val: Optional[float]) -> None:
        super().__init__()
        min_val = _checked_min_val(type(self).__name__, scaling_min_val)
        self.clamp_min_ste = _clamp_min_module(min_val)
        self.min_val = min_val
        self.replan()

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        if self.clamp_is_identity:
            return x
        return self.clamp_min_ste(x)


class _AbsValue(_SkipsRestrictIdentities, jit.ScriptModule):
    """|x| when is_unsigned, x otherwise."""

    IDENTITY_SLOTS = (("apply_abs", "abs_is_identity"),)
    __constants__ = ["abs_is_identity"]

    def __init__(self, is_unsigned: bool = True) -> None:
        super().__init__()
        self.apply_abs = Abs() if bool(is_unsigned) else Identity()
        self.replan()

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        if self.abs_is_identity:
            return x
        return self.apply_abs(x)


class FloatRestrictValue(_LinearDomainInit, jit.ScriptModule):
    """No restriction: values are used as they are, in the linear domain."""

    def __init__(self) -> None:
        super().__init__()

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        return x


_SkipsRestrictIdentities.IDENTITY_TYPES = (Identity, FloatRestrictValue)


class LogFloatRestrictValue(_Log2DomainInit, jit.ScriptModule):
    """Values live in the log2 domain and are mapped back with 2 ** x (positive scales)."""

    def __init__(self) -> None:
        super().__init__()
        self.power_of_two: Module = PowerOfTwo()

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        return self.power_of_two(x)


class IntRestrictValue(_LinearDomainInit, jit.ScriptModule):
    """Values are made integers by restrict_value_float_to_int_impl (round by default)."""

    # The default instance is stateless, so sharing it between instances (as Brevitas) is safe.
    def __init__(self, restrict_value_float_to_int_impl: Module = RoundSte()) -> None:
        super().__init__()
        self.float_to_int_impl = checked_module(
            type(self).__name__,
            "restrict_value_float_to_int_impl",
            restrict_value_float_to_int_impl,
        )

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        return self.float_to_int_impl(x)


class PowerOfTwoRestrictValue(_Log2DomainInit, jit.ScriptModule):
    """Values live in the log2 domain, are made integers there, then mapped back: 2 ** int(x)."""

    def __init__(self, restrict_value_float_to_int_impl: Module = RoundSte()) -> None:
        super().__init__()
        self.float_to_int_impl = checked_module(
            type(self).__name__,
            "restrict_value_float_to_int_impl",
            restrict_value_float_to_int_impl,
        )
        self.power_of_two: Module = PowerOfTwo()

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        x = self.float_to_int_impl(x)
        return self.power_of_two(x)


class QuantRestrictValue(_LinearDomainInit, jit.ScriptModule):
    """Values are quantized by a whole quantizer, ``restrict_value_float_to_int_impl``, whose
    output tuple's value is kept (a scale quantized to a grid of its own: Brevitas's quantized
    scales); ``scale_dequantized_shape``, when given, views it back to the scale's shape
    (groupwise quantization). Values stay in the linear domain.

    Brevitas's restrict_init_float and restrict_init_tensor return an Identity module instead
    of the value, which no scaling block can use; here they return the value, as the other
    linear-domain restrictions do."""

    def __init__(
        self,
        restrict_value_float_to_int_impl: Module,
        scaling_shape: Tuple[int, ...],
        scale_dequantized_shape: Optional[Tuple[int, ...]],
    ) -> None:
        super().__init__()
        self.float_to_int_impl = checked_module(
            type(self).__name__,
            "restrict_value_float_to_int_impl",
            restrict_value_float_to_int_impl,
        )
        self.scaling_shape = scaling_shape
        # A list: TorchScript has no variable-length tuple type.
        self.scale_dequantized_shape = jit.Attribute(
            None if scale_dequantized_shape is None else list(scale_dequantized_shape),
            Optional[List[int]],
        )

    def retrocompatibility_op(self, x: Tensor) -> Module:
        return Identity()

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        out = self.float_to_int_impl(x)[0]
        shape = self.scale_dequantized_shape
        if shape is not None:  # back to the dequantized scale's shape (groupwise)
            out = out.view(shape)
        return out
