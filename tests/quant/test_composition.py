"""Composing quantizers the Brevitas way: inheritance, .let(), mixins listed first, blocks
declared directly; every ready-made quantizer builds; import paths; injection-time errors."""

import pytest
import torch
from helpers import rand
from torch import nn

import brevitas_cpp.quant as quant_pkg
from brevitas_cpp.config import JIT_ENABLED
from brevitas_cpp.core.function_wrapper import FloorSte
from brevitas_cpp.core.restrict_val import PowerOfTwoRestrictValue
from brevitas_cpp.core.scaling import ConstScaling
from brevitas_cpp.quant import (
    Int8ActPerTensorFloat,
    Int8WeightPerChannelFloat,
    Int8WeightPerTensorFloat,
)
from brevitas_cpp.quant.base import PerTensorPoTScaling8bit
from brevitas_cpp.quant.solver import QuantizerSolveError


class Int4WeightPerChannelFloat(Int8WeightPerChannelFloat):
    bit_width = 4


def test_inheritance_changes_one_setting():
    torch.manual_seed(0)
    layer = nn.Conv2d(2, 3, 3)
    quant = Int4WeightPerChannelFloat.let(module=layer, tracked_parameter_list=[layer.weight])
    tq = quant.tensor_quant
    w = layer.weight.detach()
    s = w.abs().amax(dim=(1, 2, 3), keepdim=True) / torch.tensor(7.0)
    y, scale, _, bit_width = tq(layer.weight)
    assert torch.equal(bit_width, torch.tensor(4.0)) and torch.equal(scale, s)
    assert torch.equal(y, torch.clamp(torch.round(w / s), -7.0, 7.0) * s)
    # The parent is untouched.
    assert Int8WeightPerChannelFloat.bit_width == 8


def test_let_changes_settings_without_a_class():
    w = nn.Parameter(rand((5, 4), seed=1))
    quant = Int8WeightPerTensorFloat.let(
        tracked_parameter_list=[w], bit_width=3, float_to_int_impl_type="floor"
    )
    y, scale, _, _ = quant.tensor_quant(w)
    s = w.detach().abs().max() / torch.tensor(3.0)
    assert torch.equal(y, torch.clamp(torch.floor(w.detach() / s), -3.0, 3.0) * s)
    assert Int8WeightPerTensorFloat.float_to_int_impl_type == "round"


def test_first_listed_mixin_wins():
    class PoTWeight(PerTensorPoTScaling8bit, Int8WeightPerTensorFloat):
        pass

    w = nn.Parameter(rand((5, 4), seed=2))
    quant = PoTWeight.let(tracked_parameter_list=[w])
    assert type(quant.restrict_scaling_impl) is PowerOfTwoRestrictValue
    scale = quant.tensor_quant(w)[1]
    exponent = torch.ceil(torch.log2(w.detach().abs().max()))
    expected = torch.tensor(2.0) ** exponent / torch.tensor(128.0)
    assert torch.equal(scale, expected)


def test_declared_blocks_override_the_solver():
    class FloorConstAct(Int8ActPerTensorFloat):
        float_to_int_impl = FloorSte
        scaling_impl = ConstScaling
        scaling_init = 2.0

    tq = FloorConstAct.tensor_quant
    assert type(tq.scaling_impl) is ConstScaling
    assert type(tq.int_quant.float_to_int_impl) is FloorSte
    x = rand((4, 6), seed=3)
    y, scale, _, _ = tq(x)
    s = torch.tensor(2.0) / torch.tensor(128.0)
    assert torch.equal(scale, s)
    assert torch.equal(y, torch.clamp(torch.floor(x / s), -128.0, 127.0) * s)


def test_solver_import_paths_match_brevitas():
    from brevitas_cpp.quant.solver import (
        ActQuantSolver,
        BiasQuantSolver,
        TruncQuantSolver,
        WeightQuantSolver,
    )
    from brevitas_cpp.quant.solver.act import ActQuantSolver as ActFromSubmodule
    from brevitas_cpp.quant.solver.bias import BiasQuantSolver as BiasFromSubmodule
    from brevitas_cpp.quant.solver.trunc import TruncQuantSolver as TruncFromSubmodule
    from brevitas_cpp.quant.solver.weight import WeightQuantSolver as WeightFromSubmodule

    assert WeightQuantSolver is WeightFromSubmodule
    assert ActQuantSolver is ActFromSubmodule
    assert BiasQuantSolver is BiasFromSubmodule
    assert TruncQuantSolver is TruncFromSubmodule


def build(name):
    """The tensor quantizer of an exported quantizer, in the context its kind of proxy gives,
    and a call of it."""
    q = getattr(quant_pkg, name)
    torch.manual_seed(0)
    layer = nn.Conv2d(3, 4, 3)
    # An MSE or HQO search calls the proxy that owns it: built by its proxy.
    if name.endswith(("MSE", "HQO")):
        if "Weight" in name:
            tq = q.proxy_class(layer, q).tensor_quant
            return tq, lambda: tq(layer.weight.detach().clone())
        tq = q.proxy_class(nn.Identity(), q).fused_activation_quant_proxy.tensor_quant
        return tq, lambda: tq(rand((3, 5), seed=4))
    if "Weight" in name:
        tq = q.let(module=layer, tracked_parameter_list=[layer.weight]).tensor_quant
        if "AccumulatorAware" in name:  # also given the quantized input's bit width and sign
            return tq, lambda: tq(layer.weight.detach().clone(), torch.tensor(8.0), True)
        return tq, lambda: tq(layer.weight.detach().clone())
    if "Bias" in name:
        tq = q.let(module=layer, tracked_parameter_list=[layer.bias]).tensor_quant
        if q.requires_input_scale:
            return tq, lambda: tq(layer.bias, torch.tensor(0.01))
        return tq, lambda: tq(layer.bias)
    if name.startswith(("Trunc", "Round")):
        tq = q.tensor_quant
        x = torch.arange(-20.0, 20.0) * 0.5
        return tq, lambda: tq(x, torch.tensor(0.5), torch.tensor(0.0), torch.tensor(12.0), True)
    tq = q.let(min_val=-1.0, max_val=1.0).tensor_quant
    # BatchQuant statistics permute (N, C, F) or (N, C, H, W) inputs: channels first.
    shape = {"1d": (2, 3, 5), "2d": (2, 3, 2, 2)}.get(name[-2:], (3, 5))
    return tq, lambda: tq(rand(shape, seed=4))


# IntBias leaves bit_width to the user (test_scaled_int checks the error), and
# ShiftedUint8WeightGroupQuantFloat its group_size (test_groupwise checks the error).
LEFT_TO_THE_USER = ("IntBias", "ShiftedUint8WeightGroupQuantFloat")


@pytest.mark.parametrize(
    "name",
    sorted(n for n in quant_pkg.__all__ if not n.startswith("None") and n not in LEFT_TO_THE_USER),
)
def test_every_quantizer_builds_runs_and_scripts(name):
    tq, call = build(name)
    # Decoupled quantizers append their pre-clipping scale and zero point.
    y, scale, zero_point, bit_width = call()[:4]
    assert torch.isfinite(y).all() and bool((scale > 0).all())
    widths = (1.0, 2.0, 4.0, 8.0, 16.0, 24.0, 32.0)
    if name.startswith("RangeLinear"):
        # Distiller's SYMMETRIC mode rounds max|x| * 127.5 / max|x| to 128: b + 1 bits.
        widths = (9.0, 33.0)
    assert float(bit_width) in widths
    if JIT_ENABLED:
        assert isinstance(tq, torch.jit.ScriptModule)


def test_quantizer_lists_match_brevitas_names():
    expected = {
        "Int8WeightPerTensorFloat",
        "Int8WeightPerChannelFloat",
        "Int8ActPerTensorFloat",
        "Uint8ActPerTensorFloat",
        "Int8ActPerTensorFloatMinMaxInit",
        "Uint8ActPerTensorFloatMaxInit",
        "IntBias",
        "Int8Bias",
        "Int16Bias",
        "Int24Bias",
        "Int32Bias",
        "Int8BiasPerTensorFloatInternalScaling",
        "TruncTo8bit",
        "RoundTo8bit",
        "ShiftedUint8WeightPerTensorFloat",
        "ShiftedUint8WeightPerChannelFloat",
        "ShiftedUint8WeightGroupQuantFloat",
        "Int8ActPerTensorFloatBatchQuant1d",
        "Int8ActPerTensorFloatBatchQuant2d",
        "Uint8ActPerTensorFloatBatchQuant1d",
        "Uint8ActPerTensorFloatBatchQuant2d",
        "Int8WeightPerTensorFloatHQO",
        "Int8WeightPerChannelFloatHQO",
        "ShiftedUint8WeightPerTensorFloatHQO",
        "ShiftedUint8WeightPerChannelFloatHQO",
        "ShiftedUint8WeightPerGroupFloatHQO",
        "ShiftedUint8ActPerTensorFloatHQO",
        "ShiftedUint8ActPerTensorFloat",
        "Int8WeightPerTensorFixedPoint",
        "Int8WeightPerChannelFixedPoint",
        "Int8ActPerTensorFixedPoint",
        "Uint8ActPerTensorFixedPoint",
        "Int8BiasPerTensorFixedPointInternalScaling",
        "Uint8ActPerTensorFixedPointMaxInit",
        "ShiftedUint8ActPerTensorFixedPoint",
        "Int8WeightPerTensorFloatMSE",
        "Int8WeightPerChannelFloatMSE",
        "Int8ActPerTensorFloatMSE",
        "Uint8ActPerTensorFloatMSE",
        "ShiftedUint8ActPerTensorFixedPointMSE",
        "ShiftedUint8ActPerTensorFloatMSE",
        "ShiftedUint8WeightPerTensorFloatMSE",
        "ShiftedUint8WeightPerChannelFloatMSE",
        "Int8WeightPerTensorFixedPointMSE",
        "Int8WeightPerChannelFixedPointMSE",
        "Int8ActPerTensorFixedPointMSE",
        "Uint8ActPerTensorFixedPointMSE",
        "Int4WeightPerTensorFixedPointDecoupled",
        "Int4WeightPerTensorFloatDecoupled",
        "Int8WeightPerChannelFloatDecoupled",
        "Int8WeightNormL2PerChannelFixedPoint",
        "Int8AccumulatorAwareWeightQuant",
        "Int8AccumulatorAwareZeroCenterWeightQuant",
        "SignedBinaryWeightPerTensorConst",
        "SignedBinaryActPerTensorConst",
        "SignedTernaryWeightPerTensorConst",
        "SignedTernaryActPerTensorConst",
        "NoneWeightQuant",
        "NoneActQuant",
        "NoneBiasQuant",
        "NoneTruncQuant",
    }
    # Besides Brevitas's names, seed 003's quantizers (tests/quant/test_int8_ema.py).
    seed_003 = {
        "Int8WeightPerTensorMaxAbs",
        "Int8WeightPerChannelMaxAbs",
        "Int8WeightPerChannelMaxAbsPower2",
        "Int8ActPerTensorEma",
        "Int8ActPerTensorEmaPower2",
    }
    # And Distiller's QAT methods (tests/quant/test_distiller_quantizers.py).
    distiller = {
        "ClippedActQuant",
        "PACTActQuant",
        "DorefaWeightQuant",
        "RangeLinearActQuant",
        "RangeLinearWeightQuant",
        "RangeLinearBiasQuant",
    }
    assert set(quant_pkg.__all__) == expected | seed_003 | distiller


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(bit_width=0), r"Int8WeightPerTensorFloat: bit_width must be an int >= 1, got 0"),
        (dict(bit_width=7.5), r"Int8WeightPerTensorFloat: bit_width must be an int >= 1, got 7.5"),
        (
            dict(restrict_scaling_type="log2"),
            r"Int8WeightPerTensorFloat: restrict_scaling_type='log2' is not a valid RestrictValueType; "
            r"accepted \(case-insensitive\): FP, LOG_FP, INT, POWER_OF_TWO",
        ),
        (
            dict(scaling_stats_op="mean"),
            r"Int8WeightPerTensorFloat: scaling_stats_op='mean' is not a valid StatsOp",
        ),
        (
            dict(scaling_impl_type="learned"),
            r"Int8WeightPerTensorFloat: scaling_impl_type='learned' is not a valid ScalingImplType",
        ),
    ],
)
def test_injection_time_errors_name_quantizer_and_attribute(kwargs, message):
    w = nn.Parameter(rand((3, 4), seed=5))
    with pytest.raises(QuantizerSolveError, match=message):
        Int8WeightPerTensorFloat.let(tracked_parameter_list=[w], **kwargs).tensor_quant


def test_per_channel_weights_without_the_layer():
    w = nn.Parameter(rand((3, 4), seed=6))
    with pytest.raises(
        QuantizerSolveError,
        match=r"Int8WeightPerChannelFloat: .* no `module` "
        r"was given",
    ):
        Int8WeightPerChannelFloat.let(tracked_parameter_list=[w]).tensor_quant
