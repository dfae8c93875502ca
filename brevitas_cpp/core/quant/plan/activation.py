"""The stock activation quantizer's plan: which RescalingIntQuant is the one whose training
calls one op computes, in its learned phase (learned_int_quant: the scale
clamp_min(value) / threshold and int_quant, of relu(x) after a ReLU, one autograd node) and
while it collects statistics (abs_percentile_int_quant).

For its first collect_stats_steps training calls the stock activation quantizer (a
RescalingIntQuant around ParameterFromRuntimeStatsScaling with AbsPercentile over the tensor,
as in Int8ActPerTensorFloat and Uint8ActPerTensorFloat) scales x by a percentile of |x|: a
selection over x, its gradient spread back to x as a one-hot tensor, a handful of scalar ops,
then int_quant. The C++ op abs_percentile_int_quant does all of it in one call (with ReLU
before it, for QuantReLU); PlannedQuant's plan_forward calls it, eager and scripted, then
updates the running average as the composition does. This module decides, when the plan is
derived, whether the blocks are the stock ones (by exact types: a subclass may compute
otherwise).

The op is taken only where the composition's all_reduce_stats would copy the statistic (no
process group to average over: brevitas_cpp.distributed.stats_stay_local); anything else runs
the modules."""

from typing import NamedTuple, Optional

import torch
from torch.nn import Module

from brevitas_cpp.core.bit_width.const import BitWidthConst
from brevitas_cpp.core.function_wrapper import (
    Identity,
    OverBatchOverTensorView,
    OverTensorView,
)
from brevitas_cpp.core.quant.int_base import IntQuant
from brevitas_cpp.core.quant.plan.weight import _min_val_of
from brevitas_cpp.core.restrict_val import _ClampValue, _RestrictValue
from brevitas_cpp.core.scaling.int_scaling import IntScaling
from brevitas_cpp.core.scaling.standalone import ParameterFromRuntimeStatsScaling
from brevitas_cpp.core.stats.stats_op import AbsPercentile
from brevitas_cpp.core.stats.stats_wrapper import _Stats
from brevitas_cpp.core.zero_point import ZeroZeroPoint


class LearnedActPlan(NamedTuple):
    """learned_int_quant's constant argument for one quantizer."""

    scaling_min_val: Optional[float]


class StatsActPlan(NamedTuple):
    """abs_percentile_int_quant's constant arguments for one quantizer."""

    high_percentile_q: float
    scaling_min_val: Optional[float]


def smallest_normal(dtype: torch.dtype) -> float:
    """The smallest positive normal number of a floating dtype (torch.finfo(dtype).tiny, which
    TorchScript can not call): the least scale the quantization ops take."""
    if dtype == torch.float16:
        return 6.103515625e-05  # 2^-14
    if dtype == torch.float64:
        return 2.2250738585072014e-308  # 2^-1022
    return 1.1754943508222875e-38  # 2^-126: float32 and bfloat16


def _is_flat_view(view: Module) -> bool:
    """The statistics see x's elements in x's order (a permutation would reorder tied values,
    and so which one gets the gradient)."""
    if type(view) is OverTensorView:
        return True
    return type(view) is OverBatchOverTensorView and type(view.permute_impl) is Identity


def learned_act_fits(block: Module) -> bool:
    """block (a RescalingIntQuant) is the stock activation quantizer past its statistics phase:
    a constant bit width and integer threshold, a learned ParameterFromRuntimeStatsScaling, zero
    point 0 and a fused-able IntQuant, by exact types (a subclass may compute otherwise). The
    IntQuant's view and delay flags are read on every call (PlannedQuant.quant_fuses)."""
    iq = block.int_quant
    return (
        block.int_threshold_is_const
        and type(block.scaling_impl) is ParameterFromRuntimeStatsScaling
        and type(block.msb_clamp_bit_width_impl) is BitWidthConst
        and type(block.zero_point_impl) is ZeroZeroPoint
        and type(iq) is IntQuant
        and iq.fused
    )


def _is_identity_restrict(block: Module) -> bool:
    return type(block) is _RestrictValue and block.restrict_is_identity


def learned_act_plan(block: Module) -> Optional[LearnedActPlan]:
    """The op's arguments when block (a RescalingIntQuant whose blocks learned_act_fits
    accepted) learns its scale in the linear domain, scale = clamp_min(value) / threshold (no
    restriction of the threshold, the value or the scale, the lower bound a signed clamp or
    none), else None."""
    scaling = block.scaling_impl
    if not (
        scaling.threshold_pre_is_identity
        and _is_identity_restrict(scaling.restrict_threshold)
        and _is_identity_restrict(scaling.restrict_scaling)
        and _is_identity_restrict(scaling.restrict_scale_threshold)
        and type(scaling.clamp_scaling) is _ClampValue
    ):
        return None
    try:
        return LearnedActPlan(_min_val_of(scaling.clamp_scaling.clamp_min_ste))
    except LookupError:
        return None


def stats_act_plan(block: Module) -> Optional[StatsActPlan]:
    """The op's arguments when block (a RescalingIntQuant whose blocks learned_act_fits
    accepted) collects its statistics as the stock quantizer does, else None."""
    iq = block.int_quant
    int_scaling = block.int_scaling_impl
    scaling = block.scaling_impl
    view = scaling.stats_input_view_shape_impl
    stats = scaling.stats
    if not (
        type(int_scaling) is IntScaling
        and isinstance(int_scaling.signed, bool)
        and int_scaling.signed == iq.signed
        and int_scaling.narrow_range == iq.narrow_range
        and _is_flat_view(view)
        and type(stats) is _Stats
        and tuple(stats.stats_output_shape) == ()
        and type(stats.stats_impl) is AbsPercentile
        and stats.stats_impl.stats_reduce_dim is None
        and type(scaling.clamp_scaling) is _ClampValue
    ):
        return None
    try:
        min_val = _min_val_of(scaling.clamp_scaling.clamp_min_ste)
    except LookupError:
        return None
    return StatsActPlan(float(stats.stats_impl.q), min_val)
