"""The enums quantizers are declared with, named and valued as in Brevitas.

Each member is a string equal to its name; comparison with strings (and other members) is
case-insensitive, so ``QuantType.INT == "int"``. Converting an unknown string raises a
ValueError that lists the accepted names.
"""

from __future__ import annotations

from enum import Enum, auto


class AutoName(str, Enum):
    """A string enum whose values are the member names, compared case-insensitively."""

    @staticmethod
    def _generate_next_value_(name: str, start: int, count: int, last_values: list) -> str:
        return name

    def __str__(self) -> str:
        return self.value

    def __eq__(self, other: object) -> bool:
        return str(self).lower() == str(other).lower()

    def __ne__(self, other: object) -> bool:
        return not self == other

    # Equal members and strings must hash alike (case-insensitive equality).
    def __hash__(self) -> int:
        return hash(self.value.lower())

    @classmethod
    def _missing_(cls, value: object) -> AutoName:
        for member in cls:
            if member == value:
                return member
        accepted = ", ".join(m.value for m in cls)
        raise ValueError(
            f"{value!r} is not a valid {cls.__name__}; accepted (case-insensitive): {accepted}"
        )


class BitWidthImplType(AutoName):
    """How the bit width is held: a constant, a learned parameter, or a constant kept in the state_dict."""

    CONST = auto()
    PARAMETER = auto()
    STATEFUL_CONST = auto()


class QuantType(AutoName):
    """Kind of quantization."""

    BINARY = auto()
    TERNARY = auto()
    INT = auto()
    FP = auto()


class RestrictValueType(AutoName):
    """Restriction on a value (scale): any float, learned in log domain, integer, power of two."""

    FP = auto()
    LOG_FP = auto()
    INT = auto()
    POWER_OF_TWO = auto()


class FloatToIntImplType(AutoName):
    """Rounding from float to integer (each a C++ op: round_ste, ceil_ste, ...; LEARNED_ROUND:
    floor plus a learned per-element offset, LearnedRoundSte; STOCHASTIC_ROUND: up with
    probability frac(x), StochasticRoundSte)."""

    ROUND = auto()
    CEIL = auto()
    FLOOR = auto()
    ROUND_TO_ZERO = auto()
    DPU = auto()
    LEARNED_ROUND = auto()
    STOCHASTIC_ROUND = auto()


class LearnedRoundImplType(AutoName):
    """How LEARNED_ROUND maps its learned value to the rounding offset in [0, 1]."""

    HARD_SIGMOID = auto()
    SIGMOID = auto()
    IDENTITY = auto()


class ScalingImplType(AutoName):
    """How the scale is computed."""

    HE = auto()
    CONST = auto()
    STATS = auto()
    AFFINE_STATS = auto()
    PARAMETER = auto()
    PARAMETER_FROM_STATS = auto()


class ScalingPerOutputType(AutoName):
    """Granularity of the scale."""

    TENSOR = auto()
    CHANNEL = auto()
    GROUP = auto()


class StatsOp(AutoName):
    """Statistic a scale is derived from."""

    # One-sided statistics of |x| (symmetric quantization).
    MAX = auto()
    AVE = auto()
    MAX_AVE = auto()
    MEAN_SIGMA_STD = auto()
    PERCENTILE = auto()
    # Two-sided statistics (asymmetric quantization).
    MIN_MAX = auto()
    PERCENTILE_INTERVAL = auto()


class TruncScalingImplType(AutoName):
    """Scaling of truncation: from the MSB, or a wrapped scaling implementation."""

    MSB = auto()
    WRAPPER = auto()
