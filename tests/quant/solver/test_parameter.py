"""Parameter solver mixins: scale initialisers, the clamp choice, the scale block per
ScalingImplType and the scale shape."""

import math

import pytest
import torch

from brevitas_cpp.core.function_wrapper import Identity, TensorClamp, TensorClampSte
from brevitas_cpp.quant.solver import QuantizerSolveError
from brevitas_cpp.quant.solver.parameter import (
    HeScalingInit,
    ScalingConstInit,
    SolveInputViewImpl,
    SolveParameterScalingImplFromEnum,
    SolveParameterScalingInitFromEnum,
    SolveParameterScalingShape,
    SolveParameterTensorClampImplFromEnum,
)


def test_he_init_averages_sqrt_two_over_fan_in():
    a = torch.nn.Parameter(torch.zeros(4, 3, 3, 3))  # fan-in 27
    b = torch.nn.Parameter(torch.zeros(5, 8))  # fan-in 8
    expected = (math.sqrt(2.0 / 27) + math.sqrt(2.0 / 8)) / 2
    init = HeScalingInit([a, b])()
    assert init.dtype == torch.float32
    assert torch.equal(init, torch.tensor(expected))


def test_he_init_needs_a_parameter():
    with pytest.raises(
        QuantizerSolveError, match=r"HeScalingInit: tracked_parameter_list is empty"
    ):
        HeScalingInit([])


def test_const_init_returns_the_constant():
    assert ScalingConstInit(0.25)() == 0.25


class Init(SolveParameterScalingInitFromEnum):
    scaling_const = 0.25


@pytest.mark.parametrize("impl_type", ["const", "parameter"])
def test_scaling_init_from_the_constant(impl_type):
    quant = Init.let(scaling_impl_type=impl_type)
    assert isinstance(quant.scaling_init_impl, ScalingConstInit)
    assert torch.equal(quant.scaling_init, torch.tensor(0.25))


def test_scaling_init_he():
    w = torch.nn.Parameter(torch.randn(6, 2, 5))
    quant = Init.let(scaling_impl_type="he", tracked_parameter_list=[w])
    assert torch.equal(quant.scaling_init, torch.tensor(math.sqrt(2.0 / 10)))


@pytest.mark.parametrize("impl_type", ["stats", "affine_stats", "parameter_from_stats"])
def test_no_scaling_init_for_statistics(impl_type):
    quant = Init.let(scaling_impl_type=impl_type)
    assert quant.scaling_init_impl is None and quant.scaling_init is None


def test_scaling_init_tensor_is_detached():
    learned = torch.tensor(0.5, requires_grad=True)
    quant = Init.let(scaling_impl_type="const", scaling_const=learned * 2)
    assert not quant.scaling_init.requires_grad
    assert torch.equal(quant.scaling_init, torch.tensor(1.0))


class Clamp(SolveParameterTensorClampImplFromEnum):
    pass


@pytest.mark.parametrize("bit_width_impl_type", ["const", "parameter", "stateful_const"])
@pytest.mark.parametrize(
    "scaling_impl_type",
    ["he", "const", "stats", "affine_stats", "parameter", "parameter_from_stats"],
)
def test_clamp_masks_the_gradient_when_scale_or_bit_width_is_learned(
    bit_width_impl_type, scaling_impl_type
):
    learned = bit_width_impl_type == "parameter" or scaling_impl_type in (
        "affine_stats",
        "parameter",
        "parameter_from_stats",
    )
    impl = Clamp.let(
        bit_width_impl_type=bit_width_impl_type, scaling_impl_type=scaling_impl_type
    ).tensor_clamp_impl
    assert type(impl) is (TensorClamp if learned else TensorClampSte)


class Scaling(SolveParameterScalingImplFromEnum):
    pass


# Which block each ScalingImplType builds is checked on full quantizers in test_weight.py.
def test_no_scaling_impl_type_means_no_scale():
    assert Scaling.scaling_impl is None


def test_unknown_scaling_impl_type():
    with pytest.raises(
        QuantizerSolveError,
        match=r"Scaling: scaling_impl_type='learned' is not a "
        r"valid ScalingImplType",
    ):
        Scaling.let(scaling_impl_type="learned").scaling_impl


class Shape(SolveParameterScalingShape, SolveInputViewImpl):
    scaling_per_output_channel_shape = (7, 1)


def test_scaling_shape():
    assert Shape.let(scaling_per_output="tensor").scaling_shape == ()
    assert Shape.let(scaling_per_output="channel").scaling_shape == (7, 1)
    assert type(Shape.let(scaling_per_output="channel").input_view_impl) is Identity
