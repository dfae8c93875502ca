"""Scales that are held rather than recomputed: a constant, a learned parameter, a learned
parameter initialised from statistics (of the tracked weights on first use, or of the first
``collect_stats_steps`` training batches), and the scales used to truncate accumulators.

Learned values live in the restrict domain (e.g. log2 for power-of-two scales) and go through
the restrict-value block, the lower bound ``scaling_min_val`` and abs on every call."""

from typing import List, Optional, Tuple, Union

import torch
from torch import Tensor
from torch.nn import Module, Parameter

from brevitas_cpp import jit
from brevitas_cpp.core._checks import (
    check_affine_inits,
    checked_collect_stats_steps,
    checked_finite,
    checked_module,
    checked_momentum,
    checked_restrict_impl,
)
from brevitas_cpp.core._learned import (
    checked_stats_args,
    checked_threshold_impl,
    hold_lazy_init_state,
    hold_restrict_clamps,
    hold_warmup_state,
    initial_value_tensor,
    tracked_parameter_stats,
    zero_grad_link,
)
from brevitas_cpp.core._state_dict import (
    LEGACY_VALUE_KEYS,
    KeyPolicy,
    LazyInitValueStateDict,
    LearnedScaleChecks,
    WarmupValueStateDict,
)
from brevitas_cpp.core.function_wrapper import Identity, OverBatchOverTensorView, TensorClamp
from brevitas_cpp.core.restrict_val import (
    FloatRestrictValue,
    _AbsValue,
    _ClampValue,
    _RestrictValue,
)
from brevitas_cpp.core.scaling.runtime import _StatsScaling
from brevitas_cpp.core.stats import DEFAULT_MOMENTUM, SCALAR_SHAPE, _Stats
from brevitas_cpp.core.utils import (
    SkipsIdentities,
    StatelessBuffer,
    inplace_momentum_update,
    inplace_tensor_mul,
)
from brevitas_cpp.distributed import all_reduce_stats

__all__ = [
    "ConstScaling",
    "ParameterFromRuntimeStatsScaling",
    "ParameterFromStatsFromParameterScaling",
    "ParameterScaling",
    "TruncMsbScaling",
    "TruncScalingWrapper",
]


def _restricted_init(owner: str, scaling_init: Tensor, restrict_scaling_impl: Module) -> Tensor:
    """scaling_init moved to the restrict domain; it must stay finite there (log2 of a scale
    <= 0 is -inf or NaN)."""
    restricted = restrict_scaling_impl.restrict_init_tensor(scaling_init)
    if restricted.is_floating_point() and not bool(torch.isfinite(restricted).all()):
        raise ValueError(
            f"{owner}: scaling_init must be positive with {type(restrict_scaling_impl).__name__} "
            f"(it is learned as log2), got {scaling_init}"
        )
    return restricted


class ConstScaling(jit.ScriptModule):
    """A constant scale (never saved: it is rebuilt from scaling_init), restricted and clamped
    like a learned one and divided by the restricted threshold."""

    def __init__(
        self,
        scaling_init: Union[float, Tensor],
        is_scale_unsigned: bool = True,
        restrict_scaling_impl: Module = FloatRestrictValue(),
        restrict_threshold_impl: Optional[Module] = None,
        restrict_scale_threshold_impl: Optional[Module] = None,
        scaling_min_val: Optional[float] = None,
        dtype: Optional[torch.dtype] = None,
        device: Optional[torch.device] = None,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        restrict_threshold_impl = checked_threshold_impl(
            owner, restrict_scaling_impl, restrict_threshold_impl
        )
        checked_finite(owner, "scaling_init", scaling_init)
        hold_restrict_clamps(
            self,
            restrict_scaling_impl,
            restrict_threshold_impl,
            restrict_scale_threshold_impl,
            scaling_min_val,
            is_scale_unsigned,
        )
        if isinstance(scaling_init, Tensor):
            # A copy: the block must not alias (and later write into) the caller's tensor.
            init = scaling_init.detach().to(device=device, dtype=dtype, copy=True)
            init = _restricted_init(owner, init, restrict_scaling_impl)
        else:
            # A float is restricted in Python's double precision before the cast, as Brevitas.
            try:
                restricted = restrict_scaling_impl.restrict_init_float(float(scaling_init))
            except ValueError as e:
                raise ValueError(
                    f"{owner}: scaling_init must be positive with "
                    f"{type(restrict_scaling_impl).__name__} (held as log2), got {scaling_init!r}"
                ) from e
            init = torch.tensor(restricted, dtype=dtype, device=device)
        self.value = StatelessBuffer(init.detach())

    @jit.script_method
    def forward(self, placeholder: Tensor, threshold: Optional[Tensor] = None) -> Tensor:
        if threshold is None:
            threshold = torch.ones(1).type_as(placeholder)
        threshold = self.restrict_clamp_threshold(self.restrict_threshold_pre(threshold))
        value = self.restrict_clamp_scaling(self.value())
        return self.restrict_clamp_scale_threshold(value / threshold)


class ParameterScaling(LearnedScaleChecks, KeyPolicy, jit.ScriptModule):
    """A learned scale (state_dict key ``value``, in the restrict domain), initialised to
    scaling_init, broadcast to scaling_shape when scaling_init is a scalar."""

    RENAMED_KEYS = LEGACY_VALUE_KEYS
    # Retraining from a float checkpoint (IGNORE_MISSING_KEYS) keeps scaling_init.
    INIT_KEPT_KEYS = ("value",)

    def __init__(
        self,
        scaling_init: Union[float, Tensor],
        is_scale_unsigned: bool = True,
        scaling_shape: Optional[Tuple[int, ...]] = None,
        restrict_scaling_impl: Module = FloatRestrictValue(),
        restrict_threshold_impl: Optional[Module] = None,
        restrict_scale_threshold_impl: Optional[Module] = None,
        scaling_min_val: Optional[float] = None,
        dtype: Optional[torch.dtype] = None,
        device: Optional[torch.device] = None,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        restrict_threshold_impl = checked_threshold_impl(
            owner, restrict_scaling_impl, restrict_threshold_impl
        )
        # Restricted before the broadcast: log2 of a scalar, then copies.
        self.value = Parameter(
            initial_value_tensor(
                owner,
                "scaling_init",
                scaling_init,
                "scaling_shape",
                scaling_shape,
                dtype,
                device,
                to_domain=lambda init: _restricted_init(owner, init, restrict_scaling_impl),
            )
        )
        hold_restrict_clamps(
            self,
            restrict_scaling_impl,
            restrict_threshold_impl,
            restrict_scale_threshold_impl,
            scaling_min_val,
            is_scale_unsigned,
        )

    @jit.script_method
    def forward(self, placeholder: Tensor, threshold: Optional[Tensor] = None) -> Tensor:
        if threshold is None:
            threshold = torch.ones(1).type_as(placeholder)
        threshold = self.restrict_clamp_threshold(self.restrict_threshold_pre(threshold))
        # value is already in the restrict domain, so the clamp comes after restricting.
        value = self.restrict_clamp_scaling(self.value)
        return self.restrict_clamp_scale_threshold(value / threshold)

    def _scale_restrict_impl(self) -> Module:
        return self.restrict_clamp_scaling.restrict_value_impl


class ParameterFromStatsFromParameterScaling(
    LearnedScaleChecks, LazyInitValueStateDict, jit.ScriptModule
):
    """A learned scale initialised, on the first call, from statistics of the tracked
    parameters (then clamped, moved to the restrict domain and affine-rescaled); afterwards it
    is learned like ParameterScaling. ``value`` enters the state_dict once initialised, and
    loading it marks the block initialised."""

    def __init__(
        self,
        scaling_stats_impl: Module,
        scaling_stats_input_view_shape_impl: Module,
        scaling_stats_input_concat_dim: int,
        tracked_parameter_list: List[torch.nn.Parameter],
        scaling_shape: Tuple[int, ...],
        is_scale_unsigned: bool = True,
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
        checked_restrict_impl(owner, "restrict_scaling_impl", restrict_scaling_impl)
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
        if restrict_threshold_impl is None:
            restrict_threshold_impl = restrict_scaling_impl
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
        self.restrict_threshold_pre = restrict_threshold_impl.restrict_init_module()
        self.restrict_inplace_scaling_pre = restrict_scaling_impl.restrict_init_inplace_module()
        self.clamp_scaling = _ClampValue(scaling_min_val)
        # value starts at 1: initialisation multiplies the statistic in.
        hold_lazy_init_state(self, scaling_shape, 1.0, dtype, device)

    @jit.script_method
    def forward(self, x: Tensor, threshold: Optional[Tensor] = None) -> Tensor:
        if threshold is None:
            threshold = torch.ones(1).type_as(x)
        if self.init_done:
            threshold = self.stats_scaling_impl.restrict_clamp_threshold(
                self.restrict_threshold_pre(threshold)
            )
            value = self.stats_scaling_impl.restrict_clamp_scaling(self.value)
            return self.stats_scaling_impl.restrict_clamp_scale_threshold(value / threshold)
        stats = self.parameter_list_stats(x)
        # value is not used before initialisation: link it so DDP sees it used.
        stats = zero_grad_link(stats, self.value)
        if self.local_loss_mode:
            return self.stats_scaling_impl(stats, threshold)
        # Clamp first, so that a zero statistic does not become log2(0).
        stats = self.clamp_scaling(stats)
        stats = self.restrict_inplace_scaling_pre(stats)
        stats = self.stats_scaling_impl.affine_rescaling(stats)
        threshold = self.stats_scaling_impl.restrict_clamp_threshold(
            self.restrict_threshold_pre(threshold)
        )
        inplace_tensor_mul(self.value.detach(), stats)
        value = self.stats_scaling_impl.restrict_clamp_scaling(self.value)
        value = self.stats_scaling_impl.restrict_clamp_scale_threshold(value / threshold)
        self.init_done = True
        return value

    def _scale_restrict_impl(self) -> Module:
        return self.stats_scaling_impl.restrict_clamp_scaling.restrict_value_impl


class ParameterFromRuntimeStatsScaling(
    SkipsIdentities, LearnedScaleChecks, WarmupValueStateDict, jit.ScriptModule
):
    """A learned scale initialised from statistics of the runtime input.

    For the first collect_stats_steps training calls the scale is the batch statistic (clamped,
    divided by the threshold) and a running average of it is kept in ``buffer`` (returned in
    eval meanwhile); the next training call moves that average into the learned ``value``, which
    is used from then on as in ParameterScaling. ``value`` is saved once a batch has been seen
    (the running average until initialisation); loading it ends the statistics collection."""

    RENAMED_KEYS = LEGACY_VALUE_KEYS
    # Linear-domain threshold: restrict_threshold_pre is an identity, not called per step.
    IDENTITY_SLOTS = (("restrict_threshold_pre", "threshold_pre_is_identity"),)
    IDENTITY_TYPES = (Identity,)
    __constants__ = ["threshold_pre_is_identity"]

    def __init__(
        self,
        collect_stats_steps: int,
        scaling_stats_impl: Module,
        is_scale_unsigned: bool = True,
        scaling_stats_input_view_shape_impl: Module = OverBatchOverTensorView(),
        scaling_shape: Tuple[int, ...] = SCALAR_SHAPE,
        restrict_scaling_impl: Module = FloatRestrictValue(),
        restrict_threshold_impl: Optional[Module] = None,
        restrict_scale_threshold_impl: Optional[Module] = None,
        scaling_stats_momentum: Optional[float] = DEFAULT_MOMENTUM,
        scaling_min_val: Optional[float] = None,
        dtype: Optional[torch.dtype] = None,
        device: Optional[torch.device] = None,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        collect_stats_steps = checked_collect_stats_steps(owner, collect_stats_steps)
        restrict_threshold_impl = checked_threshold_impl(
            owner, restrict_scaling_impl, restrict_threshold_impl
        )
        scaling_shape = checked_stats_args(
            owner, "scaling", scaling_stats_impl, scaling_stats_input_view_shape_impl, scaling_shape
        )
        scaling_stats_momentum = checked_momentum(
            owner, "scaling_stats_momentum", scaling_stats_momentum
        )
        # buffer and value start at 1: the first batch and the initialisation multiply in.
        hold_warmup_state(
            self, collect_stats_steps, scaling_stats_momentum, scaling_shape, 1.0, dtype, device
        )
        self.stats_input_view_shape_impl = scaling_stats_input_view_shape_impl
        self.stats = _Stats(scaling_stats_impl, scaling_shape)
        self.abs_value = _AbsValue(is_unsigned=is_scale_unsigned)
        self.restrict_scaling = _RestrictValue(restrict_scaling_impl)
        self.restrict_threshold = _RestrictValue(restrict_threshold_impl)
        self.restrict_scale_threshold = _RestrictValue(restrict_scale_threshold_impl)
        self.clamp_scaling = _ClampValue(scaling_min_val)
        self.restrict_inplace_preprocess = restrict_scaling_impl.restrict_init_inplace_module()
        self.restrict_scaling_pre = restrict_scaling_impl.restrict_init_module()
        self.restrict_threshold_pre = restrict_threshold_impl.restrict_init_module()
        self.replan()

    @jit.script_method
    def init_scale(self) -> None:
        """Move the running statistic into value (once; later calls do nothing)."""
        if self.counter <= self.collect_stats_steps:
            self.restrict_inplace_preprocess(self.buffer)
            # Brevitas multiplies value (1 until now) by the statistic. A copy gives the same
            # bits, and the statistic still where an optimizer moved value during the warm-up:
            # its zero gradient (our DDP link; Brevitas's value gets none) is no zero step
            # under weight decay.
            self.value.detach().copy_(self.buffer)
            self.counter = self.collect_stats_steps + 1

    @jit.script_method
    def _learned_scale(self, threshold: Tensor) -> Tensor:
        # Every training step of every activation quantizer comes here: identity blocks (the
        # linear domain's, read from their own flags) are skipped rather than called.
        if not self.threshold_pre_is_identity:
            threshold = self.restrict_threshold_pre(threshold)
        if not self.restrict_threshold.restrict_is_identity:
            threshold = self.restrict_threshold(threshold)
        value = self.value
        if not self.restrict_scaling.restrict_is_identity:
            value = self.restrict_scaling(value)
        if not self.clamp_scaling.clamp_is_identity:
            value = self.clamp_scaling.clamp_min_ste(value)
        scale = value / threshold
        if not self.restrict_scale_threshold.restrict_is_identity:
            scale = self.restrict_scale_threshold(scale)
        return scale

    @jit.script_method
    def record_stats(self, clamped_stats: Tensor) -> None:
        """One statistics step: clamped_stats (no gradient) into the running average."""
        new_counter = self.counter + 1
        if self.counter == 0:
            inplace_tensor_mul(self.buffer, clamped_stats)
        else:
            inplace_momentum_update(
                self.buffer, clamped_stats, self.momentum, self.counter, new_counter
            )
        self.counter = new_counter

    @jit.script_method
    def training_forward(self, stats_input: Tensor, threshold: Tensor) -> Tensor:
        if self.counter < self.collect_stats_steps:
            stats = self.stats(self.stats_input_view_shape_impl(stats_input))
            if not self.local_loss_mode:
                # Averaged over data-parallel ranks (a no-op in one process), so that every
                # replica initialises the same value; local-loss calibration stays per rank.
                stats = all_reduce_stats(stats)
            # value is not used during the warm-up: link it so DDP sees it used.
            stats = zero_grad_link(stats, self.value)
            clamped_stats = self.clamp_scaling(stats)
            if self.local_loss_mode:
                return clamped_stats / threshold
            self.record_stats(clamped_stats.detach())
            return clamped_stats / threshold
        if self.counter == self.collect_stats_steps:
            self.init_scale()
        return self._learned_scale(threshold)

    @jit.script_method
    def forward(self, stats_input: Tensor, threshold: Optional[Tensor] = None) -> Tensor:
        if threshold is None:
            threshold = torch.ones(1).type_as(stats_input)
        if self.training:
            return self.training_forward(stats_input, threshold)
        if self.counter <= self.collect_stats_steps:
            # The running statistic, already clamped in training, taken to the restrict domain.
            out = self.restrict_scaling_pre(self.buffer)
        else:
            out = self.value
        threshold = self.restrict_threshold(self.restrict_threshold_pre(threshold))
        out = self.restrict_scaling(out)
        out = self.abs_value(out)
        out = self.restrict_scale_threshold(out / threshold)
        return self.clamp_scaling(out)

    def _warmup_value_of(self, average: Tensor) -> Tensor:
        # value lives in the restrict domain; the running statistic does not.
        return self.restrict_scaling_pre(average)

    def _scale_restrict_impl(self) -> Module:
        return self.restrict_scaling.restrict_value_impl


class TruncMsbScaling(jit.ScriptModule):
    """Truncation scale that keeps the most significant bits: 2 ** (input_bit_width -
    output_bit_width). scaling_input and signed are unused (common trunc_scaling_impl calling
    convention)."""

    def __init__(self) -> None:
        super().__init__()

    @jit.script_method
    def forward(
        self,
        scaling_input: Tensor,
        input_bit_width: Tensor,
        output_bit_width: Tensor,
        signed: Union[bool, Tensor],
    ) -> Tensor:
        return 2 ** (input_bit_width - output_bit_width)


class TruncScalingWrapper(jit.ScriptModule):
    """Truncation scale from a regular scaling block: scaling_impl(scaling_input, threshold) with
    the integer range of the output bit width as threshold, clamped between 1 and the MSB scale
    2 ** (input_bit_width - output_bit_width)."""

    def __init__(
        self,
        trunc_int_scaling_impl: Module,
        scaling_impl: Module,
        tensor_clamp_impl: Module = TensorClamp(),
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        self.trunc_int_scaling_impl = checked_module(
            owner, "trunc_int_scaling_impl", trunc_int_scaling_impl
        )
        self.scaling_impl = checked_module(owner, "scaling_impl", scaling_impl)
        self.tensor_clamp_impl = checked_module(owner, "tensor_clamp_impl", tensor_clamp_impl)

    @jit.script_method
    def forward(
        self,
        scaling_input: Tensor,
        input_bit_width: Tensor,
        output_bit_width: Tensor,
        signed: Union[bool, Tensor],
    ) -> Tensor:
        threshold = self.trunc_int_scaling_impl(output_bit_width, signed)
        scale = self.scaling_impl(scaling_input, threshold)
        msb_scale = 2 ** (input_bit_width - output_bit_width)
        unit_scale = torch.ones_like(msb_scale)
        # The bounds are ordered whichever side of 1 the MSB scale is on.
        max_scale = torch.where(msb_scale > unit_scale, msb_scale, unit_scale)
        min_scale = torch.where(msb_scale < unit_scale, msb_scale, unit_scale)
        return self.tensor_clamp_impl(scale, min_scale, max_scale)
