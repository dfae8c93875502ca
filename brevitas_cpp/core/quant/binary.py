"""Binary quantizers: every element becomes +scale or -scale (Brevitas's
``brevitas.core.quant.binary``). Each returns (y, scale, zero_point = 0, bit_width = 1).

The sign is one fused C++ op with the multiplication by the scale (binary_quant, or
clamped_binary_quant, which first clamps x to [-scale, scale] so that inputs outside the range
get no gradient). Operands the op does not take as they are (another dtype or device) use the
composition, as does a user-supplied clamp block.
"""

import torch
from torch import Tensor
from torch.nn import Module

from brevitas_cpp import jit
from brevitas_cpp.core.function_wrapper import TensorClamp
from brevitas_cpp.core.quant._checks import check_bool, check_module, check_quant_delay_steps
from brevitas_cpp.core.quant.block_output import QuantBlockOutput
from brevitas_cpp.core.quant.delay import DelayWrapper
from brevitas_cpp.core.quant.plan.operands import scaled_operands_fit
from brevitas_cpp.core.replan import Replans
from brevitas_cpp.core.utils import StatelessBuffer
from brevitas_cpp.function import binary_quant, clamped_binary_quant
from brevitas_cpp.function.ops_ste import binary_sign_ste


def _constant(value: float) -> StatelessBuffer:
    # Zero point and bit width are fixed by the quantizer type: not state.
    return StatelessBuffer(torch.tensor(value))


class BinaryQuant(jit.ScriptModule):
    """y = binary_sign(x) * scale_impl(x): +scale for x >= 0, -scale otherwise, with a
    straight-through gradient for the sign. forward(x) -> (y, scale, zero_point, bit_width)."""

    def __init__(
        self, scaling_impl: Module, signed: bool = True, quant_delay_steps: int = 0
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        check_module(owner, "scaling_impl", scaling_impl)
        check_bool(owner, "signed", signed)
        if not signed:
            # Brevitas only asserts this (and asserts vanish under python -O).
            raise ValueError(
                f"{owner}: signed must be True, got {signed!r}; binary quantization maps to "
                "{-scale, +scale}, which is signed by construction"
            )
        check_quant_delay_steps(owner, quant_delay_steps)
        self.scaling_impl = scaling_impl
        self.bit_width = _constant(1.0)
        self.zero_point = _constant(0.0)
        self.delay_wrapper = DelayWrapper(quant_delay_steps)

    @jit.script_method
    def forward(self, x: Tensor) -> QuantBlockOutput:
        scale = self.scaling_impl(x)
        if scaled_operands_fit(x, scale):
            y = binary_quant(x, scale)
        else:
            y = binary_sign_ste(x) * scale
        y = self.delay_wrapper(x, y)
        return y, scale, self.zero_point(), self.bit_width()


class ClampedBinaryQuant(Replans, jit.ScriptModule):
    """y = binary_sign(tensor_clamp_impl(x, -scale, scale)) * scale: BinaryQuant whose x
    gradient is zero where |x| > scale (with the default TensorClamp), and whose scale gets the
    gradient of the clamp too. forward(x) -> (y, scale, zero_point, bit_width)."""

    __constants__ = ["fused"]

    def __init__(
        self,
        scaling_impl: Module,
        tensor_clamp_impl: Module = TensorClamp(),
        quant_delay_steps: int = 0,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        check_module(owner, "scaling_impl", scaling_impl)
        check_module(owner, "tensor_clamp_impl", tensor_clamp_impl)
        check_quant_delay_steps(owner, quant_delay_steps)
        self.scaling_impl = scaling_impl
        self.bit_width = _constant(1.0)
        self.zero_point = _constant(0.0)
        self.delay_wrapper = DelayWrapper(quant_delay_steps)
        self.tensor_clamp_impl = tensor_clamp_impl
        self.replan()

    def derive_plan(self) -> None:
        # Exact type: clamped_binary_quant reproduces TensorClamp's values and gradients only.
        self.fused = type(self.tensor_clamp_impl) is TensorClamp

    @jit.script_method
    def forward(self, x: Tensor) -> QuantBlockOutput:
        scale = self.scaling_impl(x)
        if self.fused and scaled_operands_fit(x, scale):
            y = clamped_binary_quant(x, scale)
        else:
            y = self.tensor_clamp_impl(x, -scale, scale)
            y = binary_sign_ste(y) * scale
        y = self.delay_wrapper(x, y)
        return y, scale, self.zero_point(), self.bit_width()
