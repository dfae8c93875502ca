"""Construction helpers shared by the scaling and zero-point blocks: the statistics they read,
the restrict-and-clamp chain that turns a value into a scale, the initial value of a learned
tensor, and the state of values learned after a statistics warm-up.

The helpers run in ``__init__`` (plain Python) and register submodules and attributes on the
block under the names Brevitas's blocks use, so scripted blocks (BREVITAS_JIT=1), which cannot
share script methods by inheritance, still share this code."""

from typing import Callable, List, Optional, Tuple

import torch
from torch import Tensor
from torch.nn import Module, Parameter

from brevitas_cpp import jit
from brevitas_cpp.core._checks import (
    checked_finite,
    checked_module,
    checked_parameter_list,
    checked_restrict_impl,
    checked_shape,
)
from brevitas_cpp.core.restrict_val import _RestrictClampValue
from brevitas_cpp.core.stats import SCALAR_SHAPE, _ParameterListStats

__all__ = [
    "checked_stats_args",
    "checked_threshold_impl",
    "hold_lazy_init_state",
    "hold_restrict_clamps",
    "hold_warmup_state",
    "initial_value_tensor",
    "tracked_parameter_stats",
    "zero_grad_link",
]


# ---- graph link for DDP ----------------------------------------------------------------------------


def zero_grad_link(x: Tensor, param: Tensor) -> Tensor:
    """x, with param joined to its autograd graph with an exactly-zero gradient.

    A parameter that is not used yet (lazy init, statistics warm-up) would otherwise force DDP's
    find_unused_parameters=True. torch.where selects x everywhere, so every bit of x is kept
    (x + 0 * param would turn -0.0 into +0.0 and NaN out on a non-finite param)."""
    keep = torch.ones((), dtype=torch.bool, device=x.device)
    return torch.where(keep, x, param)


# ---- statistics ------------------------------------------------------------------------------------


def checked_stats_args(
    owner: str, prefix: str, stats_impl, stats_input_view_shape_impl, shape
) -> Tuple[int, ...]:
    """The statistic, its input view and the output shape of a block whose arguments are named
    <prefix>_stats_impl, <prefix>_stats_input_view_shape_impl and <prefix>_shape (prefix
    'scaling' or 'zero_point'); returns the shape as a tuple."""
    checked_module(owner, f"{prefix}_stats_impl", stats_impl)
    checked_module(owner, f"{prefix}_stats_input_view_shape_impl", stats_input_view_shape_impl)
    return checked_shape(owner, f"{prefix}_shape", shape)


def tracked_parameter_stats(
    owner: str,
    prefix: str,
    stats_impl: Module,
    stats_input_view_shape_impl: Module,
    stats_input_concat_dim: int,
    shape: Tuple[int, ...],
    tracked_parameter_list: List[torch.nn.Parameter],
    force_parameter: bool = False,
) -> Tuple[_ParameterListStats, Tuple[int, ...]]:
    """The statistics block over the tracked parameters, and the checked output shape."""
    shape = checked_stats_args(owner, prefix, stats_impl, stats_input_view_shape_impl, shape)
    tracked_parameter_list = checked_parameter_list(owner, tracked_parameter_list)
    stats = _ParameterListStats(
        stats_impl,
        shape,
        stats_input_view_shape_impl,
        stats_input_concat_dim,
        tracked_parameter_list,
        force_parameter,
    )
    return stats, shape


# ---- restriction of a scale ------------------------------------------------------------------------


def checked_threshold_impl(owner: str, restrict_scaling_impl, restrict_threshold_impl) -> Module:
    """Checks the scale's restriction and returns the threshold's, which is the scale's unless
    given (Brevitas's retro-compatibility)."""
    checked_restrict_impl(owner, "restrict_scaling_impl", restrict_scaling_impl)
    if restrict_threshold_impl is None:
        restrict_threshold_impl = restrict_scaling_impl
    return checked_restrict_impl(owner, "restrict_threshold_impl", restrict_threshold_impl)


def hold_restrict_clamps(
    block: Module,
    restrict_scaling_impl: Module,
    restrict_threshold_impl: Module,
    restrict_scale_threshold_impl: Optional[Module],
    scaling_min_val: Optional[float],
    is_scale_unsigned: bool,
) -> None:
    """Registers on block the chain from a value of the restrict domain and a threshold to a
    scale: restrict_threshold_pre (threshold into the restrict domain), restrict_clamp_threshold,
    restrict_clamp_scaling (restrict, scaling_min_val, abs) and restrict_clamp_scale_threshold
    (applied to value / threshold)."""
    block.restrict_clamp_scaling = _RestrictClampValue(
        scaling_min_val, restrict_scaling_impl, is_scale_unsigned
    )
    block.restrict_clamp_threshold = _RestrictClampValue(
        restrict_value_impl=restrict_threshold_impl
    )
    block.restrict_clamp_scale_threshold = _RestrictClampValue(
        restrict_value_impl=restrict_scale_threshold_impl, is_unsigned=is_scale_unsigned
    )
    block.restrict_threshold_pre = restrict_threshold_impl.restrict_init_module()


# ---- learned values --------------------------------------------------------------------------------


def initial_value_tensor(
    owner: str,
    arg: str,
    init,
    shape_arg: str,
    shape: Optional[Tuple[int, ...]],
    dtype: Optional[torch.dtype],
    device: Optional[torch.device],
    to_domain: Optional[Callable[[Tensor], Tensor]] = None,
) -> Tensor:
    """The initial value of a learned tensor from a float or a tensor (copied: learning must not
    write into the caller's), mapped by to_domain (e.g. into a restrict domain), then broadcast
    to shape when it is a scalar. A tensor init must be a scalar or have exactly that shape."""
    checked_finite(owner, arg, init)
    if shape is not None:
        shape = checked_shape(owner, shape_arg, shape)
    if isinstance(init, Tensor):
        if shape is not None and init.shape != SCALAR_SHAPE and tuple(init.shape) != shape:
            # RuntimeError as Brevitas, for callers that catch it.
            raise RuntimeError(
                f"{owner}: {arg} has shape {tuple(init.shape)}, which is neither a scalar () "
                f"nor {shape_arg} {shape}"
            )
        value = init.detach().to(device=device, dtype=dtype, copy=True)
    else:
        value = torch.tensor(init, dtype=dtype, device=device)
    if to_domain is not None:
        value = to_domain(value)
    if value.shape == SCALAR_SHAPE and shape is not None:
        value = torch.full(shape, value, dtype=dtype, device=device)
    return value


def hold_lazy_init_state(
    block: Module,
    shape: Tuple[int, ...],
    placeholder: float,
    dtype: Optional[torch.dtype],
    device: Optional[torch.device],
) -> None:
    """State of a block whose learned ``value`` is initialised on the first call: init_done,
    local_loss_mode (set by calibration code, e.g. MSE search, to get the statistic without
    initialising) and value, a placeholder the statistic is folded into in place (1 for a
    multiply, 0 for an add)."""
    block.init_done = jit.Attribute(False, bool)
    block.local_loss_mode = jit.Attribute(False, bool)
    block.value = Parameter(torch.full(shape, placeholder, dtype=dtype, device=device))


def hold_warmup_state(
    block: Module,
    collect_stats_steps: int,
    momentum: Optional[float],
    shape: Tuple[int, ...],
    placeholder: float,
    dtype: Optional[torch.dtype],
    device: Optional[torch.device],
) -> None:
    """State of a block whose learned ``value`` is initialised after collect_stats_steps training
    batches: collect_stats_steps, counter, momentum, local_loss_mode (set by calibration code to
    get batch statistics without touching the running average), and the running average
    ``buffer`` and ``value``, both starting at a placeholder so that the first batch and the
    initialisation are in-place operations (1 for multiplies, 0 for adds)."""
    block.collect_stats_steps = jit.Attribute(collect_stats_steps, int)
    block.counter = jit.Attribute(0, int)
    block.momentum = jit.Attribute(momentum, Optional[float])
    block.local_loss_mode = jit.Attribute(False, bool)
    block.register_buffer("buffer", torch.full(shape, placeholder, dtype=dtype, device=device))
    block.value = Parameter(torch.full(shape, placeholder, dtype=dtype, device=device))
