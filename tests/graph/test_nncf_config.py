"""Quantizer.from_nncf_config: NNCF JSON configs, written here in NNCF's own format (its schema,
nncf/config/schemata/, and the quantization configs of its samples, without the samples' own
keys), read into quant layers, checked layer by layer; the initializer run over data; and the
configs this reader refuses, each by name."""

import copy
import json
import warnings

import pytest
import torch
from graph.test_nncf_scopes import MobileNetV2, ResNet
from torch import nn

from brevitas_cpp import nn as qnn
from brevitas_cpp.graph import Quantizer
from brevitas_cpp.graph.nncf import example_inputs, load_nncf_config
from brevitas_cpp.inject.enum import StatsOp

# NNCF's resnet18 int8 sample (examples/torch/classification/configs/quantization/), at this
# model's input size, with the classifier and the downsample convolutions kept in float.
RESNET18_INT8 = """
{
    "input_info": {"sample_size": [1, 3, 32, 32]},
    "compression": {
        "algorithm": "quantization",
        "initializer": {
            "range": {"num_init_samples": 8},
            "batchnorm_adaptation": {"num_bn_adaptation_samples": 8}
        },
        "ignored_scopes": ["ResNet/NNCFLinear[fc]/linear_0", "{re}.*downsample.*"]
    }
}
"""

# Per-channel asymmetric 4-bit weights (TRIAL: no hardware config to hold them to 8 bits), the
# "mixed" preset's asymmetric activations on 6 bits, and a scope for the activations only.
MOBILENET_V2_ASYMMETRIC = """
{
    "input_info": [{"sample_size": [2, 3, 16, 16], "filler": "random"}],
    "target_device": "TRIAL",
    "compression": {
        "algorithm": "quantization",
        "preset": "mixed",
        "quantize_inputs": false,
        "weights": {"mode": "asymmetric", "per_channel": true, "bits": 4},
        "activations": {"bits": 6, "ignored_scopes": ["{re}Conv2dNormActivation\\\\[4\\\\]"]},
        "initializer": {"range": {"num_init_samples": 4, "type": "mean_min_max"}}
    }
}
"""

# compression as a list of algorithms (here the one quantization), per-tensor weights, signed
# activations, and the overflow fix on the first convolution only.
RESNET18_LIST = """
{
    "input_info": {"sample_size": [1, 3, 32, 32]},
    "target_device": "CPU",
    "compression": [
        {
            "algorithm": "quantization",
            "overflow_fix": "first_layer_only",
            "weights": {"per_channel": false},
            "activations": {"mode": "symmetric", "signed": true},
            "target_scopes": ["{re}ResNet/NNCFConv2d\\\\[conv1\\\\]", "{re}layer1", "ResNet/ReLU[relu]"]
        }
    ]
}
"""


def write(tmp_path, text, name="nncf.json"):
    path = tmp_path / name
    path.write_text(text)
    return path


def quantized(model, config, **kwargs):
    quantizer = Quantizer.from_nncf_config(model, config, **kwargs)
    return quantizer, quantizer.prepare_model()


def weight_settings(layer):
    """(quantizer, bit width, narrow range, per-channel) of a quant layer's weights."""
    weight = layer.quant_weight()
    return (
        layer.weight_quant.quant_injector.__name__,
        int(weight.bit_width),
        layer.weight_quant.is_narrow_range,
        weight.scale.numel() > 1,
    )


def act_settings(proxy):
    """(quantizer, bit width, signed, statistic) of an activation quantizer."""
    injector = proxy.quant_injector
    return (injector.__name__, int(proxy.bit_width()), proxy.is_signed, injector.scaling_stats_op)


def test_resnet18_int8(tmp_path):
    config = load_nncf_config(write(tmp_path, RESNET18_INT8))
    algo = config["quantization"]
    # NNCF's defaults where the file is silent.
    assert config["target_device"] == "ANY" and algo["preset"] == "performance"
    assert algo["quantize_inputs"] is True and algo["overflow_fix"] == "enable"
    assert algo["weights"]["mode"] == "symmetric" and algo["weights"]["per_channel"] is True
    assert algo["activations"]["mode"] == "symmetric" and algo["activations"]["signed"] is None
    assert algo["initializer"]["range"] == {"num_init_samples": 8, "type": "mixed_min_max"}

    torch.manual_seed(0)
    quantizer, model = quantized(ResNet(), write(tmp_path, RESNET18_INT8))
    stats = quantizer.statistics()
    assert sorted(stats["kept_float"]) == ["fc"] + [f"layer{i}.0.downsample.0" for i in (2, 3, 4)]
    assert type(model.fc) is nn.Linear and type(model.layer2[0].downsample[0]) is nn.Conv2d
    convs = [n for n, m in model.named_modules() if isinstance(m, qnn.QuantConv2d)]
    assert len(convs) == 17
    # The overflow fix on ANY: every 8-bit weight on half its range, 7 bits, NNCF's step
    # max |w| / 63 per output channel.
    for name in convs:
        layer = model.get_submodule(name)
        assert weight_settings(layer) == ("Int8WeightPerChannelFloat", 7, True, True), name
        weight = layer.quant_weight()
        assert weight.int().abs().amax(dim=(1, 2, 3)).eq(63).all()
        torch.testing.assert_close(
            weight.scale.flatten() * 63, layer.weight.abs().amax(dim=(1, 2, 3)), rtol=1e-6, atol=0
        )
    relus = [n for n, m in model.named_modules() if isinstance(m, qnn.QuantReLU)]
    assert len(relus) == 9
    for name in relus:
        proxy = model.get_submodule(name).act_quant
        assert act_settings(proxy) == ("Uint8ActPerTensorFloat", 8, False, StatsOp.MAX), name
    # quantize_inputs: the model input, as the input quantizer of the convolution reading it.
    assert act_settings(model.conv1.input_quant) == (
        "Int8ActPerTensorFloat",
        8,
        True,
        StatsOp.MAX,
    )
    assert not model.layer1[0].conv1.input_quant.is_quant_enabled


def test_resnet18_initialization_is_nncf_range_init_then_bn_adaptation(tmp_path):
    torch.manual_seed(0)
    float_model = ResNet().eval()
    quantizer, model = quantized(copy.deepcopy(float_model), write(tmp_path, RESNET18_INT8))
    data = [(torch.randn(4, 3, 32, 32), torch.zeros(4)) for _ in range(3)]
    # NNCF's mean of per-sample maxima, taken on the float model: the stem's ReLU output (one
    # call per forward) and the model input.
    seen = []
    handle = float_model.relu.register_forward_hook(lambda m, i, o: seen.append(o.amax()))
    with torch.no_grad():
        for x, _ in data[:2]:
            for sample in x.split(1):
                float_model(sample)
    handle.remove()
    inputs = torch.cat([x for x, _ in data[:2]])
    running_mean = model.bn1.running_mean.clone()
    model.train()
    counts = quantizer.nncf_initialization.run(model, data)
    # 8 samples each: two whole batches of 4.
    assert counts == {"range_init_samples": 8, "bn_adaptation_samples": 8}
    relu_max = torch.stack(seen).mean()
    torch.testing.assert_close(model.relu.act_quant.scale() * 255, relu_max, rtol=1e-5, atol=0)
    input_max = inputs.flatten(1).abs().amax(1).mean()
    torch.testing.assert_close(model.conv1.input_quant.scale() * 127, input_max, rtol=1e-5, atol=0)
    # BatchNorm adaptation moved the running statistics and restored the modes.
    assert not torch.equal(model.bn1.running_mean, running_mean)
    assert all(m.training for m in model.modules())


def test_mobilenet_v2_per_channel_asymmetric(tmp_path):
    torch.manual_seed(0)
    quantizer, model = quantized(MobileNetV2(), write(tmp_path, MOBILENET_V2_ASYMMETRIC))
    # The activations' scope keeps the last ReLU6 in float; its convolution is quantized.
    assert quantizer.statistics()["kept_float"] == ["features.4.2"]
    assert type(model.features[4][2]) is nn.ReLU6
    convs = [n for n, m in model.named_modules() if isinstance(m, qnn.QuantConv2d)]
    assert "features.4.0" in convs and len(convs) == 10
    for name in convs:
        settings = weight_settings(model.get_submodule(name))
        # NNCF's weights are narrow at 8 bits only.
        assert settings == ("ShiftedUint8WeightPerChannelFloat", 4, False, True), name
    assert weight_settings(model.classifier[1]) == (
        "ShiftedUint8WeightPerChannelFloat",
        4,
        False,
        True,
    )
    relu6 = [n for n, m in model.named_modules() if isinstance(m, qnn.QuantReLU)]
    assert len(relu6) == 6
    for name in relu6:
        proxy = model.get_submodule(name).act_quant
        assert act_settings(proxy) == (
            "ShiftedUint8ActPerTensorFloat",
            6,
            False,
            StatsOp.MIN_MAX,
        ), name
    assert not model.features[0][0].input_quant.is_quant_enabled  # quantize_inputs: false
    assert quantizer.nncf_initialization.num_bn_adaptation_samples == 2000  # NNCF's default
    args, kwargs = example_inputs(load_nncf_config(write(tmp_path, MOBILENET_V2_ASYMMETRIC)))
    assert args[0].shape == (2, 3, 16, 16) and not kwargs
    assert args[0].min() >= 0 and args[0].std() > 0  # torch.rand, NNCF's "random"
    model(*args).sum().backward()


def test_a_list_of_algorithms_with_target_scopes(tmp_path):
    torch.manual_seed(0)
    quantizer, model = quantized(ResNet(), write(tmp_path, RESNET18_LIST))
    replaced = sorted(quantizer.replaced)
    assert replaced == sorted(
        ["conv1", "relu"] + [f"layer1.{b}.{m}" for b in (0, 1) for m in ("conv1", "conv2", "relu")]
    )
    # first_layer_only: the stem convolution on half its range, the others 8-bit narrow.
    assert weight_settings(model.conv1) == ("Int8WeightPerTensorFloat", 7, True, False)
    assert weight_settings(model.layer1[0].conv2) == ("Int8WeightPerTensorFloat", 8, True, False)
    assert act_settings(model.layer1[1].relu.act_quant)[:3] == ("Int8ActPerTensorFloat", 8, True)


def test_operation_scopes_of_no_module_are_valid(tmp_path):
    """An NNCF operation that no replaced module computes (a residual add) is a valid entry,
    found by tracing input_info's example; it keeps nothing in float."""
    config = json.loads(RESNET18_INT8)
    config["compression"]["ignored_scopes"] = ["ResNet/Sequential[layer1]/BasicBlock[0]/__iadd___0"]
    quantizer, _ = quantized(ResNet(), config)
    assert quantizer.statistics()["kept_float"] == []


def test_activation_signs_follow_the_activation_when_unset():
    class Acts(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 3, 1)
            self.tanh = nn.Tanh()
            self.sigmoid = nn.Sigmoid()
            self.clip = nn.Hardtanh(-2.0, 2.0)

        def forward(self, x):
            return self.clip(self.sigmoid(self.tanh(self.conv(x))))

    config = {
        "input_info": {"sample_size": [1, 3, 4, 4]},
        "compression": {"algorithm": "quantization"},
    }
    _, model = quantized(Acts(), config)
    assert model.tanh.act_quant.is_signed and model.clip.act_quant.is_signed
    assert not model.sigmoid.act_quant.is_signed


BAD = [
    ({"compresion": {}}, r"unknown key 'compresion'; did you mean NNCF's 'compression'\?"),
    (
        {"compression": {"algorithm": "quantization", "weights": {"granularity": "perchannel"}}},
        r"compression.weights: unknown key\(s\) 'granularity'; NNCF keys read here: mode, bits",
    ),
    (
        {"compression": [{"algorithm": "quantization"}, {"algorithm": "magnitude_sparsity"}]},
        r"compression\[1\]: algorithm 'magnitude_sparsity' is not supported",
    ),
    (
        {"compression": {"algorithm": "filter_pruning"}},
        r"algorithm 'filter_pruning' is not supported",
    ),
    (
        {"compression": {"algorithm": "quantization", "scope_overrides": {}}},
        r"'scope_overrides' is an NNCF key this reader cannot honour",
    ),
    (
        {
            "compression": {
                "algorithm": "quantization",
                "initializer": {"range": {"type": "percentile"}},
            }
        },
        r"range.type: 'percentile' has no brevitas_cpp statistic",
    ),
    (
        {"compression": {"algorithm": "quantization", "initializer": {"precision": {}}}},
        r"'precision' is an NNCF key this reader cannot honour",
    ),
    (
        {"compression": {"algorithm": "quantization", "weights": {"bits": 4}}},
        r"weights.bits: target_device 'ANY' quantizes to 8 or 16 bits",
    ),
    (
        {"compression": {"algorithm": "quantization", "activations": {"per_channel": True}}},
        r"activations.per_channel: true \(per-channel activations\) is not honoured",
    ),
    (
        {"compression": {"algorithm": "quantization", "quantize_outputs": True}},
        r"quantize_outputs: true",
    ),
    ({"target_device": "NPU", "compression": {"algorithm": "quantization"}}, r"'NPU' is not"),
    ({"log_dir": "logs", "compression": {"algorithm": "quantization"}}, r"'log_dir' is an NNCF"),
    ({"input_info": {"sample_size": [1, 3, 8, 8]}}, r"no 'compression' section"),
]


def test_application_keys_beside_nncfs_are_left_to_the_application(tmp_path):
    # NNCF's sample configs hold their training script's settings at the top level.
    config = json.loads(RESNET18_INT8)
    config.update({"model": "resnet18", "batch_size": 256, "epochs": 5, "pretrained": True})
    loaded = load_nncf_config(write(tmp_path, json.dumps(config)))
    assert loaded["application"] == {
        "model": "resnet18",
        "batch_size": 256,
        "epochs": 5,
        "pretrained": True,
    }


@pytest.mark.parametrize("config, message", BAD)
def test_bad_configs_are_refused_by_name(tmp_path, config, message):
    with pytest.raises(ValueError, match=message):
        load_nncf_config(write(tmp_path, json.dumps(config)))


def test_a_scope_selecting_nothing(tmp_path):
    config = json.loads(RESNET18_INT8)
    entry = "ResNet/Sequential[layer1]/BasicBlock[0]/NNCFConv2d[conv3]/conv2d_0"
    config["compression"]["activations"] = {"ignored_scopes": [entry]}
    path = write(tmp_path, json.dumps(config))
    model = ResNet()
    with pytest.raises(ValueError) as info:
        Quantizer.from_nncf_config(model, path)
    message = str(info.value)
    assert "compression.activations.ignored_scopes entries select no module" in message
    assert "ResNet/Sequential[layer1]/BasicBlock[0]/Conv2d[conv1]/conv2d_0" in message
    assert type(model.conv1) is nn.Conv2d
    config["compression"]["validate_scopes"] = False
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        Quantizer.from_nncf_config(ResNet(), config).prepare_model()
    assert any(entry in str(r.message) for r in record)


def test_what_the_reader_cannot_map_is_an_error():
    config = {
        "input_info": {"sample_size": [1, 3, 4, 4]},
        "compression": {"algorithm": "quantization"},
    }

    class ScaledInput(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 3, 1)

        def forward(self, x):
            return self.conv(x * 2)

    with pytest.raises(ValueError, match=r"/nncf_model_input_0 is read by ScaledInput/__mul___0"):
        Quantizer.from_nncf_config(ScaledInput(), config)
    without_inputs = {**config, "compression": {**config["compression"], "quantize_inputs": False}}
    quantizer = Quantizer.from_nncf_config(ScaledInput(), without_inputs)
    assert isinstance(quantizer.prepare_model().conv, qnn.QuantConv2d)
    with pytest.raises(ValueError, match="quantize_inputs .* needs the model traced"):
        Quantizer.from_nncf_config(ScaledInput(), {"compression": {"algorithm": "quantization"}})
    with pytest.raises(ValueError, match="bits_weights come"):
        Quantizer.from_nncf_config(ScaledInput(), without_inputs, bits_weights=4)
    lstm = nn.Sequential(nn.LSTM(4, 4))
    with pytest.raises(ValueError, match=r"0 \(LSTM\) holds several quantizers"):
        Quantizer.from_nncf_config(lstm, {"compression": without_inputs["compression"]})
