"""Small modules shared by the core blocks: constants that never enter the state_dict,
parameter holders, and in-place statistics updates kept out of TorchScript."""

from typing import Optional

import torch
from torch import Tensor

from brevitas_cpp import jit
from brevitas_cpp.core._state_dict import KeyPolicy

VALUE_ATTR_NAME = "value"


def inplace_tensor_add(tensor: Tensor, value: Tensor) -> Tensor:
    tensor.add_(value)
    return tensor


def inplace_tensor_mul(tensor: Tensor, value: Tensor) -> Tensor:
    tensor.mul_(value)
    return tensor


def inplace_momentum_update(
        tensor: Tensor, update: Tensor, momentum: Optional[float], counter: int,
        new_counter: int) -> Tensor:
    """Running statistic update: a cumulative average when momentum is None, else an EMA."""
    if momentum is None:
        tensor.mul_(counter / new_counter)
        tensor.add_(update / new_counter)
    else:
        tensor.mul_(1 - momentum)
        tensor.add_(momentum * update)
    return tensor


class StatelessBuffer(KeyPolicy, jit.ScriptModule):
    """A constant tensor that follows ``.to()``/``.cuda()`` like a buffer but is neither saved
    to nor expected in the state_dict (it is derived from the quantizer's settings)."""

    NEVER_SAVED_KEYS = (VALUE_ATTR_NAME,)

    def __init__(self, value: Tensor) -> None:
        super().__init__()
        self.register_buffer(VALUE_ATTR_NAME, value)

    @jit.script_method
    def forward(self) -> Tensor:
        return self.value.detach()

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        # Nothing to save: the value is rebuilt from the quantizer's settings.
        return


class SingleArgStatelessBuffer(jit.ScriptModule):
    """A StatelessBuffer called with one (ignored) argument, to stand in for a one-input block."""

    def __init__(self, value) -> None:
        super().__init__()
        self.const = StatelessBuffer(torch.as_tensor(value))

    @jit.script_method
    def forward(self, placeholder: Tensor) -> Tensor:
        return self.const()


class ParameterWrapper(jit.ScriptModule):
    """A learned tensor as a module, so that injection can pass it where a block is expected."""

    def __init__(self, value: Tensor) -> None:
        super().__init__()
        self.register_parameter(VALUE_ATTR_NAME, torch.nn.Parameter(value))

    @jit.script_method
    def forward(self) -> Tensor:
        return self.value
