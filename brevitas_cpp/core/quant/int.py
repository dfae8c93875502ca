"""Integer quantizers that work out their own scale, zero point and bit width around an
IntQuant (Brevitas's ``brevitas.core.quant.int``), plus TruncIntQuant, which requantizes an
already integer-valued tensor to fewer bits.

Each returns the tuple (quantized value, scale, zero_point, bit_width); the decoupled ones
(weight normalization, A2Q) append their pre-clipping scale and zero point.
"""

from typing import Optional, Tuple, Union

import torch
from torch import Tensor
from torch.nn import Module

from brevitas_cpp import jit
from brevitas_cpp.core.function_wrapper import TensorClamp
from brevitas_cpp.core.quant._checks import check_bool, check_module, check_quant_delay_steps
from brevitas_cpp.core.quant.block_output import QuantBlockOutput
from brevitas_cpp.core.quant.delay import DelayWrapper
from brevitas_cpp.core.quant.plan.forward import PlannedQuant, plan_applies
from brevitas_cpp.core.quant.plan.match import NO_PLAN, QuantPlan, match_plan
from brevitas_cpp.core.quant.plan.weight import constant_int_threshold
from brevitas_cpp.core.scaling import TruncMsbScaling
from brevitas_cpp.core.utils import StatelessBuffer
from brevitas_cpp.function.ops import max_int, min_int
from brevitas_cpp.function.ops_ste import round_ste

# (value, scale, zero_point, bit_width, pre_scale, pre_zero_point)
DecoupledBlockOutput = Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]


def _hold_prescaled_blocks(block: Module, int_quant: Module, bit_width_impl: Module) -> None:
    """The blocks of a quantizer whose scale is given: int_quant, the bit width block (under
    Brevitas's name msb_clamp_bit_width_impl) and a zero point of 0, which is not state (such a
    quantizer saves and expects nothing for it)."""
    owner = type(block).__name__
    check_module(owner, "int_quant", int_quant)
    check_module(owner, "bit_width_impl", bit_width_impl)
    block.int_quant = int_quant
    block.msb_clamp_bit_width_impl = bit_width_impl
    block.zero_point = StatelessBuffer(torch.tensor(0.0))


class _PrescaledIntQuant(jit.ScriptModule):
    """What the quantizers with a given scale share: int_quant, in float32 for a float16 x."""

    @jit.script_method
    def quantize(self, scale: Tensor, zero_point: Tensor, bit_width: Tensor, x: Tensor) -> Tensor:
        """int_quant(scale, zero_point, bit_width, x). A bias's scale (input scale x weight scale,
        e.g. 6e-5 for two 8-bit scales near 8e-3) is mostly below float16's smallest normal
        number, 2^-14, which the ops refuse: a float16 x is quantized in float32, where such a
        scale is normal, and returned in float16."""
        if x.dtype == torch.float16:
            y = self.int_quant(scale.float(), zero_point.float(), bit_width.float(), x.float())
            return y.to(x.dtype)
        return self.int_quant(scale, zero_point, bit_width, x)


class PrescaledRestrictIntQuantWithInputBitWidth(_PrescaledIntQuant):
    """Quantize x with a given scale, zero point 0, and a bit width derived from the input's.

    forward(x, scale, input_bit_width) -> (y, scale, zero_point, bit_width) where
    bit_width = bit_width_impl(input_bit_width) and y = int_quant(scale, 0, bit_width, x)."""

    def __init__(self, int_quant: Module, bit_width_impl: Module) -> None:
        super().__init__()
        _hold_prescaled_blocks(self, int_quant, bit_width_impl)

    @jit.script_method
    def forward(self, x: Tensor, scale: Tensor, input_bit_width: Tensor) -> QuantBlockOutput:
        bit_width = self.msb_clamp_bit_width_impl(input_bit_width)
        zero_point = self.zero_point()
        y = self.quantize(scale, zero_point, bit_width, x)
        return y, scale, zero_point, bit_width


class PrescaledRestrictIntQuant(_PrescaledIntQuant):
    """Quantize x with a given scale, zero point 0 and the bit width of bit_width_impl().

    forward(x, scale) -> (y, scale, zero_point, bit_width)."""

    def __init__(self, int_quant: Module, bit_width_impl: Module) -> None:
        super().__init__()
        _hold_prescaled_blocks(self, int_quant, bit_width_impl)

    @jit.script_method
    def forward(self, x: Tensor, scale: Tensor) -> QuantBlockOutput:
        msb_clamp_bit_width = self.msb_clamp_bit_width_impl()
        zero_point = self.zero_point()
        y = self.quantize(scale, zero_point, msb_clamp_bit_width, x)
        return y, scale, zero_point, msb_clamp_bit_width


class RescalingIntQuant(PlannedQuant):
    """Quantize x with a scale, zero point and bit width computed by its own blocks:

        bit_width = bit_width_impl()
        scale = scaling_impl(x, int_scaling_impl(bit_width))  # threshold / integer threshold
        zero_point = zero_point_impl(x, scale, bit_width)

    forward(x) -> (y, scale, zero_point, bit_width). With ``observer_only`` set, y is x itself
    (statistics are still collected by the blocks).

    When the blocks are exactly a stock quantizer, its plan (core/quant/plan) computes the same
    numbers in one op call: forward calls it first, and runs the blocks where the plan does not
    take the call."""

    # TorchScript reads the class's own list: the plan's constants are repeated here.
    __constants__ = PlannedQuant.__constants__ + ["int_threshold_is_const"]

    def __init__(
        self,
        int_quant: Module,
        scaling_impl: Module,
        int_scaling_impl: Module,
        zero_point_impl: Module,
        bit_width_impl: Module,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        check_module(owner, "int_quant", int_quant)
        check_module(owner, "scaling_impl", scaling_impl)
        check_module(owner, "int_scaling_impl", int_scaling_impl)
        check_module(owner, "zero_point_impl", zero_point_impl)
        check_module(owner, "bit_width_impl", bit_width_impl)
        self.int_quant = int_quant
        self.scaling_impl = scaling_impl
        self.int_scaling_impl = int_scaling_impl
        self.zero_point_impl = zero_point_impl
        self.msb_clamp_bit_width_impl = bit_width_impl
        self.observer_only = jit.Attribute(False, bool)
        # int_scaling_impl's output when it is constant (see constant_int_threshold): not
        # state, recomputed whenever the bit width it derives from is converted (_apply).
        self.const_int_threshold = StatelessBuffer(torch.ones(()))
        self.int_threshold_is_const = self._store_const_threshold()
        self.replan()

    def derive_plan(self) -> None:
        # Types only, no tensor values: a plan owner may derive its plan again at any call,
        # one being traced or compiled included.
        if "int_threshold_value" not in self.__dict__:  # pickled whole before it existed
            self.int_threshold_is_const = self._store_const_threshold()
        self.adopt_plan(self.matched_plan(), self.__dict__["int_threshold_value"])

    def matched_plan(self) -> QuantPlan:
        # A subclass may compute otherwise (its own forward): no plan, as for a block's subclass.
        return match_plan(self) if type(self) is RescalingIntQuant else NO_PLAN

    def _store_const_threshold(self) -> bool:
        """Compute the constant threshold into const_int_threshold (and, as a number, for the
        plan); False when it is not. Run when built, when the bit width or integer scaling
        block is replaced, and after a dtype conversion."""
        threshold = constant_int_threshold(self.msb_clamp_bit_width_impl, self.int_scaling_impl)
        if threshold is not None:
            self.const_int_threshold.value = threshold
        self.__dict__["int_threshold_value"] = float(threshold) if threshold is not None else 1.0
        return threshold is not None

    def replan_after(self, name: str) -> None:
        if name in ("msb_clamp_bit_width_impl", "int_scaling_impl"):
            self.int_threshold_is_const = self._store_const_threshold()
        self.replan()

    def _apply(self, fn, *args, **kwargs):
        module = super()._apply(fn, *args, **kwargs)
        # Recomputed rather than converted: a round trip through a narrower dtype (.half()
        # then .float()) would leave a rounded (or infinite) threshold where the bit width,
        # a small integer, comes back exact.
        if self.int_threshold_is_const:
            self._store_const_threshold()
        return module

    @jit.script_method
    def int_threshold(self, bit_width: Tensor) -> Tensor:
        """int_scaling_impl(bit_width), read from const_int_threshold when it is constant."""
        if self.int_threshold_is_const:
            return self.const_int_threshold.value
        return self.int_scaling_impl(bit_width)

    @jit.script_method
    def forward_after_relu(self, x: Tensor) -> QuantBlockOutput:
        """forward(torch.relu(x)): the plan's op takes the ReLU too where it takes the call."""
        # Where the plan does not take this call, forward's check would not take it either (the
        # plan's conditions do not read the ReLU): the chain runs at once.
        if not torch.jit.is_scripting():  # a static branch: TorchScript compiles none of it
            if plan_applies(self):
                return self.planned_after_relu(x)
        elif self.plan_act or self.plan_stats:  # constants: compiled only for an activation plan
            return self.planned_after_relu(x)
        return self.forward(torch.relu(x))

    @jit.script_method
    def planned_after_relu(self, x: Tensor) -> QuantBlockOutput:
        """forward_after_relu once plan_applies (the caller's check: FusedActivationQuantProxy's
        covers this block's): the plan's op, or the chain where the plan does not take the call."""
        out = self.plan_forward(x, True)
        if out is not None:
            return out
        return self.chain_forward(torch.relu(x))

    @jit.script_method
    def forward(self, x: Tensor) -> QuantBlockOutput:
        if not torch.jit.is_scripting():  # a static branch: TorchScript compiles none of it
            if plan_applies(self):
                out = self.plan_forward(x, False)
                if out is not None:
                    return out
        elif self.plan_weight or self.plan_act or self.plan_stats:  # constants: only for a plan
            out = self.plan_forward(x, False)
            if out is not None:
                return out
        return self.chain_forward(x)

    @jit.script_method
    def chain_forward(self, x: Tensor) -> QuantBlockOutput:
        """Brevitas's composition of the blocks: what forward computes where no plan takes x."""
        bit_width = self.msb_clamp_bit_width_impl()
        scale = self.scaling_impl(x, self.int_threshold(bit_width))
        zero_point = self.zero_point_impl(x, scale, bit_width)
        if self.observer_only:
            y = x
        else:
            y = self.int_quant(scale, zero_point, bit_width, x)
        return y, scale, zero_point, bit_width


class TruncIntQuant(jit.ScriptModule):
    """Requantize an integer-valued x (given as value, scale, zero point, bit width and sign) to
    the bit width of bit_width_impl(), dropping the bits trunc_scaling_impl says to drop:

        y_int = round(x / scale + zero_point)          # removes float error only
        trunc_scale = trunc_scaling_impl(y_int, input_bit_width, output_bit_width, signed)
        y = clamp(float_to_int(y_int / trunc_scale), min_int, max_int)
        y = (y - zero_point / trunc_scale) * (scale * trunc_scale)

    forward(x, scale, zero_point, input_bit_width, signed) -> (y, output_scale,
    output_zero_point, output_bit_width). The sign is the input's; narrow_range is this
    block's. trunc_scaling_impl=None means TruncMsbScaling() (keep the most significant bits),
    Brevitas's default."""

    __constants__ = ["narrow_range"]

    def __init__(
        self,
        float_to_int_impl: Module,
        bit_width_impl: Module,
        trunc_scaling_impl: Optional[Module] = None,
        narrow_range: bool = False,
        tensor_clamp_impl: Module = TensorClamp(),
        quant_delay_steps: int = 0,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        if trunc_scaling_impl is None:
            trunc_scaling_impl = TruncMsbScaling()
        check_module(owner, "float_to_int_impl", float_to_int_impl)
        check_module(owner, "bit_width_impl", bit_width_impl)
        check_module(owner, "trunc_scaling_impl", trunc_scaling_impl)
        check_bool(owner, "narrow_range", narrow_range)
        check_module(owner, "tensor_clamp_impl", tensor_clamp_impl)
        check_quant_delay_steps(owner, quant_delay_steps)
        self.narrow_range = narrow_range
        self.msb_clamp_bit_width_impl = bit_width_impl
        self.trunc_scaling_impl = trunc_scaling_impl
        self.float_to_int_impl = float_to_int_impl
        self.tensor_clamp_impl = tensor_clamp_impl
        self.delay_wrapper = DelayWrapper(quant_delay_steps)

    @jit.script_method
    def min_int(self, bit_width: Tensor, signed: Union[bool, Tensor]) -> Tensor:
        return min_int(signed, self.narrow_range, bit_width)

    @jit.script_method
    def max_int(self, bit_width: Tensor, signed: Union[bool, Tensor]) -> Tensor:
        return max_int(signed, self.narrow_range, bit_width)

    @jit.script_method
    def forward(
        self,
        x: Tensor,
        scale: Tensor,
        zero_point: Tensor,
        input_bit_width: Tensor,
        signed: Union[bool, Tensor],
    ) -> QuantBlockOutput:
        # Two roundings with a division between them: not the single affine step int_quant
        # fuses, so this stays a composition of the (C++) elementwise ops.
        y = x / scale
        y = y + zero_point
        y = round_ste(y)
        output_bit_width = self.msb_clamp_bit_width_impl()
        trunc_scale = self.trunc_scaling_impl(y, input_bit_width, output_bit_width, signed)
        y = y / trunc_scale
        min_int_val = self.min_int(output_bit_width, signed)
        max_int_val = self.max_int(output_bit_width, signed)
        y = self.float_to_int_impl(y)
        y = self.tensor_clamp_impl(y, min_val=min_int_val, max_val=max_int_val)
        output_scale = scale * trunc_scale
        output_zero_point = zero_point / trunc_scale
        y = y - output_zero_point
        y = y * output_scale
        y = self.delay_wrapper(x, y)
        return y, output_scale, output_zero_point, output_bit_width


class DecoupledRescalingIntQuant(jit.ScriptModule):
    """Quantize x with decoupled pre-clipping (rounding) and post-clipping (dequantizing)
    scales and zero points, all computed by its own blocks:

        bit_width = bit_width_impl()
        int_threshold = int_scaling_impl(bit_width)
        pre_scale = pre_scaling_impl(x) / int_threshold
        pre_zero_point = pre_zero_point_impl(x, pre_scale, bit_width)
        scale = scaling_impl(x, int_threshold)
        zero_point = zero_point_impl(x, scale, bit_width)
        y = decoupled_int_quant(pre_scale, pre_zero_point, scale, zero_point, bit_width, x)

    forward(x) -> (y, scale, zero_point, bit_width, pre_scale, pre_zero_point). With
    ``observer_only`` set, y is x itself."""

    def __init__(
        self,
        decoupled_int_quant: Module,
        pre_scaling_impl: Module,
        scaling_impl: Module,
        int_scaling_impl: Module,
        pre_zero_point_impl: Module,
        zero_point_impl: Module,
        bit_width_impl: Module,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        for name, block in (
            ("decoupled_int_quant", decoupled_int_quant),
            ("pre_scaling_impl", pre_scaling_impl),
            ("scaling_impl", scaling_impl),
            ("int_scaling_impl", int_scaling_impl),
            ("pre_zero_point_impl", pre_zero_point_impl),
            ("zero_point_impl", zero_point_impl),
            ("bit_width_impl", bit_width_impl),
        ):
            check_module(owner, name, block)
        self.decoupled_int_quant = decoupled_int_quant
        self.pre_scaling_impl = pre_scaling_impl
        self.scaling_impl = scaling_impl
        self.int_scaling_impl = int_scaling_impl
        self.pre_zero_point_impl = pre_zero_point_impl
        self.zero_point_impl = zero_point_impl
        self.msb_clamp_bit_width_impl = bit_width_impl
        self.observer_only = jit.Attribute(False, bool)

    @jit.script_method
    def forward(self, x: Tensor) -> DecoupledBlockOutput:
        bit_width = self.msb_clamp_bit_width_impl()
        int_threshold = self.int_scaling_impl(bit_width)
        pre_threshold = self.pre_scaling_impl(x)
        pre_scale = pre_threshold / int_threshold
        pre_zero_point = self.pre_zero_point_impl(x, pre_scale, bit_width)
        scale = self.scaling_impl(x, int_threshold)
        zero_point = self.zero_point_impl(x, scale, bit_width)
        if self.observer_only:
            y = x
        else:
            y = self.decoupled_int_quant(pre_scale, pre_zero_point, scale, zero_point, bit_width, x)
        return y, scale, zero_point, bit_width, pre_scale, pre_zero_point


class DecoupledRescalingIntQuantWithInput(DecoupledRescalingIntQuant):
    """DecoupledRescalingIntQuant whose pre-clipping scale also depends on the quantized input
    the weight multiplies (A2Q: the accumulator bound depends on the input's bit width and
    sign): pre_scaling_impl(x, input_bit_width, input_is_signed).

    forward(x, input_bit_width, input_is_signed) -> (y, scale, zero_point, bit_width,
    pre_scale, pre_zero_point)."""

    @jit.script_method
    def forward(
        self, x: Tensor, input_bit_width: Tensor, input_is_signed: bool
    ) -> DecoupledBlockOutput:
        bit_width = self.msb_clamp_bit_width_impl()
        int_threshold = self.int_scaling_impl(bit_width)
        pre_threshold = self.pre_scaling_impl(x, input_bit_width, input_is_signed)
        pre_scale = pre_threshold / int_threshold
        pre_zero_point = self.pre_zero_point_impl(x, pre_scale, bit_width)
        scale = self.scaling_impl(x, int_threshold)
        zero_point = self.zero_point_impl(x, scale, bit_width)
        if self.observer_only:
            y = x
        else:
            y = self.decoupled_int_quant(pre_scale, pre_zero_point, scale, zero_point, bit_width, x)
        return y, scale, zero_point, bit_width, pre_scale, pre_zero_point
