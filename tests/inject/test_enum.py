"""Enums: names and values as Brevitas's, case-insensitive comparison, clear errors."""

import pytest

from brevitas_cpp.inject import enum as E

# The members Brevitas defines (issue 3's list), written out independently of the module.
EXPECTED = {
    "BitWidthImplType": ["CONST", "PARAMETER", "STATEFUL_CONST"],
    "QuantType": ["BINARY", "TERNARY", "INT", "FP"],
    "RestrictValueType": ["FP", "LOG_FP", "INT", "POWER_OF_TWO"],
    "FloatToIntImplType": [
        "ROUND",
        "CEIL",
        "FLOOR",
        "ROUND_TO_ZERO",
        "DPU",
        "LEARNED_ROUND",
        "STOCHASTIC_ROUND",  # Brevitas 0.12.1's inject/enum.py
    ],
    "LearnedRoundImplType": ["HARD_SIGMOID", "SIGMOID", "IDENTITY"],
    "ScalingImplType": [
        "HE",
        "CONST",
        "STATS",
        "AFFINE_STATS",
        "PARAMETER",
        "PARAMETER_FROM_STATS",
    ],
    "ScalingPerOutputType": ["TENSOR", "CHANNEL", "GROUP"],
    "StatsOp": [
        "MAX",
        "AVE",
        "MAX_AVE",
        "MEAN_SIGMA_STD",
        "PERCENTILE",
        "MIN_MAX",
        "PERCENTILE_INTERVAL",
    ],
    "TruncScalingImplType": ["MSB", "WRAPPER"],
}


@pytest.mark.parametrize("enum_name", sorted(EXPECTED))
def test_members_are_strings_named_as_brevitas(enum_name):
    cls = getattr(E, enum_name)
    assert [m.name for m in cls] == EXPECTED[enum_name]
    for name in EXPECTED[enum_name]:
        member = cls[name]
        assert member.value == name and str(member) == name and isinstance(member, str)


@pytest.mark.parametrize("enum_name", sorted(EXPECTED))
def test_comparison_is_case_insensitive_and_hash_consistent(enum_name):
    cls = getattr(E, enum_name)
    for name in EXPECTED[enum_name]:
        member = cls[name]
        assert member == name.lower() and member == name.title() and name.lower() == member
        assert not (member != name.lower())
        assert cls(name.lower()) is member and cls(name) is member
        assert hash(member) == hash(cls[name])
        assert {member: 1}[cls(name.lower())] == 1
    first, second = list(cls)[:2]
    assert first != second and first != "no_such_member"


def test_members_of_different_enums_with_one_name_compare_equal_like_brevitas():
    # Brevitas compares by lower-cased string, so QuantType.FP == RestrictValueType.FP.
    assert E.QuantType.FP == E.RestrictValueType.FP
    assert E.QuantType.INT != E.QuantType.FP


def test_unknown_string_lists_accepted_names():
    with pytest.raises(
        ValueError,
        match=r"'integer' is not a valid QuantType; accepted \(case-insensitive\): "
        r"BINARY, TERNARY, INT, FP",
    ):
        E.QuantType("integer")
    with pytest.raises(ValueError, match=r"ROUND, CEIL, FLOOR, ROUND_TO_ZERO, DPU"):
        E.FloatToIntImplType("nearest")


def test_rounding_enum_names_are_the_op_rounding_modes():
    # FloatToIntImplType values lower-cased are the rounding_mode names int_quant accepts (all
    # but LEARNED_ROUND, a block with learned state: LearnedRoundSte, and STOCHASTIC_ROUND, a
    # block with a random generator: StochasticRoundSte).
    import torch

    import brevitas_cpp  # noqa: F401

    x = torch.tensor([-1.5, -0.5, 0.5, 1.5])
    one, zero, bits = torch.tensor(1.0), torch.tensor(0.0), torch.tensor(8.0)
    expected = {
        "ROUND": [-2.0, -0.0, 0.0, 2.0],
        "CEIL": [-1.0, -0.0, 1.0, 2.0],
        "FLOOR": [-2.0, -1.0, 0.0, 1.0],
        "ROUND_TO_ZERO": [-1.0, -0.0, 0.0, 1.0],
        "DPU": [-1.0, -0.0, 0.0, 2.0],
    }
    for member in E.FloatToIntImplType:
        if member in (E.FloatToIntImplType.LEARNED_ROUND, E.FloatToIntImplType.STOCHASTIC_ROUND):
            continue
        y = torch.ops.brevitas_cpp.int_quant(
            x, one, zero, bits, True, False, str(member).lower(), False
        )
        assert y.tolist() == expected[member.name]
