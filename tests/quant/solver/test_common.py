"""Shared solver mixins: each enum setting resolves to the block Brevitas 0.12 picks, unknown
settings are errors naming the quantizer and the attribute."""

import pytest
import torch

from brevitas_cpp.core.bit_width import BitWidthConst, BitWidthParameter, BitWidthStatefulConst
from brevitas_cpp.core.function_wrapper import (
    CeilSte,
    DPURoundSte,
    FloorSte,
    OverOutputChannelView,
    OverTensorView,
    RoundSte,
    RoundToZeroSte,
)
from brevitas_cpp.core.quant import IntQuant as IntQuantBlock
from brevitas_cpp.core.restrict_val import (
    FloatRestrictValue,
    LogFloatRestrictValue,
    PowerOfTwoRestrictValue,
)
from brevitas_cpp.core.scaling import IntScaling, PowerOfTwoIntScaling
from brevitas_cpp.core.stats import (
    AbsAve,
    AbsMax,
    AbsMaxAve,
    AbsMinMax,
    AbsPercentile,
    MeanSigmaStd,
    PercentileInterval,
)
from brevitas_cpp.inject import ExtendedInjector
from brevitas_cpp.inject.enum import ScalingPerOutputType
from brevitas_cpp.quant.solver import QuantizerSolveError
from brevitas_cpp.quant.solver.common import (
    SolveAffineRescalingFromEnum,
    SolveBitWidthImplFromEnum,
    SolveDtypeDeviceFromTrackedParameterList,
    SolveIntQuantFromEnum,
    SolveIntScalingImplFromEnum,
    SolveRestrictScalingImplFromEnum,
    SolveScaleSignedness,
    SolveScalingStatsInputViewShapeImplFromEnum,
    SolveScalingStatsOpFromEnum,
    SolveStatsReduceDimFromEnum,
    SolveTensorQuantFloatToIntImplFromEnum,
    solve_bit_width_impl_from_enum,
    solve_float_to_int_impl_from_enum,
    solve_restrict_value_impl_from_enum,
)


class Rounding(SolveTensorQuantFloatToIntImplFromEnum):
    pass


@pytest.mark.parametrize(
    "setting, block",
    [
        ("round", RoundSte),
        ("ROUND", RoundSte),
        ("floor", FloorSte),
        ("ceil", CeilSte),
        ("round_to_zero", RoundToZeroSte),
        ("dpu", DPURoundSte),
    ],
)
def test_float_to_int_impl_from_enum(setting, block):
    assert solve_float_to_int_impl_from_enum(setting) is block
    assert type(Rounding.let(float_to_int_impl_type=setting).float_to_int_impl) is block


def test_float_to_int_impl_unknown_names_quantizer_attribute_and_choices():
    with pytest.raises(
        QuantizerSolveError,
        match=r"Rounding: float_to_int_impl_type='nearest' is not a valid "
        r"FloatToIntImplType; accepted \(case-insensitive\): ROUND, CEIL, "
        r"FLOOR, ROUND_TO_ZERO, DPU",
    ):
        Rounding.let(float_to_int_impl_type="nearest").float_to_int_impl


def test_solve_errors_are_also_runtime_errors_like_brevitas():
    # Code written against Brevitas catches RuntimeError for unrecognised settings.
    with pytest.raises(RuntimeError):
        solve_float_to_int_impl_from_enum("nearest")


class BitWidth(SolveBitWidthImplFromEnum, SolveDtypeDeviceFromTrackedParameterList):
    bit_width = 5
    tracked_parameter_list = []


@pytest.mark.parametrize(
    "setting, block",
    [
        ("const", BitWidthConst),
        ("parameter", BitWidthParameter),
        ("stateful_const", BitWidthStatefulConst),
    ],
)
def test_bit_width_impl_from_enum(setting, block):
    assert solve_bit_width_impl_from_enum(setting) is block
    impl = BitWidth.let(bit_width_impl_type=setting).bit_width_impl
    assert type(impl) is block
    assert torch.equal(impl(), torch.tensor(5.0))


@pytest.mark.parametrize("bad", [0, -3, 2.5, 8.0, True, "8", None])
def test_bit_width_must_be_an_int_of_at_least_one(bad):
    quant = BitWidth.let(bit_width_impl_type="const", bit_width=bad)
    if bad is None:
        # No bit width at all: the block can not be built, and the error says which attribute.
        with pytest.raises(Exception, match="bit_width"):
            quant.bit_width_impl
        return
    with pytest.raises(QuantizerSolveError, match=r"BitWidth: bit_width must be an int >= 1, got"):
        quant.bit_width_impl


def test_bit_width_impl_unknown_type():
    with pytest.raises(
        QuantizerSolveError,
        match=r"bit_width_impl_type='learned' is not a valid "
        r"BitWidthImplType",
    ):
        BitWidth.let(bit_width_impl_type="learned").bit_width_impl


class Restrict(SolveRestrictScalingImplFromEnum, SolveIntScalingImplFromEnum):
    narrow_range = True
    signed = True


@pytest.mark.parametrize(
    "setting, restrict, int_scaling",
    [
        ("fp", FloatRestrictValue, IntScaling),
        ("log_fp", LogFloatRestrictValue, IntScaling),
        ("power_of_two", PowerOfTwoRestrictValue, PowerOfTwoIntScaling),
    ],
)
def test_restrict_and_int_scaling_from_enum(setting, restrict, int_scaling):
    quant = Restrict.let(restrict_scaling_type=setting)
    assert solve_restrict_value_impl_from_enum(setting) is restrict
    assert type(quant.restrict_scaling_impl) is restrict
    assert type(quant.int_scaling_impl) is int_scaling


def test_int_scaling_thresholds():
    # IntScaling: -min_int when signed, max_int when not; PowerOfTwoIntScaling: max_int + 1.
    bw = torch.tensor(8.0)
    assert float(Restrict.let(restrict_scaling_type="fp").int_scaling_impl(bw)) == 127.0
    wide = Restrict.let(restrict_scaling_type="fp", narrow_range=False)
    assert float(wide.int_scaling_impl(bw)) == 128.0
    assert (
        float(
            Restrict.let(
                restrict_scaling_type="fp", narrow_range=False, signed=False
            ).int_scaling_impl(bw)
        )
        == 255.0
    )
    assert float(Restrict.let(restrict_scaling_type="power_of_two").int_scaling_impl(bw)) == 128.0


def test_int_restriction_is_not_a_scale_restriction():
    with pytest.raises(
        QuantizerSolveError,
        match=r"Restrict: restrict_scaling_type=INT is not "
        r"supported for scale factors",
    ):
        Restrict.let(restrict_scaling_type="int").restrict_scaling_impl
    with pytest.raises(QuantizerSolveError, match=r"restrict_scaling_type=INT"):
        Restrict.let(restrict_scaling_type="int").int_scaling_impl


class Stats(
    SolveScalingStatsOpFromEnum,
    SolveStatsReduceDimFromEnum,
    SolveScalingStatsInputViewShapeImplFromEnum,
):
    high_percentile_q = 99.0
    low_percentile_q = 1.0
    sigma = 2.0
    scaling_per_output_type = "tensor"
    scaling_stats_permute_dims = None  # Brevitas requires it for a per-channel view


@pytest.mark.parametrize(
    "op, block",
    [
        ("max", AbsMax),
        ("ave", AbsAve),
        ("mean_sigma_std", MeanSigmaStd),
        ("percentile", AbsPercentile),
        ("min_max", AbsMinMax),
        ("percentile_interval", PercentileInterval),
    ],
)
def test_stats_op_from_enum(op, block):
    assert type(Stats.let(scaling_stats_op=op).scaling_stats_impl) is block


def test_max_ave_is_reduced_per_channel_even_for_a_per_tensor_scale():
    quant = Stats.let(scaling_stats_op="max_ave")
    assert type(quant.scaling_stats_impl) is AbsMaxAve
    assert quant.stats_reduce_dim == 1
    assert type(quant.scaling_stats_input_view_shape_impl) is OverOutputChannelView


def test_no_stats_op_means_no_stats_block():
    assert Stats.scaling_stats_impl is None


def test_unknown_stats_op():
    with pytest.raises(QuantizerSolveError, match=r"Stats: scaling_stats_op='median'"):
        Stats.let(scaling_stats_op="median").scaling_stats_impl


@pytest.mark.parametrize(
    "per_output, reduce_dim, view",
    [("tensor", None, OverTensorView), ("channel", 1, OverOutputChannelView)],
)
def test_reduce_dim_and_view_follow_granularity(per_output, reduce_dim, view):
    quant = Stats.let(scaling_stats_op="max", scaling_per_output_type=per_output)
    assert quant.stats_reduce_dim == reduce_dim
    assert quant.keepdim is False
    assert type(quant.scaling_stats_input_view_shape_impl) is view
    assert quant.scaling_stats_impl.stats_reduce_dim == reduce_dim


def test_per_channel_view_takes_the_stats_permutation():
    quant = Stats.let(
        scaling_stats_op="max",
        scaling_per_output_type="channel",
        scaling_stats_permute_dims=(1, 0, 2, 3),
    )
    view = quant.scaling_stats_input_view_shape_impl
    x = torch.arange(24.0).reshape(2, 3, 2, 2)
    assert torch.equal(view(x), x.permute(1, 0, 2, 3).reshape(3, -1))


def test_older_boolean_flag_wins_over_per_output_type():
    assert Stats.let(scaling_per_output_channel=True).scaling_per_output == "channel"
    assert (
        Stats.let(
            scaling_per_output_type="channel", scaling_per_output_channel=False
        ).scaling_per_output
        == "tensor"
    )
    assert Stats.let(scaling_per_output_type="Channel").scaling_per_output == "channel"


def test_per_group_scaling_reduces_each_group() -> None:
    group = Stats.let(scaling_per_output_type="group", scaling_stats_op="max")
    assert group.scaling_per_output == ScalingPerOutputType.GROUP
    # The grouped view puts the group's elements right after group_dim (last for -1).
    assert group.let(group_dim=1).stats_reduce_dim == 2
    assert group.let(group_dim=-1).stats_reduce_dim == -1
    assert group.keepdim is True
    assert Stats.let(scaling_stats_op="max").keepdim is False
    with pytest.raises(QuantizerSolveError, match=r"Stats: .*GROUP needs group_size .*group_dim"):
        group.stats_reduce_dim


def test_unknown_granularity():
    with pytest.raises(
        QuantizerSolveError,
        match=r"scaling_per_output_type='row' is not a valid "
        r"ScalingPerOutputType; accepted "
        r"\(case-insensitive\): TENSOR, CHANNEL, GROUP",
    ):
        Stats.let(scaling_per_output_type="row").scaling_per_output


class Affine(SolveAffineRescalingFromEnum, SolveIntQuantFromEnum):
    narrow_range = False
    signed = True
    input_view_impl = torch.nn.Identity()


@pytest.mark.parametrize(
    "impl_type, expected",
    [("stats", False), ("affine_stats", True), ("const", None), ("parameter", None)],
)
def test_affine_rescaling(impl_type, expected):
    assert Affine.let(scaling_impl_type=impl_type).affine_rescaling is expected


def test_int_quant_only_for_int():
    block = Affine.let(quant_type="int").int_quant
    assert type(block) is IntQuantBlock and block.signed is True and block.narrow_range is False
    assert Affine.let(quant_type="binary").int_quant is None
    with pytest.raises(QuantizerSolveError, match=r"Affine: quant_type='integer'"):
        Affine.let(quant_type="integer").int_quant


def test_dtype_and_device_from_the_first_tracked_parameter():
    p64 = torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))
    p32 = torch.nn.Parameter(torch.zeros(2))
    quant = SolveDtypeDeviceFromTrackedParameterList.let(tracked_parameter_list=[p64, p32])
    assert quant.dtype == torch.float64 and quant.device == torch.device("cpu")
    empty = SolveDtypeDeviceFromTrackedParameterList.let(tracked_parameter_list=[])
    assert empty.dtype is None and empty.device is None


class Signedness(SolveScaleSignedness):
    pass


def test_scale_signedness():
    assert Signedness.is_scale_unsigned is True
    assert Signedness.let(scaling_init=0.5).is_scale_unsigned is True
    assert Signedness.let(scaling_init=-0.5).is_scale_unsigned is False
    assert Signedness.let(scaling_init=torch.tensor([0.5, -1.0])).is_scale_unsigned is False
    assert Signedness.let(scaling_init=torch.tensor([0.5, 1.0])).is_scale_unsigned is True
    # Statistics count as unsigned unless they say otherwise.
    assert Signedness.let(scaling_stats_impl=AbsMax()).is_scale_unsigned is True

    class SignedStat(torch.nn.Module):
        is_scale_unsigned = False

    assert Signedness.let(scaling_stats_impl=SignedStat()).is_scale_unsigned is False


def test_errors_name_the_derived_quantizer():
    class MyQuant(Rounding):
        float_to_int_impl_type = "bogus"

    with pytest.raises(QuantizerSolveError, match=r"^MyQuant: float_to_int_impl_type='bogus'"):
        MyQuant.float_to_int_impl
    assert issubclass(QuantizerSolveError, ValueError)
    assert not isinstance(ExtendedInjector, QuantizerSolveError)
