"""Which activation quantizers collect their statistics in one op, abs_percentile_int_quant.

For its first collect_stats_steps training calls the stock activation quantizer (a
RescalingIntQuant around ParameterFromRuntimeStatsScaling with AbsPercentile over the tensor,
as in Int8ActPerTensorFloat and Uint8ActPerTensorFloat) scales x by a percentile of |x|: a
selection over x, its gradient spread back to x as a one-hot tensor, a handful of scalar ops,
then int_quant. The C++ op abs_percentile_int_quant does all of it in one call (with ReLU
before it, for QuantReLU); RescalingIntQuant.stats_forward calls it, eager and scripted, then
updates the running average as the composition does. This module decides, when the quantizer is
built, whether its blocks are the stock ones (by exact types: a subclass may compute otherwise).

The op is taken only where the composition's all_reduce_stats would copy the statistic (no
process group to average over: brevitas_cpp.distributed.stats_stay_local); anything else runs
the modules."""

from typing import NamedTuple, Optional

import torch
from torch.nn import Module

from brevitas_cpp.core.function_wrapper import (
    Identity,
    OverBatchOverTensorView,
    OverTensorView,
)
from brevitas_cpp.core.quant._fused_weight import _min_val_of
from brevitas_cpp.core.restrict_val import _ClampValue
from brevitas_cpp.core.scaling.int_scaling import IntScaling
from brevitas_cpp.core.stats.stats_op import AbsPercentile
from brevitas_cpp.core.stats.stats_wrapper import _Stats


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


def stats_act_current(block: Module) -> bool:
    """Whether the op arguments block (a RescalingIntQuant) was built with still describe its
    blocks: eager modules may have a nested block replaced since (the statistics phase is short,
    so it is checked on every call)."""
    built = block.__dict__.get("stats_act")  # absent from quantizers pickled before it
    return built is not None and stats_act_plan(block) == built
