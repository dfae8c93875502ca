"""The eager-mode shortcut of the stock activation quantizer past its statistics phase.

A RescalingIntQuant of a constant bit width, a learned ParameterFromRuntimeStatsScaling, zero
point 0 and a fused IntQuant computes, on every training step, clamp_min(value) / threshold
and then int_quant. Its module chain (scaling_impl, bit width, zero point, IntQuant) costs more
Python than those two ops; in eager mode forward calls them directly. TorchScript compiles the
module chain, where module calls cost little, and never sees this code. After a ReLU
(FusedActivationQuantProxy, QuantReLU's) the two are one op, relu_int_quant. The statistics
phase before it has its own op (RescalingIntQuant.stats_forward, see _stats_act.py), reached
from here."""

from typing import Optional

from torch.nn import Module

from brevitas_cpp.core.bit_width.const import BitWidthConst
from brevitas_cpp.core.hooks import any_hook_in, hook_dicts, submodules
from brevitas_cpp.core.quant._fusion import int_operands_fit
from brevitas_cpp.core.quant._stats_act import stats_act_current
from brevitas_cpp.core.quant.block_output import QuantBlockOutput
from brevitas_cpp.core.quant.int_base import IntQuant
from brevitas_cpp.core.scaling.standalone import ParameterFromRuntimeStatsScaling
from brevitas_cpp.core.zero_point import ZeroZeroPoint
from brevitas_cpp.function import int_quant, relu_int_quant


def learned_act_fits(block: Module) -> bool:
    """The blocks are the stock ones, by exact types (a subclass may compute otherwise); the
    learned scale's own identity flags and the IntQuant's fusion are read on every call."""
    return (
        not block.fused_weight
        and block.int_threshold_is_const
        and type(block.scaling_impl) is ParameterFromRuntimeStatsScaling
        and type(block.msb_clamp_bit_width_impl) is BitWidthConst
        and type(block.zero_point_impl) is ZeroZeroPoint
        and type(block.int_quant) is IntQuant
    )


def learned_act_forward(block: Module, x, relu: bool = False) -> Optional[QuantBlockOutput]:
    """block's forward in training (of torch.relu(x) with relu): one op, relu_int_quant or
    int_quant, in the learned phase; abs_percentile_int_quant while the stock statistics are
    collected (_stats_act.py). None on the call that initialises the scale, outside training,
    or where the fused op does not take the operands (the caller then runs its modules)."""
    scaling = block.scaling_impl
    if not scaling.training:
        return None
    if scaling.counter < scaling.collect_stats_steps:
        # The phase is short: its blocks are matched again (a nested one may have been replaced
        # since the quantizer was built) and walked for hooks, which their calls would run.
        if any_hook_in(hook_dicts(submodules(block))) or not stats_act_current(block):
            return None
        return block.stats_forward(x, relu)
    # The blocks as built (a walk of the module tree costs 20 us: too much on every call).
    if any_hook_in(block.__dict__.get("act_hooks", ())):  # absent if pickled before it
        return None
    if scaling.counter == scaling.collect_stats_steps:
        return None
    if not (block.int_threshold_is_const and block.quant_fuses()):
        return None
    iq = block.int_quant
    bit_width = block.msb_clamp_bit_width_impl.bit_width.value
    zero_point = block.zero_point_impl.zero_point.value
    scale = scaling._learned_scale(block.const_int_threshold.value)
    if not int_operands_fit(x, scale, zero_point, bit_width):
        return None
    fused = relu_int_quant if relu else int_quant
    y = fused(
        x, scale, zero_point, bit_width, iq.signed, iq.narrow_range, iq.rounding_mode, iq.clamp_ste
    )
    return y, scale, zero_point, bit_width
