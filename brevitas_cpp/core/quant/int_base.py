"""IntQuant: uniform affine integer quantization of a tensor, given its scale, zero point and
bit width (Brevitas's ``brevitas.core.quant.IntQuant``).

    y = (clamp(float_to_int(x / scale + zero_point), min_int, max_int) - zero_point) * scale

When float_to_int_impl and tensor_clamp_impl are the library's rounding and clamp blocks, the
whole expression is one call to the fused C++ op ``brevitas_cpp.function.int_quant`` (same
values and gradients, one pass over x). Any other block takes the step-by-step composition,
which calls the user's modules.

DecoupledIntQuant (weight-normalization and accumulator-aware quantizers) rounds and clamps with
a pre-clipping scale and zero point and dequantizes with the post-clipping ones.
"""

from torch import Tensor
from torch.nn import Module

from brevitas_cpp import jit
from brevitas_cpp.core.function_wrapper import Identity, RoundSte, TensorClamp
from brevitas_cpp.core.quant._checks import check_bool, check_module, check_quant_delay_steps
from brevitas_cpp.core.quant.delay import DelayWrapper, _NoDelay
from brevitas_cpp.core.quant.plan.operands import clamp_ste_of, int_operands_fit, rounding_mode_of
from brevitas_cpp.core.replan import Replans
from brevitas_cpp.function import int_quant
from brevitas_cpp.function.ops import max_int, min_int


class IntQuant(Replans, jit.ScriptModule):
    """Quantize x to integers of ``bit_width`` bits and return them dequantized.

    forward(scale, zero_point, bit_width, x) -> Tensor. x is first reshaped by input_view_impl;
    for the first quant_delay_steps calls x itself is returned (see DelayWrapper)."""

    __constants__ = [
        "signed",
        "narrow_range",
        "fused",
        "rounding_mode",
        "clamp_ste",
        "view_is_identity",
        "never_delays",
    ]

    def __init__(
        self,
        narrow_range: bool,
        signed: bool,
        input_view_impl: Module,
        float_to_int_impl: Module = RoundSte(),  # Brevitas's defaults; stateless, so one
        tensor_clamp_impl: Module = TensorClamp(),  # instance can serve every quantizer
        quant_delay_steps: int = 0,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        check_bool(owner, "narrow_range", narrow_range)
        check_bool(owner, "signed", signed)
        check_module(owner, "input_view_impl", input_view_impl)
        check_module(owner, "float_to_int_impl", float_to_int_impl)
        check_module(owner, "tensor_clamp_impl", tensor_clamp_impl)
        check_quant_delay_steps(owner, quant_delay_steps)
        self.signed = signed
        self.narrow_range = narrow_range
        self.input_view_impl = input_view_impl
        self.float_to_int_impl = float_to_int_impl
        self.tensor_clamp_impl = tensor_clamp_impl
        self.delay_wrapper = DelayWrapper(quant_delay_steps)
        self.replan()

    def derive_plan(self) -> None:
        # Derived again when a block is replaced (core/replan.py).
        mode = rounding_mode_of(self.float_to_int_impl)
        clamp_ste = clamp_ste_of(self.tensor_clamp_impl)
        # TorchScript constants: with fused False the scripted forward drops the fused branch.
        self.fused = mode is not None and clamp_ste is not None
        self.rounding_mode = mode if mode is not None else "round"
        self.clamp_ste = bool(clamp_ste)
        # The usual quantizer views nothing and never delays: forward then skips those two
        # module calls (a per-call cost paid by every quantizer on every step). Exact types, as
        # for fusion: a subclass may do something.
        self.view_is_identity = type(self.input_view_impl) is Identity
        self.never_delays = type(self.delay_wrapper.delay_impl) is _NoDelay

    @jit.script_method
    def to_int(self, scale: Tensor, zero_point: Tensor, bit_width: Tensor, x: Tensor) -> Tensor:
        """clamp(float_to_int(view(x) / scale + zero_point), min_int, max_int), not dequantized."""
        return self._viewed_to_int(scale, zero_point, bit_width, self.input_view_impl(x))

    @jit.script_method
    def _viewed_to_int(
        self, scale: Tensor, zero_point: Tensor, bit_width: Tensor, x: Tensor
    ) -> Tensor:
        """to_int of an input already reshaped by input_view_impl."""
        y = x / scale
        y = y + zero_point
        min_int_val = self.min_int(bit_width)
        max_int_val = self.max_int(bit_width)
        y = self.float_to_int_impl(y)
        y = self.tensor_clamp_impl(y, min_val=min_int_val, max_val=max_int_val)
        return y

    @jit.script_method
    def min_int(self, bit_width: Tensor) -> Tensor:
        return min_int(self.signed, self.narrow_range, bit_width)

    @jit.script_method
    def max_int(self, bit_width: Tensor) -> Tensor:
        return max_int(self.signed, self.narrow_range, bit_width)

    @jit.script_method
    def forward(self, scale: Tensor, zero_point: Tensor, bit_width: Tensor, x: Tensor) -> Tensor:
        viewed = x if self.view_is_identity else self.input_view_impl(x)
        if self.fused and int_operands_fit(viewed, scale, zero_point, bit_width):
            y = int_quant(
                viewed,
                scale,
                zero_point,
                bit_width,
                self.signed,
                self.narrow_range,
                self.rounding_mode,
                self.clamp_ste,
            )
        else:
            y_int = self._viewed_to_int(scale, zero_point, bit_width, viewed)
            y = y_int - zero_point
            y = y * scale
        if self.never_delays:
            return y
        return self.delay_wrapper(x, y)


class DecoupledIntQuant(jit.ScriptModule):
    """Integer quantization with decoupled pre- and post-clipping scales and zero points:

        y_int = clamp(float_to_int(view(x) / pre_scale + pre_zero_point), min_int, max_int)
        y = (y_int - zero_point) * scale

    forward(pre_scale, pre_zero_point, scale, zero_point, bit_width, x) -> Tensor. Two scales
    are not the single affine step the fused int_quant op computes, so this is the composition
    of the rounding and clamp blocks (each a C++ op); for the first quant_delay_steps calls x
    itself is returned (see DelayWrapper)."""

    __constants__ = ["signed", "narrow_range"]

    def __init__(
        self,
        narrow_range: bool,
        signed: bool,
        input_view_impl: Module,
        float_to_int_impl: Module = RoundSte(),
        tensor_clamp_impl: Module = TensorClamp(),
        quant_delay_steps: int = 0,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        check_bool(owner, "narrow_range", narrow_range)
        check_bool(owner, "signed", signed)
        check_module(owner, "input_view_impl", input_view_impl)
        check_module(owner, "float_to_int_impl", float_to_int_impl)
        check_module(owner, "tensor_clamp_impl", tensor_clamp_impl)
        check_quant_delay_steps(owner, quant_delay_steps)
        self.float_to_int_impl = float_to_int_impl
        self.tensor_clamp_impl = tensor_clamp_impl
        self.signed = signed
        self.narrow_range = narrow_range
        self.delay_wrapper = DelayWrapper(quant_delay_steps)
        self.input_view_impl = input_view_impl

    @jit.script_method
    def to_int(
        self, pre_scale: Tensor, pre_zero_point: Tensor, bit_width: Tensor, x: Tensor
    ) -> Tensor:
        """y_int above: the integers, not dequantized."""
        x = self.input_view_impl(x)
        y = x / pre_scale
        y = y + pre_zero_point
        min_int_val = self.min_int(bit_width)
        max_int_val = self.max_int(bit_width)
        y = self.float_to_int_impl(y)
        y = self.tensor_clamp_impl(y, min_val=min_int_val, max_val=max_int_val)
        return y

    @jit.script_method
    def min_int(self, bit_width: Tensor) -> Tensor:
        return min_int(self.signed, self.narrow_range, bit_width)

    @jit.script_method
    def max_int(self, bit_width: Tensor) -> Tensor:
        return max_int(self.signed, self.narrow_range, bit_width)

    @jit.script_method
    def forward(
        self,
        pre_scale: Tensor,
        pre_zero_point: Tensor,
        scale: Tensor,
        zero_point: Tensor,
        bit_width: Tensor,
        x: Tensor,
    ) -> Tensor:
        y_int = self.to_int(pre_scale, pre_zero_point, bit_width, x)
        y = y_int - zero_point
        y = y * scale
        return self.delay_wrapper(x, y)
