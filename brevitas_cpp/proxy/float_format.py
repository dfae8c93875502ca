"""What the minifloat proxies (weights and activations) answer about their format: whether it is
one of the OCP or FNUZ FP8 encodings, from the metadata their quantizer returns."""

from typing import Any, Optional, Tuple

__all__ = ["MinifloatFormatQueries", "minifloat_bit_width"]

_OCP_E5M2_INF = ("00",)
_OCP_E5M2_NAN = ("01", "11", "10")
_OCP_E4M3_NAN = ("111",)


def _codes(values: Optional[Any]) -> Optional[Tuple[str, ...]]:
    return tuple(values) if values is not None else None


def minifloat_bit_width(exponent_bit_width: Any, mantissa_bit_width: Any, signed: bool) -> Any:
    """The total width of a minifloat: exponent + mantissa + the sign bit when signed."""
    return exponent_bit_width + mantissa_bit_width + int(signed)


class MinifloatFormatQueries:
    """is_ocp*/is_fnuz* of a proxy with exponent_bit_width(), mantissa_bit_width(),
    exponent_bias(), inf_values() and nan_values() (Brevitas's properties, same answers)."""

    def _format(self) -> Tuple[Any, Any]:
        return self.exponent_bit_width(), self.mantissa_bit_width()

    @property
    def is_ocp_e5m2(self) -> bool:
        e, m = self._format()
        return (
            e == 5
            and m == 2
            and _codes(self.inf_values()) == _OCP_E5M2_INF
            and _codes(self.nan_values()) == _OCP_E5M2_NAN
        )

    @property
    def is_ocp_e4m3(self) -> bool:
        e, m = self._format()
        return (
            e == 4
            and m == 3
            and self.inf_values() is None
            and _codes(self.nan_values()) == _OCP_E4M3_NAN
        )

    @property
    def is_ocp(self) -> bool:
        return self.is_ocp_e4m3 or self.is_ocp_e5m2

    def _is_fnuz(self, e: int, m: int, bias: int) -> bool:
        exponent, mantissa = self._format()
        return (
            exponent == e
            and mantissa == m
            and self.inf_values() is None
            and self.nan_values() is None
            and self.exponent_bias() == bias
        )

    @property
    def is_fnuz_e5m2(self) -> bool:
        return self._is_fnuz(5, 2, 16)

    @property
    def is_fnuz_e4m3(self) -> bool:
        return self._is_fnuz(4, 3, 8)

    @property
    def is_fnuz(self) -> bool:
        return self.is_fnuz_e4m3 or self.is_fnuz_e5m2
