"""Activation solver: scale block per ScalingImplType, init from the declared range, per-channel
shape given by the quantizer, and the state_dict hook for scales learned from statistics."""

import pytest
import torch

from brevitas_cpp.core.quant import ClampedBinaryQuant, RescalingIntQuant, TernaryQuant
from brevitas_cpp.core.restrict_val import FloatRestrictValue, LogFloatRestrictValue
from brevitas_cpp.core.scaling import (
    ConstScaling,
    ParameterFromRuntimeStatsScaling,
    ParameterScaling,
    RuntimeStatsScaling,
)
from brevitas_cpp.quant.base import (
    IntQuant,
    ParamFromRuntimePercentileScaling,
    PerTensorFloatScaling8bit,
)
from brevitas_cpp.quant.solver import ActQuantSolver, QuantizerSolveError
from brevitas_cpp.quant.solver.act import ConvertRuntimeStatsToParameter, MinMaxScalingInit


class A(IntQuant, ParamFromRuntimePercentileScaling, PerTensorFloatScaling8bit, ActQuantSolver):
    pass


@pytest.mark.parametrize(
    "impl_type, block",
    [
        ("parameter", ParameterScaling),
        ("parameter_from_stats", ParameterFromRuntimeStatsScaling),
        ("const", ConstScaling),
        ("stats", RuntimeStatsScaling),
        ("affine_stats", RuntimeStatsScaling),
    ],
)
def test_scaling_impl_per_type(impl_type, block):
    quant = A.let(scaling_impl_type=impl_type, min_val=-2.0, max_val=1.0)
    assert type(quant.tensor_quant.scaling_impl) is block


def test_he_init_is_for_weights_only():
    with pytest.raises(QuantizerSolveError, match=r"A: scaling_impl_type=HE is for weights"):
        A.let(scaling_impl_type="he").scaling_impl


@pytest.mark.parametrize(
    "quant_type, block",
    [("int", RescalingIntQuant), ("binary", ClampedBinaryQuant), ("ternary", TernaryQuant)],
)
def test_tensor_quant_per_quant_type(quant_type, block):
    quant = A.let(
        quant_type=quant_type, scaling_impl_type="const", min_val=-1.0, max_val=1.0, threshold=0.5
    )
    assert type(quant.tensor_quant) is block


def test_fp_means_no_quantization():
    assert A.let(quant_type="fp").tensor_quant is None


def test_unsigned_binary_activations_are_an_error():
    quant = A.let(quant_type="binary", signed=False, scaling_impl_type="const", max_val=1.0)
    with pytest.raises(QuantizerSolveError, match=r"A: quant_type=BINARY is always signed"):
        quant.tensor_quant


def test_min_max_init_is_the_larger_magnitude():
    assert torch.equal(MinMaxScalingInit(-3.0, 2.0)(), torch.tensor(3.0))
    assert torch.equal(MinMaxScalingInit(0.0, 2.5)(), torch.tensor(2.5))


def test_min_max_init_needs_both_bounds():
    with pytest.raises(
        QuantizerSolveError,
        match=r"MinMaxScalingInit: min_val must be a number, "
        r"got None",
    ):
        MinMaxScalingInit(None, 1.0)


@pytest.mark.parametrize("impl_type", ["const", "parameter"])
def test_scaling_init_from_the_declared_range(impl_type):
    quant = A.let(scaling_impl_type=impl_type, min_val=-0.75, max_val=0.5)
    assert torch.equal(quant.scaling_init, torch.tensor(0.75))
    # Unsigned activations start at 0: only max_val is needed.
    unsigned = A.let(scaling_impl_type=impl_type, signed=False, max_val=0.5)
    assert unsigned.min_val == 0.0
    assert torch.equal(unsigned.scaling_init, torch.tensor(0.5))


def test_signed_range_init_without_min_val_is_an_error():
    with pytest.raises(QuantizerSolveError, match="min_val must be a number"):
        A.let(scaling_impl_type="parameter", max_val=0.5).scaling_init


def test_no_init_for_statistics():
    assert A.scaling_init is None and A.min_val is None


def test_per_channel_shape_comes_from_the_quantizer():
    quant = A.let(
        scaling_per_output_channel=True,
        per_channel_broadcastable_shape=(1, 3, 1, 1),
        scaling_stats_permute_dims=(1, 0, 2, 3),
    )
    assert quant.scaling_shape == (1, 3, 1, 1)
    assert quant.scaling_per_output_channel_shape == (1, 3, 1, 1)
    assert quant.stats_reduce_dim == 1
    x = torch.randn(2, 3, 4, 4)
    quant.tensor_quant.train()
    scale = quant.tensor_quant(x)[1]
    assert scale.shape == (1, 3, 1, 1)


def test_per_channel_without_a_shape_is_an_error():
    with pytest.raises(
        QuantizerSolveError,
        match=r"A: per-channel activation scaling needs "
        r"per_channel_broadcastable_shape",
    ):
        A.let(scaling_per_output_type="channel").scaling_shape


@pytest.mark.parametrize(
    "impl_type, has_hook",
    [("parameter", True), ("parameter_from_stats", True), ("stats", False), ("const", False)],
)
def test_update_state_dict_impl(impl_type, has_hook):
    hook = A.let(scaling_impl_type=impl_type).update_state_dict_impl
    assert isinstance(hook, ConvertRuntimeStatsToParameter) == has_hook
    if not has_hook:
        assert hook is None


SCALING = "act.fused_activation_quant_proxy.tensor_quant.scaling_impl"


def test_stats_only_checkpoint_gets_the_parameter_from_the_statistic():
    hook = ConvertRuntimeStatsToParameter(LogFloatRestrictValue())
    stats = torch.tensor([-4.0, 0.5])
    state = {
        f"{SCALING}.runtime_stats.running_stats": stats,
        f"{SCALING}.runtime_stats.counter": torch.tensor(3),
        "act.other": torch.tensor(1.0),
    }
    hook("act.", state)
    # |stats| moved into the log domain of the restriction; the statistics are dropped.
    assert set(state) == {f"{SCALING}.value", "act.other"}
    assert torch.equal(state[f"{SCALING}.value"], torch.log2(torch.tensor([4.0, 0.5])))


def test_existing_parameter_is_kept_and_statistics_dropped():
    hook = ConvertRuntimeStatsToParameter(FloatRestrictValue())
    state = {
        f"{SCALING}.runtime_stats.running_stats": torch.tensor(9.0),
        f"{SCALING}.value": torch.tensor(0.25),
    }
    hook("act.", state)
    assert state == {f"{SCALING}.value": torch.tensor(0.25)}
