"""brevitas_cpp.torch_version as Brevitas exposes brevitas.torch_version: a
packaging Version of torch.__version__ without a "+cpu" tag, comparable with version.parse."""

import os

import torch
from packaging import version

import brevitas_cpp
from brevitas_cpp import is_dynamo_compiling, torch_version
from brevitas_cpp._torch_version import parse_torch_version

GOLDEN_FILE = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "golden", "brevitas_0_12_modules.pt"
)


def test_same_as_brevitas_for_the_recorded_torch():
    golden = torch.load(GOLDEN_FILE)
    assert str(parse_torch_version(golden["torch_version_raw"])) == golden["torch_version"]


def test_user_code_comparisons():
    assert isinstance(torch_version, version.Version)
    assert torch_version == parse_torch_version(torch.__version__)
    assert torch_version >= version.parse("2.1")
    assert brevitas_cpp.torch_version is torch_version


def test_only_the_cpu_tag_is_dropped():
    assert parse_torch_version("2.13.0+cpu") == version.parse("2.13.0")
    assert str(parse_torch_version("2.4.1+cu121")) == "2.4.1+cu121"
    assert parse_torch_version("2.5.0") == version.Version("2.5.0")


def test_is_dynamo_compiling():
    assert is_dynamo_compiling() is False

    @torch.compile(backend="eager", fullgraph=True)
    def f(x):
        return x + 1 if is_dynamo_compiling() else x

    assert torch.equal(f(torch.zeros(2)), torch.ones(2))
