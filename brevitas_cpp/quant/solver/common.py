"""Solver mixins shared by weight, activation, bias and truncation quantizers.

A solver is an injector mixin: its ``@value`` functions read a quantizer's enum settings
(``quant_type``, ``restrict_scaling_type``, ``scaling_stats_op``, ...) and return the core block
class to build, a plain setting, or a ``this.<name>`` reference. A quantizer that declares the
block itself (``scaling_impl = ConstScaling``) shadows the solver's function.

Errors name the quantizer: a ``@value`` may ask for ``__self__``, which the injector resolves
to the quantizer class being built.
"""

from typing import Any, Optional, Type

import torch
from torch import Tensor

from brevitas_cpp.core.bit_width import BitWidthConst, BitWidthParameter, BitWidthStatefulConst
from brevitas_cpp.core.function_wrapper import (
    ROUNDING_MODE_OF_IMPL,
    StatsInputViewShapeImpl,
    StochasticRoundSte,
)
from brevitas_cpp.core.function_wrapper.learned_round import (
    LearnedRoundHardSigmoid,
    LearnedRoundIdentity,
    LearnedRoundSigmoid,
    LearnedRoundSte,
)
from brevitas_cpp.core.quant import IntQuant, RescalingIntQuant, TernaryQuant
from brevitas_cpp.core.restrict_val import (
    FloatRestrictValue,
    LogFloatRestrictValue,
    PowerOfTwoRestrictValue,
)
from brevitas_cpp.core.scaling import SCALING_STATS_REDUCE_DIM, IntScaling, PowerOfTwoIntScaling
from brevitas_cpp.core.stats import (
    AbsAve,
    AbsMax,
    AbsMaxAve,
    AbsMinMax,
    AbsPercentile,
    MeanSigmaStd,
    PercentileInterval,
)
from brevitas_cpp.inject.enum import (
    AutoName,
    BitWidthImplType,
    FloatToIntImplType,
    LearnedRoundImplType,
    QuantType,
    RestrictValueType,
    ScalingImplType,
    ScalingPerOutputType,
    StatsOp,
)
from brevitas_cpp.inject.injector import ExtendedInjector, value

__all__ = [
    "QuantizerSolveError",
    "quantizer_name",
    "group_reduce_dim",
    "require_group_dim",
    "require_signed",
    "solve_scaled_tensor_quant",
    "to_enum",
    "solve_bit_width_impl_from_enum",
    "solve_restrict_value_impl_from_enum",
    "solve_float_to_int_impl_from_enum",
    "SolveAffineRescalingFromEnum",
    "SolveIntQuantFromEnum",
    "SolveTensorQuantFloatToIntImplFromEnum",
    "SolveIntScalingImplFromEnum",
    "SolveRestrictScalingImplFromEnum",
    "SolveScalingStatsOpFromEnum",
    "SolveBitWidthImplFromEnum",
    "SolveStatsReduceDimFromEnum",
    "SolveScalingStatsInputViewShapeImplFromEnum",
    "SolveDtypeDeviceFromTrackedParameterList",
    "SolveScaleSignedness",
]


class QuantizerSolveError(ValueError, RuntimeError):
    """A quantizer's settings can not be turned into core blocks. Also a RuntimeError, the
    type Brevitas raises for unrecognised settings, so code written against it still catches it."""


def quantizer_name(quantizer: Any) -> str:
    """The name errors use for the quantizer being built (``__self__`` in a ``@value``)."""
    return getattr(quantizer, "__name__", None) or "quantizer"


def _accepted(enum_cls: Type[AutoName]) -> str:
    return ", ".join(member.value for member in enum_cls)


def to_enum(enum_cls: Type[AutoName], setting: Any, attr: str, quantizer: Any = None) -> AutoName:
    """``setting`` (a member or a case-insensitive name) as a member of ``enum_cls``; an unknown
    name is an error naming the quantizer, the attribute and the accepted names."""
    if isinstance(setting, enum_cls):
        return setting
    try:
        return enum_cls(setting)
    except ValueError:
        raise QuantizerSolveError(
            f"{quantizer_name(quantizer)}: {attr}={setting!r} is not a valid {enum_cls.__name__}; "
            f"accepted (case-insensitive): {_accepted(enum_cls)}"
        ) from None


def unsupported(quantizer: Any, attr: str, setting: Any, why: str) -> QuantizerSolveError:
    """Error for a valid enum value that this kind of quantizer can not use."""
    return QuantizerSolveError(f"{quantizer_name(quantizer)}: {attr}={setting!s} {why}")


def require_group_dim(group_dim: Any, quantizer: Any) -> int:
    """The group_dim of a per-group quantizer, or an error saying how to give it."""
    if group_dim is None:
        raise QuantizerSolveError(
            f"{quantizer_name(quantizer)}: scaling_per_output_type=GROUP needs group_size (the "
            f"elements sharing a scale, e.g. 32) and group_dim (the dimension they run along); "
            f"group_dim is inferred from the layer, so give group_size, and group_dim where no "
            f"layer says it (e.g. .let(group_size=32, group_dim=-1))"
        )
    if isinstance(group_dim, bool) or not isinstance(group_dim, int):
        raise QuantizerSolveError(
            f"{quantizer_name(quantizer)}: group_dim must be an int (a dimension), got "
            f"{group_dim!r}"
        )
    return group_dim


def require_signed(quant_type: Any, signed: Any, quantizer: Any) -> None:
    """Binary and ternary values are {-s, s} and {-s, 0, s}: there is no unsigned variant."""
    if signed is not None and not signed:
        raise unsupported(
            quantizer,
            "quant_type",
            quant_type,
            f"is always signed, but the quantizer sets signed={signed!r}; use "
            f"an INT quantizer (e.g. with UintQuant) for unsigned values",
        )


def solve_scaled_tensor_quant(
    quant_type: Any, signed: Any, quantizer: Any, binary_quant: type
) -> Optional[type]:
    """The tensor quantizer of a weight or activation quantizer: none for FP, RescalingIntQuant
    for INT, TernaryQuant or binary_quant (which differ between the two) for the signed-only
    TERNARY and BINARY."""
    kind = to_enum(QuantType, quant_type, "quant_type", quantizer)
    if kind == QuantType.FP:
        return None
    if kind == QuantType.INT:
        return RescalingIntQuant
    require_signed(kind, signed, quantizer)
    return TernaryQuant if kind == QuantType.TERNARY else binary_quant


def _check_bit_width(bit_width: Any, quantizer: Any) -> None:
    # bool is an int subclass, but bit_width=True is a mistake, not 1 bit.
    if isinstance(bit_width, bool) or not isinstance(bit_width, int):
        raise QuantizerSolveError(
            f"{quantizer_name(quantizer)}: bit_width must be an int >= 1, got {bit_width!r} "
            f"({type(bit_width).__name__})"
        )
    if bit_width < 1:
        raise QuantizerSolveError(
            f"{quantizer_name(quantizer)}: bit_width must be an int >= 1, got {bit_width}"
        )


# ---- enum -> class tables ---------------------------------------------------------------------


# The inverse of the rounding-mode table (ROUNDING_MODE_OF_IMPL).
_IMPL_OF_FLOAT_TO_INT_TYPE = {
    FloatToIntImplType[mode.upper()]: impl for impl, mode in ROUNDING_MODE_OF_IMPL.items()
}
_IMPL_OF_FLOAT_TO_INT_TYPE[FloatToIntImplType.LEARNED_ROUND] = LearnedRoundSte
_IMPL_OF_FLOAT_TO_INT_TYPE[FloatToIntImplType.STOCHASTIC_ROUND] = StochasticRoundSte
_IMPL_OF_LEARNED_ROUND_TYPE = {
    LearnedRoundImplType.HARD_SIGMOID: LearnedRoundHardSigmoid,
    LearnedRoundImplType.SIGMOID: LearnedRoundSigmoid,
    LearnedRoundImplType.IDENTITY: LearnedRoundIdentity,
}


def solve_float_to_int_impl_from_enum(impl_type: Any, quantizer: Any = None) -> type:
    """The rounding block for a FloatToIntImplType."""
    impl_type = to_enum(FloatToIntImplType, impl_type, "float_to_int_impl_type", quantizer)
    return _IMPL_OF_FLOAT_TO_INT_TYPE[impl_type]


def solve_bit_width_impl_from_enum(impl_type: Any, quantizer: Any = None) -> type:
    """The bit width block for a BitWidthImplType."""
    impl_type = to_enum(BitWidthImplType, impl_type, "bit_width_impl_type", quantizer)
    return {
        BitWidthImplType.CONST: BitWidthConst,
        BitWidthImplType.PARAMETER: BitWidthParameter,
        BitWidthImplType.STATEFUL_CONST: BitWidthStatefulConst,
    }[impl_type]


def solve_restrict_value_impl_from_enum(impl_type: Any, quantizer: Any = None) -> type:
    """The scale restriction block for a RestrictValueType (INT is not a scale restriction in
    Brevitas either)."""
    impl_type = to_enum(RestrictValueType, impl_type, "restrict_scaling_type", quantizer)
    table = {
        RestrictValueType.FP: FloatRestrictValue,
        RestrictValueType.LOG_FP: LogFloatRestrictValue,
        RestrictValueType.POWER_OF_TWO: PowerOfTwoRestrictValue,
    }
    if impl_type not in table:
        raise unsupported(
            quantizer,
            "restrict_scaling_type",
            impl_type,
            "is not supported for scale factors; accepted: FP, LOG_FP, POWER_OF_TWO",
        )
    return table[impl_type]


# ---- mixins -----------------------------------------------------------------------------------


class SolveRestrictScalingImplFromEnum(ExtendedInjector):
    @value
    def restrict_scaling_impl(restrict_scaling_type, __self__):
        return solve_restrict_value_impl_from_enum(restrict_scaling_type, __self__)


class SolveBitWidthImplFromEnum(ExtendedInjector):
    @value
    def bit_width_impl(bit_width_impl_type, __self__, bit_width=None):
        impl = solve_bit_width_impl_from_enum(bit_width_impl_type, __self__)
        # Checked here, where the setting is known, rather than deep inside the block.
        if bit_width is not None:
            _check_bit_width(bit_width, __self__)
        return impl


class SolveScalingStatsOpFromEnum(ExtendedInjector):
    @value
    def scaling_stats_impl(__self__, scaling_stats_op=None):
        if scaling_stats_op is None:
            return None
        op = to_enum(StatsOp, scaling_stats_op, "scaling_stats_op", __self__)
        return {
            StatsOp.MAX: AbsMax,
            StatsOp.MAX_AVE: AbsMaxAve,
            StatsOp.AVE: AbsAve,
            StatsOp.MEAN_SIGMA_STD: MeanSigmaStd,
            StatsOp.PERCENTILE: AbsPercentile,
            StatsOp.MIN_MAX: AbsMinMax,
            StatsOp.PERCENTILE_INTERVAL: PercentileInterval,
        }[op]


class SolveAffineRescalingFromEnum(ExtendedInjector):
    @value
    def affine_rescaling(scaling_impl_type, __self__):
        impl_type = to_enum(ScalingImplType, scaling_impl_type, "scaling_impl_type", __self__)
        if impl_type == ScalingImplType.STATS:
            return False
        if impl_type == ScalingImplType.AFFINE_STATS:
            return True
        return None


class SolveIntQuantFromEnum(ExtendedInjector):
    @value
    def int_quant(quant_type, __self__):
        if to_enum(QuantType, quant_type, "quant_type", __self__) == QuantType.INT:
            return IntQuant
        return None


class SolveTensorQuantFloatToIntImplFromEnum(ExtendedInjector):
    @value
    def float_to_int_impl(float_to_int_impl_type, __self__):
        return solve_float_to_int_impl_from_enum(float_to_int_impl_type, __self__)

    # LEARNED_ROUND's blocks: the offset function and the learned value's initial zeros, one
    # per element of the (single) tracked weight.
    @value
    def learned_round_impl(learned_round_impl_type, __self__):
        kind = to_enum(
            LearnedRoundImplType, learned_round_impl_type, "learned_round_impl_type", __self__
        )
        return _IMPL_OF_LEARNED_ROUND_TYPE[kind]

    @value
    def learned_round_init(tracked_parameter_list, __self__):
        if len(tracked_parameter_list) != 1:
            raise QuantizerSolveError(
                f"{quantizer_name(__self__)}: float_to_int_impl_type=LEARNED_ROUND learns one offset "
                f"per element of one weight; this quantizer tracks {len(tracked_parameter_list)} "
                "(a quantizer shared by several layers is not supported, as in Brevitas)"
            )
        return torch.zeros(tracked_parameter_list[0].shape)


class SolveIntScalingImplFromEnum(ExtendedInjector):
    @value
    def int_scaling_impl(restrict_scaling_type, __self__):
        impl_type = to_enum(
            RestrictValueType, restrict_scaling_type, "restrict_scaling_type", __self__
        )
        if impl_type in (RestrictValueType.FP, RestrictValueType.LOG_FP):
            return IntScaling
        if impl_type == RestrictValueType.POWER_OF_TWO:
            return PowerOfTwoIntScaling
        raise unsupported(
            __self__,
            "restrict_scaling_type",
            impl_type,
            "is not supported for scale factors; accepted: FP, LOG_FP, POWER_OF_TWO",
        )


def _scaling_per_output(quantizer: Any, setting: Any) -> ScalingPerOutputType:
    return to_enum(ScalingPerOutputType, setting, "scaling_per_output_type", quantizer)


def group_reduce_dim(group_dim: int) -> int:
    """The dim of the grouped view that holds the elements of a group: right after group_dim
    (a negative group_dim counts from the end, where the group dim is the last)."""
    return group_dim + 1 if group_dim >= 0 else group_dim


def _is_max_ave(scaling_stats_op: Any, quantizer: Any) -> bool:
    if scaling_stats_op is None:
        return False
    return to_enum(StatsOp, scaling_stats_op, "scaling_stats_op", quantizer) == StatsOp.MAX_AVE


class SolveStatsReduceDimFromEnum(ExtendedInjector):
    @value
    def stats_reduce_dim(scaling_stats_op, scaling_per_output, __self__, group_dim=None):
        # MAX_AVE reduces over the channel dim first, so it needs per-channel statistics.
        if scaling_per_output == ScalingPerOutputType.CHANNEL or _is_max_ave(
            scaling_stats_op, __self__
        ):
            return SCALING_STATS_REDUCE_DIM
        if scaling_per_output == ScalingPerOutputType.GROUP:
            return group_reduce_dim(require_group_dim(group_dim, __self__))
        return None

    # Per-group statistics keep the reduced dim: the scale has 1 in place of the group size.
    @value
    def keepdim(scaling_per_output):
        return scaling_per_output == ScalingPerOutputType.GROUP

    # scaling_per_output_channel (bool, the older API) wins over scaling_per_output_type.
    @value
    def scaling_per_output(__self__, scaling_per_output_type=None, scaling_per_output_channel=None):
        if scaling_per_output_channel is not None:
            return (
                ScalingPerOutputType.CHANNEL
                if scaling_per_output_channel
                else ScalingPerOutputType.TENSOR
            )
        if scaling_per_output_type is not None:
            return _scaling_per_output(__self__, scaling_per_output_type)
        return None


class SolveScalingStatsInputViewShapeImplFromEnum(ExtendedInjector):
    @value
    def scaling_stats_input_view_shape_impl(scaling_stats_op, scaling_per_output, __self__):
        if scaling_per_output == ScalingPerOutputType.CHANNEL or _is_max_ave(
            scaling_stats_op, __self__
        ):
            return StatsInputViewShapeImpl.OVER_OUTPUT_CHANNELS
        if scaling_per_output == ScalingPerOutputType.TENSOR:
            return StatsInputViewShapeImpl.OVER_TENSOR
        if scaling_per_output == ScalingPerOutputType.GROUP:
            return StatsInputViewShapeImpl.OVER_SUBCHANNEL_BLOCK
        return None

    # The older activation per-channel API names the permutation scaling_stats_permute_dims.
    @value
    def permute_dims(scaling_stats_permute_dims):
        return scaling_stats_permute_dims


class SolveDtypeDeviceFromTrackedParameterList(ExtendedInjector):
    @value
    def dtype(tracked_parameter_list):
        return tracked_parameter_list[0].dtype if len(tracked_parameter_list) > 0 else None

    @value
    def device(tracked_parameter_list):
        return tracked_parameter_list[0].device if len(tracked_parameter_list) > 0 else None


def _stats_scale_signedness(scaling_stats_impl: Any) -> bool:
    """What a statistic says about the sign of the scale. Brevitas 0.12 declares it with a
    classmethod that returns None, and only tests the attribute's presence, so every statistic
    counts as unsigned unless it gives an explicit False."""
    flag = getattr(scaling_stats_impl, "is_scale_unsigned", None)
    if callable(flag):
        flag = flag()
    return flag is not False


class SolveScaleSignedness(ExtendedInjector):
    @value
    def is_scale_unsigned(scaling_stats_impl=None, scaling_init=None):
        if scaling_init is not None:
            init = scaling_init if isinstance(scaling_init, Tensor) else torch.tensor(scaling_init)
            return not bool((init < 0).any())
        if scaling_stats_impl is not None:
            return _stats_scale_signedness(scaling_stats_impl)
        # Nothing to infer it from: an unsigned scale, as in Brevitas.
        return True
