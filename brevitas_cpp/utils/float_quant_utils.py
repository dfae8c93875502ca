"""Brevitas's ``brevitas.utils.float_quant_utils``: values of minifloat bit patterns, and the
largest and smallest values a format keeps once some codes are reserved for inf and NaN.

Special values are given as mantissa bit strings of the top exponent code (OCP e4m3 reserves
'111' for NaN; OCP e5m2 reserves '00' for inf and '01', '10', '11' for NaN), as Brevitas's
quantizers spell them.
"""

from typing import Optional, Sequence

__all__ = [
    "get_max_available_float",
    "get_min_available_float",
    "get_minifloat_value",
    "mantissa_bits_to_float",
]


def _check_bits(bits: str, what: str) -> None:
    if not bits or any(b not in "01" for b in bits):
        raise ValueError(f"{what} must be a non-empty string of '0' and '1', got {bits!r}")


def mantissa_bits_to_float(bits: str, frexp_compatible: bool = False, normal: bool = True) -> float:
    """The significand of mantissa bits: 1.bits for a normal number, 0.bits for a subnormal one
    (halved when frexp_compatible, frexp's [0.5, 1) convention)."""
    if bits:
        _check_bits(bits, "bits")
    significand = (1.0 if normal else 0.0) + sum(
        2.0 ** -(i + 1) for i, bit in enumerate(bits) if bit == "1"
    )
    return significand / 2.0 if frexp_compatible else significand


def get_minifloat_value(exponent: str, mantissa: str, exponent_bias: int) -> float:
    """The value of the (positive) minifloat with these exponent and mantissa bits: an all-zero
    exponent is subnormal (exponent 1 - bias, no implicit leading 1)."""
    _check_bits(exponent, "exponent")
    exponent_code = int(exponent, 2)
    if exponent_code == 0:
        return 2.0 ** (1 - exponent_bias) * mantissa_bits_to_float(mantissa, normal=False)
    return 2.0 ** (exponent_code - exponent_bias) * mantissa_bits_to_float(mantissa)


def get_max_available_float(
    exponent_bit_width: int,
    mantissa_bit_width: int,
    exponent_bias: int,
    nan_values: Optional[Sequence[str]],
    inf_values: Optional[Sequence[str]],
    saturating: bool,
) -> float:
    """The largest finite value of the format: the code just below the smallest reserved
    mantissa code of the top exponent (the whole top binade below it when every mantissa code of
    the top exponent is reserved), or the all-ones code when nothing is reserved."""
    if nan_values is None and inf_values is not None:
        raise ValueError(
            "get_max_available_float: a format with inf_values needs nan_values too (inf without "
            f"NaN codes is not a minifloat encoding), got inf_values={tuple(inf_values)!r}"
        )
    if nan_values is None:
        if not saturating:
            raise ValueError(
                "get_max_available_float: a non-saturating format (saturating=False) needs "
                "nan_values (or inf_values) for what lies beyond the largest value"
            )
        return get_minifloat_value(
            "1" * exponent_bit_width, "1" * mantissa_bit_width, exponent_bias
        )
    special = list(nan_values) + list(inf_values or ())
    for code in special:
        _check_bits(code, "a NaN/inf code")
        if len(code) > mantissa_bit_width:
            raise ValueError(
                f"get_max_available_float: NaN/inf codes are mantissa codes of at most "
                f"mantissa_bit_width={mantissa_bit_width} bits, got {code!r}"
            )
    largest_free = min(int(code, 2) for code in special) - 1
    if largest_free < 0:
        # Every mantissa code of the top exponent is reserved: the top of the binade below.
        exponent = "1" * (exponent_bit_width - 1) + "0"
        mantissa = "1" * mantissa_bit_width
    else:
        exponent = "1" * exponent_bit_width
        mantissa = format(largest_free, f"0{mantissa_bit_width}b")
    return get_minifloat_value(exponent, mantissa, exponent_bias)


def get_min_available_float(
    exponent_bit_width: int, mantissa_bit_width: int, exponent_bias: int
) -> float:
    """The smallest positive value of the format: the subnormal with only the last mantissa bit
    set, 2^(1 - bias - m)."""
    return get_minifloat_value(
        "0" * exponent_bit_width, "0" * (mantissa_bit_width - 1) + "1", exponent_bias
    )
