"""Small modules shared by the core blocks: constants that never enter the state_dict,
parameter holders, and in-place statistics updates kept out of TorchScript."""

from typing import List, Optional, Tuple

import torch
from torch import Tensor

from brevitas_cpp import jit
from brevitas_cpp.core._state_dict import KeyPolicy
from brevitas_cpp.core.replan import Replans

VALUE_ATTR_NAME = "value"


def inplace_tensor_add(tensor: Tensor, value: Tensor) -> Tensor:
    tensor.add_(value)
    return tensor


def inplace_tensor_mul(tensor: Tensor, value: Tensor) -> Tensor:
    tensor.mul_(value)
    return tensor


def inplace_momentum_update(
    tensor: Tensor, update: Tensor, momentum: Optional[float], counter: int, new_counter: int
) -> Tensor:
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
        # The buffer itself: it never requires grad, and a detached alias (Brevitas's) costs a
        # dispatcher call per quantizer call for the same storage and version counter.
        return self.value

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


class SkipsIdentities(Replans):
    """Mixin for a block whose forward chains submodules that are usually identities (no
    restriction, no lower bound, no abs): forward tests a bool flag instead of calling them.
    Every quantizer runs these chains on every call, and a module call costs more than the
    arithmetic of a scalar scale.

    IDENTITY_SLOTS pairs each submodule's attribute name with its flag's; a flag is True while
    the submodule's exact type is one of IDENTITY_TYPES (a subclass may do something). The
    flags are TorchScript constants (list them in the class's __constants__); with
    BREVITAS_JIT=0 they follow a submodule replaced after construction (core/replan.py). Call
    replan() at the end of __init__."""

    IDENTITY_SLOTS: Tuple[Tuple[str, str], ...] = ()
    IDENTITY_TYPES: Tuple[type, ...] = ()

    def derive_plan(self) -> None:
        for submodule, flag in self.IDENTITY_SLOTS:
            setattr(self, flag, type(getattr(self, submodule)) in self.IDENTITY_TYPES)


class SliceTensor(jit.ScriptModule):
    """Selects the slice of a per-element tensor that matches a weight quantized piecewise:
    ``subtensor_slice_list`` has a (start, stop) or None per leading dimension, set by
    ``quant_weight(subtensor_slice_list=...)`` for the length of one call."""

    def __init__(self) -> None:
        super().__init__()
        self.subtensor_slice_list = jit.Attribute([None], List[Optional[Tuple[int, int]]])

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        for dim, bounds in enumerate(self.subtensor_slice_list):
            if bounds is not None:
                x = torch.ops.aten.slice(x, dim, bounds[0], bounds[1])
        return x
