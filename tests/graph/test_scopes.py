"""ignored_scopes / target_scopes as NNCF 2.x reads them (graph.scopes): exact addresses (name,
scope, the module's operation, a container) or {re} patterns searched in them, NNCF's wrapped
class names, and entries that select nothing refused. The expected layers are listed by hand
from seed 002's naming rules for a torchvision-shaped ResNet block."""

import warnings

import pytest
import torch
from torch import nn

from brevitas_cpp.graph import Quantizer


class BasicBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(4, 4, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(4)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1, bias=False)

    def forward(self, x):
        return self.relu(self.conv2(self.relu(self.bn1(self.conv1(x)))) + x)


class ResNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1, bias=False)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = nn.Sequential(BasicBlock(), BasicBlock())
        self.fc = nn.Linear(4, 10)

    def forward(self, x):
        x = self.layer1(self.relu(self.conv1(x)))
        return self.fc(x.mean((2, 3)))


ALL = [
    "conv1", "fc", "layer1.0.conv1", "layer1.0.conv2", "layer1.0.relu",
    "layer1.1.conv1", "layer1.1.conv2", "layer1.1.relu", "relu",
]  # fmt: skip


def replaced(**kwargs):
    quantizer = Quantizer(ResNet(), **kwargs)
    quantizer.prepare_model()
    return sorted(quantizer.replaced)


def without(*names):
    return [n for n in ALL if n not in names]


@pytest.mark.parametrize(
    "entry, kept",
    [
        ("layer1.0.conv1", ["layer1.0.conv1"]),  # a name
        ("ResNet/Sequential[layer1]/BasicBlock[0]/Conv2d[conv1]", ["layer1.0.conv1"]),  # scope
        ("ResNet/Sequential[layer1]/BasicBlock[0]/Conv2d[conv1]/conv2d_0", ["layer1.0.conv1"]),
        ("ResNet/Sequential[layer1]/BasicBlock[0]/NNCFConv2d[conv1]/conv2d_0", ["layer1.0.conv1"]),
        ("ResNet/Linear[fc]/linear_0", ["fc"]),
        ("ResNet/ReLU[relu]/relu__0", ["relu"]),  # in place, as NNCF writes it
        ("layer1.1", ["layer1.1.conv1", "layer1.1.conv2", "layer1.1.relu"]),  # a container
        ("{re}conv1", ["conv1", "layer1.0.conv1", "layer1.1.conv1"]),  # searched, not matched
        ("{re}BasicBlock\\[1\\]/NNCFConv2d", ["layer1.1.conv1", "layer1.1.conv2"]),
        ("{re}/relu__0$", ["relu", "layer1.0.relu", "layer1.1.relu"]),
        ("ResNet/Sequential[layer1]/BasicBlock[0]/BatchNorm2d[bn1]", []),  # valid, not replaced
    ],
)
def test_ignored_scope_entries(entry, kept):
    assert replaced(ignored_scopes=[entry]) == without(*kept)


def test_target_scopes_with_ignored_ones():
    assert replaced(
        target_scopes=["{re}layer1"], ignored_scopes=["ResNet/Sequential[layer1]/BasicBlock[1]"]
    ) == ["layer1.0.conv1", "layer1.0.conv2", "layer1.0.relu"]


def test_an_entry_selecting_nothing_is_refused_before_anything_is_replaced():
    model = ResNet()
    with pytest.raises(
        ValueError,
        match=r"ignored_scopes entries select no module of the model: "
        r"'ResNet/Sequential\[layer1\]/BasicBlock\[0\]/Conv2d\[conv3\]' \(closest: .*"
        r"ResNet/Sequential\[layer1\]/BasicBlock\[0\]/Conv2d\[conv1\].*validate_scopes=False",
    ):
        Quantizer(
            model,
            ignored_scopes=[
                "layer1.0.conv1",
                "ResNet/Sequential[layer1]/BasicBlock[0]/Conv2d[conv3]",
            ],
        ).prepare_model()
    assert type(model.conv1) is nn.Conv2d and type(model.layer1[0].conv1) is nn.Conv2d
    with pytest.raises(ValueError, match=r"target_scopes entries select no module.*'\{re\}conv9'"):
        Quantizer(ResNet(), target_scopes=["{re}conv9"]).prepare_model()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        names = replaced(ignored_scopes=["fc", "nope"], validate_scopes=False)
    assert names == without("fc")
    assert any("'nope'" in str(r.message) for r in record)
    with pytest.raises(TypeError, match="validate_scopes must be a bool"):
        Quantizer(ResNet(), validate_scopes="no")


def test_validate_scopes_from_a_config():
    quantizer = Quantizer.from_config(
        ResNet(), {"ignored_scopes": ["nope"], "validate_scopes": False}
    )
    with pytest.warns(UserWarning, match="select no module"):
        quantizer.prepare_model()
    assert torch.is_tensor(quantizer.model.conv1.weight)
