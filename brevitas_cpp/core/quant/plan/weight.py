"""When a RescalingIntQuant is exactly the stock weight quantizer (Int8WeightPerTensorFloat,
Int8WeightPerChannelFloat and their bit-width / rounding variants) that the C++ op
``abs_max_int_quant`` computes in one call:

    BitWidthConst -> IntScaling -> StatsFromParameterScaling(AbsMax over the tensor or over the
    output channels, _StatsScaling in the linear domain without affine rescaling) -> ZeroZeroPoint
    -> IntQuant (a fused-able rounding and TensorClamp / TensorClampSte, no view, no delay).

Structure is decided when the plan is derived (core/replan.py), by the exact types of its
blocks (a subclass may do something else); operands are checked on every call from metadata
only (see operands.py): then the op gives the composition's numbers bit for bit. Anything else
keeps the composition.
"""

from typing import NamedTuple, Optional

import torch
from torch import Tensor
from torch.nn import Module

from brevitas_cpp.core.bit_width.const import BitWidthConst
from brevitas_cpp.core.function_wrapper import (
    Abs,
    Identity,
    OverOutputChannelView,
    OverTensorView,
    ScalarSignedClampMinSte,
)
from brevitas_cpp.core.quant.int_base import IntQuant
from brevitas_cpp.core.quant.plan.operands import is_kernel_float, is_single_value, on_kernel_device
from brevitas_cpp.core.restrict_val import FloatRestrictValue, _ClampValue, _RestrictClampValue
from brevitas_cpp.core.scaling.int_scaling import IntScaling, PowerOfTwoIntScaling
from brevitas_cpp.core.scaling.runtime import StatsFromParameterScaling, _StatsScaling
from brevitas_cpp.core.stats.stats_op import AbsMax
from brevitas_cpp.core.stats.stats_wrapper import _ParameterListStats, _Stats
from brevitas_cpp.core.stats.view_wrapper import _ViewParameter
from brevitas_cpp.core.zero_point import ZeroZeroPoint


class FusedWeightPlan(NamedTuple):
    """abs_max_int_quant's constant arguments for one quantizer."""

    channels: int  # -1: statistics over the whole tensor; else C, the output channels (dim 0)
    scale_rank: int  # per channel: the scale's rank, (C, 1, ..., 1)
    signed: bool
    narrow_range: bool
    scaling_min_val: Optional[float]
    rounding_mode: str
    clamp_ste: bool


def _min_val_of(clamp: Module) -> Optional[float]:
    """The bound of a ScalarSignedClampMinSte, None for the identity; raises LookupError for
    anything else."""

    if type(clamp) is Identity:
        return None
    if type(clamp) is ScalarSignedClampMinSte:
        return float(clamp.min_val)
    raise LookupError(type(clamp).__name__)


def _linear_restrict_clamp(block: Module, clamps: bool) -> Optional[float]:
    """A _RestrictClampValue that restricts nothing and takes |x|: its lower bound (when
    clamps), else None; raises LookupError for anything else."""

    if type(block) is not _RestrictClampValue:
        raise LookupError("restrict clamp")
    if type(block.restrict_value_impl) not in (Identity, FloatRestrictValue):
        raise LookupError("restriction")
    if type(block.apply_abs) is not Abs:
        raise LookupError("abs")
    min_val = _min_val_of(block.clamp_min_ste)
    if min_val is not None and not clamps:
        raise LookupError("clamped threshold")
    return min_val


def _stats_layout(stats: Module) -> Optional[tuple]:
    """(channels, scale_rank) of AbsMax statistics over the tensor or the output channels."""

    if type(stats) is not _ParameterListStats or stats.extra_tracked_params_list is not None:
        return None
    if type(stats.first_tracked_param) is not _ViewParameter or type(stats.stats) is not _Stats:
        return None
    view = stats.first_tracked_param.view_shape_impl
    stats_impl = stats.stats.stats_impl
    shape = tuple(stats.stats.stats_output_shape)
    if type(stats_impl) is not AbsMax:
        return None
    if type(view) is OverTensorView:
        return (-1, 0) if stats_impl.stats_reduce_dim is None and shape == () else None
    if type(view) is OverOutputChannelView and type(view.permute_impl) is Identity:
        per_channel = (
            stats_impl.stats_reduce_dim == 1
            and len(shape) >= 1
            and shape[0] >= 1
            and all(s == 1 for s in shape[1:])
        )
        return (shape[0], len(shape)) if per_channel else None
    return None


def fused_weight_plan(block: Module) -> Optional[FusedWeightPlan]:
    """The op's arguments when block (a RescalingIntQuant) is the stock composition, else None."""

    int_quant = block.int_quant
    int_scaling = block.int_scaling_impl
    scaling = block.scaling_impl
    if not (
        type(block.msb_clamp_bit_width_impl) is BitWidthConst
        and type(block.zero_point_impl) is ZeroZeroPoint
        and type(int_quant) is IntQuant
        and int_quant.fused
        and int_quant.view_is_identity
        and int_quant.never_delays
        and type(int_scaling) is IntScaling
        and isinstance(int_scaling.signed, bool)
        and int_scaling.signed == int_quant.signed
        and int_scaling.narrow_range == int_quant.narrow_range
        and type(scaling) is StatsFromParameterScaling
        and type(scaling.stats_scaling_impl) is _StatsScaling
    ):
        return None
    layout = _stats_layout(scaling.parameter_list_stats)
    if layout is None:
        return None
    stats_scaling = scaling.stats_scaling_impl
    if not (
        type(stats_scaling.affine_rescaling) is Identity
        and type(stats_scaling.restrict_threshold_pre) is Identity
        and type(stats_scaling.restrict_scaling_pre) is Identity
        and type(stats_scaling.clamp_scaling) is _ClampValue
    ):
        return None
    try:
        _linear_restrict_clamp(stats_scaling.restrict_clamp_threshold, clamps=False)
        _linear_restrict_clamp(stats_scaling.restrict_clamp_scale_threshold, clamps=False)
        bounds = [
            _min_val_of(stats_scaling.clamp_scaling.clamp_min_ste),
            _linear_restrict_clamp(stats_scaling.restrict_clamp_scaling, clamps=True),
        ]
    except LookupError:
        return None
    given = [b for b in bounds if b is not None]
    if any(b != given[0] for b in given):  # two different bounds: not one clamp
        return None
    return FusedWeightPlan(
        channels=layout[0],
        scale_rank=layout[1],
        signed=bool(int_quant.signed),
        narrow_range=bool(int_quant.narrow_range),
        scaling_min_val=given[0] if given else None,
        rounding_mode=int_quant.rounding_mode,
        clamp_ste=bool(int_quant.clamp_ste),
    )


def fused_weight_fits(x: Tensor, bit_width: Tensor, channels: int, scale_rank: int) -> bool:
    """abs_max_int_quant takes these operands and returns the composition's: a floating x on a
    kernel device with its bit width in x's dtype (so the threshold divides in x's dtype, as
    IntScaling's does), and, per channel, x of the scale's rank with C channels first."""
    if not (
        is_kernel_float(x.dtype)
        and on_kernel_device(x)
        and bit_width.dtype == x.dtype
        and bit_width.device == x.device
        and is_single_value(bit_width)
    ):
        return False
    for size in x.size():  # x.numel() > 0 (numel is a dispatcher call under TorchScript)
        if size == 0:
            return False
    if channels < 0:
        return True
    return x.dim() == scale_rank and x.size(0) == channels


# Up to 2^24 every integer threshold is exact in float32 and above, and one rounding from the
# exact value in float16/bfloat16: a copy converted by .to() equals the one computed there.
_EXACT_THRESHOLD_BITS = 24


def constant_int_threshold(bit_width_impl: Module, int_scaling_impl: Module) -> Optional[Tensor]:
    """int_scaling_impl(bit_width_impl()) when both are stock blocks of constant output (a
    BitWidthConst of at most 24 bits, IntScaling or PowerOfTwoIntScaling with a fixed sign),
    computed once here instead of with two ops on every call; None otherwise."""
    if type(bit_width_impl) is not BitWidthConst:
        return None
    if type(int_scaling_impl) not in (IntScaling, PowerOfTwoIntScaling):
        return None
    if not isinstance(int_scaling_impl.signed, bool):
        return None
    with torch.no_grad():
        bit_width = bit_width_impl()
        # On 'meta' (a model built there) there is no value to read: the general path, until
        # the quantizer is rebuilt where its tensors hold values (load_state_dict, reset).
        if bit_width.is_meta or float(bit_width) > _EXACT_THRESHOLD_BITS:
            return None
        return int_scaling_impl(bit_width).detach().clone()
