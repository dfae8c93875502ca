"""The one matcher: which plan a RescalingIntQuant's block tree has, and whether the ReLU
before it joins the plan's op. Exact types throughout: a subclass may compute otherwise."""

from typing import NamedTuple, Optional

from torch import nn
from torch.nn import Module

from brevitas_cpp.config import JIT_ENABLED
from brevitas_cpp.core.quant.plan.activation import (
    LearnedActPlan,
    StatsActPlan,
    learned_act_fits,
    learned_act_plan,
    stats_act_plan,
)
from brevitas_cpp.core.quant.plan.weight import FusedWeightPlan, fused_weight_plan
from brevitas_cpp.core.replan import invalidate_plans

# The __dict__ key of force_module_chain's switch.
_CHAIN_ONLY = "plan_chain_only"


class QuantPlan(NamedTuple):
    """A weight plan, or an activation plan (either phase or both)."""

    weight: Optional[FusedWeightPlan]  # the stock weight quantizer: abs_max_int_quant
    act: Optional[LearnedActPlan]  # the stock activation quantizer once learned: learned_int_quant
    stats: Optional[StatsActPlan]  # and while it collects statistics: abs_percentile_int_quant


NO_PLAN = QuantPlan(None, None, None)


def match_plan(block: Module) -> QuantPlan:
    """block's plan (block: a RescalingIntQuant); NO_PLAN runs the module chain."""
    if block.__dict__.get(_CHAIN_ONLY, False):
        return NO_PLAN
    weight = fused_weight_plan(block)
    if weight is not None:
        return QuantPlan(weight, None, None)
    if learned_act_fits(block):
        return QuantPlan(None, learned_act_plan(block), stats_act_plan(block))
    return NO_PLAN


def relu_joins_plan(activation: Module, quant: Module) -> bool:
    """Whether activation then quant is one op (learned_int_quant or abs_percentile_int_quant
    with its ReLU): an out-of-place nn.ReLU (an in-place one writes its input, which the op
    would not) before a quantizer with an activation plan (only the stock RescalingIntQuant,
    not a subclass, has one: see RescalingIntQuant.derive_plan)."""
    return (
        type(activation) is nn.ReLU
        and not activation.inplace
        and bool(getattr(quant, "plan_act", False) or getattr(quant, "plan_stats", False))
    )


def force_module_chain(block: Module, chain_only: bool = True) -> None:
    """Run block's (a RescalingIntQuant's) module chain even where a plan would apply, or
    (chain_only=False) plan again: for debugging a quantizer, and for the tests that compare a
    plan with its chain. Eager mode: a block compiled with BREVITAS_JIT=1 keeps the plan it was
    compiled with, so it is refused, as is a module that has no plan."""
    if not callable(getattr(block, "matched_plan", None)):
        raise TypeError(
            "force_module_chain: quantizer must be a block with a plan (RescalingIntQuant), "
            f"got {type(block).__name__}"
        )
    if JIT_ENABLED:
        raise RuntimeError(
            "force_module_chain: with BREVITAS_JIT=1 a quantizer keeps the plan it was compiled "
            "with; run with BREVITAS_JIT=0 to switch it"
        )
    block.__dict__[_CHAIN_ONLY] = chain_only
    invalidate_plans()  # a FusedActivationQuantProxy above it derives its ReLU decision again
