"""NNCF 2.x scope names from graph.trace, and ignored_scopes / target_scopes in NNCF's format, on
torchvision-shaped ResNet-18 and MobileNetV2 written out here (torchvision is not a dependency):
torchvision's module names, classes and forwards, at tiny widths. The expected scopes are listed
by hand from seed 002's rules (``Model/Type[field]/.../<operator>_<n>``) with NNCF's operator
names (nncf/torch/dynamic_graph/patch_pytorch.py): ``out += identity`` is ``__iadd__``,
``x + self.conv(x)`` ``__add__``, an in-place ReLU ``relu_``, ReLU6 ``hardtanh``, the inputs
``/nncf_model_input_<i>``; NNCF's own reference graphs (tests/torch/data/reference_graphs/)
write them so."""

import warnings
from typing import List, Optional

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from brevitas_cpp.graph import Quantizer, trace
from brevitas_cpp.graph.scopes import _OPERATIONS

# ---- torchvision's ResNet-18 (torchvision/models/resnet.py), widths 4..32 ------------------


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(
        self, inplanes: int, planes: int, stride: int = 1, downsample: Optional[nn.Module] = None
    ) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        identity = x
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)
        out = self.conv2(out)
        out = self.bn2(out)
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        out = self.relu(out)
        return out


class ResNet(nn.Module):
    def __init__(self, widths=(4, 8, 16, 32), num_classes: int = 10) -> None:
        super().__init__()
        self.inplanes = widths[0]
        self.conv1 = nn.Conv2d(3, self.inplanes, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(widths[0], 2)
        self.layer2 = self._make_layer(widths[1], 2, stride=2)
        self.layer3 = self._make_layer(widths[2], 2, stride=2)
        self.layer4 = self._make_layer(widths[3], 2, stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(widths[3], num_classes)

    def _make_layer(self, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes)
            )
        layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes
        layers += [BasicBlock(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)
        x = self.maxpool(x)
        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        x = self.fc(x)
        return x


# ---- torchvision's MobileNetV2 (torchvision/models/mobilenetv2.py, ops/misc.py) ---------------


class Conv2dNormActivation(nn.Sequential):
    def __init__(
        self, in_planes: int, out_planes: int, kernel_size: int = 3, stride: int = 1, groups=1
    ) -> None:
        padding = (kernel_size - 1) // 2
        super().__init__(
            nn.Conv2d(
                in_planes, out_planes, kernel_size, stride, padding, groups=groups, bias=False
            ),
            nn.BatchNorm2d(out_planes),
            nn.ReLU6(inplace=True),
        )


class InvertedResidual(nn.Module):
    def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        hidden_dim = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers: List[nn.Module] = []
        if expand_ratio != 1:
            layers.append(Conv2dNormActivation(inp, hidden_dim, kernel_size=1))
        layers += [
            Conv2dNormActivation(hidden_dim, hidden_dim, stride=stride, groups=hidden_dim),
            nn.Conv2d(hidden_dim, oup, 1, 1, 0, bias=False),
            nn.BatchNorm2d(oup),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        if self.use_res_connect:
            return x + self.conv(x)
        return self.conv(x)


class MobileNetV2(nn.Module):
    # (expand ratio, channels, repeats, stride), as torchvision's inverted_residual_setting.
    SETTING = [[1, 4, 1, 1], [2, 6, 2, 2]]

    def __init__(self, num_classes: int = 3) -> None:
        super().__init__()
        features: List[nn.Module] = [Conv2dNormActivation(3, 4, stride=2)]
        channels = 4
        for t, c, n, s in self.SETTING:
            for i in range(n):
                features.append(InvertedResidual(channels, c, s if i == 0 else 1, t))
                channels = c
        features.append(Conv2dNormActivation(channels, 8, kernel_size=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(p=0.2), nn.Linear(8, num_classes))

    def forward(self, x):
        x = self.features(x)
        x = nn.functional.adaptive_avg_pool2d(x, (1, 1))
        x = torch.flatten(x, 1)
        x = self.classifier(x)
        return x


# ---- the scopes, listed by hand -------------------------------------------------------------

LAYER1_BLOCK0 = [
    "ResNet/Sequential[layer1]/BasicBlock[0]/Conv2d[conv1]/conv2d_0",
    "ResNet/Sequential[layer1]/BasicBlock[0]/BatchNorm2d[bn1]/batch_norm_0",
    "ResNet/Sequential[layer1]/BasicBlock[0]/ReLU[relu]/relu__0",
    "ResNet/Sequential[layer1]/BasicBlock[0]/Conv2d[conv2]/conv2d_0",
    "ResNet/Sequential[layer1]/BasicBlock[0]/BatchNorm2d[bn2]/batch_norm_0",
    "ResNet/Sequential[layer1]/BasicBlock[0]/__iadd___0",
    "ResNet/Sequential[layer1]/BasicBlock[0]/ReLU[relu]/relu__1",
]


def _block(layer: int, block: int, downsample: bool) -> List[str]:
    """A BasicBlock's seven (nine with a downsample) operations, in call order."""
    scope = f"ResNet/Sequential[layer{layer}]/BasicBlock[{block}]"
    ops = [
        f"{scope}/Conv2d[conv1]/conv2d_0",
        f"{scope}/BatchNorm2d[bn1]/batch_norm_0",
        f"{scope}/ReLU[relu]/relu__0",
        f"{scope}/Conv2d[conv2]/conv2d_0",
        f"{scope}/BatchNorm2d[bn2]/batch_norm_0",
    ]
    if downsample:
        ops += [
            f"{scope}/Sequential[downsample]/Conv2d[0]/conv2d_0",
            f"{scope}/Sequential[downsample]/BatchNorm2d[1]/batch_norm_0",
        ]
    return ops + [f"{scope}/__iadd___0", f"{scope}/ReLU[relu]/relu__1"]


RESNET_SCOPES = (
    [
        "/nncf_model_input_0",
        "ResNet/Conv2d[conv1]/conv2d_0",
        "ResNet/BatchNorm2d[bn1]/batch_norm_0",
        "ResNet/ReLU[relu]/relu__0",
        "ResNet/MaxPool2d[maxpool]/max_pool2d_0",
    ]
    + LAYER1_BLOCK0
    + _block(1, 1, False)
    + [op for layer in (2, 3, 4) for b in (0, 1) for op in _block(layer, b, b == 0)]
    + [
        "ResNet/AdaptiveAvgPool2d[avgpool]/adaptive_avg_pool2d_0",
        "ResNet/flatten_0",
        "ResNet/Linear[fc]/linear_0",
        "/nncf_model_output_0",
    ]
)

F_ = "MobileNetV2/Sequential[features]"


def _cna(scope: str) -> List[str]:
    return [
        f"{scope}/Conv2d[0]/conv2d_0",
        f"{scope}/BatchNorm2d[1]/batch_norm_0",
        f"{scope}/ReLU6[2]/hardtanh_0",
    ]


MOBILENET_SCOPES = (
    ["/nncf_model_input_0"]
    + _cna(f"{F_}/Conv2dNormActivation[0]")
    # features[1]: expand ratio 1, 4 -> 4 channels, stride 1: no expansion, a residual.
    + _cna(f"{F_}/InvertedResidual[1]/Sequential[conv]/Conv2dNormActivation[0]")
    + [
        f"{F_}/InvertedResidual[1]/Sequential[conv]/Conv2d[1]/conv2d_0",
        f"{F_}/InvertedResidual[1]/Sequential[conv]/BatchNorm2d[2]/batch_norm_0",
        f"{F_}/InvertedResidual[1]/__add___0",
    ]
    # features[2]: 4 -> 6, stride 2: no residual; features[3]: 6 -> 6: a residual.
    + _cna(f"{F_}/InvertedResidual[2]/Sequential[conv]/Conv2dNormActivation[0]")
    + _cna(f"{F_}/InvertedResidual[2]/Sequential[conv]/Conv2dNormActivation[1]")
    + [
        f"{F_}/InvertedResidual[2]/Sequential[conv]/Conv2d[2]/conv2d_0",
        f"{F_}/InvertedResidual[2]/Sequential[conv]/BatchNorm2d[3]/batch_norm_0",
    ]
    + _cna(f"{F_}/InvertedResidual[3]/Sequential[conv]/Conv2dNormActivation[0]")
    + _cna(f"{F_}/InvertedResidual[3]/Sequential[conv]/Conv2dNormActivation[1]")
    + [
        f"{F_}/InvertedResidual[3]/Sequential[conv]/Conv2d[2]/conv2d_0",
        f"{F_}/InvertedResidual[3]/Sequential[conv]/BatchNorm2d[3]/batch_norm_0",
        f"{F_}/InvertedResidual[3]/__add___0",
    ]
    + _cna(f"{F_}/Conv2dNormActivation[4]")
    + [
        "MobileNetV2/adaptive_avg_pool2d_0",
        "MobileNetV2/flatten_0",
        "MobileNetV2/Sequential[classifier]/Dropout[0]/dropout_0",
        "MobileNetV2/Sequential[classifier]/Linear[1]/linear_0",
        "/nncf_model_output_0",
    ]
)


def test_resnet18_scopes():
    graph = trace(ResNet(), torch.randn(1, 3, 32, 32))
    assert graph.scopes() == RESNET_SCOPES
    assert graph.scopes()[5:12] == LAYER1_BLOCK0
    # The residual add's operands: the block's bn2 and its input (the maxpool's output).
    add = graph.find("ResNet/Sequential[layer1]/BasicBlock[0]/__iadd___0")
    assert add.op == "__iadd__" and add.dispatch_scope.endswith("BasicBlock[0]/add__0")
    assert [graph.nodes[i].scope for i in add.inputs] == [
        "ResNet/Sequential[layer1]/BasicBlock[0]/BatchNorm2d[bn2]/batch_norm_0",
        "ResNet/MaxPool2d[maxpool]/max_pool2d_0",
    ]


def test_mobilenet_v2_scopes():
    graph = trace(MobileNetV2(), torch.randn(1, 3, 16, 16))
    assert graph.scopes() == MOBILENET_SCOPES
    add = graph.find(f"{F_}/InvertedResidual[3]/__add___0")
    assert add.op == "__add__" and len(add.inputs) == 2


# ---- operator names, one rule at a time ------------------------------------------------------


class Operators(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.relu = nn.ReLU(inplace=True)
        self.relu6 = nn.ReLU6(inplace=True)

    def forward(self, x):
        y = x + 1  # __add__
        y = 2 * y  # __rmul__ (the left operand is no tensor)
        y = 1 - y  # __rsub__
        y = -y  # __neg__
        y += x  # __iadd__
        z = y.add(x)  # add: a method keeps its name
        z = torch.add(z, 1)  # add again
        z.add_(1)  # add_
        w = y[0:1]  # __getitem__
        _ = torch.ones_like(w), w.shape, w.size(0), w.dim()  # not traced by NNCF
        a = F.relu(w)  # relu
        b = F.relu(w.clone(), inplace=True)  # relu_
        c = self.relu(w.clone())  # relu_ (nn.ReLU(inplace=True))
        d = self.relu6(w.clone())  # hardtanh, in place or not
        e = F.hardtanh(w.clone(), inplace=True)  # hardtanh
        return torch.cat([a, b, c, d, e, z[0:1]]) @ torch.ones(4, 4)  # __matmul__


def test_operator_names_as_nncf_writes_them():
    graph = trace(Operators(), torch.randn(2, 4))
    ops = [n.scope for n in graph.nodes if n.op not in ("clone",)]
    assert ops == [
        "/nncf_model_input_0",
        "Operators/__add___0",
        "Operators/__rmul___0",
        "Operators/__rsub___0",
        "Operators/__neg___0",
        "Operators/__iadd___0",
        "Operators/add_0",
        "Operators/add_1",
        "Operators/add__0",
        "Operators/__getitem___0",
        "Operators/relu_0",
        "Operators/relu__0",
        "Operators/ReLU[relu]/relu__0",
        "Operators/ReLU6[relu6]/hardtanh_0",
        "Operators/hardtanh_0",
        "Operators/__getitem___1",
        "Operators/cat_0",
        "Operators/__matmul___0",
        "/nncf_model_output_0",
    ]
    # The names a TorchFunctionMode sees, which QuantizerInsertion matches at run time.
    dispatch = {n.scope: n.dispatch_scope for n in graph.nodes}
    assert dispatch["Operators/__add___0"] == "Operators/add_0"
    assert dispatch["Operators/add_0"] == "Operators/add_1"  # x + 1 was the first add
    assert dispatch["Operators/add_1"] == "Operators/add_2"
    assert dispatch["Operators/__iadd___0"] == "Operators/add__0"
    assert dispatch["Operators/add__0"] == "Operators/add__1"
    # The operator dunders are torch.Tensor's own again.
    assert torch.Tensor.__add__ is torch._C.TensorBase.__add__
    assert "__floordiv__" in torch.Tensor.__dict__ and "__add__" not in torch.Tensor.__dict__


def test_dunders_restored_when_the_forward_fails():
    class Failing(nn.Module):
        def forward(self, x):
            return (x + 1).missing

    with pytest.raises(AttributeError):
        trace(Failing(), torch.randn(1))
    assert "__add__" not in torch.Tensor.__dict__


def test_a_module_called_by_another_is_scoped_from_its_caller():
    """NNCF looks a called module up among its caller's children; a module the caller does not
    hold is written by its class alone."""

    class Holder(nn.Module):
        def __init__(self, shared: nn.Module) -> None:
            super().__init__()
            self.inner = nn.Sequential(nn.Identity())
            self.borrowed = [shared]  # not a child

        def forward(self, x):
            return self.borrowed[0](self.inner[0](x))

    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.relu = nn.ReLU()
            self.holder = Holder(self.relu)

        def forward(self, x):
            return self.holder(x)

    graph = trace(Outer(), torch.randn(2))
    assert graph.scopes()[1] == "Outer/Holder[holder]/ReLU/relu_0"


def test_the_operation_table_is_what_trace_records():
    """graph.scopes names a module's operation without tracing; each entry is traced here."""
    inputs = {
        1: torch.randn(1, 2, 4),
        2: torch.randn(1, 2, 4, 4),
        3: torch.randn(1, 2, 4, 4, 4),
    }
    for module_type, op in _OPERATIONS.items():
        module, x = _instance(module_type, inputs)
        first = trace(module, x).nodes[1]
        assert first.op == op, module_type.__name__


def _instance(module_type, inputs):
    name = module_type.__name__
    dims = 3 if name.endswith("3d") else 1 if name.endswith("1d") else 2
    x = inputs[dims]
    if name.startswith(("Conv", "ConvTranspose")):
        return module_type(2, 2, 1), x
    if name.startswith("BatchNorm"):
        return module_type(2), x
    if module_type is nn.Linear:
        return nn.Linear(4, 2), x
    if module_type is nn.Embedding:
        return nn.Embedding(5, 2), torch.tensor([1, 2])
    if module_type is nn.LayerNorm:
        return nn.LayerNorm(4), x
    if module_type is nn.GroupNorm:
        return nn.GroupNorm(1, 2), x
    if name.startswith(("MaxPool", "AvgPool")):
        return module_type(2), x
    if name.startswith("Adaptive"):
        return module_type(1), x
    if module_type is nn.Softmax:
        return nn.Softmax(dim=1), x
    if module_type is nn.Upsample:
        return nn.Upsample(scale_factor=2), x
    return module_type(), x


# ---- ignored_scopes / target_scopes in NNCF's format -----------------------------------------

RESNET_REPLACED = (
    ["conv1", "relu"]
    + [
        f"layer{i}.{b}.{m}"
        for i in (1, 2, 3, 4)
        for b in (0, 1)
        for m in ("conv1", "relu", "conv2")
    ]
    + [f"layer{i}.0.downsample.0" for i in (2, 3, 4)]
    + ["fc"]
)


def replaced(model: nn.Module, **kwargs) -> List[str]:
    quantizer = Quantizer(model, **kwargs)
    quantizer.prepare_model()
    return sorted(quantizer.replaced)


def kept(model: nn.Module, all_names: List[str], **kwargs) -> List[str]:
    return sorted(set(all_names) - set(replaced(model, **kwargs)))


@pytest.mark.parametrize(
    "entries, expected",
    [
        # Module level: a block holds its convolutions and its ReLU.
        (
            ["ResNet/Sequential[layer1]/BasicBlock[0]"],
            ["layer1.0.conv1", "layer1.0.conv2", "layer1.0.relu"],
        ),
        # Operation level, as a user copies it from NNCF's graph (NNCFConv2d for Conv2d).
        (["ResNet/NNCFConv2d[conv1]/conv2d_0"], ["conv1"]),
        (
            [
                "ResNet/Sequential[layer2]/BasicBlock[0]/Sequential[downsample]/NNCFConv2d[0]/conv2d_0"
            ],
            ["layer2.0.downsample.0"],
        ),  # fmt: skip
        (["ResNet/NNCFLinear[fc]/linear_0"], ["fc"]),
        (["ResNet/ReLU[relu]/relu__0"], ["relu"]),
        # The second call of a block's ReLU names the same module.
        (["ResNet/Sequential[layer3]/BasicBlock[1]/ReLU[relu]/relu__1"], ["layer3.1.relu"]),
        # {re} entries are searched in the addresses.
        (["{re}.*downsample.*"], [f"layer{i}.0.downsample.0" for i in (2, 3, 4)]),
        (
            ["{re}ResNet/Sequential\\[layer4\\]/BasicBlock\\[1\\]/NNCFConv2d\\[conv[12]\\]"],
            ["layer4.1.conv1", "layer4.1.conv2"],
        ),
        # A BatchNorm is a valid entry that selects nothing replaceable.
        (["ResNet/NNCFBatchNorm2d[bn1]/batch_norm_0", "ResNet/NNCFLinear[fc]/linear_0"], ["fc"]),
    ],
)
def test_resnet18_ignored_scopes(entries, expected):
    assert kept(ResNet(), RESNET_REPLACED, ignored_scopes=entries) == sorted(expected)


def test_resnet18_target_scopes():
    assert replaced(ResNet(), target_scopes=["{re}layer3"]) == [
        "layer3.0.conv1",
        "layer3.0.conv2",
        "layer3.0.downsample.0",
        "layer3.0.relu",
        "layer3.1.conv1",
        "layer3.1.conv2",
        "layer3.1.relu",
    ]
    assert replaced(
        ResNet(),
        target_scopes=["{re}NNCFConv2d\\[conv1\\]"],
        ignored_scopes=["ResNet/Sequential[layer1]"],
    ) == ["conv1"] + [f"layer{i}.{b}.conv1" for i in (2, 3, 4) for b in (0, 1)]


MOBILENET_REPLACED = (
    ["features.0.0", "features.0.2", "features.1.conv.0.0", "features.1.conv.0.2"]
    + ["features.1.conv.1"]
    + [f"features.{i}.conv.{j}.{k}" for i in (2, 3) for j in (0, 1) for k in (0, 2)]
    + ["features.2.conv.2", "features.3.conv.2", "features.4.0", "features.4.2", "classifier.1"]
)


@pytest.mark.parametrize(
    "entries, expected",
    [
        ([f"{F_}/Conv2dNormActivation[0]/ReLU6[2]/hardtanh_0"], ["features.0.2"]),
        (
            [f"{F_}/InvertedResidual[1]/Sequential[conv]/NNCFConv2d[1]/conv2d_0"],
            ["features.1.conv.1"],
        ),
        (["MobileNetV2/Sequential[classifier]"], ["classifier.1"]),
        (
            ["{re}InvertedResidual\\[3\\]/.*/hardtanh_0$"],
            ["features.3.conv.0.2", "features.3.conv.1.2"],
        ),
        (["{re}Conv2dNormActivation\\[4\\]"], ["features.4.0", "features.4.2"]),
    ],
)
def test_mobilenet_v2_ignored_scopes(entries, expected):
    assert kept(MobileNetV2(), MOBILENET_REPLACED, ignored_scopes=entries) == sorted(expected)


def test_mobilenet_v2_target_scopes():
    assert replaced(MobileNetV2(), target_scopes=[f"{F_}/InvertedResidual[2]"]) == [
        "features.2.conv.0.0",
        "features.2.conv.0.2",
        "features.2.conv.1.0",
        "features.2.conv.1.2",
        "features.2.conv.2",
    ]


def test_an_entry_selecting_nothing_names_the_closest_scopes():
    model = ResNet()
    entry = "ResNet/Sequential[layer1]/BasicBlock[0]/NNCFConv2d[conv3]/conv2d_0"
    with pytest.raises(ValueError) as info:
        Quantizer(model, ignored_scopes=[entry]).prepare_model()
    message = str(info.value)
    assert "ignored_scopes entries select no module of the model" in message
    assert "ResNet/Sequential[layer1]/BasicBlock[0]/Conv2d[conv1]/conv2d_0" in message
    assert "validate_scopes=False" in message
    assert type(model.conv1) is nn.Conv2d  # nothing replaced
    with pytest.raises(ValueError, match=r"target_scopes entries select no module.*\{re\}layer9"):
        Quantizer(MobileNetV2(), target_scopes=["{re}layer9"]).prepare_model()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        names = replaced(ResNet(), ignored_scopes=[entry, "fc"], validate_scopes=False)
    assert names == sorted(set(RESNET_REPLACED) - {"fc"})
    assert any(entry in str(r.message) for r in record)
