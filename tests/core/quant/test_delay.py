"""DelayWrapper, _NoDelay and _DelayQuant: x for the first quant_delay_steps calls, then y."""

import pytest
import torch
from helpers import brevitas_format

from brevitas_cpp.config import JIT_ENABLED
from brevitas_cpp.core.quant.delay import DelayWrapper, _DelayQuant, _NoDelay

X = torch.tensor([1.0, 2.0])
Y = torch.tensor([3.0, 4.0])


@pytest.mark.parametrize("steps", [None, 0, -3])
def test_no_delay(steps):
    wrapper = DelayWrapper(steps)
    assert isinstance(wrapper.delay_impl, _NoDelay)
    for _ in range(3):
        assert wrapper(X, Y) is Y


@pytest.mark.parametrize("steps", [1, 3])
def test_countdown(steps):
    wrapper = DelayWrapper(steps)
    assert isinstance(wrapper.delay_impl, _DelayQuant)
    outputs = [wrapper(X, Y) for _ in range(steps + 2)]
    assert all(out is X for out in outputs[:steps])
    assert all(out is Y for out in outputs[steps:])
    assert wrapper.delay_impl.quant_delay_steps == 0


def test_countdown_advances_in_eval_mode_too():
    # Brevitas counts calls, not training steps.
    wrapper = DelayWrapper(2).eval()
    assert wrapper(X, Y) is X
    wrapper.train()
    assert wrapper(X, Y) is X
    assert wrapper(X, Y) is Y


def test_countdown_is_in_the_metadata_only():
    """No state_dict entry (Brevitas's keys); the countdown travels in the metadata, so a
    resumed wrapper delays only the calls the saved one had left."""
    wrapper = DelayWrapper(2)
    wrapper(X, Y)
    assert list(wrapper.state_dict()) == []
    fresh = DelayWrapper(2)
    result = fresh.load_state_dict(wrapper.state_dict(), strict=True)
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert fresh(X, Y) is X and fresh(X, Y) is Y
    # From a checkpoint without it (Brevitas's), the wrapper starts its own countdown.
    brevitas = DelayWrapper(2)
    brevitas.load_state_dict(brevitas_format(wrapper.state_dict()), strict=True)
    assert brevitas(X, Y) is X and brevitas(X, Y) is X and brevitas(X, Y) is Y


def test_gradient_flows_to_whichever_is_returned():
    x = X.clone().requires_grad_()
    y = x * 3.0
    wrapper = DelayWrapper(1)
    wrapper(x, y).sum().backward()
    assert torch.equal(x.grad, torch.ones(2))
    x.grad = None
    wrapper(x, x * 3.0).sum().backward()
    assert torch.equal(x.grad, torch.full((2,), 3.0))


def test_scripts_under_jit():
    for block in (DelayWrapper(0), DelayWrapper(2), _NoDelay(), _DelayQuant(1)):
        assert isinstance(block, torch.jit.ScriptModule) == JIT_ENABLED


@pytest.mark.parametrize("steps", [1.5, "2", True])
def test_bad_steps(steps):
    with pytest.raises(TypeError, match=r"DelayWrapper: quant_delay_steps must be an int"):
        DelayWrapper(steps)
