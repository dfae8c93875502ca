"""Scales that are held rather than recomputed: a constant, a learned parameter, a learned
parameter initialised from statistics (of the tracked weights on first use, or of the first
``collect_stats_steps`` training batches), and the scales used to truncate accumulators.

Learned values live in the restrict domain (e.g. log2 for power-of-two scales) and go through
the restrict-value block, the lower bound ``scaling_min_val`` and abs on every call."""

from typing import List, Optional, Tuple, Union

import torch
from torch import Tensor
from torch.nn import Module, Parameter

from brevitas_cpp import config, jit
from brevitas_cpp.core.function_wrapper import OverBatchOverTensorView, TensorClamp
from brevitas_cpp.core.restrict_val import (
    FloatRestrictValue,
    _AbsValue,
    _ClampValue,
    _RestrictClampValue,
    _RestrictValue,
)
from brevitas_cpp.core.scaling.runtime import (
    _StatsScaling,
    check_affine_inits,
    checked_collect_stats_steps,
    checked_finite,
    checked_module,
    checked_momentum,
    checked_parameter_list,
    checked_restrict_impl,
    checked_shape,
    zero_grad_link,
)
from brevitas_cpp.core.stats import DEFAULT_MOMENTUM, SCALAR_SHAPE, _ParameterListStats, _Stats
from brevitas_cpp.core.utils import StatelessBuffer, inplace_momentum_update, inplace_tensor_mul

__all__ = [
    "ConstScaling",
    "ParameterFromRuntimeStatsScaling",
    "ParameterFromStatsFromParameterScaling",
    "ParameterScaling",
    "TruncMsbScaling",
    "TruncScalingWrapper",
]

# Older checkpoints name the learned scale 'learned_value'.
_LEGACY_VALUE_NAME = "learned_value"


def _rename_legacy_value(state_dict, prefix: str) -> None:
    legacy_key = prefix + _LEGACY_VALUE_NAME
    if legacy_key in state_dict:
        state_dict[prefix + "value"] = state_dict.pop(legacy_key)


def _restricted_init(owner: str, scaling_init: Tensor, restrict_scaling_impl: Module) -> Tensor:
    """scaling_init moved to the restrict domain; it must stay finite there (log2 of a scale
    <= 0 is -inf or NaN)."""
    restricted = restrict_scaling_impl.restrict_init_tensor(scaling_init)
    if restricted.is_floating_point() and not bool(torch.isfinite(restricted).all()):
        raise ValueError(
            f"{owner}: scaling_init must be positive with {type(restrict_scaling_impl).__name__} "
            f"(it is learned as log2), got {scaling_init}")
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
            device: Optional[torch.device] = None) -> None:
        super().__init__()
        owner = type(self).__name__
        checked_restrict_impl(owner, "restrict_scaling_impl", restrict_scaling_impl)
        if restrict_threshold_impl is None:
            restrict_threshold_impl = restrict_scaling_impl
        checked_restrict_impl(owner, "restrict_threshold_impl", restrict_threshold_impl)
        checked_finite(owner, "scaling_init", scaling_init)
        self.restrict_clamp_scaling = _RestrictClampValue(
            scaling_min_val, restrict_scaling_impl, is_scale_unsigned)
        self.restrict_clamp_threshold = _RestrictClampValue(
            restrict_value_impl=restrict_threshold_impl)
        self.restrict_clamp_scale_threshold = _RestrictClampValue(
            restrict_value_impl=restrict_scale_threshold_impl, is_unsigned=is_scale_unsigned)
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
        self.restrict_threshold_pre = restrict_threshold_impl.restrict_init_module()

    @jit.script_method
    def forward(self, placeholder: Tensor, threshold: Optional[Tensor] = None) -> Tensor:
        if threshold is None:
            threshold = torch.ones(1).type_as(placeholder)
        threshold = self.restrict_clamp_threshold(self.restrict_threshold_pre(threshold))
        value = self.restrict_clamp_scaling(self.value())
        return self.restrict_clamp_scale_threshold(value / threshold)


class ParameterScaling(jit.ScriptModule):
    """A learned scale (state_dict key ``value``, in the restrict domain), initialised to
    scaling_init, broadcast to scaling_shape when scaling_init is a scalar."""

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
            device: Optional[torch.device] = None) -> None:
        super().__init__()
        owner = type(self).__name__
        checked_restrict_impl(owner, "restrict_scaling_impl", restrict_scaling_impl)
        if restrict_threshold_impl is None:
            restrict_threshold_impl = restrict_scaling_impl
        checked_restrict_impl(owner, "restrict_threshold_impl", restrict_threshold_impl)
        checked_finite(owner, "scaling_init", scaling_init)
        if scaling_shape is not None:
            scaling_shape = checked_shape(owner, "scaling_shape", scaling_shape)
        if isinstance(scaling_init, Tensor):
            if scaling_shape is not None and scaling_init.shape != SCALAR_SHAPE and \
                    tuple(scaling_init.shape) != scaling_shape:
                # RuntimeError as Brevitas, for callers that catch it.
                raise RuntimeError(
                    f"{owner}: scaling_init has shape {tuple(scaling_init.shape)}, which is neither "
                    f"a scalar () nor scaling_shape {scaling_shape}")
            # A copy: learning must not write into the caller's tensor.
            init = scaling_init.detach().to(device=device, dtype=dtype, copy=True)
        else:
            init = torch.tensor(scaling_init, dtype=dtype, device=device)
        init = _restricted_init(owner, init, restrict_scaling_impl)
        if init.shape == SCALAR_SHAPE and scaling_shape is not None:
            init = torch.full(scaling_shape, init, dtype=dtype, device=device)
        self.value = Parameter(init)
        self.restrict_clamp_scaling = _RestrictClampValue(
            scaling_min_val, restrict_scaling_impl, is_scale_unsigned)
        self.restrict_clamp_threshold = _RestrictClampValue(
            restrict_value_impl=restrict_threshold_impl)
        self.restrict_threshold_pre = restrict_threshold_impl.restrict_init_module()
        self.restrict_clamp_scale_threshold = _RestrictClampValue(
            restrict_value_impl=restrict_scale_threshold_impl, is_unsigned=is_scale_unsigned)

    @jit.script_method
    def forward(self, placeholder: Tensor, threshold: Optional[Tensor] = None) -> Tensor:
        if threshold is None:
            threshold = torch.ones(1).type_as(placeholder)
        threshold = self.restrict_clamp_threshold(self.restrict_threshold_pre(threshold))
        # value is already in the restrict domain, so the clamp comes after restricting.
        value = self.restrict_clamp_scaling(self.value)
        return self.restrict_clamp_scale_threshold(value / threshold)

    def _load_from_state_dict(
            self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
            error_msgs):
        _rename_legacy_value(state_dict, prefix)
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs)
        value_key = prefix + "value"
        # Retraining from a float checkpoint: keep scaling_init.
        if config.IGNORE_MISSING_KEYS and value_key in missing_keys:
            missing_keys.remove(value_key)


class ParameterFromStatsFromParameterScaling(jit.ScriptModule):
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
            device: Optional[torch.device] = None) -> None:
        super().__init__()
        owner = type(self).__name__
        checked_module(owner, "scaling_stats_impl", scaling_stats_impl)
        checked_module(owner, "scaling_stats_input_view_shape_impl",
                       scaling_stats_input_view_shape_impl)
        checked_restrict_impl(owner, "restrict_scaling_impl", restrict_scaling_impl)
        scaling_shape = checked_shape(owner, "scaling_shape", scaling_shape)
        tracked_parameter_list = checked_parameter_list(owner, tracked_parameter_list)
        check_affine_inits(
            owner, "scaling", scaling_affine_rescaling_init, scaling_affine_shifting_init)
        self.parameter_list_stats = _ParameterListStats(
            scaling_stats_impl, scaling_shape, scaling_stats_input_view_shape_impl,
            scaling_stats_input_concat_dim, tracked_parameter_list, force_parameter)
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
            is_scale_unsigned=is_scale_unsigned)
        self.restrict_threshold_pre = restrict_threshold_impl.restrict_init_module()
        self.restrict_inplace_scaling_pre = restrict_scaling_impl.restrict_init_inplace_module()
        self.clamp_scaling = _ClampValue(scaling_min_val)
        self.init_done: bool = jit.Attribute(False, bool)
        # Set by calibration code (e.g. MSE search) to get the statistic without initialising.
        self.local_loss_mode: bool = jit.Attribute(False, bool)
        # Starts at 1 so that initialisation is an in-place multiply by the statistic.
        self.value = Parameter(torch.full(scaling_shape, 1.0, dtype=dtype, device=device))

    @jit.script_method
    def forward(self, x: Tensor, threshold: Optional[Tensor] = None) -> Tensor:
        if threshold is None:
            threshold = torch.ones(1).type_as(x)
        if self.init_done:
            threshold = self.stats_scaling_impl.restrict_clamp_threshold(
                self.restrict_threshold_pre(threshold))
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
            self.restrict_threshold_pre(threshold))
        inplace_tensor_mul(self.value.detach(), stats)
        value = self.stats_scaling_impl.restrict_clamp_scaling(self.value)
        value = self.stats_scaling_impl.restrict_clamp_scale_threshold(value / threshold)
        self.init_done = True
        return value

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        # Before initialisation value is only the placeholder 1.
        if not self.init_done and not config._FULL_STATE_DICT:
            destination.pop(prefix + "value", None)

    def _load_from_state_dict(
            self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
            error_msgs):
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs)
        value_key = prefix + "value"
        # A loaded value is final: do not overwrite it with fresh statistics.
        if value_key in state_dict:
            self.init_done = True
        if config.IGNORE_MISSING_KEYS and value_key in missing_keys:
            missing_keys.remove(value_key)


class ParameterFromRuntimeStatsScaling(jit.ScriptModule):
    """A learned scale initialised from statistics of the runtime input.

    For the first collect_stats_steps training calls the scale is the batch statistic (clamped,
    divided by the threshold) and a running average of it is kept in ``buffer`` (returned in
    eval meanwhile); the next training call moves that average into the learned ``value``, which
    is used from then on as in ParameterScaling. ``value`` is saved once a batch has been seen
    (the running average until initialisation); loading it ends the statistics collection."""

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
            device: Optional[torch.device] = None) -> None:
        super().__init__()
        owner = type(self).__name__
        collect_stats_steps = checked_collect_stats_steps(owner, collect_stats_steps)
        checked_module(owner, "scaling_stats_impl", scaling_stats_impl)
        checked_module(owner, "scaling_stats_input_view_shape_impl",
                       scaling_stats_input_view_shape_impl)
        checked_restrict_impl(owner, "restrict_scaling_impl", restrict_scaling_impl)
        if restrict_threshold_impl is None:
            restrict_threshold_impl = restrict_scaling_impl
        checked_restrict_impl(owner, "restrict_threshold_impl", restrict_threshold_impl)
        scaling_shape = checked_shape(owner, "scaling_shape", scaling_shape)
        scaling_stats_momentum = checked_momentum(
            owner, "scaling_stats_momentum", scaling_stats_momentum)
        self.collect_stats_steps: int = jit.Attribute(collect_stats_steps, int)
        self.counter: int = jit.Attribute(0, int)
        self.stats_input_view_shape_impl = scaling_stats_input_view_shape_impl
        self.stats = _Stats(scaling_stats_impl, scaling_shape)
        self.momentum: Optional[float] = jit.Attribute(scaling_stats_momentum, Optional[float])
        # Both start at 1 so that the first batch / the initialisation are in-place multiplies.
        self.register_buffer("buffer", torch.full(scaling_shape, 1.0, dtype=dtype, device=device))
        self.value = Parameter(torch.full(scaling_shape, 1.0, dtype=dtype, device=device))
        self.abs_value = _AbsValue(is_unsigned=is_scale_unsigned)
        self.restrict_scaling = _RestrictValue(restrict_scaling_impl)
        self.restrict_threshold = _RestrictValue(restrict_threshold_impl)
        self.restrict_scale_threshold = _RestrictValue(restrict_scale_threshold_impl)
        self.clamp_scaling = _ClampValue(scaling_min_val)
        # Set by calibration code: batch statistics without touching the running average.
        self.local_loss_mode: bool = jit.Attribute(False, bool)
        self.restrict_inplace_preprocess = restrict_scaling_impl.restrict_init_inplace_module()
        self.restrict_scaling_pre = restrict_scaling_impl.restrict_init_module()
        self.restrict_threshold_pre = restrict_threshold_impl.restrict_init_module()

    @jit.script_method
    def init_scale(self) -> None:
        """Move the running statistic into value (once; later calls do nothing)."""
        if self.counter <= self.collect_stats_steps:
            self.restrict_inplace_preprocess(self.buffer)
            inplace_tensor_mul(self.value.detach(), self.buffer)
            self.counter = self.collect_stats_steps + 1

    @jit.script_method
    def _learned_scale(self, threshold: Tensor) -> Tensor:
        threshold = self.restrict_threshold(self.restrict_threshold_pre(threshold))
        value = self.clamp_scaling(self.restrict_scaling(self.value))
        return self.restrict_scale_threshold(value / threshold)

    @jit.script_method
    def training_forward(self, stats_input: Tensor, threshold: Tensor) -> Tensor:
        if self.counter < self.collect_stats_steps:
            stats = self.stats(self.stats_input_view_shape_impl(stats_input))
            # value is not used during the warm-up: link it so DDP sees it used.
            stats = zero_grad_link(stats, self.value)
            clamped_stats = self.clamp_scaling(stats)
            if self.local_loss_mode:
                return clamped_stats / threshold
            new_counter = self.counter + 1
            if self.counter == 0:
                inplace_tensor_mul(self.buffer, clamped_stats.detach())
            else:
                inplace_momentum_update(
                    self.buffer, clamped_stats.detach(), self.momentum, self.counter, new_counter)
            self.counter = new_counter
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

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        value_key = prefix + "value"
        # The running statistic is saved as value (restrict domain), never as itself.
        destination.pop(prefix + "buffer", None)
        if self.counter == 0 and not config._FULL_STATE_DICT:
            destination.pop(value_key, None)
        elif self.counter <= self.collect_stats_steps:
            buffer = self.buffer if keep_vars else self.buffer.detach()
            destination[value_key] = self.restrict_scaling_pre(buffer)

    def _load_from_state_dict(
            self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
            error_msgs):
        _rename_legacy_value(state_dict, prefix)
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs)
        value_key = prefix + "value"
        for never_saved in (prefix + "buffer", prefix + "training"):
            if never_saved in missing_keys:
                missing_keys.remove(never_saved)
        # A loaded value is final: no more statistics collection.
        if value_key in state_dict:
            self.counter = self.collect_stats_steps + 1
        if config.IGNORE_MISSING_KEYS and value_key in missing_keys:
            missing_keys.remove(value_key)


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
            signed: Union[bool, Tensor]) -> Tensor:
        return 2 ** (input_bit_width - output_bit_width)


class TruncScalingWrapper(jit.ScriptModule):
    """Truncation scale from a regular scaling block: scaling_impl(scaling_input, threshold) with
    the integer range of the output bit width as threshold, clamped between 1 and the MSB scale
    2 ** (input_bit_width - output_bit_width)."""

    def __init__(
            self,
            trunc_int_scaling_impl: Module,
            scaling_impl: Module,
            tensor_clamp_impl: Module = TensorClamp()) -> None:
        super().__init__()
        owner = type(self).__name__
        self.trunc_int_scaling_impl = checked_module(
            owner, "trunc_int_scaling_impl", trunc_int_scaling_impl)
        self.scaling_impl = checked_module(owner, "scaling_impl", scaling_impl)
        self.tensor_clamp_impl = checked_module(owner, "tensor_clamp_impl", tensor_clamp_impl)

    @jit.script_method
    def forward(
            self,
            scaling_input: Tensor,
            input_bit_width: Tensor,
            output_bit_width: Tensor,
            signed: Union[bool, Tensor]) -> Tensor:
        threshold = self.trunc_int_scaling_impl(output_bit_width, signed)
        scale = self.scaling_impl(scaling_input, threshold)
        msb_scale = 2 ** (input_bit_width - output_bit_width)
        unit_scale = torch.ones_like(msb_scale)
        # The bounds are ordered whichever side of 1 the MSB scale is on.
        max_scale = torch.where(msb_scale > unit_scale, msb_scale, unit_scale)
        min_scale = torch.where(msb_scale < unit_scale, msb_scale, unit_scale)
        return self.tensor_clamp_impl(scale, min_scale, max_scale)
