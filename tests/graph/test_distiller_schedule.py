"""Distiller's schedule files, read as written (tests/graph/distiller_schedules, in the format of
Distiller's examples/quantization/quant_aware_train): the layers each file quantizes, at which
bit widths and with which method, listed by hand from the file and Distiller's rules; the
epochs its policies act in; and the files Distiller refuses or this reader refuses by name."""

import copy
import pathlib
import re
from collections import OrderedDict

import pytest
import torch
import yaml
from torch import nn

from brevitas_cpp import nn as qnn
from brevitas_cpp.graph.distiller import (
    DorefaQuantizer,
    LinearQuantMode,
    MultiStepMultiGammaLR,
    PACTQuantizer,
    QuantAwareTrainRangeLinearQuantizer,
    dict_config,
    file_config,
    load_schedule,
)

SCHEDULES = pathlib.Path(__file__).parent / "distiller_schedules"


# Distiller's preact ResNet for CIFAR (distiller/models/cifar10/preresnet_cifar.py): module names
# and types as there, one block per stage and narrow channels.
class PreactBasicBlock(nn.Module):
    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.pre_bn = nn.BatchNorm2d(inplanes)
        self.pre_relu = nn.ReLU(inplace=False)
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=False)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.downsample = downsample

    def forward(self, x):
        preact = self.pre_relu(self.pre_bn(x))
        out = self.conv2(self.relu(self.bn(self.conv1(preact))))
        residual = x if self.downsample is None else self.downsample(preact)
        out += residual
        return out


class PreactResNetCifar(nn.Module):
    def __init__(self, widths=(4, 8, 16), num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 3, 1, 1, bias=False)
        inplanes, stages = widths[0], []
        for i, planes in enumerate(widths):
            stride = 1 if i == 0 else 2
            downsample = None
            if stride != 1 or inplanes != planes:
                pad = inplanes // 2
                downsample = nn.Sequential(
                    nn.AvgPool2d(2), nn.ConstantPad3d((0, 0, 0, 0, pad, pad), 0.0)
                )
            stages.append(nn.Sequential(PreactBasicBlock(inplanes, planes, stride, downsample)))
            inplanes = planes
        self.layer1, self.layer2, self.layer3 = stages
        self.final_bn = nn.BatchNorm2d(inplanes)
        self.final_relu = nn.ReLU(inplace=True)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(inplanes, num_classes)

    def forward(self, x):
        x = self.layer3(self.layer2(self.layer1(self.conv1(x))))
        x = self.avgpool(self.final_relu(self.final_bn(x)))
        return self.fc(x.flatten(1))


# Distiller's AlexNetBN (distiller/models/imagenet/alexnet_batchnorm.py): the same indices and
# types in features and classifier, narrow, for 3x32x32 inputs.
def alexnet_bn():
    model = nn.Module()
    model.features = nn.Sequential(
        nn.Conv2d(3, 8, 4, stride=2),
        nn.ReLU(inplace=True),
        nn.Conv2d(8, 16, 5, padding=2, groups=2, bias=False),
        nn.BatchNorm2d(16),
        nn.MaxPool2d(3, 2, ceil_mode=True),
        nn.ReLU(inplace=True),
        nn.Conv2d(16, 16, 3, padding=1, bias=False),
        nn.BatchNorm2d(16),
        nn.MaxPool2d(3, 2, padding=1),
        nn.ReLU(inplace=True),
        nn.Conv2d(16, 16, 3, padding=1, groups=2, bias=False),
        nn.BatchNorm2d(16),
        nn.ReLU(inplace=True),
        nn.Conv2d(16, 16, 3, padding=1, groups=2, bias=False),
        nn.BatchNorm2d(16),
        nn.MaxPool2d(3, 2),
        nn.ReLU(inplace=True),
    )
    model.classifier = nn.Sequential(
        nn.Linear(16, 32, bias=False),
        nn.BatchNorm1d(32),
        nn.ReLU(inplace=True),
        nn.Linear(32, 32, bias=False),
        nn.BatchNorm1d(32),
        nn.ReLU(inplace=True),
        nn.Linear(32, 10),
    )
    model.forward = lambda x: model.classifier(model.features(x).flatten(1))
    return model


def _sgd(model, lr=0.1):
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)


def _layers(model):
    """{name: (quant class name, weight bits, activation bits)} of every quant layer."""
    found = {}
    for name, module in model.named_modules():
        if isinstance(module, (qnn.QuantConv2d, qnn.QuantLinear)):
            found[name] = (type(module).__name__, int(module.quant_weight().bit_width), None)
        elif isinstance(module, qnn.QuantReLU):
            found[name] = (type(module).__name__, None, int(module.act_quant.bit_width()))
    return found


def _run_epochs(scheduler, model, optimizer, epochs, x, steps=1):
    """Distiller's training loop: the callbacks around each step; the lr of every epoch."""
    lrs = []
    for epoch in epochs:
        scheduler.on_epoch_begin(epoch)
        lrs.append(optimizer.param_groups[0]["lr"])
        for step in range(steps):
            scheduler.on_minibatch_begin(epoch, step, steps, optimizer)
            loss = model(x).square().mean()
            loss = scheduler.before_backward_pass(epoch, step, steps, loss, optimizer)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.on_minibatch_end(epoch, step, steps, optimizer)
        scheduler.on_epoch_end(epoch, optimizer)
    return lrs


def test_pact_schedule_quantizes_the_layers_it_names():
    torch.manual_seed(0)
    model = PreactResNetCifar()
    optimizer = _sgd(model)
    scheduler = file_config(model, optimizer, SCHEDULES / "preact_resnet20_cifar_pact.yaml")
    assert scheduler.model is model
    # By hand: the four nulls stay float; every other conv gets 3-bit DoReFa weights and every
    # other ReLU a 4-bit PACT clip starting at 8.0. The downsample (pool, pad) has no layer.
    expected = {}
    for stage in ("layer1.0", "layer2.0", "layer3.0"):
        expected[f"{stage}.conv1"] = ("QuantConv2d", 3, None)
        expected[f"{stage}.conv2"] = ("QuantConv2d", 3, None)
        expected[f"{stage}.relu"] = ("QuantReLU", None, 4)
        if stage != "layer1.0":
            expected[f"{stage}.pre_relu"] = ("QuantReLU", None, 4)
    assert _layers(model) == expected
    assert type(model.conv1) is nn.Conv2d and type(model.fc) is nn.Linear
    assert type(model.layer1[0].pre_relu) is nn.ReLU and type(model.final_relu) is nn.ReLU
    clip_vals = [p for n, p in model.named_parameters() if n.endswith("clip_val")]
    assert len(clip_vals) == 5 and all(float(p.detach()) == 8.0 for p in clip_vals)
    # PACT's clipping values form a parameter group of their own (Distiller's
    # _get_new_optimizer_params_groups), added before the lr scheduler was built.
    assert [len(g["params"]) for g in optimizer.param_groups][1:] == [5]
    assert {id(p) for p in optimizer.param_groups[1]["params"]} == {id(p) for p in clip_vals}
    assert isinstance(scheduler.quantizer, PACTQuantizer)


def test_lr_policy_steps_as_distiller_until_its_ending_epoch():
    torch.manual_seed(0)
    model = PreactResNetCifar()
    optimizer = _sgd(model, lr=0.1)
    scheduler = load_schedule(model, SCHEDULES / "preact_resnet20_cifar_pact.yaml", optimizer)
    lrs = _run_epochs(scheduler, model, optimizer, range(8), torch.randn(2, 3, 8, 8))
    # MultiStepLR(milestones [2, 4], gamma 0.1), stepped to epoch e + 1 after epochs 0..4 (the
    # policy's ending_epoch is 5), so the rate of epochs 5.. stays that of epoch 5.
    assert lrs == pytest.approx([0.1, 0.1, 0.01, 0.01, 0.001, 0.001, 0.001, 0.001])
    assert optimizer.param_groups[1]["lr"] == pytest.approx(0.001)  # PACT's group too


def test_quantizer_policy_keeps_weights_from_its_ending_epoch():
    torch.manual_seed(0)
    model = PreactResNetCifar()
    optimizer = _sgd(model)
    scheduler = load_schedule(model, SCHEDULES / "preact_resnet20_cifar_pact.yaml", optimizer)
    x = torch.randn(2, 3, 8, 8)
    conv = model.layer2[0].conv1
    _run_epochs(scheduler, model, optimizer, range(6), x)
    before = conv.quant_weight().value.detach().clone()
    _run_epochs(scheduler, model, optimizer, range(6, 8), x)
    # From epoch 6 (the quantizer policy's ending_epoch) Distiller no longer re-quantizes the
    # weights, so its forward keeps the last quantized ones: here the float weights stop training.
    assert torch.equal(conv.quant_weight().value, before)
    assert not conv.weight.requires_grad
    assert model.fc.weight.requires_grad  # a float layer keeps training
    clip_vals = [p for n, p in model.named_parameters() if n.endswith("clip_val")]
    assert all(p.requires_grad for p in clip_vals)  # so do PACT's clipping values
    # A checkpoint's scheduler state puts a resumed run in the same phase.
    state = scheduler.state_dict()
    conv.weight.requires_grad_(True)
    scheduler.load_state_dict(state)
    assert not conv.weight.requires_grad


def test_dorefa_schedule_with_multi_gamma_lr():
    torch.manual_seed(0)
    model = PreactResNetCifar()
    optimizer = _sgd(model, lr=1.0)
    scheduler = load_schedule(model, SCHEDULES / "preact_resnet_cifar_dorefa.yaml", optimizer)
    layers = _layers(model)
    assert layers["layer2.0.conv1"] == ("QuantConv2d", 3, None)
    assert layers["layer3.0.pre_relu"] == ("QuantReLU", None, 8)
    assert "layer1.0.pre_relu" not in layers and "fc" not in layers
    assert isinstance(scheduler.quantizer, DorefaQuantizer)
    assert not [n for n, p in model.named_parameters() if "clip_val" in n and p.requires_grad]
    assert isinstance(scheduler.lr_schedulers["training_lr"], MultiStepMultiGammaLR)
    lrs = _run_epochs(scheduler, model, optimizer, range(6), torch.randn(2, 3, 8, 8))
    # milestones [1, 3, 4], gammas [0.1, 0.1, 0.2]: cumulative factors 1, 0.1, 0.01, 0.002.
    assert lrs == pytest.approx([1.0, 0.1, 0.1, 0.01, 0.002, 0.002])


def test_alexnet_dorefa_schedule_layer_by_layer():
    torch.manual_seed(0)
    model = alexnet_bn()
    load_schedule(model, SCHEDULES / "alexnet_bn_dorefa.yaml", _sgd(model))
    expected = {
        "features.2": ("QuantConv2d", 4, None),
        "features.5": ("QuantReLU", None, 8),
        "features.6": ("QuantConv2d", 4, None),
        "features.9": ("QuantReLU", None, 8),
        "features.10": ("QuantConv2d", 4, None),
        "features.12": ("QuantReLU", None, 8),
        "features.13": ("QuantConv2d", 4, None),
        "features.16": ("QuantReLU", None, 8),
        "classifier.0": ("QuantLinear", 4, None),
        "classifier.2": ("QuantReLU", None, 8),
        "classifier.3": ("QuantLinear", 4, None),
    }
    assert _layers(model) == expected
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_range_linear_schedule_with_exact_name_and_pattern_overrides():
    torch.manual_seed(0)
    model = alexnet_bn()
    optimizer = _sgd(model, lr=1.0)
    with pytest.warns(UserWarning, match="override 'fc' matches no replaceable module"):
        scheduler = load_schedule(
            model, SCHEDULES / "quant_aware_train_linear_quant.yaml", optimizer
        )
    layers = _layers(model)
    # features\..* gives the convolutions 6 bits; fc is not a module of this model (warned);
    # the classifier's linears keep the default 8; every ReLU gets 8 bits.
    assert layers["features.0"] == ("QuantConv2d", 6, None)
    assert layers["classifier.6"] == ("QuantLinear", 8, None)
    assert layers["features.1"] == ("QuantReLU", None, 8)
    quantizer = scheduler.quantizer
    assert isinstance(quantizer, QuantAwareTrainRangeLinearQuantizer)
    assert (quantizer.act_mode, quantizer.weight_mode) == ("ASYMMETRIC_UNSIGNED",) * 2
    # quantize_inputs (Distiller's default): the model's input goes through inputs_quant.
    assert isinstance(model.inputs_quant, qnn.QuantIdentity)
    # bits_bias 32 (Distiller's default for this class) on the classifier's biased linear.
    assert int(model.classifier[6].quant_bias().bit_width) == 32
    lrs = _run_epochs(scheduler, model, optimizer, range(4), torch.randn(2, 3, 32, 32))
    # ExponentialLR(0.5) stepped to epochs 1 and 3 after epochs 0 and 2 (its epochs list).
    assert lrs == pytest.approx([1.0, 0.5, 0.5, 0.125])


def test_an_exact_name_wins_over_an_earlier_pattern():
    # Distiller's Quantizer looks the module's name up before trying the patterns in order.
    model = nn.Sequential(OrderedDict(conv1=nn.Conv2d(1, 2, 1), conv2=nn.Conv2d(2, 2, 1)))
    overrides = OrderedDict([("conv.*", {"bits_weights": 2}), ("conv1", {"bits_weights": 5})])
    DorefaQuantizer(model, None, bits_weights=8, overrides=overrides).prepare_model()
    assert int(model.conv1.quant_weight().bit_width) == 5
    assert int(model.conv2.quant_weight().bit_width) == 2


def _schedule(**changes):
    base = yaml.safe_load((SCHEDULES / "preact_resnet20_cifar_pact.yaml").read_text())
    base = copy.deepcopy(base)
    for key, value in changes.items():
        if value is None:
            base.pop(key, None)
        else:
            base[key] = value
    return base


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            {"quantizers": {"pact_quantizer": {"class": "PACTQuantiser", "bits_activations": 4}}},
            "class named 'PACTQuantiser' does not exist",
        ),
        (
            {"quantizers": {"pact_quantizer": {"class": "PostTrainLinearQuantizer"}}},
            "'PostTrainLinearQuantizer' is not supported",
        ),
        (
            {"quantizers": {"pact_quantizer": {"class": "PACTQuantizer", "act_clip_init": 8.0}}},
            "does not accept the argument(s) ['act_clip_init']",
        ),
        (
            {
                "quantizers": {
                    "pact_quantizer": {
                        "class": "PACTQuantizer",
                        "overrides": {"conv1": {"bits_weights": None, "act_clip_init_val": 1.0}},
                    }
                }
            },
            "does not accept ['act_clip_init_val'] as override arguments",
        ),
        (
            {
                "policies": [
                    {"quantizer": {"instance_name": "pact"}, "starting_epoch": 0, "ending_epoch": 9}
                ]
            },
            "quantizer 'pact' was not defined in the list of quantizers",
        ),
        ({"pruners": {"p": {"class": "AutomatedGradualPruner"}}}, "section 'pruners' is not"),
        ({"quantisers": {}}, "unknown section 'quantisers'"),
        (
            {
                "policies": [
                    {
                        "quantizer": {"instance_name": "pact_quantizer"},
                        "starting_epoch": 0,
                        "ending_epoch": 9,
                        "frequency": 1,
                    }
                ]
            },
            "lr_scheduler 'training_lr' is defined but no policy uses it",
        ),
        (
            {
                "policies": [
                    {
                        "quantizer": {"instance_name": "pact_quantizer"},
                        "starting_epoch": 2,
                        "ending_epoch": 9,
                        "frequency": 1,
                    },
                    {"lr_scheduler": {"instance_name": "training_lr"}, "epochs": [0]},
                ]
            },
            "must run every epoch from epoch 0",
        ),
        (
            {
                "policies": [
                    {"pruner": {"instance_name": "p"}, "starting_epoch": 0, "ending_epoch": 9},
                ]
            },
            "pruner policies are not supported",
        ),
        (
            {"lr_schedulers": {"training_lr": {"class": "MultiStepLR", "milestone": [2]}}},
            "MultiStepLR does not accept the argument(s) ['milestone']",
        ),
    ],
)
def test_bad_schedules_are_refused_by_name(changes, message):
    model = PreactResNetCifar()
    with pytest.raises(ValueError) as info:
        dict_config(model, _sgd(model), _schedule(**changes))
    assert message in str(info.value)
    assert type(model.layer2[0].conv1) is nn.Conv2d  # the model is left as it was


def test_two_quantizers_are_refused_as_in_distiller():
    sched = _schedule()
    sched["quantizers"]["other"] = dict(sched["quantizers"]["pact_quantizer"])
    model = PreactResNetCifar()
    with pytest.raises(ValueError, match="multiple quantizers are not supported"):
        dict_config(model, _sgd(model), sched)


def test_a_file_error_names_the_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("quantizers:\n  q:\n    class: Nope\npolicies: []\n")
    model = PreactResNetCifar()
    with pytest.raises(ValueError, match="bad.yaml: quantizers\\['q'\\]: class named 'Nope'"):
        file_config(model, _sgd(model), path)


# The forward of a prepared model against Distiller's formulas written out here
# (clipped_linear.py, range_linear.py, q_utils.py), one small model per method.
class SmallNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv0, self.relu0 = nn.Conv2d(3, 4, 3), nn.ReLU()
        self.conv1, self.relu1 = nn.Conv2d(4, 4, 3), nn.ReLU()

    def forward(self, x):
        return self.relu1(self.conv1(self.relu0(self.conv0(x))))


def _small_model():
    torch.manual_seed(3)
    return SmallNet()


def _dorefa_weight(w, bits):
    n = 2**bits - 1
    t = torch.tanh(w)
    t = t / (2 * t.abs().max()) + 0.5
    return 2 * (torch.round(n * t) / n) - 1


def _pact(x, bits, clip):
    x = torch.relu(x)
    x = torch.where(x < clip, x, torch.tensor(clip))
    m = (2**bits - 1) / clip
    return torch.round(m * x) / m


def test_pact_schedule_computes_distillers_forward():
    schedule = {
        "quantizers": {
            "pact": {
                "class": "PACTQuantizer",
                "bits_activations": 4,
                "bits_weights": 3,
                "act_clip_init_val": 2.0,
                "overrides": {"conv0": {"bits_weights": None, "bits_activations": None}},
            }
        },
        "policies": [
            {"quantizer": {"instance_name": "pact"}, "starting_epoch": 0, "ending_epoch": 9}
        ],
    }
    model = _small_model()
    reference = copy.deepcopy(model)
    dict_config(model, _sgd(model), schedule)
    x = torch.randn(2, 3, 7, 7) * 3
    conv1 = reference.conv1
    expected = _pact(reference.conv0(x), 4, 2.0)
    expected = nn.functional.conv2d(expected, _dorefa_weight(conv1.weight, 3), conv1.bias)
    expected = _pact(expected, 4, 2.0)
    torch.testing.assert_close(model(x), expected, rtol=1e-6, atol=1e-6)


def _ema_range_quant(x, tracked_min, tracked_max, bits):
    # ASYMMETRIC_UNSIGNED: asymmetric_linear_quantization_params, then clamp and LinearQuantizeSTE.
    sat_min, sat_max = min(tracked_min, torch.tensor(0.0)), max(tracked_max, torch.tensor(0.0))
    scale = (2**bits - 1) / (sat_max - sat_min)
    zero_point = torch.round(scale * sat_min)
    x = torch.clamp(x, tracked_min.item(), tracked_max.item())
    return (torch.round(scale * x - zero_point) + zero_point) / scale


def _range_weight(w, bits, per_channel):
    flat = w.reshape(w.shape[0], -1) if per_channel else w.reshape(1, -1)
    sat_min = torch.clamp(flat.min(dim=1).values, max=0.0)
    sat_max = torch.clamp(flat.max(dim=1).values, min=0.0)
    scale = (2**bits - 1) / (sat_max - sat_min)
    zero_point = torch.round(scale * sat_min)
    shape = (-1,) + (1,) * (w.dim() - 1) if per_channel else ()
    scale, zero_point = scale.reshape(shape), zero_point.reshape(shape)
    return (torch.round(scale * w - zero_point) + zero_point) / scale


def test_range_linear_schedule_computes_distillers_forward():
    schedule = {
        "quantizers": {
            "linear": {
                "class": "QuantAwareTrainRangeLinearQuantizer",
                "bits_activations": 8,
                "bits_weights": 6,
                "mode": "ASYMMETRIC_UNSIGNED",
                "ema_decay": 0.9,
                "per_channel_wts": True,
            }
        },
        "policies": [
            {"quantizer": {"instance_name": "linear"}, "starting_epoch": 0, "ending_epoch": 9}
        ],
    }
    model = _small_model()
    reference = copy.deepcopy(model)
    dict_config(model, _sgd(model), schedule)
    model.train()
    x = torch.randn(2, 3, 7, 7)
    y = model(x)
    # The first training step: the bias-corrected EMA of each range is that batch's range.
    h = _ema_range_quant(x, x.min(), x.max(), 8)
    for conv in (reference.conv0, reference.conv1):
        h = nn.functional.conv2d(
            h, _range_weight(conv.weight, 6, True), _range_weight(conv.bias, 32, False)
        )
        h = torch.relu(h)
        h = _ema_range_quant(h, h.min(), h.max(), 8)
    torch.testing.assert_close(y, h, rtol=1e-6, atol=1e-6)


def test_quantize_inputs_refuses_a_container_model():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())
    with pytest.raises(ValueError, match="nn.Sequential, whose forward would run inputs_quant"):
        QuantAwareTrainRangeLinearQuantizer(model, bits_activations=8)
    assert type(model[1]) is nn.ReLU
    QuantAwareTrainRangeLinearQuantizer(
        model, bits_activations=8, quantize_inputs=False
    ).prepare_model()
    assert isinstance(model[1], qnn.QuantReLU)


@pytest.mark.parametrize("cls", ["QuantAwareTrainRangeLinearQuantizer", "PACTQuantizer"])
def test_prepared_model_scripts_and_compiles(cls):
    # The model-input quantizer's pre-hook is scripted with the forward.
    model = _small_model()
    definition = {"class": cls, "bits_activations": 8, "bits_weights": 4}
    policy = {"quantizer": {"instance_name": "q"}, "starting_epoch": 0, "ending_epoch": 3}
    dict_config(model, _sgd(model), {"quantizers": {"q": definition}, "policies": [policy]})
    x = torch.randn(2, 3, 7, 7)
    model(x)
    model.eval()
    assert torch.equal(torch.jit.script(model)(x), model(x))
    assert torch.equal(torch.compile(model, backend="aot_eager")(x), model(x))


def _pact_quantizer(model, **kwargs):
    return PACTQuantizer(model, _sgd(model), **kwargs)


@pytest.mark.parametrize(
    "build, error, message",
    [
        (
            lambda m: QuantAwareTrainRangeLinearQuantizer(m, mode="SYMETRIC"),
            ValueError,
            "mode must be one of SYMMETRIC, SYMMETRIC_RESTRICTED, ASYMMETRIC_UNSIGNED",
        ),
        (
            lambda m: QuantAwareTrainRangeLinearQuantizer(m, mode={"activations": "SYMMETRIC"}),
            ValueError,
            "mode: a mapping must have exactly the keys 'activations' and 'weights'",
        ),
        (
            lambda m: QuantAwareTrainRangeLinearQuantizer(m, bits_activations=None),
            ValueError,
            "quantize_inputs=True needs a bit width for the inputs",
        ),
        (lambda m: _pact_quantizer(m, bits_bias=8), ValueError, "bits_bias=8: quantizing biases"),
        (
            lambda m: PACTQuantizer(m, None),
            ValueError,
            "PACTQuantizer: optimizer cannot be None",
        ),
        (
            lambda m: _pact_quantizer(m, overrides={"conv1": 4}),
            ValueError,
            "overrides['conv1'] must be a mapping of bits_activations, bits_weights, bits_bias",
        ),
        (
            lambda m: _pact_quantizer(m, overrides={"conv1": {"wts": 4}}),
            ValueError,
            "'acts' / 'wts' / 'bias' are Distiller's deprecated keys",
        ),
        (
            lambda m: DorefaQuantizer(nn.DataParallel(m)),
            TypeError,
            "quantize the model before wrapping it in DataParallel",
        ),
    ],
)
def test_bad_quantizer_arguments_are_refused_by_name(build, error, message):
    model = PreactResNetCifar()
    with pytest.raises(error, match=re.escape(message)):
        build(model)
    assert type(model.layer2[0].conv1) is nn.Conv2d


def test_modes_as_distillers_enum_and_per_type_mapping():
    model = PreactResNetCifar()
    quantizer = QuantAwareTrainRangeLinearQuantizer(
        model,
        mode={"activations": LinearQuantMode.ASYMMETRIC_UNSIGNED, "weights": "SYMMETRIC"},
        quantize_inputs=False,
    )
    assert (quantizer.act_mode, quantizer.weight_mode) == ("ASYMMETRIC_UNSIGNED", "SYMMETRIC")


@pytest.mark.parametrize(
    "epochs, message",
    [
        ({"epochs": [0, 1], "starting_epoch": 0}, "give either epochs or starting_epoch"),
        ({"epochs": []}, "epochs must be a non-empty list of non-negative integers"),
        ({"starting_epoch": 0}, "starting_epoch and ending_epoch are required"),
        (
            {"starting_epoch": 0, "ending_epoch": 3, "frequency": 4},
            "frequency 4 exceeds the policy's 3 epochs",
        ),
        ({"starting_epoch": 3, "ending_epoch": 3}, "ending_epoch must be an integer after"),
    ],
)
def test_bad_policy_epochs_are_refused(epochs, message):
    sched = _schedule(policies=[{"lr_scheduler": {"instance_name": "training_lr"}, **epochs}])
    sched["policies"].insert(
        0,
        {"quantizer": {"instance_name": "pact_quantizer"}, "starting_epoch": 0, "ending_epoch": 9},
    )
    model = PreactResNetCifar()
    with pytest.raises(ValueError, match=re.escape(message)):
        dict_config(model, _sgd(model), sched)
    assert type(model.layer2[0].conv1) is nn.Conv2d


def test_reduce_lr_on_plateau_needs_the_metric_of_its_mode():
    sched = _schedule()
    sched["lr_schedulers"] = {"training_lr": {"class": "ReduceLROnPlateau", "mode": "max"}}
    model = PreactResNetCifar()
    optimizer = _sgd(model)
    scheduler = dict_config(model, optimizer, sched)
    scheduler.on_epoch_begin(0)
    with pytest.raises(ValueError, match=r"needs on_epoch_end\(epoch, metrics=\{'max': value\}\)"):
        scheduler.on_epoch_end(0, optimizer)
    scheduler.on_epoch_end(0, optimizer, metrics={"max": 0.5})
