"""Scales computed from statistics on every call: of the tracked parameters (weights) or of the
runtime input (activations, with a running average used in eval), followed by the optional
affine rescaling, the lower bound ``scaling_min_val`` and the restrict-value block.

Also home of the argument checks and the zero-gradient graph link shared by the other scaling
and zero-point blocks."""

import math
import numbers
from typing import List, Optional, Tuple

import torch
from torch import Tensor
from torch.nn import Module, Parameter

from brevitas_cpp import config, jit
from brevitas_cpp.core.function_wrapper import Identity
from brevitas_cpp.core.restrict_val import FloatRestrictValue, _ClampValue, _RestrictClampValue
from brevitas_cpp.core.stats import DEFAULT_MOMENTUM, _ParameterListStats, _RuntimeStats
from brevitas_cpp.core.utils import ParameterWrapper, StatelessBuffer

__all__ = ["RuntimeStatsScaling", "StatsFromParameterScaling", "_AffineRescaling", "_StatsScaling"]

# ---- argument checks (shared with standalone.py and zero_point.py) -------------------------------


def checked_shape(owner: str, arg: str, shape) -> Tuple[int, ...]:
    """shape as a tuple of positive ints; anything else (an int, negative sizes) is rejected
    here, where the message can name the block and the argument."""
    if isinstance(shape, (tuple, list, torch.Size)) and all(
            isinstance(s, numbers.Integral) and not isinstance(s, bool) and s > 0 for s in shape):
        return tuple(int(s) for s in shape)
    raise ValueError(
        f"{owner}: {arg} must be a tuple of positive ints (() for a scalar), got {shape!r}")


def checked_finite(owner: str, arg: str, value) -> None:
    """A float, or every element of a tensor, must be finite (a NaN/inf initial value can
    never be learned away)."""
    if isinstance(value, Tensor):
        if value.is_complex():
            raise TypeError(f"{owner}: {arg} must be a real tensor, got dtype {value.dtype}")
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise ValueError(f"{owner}: {arg} must be finite, got {value}")
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{owner}: {arg} must be a float or a tensor, got {value!r}")
    if not math.isfinite(float(value)):
        raise ValueError(f"{owner}: {arg} must be finite, got {value!r}")


def checked_optional_finite(owner: str, arg: str, value) -> Optional[float]:
    """None, or a finite real number as a float."""
    if value is None:
        return None
    checked_finite(owner, arg, value)
    return float(value)


def checked_momentum(owner: str, arg: str, momentum) -> Optional[float]:
    """None (cumulative average) or an EMA factor in [0, 1]."""
    if momentum is None:
        return None
    if isinstance(momentum, bool) or not isinstance(momentum, numbers.Real) or not (
            0.0 <= float(momentum) <= 1.0):
        raise ValueError(
            f"{owner}: {arg} must be None (cumulative average) or a float in [0, 1], "
            f"got {momentum!r}")
    return float(momentum)


def checked_collect_stats_steps(owner: str, collect_stats_steps) -> int:
    if isinstance(collect_stats_steps, bool) or not isinstance(
            collect_stats_steps, numbers.Integral) or collect_stats_steps <= 0:
        raise ValueError(
            f"{owner}: collect_stats_steps must be a positive int (training batches to take "
            f"statistics over), got {collect_stats_steps!r}")
    return int(collect_stats_steps)


def checked_module(owner: str, arg: str, impl) -> Module:
    if not isinstance(impl, Module):
        raise TypeError(f"{owner}: {arg} must be a torch.nn.Module, got {impl!r}")
    return impl


def checked_restrict_impl(owner: str, arg: str, impl) -> Module:
    """A restrict-value block: a module with the restrict_init_* helpers the scaling blocks call."""
    checked_module(owner, arg, impl)
    for helper in ("restrict_init_float", "restrict_init_tensor", "restrict_init_module",
                   "restrict_init_inplace_module"):
        if not callable(getattr(impl, helper, None)):
            raise TypeError(
                f"{owner}: {arg} must be a restrict-value block (FloatRestrictValue, "
                f"LogFloatRestrictValue, IntRestrictValue, PowerOfTwoRestrictValue, ...) with "
                f"{helper}(), got {type(impl).__name__}")
    return impl


def checked_parameter_list(owner: str, tracked_parameter_list) -> List[Tensor]:
    if not isinstance(tracked_parameter_list, (list, tuple)) or len(tracked_parameter_list) == 0 or \
            not all(isinstance(p, Tensor) for p in tracked_parameter_list):
        raise ValueError(
            f"{owner}: tracked_parameter_list must be a non-empty list of tensors (the "
            f"parameters the statistics are taken over), got {tracked_parameter_list!r}")
    return list(tracked_parameter_list)


def check_affine_inits(owner: str, prefix: str, rescaling_init, shifting_init) -> None:
    """prefix is 'scaling' or 'zero_point', as in the arguments' names."""
    what = "scale" if prefix == "scaling" else prefix.replace("_", " ")
    # Same exception type as Brevitas for the missing rescaling (callers may catch it).
    if shifting_init is not None and rescaling_init is None:
        raise RuntimeError(
            f"{owner}: enabling shifting of the {what} ({prefix}_affine_shifting_init="
            f"{shifting_init!r}) requires enabling affine rescaling first "
            f"({prefix}_affine_rescaling_init is None)")


# ---- graph link for DDP ----------------------------------------------------------------------------


def zero_grad_link(x: Tensor, param: Tensor) -> Tensor:
    """x, with param joined to its autograd graph with an exactly-zero gradient.

    A parameter that is not used yet (lazy init, statistics warm-up) would otherwise force DDP's
    find_unused_parameters=True. torch.where selects x everywhere, so every bit of x is kept
    (x + 0 * param would turn -0.0 into +0.0 and NaN out on a non-finite param)."""
    keep = torch.ones((), dtype=torch.bool, device=x.device)
    return torch.where(keep, x, param)


# ---- blocks ------------------------------------------------------------------------------------------


class _AffineRescaling(jit.ScriptModule):
    """x * affine_weight + affine_bias: a learned correction of a statistic, per scaling_shape
    element (the bias is learned only when affine_bias_init is given, else a constant 0)."""

    def __init__(
            self,
            scaling_shape: Tuple[int, ...],
            affine_weight_init: float,
            affine_bias_init: Optional[float],
            dtype: Optional[torch.dtype],
            device: Optional[torch.device]) -> None:
        super().__init__()
        owner = type(self).__name__
        scaling_shape = checked_shape(owner, "scaling_shape", scaling_shape)
        if affine_weight_init is None:
            raise ValueError(f"{owner}: affine_weight_init must be a finite float, got None")
        affine_weight_init = checked_optional_finite(owner, "affine_weight_init", affine_weight_init)
        affine_bias_init = checked_optional_finite(owner, "affine_bias_init", affine_bias_init)
        self.affine_weight = Parameter(
            torch.full(scaling_shape, affine_weight_init, dtype=dtype, device=device))
        if affine_bias_init is not None:
            self.affine_bias = ParameterWrapper(
                torch.full(scaling_shape, affine_bias_init, dtype=dtype, device=device))
        else:
            self.affine_bias = StatelessBuffer(torch.tensor(0., dtype=dtype, device=device))

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        return x * self.affine_weight + self.affine_bias()

    def _load_from_state_dict(
            self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
            error_msgs):
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs)
        # Retraining from a float checkpoint: the rescaling keeps its init values.
        weight_key = prefix + "affine_weight"
        if config.IGNORE_MISSING_KEYS and weight_key in missing_keys:
            missing_keys.remove(weight_key)


class _StatsScaling(jit.ScriptModule):
    """Turns a statistic into a scale: clamp to scaling_min_val (so log2 stays finite), move to
    the restrict domain, affine rescaling, restrict (and clamp, abs), divide by the restricted
    threshold."""

    def __init__(
            self,
            restrict_scaling_impl: Module,
            restrict_threshold_impl: Module,
            scaling_min_val: Optional[float],
            scaling_shape: Tuple[int, ...],
            scaling_affine_rescaling_init: Optional[float],
            scaling_affine_shifting_init: Optional[float],
            dtype: Optional[torch.dtype],
            device: Optional[torch.device],
            restrict_scale_threshold_impl: Optional[Module] = None,
            is_scale_unsigned: bool = True) -> None:
        super().__init__()
        owner = type(self).__name__
        checked_restrict_impl(owner, "restrict_scaling_impl", restrict_scaling_impl)
        # Threshold restriction shares the scale's unless given (Brevitas's retro-compatibility).
        if restrict_threshold_impl is None:
            restrict_threshold_impl = restrict_scaling_impl
        checked_restrict_impl(owner, "restrict_threshold_impl", restrict_threshold_impl)
        check_affine_inits(
            owner, "scaling", scaling_affine_rescaling_init, scaling_affine_shifting_init)
        if scaling_affine_rescaling_init is not None:
            self.affine_rescaling = _AffineRescaling(
                scaling_shape, scaling_affine_rescaling_init, scaling_affine_shifting_init, dtype,
                device)
        else:
            self.affine_rescaling = Identity()
        self.restrict_clamp_scaling = _RestrictClampValue(
            scaling_min_val, restrict_scaling_impl, is_scale_unsigned)
        self.restrict_clamp_threshold = _RestrictClampValue(
            restrict_value_impl=restrict_threshold_impl)
        self.restrict_clamp_scale_threshold = _RestrictClampValue(
            restrict_value_impl=restrict_scale_threshold_impl, is_unsigned=is_scale_unsigned)
        self.restrict_scaling_pre = restrict_scaling_impl.restrict_init_module()
        self.restrict_threshold_pre = restrict_threshold_impl.restrict_init_module()
        self.clamp_scaling = _ClampValue(scaling_min_val)

    @jit.script_method
    def forward(self, stats: Tensor, threshold: Optional[Tensor] = None) -> Tensor:
        if threshold is None:
            threshold = torch.ones(1).type_as(stats)
        threshold = self.restrict_clamp_threshold(self.restrict_threshold_pre(threshold))
        stats = self.clamp_scaling(stats)
        stats = self.restrict_scaling_pre(stats)
        stats = self.affine_rescaling(stats)
        stats = self.restrict_clamp_scaling(stats)
        return self.restrict_clamp_scale_threshold(stats / threshold)


class StatsFromParameterScaling(jit.ScriptModule):
    """A scale recomputed on every call from statistics of the tracked parameters (e.g. the
    weight's abs max), optionally rescaled by a learned affine correction."""

    def __init__(
            self,
            scaling_stats_impl: Module,
            scaling_stats_input_view_shape_impl: Module,
            scaling_stats_input_concat_dim: int,
            tracked_parameter_list: List[torch.nn.Parameter],
            scaling_shape: Tuple[int, ...],
            force_parameter: bool = False,
            restrict_scaling_impl: Module = FloatRestrictValue(),
            restrict_threshold_impl: Optional[Module] = None,
            restrict_scale_threshold_impl: Optional[Module] = None,
            scaling_affine_rescaling_init: Optional[float] = None,
            scaling_affine_shifting_init: Optional[float] = None,
            scaling_min_val: Optional[float] = None,
            dtype: Optional[torch.dtype] = None,
            device: Optional[torch.device] = None) -> None:
        super().__init__()
        owner = type(self).__name__
        checked_module(owner, "scaling_stats_impl", scaling_stats_impl)
        checked_module(owner, "scaling_stats_input_view_shape_impl",
                       scaling_stats_input_view_shape_impl)
        scaling_shape = checked_shape(owner, "scaling_shape", scaling_shape)
        tracked_parameter_list = checked_parameter_list(owner, tracked_parameter_list)
        check_affine_inits(
            owner, "scaling", scaling_affine_rescaling_init, scaling_affine_shifting_init)
        if restrict_threshold_impl is None:
            restrict_threshold_impl = restrict_scaling_impl
        self.parameter_list_stats = _ParameterListStats(
            scaling_stats_impl, scaling_shape, scaling_stats_input_view_shape_impl,
            scaling_stats_input_concat_dim, tracked_parameter_list, force_parameter)
        self.stats_scaling_impl = _StatsScaling(
            restrict_scaling_impl=restrict_scaling_impl,
            restrict_threshold_impl=restrict_threshold_impl,
            restrict_scale_threshold_impl=restrict_scale_threshold_impl,
            scaling_min_val=scaling_min_val,
            scaling_shape=scaling_shape,
            scaling_affine_rescaling_init=scaling_affine_rescaling_init,
            scaling_affine_shifting_init=scaling_affine_shifting_init,
            dtype=dtype,
            device=device)

    @jit.script_method
    def forward(self, x: Optional[Tensor], threshold: Optional[Tensor] = None) -> Tensor:
        stats = self.parameter_list_stats(x)
        if threshold is None:
            threshold = torch.ones(1).type_as(stats)
        return self.stats_scaling_impl(stats, threshold)


class RuntimeStatsScaling(jit.ScriptModule):
    """A scale from statistics of the runtime input: the batch statistic in training (folded into
    a running value with momentum), the running value in eval."""

    def __init__(
            self,
            scaling_stats_impl: Module,
            scaling_stats_input_view_shape_impl: Module,
            scaling_shape: Tuple[int, ...],
            is_scale_unsigned: bool = True,
            scaling_affine_rescaling_init: Optional[float] = None,
            scaling_affine_shifting_init: Optional[float] = None,
            restrict_scaling_impl: Module = FloatRestrictValue(),
            restrict_threshold_impl: Optional[Module] = None,
            restrict_scale_threshold_impl: Optional[Module] = None,
            scaling_stats_momentum: float = DEFAULT_MOMENTUM,
            scaling_min_val: Optional[float] = None,
            dtype: Optional[torch.dtype] = None,
            device: Optional[torch.device] = None) -> None:
        super().__init__()
        owner = type(self).__name__
        checked_module(owner, "scaling_stats_impl", scaling_stats_impl)
        checked_module(owner, "scaling_stats_input_view_shape_impl",
                       scaling_stats_input_view_shape_impl)
        scaling_shape = checked_shape(owner, "scaling_shape", scaling_shape)
        scaling_stats_momentum = checked_momentum(
            owner, "scaling_stats_momentum", scaling_stats_momentum)
        check_affine_inits(
            owner, "scaling", scaling_affine_rescaling_init, scaling_affine_shifting_init)
        if restrict_threshold_impl is None:
            restrict_threshold_impl = restrict_scaling_impl
        self.runtime_stats = _RuntimeStats(
            scaling_stats_impl, scaling_shape, scaling_stats_input_view_shape_impl,
            scaling_stats_momentum, dtype, device)
        self.stats_scaling_impl = _StatsScaling(
            restrict_scaling_impl=restrict_scaling_impl,
            restrict_threshold_impl=restrict_threshold_impl,
            restrict_scale_threshold_impl=restrict_scale_threshold_impl,
            scaling_min_val=scaling_min_val,
            scaling_shape=scaling_shape,
            scaling_affine_rescaling_init=scaling_affine_rescaling_init,
            scaling_affine_shifting_init=scaling_affine_shifting_init,
            dtype=dtype,
            device=device,
            is_scale_unsigned=is_scale_unsigned)

    @jit.script_method
    def forward(self, x: Tensor, threshold: Optional[Tensor] = None) -> Tensor:
        stats = self.runtime_stats(x)
        return self.stats_scaling_impl(stats, threshold)
