"""The setting mixins declare Brevitas 0.12's values (written out here independently)."""

import pytest
import torch
from torch import nn

from brevitas_cpp.core.function_wrapper import CeilSte, TensorClamp
from brevitas_cpp.core.quant import ClampedBinaryQuant
from brevitas_cpp.core.scaling import ConstScaling
from brevitas_cpp.core.stats import NegativeMinOrZero, NegativePercentileOrZero
from brevitas_cpp.core.zero_point import (
    ParameterFromRuntimeZeroPoint,
    StatsFromParameterZeroPoint,
    ZeroZeroPoint,
)
from brevitas_cpp.inject import ExtendedInjector
from brevitas_cpp.quant import base

INT_FORMAT = dict(quant_type="INT", bit_width_impl_type="CONST", float_to_int_impl_type="ROUND")
DECOUPLED = dict(narrow_range=True, signed=True)
WEIGHT_NORM = dict(
    DECOUPLED,
    scaling_impl_type="PARAMETER",
    scaling_per_output_type="CHANNEL",
    scaling_min_val=1e-10,
    pre_scaling_min_val=1e-10,
    force_parameter=True,
)

EXPECTED = {
    "MaxStatsScaling": dict(
        scaling_impl_type="STATS", scaling_stats_op="MAX", scaling_min_val=1e-10
    ),
    "MinMaxStatsScaling": dict(
        scaling_impl_type="STATS", scaling_stats_op="MIN_MAX", scaling_min_val=1e-10
    ),
    "ParamFromRuntimePercentileScaling": dict(
        scaling_impl_type="PARAMETER_FROM_STATS",
        scaling_stats_op="PERCENTILE",
        high_percentile_q=99.999,
        collect_stats_steps=300,
        scaling_min_val=1e-10,
    ),
    "ParamFromRuntimeMinMaxScaling": dict(
        scaling_impl_type="PARAMETER_FROM_STATS",
        scaling_stats_op="MIN_MAX",
        collect_stats_steps=300,
        scaling_min_val=1e-10,
    ),
    "ParamFromRuntimePercentileIntervalScaling": dict(
        scaling_impl_type="PARAMETER_FROM_STATS",
        scaling_stats_op="PERCENTILE_INTERVAL",
        high_percentile_q=99.999,
        low_percentile_q=0.001,
        collect_stats_steps=300,
        scaling_min_val=1e-10,
    ),
    "ParamMinMaxInitScaling": dict(scaling_impl_type="PARAMETER"),
    "BatchQuantStatsScaling1d": dict(
        scaling_impl_type="AFFINE_STATS",
        scaling_stats_op="MAX_AVE",
        scaling_stats_momentum=None,
        affine_shift_scale=False,
        scaling_stats_permute_dims=(1, 0, 2),
        scaling_min_val=1e-10,
    ),
    "BatchQuantStatsScaling2d": dict(
        scaling_impl_type="AFFINE_STATS",
        scaling_stats_op="MAX_AVE",
        scaling_stats_momentum=None,
        affine_shift_scale=False,
        scaling_stats_permute_dims=(1, 0, 2, 3),
        scaling_min_val=1e-10,
    ),
    "IntQuant": dict(INT_FORMAT, narrow_range=False, signed=True),
    "NarrowIntQuant": dict(INT_FORMAT, narrow_range=True, signed=True),
    "UintQuant": dict(INT_FORMAT, narrow_range=False, signed=False),
    "ShiftedMinUintQuant": dict(
        INT_FORMAT, narrow_range=False, signed=False, quantize_zero_point=True
    ),
    "ShiftedParamFromPercentileUintQuant": dict(
        INT_FORMAT,
        narrow_range=False,
        signed=False,
        quantize_zero_point=True,
        low_percentile_q=0.001,
    ),
    "PerChannelFloatScaling8bit": dict(
        scaling_per_output_type="CHANNEL", restrict_scaling_type="FP", bit_width=8
    ),
    "PerTensorFloatScaling8bit": dict(
        scaling_per_output_type="TENSOR", restrict_scaling_type="FP", bit_width=8
    ),
    "PerChannelPoTScaling8bit": dict(
        scaling_per_output_type="CHANNEL", restrict_scaling_type="POWER_OF_TWO", bit_width=8
    ),
    "PerTensorPoTScaling8bit": dict(
        scaling_per_output_type="TENSOR", restrict_scaling_type="POWER_OF_TWO", bit_width=8
    ),
    "SignedBinaryClampedConst": dict(
        scaling_impl_type="CONST",
        restrict_scaling_type="FP",
        float_to_int_impl_type="ROUND",
        scaling_per_output_type="TENSOR",
        narrow_range=True,
        signed=True,
    ),
    "PerTensorConstScaling2bit": dict(
        scaling_impl_type="CONST",
        restrict_scaling_type="FP",
        scaling_per_output_type="TENSOR",
        bit_width=2,
    ),
    # Decoupled, weight-normalization and accumulator-aware weights (their blocks and numbers:
    # tests/quant/test_decoupled.py).
    "WeightPerTensorFloatDecoupledL2Param": dict(
        DECOUPLED,
        scaling_impl_type="PARAMETER_FROM_STATS",
        scaling_per_output_type="TENSOR",
        scaling_stats_input_concat_dim=0,
        stats_reduce_dim=1,
    ),
    "WeightPerChannelFloatDecoupled": dict(
        DECOUPLED,
        scaling_impl_type="PARAMETER_FROM_STATS",
        scaling_per_output_type="CHANNEL",
        stats_reduce_dim=1,
    ),
    "WeightNormPerChannelFloatDecoupled": dict(WEIGHT_NORM),
    "AccumulatorAwareWeightQuant": dict(WEIGHT_NORM, accumulator_bit_width=32),
    "AccumulatorAwareZeroCenterWeightQuant": dict(WEIGHT_NORM, accumulator_bit_width=32),
    # MSE search (the blocks they build and their numbers: tests/core/stats/test_mse.py).
    "MSESymmetricScale": dict(scaling_impl_type="PARAMETER_FROM_STATS"),
    "MSEAsymmetricScale": dict(scaling_impl_type="PARAMETER_FROM_STATS"),
    "MSEZeroPoint": dict(),
    "MSEWeightZeroPoint": dict(),
    "MSEActZeroPoint": dict(),
    "MSESymmetricScaleSubInjector": dict(mse_search_method="grid"),
    "MSEAsymmetricScaleSubInjector": dict(mse_search_method="grid"),
    "MSEZeroPointSubInjector": dict(mse_search_method="grid"),
    "HQOScale": dict(scaling_impl_type="PARAMETER_FROM_STATS"),
    "HQOSymmetricScale": dict(scaling_impl_type="PARAMETER_FROM_STATS"),
    "HQOAsymmetricScale": dict(scaling_impl_type="PARAMETER_FROM_STATS"),
    "HQOZeroPoint": dict(),
    "HQOWeightZeroPoint": dict(),
    "HQOActZeroPoint": dict(),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_mixin_settings(name):
    mixin = getattr(base, name)
    assert issubclass(mixin, ExtendedInjector)
    for attr, expected in EXPECTED[name].items():
        got = getattr(mixin, attr)
        if isinstance(expected, bool) or expected is None:
            assert got is expected, (attr, got)
        else:
            assert got == expected, (attr, got)


def test_every_listed_mixin_is_exported():
    assert set(EXPECTED) == set(base.__all__)


def test_zero_point_blocks_of_the_integer_formats():
    from brevitas_cpp.quant import (
        Int8ActPerTensorFloat,
        ShiftedUint8ActPerTensorFloat,
        ShiftedUint8WeightPerTensorFloat,
        Uint8ActPerTensorFloat,
    )

    for quant in (Int8ActPerTensorFloat, Uint8ActPerTensorFloat):
        assert type(quant.tensor_quant.zero_point_impl) is ZeroZeroPoint
    param = nn.Parameter(torch.randn(3, 4))
    weight = ShiftedUint8WeightPerTensorFloat.let(tracked_parameter_list=[param])
    assert type(weight.tensor_quant.zero_point_impl) is StatsFromParameterZeroPoint
    assert type(weight.zero_point_stats_impl) is NegativeMinOrZero
    act = ShiftedUint8ActPerTensorFloat
    assert type(act.tensor_quant.zero_point_impl) is ParameterFromRuntimeZeroPoint
    assert type(act.zero_point_stats_impl) is NegativePercentileOrZero
    # The zero point is shaped and laid out like the scale.
    assert weight.zero_point_shape == weight.scaling_shape == ()
    assert weight.zero_point_stats_input_concat_dim == weight.scaling_stats_input_concat_dim == 0


def test_power_of_two_scales_round_the_exponent_up():
    assert type(base.PerTensorPoTScaling8bit.restrict_value_float_to_int_impl) is CeilSte
    assert type(base.PerChannelPoTScaling8bit.restrict_value_float_to_int_impl) is CeilSte


def test_signed_binary_uses_the_clamped_binary_block():
    quant = base.SignedBinaryClampedConst.let(
        scaling_impl=ConstScaling(0.5), tensor_clamp_impl=TensorClamp()
    )
    assert type(quant.tensor_quant) is ClampedBinaryQuant
