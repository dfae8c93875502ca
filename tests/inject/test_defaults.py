"""brevitas_cpp.inject.defaults: Brevitas's brevitas.inject.defaults re-exports the quantizers
of brevitas.quant.base and brevitas.quant.scaled_int; here the same names map to the same
objects of brevitas_cpp.quant, for every one of Brevitas's names this library has (recorded in
tests/golden/brevitas_0_12_modules.pt)."""

import os

import torch

import brevitas_cpp.inject.defaults as defaults
import brevitas_cpp.quant.base as base
import brevitas_cpp.quant.scaled_int as scaled_int
from brevitas_cpp.nn import QuantLinear

GOLDEN_FILE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    "golden",
    "brevitas_0_12_modules.pt",
)
BREVITAS_NAMES = torch.load(GOLDEN_FILE)["defaults"]  # name -> Brevitas module

# Present in brevitas_cpp.quant today; the list only grows as quantizers are added.
AVAILABLE = {
    "BatchQuantStatsScaling1d", "BatchQuantStatsScaling2d", "Int16Bias", "Int24Bias",
    "Int32Bias", "Int8ActPerTensorFloat", "Int8ActPerTensorFloatMinMaxInit", "Int8Bias",
    "Int8BiasPerTensorFloatInternalScaling", "Int8WeightPerChannelFloat",
    "Int8WeightPerTensorFloat", "IntBias", "IntQuant", "MaxStatsScaling", "MinMaxStatsScaling",
    "NarrowIntQuant", "ParamFromRuntimeMinMaxScaling", "ParamFromRuntimePercentileIntervalScaling",
    "ParamFromRuntimePercentileScaling", "ParamMinMaxInitScaling", "PerChannelFloatScaling8bit",
    "PerChannelPoTScaling8bit", "PerTensorFloatScaling8bit", "PerTensorPoTScaling8bit",
    "RoundTo8bit", "ShiftedMinUintQuant", "ShiftedParamFromPercentileUintQuant",
    "SignedBinaryClampedConst", "TruncTo8bit", "Uint8ActPerTensorFloat",
    "Uint8ActPerTensorFloatMaxInit", "UintQuant",
}  # fmt: skip


def test_brevitas_names_map_to_brevitas_cpp_quantizers():
    assert AVAILABLE <= set(BREVITAS_NAMES)
    for name, module in BREVITAS_NAMES.items():
        ours = base if module == "brevitas.quant.base" else scaled_int
        if name in AVAILABLE or name in vars(ours):  # not the stubs of unsupported names
            assert getattr(defaults, name) is getattr(ours, name), name


def test_exports_exactly_base_and_scaled_int():
    assert set(defaults.__all__) == set(base.__all__) | set(scaled_int.__all__)
    for name in defaults.__all__:
        assert getattr(defaults, name) is getattr(base, name, getattr(scaled_int, name, None))


def test_usable_in_a_layer():
    layer = QuantLinear(4, 2, weight_quant=defaults.Int8WeightPerTensorFloat)
    w = layer.weight.detach()
    assert torch.allclose(layer.quant_weight().scale, w.abs().max() / 127)
