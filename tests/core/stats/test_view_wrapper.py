"""Views of tracked parameters: values, and that the borrowed parameter never enters (nor is
expected in) the wrapper's state_dict."""

import pytest
import torch
from helpers import rand
from torch import nn

from brevitas_cpp import config
from brevitas_cpp.core.function_wrapper import OverOutputChannelView
from brevitas_cpp.core.stats.view_wrapper import (
    _ViewCatParameterWrapper,
    _ViewParameter,
    _ViewParameterWrapper,
)


def test_view_parameter_wrapper_uses_parameter_or_input():
    w = nn.Parameter(rand((3, 2, 2), seed=1))
    block = _ViewParameterWrapper(w, OverOutputChannelView())
    assert torch.equal(block(None), w.reshape(3, 4))
    x = rand((2, 5), seed=2)
    assert torch.equal(block(x), x)


def test_view_parameter_requires_input():
    block = _ViewParameter(OverOutputChannelView())
    x = rand((3, 2, 2), seed=3)
    assert torch.equal(block(x), x.reshape(3, 4))
    # Under TorchScript the error surfaces as torch.jit.Error, which is not a RuntimeError.
    with pytest.raises(
        (RuntimeError, torch.jit.Error), match="_ViewParameter: the input cannot be None"
    ):
        block(None)


def test_view_cat_puts_parameter_first():
    w = nn.Parameter(rand((3, 2), seed=4))
    block = _ViewCatParameterWrapper(w, OverOutputChannelView(), 1)
    x = rand((3, 5), seed=5)
    assert torch.equal(block(x), torch.cat([w, x], dim=1))


@pytest.mark.parametrize(
    "make",
    [
        lambda w: _ViewParameterWrapper(w, OverOutputChannelView()),
        lambda w: _ViewCatParameterWrapper(w, OverOutputChannelView(), 0),
    ],
)
def test_parameter_is_not_saved_nor_expected(make, monkeypatch):
    w = nn.Parameter(torch.ones(2, 2))
    block = make(w)
    assert block.state_dict() == {}
    result = block.load_state_dict({}, strict=True)
    assert result.missing_keys == []
    # Gradients still reach the borrowed parameter.
    block(
        torch.zeros(2, 2) if isinstance(block, _ViewCatParameterWrapper) else None
    ).sum().backward()
    assert torch.equal(w.grad, torch.ones(2, 2))
    monkeypatch.setattr(config, "_FULL_STATE_DICT", True, raising=False)
    assert list(block.state_dict()) == ["parameter"]


@pytest.mark.parametrize(
    "build,error,match",
    [
        (
            lambda: _ViewParameterWrapper(torch.ones(2), OverOutputChannelView()),
            TypeError,
            r"_ViewParameterWrapper: parameter must be a torch.nn.Parameter, got Tensor",
        ),
        (
            lambda: _ViewParameter("view"),
            TypeError,
            r"_ViewParameter: view_shape_impl must be a torch.nn.Module",
        ),
        (
            lambda: _ViewCatParameterWrapper(
                nn.Parameter(torch.ones(2)), OverOutputChannelView(), None
            ),
            TypeError,
            r"_ViewCatParameterWrapper: cat_dim must be an int, got None",
        ),
    ],
)
def test_bad_input(build, error, match):
    with pytest.raises(error, match=match):
        build()


def test_blocks_follow_jit_switch():
    w = nn.Parameter(torch.ones(2, 2))
    for block in (
        _ViewParameterWrapper(w, OverOutputChannelView()),
        _ViewParameter(OverOutputChannelView()),
        _ViewCatParameterWrapper(w, OverOutputChannelView(), 1),
    ):
        assert isinstance(block, torch.jit.ScriptModule) == config.JIT_ENABLED
