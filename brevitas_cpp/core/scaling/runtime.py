"""Scales computed from statistics on every call: of the tracked parameters (weights) or of the
runtime input (activations, with a running average used in eval), followed by the optional
affine rescaling, the lower bound ``scaling_min_val`` and the restrict-value block.

The argument checks and construction helpers these blocks share with the other scaling and
zero-point blocks live in core/_checks.py and core/_learned.py."""

from typing import List, Optional, Tuple

import torch
from torch import Tensor
from torch.nn import Module, Parameter

from brevitas_cpp import jit

# The argument checks and the graph link were first defined here; still importable from here.
from brevitas_cpp.core._checks import (  # noqa: F401
    check_affine_inits,
    checked_collect_stats_steps,
    checked_finite,
    checked_group,
    checked_module,
    checked_momentum,
    checked_optional_finite,
    checked_parameter_list,
    checked_restrict_impl,
    checked_shape,
)
from brevitas_cpp.core._learned import (  # noqa: F401
    checked_stats_args,
    checked_threshold_impl,
    hold_restrict_clamps,
    tracked_parameter_stats,
    zero_grad_link,
)
from brevitas_cpp.core._state_dict import KeyPolicy
from brevitas_cpp.core.function_wrapper import Identity
from brevitas_cpp.core.restrict_val import FloatRestrictValue, _ClampValue
from brevitas_cpp.core.stats import DEFAULT_MOMENTUM, _RuntimeStats
from brevitas_cpp.core.utils import ParameterWrapper, SkipsIdentities, StatelessBuffer

__all__ = [
    "RuntimeDynamicGroupStatsScaling",
    "RuntimeStatsScaling",
    "StatsFromParameterScaling",
    "_AffineRescaling",
    "_StatsScaling",
]

# ---- blocks ------------------------------------------------------------------------------------------


class _AffineRescaling(KeyPolicy, jit.ScriptModule):
    """x * affine_weight + affine_bias: a learned correction of a statistic, per scaling_shape
    element (the bias is learned only when affine_bias_init is given, else a constant 0)."""

    # Retraining from a float checkpoint: the rescaling keeps its init values.
    INIT_KEPT_KEYS = ("affine_weight",)
    FINITE_KEYS = ("affine_weight",)

    def __init__(
        self,
        scaling_shape: Tuple[int, ...],
        affine_weight_init: float,
        affine_bias_init: Optional[float],
        dtype: Optional[torch.dtype],
        device: Optional[torch.device],
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        scaling_shape = checked_shape(owner, "scaling_shape", scaling_shape)
        if affine_weight_init is None:
            raise ValueError(f"{owner}: affine_weight_init must be a finite float, got None")
        affine_weight_init = checked_optional_finite(
            owner, "affine_weight_init", affine_weight_init
        )
        affine_bias_init = checked_optional_finite(owner, "affine_bias_init", affine_bias_init)
        self.affine_weight = Parameter(
            torch.full(scaling_shape, affine_weight_init, dtype=dtype, device=device)
        )
        if affine_bias_init is not None:
            self.affine_bias = ParameterWrapper(
                torch.full(scaling_shape, affine_bias_init, dtype=dtype, device=device)
            )
        else:
            self.affine_bias = StatelessBuffer(torch.tensor(0.0, dtype=dtype, device=device))

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        return x * self.affine_weight + self.affine_bias()


class _StatsScaling(SkipsIdentities, jit.ScriptModule):
    """Turns a statistic into a scale: clamp to scaling_min_val (so log2 stays finite), move to
    the restrict domain, affine rescaling, restrict (and clamp, abs), divide by the restricted
    threshold."""

    # In the linear domain without affine rescaling these three are identities, not called.
    IDENTITY_SLOTS = (
        ("restrict_threshold_pre", "threshold_pre_is_identity"),
        ("restrict_scaling_pre", "scaling_pre_is_identity"),
        ("affine_rescaling", "affine_is_identity"),
    )
    IDENTITY_TYPES = (Identity,)
    __constants__ = ["threshold_pre_is_identity", "scaling_pre_is_identity", "affine_is_identity"]

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
        is_scale_unsigned: bool = True,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        restrict_threshold_impl = checked_threshold_impl(
            owner, restrict_scaling_impl, restrict_threshold_impl
        )
        check_affine_inits(
            owner, "scaling", scaling_affine_rescaling_init, scaling_affine_shifting_init
        )
        if scaling_affine_rescaling_init is not None:
            self.affine_rescaling = _AffineRescaling(
                scaling_shape,
                scaling_affine_rescaling_init,
                scaling_affine_shifting_init,
                dtype,
                device,
            )
        else:
            self.affine_rescaling = Identity()
        hold_restrict_clamps(
            self,
            restrict_scaling_impl,
            restrict_threshold_impl,
            restrict_scale_threshold_impl,
            scaling_min_val,
            is_scale_unsigned,
        )
        self.restrict_scaling_pre = restrict_scaling_impl.restrict_init_module()
        self.clamp_scaling = _ClampValue(scaling_min_val)
        self.replan()

    @jit.script_method
    def forward(self, stats: Tensor, threshold: Optional[Tensor] = None) -> Tensor:
        if threshold is None:
            threshold = torch.ones(1).type_as(stats)
        if not self.threshold_pre_is_identity:
            threshold = self.restrict_threshold_pre(threshold)
        threshold = self.restrict_clamp_threshold(threshold)
        stats = self.clamp_scaling(stats)
        if not self.scaling_pre_is_identity:
            stats = self.restrict_scaling_pre(stats)
        if not self.affine_is_identity:
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
        device: Optional[torch.device] = None,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        self.parameter_list_stats, scaling_shape = tracked_parameter_stats(
            owner,
            "scaling",
            scaling_stats_impl,
            scaling_stats_input_view_shape_impl,
            scaling_stats_input_concat_dim,
            scaling_shape,
            tracked_parameter_list,
            force_parameter,
        )
        check_affine_inits(
            owner, "scaling", scaling_affine_rescaling_init, scaling_affine_shifting_init
        )
        # _StatsScaling defaults the threshold's restriction to the scale's.
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
        )

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
        device: Optional[torch.device] = None,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        scaling_shape = checked_stats_args(
            owner, "scaling", scaling_stats_impl, scaling_stats_input_view_shape_impl, scaling_shape
        )
        scaling_stats_momentum = checked_momentum(
            owner, "scaling_stats_momentum", scaling_stats_momentum
        )
        check_affine_inits(
            owner, "scaling", scaling_affine_rescaling_init, scaling_affine_shifting_init
        )
        # _StatsScaling defaults the threshold's restriction to the scale's.
        self.runtime_stats = _RuntimeStats(
            scaling_stats_impl,
            scaling_shape,
            scaling_stats_input_view_shape_impl,
            scaling_stats_momentum,
            dtype,
            device,
        )
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
            is_scale_unsigned=is_scale_unsigned,
        )

    @jit.script_method
    def forward(self, x: Tensor, threshold: Optional[Tensor] = None) -> Tensor:
        stats = self.runtime_stats(x)
        return self.stats_scaling_impl(stats, threshold)


class RuntimeDynamicGroupStatsScaling(jit.ScriptModule):
    """A scale per group of group_size elements along group_dim of the runtime input (MX
    activations), recomputed on every call in training and eval alike: no running statistics.
    input_view_impl lays the input out as groups, scaling_stats_impl reduces each group."""

    def __init__(
        self,
        group_size: int,
        group_dim: int,
        input_view_impl: Module,
        scaling_stats_impl: Module,
        scaling_min_val: Optional[float],
        restrict_scaling_impl: Module = FloatRestrictValue(),
        restrict_threshold_impl: Optional[Module] = None,
        restrict_scale_threshold_impl: Optional[Module] = None,
        is_scale_unsigned: bool = True,
        dtype: Optional[torch.dtype] = None,
        device: Optional[torch.device] = None,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        checked_group(owner, group_size, group_dim)
        self.group_size = group_size
        self.group_dim = group_dim
        self.input_view_impl = checked_module(owner, "input_view_impl", input_view_impl)
        self.scaling_stats_impl = checked_module(owner, "scaling_stats_impl", scaling_stats_impl)
        # The statistic becomes a scale as for any statistics scale, without affine rescaling.
        self.stats_scaling_impl = _StatsScaling(
            restrict_scaling_impl=restrict_scaling_impl,
            restrict_threshold_impl=restrict_threshold_impl,
            restrict_scale_threshold_impl=restrict_scale_threshold_impl,
            scaling_min_val=scaling_min_val,
            scaling_shape=(1,),
            scaling_affine_rescaling_init=None,
            scaling_affine_shifting_init=None,
            dtype=dtype,
            device=device,
            is_scale_unsigned=is_scale_unsigned,
        )

    @jit.script_method
    def forward(self, stats_input: Tensor, threshold: Optional[Tensor] = None) -> Tensor:
        stats = self.scaling_stats_impl(self.input_view_impl(stats_input))
        return self.stats_scaling_impl(stats, threshold)
