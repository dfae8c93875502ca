"""brevitas_cpp.graph.Quantizer: Distiller's module replacement on brevitas_cpp.nn.

References: the float modules themselves (a replacement with its quantizers off computes exactly
what the float module does), the same model written by hand with brevitas_cpp.nn (bit for bit
through training steps), and the override rules written out here."""

import importlib.util
import json
import math
import warnings
from collections import OrderedDict

import pytest
import torch
from torch import nn

from brevitas_cpp import nn as qnn
from brevitas_cpp.graph import Quantizer, default_replacement_factory, load_config
from brevitas_cpp.quant import Int8WeightPerChannelFloat, Uint8ActPerTensorFloat


class FloatNet(nn.Module):
    """The main job's CNN."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.relu2 = nn.ReLU()
        self.pool = nn.AvgPool2d(2)
        self.fc = nn.Linear(32 * 4 * 4, 10)

    def forward(self, x):
        x = self.relu1(self.conv1(x))
        x = self.pool(self.relu2(self.conv2(x)))
        return self.fc(torch.flatten(x, 1))


STATS = 2  # collect_stats_steps: the steps below cover statistics and the learned scale after
WEIGHT = dict(weight_quant=Int8WeightPerChannelFloat)
ACT = dict(collect_stats_steps=STATS)
INPUT = dict(input_quant=Uint8ActPerTensorFloat, input_collect_stats_steps=STATS)


def _auto(bits_w=4, bits_a=6):
    torch.manual_seed(0)
    model = FloatNet()
    quantizer = Quantizer(
        model,
        bits_weights=bits_w,
        bits_activations=bits_a,
        overrides=OrderedDict([("conv1", {**INPUT, "input_bit_width": bits_a})]),
        weight_kwargs=WEIGHT,
        act_kwargs=ACT,
    )
    return quantizer.prepare_model(), quantizer


def _by_hand(bits_w=4, bits_a=6):
    torch.manual_seed(0)
    float_model = FloatNet()
    weight = dict(weight_bit_width=bits_w, **WEIGHT)
    act = dict(bit_width=bits_a, **ACT)
    model = FloatNet()
    model.conv1 = qnn.QuantConv2d(1, 16, 3, padding=1, input_bit_width=bits_a, **INPUT, **weight)
    model.relu1 = qnn.QuantReLU(**act)
    model.conv2 = qnn.QuantConv2d(16, 32, 3, padding=1, **weight)
    model.relu2 = qnn.QuantReLU(**act)
    model.fc = qnn.QuantLinear(32 * 4 * 4, 10, **weight)
    model.load_state_dict(float_model.state_dict(), strict=False)
    return model


def _train(model, steps=4):
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    record = []
    for step in range(steps):
        x = torch.rand(8, 1, 8, 8, generator=torch.Generator().manual_seed(step))
        opt.zero_grad()
        out = model(x)
        out.square().mean().backward()
        opt.step()
        record.append(out.detach())
        record += [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.eval()
    with torch.no_grad():
        record.append(model(torch.rand(8, 1, 8, 8, generator=torch.Generator().manual_seed(99))))
    return record


def test_auto_quantized_model_equals_the_hand_built_one_bit_for_bit():
    auto, _ = _auto()
    hand = _by_hand()
    assert [type(m) for m in auto.children()] == [type(m) for m in hand.children()]
    a, b = _train(auto), _train(hand)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert torch.equal(x, y)
    assert auto.state_dict().keys() == hand.state_dict().keys()
    for key, value in hand.state_dict().items():
        assert torch.equal(auto.state_dict()[key], value), key


def test_names_parameters_and_float_keys_are_kept():
    torch.manual_seed(0)
    model = FloatNet()
    float_state = {k: v.clone() for k, v in model.state_dict().items()}
    params = dict(model.named_parameters())
    Quantizer(model).prepare_model()
    assert isinstance(model.conv1, qnn.QuantConv2d) and isinstance(model.relu2, qnn.QuantReLU)
    assert isinstance(model.pool, nn.AvgPool2d)  # left in float by default
    state = model.state_dict()
    for key, value in float_state.items():
        assert torch.equal(state[key], value), key
    for name, param in params.items():
        assert model.get_parameter(name) is param  # the same Parameter objects


def test_exact_name_then_first_matching_pattern_wins():
    # Distiller's Quantizer (quantizer.py __init__) looks the name up in the overrides before it
    # tries the patterns in order: "0" wins over an earlier "[0-9]"; among patterns, the first.
    def bits(overrides):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4), nn.ReLU())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            quantizer = Quantizer(model, bits_weights=8, bits_activations=8, overrides=overrides)
            quantizer.prepare_model()
        return {name: s.bits_weights for name, (_, _, s) in quantizer.replaced.items()}

    specific_first = OrderedDict([("0", 2), ("[0-9]", 4)])
    assert bits(specific_first) == {"0": 2, "1": 4, "2": 4, "3": 4}
    broad_first = OrderedDict([("[0-9]", 4), ("0", 2)])
    assert bits(broad_first) == {"0": 2, "1": 4, "2": 4, "3": 4}
    two_patterns = OrderedDict([("[0-1]", 3), ("[0-9]", 4)])
    assert bits(two_patterns) == {"0": 3, "1": 3, "2": 4, "3": 4}


def test_patterns_match_whole_names_and_blocks():
    model = nn.Module()
    model.conv1 = nn.Conv2d(2, 2, 1)
    model.conv10 = nn.Conv2d(2, 2, 1)
    model.block = nn.Sequential(nn.Conv2d(2, 2, 1), nn.ReLU())
    quantizer = Quantizer(
        model, bits_weights=8, overrides=OrderedDict([("conv1", 3), (r"block\..*", 5)])
    )
    quantizer.prepare_model()
    got = {name: s.bits_weights for name, (_, _, s) in quantizer.replaced.items()}
    assert got == {"conv1": 3, "conv10": 8, "block.0": 5, "block.1": 5}
    assert model.block[1].act_quant.bit_width().item() == 5


def test_none_keeps_a_module_in_float_and_statistics_say_so():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    quantizer = Quantizer(model, overrides={"2": None})
    quantizer.prepare_model()
    assert type(model[2]) is nn.Linear
    stats = quantizer.statistics()
    assert stats["kept_float"] == ["2"]
    assert [layer["name"] for layer in stats["replaced"]] == ["0", "1"]
    assert stats["fraction_replaced"] == pytest.approx(2 / 3)


def test_unmatched_patterns_and_unused_keywords_are_reported():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    quantizer = Quantizer(
        model, overrides=OrderedDict([("1", {"weight_bit_width": 4}), ("fc.*", 2)])
    )
    with pytest.warns(UserWarning) as record:
        quantizer.prepare_model()
    messages = [str(r.message) for r in record]
    assert any("override 'fc.*' matches no replaceable module" in m for m in messages)
    assert any(
        "override '1': keyword 'weight_bit_width' was given to no module" in m for m in messages
    )


def test_a_keyword_the_layer_does_not_know_names_module_and_override():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))
    quantizer = Quantizer(model, overrides={"2": {"weight_bit_widht": 4}})
    with pytest.raises(
        TypeError, match=r"replacing 2 \(Linear\) \(override '2'\):.*weight_bit_widht"
    ):
        quantizer.prepare_model()
    # Nothing was put in place: the model is still the float one.
    assert [type(m) for m in model] == [nn.Linear, nn.ReLU, nn.Linear]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(bits_weights=0), "bits_weights must be an integer bit width"),
        (dict(bits_activations=True), "bits_activations must be an integer bit width"),
        (dict(overrides=[("a", 4)]), "overrides must be an ordered mapping"),
        (dict(overrides={"(": 4}), "is not a regular expression"),
        (dict(overrides={"a": 40}), r"overrides\['a'\] must be an integer bit width"),
        (dict(overrides={"a": {"bits_weights": 0}}), r"overrides\['a'\]\['bits_weights'\]"),
        (dict(train_with_fp_copy=False), "train_with_fp_copy=False"),
        (dict(optimizer="sgd"), "optimizer must be a torch.optim.Optimizer"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises((TypeError, ValueError), match=match):
        Quantizer(nn.Linear(2, 2), **kwargs)


def test_prepare_twice_is_refused():
    quantizer = Quantizer(nn.Sequential(nn.Linear(2, 2)))
    quantizer.prepare_model()
    with pytest.raises(RuntimeError, match="already prepared"):
        quantizer.prepare_model()


def test_a_module_under_two_names_becomes_one_quant_layer():
    shared = nn.Linear(4, 4)
    model = nn.Module()
    model.a, model.b = shared, shared
    Quantizer(model).prepare_model()
    assert isinstance(model.a, qnn.QuantLinear) and model.a is model.b


def test_the_model_itself_can_be_replaced():
    linear = nn.Linear(3, 2)
    quant = Quantizer(linear).prepare_model()
    assert isinstance(quant, qnn.QuantLinear) and quant.weight is linear.weight


def test_optimizer_gets_the_new_parameters_in_their_own_group():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    Quantizer(model, optimizer=optimizer, quant_param_group={"lr": 0.01}).prepare_model()
    assert len(optimizer.param_groups) == 2
    new_group = optimizer.param_groups[1]
    assert new_group["lr"] == 0.01
    scale = model[1].act_quant.fused_activation_quant_proxy.tensor_quant.scaling_impl.value
    assert any(p is scale for p in new_group["params"])
    in_groups = [p for group in optimizer.param_groups for p in group["params"]]
    assert all(any(p is q for q in in_groups) for p in model.parameters())


FLOAT_MODULES = {
    "conv1d": (lambda: nn.Conv1d(3, 4, 3, stride=2, padding=1, dilation=1, groups=1), (2, 3, 9)),
    "conv2d-grouped-reflect": (
        lambda: nn.Conv2d(4, 4, 3, padding=1, groups=2, padding_mode="reflect", bias=False),
        (2, 4, 6, 6),
    ),
    "conv3d": (lambda: nn.Conv3d(2, 3, 2, stride=(1, 2, 1)), (1, 2, 4, 4, 4)),
    "convtranspose2d": (
        lambda: nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1, dilation=1),
        (2, 3, 5, 5),
    ),
    "linear": (lambda: nn.Linear(5, 3), (4, 5)),
    "relu": (lambda: nn.ReLU(), (4, 5)),
    "hardtanh": (lambda: nn.Hardtanh(-0.5, 2.0), (4, 5)),
    "sigmoid": (lambda: nn.Sigmoid(), (4, 5)),
    "tanh": (lambda: nn.Tanh(), (4, 5)),
}


@pytest.mark.parametrize("name", list(FLOAT_MODULES))
def test_replacement_keeps_the_float_computation(name):
    """With its quantizers off, each replacement computes exactly what the float module does:
    every hyper-parameter was carried over."""
    make, shape = FLOAT_MODULES[name]
    torch.manual_seed(0)
    module = make()
    model = nn.Sequential(module)
    off = {"weight_quant": None, "act_quant": None}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        Quantizer(model, overrides={"0": off}).prepare_model()
    assert type(model[0]) is not type(module)
    x = torch.randn(shape)
    assert torch.equal(model(x), module(x))


def test_embedding_and_relu6():
    torch.manual_seed(0)
    emb = nn.Embedding(10, 4, padding_idx=0)
    model = nn.Sequential(emb)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        Quantizer(model, overrides={"0": {"weight_quant": None}}).prepare_model()
    idx = torch.tensor([[0, 3, 9]])
    assert isinstance(model[0], qnn.QuantEmbedding) and model[0].padding_idx == 0
    assert torch.equal(model(idx), emb(idx))
    relu6 = Quantizer(nn.Sequential(nn.ReLU6())).prepare_model()[0]
    # Brevitas's mapping: an unsigned quantizer whose range starts at 6.
    assert (relu6.act_quant.scale() * 255).item() == pytest.approx(6.0)


def test_custom_replacement_factory():
    factory = default_replacement_factory()
    factory[nn.GELU] = lambda module, settings: qnn.QuantIdentity(**settings.act_layer_kwargs())
    model = nn.Sequential(nn.GELU())
    Quantizer(model, bits_activations=4, replacement_factory=factory).prepare_model()
    assert isinstance(model[0], qnn.QuantIdentity)
    assert model[0].act_quant.bit_width().item() == 4


def test_scripted_auto_quantized_model_matches_eager():
    model, _ = _auto()
    _train(model, steps=3)
    x = torch.rand(5, 1, 8, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        scripted = torch.jit.script(model)
    assert torch.equal(scripted(x), model(x))


def test_config_file(tmp_path):
    path = tmp_path / "quant.json"
    path.write_text(
        json.dumps(
            {
                "bits_weights": 4,
                "bits_activations": 6,
                "overrides": {
                    "conv1": {
                        "input_quant": "Uint8ActPerTensorFloat",
                        "input_bit_width": 6,
                        "input_collect_stats_steps": STATS,
                    }
                },
                "weight_kwargs": {"weight_quant": "Int8WeightPerChannelFloat"},
                "act_kwargs": {"collect_stats_steps": STATS},
            }
        )
    )
    torch.manual_seed(0)
    from_file = Quantizer.from_config(FloatNet(), path).prepare_model()
    auto, _ = _auto()
    x = torch.rand(4, 1, 8, 8)
    assert torch.equal(from_file(x), auto(x))


@pytest.mark.parametrize(
    "config, match",
    [
        ({"bits_weight": 4}, r"unknown key\(s\) 'bits_weight'; accepted: bits_weights"),
        ({"weight_kwargs": {"weight_quant": "NoSuchQuant"}}, "'NoSuchQuant' is not a quantizer"),
        ([1, 2], "the config must be a mapping"),
    ],
)
def test_bad_config(config, match, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match=match):
        load_config(path)


def test_config_file_type_is_checked(tmp_path):
    path = tmp_path / "quant.toml"
    path.write_text("")
    with pytest.raises(ValueError, match=r"ends in \.json, \.yaml or \.yml"):
        load_config(path)


def test_yaml_config(tmp_path):
    yaml = pytest.importorskip("yaml")
    path = tmp_path / "quant.yaml"
    path.write_text(yaml.safe_dump({"bits_weights": 3, "overrides": {"0": None}}))
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    quantizer = Quantizer.from_config(model, path)
    quantizer.prepare_model()
    assert type(model[0]) is nn.Linear and quantizer.replaced["1"][2].bits_weights == 3


def test_null_bit_widths_keep_that_tensor_type_in_float(tmp_path):
    """Distiller's per-type nulls: a weight layer without weight bits and an activation without
    activation bits stay float; the other type's null is irrelevant to them."""
    yaml = pytest.importorskip("yaml")
    path = tmp_path / "quant.yaml"
    path.write_text(
        "bits_weights: 4\n"
        "bits_activations: 6\n"
        "overrides:\n"
        "  conv1: {bits_weights: null, bits_activations: null}\n"
        "  relu1: {bits_activations: null}\n"
        "  conv2: {bits_activations: null}\n"
        "  relu2: {bits_weights: null}\n"
        "  fc: {bits_weights: null, bits_activations: 8}\n"
    )
    assert yaml.safe_load(path.read_text())["overrides"]["conv1"]["bits_weights"] is None
    model = FloatNet()
    quantizer = Quantizer.from_config(model, path)
    quantizer.prepare_model()
    assert sorted(quantizer.replaced) == ["conv2", "relu2"]
    assert sorted(quantizer.kept_float) == ["conv1", "fc", "relu1"]
    assert type(model.conv1) is nn.Conv2d and type(model.fc) is nn.Linear
    assert model.conv2.weight_quant.bit_width().item() == 4
    assert model.relu2.act_quant.bit_width().item() == 6


def test_null_bit_width_of_one_type_is_refused_for_recurrent_and_attention_layers():
    for module in (nn.LSTM(4, 4), nn.MultiheadAttention(4, 2)):
        model = nn.Sequential(module)
        with pytest.raises(ValueError, match=r"replacing 0 .*null bits_weights or bits_activa"):
            Quantizer(model, overrides={"0": {"bits_weights": None}}).prepare_model()
        assert model[0] is module


def test_ignored_and_target_scopes_by_name_scope_and_pattern():
    def replaced(**kwargs):
        torch.manual_seed(0)
        model = FloatNet()
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            quantizer = Quantizer(model, **kwargs)
            quantizer.prepare_model()
        return sorted(quantizer.replaced), [str(r.message) for r in record]

    assert replaced(ignored_scopes=["fc", "FloatNet/ReLU[relu1]"])[0] == ["conv1", "conv2", "relu2"]
    assert replaced(target_scopes=["{re}conv.*"])[0] == ["conv1", "conv2"]
    names, messages = replaced(
        target_scopes=["{re}FloatNet/Conv2d.*"], ignored_scopes=["conv2", "nope"],
        validate_scopes=False,
    )  # fmt: skip
    assert names == ["conv1"]
    assert len(messages) == 1 and "ignored_scopes entries select no module" in messages[0]
    with pytest.raises(TypeError, match="ignored_scopes must be a list of strings"):
        Quantizer(FloatNet(), ignored_scopes="fc")
    with pytest.raises(ValueError, match=r"target_scopes: '\{re\}\(' is not a regular expression"):
        Quantizer(FloatNet(), target_scopes=["{re}("])


def test_quantize_model_from_one_config(tmp_path):
    """Replacement, insertion and the controller from one file: the functional add of a
    residual model gets its quantizer, the policies reach the scheduler."""
    from brevitas_cpp.graph import quantize_model

    class Residual(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 3, 3, padding=1)
            self.relu = nn.ReLU()

        def forward(self, x):
            return self.relu(self.conv(x) + x)

    path = tmp_path / "quant.json"
    path.write_text(
        json.dumps(
            {
                "bits_weights": 4,
                "ignored_scopes": ["relu"],
                "insertions": [
                    {
                        "scope": "Residual/__add___0",
                        "act_quant": "Int8ActPerTensorFloat",
                        "bit_width": 6,
                    }
                ],
                "policies": [{"policy": "QuantizationDelay", "starting_epoch": 1}],
            }
        )
    )
    torch.manual_seed(0)
    model, controller = quantize_model(Residual(), path, torch.randn(1, 3, 4, 4))
    assert isinstance(model.conv, qnn.QuantConv2d) and type(model.relu) is nn.ReLU
    (inserted,) = model.inserted_quantizers.values()
    assert inserted.act_quant.bit_width().item() == 6
    assert [p["policy"] for p in controller.state_dict()["scheduler"]["policies"]] == [
        "QuantizationDelay"
    ]
    model(torch.randn(2, 3, 4, 4)).sum().backward()
    with pytest.raises(ValueError, match="insertions need example inputs"):
        quantize_model(Residual(), {"insertions": [{"scope": "Residual/__add___0"}]})
    with pytest.raises(ValueError, match=r"insertions\[0\]: where must be 'inputs' or 'output'"):
        quantize_model(
            Residual(),
            {"insertions": [{"scope": "Residual/__add___0", "where": "x"}]},
            torch.randn(1, 3, 4, 4),
        )


def test_statistics_and_report_say_what_stayed_float_and_why(caplog):
    class Scale(nn.Module):  # a user's module with a parameter: no replacement exists
        def __init__(self):
            super().__init__()
            self.gain = nn.Parameter(torch.ones(1))

        def forward(self, x):
            return x * self.gain

    model = nn.Sequential(
        OrderedDict(
            conv=nn.Conv2d(3, 4, 3),
            bn=nn.BatchNorm2d(4),
            relu=nn.ReLU(),
            pool=nn.MaxPool2d(2),
            drop=nn.Dropout(),
            flat=nn.Flatten(),
            branch=nn.Sequential(),  # empty: the identity
            norm=nn.LayerNorm(4),
            scale=Scale(),
            fc=nn.Linear(4, 2),
            act=nn.ReLU(),
        )
    )
    quantizer = Quantizer(model, overrides={"act": None}, ignored_scopes=["fc"])
    with caplog.at_level("INFO", logger="brevitas_cpp.graph.quantizer"):
        quantizer.prepare_model()
    stats = quantizer.statistics()
    assert [layer["name"] for layer in stats["replaced"]] == ["conv", "relu"]
    assert stats["kept_float_reasons"] == {
        "fc": "in ignored_scopes",
        "act": "override 'act' is null",
    }
    # Dropout, Flatten and an empty Sequential compute nothing to quantize: not reported.
    assert stats["unmapped"] == {
        "BatchNorm2d": ["bn"],
        "MaxPool2d": ["pool"],
        "LayerNorm": ["norm"],
        "Scale": ["scale"],
    }
    report = quantizer.report()
    assert "conv: Conv2d -> QuantConv2d (W8 A8)" in report
    assert "fc: in ignored_scopes" in report and "LayerNorm: norm" in report
    assert report in caplog.text


# The activations written out as formulas (the reference for transformers' and timm's classes).
def _gelu_exact(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def _sigmoid(x):
    return 1.0 / (1.0 + torch.exp(-x))


def _tanh(x):
    return 1.0 - 2.0 / (torch.exp(2.0 * x) + 1.0)


def _silu(x):
    return x * _sigmoid(x)


def _hardsigmoid(x):
    return (x + 3.0).clamp(0.0, 6.0) / 6.0


def _hardswish(x):
    return x * _hardsigmoid(x)


def _replace_activations(layers):
    """[(float module, quant class name, formula)] -> the Sequential's quant layers, replaced
    by the default factory with their output quantizers off, checked against the formulas."""
    model = nn.Sequential(*[layer for layer, _, _ in layers])
    off = {str(i): {"act_quant": None} for i in range(len(layers))}
    quantizer = Quantizer(model, overrides=off)
    quantizer.prepare_model()
    assert quantizer.unmapped == {}  # nothing left in float
    x = torch.linspace(-6.0, 6.0, 241)
    for i, (_, quant_name, formula) in enumerate(layers):
        assert type(model[i]).__name__ == quant_name, i
        # The exact GELU and its tanh approximation differ by up to 5e-4: the tolerance tells.
        torch.testing.assert_close(model[i](x), formula(x), rtol=1e-5, atol=1e-6)
    return model


def test_transformers_activations_become_quant_activations():
    act = pytest.importorskip("transformers.activations")
    _replace_activations(
        [
            (act.GELUActivation(), "QuantGELU", _gelu_exact),
            (act.GELUActivation(use_gelu_python=True), "QuantGELU", _gelu_exact),
            (act.GELUTanh(), "QuantGELU", _gelu_tanh),
            (act.GELUTanh(use_gelu_tanh_python=True), "QuantGELU", _gelu_tanh),
            (act.NewGELUActivation(), "QuantGELU", _gelu_tanh),
            (act.FastGELUActivation(), "QuantGELU", _gelu_tanh),
            (act.AccurateGELUActivation(), "QuantGELU", _gelu_tanh),
            (act.SiLUActivation(), "QuantSiLU", _silu),
        ]
    )
    # No quant counterpart: x * sigmoid(1.702 x) stays float, reported.
    quantizer = Quantizer(nn.Sequential(act.QuickGELUActivation()))
    quantizer.prepare_model()
    assert quantizer.unmapped == {"QuickGELUActivation": ["0"]}


def test_timm_activations_become_quant_activations():
    if importlib.util.find_spec("timm") is None:
        pytest.skip("timm is not installed")
    from zoo_models import torchvision_models

    torchvision_models()  # timm imports torchvision, whose plain import may fail (zoo_models)
    act = importlib.import_module("timm.layers.activations")
    act_me = importlib.import_module("timm.layers.activations_me")
    _replace_activations(
        [
            (act.Sigmoid(), "QuantSigmoid", _sigmoid),
            (act.Tanh(inplace=True), "QuantTanh", _tanh),
            (act.GELU(), "QuantGELU", _gelu_exact),
            (act.GELUTanh(), "QuantGELU", _gelu_tanh),
            (act.Swish(), "QuantSiLU", _silu),
            (act.HardSwish(), "QuantHardswish", _hardswish),
            (act.HardSigmoid(), "QuantHardsigmoid", _hardsigmoid),
            (act_me.SwishMe(), "QuantSiLU", _silu),
            (act_me.HardSwishMe(), "QuantHardswish", _hardswish),
            (act_me.HardSigmoidMe(), "QuantHardsigmoid", _hardsigmoid),
        ]
    )
    quantizer = Quantizer(nn.Sequential(act.Mish(), act.QuickGELU()))
    quantizer.prepare_model()
    assert quantizer.unmapped == {"Mish": ["0"], "QuickGELU": ["1"]}
