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
from brevitas_cpp.config import JIT_ENABLED
from brevitas_cpp.core.function_wrapper import TensorClamp
from brevitas_cpp.core.hooks import hook_dicts, submodules
from brevitas_cpp.core.quant._checks import check_bool, check_module, check_quant_delay_steps
from brevitas_cpp.core.quant._fused_weight import (
    constant_int_threshold,
    fused_weight_fits,
    fused_weight_plan,
)
from brevitas_cpp.core.quant._fusion import int_operands_fit
from brevitas_cpp.core.quant._learned_act import learned_act_fits, learned_act_forward
from brevitas_cpp.core.quant._stats_act import smallest_normal, stats_act_plan
from brevitas_cpp.core.quant.block_output import QuantBlockOutput
from brevitas_cpp.core.quant.delay import DelayWrapper
from brevitas_cpp.core.scaling import TruncMsbScaling
from brevitas_cpp.core.stats.stats_op import _high_k
from brevitas_cpp.core.utils import StatelessBuffer
from brevitas_cpp.distributed import _stats_stay_local
from brevitas_cpp.function import abs_max_int_quant, abs_percentile_int_quant, relu_int_quant
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


class RescalingIntQuant(jit.ScriptModule):
    """Quantize x with a scale, zero point and bit width computed by its own blocks:

        bit_width = bit_width_impl()
        scale = scaling_impl(x, int_scaling_impl(bit_width))  # threshold / integer threshold
        zero_point = zero_point_impl(x, scale, bit_width)

    forward(x) -> (y, scale, zero_point, bit_width). With ``observer_only`` set, y is x itself
    (statistics are still collected by the blocks).

    When the blocks are exactly the stock weight quantizer (constant bit width, AbsMax statistics
    of the weight over the tensor or the output channels, linear-domain scale, zero point 0, a
    fused-able IntQuant: see _fused_weight.py), forward is one call of the C++ op
    abs_max_int_quant, with the composition's numbers; the choice is made when the block is built
    (and, in eager mode, again when one of its blocks is replaced)."""

    __constants__ = [
        "int_threshold_is_const",
        "fused_weight",
        "fused_channels",
        "fused_scale_rank",
        "fused_signed",
        "fused_narrow_range",
        "fused_has_min_val",
        "fused_min_val",
        "fused_rounding_mode",
        "fused_clamp_ste",
        "relu_fusable",
        "stats_fusable",
        "stats_q",
        "stats_has_min_val",
        "stats_min_val",
        "stats_threshold",
    ]

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
        self._decide_weight_fusion()

    def _decide_weight_fusion(self) -> None:
        self.int_threshold_is_const = self._store_const_threshold()
        plan = fused_weight_plan(self)
        # TorchScript constants: with fused_weight False the scripted forward drops the op call.
        self.fused_weight = plan is not None
        self.fused_channels = plan.channels if plan is not None else -1
        self.fused_scale_rank = plan.scale_rank if plan is not None else 0
        self.fused_signed = plan.signed if plan is not None else True
        self.fused_narrow_range = plan.narrow_range if plan is not None else False
        min_val = plan.scaling_min_val if plan is not None else None
        self.fused_has_min_val = min_val is not None
        self.fused_min_val = float(min_val) if min_val is not None else 0.0
        self.fused_rounding_mode = plan.rounding_mode if plan is not None else "round"
        self.fused_clamp_ste = plan.clamp_ste if plan is not None else False
        # Eager mode only (see _learned_act.py, _stats_act.py); plain attributes TorchScript
        # never reads.
        self.__dict__["learned_act"] = learned_act_fits(self)
        # The modules its eager shortcut skips, whose hooks it must not (see _learned_act.py).
        blocks = submodules(self) if self.__dict__["learned_act"] else ()
        self.__dict__["act_hooks"] = hook_dicts(blocks)
        # The same blocks, as a TorchScript constant: forward_after_relu's fused branch.
        self.relu_fusable = self.__dict__["learned_act"]
        # The statistics phase in one op (stats_forward): constants for TorchScript, read by
        # eager mode too.
        stats = stats_act_plan(self) if self.relu_fusable else None
        self.__dict__["stats_act"] = stats  # eager calls check it still holds
        self.stats_fusable = stats is not None
        self.stats_q = stats.high_percentile_q if stats is not None else 100.0
        self.stats_has_min_val = stats is not None and stats.scaling_min_val is not None
        self.stats_min_val = (
            float(stats.scaling_min_val) if self.stats_has_min_val else 0.0  # type: ignore[union-attr]
        )
        # The constant threshold (learned_act_fits: int_threshold_is_const), for the least
        # statistic the op can scale by (stats_forward).
        self.stats_threshold = float(self.const_int_threshold.value) if stats is not None else 1.0

    def __setattr__(self, name: str, value) -> None:
        super().__setattr__(name, value)
        # Eager modules may get another block later; scripted ones keep their choice.
        if not JIT_ENABLED and "fused_weight" in self.__dict__ and isinstance(value, Module):
            self._decide_weight_fusion()

    def _store_const_threshold(self) -> bool:
        """Compute the constant threshold into const_int_threshold; False when it is not."""
        threshold = constant_int_threshold(self.msb_clamp_bit_width_impl, self.int_scaling_impl)
        if threshold is not None:
            self.const_int_threshold.value = threshold
        return threshold is not None

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
    def quant_fuses(self) -> bool:
        """Whether this call quantizes in a fused op: not observing only, the IntQuant fused,
        without a view or a pending delay (flags read on every call)."""
        if self.relu_fusable:  # a constant: the IntQuant's flags exist for the stock blocks only
            iq = self.int_quant
            return not self.observer_only and iq.fused and iq.view_is_identity and iq.never_delays
        return False

    @jit.script_method
    def stats_forward(self, x: Tensor, relu: bool) -> Optional[QuantBlockOutput]:
        """forward (of torch.relu(x) with relu) on a training call of the stock activation
        quantizer that collects statistics, in one op, abs_percentile_int_quant (see
        _stats_act.py); None where the op does not take the call."""
        if self.stats_fusable:  # a constant: TorchScript compiles this only for the stock blocks
            scaling = self.scaling_impl
            iq = self.int_quant
            if (
                scaling.training
                and scaling.counter < scaling.collect_stats_steps
                and not scaling.local_loss_mode
                and self.quant_fuses()
            ):
                bit_width = self.msb_clamp_bit_width_impl.bit_width.value
                zero_point = self.zero_point_impl.zero_point.value
                threshold = self.const_int_threshold.value
                value = scaling.value
                # The composition divides by the threshold and links value in x's dtype only
                # when they share it (a wider one would promote the scale).
                if (
                    int_operands_fit(x, threshold, zero_point, bit_width)
                    and bit_width.dtype == x.dtype
                    and value.dtype == x.dtype
                    and value.device == x.device
                ):
                    n = x.numel()
                    k = _high_k(self.stats_q, n)  # AbsPercentile's k
                    if k >= 1 and k <= n and _stats_stay_local():
                        min_val: Optional[float] = None
                        if self.stats_has_min_val:
                            min_val = self.stats_min_val
                            # No less than the statistic whose scale is x's dtype's smallest
                            # normal number, the least scale the ops take: the default 1e-10
                            # is 0 in float16, whose scales stop at 2^-14.
                            least = self.stats_threshold * smallest_normal(x.dtype)
                            if least > min_val:
                                min_val = least
                        y, scale, stat, _ = abs_percentile_int_quant(
                            x,
                            value,
                            bit_width,
                            k,
                            iq.signed,
                            iq.narrow_range,
                            min_val,
                            iq.rounding_mode,
                            iq.clamp_ste,
                            relu,
                        )
                        scaling.record_stats(stat)
                        return y, scale, zero_point, bit_width
        return None

    @jit.script_method
    def forward_after_relu(self, x: Tensor) -> QuantBlockOutput:
        """forward(torch.relu(x)); one op, relu_int_quant, where the stock activation quantizer
        is in its learned training phase, abs_percentile_int_quant while it collects statistics.
        TorchScript's path (FusedActivationQuantProxy calls it when scripted); eager mode takes
        _learned_act.py's."""
        if self.stats_fusable:  # a constant: compiled only for the stock blocks
            out = self.stats_forward(x, True)
            if out is not None:
                return out
        if self.relu_fusable:  # a constant: TorchScript compiles this only for the stock blocks
            scaling = self.scaling_impl
            iq = self.int_quant
            if (
                scaling.training
                and scaling.counter > scaling.collect_stats_steps
                and self.quant_fuses()
            ):
                bit_width = self.msb_clamp_bit_width_impl()
                scale = scaling._learned_scale(self.int_threshold(bit_width))
                zero_point = self.zero_point_impl(x, scale, bit_width)
                if int_operands_fit(x, scale, zero_point, bit_width):
                    y = relu_int_quant(
                        x,
                        scale,
                        zero_point,
                        bit_width,
                        iq.signed,
                        iq.narrow_range,
                        iq.rounding_mode,
                        iq.clamp_ste,
                    )
                    return y, scale, zero_point, bit_width
        return self.forward(torch.relu(x))

    @jit.script_method
    def forward(self, x: Tensor) -> QuantBlockOutput:
        if not torch.jit.is_scripting():  # a static branch: TorchScript compiles none of it
            if self.learned_act:
                out = learned_act_forward(self, x)
                if out is not None:
                    return out
        elif self.stats_fusable:  # a constant: compiled only for the stock blocks
            out = self.stats_forward(x, False)
            if out is not None:
                return out
        bit_width = self.msb_clamp_bit_width_impl()
        if (
            self.fused_weight
            and not self.observer_only
            and fused_weight_fits(x, bit_width, self.fused_channels, self.fused_scale_rank)
        ):
            channel_dim: Optional[int] = None
            if self.fused_channels >= 0:
                channel_dim = 0
            min_val: Optional[float] = None
            if self.fused_has_min_val:
                min_val = self.fused_min_val
            y, scale = abs_max_int_quant(
                x,
                bit_width,
                channel_dim,
                self.fused_signed,
                self.fused_narrow_range,
                min_val,
                self.fused_rounding_mode,
                self.fused_clamp_ste,
            )
            return y, scale, self.zero_point_impl(x, scale, bit_width), bit_width
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
