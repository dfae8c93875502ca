"""StatelessBuffer and friends: follow the module across devices/dtypes, never in state_dict."""

import pytest
import torch

from brevitas_cpp import config
from brevitas_cpp.core.utils import (
    ParameterWrapper,
    SingleArgStatelessBuffer,
    StatelessBuffer,
    inplace_momentum_update,
)


class Holder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.const = StatelessBuffer(torch.tensor([1.0, 2.0]))
        self.learned = ParameterWrapper(torch.tensor([3.0]))


def test_stateless_buffer_is_not_saved_and_not_expected():
    holder = Holder()
    assert list(holder.state_dict()) == ["learned.value"]
    fresh = Holder()
    result = fresh.load_state_dict({"learned.value": torch.tensor([7.0])}, strict=True)
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert torch.equal(fresh.learned(), torch.tensor([7.0]))
    assert torch.equal(fresh.const(), torch.tensor([1.0, 2.0]))


def test_stateless_buffer_follows_dtype_and_is_detached():
    holder = Holder().double()
    assert holder.const().dtype == torch.float64
    assert not holder.const().requires_grad
    assert holder.learned().requires_grad
    assert [n for n, _ in holder.named_parameters()] == ["learned.value"]


def test_single_arg_stateless_buffer_ignores_its_argument():
    block = SingleArgStatelessBuffer(0.5)
    assert torch.equal(block(torch.randn(3)), torch.tensor(0.5))
    assert block.state_dict() == {}


@pytest.mark.parametrize("momentum", [None, 0.1])
def test_inplace_momentum_update(momentum):
    running, update = torch.tensor([2.0]), torch.tensor([4.0])
    inplace_momentum_update(running, update, momentum, 3, 4)
    expected = 2.0 * 3 / 4 + 4.0 / 4 if momentum is None else 2.0 * 0.9 + 0.1 * 4.0
    assert torch.allclose(running, torch.tensor([expected]))


def test_blocks_follow_jit_switch():
    for block in (
        StatelessBuffer(torch.ones(1)),
        SingleArgStatelessBuffer(1.0),
        ParameterWrapper(torch.ones(1)),
    ):
        assert isinstance(block, torch.jit.ScriptModule) == config.JIT_ENABLED
