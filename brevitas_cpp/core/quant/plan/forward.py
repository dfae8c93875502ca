"""PlannedQuant: a quantizer's plan as TorchScript constants, and its one op call.

RescalingIntQuant derives from it. ``plan_forward(x, relu)`` is the whole plan: the op its plan
names, or None where this call is not the plan's (eval, the call that initialises a learned
scale, operands the op does not take), and then the caller runs the module chain. Eager mode
and TorchScript call the same method; eager mode first asks ``plan_applies`` (the plan is
current under core/replan.py's rule, and no hook on a block the op skips would be skipped).

Each helper starts with its plan's constant: TorchScript compiles a method's body only where
the constant holds, so the attributes of stock blocks are read only from stock blocks.
"""

from typing import Optional

from torch import Tensor
from torch.nn import Module

from brevitas_cpp import jit
from brevitas_cpp.core.hooks import any_hook_in, hook_dicts, submodules
from brevitas_cpp.core.quant.block_output import QuantBlockOutput
from brevitas_cpp.core.quant.plan.activation import smallest_normal
from brevitas_cpp.core.quant.plan.match import NO_PLAN, QuantPlan, match_plan
from brevitas_cpp.core.quant.plan.operands import int_operands_fit
from brevitas_cpp.core.quant.plan.weight import fused_weight_fits
from brevitas_cpp.core.replan import Replans, refresh_plan
from brevitas_cpp.core.stats.stats_op import _high_k
from brevitas_cpp.distributed import _stats_stay_local
from brevitas_cpp.function import abs_max_int_quant, abs_percentile_int_quant, learned_int_quant

PLAN = "plan"  # the __dict__ key of the QuantPlan adopted
PLAN_HOOKS = "plan_hooks"  # the __dict__ key of the hook dictionaries of the blocks a plan skips


def plan_applies(block: Module) -> bool:
    """Eager mode's gate before block.plan_forward: the plan is current (derived again if a
    module was registered since) and calling the blocks would run no hook (a hook registered
    later fills the dictionaries gathered with the plan)."""
    refresh_plan(block)
    planned = block.plan_weight or block.plan_act or block.plan_stats
    return bool(planned) and not any_hook_in(block.__dict__[PLAN_HOOKS])


class PlannedQuant(Replans, jit.ScriptModule):
    """The plan's constants and plan_forward; the blocks it reads (int_quant, scaling_impl,
    msb_clamp_bit_width_impl, zero_point_impl, const_int_threshold, observer_only) are the
    subclass's. Subclasses call adopt_plan from derive_plan."""

    __constants__ = [
        "plan_weight",  # abs_max_int_quant
        "plan_act",  # learned_int_quant in the learned phase
        "plan_stats",  # abs_percentile_int_quant in the statistics phase
        "plan_channels",  # weight: -1 over the tensor, else C output channels (dim 0)
        "plan_scale_rank",  # weight per channel: the scale's rank
        "plan_has_min_val",
        "plan_min_val",  # the lower bound of the scale (weight) or learned value (activation)
        "plan_q",  # statistics: the percentile
        "plan_threshold",  # statistics: the constant integer threshold, as a float
    ]

    def adopt_plan(self, plan: QuantPlan, threshold: float) -> None:
        """Set the constants from plan (threshold: the constant integer threshold, a number),
        and gather the hooks of the blocks it would skip."""
        weight, act, stats = plan.weight, plan.act, plan.stats
        self.plan_weight = weight is not None
        self.plan_act = act is not None
        self.plan_stats = stats is not None
        self.plan_channels = weight.channels if weight is not None else -1
        self.plan_scale_rank = weight.scale_rank if weight is not None else 0
        # One bound: an activation's statistics and learned value share their clamp block.
        min_val = weight.scaling_min_val if weight is not None else None
        if act is not None:
            min_val = act.scaling_min_val
        elif stats is not None:
            min_val = stats.scaling_min_val
        self.plan_has_min_val = min_val is not None
        self.plan_min_val = float(min_val) if min_val is not None else 0.0
        self.plan_q = stats.high_percentile_q if stats is not None else 100.0
        self.plan_threshold = threshold if stats is not None else 1.0
        planned = plan != NO_PLAN
        self.__dict__[PLAN_HOOKS] = hook_dicts(submodules(self)) if planned else ()
        self.__dict__[PLAN] = plan

    def matched_plan(self) -> QuantPlan:
        """The plan the matcher finds in the tree now (a subclass may refuse it)."""
        return match_plan(self)

    def plan_holds(self) -> bool:
        return self.__dict__.get(PLAN) == self.matched_plan()

    @jit.script_method
    def quant_fuses(self) -> bool:
        """Whether this call may quantize in a fused op: not observing only, the IntQuant fused,
        without a view or a pending delay (flags read on every call)."""
        if self.plan_weight or self.plan_act or self.plan_stats:  # constants: stock blocks only
            iq = self.int_quant
            return not self.observer_only and iq.fused and iq.view_is_identity and iq.never_delays
        return False

    @jit.script_method
    def plan_forward(self, x: Tensor, relu: bool) -> Optional[QuantBlockOutput]:
        """forward(x) (forward(torch.relu(x)) with relu) in the plan's one op; None where this
        call is not the plan's."""
        if self.plan_weight:  # a constant
            if not relu and self.quant_fuses():
                return self._weight_forward(x)
        elif self.plan_act or self.plan_stats:  # constants
            scaling = self.scaling_impl
            if scaling.training and self.quant_fuses():
                if scaling.counter < scaling.collect_stats_steps:
                    return self._stats_forward(x, relu)
                # The call at collect_stats_steps initialises the learned scale: the chain's.
                if scaling.counter > scaling.collect_stats_steps:
                    return self._learned_forward(x, relu)
        return None

    @jit.script_method
    def _weight_forward(self, x: Tensor) -> Optional[QuantBlockOutput]:
        """The stock weight quantizer: scale = max|x| (over the tensor or per output channel)
        / threshold, then int_quant, in abs_max_int_quant."""
        if self.plan_weight:  # a constant
            # The plan's blocks are BitWidthConst and ZeroZeroPoint: their tensors are read
            # without the two module calls.
            bit_width = self.msb_clamp_bit_width_impl.bit_width.value
            if fused_weight_fits(x, bit_width, self.plan_channels, self.plan_scale_rank):
                channel_dim: Optional[int] = None
                if self.plan_channels >= 0:
                    channel_dim = 0
                min_val: Optional[float] = None
                if self.plan_has_min_val:
                    min_val = self.plan_min_val
                iq = self.int_quant
                y, scale = abs_max_int_quant(
                    x,
                    bit_width,
                    channel_dim,
                    iq.signed,
                    iq.narrow_range,
                    min_val,
                    iq.rounding_mode,
                    iq.clamp_ste,
                )
                return y, scale, self.zero_point_impl.zero_point.value, bit_width
        return None

    @jit.script_method
    def _learned_forward(self, x: Tensor, relu: bool) -> Optional[QuantBlockOutput]:
        """The learned phase in learned_int_quant, one autograd node: scale =
        clamp_min(value) / threshold, then int_quant (of relu(x) with relu)."""
        if self.plan_act:  # a constant
            iq = self.int_quant
            bit_width = self.msb_clamp_bit_width_impl.bit_width.value
            zero_point = self.zero_point_impl.zero_point.value
            threshold = self.const_int_threshold.value
            value = self.scaling_impl.value
            # The chain divides value by the threshold in x's dtype only when all three share it.
            if (
                int_operands_fit(x, value, zero_point, bit_width)
                and threshold.dtype == x.dtype
                and threshold.device == x.device
            ):
                min_val: Optional[float] = None
                if self.plan_has_min_val:
                    min_val = self.plan_min_val
                y, scale = learned_int_quant(
                    x,
                    value,
                    threshold,
                    zero_point,
                    bit_width,
                    iq.signed,
                    iq.narrow_range,
                    min_val,
                    iq.rounding_mode,
                    iq.clamp_ste,
                    relu,
                )
                return y, scale, zero_point, bit_width
        return None

    @jit.script_method
    def _stats_forward(self, x: Tensor, relu: bool) -> Optional[QuantBlockOutput]:
        """The statistics phase: scale from a percentile of |x| (of relu(x) with relu), then
        int_quant, in abs_percentile_int_quant; the running average updated as the chain does.
        Taken only where the chain's all_reduce_stats would copy the statistic (no process group
        to average over)."""
        if self.plan_stats:  # a constant
            scaling = self.scaling_impl
            if scaling.local_loss_mode:
                return None
            iq = self.int_quant
            bit_width = self.msb_clamp_bit_width_impl.bit_width.value
            zero_point = self.zero_point_impl.zero_point.value
            threshold = self.const_int_threshold.value
            value = scaling.value
            # The chain divides by the threshold and links value in x's dtype only when they
            # share it (a wider one would promote the scale).
            if not (
                int_operands_fit(x, threshold, zero_point, bit_width)
                and bit_width.dtype == x.dtype
                and value.dtype == x.dtype
                and value.device == x.device
            ):
                return None
            n = x.numel()
            k = _high_k(self.plan_q, n)  # AbsPercentile's k
            if k < 1 or k > n or not _stats_stay_local():
                return None
            min_val: Optional[float] = None
            if self.plan_has_min_val:
                min_val = self.plan_min_val
                # No less than the statistic whose scale is x's dtype's smallest normal number,
                # the least scale the ops take: the default 1e-10 is 0 in float16, whose scales
                # stop at 2^-14.
                least = self.plan_threshold * smallest_normal(x.dtype)
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
