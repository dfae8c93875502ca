"""Wrappers that run a statistics op and shape its result: on a single input (_Stats), on the
concatenation of tracked parameters (_ParameterListStats), or as a running average over
training batches that is frozen in eval mode (_RuntimeStats)."""

from typing import List, Optional, Tuple

import torch
from torch import Tensor, nn

from brevitas_cpp import jit
from brevitas_cpp.core._checks import checked_module, checked_momentum
from brevitas_cpp.core._state_dict import KeyPolicy
from brevitas_cpp.core.utils import inplace_momentum_update, inplace_tensor_mul
from brevitas_cpp.distributed import all_reduce_stats

from .view_wrapper import _ViewCatParameterWrapper, _ViewParameter, _ViewParameterWrapper

DEFAULT_MOMENTUM = 0.1
SCALAR_SHAPE = ()

__all__ = ["DEFAULT_MOMENTUM", "SCALAR_SHAPE", "_ParameterListStats", "_RuntimeStats", "_Stats"]


def _checked_shape(owner: str, shape) -> Tuple[int, ...]:
    """A shape as a tuple of ints (TorchScript constants cannot be lists)."""
    if isinstance(shape, torch.Size):
        return tuple(shape)
    if isinstance(shape, (tuple, list)) and all(
        isinstance(d, int) and not isinstance(d, bool) and d >= -1 for d in shape
    ):
        return tuple(shape)
    raise TypeError(
        f"{owner}: stats_output_shape must be a tuple of ints (() for a scalar), got {shape!r}"
    )


class _Stats(jit.ScriptModule):
    """stats_impl(x) reshaped to stats_output_shape."""

    __constants__ = ["stats_output_shape"]

    def __init__(self, stats_impl: nn.Module, stats_output_shape: Tuple[int, ...]) -> None:
        super().__init__()
        self.stats_output_shape = _checked_shape(type(self).__name__, stats_output_shape)
        self.stats_impl = checked_module(type(self).__name__, "stats_impl", stats_impl)

    @jit.script_method
    def forward(self, input: Tensor) -> Tensor:  # noqa: A002  (Brevitas's argument name)
        stats = self.stats_impl(input)
        return stats.view(self.stats_output_shape)


class _RuntimeStats(KeyPolicy, jit.ScriptModule):
    """Statistics of the inputs seen in training, accumulated into the running_stats buffer:
    the first batch sets it, later ones update it as an exponential moving average with
    stats_buffer_momentum (or a cumulative average when the momentum is None). In training the
    current batch's statistics are returned (averaged over the ranks under torch.distributed,
    see brevitas_cpp.distributed), in eval the buffer."""

    __constants__ = ["momentum"]
    # A scripted module lists its training flag among the expected keys; it is never saved.
    NEVER_SAVED_KEYS = ("training",)
    INIT_KEPT_KEYS = ("running_stats",)
    FINITE_KEYS = ("running_stats",)
    # Worked out from the first batches when a float model's checkpoint lacks it.
    DERIVED_KEYS = ("running_stats",)
    # How many batches the running statistic has seen: it sets the next batch's weight.
    SAVED_COUNTERS = ("counter",)

    def _derived_were_saved(self, saved) -> bool:
        return int(saved.get("counter", 1)) > 0

    def __init__(
        self,
        stats_impl: nn.Module,
        stats_output_shape: Tuple[int, ...],
        stats_input_view_shape_impl: nn.Module,
        stats_buffer_momentum: Optional[float],
        dtype: Optional[torch.dtype],
        device: Optional[torch.device],
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        stats_output_shape = _checked_shape(owner, stats_output_shape)
        stats_buffer_momentum = checked_momentum(
            owner, "stats_buffer_momentum", stats_buffer_momentum
        )
        self.counter = jit.Attribute(0, int)
        self.stats_input_view_shape_impl = checked_module(
            owner, "stats_input_view_shape_impl", stats_input_view_shape_impl
        )
        self.stats = _Stats(stats_impl, stats_output_shape)
        self.momentum = stats_buffer_momentum
        # Starts at 1 so that the first batch can be written with an in-place multiply.
        self.register_buffer(
            "running_stats", torch.full(stats_output_shape, 1.0, dtype=dtype, device=device)
        )

    @jit.script_method
    def forward(self, stats_input: Tensor) -> Tensor:
        if self.training:
            stats_input = self.stats_input_view_shape_impl(stats_input)
            # Averaged over data-parallel ranks (a no-op in one process), so that every
            # replica keeps the same running statistic.
            stats = all_reduce_stats(self.stats(stats_input))
            new_counter = self.counter + 1
            if self.counter == 0:
                inplace_tensor_mul(self.running_stats, stats.detach())
            else:
                inplace_momentum_update(
                    self.running_stats, stats.detach(), self.momentum, self.counter, new_counter
                )
            self.counter = new_counter
        else:
            stats = self.running_stats
        return stats


class _ParameterListStats(jit.ScriptModule):
    """Statistics over one or more tracked parameters.

    With a single parameter (and force_parameter False) the parameter is not held: the caller
    passes it as x. Otherwise the parameters are held and concatenated along
    stats_input_concat_dim after stats_input_view_shape_impl, each later parameter in front of
    the earlier ones: [p_n, ..., p_1, p_0]."""

    __constants__ = ["stats_input_concat_dim"]

    def __init__(
        self,
        stats_impl: nn.Module,
        stats_output_shape: Tuple[int, ...],
        stats_input_view_shape_impl: nn.Module,
        stats_input_concat_dim: Optional[int],
        tracked_parameter_list: List[torch.nn.Parameter],
        force_parameter: bool = False,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        if isinstance(stats_input_concat_dim, bool) or not isinstance(
            stats_input_concat_dim, (int, type(None))
        ):
            raise TypeError(
                f"{owner}: stats_input_concat_dim must be an int (or None for a single "
                f"parameter), got {stats_input_concat_dim!r}"
            )
        if isinstance(tracked_parameter_list, torch.Tensor) or len(tracked_parameter_list) == 0:
            raise ValueError(
                f"{owner}: tracked_parameter_list must be a non-empty list of parameters, "
                f"got {tracked_parameter_list!r}"
            )
        # None is Brevitas's setting where nothing is concatenated (one parameter).
        if stats_input_concat_dim is None and len(tracked_parameter_list) > 1:
            raise ValueError(
                f"{owner}: stats_input_concat_dim must be an int (the dimension to concatenate "
                f"along) with {len(tracked_parameter_list)} tracked parameters, got None"
            )
        self.stats_input_concat_dim = stats_input_concat_dim
        tracked_parameter_list = list(tracked_parameter_list)
        if len(tracked_parameter_list) > 1 or force_parameter:
            self.first_tracked_param = _ViewParameterWrapper(
                tracked_parameter_list[0], stats_input_view_shape_impl
            )
        else:
            self.first_tracked_param = _ViewParameter(stats_input_view_shape_impl)
        if len(tracked_parameter_list) > 1:
            self.extra_tracked_params_list = nn.ModuleList(
                [
                    _ViewCatParameterWrapper(
                        param, stats_input_view_shape_impl, stats_input_concat_dim
                    )
                    for param in tracked_parameter_list[1:]
                ]
            )
        else:
            self.extra_tracked_params_list = None
        self.stats = _Stats(stats_impl, stats_output_shape)

    @jit.script_method
    def forward(self, x: Optional[Tensor] = None) -> Tensor:
        if self.extra_tracked_params_list is not None:
            stats_input = self.first_tracked_param(None)
            for extra_tracked_param in self.extra_tracked_params_list:
                stats_input = extra_tracked_param(stats_input)
        else:
            stats_input = self.first_tracked_param(x)
        return self.stats(stats_input)
