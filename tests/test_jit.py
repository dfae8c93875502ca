"""The BREVITAS_JIT switch: block kinds, and copy.deepcopy, which torch gets wrong for old-style
script modules (the copy's parameters are non-leaf clones), so it is refused under JIT."""

import copy

import pytest
import torch

from brevitas_cpp import config, jit
from brevitas_cpp.core.scaling import ParameterScaling


def test_script_module_kind_follows_the_switch():
    assert issubclass(jit.ScriptModule, torch.jit.ScriptModule) == config.JIT_ENABLED
    assert issubclass(jit.ScriptModule, torch.nn.Module)


@pytest.mark.skipif(not config.JIT_ENABLED, reason="deepcopy is refused only with BREVITAS_JIT=1")
def test_deepcopy_is_refused_with_a_remedy_under_jit():
    with pytest.raises(TypeError, match="deepcopy of ParameterScaling .*load_state_dict"):
        copy.deepcopy(ParameterScaling(scaling_init=0.5))


@pytest.mark.skipif(config.JIT_ENABLED, reason="plain modules only")
def test_deepcopy_keeps_a_learnable_independent_copy_without_jit():
    block = ParameterScaling(scaling_init=0.5)
    clone = copy.deepcopy(block)
    (value,) = clone.parameters()
    assert value.is_leaf and value.requires_grad
    clone(torch.ones(1)).sum().backward()
    torch.optim.SGD(clone.parameters(), lr=0.25).step()
    assert torch.equal(clone(torch.ones(1)).detach(), torch.tensor([0.25]))
    assert torch.equal(block(torch.ones(1)).detach(), torch.tensor([0.5]))
    assert list(clone.state_dict()) == list(block.state_dict())
