"""Zero points of affine quantizers, returned in the integer domain: zero, from statistics of
the tracked parameters (each call, or once then learned), learned from an initial value, or
learned after ``collect_stats_steps`` training batches of runtime statistics.

A float zero point z becomes z / scale + min_int (rounded and clamped to the integer range when
quantize_zero_point), which is what IntQuant adds before rounding."""

from typing import List, Optional, Tuple, Union

import torch
from torch import Tensor
from torch.nn import Module, Parameter

from brevitas_cpp import jit
from brevitas_cpp.core._checks import (
    check_affine_inits,
    checked_bool,
    checked_collect_stats_steps,
    checked_module,
    checked_momentum,
    checked_shape,
)
from brevitas_cpp.core._learned import (
    checked_stats_args,
    hold_lazy_init_state,
    hold_warmup_state,
    initial_value_tensor,
    tracked_parameter_stats,
    zero_grad_link,
)
from brevitas_cpp.core._state_dict import (
    KeyPolicy,
    LazyInitValueStateDict,
    WarmupValueStateDict,
)
from brevitas_cpp.core.function_wrapper import Identity
from brevitas_cpp.core.scaling.runtime import _AffineRescaling
from brevitas_cpp.core.stats import DEFAULT_MOMENTUM
from brevitas_cpp.core.utils import StatelessBuffer, inplace_momentum_update, inplace_tensor_add
from brevitas_cpp.distributed import all_reduce_stats
from brevitas_cpp.function import abs_binary_sign_grad

__all__ = [
    "ParameterFromRuntimeZeroPoint",
    "ParameterFromStatsFromParameterZeroPoint",
    "ParameterZeroPoint",
    "PreZeroCenterZeroPoint",
    "RuntimeDynamicGroupZeroPoint",
    "StatsFromParameterZeroPoint",
    "ZeroZeroPoint",
    "_ScaleShiftQuantZeroPoint",
    "_ScaleShiftZeroPoint",
]


def _checked_int_quant(owner: str, int_quant) -> Module:
    if not isinstance(int_quant, Module) or not all(
        callable(getattr(int_quant, method, None)) for method in ("min_int", "to_int")
    ):
        raise TypeError(
            f"{owner}: int_quant must be an integer quantizer (a module with min_int() and "
            f"to_int(), e.g. IntQuant), got {int_quant!r}"
        )
    return int_quant


def _scale_shift(owner: str, int_quant, quantize_zero_point) -> "_ScaleShiftZeroPoint":
    # Checked here so that an error names the block the user built.
    _checked_int_quant(owner, int_quant)
    checked_bool(owner, "quantize_zero_point", quantize_zero_point)
    return _ScaleShiftZeroPoint(int_quant, quantize_zero_point)


def _affine_rescaling(
    owner: str, zero_point_shape, rescaling_init, shifting_init, dtype, device
) -> Module:
    check_affine_inits(owner, "zero_point", rescaling_init, shifting_init)
    if rescaling_init is None:
        return Identity()
    return _AffineRescaling(zero_point_shape, rescaling_init, shifting_init, dtype, device)


class ZeroZeroPoint(jit.ScriptModule):
    """Symmetric quantization: a constant 0 (never saved)."""

    def __init__(
        self, dtype: Optional[torch.dtype] = None, device: Optional[torch.device] = None
    ) -> None:
        super().__init__()
        self.zero_point = StatelessBuffer(torch.tensor(0.0, dtype=dtype, device=device))

    @jit.script_method
    def forward(self, x: Tensor, scale: Tensor, bit_width: Tensor) -> Tensor:
        # StatelessBuffer's forward, inlined: one module call fewer per quantizer call.
        return self.zero_point.value


class _ScaleShiftZeroPoint(jit.ScriptModule):
    """Float zero point -> integer domain: zero_point / scale + min_int, or, when
    quantize_zero_point, int_quant.to_int of the zero point with min_int as its offset
    (rounded and clamped to the range)."""

    __constants__ = ["quantize_zero_point"]

    def __init__(self, int_quant: Module, quantize_zero_point: bool) -> None:
        super().__init__()
        owner = type(self).__name__
        self.int_quant = _checked_int_quant(owner, int_quant)
        self.quantize_zero_point = checked_bool(owner, "quantize_zero_point", quantize_zero_point)

    @jit.script_method
    def forward(self, zero_point: Tensor, scale: Tensor, bit_width: Tensor) -> Tensor:
        min_int = self.int_quant.min_int(bit_width)
        if self.quantize_zero_point:
            return self.int_quant.to_int(scale, min_int, bit_width, zero_point)
        return zero_point / scale + min_int


class _ScaleShiftQuantZeroPoint(jit.ScriptModule):
    """Brevitas's quantized zero point (private there too, used by its scaling-quant tests): the
    float zero point quantized by a quantizer of its own (zp_int_quant, returning (value, scale,
    zero point, bit width, ...)), viewed back to zero_point_dequantized_shape when given (a
    groupwise quantizer's view), then value / scale + min_int."""

    __constants__ = ["reshape"]

    def __init__(
        self,
        zp_int_quant: Module,
        int_quant: Module,
        zero_point_shape: Tuple[int, ...],
        zero_point_dequantized_shape: Optional[Tuple[int, ...]],
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        self.zp_int_quant = checked_module(owner, "zp_int_quant", zp_int_quant)
        self.int_quant = _checked_int_quant(owner, int_quant)
        self.zero_point_shape = tuple(zero_point_shape)
        self.reshape = zero_point_dequantized_shape is not None
        self.dequantized_shape: List[int] = list(zero_point_dequantized_shape or ())

    @jit.script_method
    def forward(self, zero_point: Tensor, scale: Tensor, bit_width: Tensor) -> Tensor:
        min_int = self.int_quant.min_int(bit_width)
        quant_zero_point = self.zp_int_quant(zero_point)[0]
        if self.reshape:
            quant_zero_point = quant_zero_point.view(self.dequantized_shape)
        return quant_zero_point / scale + min_int


class StatsFromParameterZeroPoint(jit.ScriptModule):
    """Zero point recomputed on every call from statistics of the tracked parameters (e.g. the
    negative minimum), optionally affine-rescaled: -stats in the integer domain."""

    def __init__(
        self,
        int_quant: Module,
        quantize_zero_point: bool,
        zero_point_stats_input_view_shape_impl: Module,
        zero_point_stats_input_concat_dim: int,
        zero_point_stats_impl: Module,
        zero_point_shape: Tuple[int, ...],
        tracked_parameter_list: List[torch.nn.Parameter],
        scale_shift_zero_point_impl: Optional[Module] = None,
        zero_point_affine_rescaling_init: Optional[float] = None,
        zero_point_affine_shifting_init: Optional[float] = None,
        dtype: Optional[torch.dtype] = None,
        device: Optional[torch.device] = None,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        self.parameter_list_stats, zero_point_shape = tracked_parameter_stats(
            owner,
            "zero_point",
            zero_point_stats_impl,
            zero_point_stats_input_view_shape_impl,
            zero_point_stats_input_concat_dim,
            zero_point_shape,
            tracked_parameter_list,
        )
        self.affine_rescaling = _affine_rescaling(
            owner,
            zero_point_shape,
            zero_point_affine_rescaling_init,
            zero_point_affine_shifting_init,
            dtype,
            device,
        )
        # int_quant / quantize_zero_point are only needed for the default conversion.
        if scale_shift_zero_point_impl is None:
            self.scale_shift_zero_point = _scale_shift(owner, int_quant, quantize_zero_point)
        else:
            self.scale_shift_zero_point = checked_module(
                owner, "scale_shift_zero_point_impl", scale_shift_zero_point_impl
            )

    @jit.script_method
    def forward(self, x: Tensor, scale: Tensor, bit_width: Tensor) -> Tensor:
        stats = self.parameter_list_stats(x)
        stats = self.affine_rescaling(stats)
        return self.scale_shift_zero_point(-stats, scale, bit_width)


class ParameterZeroPoint(KeyPolicy, jit.ScriptModule):
    """A learned float zero point (state_dict key ``value``), used as |value| in the integer
    domain, initialised to zero_point_init (broadcast to zero_point_shape when a scalar)."""

    # Retraining from a float checkpoint (IGNORE_MISSING_KEYS) keeps zero_point_init.
    INIT_KEPT_KEYS = ("value",)
    FINITE_KEYS = ("value",)

    def __init__(
        self,
        zero_point_init: Union[float, torch.Tensor],
        int_quant: Module,
        quantize_zero_point: bool,
        zero_point_shape: Tuple[int, ...] = None,
        dtype: Optional[torch.dtype] = None,
        device: Optional[torch.device] = None,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        self.value = Parameter(
            initial_value_tensor(
                owner,
                "zero_point_init",
                zero_point_init,
                "zero_point_shape",
                zero_point_shape,
                dtype,
                device,
            )
        )
        self.scale_shift_zero_point = _scale_shift(owner, int_quant, quantize_zero_point)

    @jit.script_method
    def forward(self, x: Tensor, scale: Tensor, bit_width: Tensor) -> Tensor:
        out = abs_binary_sign_grad(self.value)
        return self.scale_shift_zero_point(out, scale, bit_width)


class ParameterFromRuntimeZeroPoint(WarmupValueStateDict, jit.ScriptModule):
    """A learned zero point initialised from statistics of the runtime input.

    For the first collect_stats_steps training calls the zero point is the batch statistic and
    a running average of it is kept in ``buffer`` (used in eval meanwhile); the next training
    call moves the average into the learned ``value``. ``value`` is saved once a batch has been
    seen (the running average until initialisation); loading it ends the collection."""

    __constants__ = ["zero_point_shape"]
    # As Brevitas: before the first batch the placeholder 0 is not saved, even with
    # config._FULL_STATE_DICT (the scale's placeholder is).
    FULL_STATE_DICT_KEEPS_PLACEHOLDER = False
    FINITE_KEYS = ("value",)

    def __init__(
        self,
        collect_stats_steps: int,
        int_quant: Module,
        quantize_zero_point: bool,
        zero_point_stats_impl: Module,
        zero_point_shape: Tuple[int, ...],
        zero_point_stats_input_view_shape_impl: Module,
        zero_point_stats_momentum: Optional[float] = DEFAULT_MOMENTUM,
        dtype: Optional[torch.dtype] = None,
        device: Optional[torch.device] = None,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        collect_stats_steps = checked_collect_stats_steps(owner, collect_stats_steps)
        zero_point_shape = checked_stats_args(
            owner,
            "zero_point",
            zero_point_stats_impl,
            zero_point_stats_input_view_shape_impl,
            zero_point_shape,
        )
        zero_point_stats_momentum = checked_momentum(
            owner, "zero_point_stats_momentum", zero_point_stats_momentum
        )
        # buffer and value start at 0: the first batch and the initialisation add in.
        hold_warmup_state(
            self,
            collect_stats_steps,
            zero_point_stats_momentum,
            zero_point_shape,
            0.0,
            dtype,
            device,
        )
        self.zero_point_shape = zero_point_shape
        self.stats_input_view_shape_impl = zero_point_stats_input_view_shape_impl
        self.zero_point_stats_impl = zero_point_stats_impl
        self.scale_shift_zero_point = _scale_shift(owner, int_quant, quantize_zero_point)

    @jit.script_method
    def init_zp(self) -> None:
        """Move the running statistic into value (once; later calls do nothing)."""
        if self.counter <= self.collect_stats_steps:
            inplace_tensor_add(self.value.detach(), self.buffer)
            self.counter = self.collect_stats_steps + 1

    @jit.script_method
    def training_forward(self, x: Tensor) -> Tensor:
        if self.counter < self.collect_stats_steps:
            stats = self.zero_point_stats_impl(self.stats_input_view_shape_impl(x))
            stats = stats.view(self.zero_point_shape)
            if self.local_loss_mode:
                return stats
            # Averaged over data-parallel ranks (a no-op in one process), so that every replica
            # initialises the same value.
            stats = all_reduce_stats(stats)
            new_counter = self.counter + 1
            if self.counter == 0:
                inplace_tensor_add(self.buffer, stats.detach())
            else:
                inplace_momentum_update(
                    self.buffer, stats.detach(), self.momentum, self.counter, new_counter
                )
            self.counter = new_counter
            # value is not used during the warm-up: link it so DDP sees it used.
            return zero_grad_link(stats, self.value)
        if self.counter == self.collect_stats_steps:
            self.init_zp()
        return self.value

    @jit.script_method
    def forward(self, x: Tensor, scale: Tensor, bit_width: Tensor) -> Tensor:
        if self.training:
            out = self.training_forward(x)
        elif self.counter <= self.collect_stats_steps:
            out = self.buffer
        else:
            out = self.value
        out = abs_binary_sign_grad(out)
        return self.scale_shift_zero_point(out, scale, bit_width)


class ParameterFromStatsFromParameterZeroPoint(LazyInitValueStateDict, jit.ScriptModule):
    """A learned zero point initialised, on the first call, from statistics of the tracked
    parameters (affine-rescaled), then learned like ParameterZeroPoint. ``value`` enters the
    state_dict once initialised, and loading it marks the block initialised."""

    FINITE_KEYS = ("value",)

    def __init__(
        self,
        int_quant: Module,
        quantize_zero_point: bool,
        zero_point_stats_input_view_shape_impl: Module,
        zero_point_stats_input_concat_dim: int,
        zero_point_stats_impl: Module,
        zero_point_shape: Tuple[int, ...],
        tracked_parameter_list: List[torch.nn.Parameter],
        zero_point_affine_rescaling_init: Optional[float] = None,
        zero_point_affine_shifting_init: Optional[float] = None,
        dtype: Optional[torch.dtype] = None,
        device: Optional[torch.device] = None,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        self.parameter_list_stats, zero_point_shape = tracked_parameter_stats(
            owner,
            "zero_point",
            zero_point_stats_impl,
            zero_point_stats_input_view_shape_impl,
            zero_point_stats_input_concat_dim,
            zero_point_shape,
            tracked_parameter_list,
        )
        self.affine_rescaling = _affine_rescaling(
            owner,
            zero_point_shape,
            zero_point_affine_rescaling_init,
            zero_point_affine_shifting_init,
            dtype,
            device,
        )
        self.scale_shift_zero_point = _scale_shift(owner, int_quant, quantize_zero_point)
        # value starts at 0: initialisation adds the statistic in.
        hold_lazy_init_state(self, zero_point_shape, 0.0, dtype, device)

    @jit.script_method
    def forward(self, x: Tensor, scale: Tensor, bit_width: Tensor) -> Tensor:
        if self.init_done:
            value = abs_binary_sign_grad(self.value)
            return self.scale_shift_zero_point(value, scale, bit_width)
        stats = self.parameter_list_stats(x)
        # value is not used before initialisation: link it so DDP sees it used.
        stats = zero_grad_link(stats, self.value)
        if self.local_loss_mode:
            return self.scale_shift_zero_point(-stats, scale, bit_width)
        stats = self.affine_rescaling(stats)
        inplace_tensor_add(self.value.detach(), stats)
        value = abs_binary_sign_grad(self.value)
        value = self.scale_shift_zero_point(value, scale, bit_width)
        self.init_done = True
        return value


class PreZeroCenterZeroPoint(jit.ScriptModule):
    """The pre-clipping zero point of A2Q+ (with DecoupledIntQuant): -mean(x) per channel,
    divided by the pre-clipping scale, so that adding it before rounding zero-centers each
    channel of x.

    get_zero_center(x) = -mean(view(x), stats_reduce_dim) reshaped to pre_zero_point_shape;
    forward(x, scale, bit_width) = get_zero_center(x) / scale."""

    __constants__ = ["stats_reduce_dim", "stats_output_shape"]

    def __init__(
        self,
        stats_reduce_dim: int,
        pre_zero_point_stats_input_view_shape_impl: Module,
        pre_zero_point_shape: Optional[Tuple[int, ...]] = None,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        if isinstance(stats_reduce_dim, bool) or not isinstance(stats_reduce_dim, int):
            raise TypeError(
                f"{owner}: stats_reduce_dim must be an int (zero-centering is per channel), got "
                f"{stats_reduce_dim!r}"
            )
        # Brevitas's default None only fails later, in view(None): required here.
        if pre_zero_point_shape is None:
            raise ValueError(
                f"{owner}: pre_zero_point_shape must be given (the shape the per-channel means "
                f"broadcast against the tensor with, e.g. (C, 1, 1, 1))"
            )
        self.stats_reduce_dim = stats_reduce_dim
        self.stats_output_shape = checked_shape(owner, "pre_zero_point_shape", pre_zero_point_shape)
        self.stats_input_view_shape_impl = checked_module(
            owner,
            "pre_zero_point_stats_input_view_shape_impl",
            pre_zero_point_stats_input_view_shape_impl,
        )

    @jit.script_method
    def get_zero_center(self, x: Tensor) -> Tensor:
        x = self.stats_input_view_shape_impl(x)
        u = torch.mean(x, dim=self.stats_reduce_dim, keepdim=True)
        return -u.view(self.stats_output_shape)

    @jit.script_method
    def forward(self, x: Tensor, scale: Tensor, bit_width: Tensor) -> Tensor:
        # DecoupledIntQuant adds the zero point to x / pre_scale: the center is scaled alike.
        return self.get_zero_center(x) / scale


class RuntimeDynamicGroupZeroPoint(jit.ScriptModule):
    """A zero point per group of the runtime input (the asymmetric counterpart of
    RuntimeDynamicGroupStatsScaling), recomputed on every call: input_view_impl lays the input
    out as groups, zero_point_stats_impl reduces each group to its minimum (say), and the
    zero point is minus that statistic, in the integer domain of the group's scale."""

    def __init__(
        self,
        input_view_impl: Module,
        zero_point_stats_impl: Module,
        int_quant: Module,
        quantize_zero_point: bool,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        self.input_view_impl = checked_module(owner, "input_view_impl", input_view_impl)
        self.zero_point_stats_impl = checked_module(
            owner, "zero_point_stats_impl", zero_point_stats_impl
        )
        self.scale_shift_zero_point = _scale_shift(owner, int_quant, quantize_zero_point)

    @jit.script_method
    def forward(self, stats_input: Tensor, scale: Tensor, bit_width: Tensor) -> Tensor:
        stats = self.zero_point_stats_impl(self.input_view_impl(stats_input))
        return self.scale_shift_zero_point(-stats, scale, bit_width)
