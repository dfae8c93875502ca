"""Delayed quantization: a quantizer passes its input through unchanged for its first
``quant_delay_steps`` calls, then returns the quantized value.

As in Brevitas, the countdown advances on every forward call (training or eval) and is not part
of the state_dict: a reloaded or freshly built quantizer starts counting again.
"""

from typing import Optional

from torch import Tensor

from brevitas_cpp import jit
from brevitas_cpp.core._state_dict import KeyPolicy
from brevitas_cpp.core.quant._checks import check_quant_delay_steps


class _NoDelay(jit.ScriptModule):
    """Always the quantized value y."""

    @jit.script_method
    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        return y


class _DelayQuant(KeyPolicy, jit.ScriptModule):
    """x while the countdown is positive (decrementing it), y afterwards."""

    # Some TorchScript versions report the `training` flag as a state entry; it is not state.
    NEVER_SAVED_KEYS = ("training",)
    # The countdown: a resumed run delays only the steps the saved one had left.
    SAVED_COUNTERS = ("quant_delay_steps",)

    def __init__(self, quant_delay_steps: int) -> None:
        super().__init__()
        check_quant_delay_steps(type(self).__name__, quant_delay_steps)
        self.quant_delay_steps: int = jit.Attribute(quant_delay_steps, int)

    @jit.script_method
    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        if self.quant_delay_steps > 0:
            self.quant_delay_steps = self.quant_delay_steps - 1
            return x
        return y


class DelayWrapper(jit.ScriptModule):
    """Chooses between no delay (quant_delay_steps None or <= 0) and a countdown."""

    def __init__(self, quant_delay_steps: Optional[int]) -> None:
        super().__init__()
        check_quant_delay_steps(type(self).__name__, quant_delay_steps)
        if quant_delay_steps is None or quant_delay_steps <= 0:
            self.delay_impl = _NoDelay()
        else:
            self.delay_impl = _DelayQuant(quant_delay_steps)

    @jit.script_method
    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        return self.delay_impl(x, y)
