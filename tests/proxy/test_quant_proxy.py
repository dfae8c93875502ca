"""What every proxy shares: re-initialisation on state_dict load, loading float checkpoints
(quantizer values derived from statistics are never missing), shared proxies in a state_dict,
legacy keys, tracked modules and the export switch."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from brevitas_cpp import config
from brevitas_cpp.inject.enum import ScalingImplType, StatsOp
from brevitas_cpp.proxy import (
    ActQuantProxyFromInjector,
    BiasQuantProxyFromInjector,
    QuantProxyProtocol,
    TruncQuantProxyFromInjector,
    WeightQuantProxyFromInjector,
)
from brevitas_cpp.quant import (
    Int8ActPerTensorFloat,
    Int8ActPerTensorFloatMinMaxInit,
    Int8WeightPerChannelFloat,
    Int8WeightPerTensorFloat,
    Int16Bias,
    TruncTo8bit,
)

LEARNED_WEIGHT = Int8WeightPerTensorFloat.let(
    scaling_impl_type=ScalingImplType.PARAMETER_FROM_STATS
)
INPUT = Int8ActPerTensorFloat.let(scaling_stats_op=StatsOp.MAX, collect_stats_steps=2)
INPUT_VALUE_KEY = "input_quant.fused_activation_quant_proxy.tensor_quant.scaling_impl.value"


class StandInQuantConv(nn.Module):
    """A conv layer as the quant layers build it: parameters plus input/weight/bias proxies."""

    def __init__(
        self, weight_quant=LEARNED_WEIGHT, bias_quant=Int16Bias, input_quant=INPUT, seed: int = 0
    ):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.weight = nn.Parameter(torch.randn(4, 3, 3, 3, generator=g))
        self.bias = nn.Parameter(torch.randn(4, generator=g))
        self.out_channels = 4
        self.output_channel_dim = 0
        self.input_quant = ActQuantProxyFromInjector(self, input_quant)
        self.weight_quant = WeightQuantProxyFromInjector(self, weight_quant)
        self.bias_quant = BiasQuantProxyFromInjector(self, bias_quant)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        qx = self.input_quant(x)
        qw = self.weight_quant(self.weight)
        qb = self.bias_quant(self.bias, qx, qw)
        return F.conv2d(qx.value, qw.value, qb.value)


def float_checkpoint(seed: int = 7):
    torch.manual_seed(seed)
    return nn.Conv2d(3, 4, 3).state_dict()


def inputs(n: int = 3):
    g = torch.Generator().manual_seed(11)
    return [torch.randn(2, 3, 6, 6, generator=g) for _ in range(n)]


def test_float_checkpoint_loads_strictly_and_quantizers_follow_the_new_weights():
    layer = StandInQuantConv()
    for x in inputs():
        layer(x)  # initialises the learned weight scale and the input scale
    assert INPUT_VALUE_KEY in layer.state_dict()
    old_weight_quant = layer.weight_quant.tensor_quant
    checkpoint = float_checkpoint()
    result = layer.load_state_dict(checkpoint, strict=True)
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert layer.weight_quant.tensor_quant is not old_weight_quant
    # Re-derived from the loaded weight, not kept from the old one.
    new_scale = layer.weight_quant.scale()
    assert torch.equal(new_scale, checkpoint["weight"].abs().max() / 127)
    # The input quantizer starts its statistics warm-up again.
    x = inputs(1)[0]
    assert torch.equal(layer.input_quant(x).scale, x.abs().max() / 128)


def test_reinit_can_be_turned_off(monkeypatch):
    layer = StandInQuantConv()
    layer(inputs(1)[0])
    old_scale = layer.weight_quant.scale().detach().clone()
    old = layer.weight_quant.tensor_quant
    monkeypatch.setattr(config, "REINIT_ON_STATE_DICT_LOAD", False)
    layer.load_state_dict(float_checkpoint(), strict=True)
    assert layer.weight_quant.tensor_quant is old
    assert torch.equal(layer.weight_quant.scale(), old_scale)


def test_quantized_checkpoint_round_trip():
    layer = StandInQuantConv(seed=0)
    for x in inputs():
        layer(x)
    saved = layer.state_dict()
    weight_value_key = "weight_quant.tensor_quant.scaling_impl.value"
    assert set(saved) == {"weight", "bias", INPUT_VALUE_KEY, weight_value_key}
    other = StandInQuantConv(seed=1)
    other.load_state_dict(saved, strict=True)
    layer.eval(), other.eval()
    x = inputs(1)[0]
    assert torch.equal(layer(x), other(x))
    # The loaded learned scale wins over statistics of the loaded weight.
    with torch.no_grad():
        layer.weight_quant.tensor_quant.scaling_impl.value.mul_(2)
    other.load_state_dict(layer.state_dict(), strict=True)
    assert torch.equal(other.weight_quant.scale(), layer.weight_quant.scale())


def test_missing_values_not_derived_from_statistics_are_still_reported():
    # A learned scale initialised from the user's min/max is not re-derived from anything.
    quant = Int8ActPerTensorFloatMinMaxInit.let(min_val=-1.0, max_val=1.0)
    layer = StandInQuantConv(input_quant=quant)
    result = layer.load_state_dict(float_checkpoint(), strict=False)
    assert result.missing_keys == [INPUT_VALUE_KEY]
    with pytest.raises(RuntimeError, match="Missing key"):
        layer.load_state_dict(float_checkpoint(), strict=True)


def test_shared_weight_proxy_float_checkpoint():
    model = nn.Module()
    model.a = StandInQuantConv(weight_quant=Int8WeightPerChannelFloat, seed=0)
    model.b = StandInQuantConv(weight_quant=Int8WeightPerChannelFloat, seed=1)
    model.a.weight_quant.add_tracked_module(model.b)
    model.b.weight_quant = model.a.weight_quant
    keys = set(model.state_dict())
    assert {"a.weight", "b.weight"} <= keys
    checkpoint = {}
    for name, seed in (("a", 3), ("b", 4)):
        for key, tensor in float_checkpoint(seed).items():
            checkpoint[f"{name}.{key}"] = tensor
    result = model.load_state_dict(checkpoint, strict=True)
    assert result.missing_keys == []
    rows = torch.cat([checkpoint["a.weight"].flatten(1), checkpoint["b.weight"].flatten(1)], dim=1)
    scale = (rows.abs().max(dim=1).values / 127).view(4, 1, 1, 1)
    assert torch.equal(model.b.weight_quant(model.b.weight).scale, scale)


def test_legacy_sentinel_keys_are_not_unexpected():
    layer = StandInQuantConv()
    checkpoint = dict(float_checkpoint())
    checkpoint["weight_quant.zero_hw_sentinel"] = torch.tensor(0.0)
    checkpoint["input_quant.zero_hw_sentinel"] = torch.tensor(0.0)
    result = layer.load_state_dict(checkpoint, strict=True)
    assert result.unexpected_keys == []

    model = nn.Module()
    model.layer = nn.Module()
    model.layer.trunc_quant = TruncQuantProxyFromInjector(model.layer, TruncTo8bit)
    result = model.load_state_dict(
        {
            "layer.trunc_quant.zero_hw_sentinel": torch.tensor(0.0),
            "layer.accumulator_quant.zero_hw_sentinel": torch.tensor(0.0),
        },
        strict=True,
    )
    assert result.unexpected_keys == []


def test_add_tracked_module_rejects_none():
    proxy = WeightQuantProxyFromInjector(StandInQuantConv(), Int8WeightPerTensorFloat)
    with pytest.raises(
        RuntimeError,
        match=r"WeightQuantProxyFromInjector.add_tracked_module: "
        r"module must be a layer \(an nn.Module\), got None",
    ):
        proxy.add_tracked_module(None)
    assert len(proxy.tracked_module_list) == 1


def test_export_mode_switch():
    proxy = WeightQuantProxyFromInjector(StandInQuantConv(), Int8WeightPerTensorFloat)
    assert proxy.export_mode is False and proxy.export_handler is None
    assert proxy.requires_export_handler
    with pytest.raises(
        RuntimeError,
        match="WeightQuantProxyFromInjector: export mode can only be entered in eval mode",
    ):
        proxy.export_mode = True
    proxy.eval()
    with pytest.warns(UserWarning, match="no export handler"):
        proxy.export_mode = True
    assert proxy.export_mode is False
    proxy.export_mode = False
    assert proxy.export_mode is False


def test_every_proxy_follows_the_protocol():
    layer = StandInQuantConv()
    trunc = TruncQuantProxyFromInjector(layer, TruncTo8bit)
    for proxy in (layer.input_quant, layer.weight_quant, layer.bias_quant, trunc):
        assert isinstance(proxy, QuantProxyProtocol)
    assert not isinstance(nn.Linear(2, 2), QuantProxyProtocol)


@pytest.mark.parametrize(
    "bad",
    [None, Int8WeightPerTensorFloat.let, 3, nn.Linear],
    ids=["None", "method", "int", "module_class"],
)
def test_quant_injector_must_be_a_quantizer_class(bad):
    with pytest.raises(
        TypeError,
        match=r"WeightQuantProxyFromInjector: quant_injector must be a "
        r"quantizer class \(an ExtendedInjector subclass",
    ):
        WeightQuantProxyFromInjector(StandInQuantConv(), bad)


def test_quant_layer_must_be_a_module():
    with pytest.raises(
        TypeError,
        match=r"ActQuantProxyFromInjector: quant_layer must be the layer "
        r"to quantize for \(an nn.Module\), got None",
    ):
        ActQuantProxyFromInjector(None, INPUT)
