"""Learned pre-clipping scales of the decoupled quantizers (DecoupledRescalingIntQuant): weight
normalization and accumulator-aware quantization, A2Q ("A2Q: Accumulator-Aware Quantization
with Guaranteed Overflow Avoidance", Colbert, Pappalardo, Petri-Koenig) and A2Q+ ("A2Q+:
Improving Accumulator-Aware Weight Quantization").

Weight-normalized quantization y = clip(round((g / s) * (w / norm(w)))) * s is computed as
y = clip(round(w / pre_scale)) * s with pre_scale = s * norm(w) / g, where g is a learned
per-channel norm (``value``, in the restrict domain of restrict_pre_scaling_impl) and s the
post-clipping scale of scaling_impl. A2Q also clamps g / s to the largest L1 norm of a channel's
integer weights that keeps a P-bit accumulator of the quantized input from overflowing."""

from typing import List, Optional, Tuple

import torch
from torch import Tensor
from torch.nn import Module, Parameter

from brevitas_cpp import jit
from brevitas_cpp.core._checks import checked_module, checked_parameter_list, checked_shape
from brevitas_cpp.core._state_dict import LEGACY_VALUE_KEYS, KeyPolicy
from brevitas_cpp.core.restrict_val import _RestrictClampValue
from brevitas_cpp.core.stats import SCALAR_SHAPE, _Stats
from brevitas_cpp.function.ops import get_upper_bound_on_l1_norm

__all__ = [
    "AccumulatorAwareParameterPreScaling",
    "AccumulatorAwareZeroCenterParameterPreScaling",
    "ParameterPreScalingWeightNorm",
]


def _check_accumulator_fits_input(
    owner: str,
    upper_bound: Tensor,
    accumulator_bit_width: Tensor,
    input_bit_width: Tensor,
    input_is_signed: bool,
    min_accumulator_bit_width: Tensor,
) -> None:
    """A bound below 1 admits only all-zero integer weights: the accumulator is too narrow for
    the input, which is a setting to fix rather than a layer that silently outputs zeros."""
    if bool((upper_bound < 1.0).any()):
        sign = "signed" if input_is_signed else "unsigned"
        raise ValueError(
            owner
            + ": accumulator_bit_width="
            + str(int(accumulator_bit_width.max().item()))
            + " is too small for "
            + str(int(input_bit_width.max().item()))
            + "-bit "
            + sign
            + " inputs: the bound on the L1 norm of each channel's integer weights is "
            + str(float(upper_bound.min().item()))
            + " < 1, so every weight would be quantized to 0. Use accumulator_bit_width >= "
            + str(int(min_accumulator_bit_width.max().item()))
            + " (e.g. weight_accumulator_bit_width=... on the layer) or fewer input bits."
        )


class ParameterPreScalingWeightNorm(KeyPolicy, jit.ScriptModule):
    """pre_scale = s * d_w / g for weight normalization, per output channel:

        d_w = normalize_stats_impl(view(w))       # e.g. the L2 norm of each channel
        g = restrict_clamp(value)                 # learned, initialised to d_w of the weight
        s = scaling_impl(view(w))                 # the post-clipping scale

    forward(weights) -> pre_scale, shaped pre_scaling_shape. ``value`` starts as the norm of
    the tracked weight (moved into the domain of restrict_pre_scaling_impl), so the first
    pre_scale equals s."""

    RENAMED_KEYS = LEGACY_VALUE_KEYS
    # Retraining from a float checkpoint (IGNORE_MISSING_KEYS) keeps the initial norm.
    INIT_KEPT_KEYS = ("value",)

    def __init__(
        self,
        scaling_impl: Module,
        normalize_stats_impl: Module,
        scaling_stats_input_view_shape_impl: Module,
        tracked_parameter_list: List[torch.nn.Parameter],
        pre_scaling_shape: Optional[Tuple[int, ...]] = None,
        restrict_pre_scaling_impl: Optional[Module] = None,
        pre_scaling_min_val: Optional[float] = None,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        tracked_parameter_list = checked_parameter_list(owner, tracked_parameter_list)
        if len(tracked_parameter_list) > 1:
            # NotImplementedError as Brevitas: g is initialised from one weight's norms.
            raise NotImplementedError(
                f"{owner}: pre-clipping scales do not support a quantizer shared by several "
                f"layers (tracked_parameter_list holds {len(tracked_parameter_list)} "
                f"parameters); give each layer its own weight quantizer"
            )
        if pre_scaling_shape is None:
            # Brevitas's default None only fails later, in view(None): required here.
            raise ValueError(
                f"{owner}: pre_scaling_shape must be given (one norm per output channel, e.g. "
                f"(C, 1, 1, 1) for a conv weight)"
            )
        pre_scaling_shape = checked_shape(owner, "pre_scaling_shape", pre_scaling_shape)
        self.stats = _Stats(
            checked_module(owner, "normalize_stats_impl", normalize_stats_impl), pre_scaling_shape
        )
        self.stats_input_view_shape_impl = checked_module(
            owner, "scaling_stats_input_view_shape_impl", scaling_stats_input_view_shape_impl
        )
        self.scaling_impl = checked_module(owner, "scaling_impl", scaling_impl)
        # g starts as the weight's own norms (in the restrict domain), so w / pre_scale = w / s.
        with torch.no_grad():
            init = self.stats(self.stats_input_view_shape_impl(tracked_parameter_list[0]))
        if restrict_pre_scaling_impl is not None:
            checked_module(owner, "restrict_pre_scaling_impl", restrict_pre_scaling_impl)
            init = restrict_pre_scaling_impl.restrict_init_tensor(init)
        if init.shape == SCALAR_SHAPE:
            init = torch.full(pre_scaling_shape, init)
        self.value = Parameter(init.detach().clone())
        self.restrict_clamp_scaling = _RestrictClampValue(
            pre_scaling_min_val, restrict_pre_scaling_impl
        )

    @jit.script_method
    def forward(self, weights: Tensor) -> Tensor:
        weights = self.stats_input_view_shape_impl(weights)
        d_w = self.stats(weights)  # denominator of the weight normalization
        g = self.restrict_clamp_scaling(self.value)
        s = self.scaling_impl(weights)
        return (s * d_w) / g


class AccumulatorAwareParameterPreScaling(ParameterPreScalingWeightNorm):
    """A2Q: as ParameterPreScalingWeightNorm with the L1 norm, and g / s clamped to the bound T
    on the L1 norm of each channel's integer weights that keeps a P-bit accumulator of N-bit
    inputs from overflowing:

        T = (2^(P-1) - 1) * 2^(signed - N)        # P = accumulator_bit_width_impl()
        pre_scale = clamp_min(d_w / min(g / s, T), pre_scaling_min_val)

    forward(weights, input_bit_width, input_is_signed) -> pre_scale. A P too small for the
    input (T < 1: every weight would round to 0) is an error naming accumulator_bit_width."""

    def __init__(
        self,
        scaling_impl: Module,
        normalize_stats_impl: Module,
        accumulator_bit_width_impl: Module,
        scaling_stats_input_view_shape_impl: Module,
        tracked_parameter_list: List[torch.nn.Parameter],
        pre_scaling_shape: Optional[Tuple[int, ...]] = None,
        restrict_pre_scaling_impl: Optional[Module] = None,
        pre_scaling_min_val: Optional[float] = None,
    ) -> None:
        super().__init__(
            scaling_impl,
            normalize_stats_impl,
            scaling_stats_input_view_shape_impl,
            tracked_parameter_list,
            pre_scaling_shape,
            restrict_pre_scaling_impl,
            pre_scaling_min_val,
        )
        self.accumulator_bit_width = checked_module(
            type(self).__name__, "accumulator_bit_width_impl", accumulator_bit_width_impl
        )

    @jit.script_method
    def calc_max_l1_norm(self, input_bit_width: Tensor, input_is_signed: bool) -> Tensor:
        accumulator_bit_width = self.accumulator_bit_width()
        upper_bound = get_upper_bound_on_l1_norm(
            accumulator_bit_width, input_bit_width, input_is_signed
        )
        # T >= 1 <=> 2^(P-1) > 2^(N - signed) <=> P >= N + 2 - signed.
        min_bits = input_bit_width + 2.0 - float(input_is_signed)
        _check_accumulator_fits_input(
            "AccumulatorAwareParameterPreScaling",
            upper_bound,
            accumulator_bit_width,
            input_bit_width,
            input_is_signed,
            min_bits,
        )
        return upper_bound

    @jit.script_method
    def inner_forward(
        self, weights: Tensor, input_bit_width: Tensor, input_is_signed: bool
    ) -> Tensor:
        weights = self.stats_input_view_shape_impl(weights)
        d_w = self.stats(weights)  # denominator of the weight normalization
        s = self.scaling_impl(weights)
        g = self.restrict_clamp_scaling(self.value)
        max_l1_norm = self.calc_max_l1_norm(input_bit_width, input_is_signed)  # T, over s
        g = torch.clamp_max(g / s, max_l1_norm)
        value = d_w / g
        # The lower bound again: dividing by the clamped g may have undercut it.
        return self.restrict_clamp_scaling.clamp_min_ste(value)

    @jit.script_method
    def forward(self, weights: Tensor, input_bit_width: Tensor, input_is_signed: bool) -> Tensor:
        return self.inner_forward(weights, input_bit_width, input_is_signed)


class AccumulatorAwareZeroCenterParameterPreScaling(AccumulatorAwareParameterPreScaling):
    """A2Q+: A2Q on zero-centered weights (pre_zero_point_impl, a PreZeroCenterZeroPoint,
    subtracts each channel's mean before rounding), which relaxes the bound to

        T = (2^P - 2) / (2^N - 1)

    and takes d_w over the centered weights. forward(weights, input_bit_width,
    input_is_signed) -> pre_scale."""

    def __init__(
        self,
        scaling_impl: Module,
        pre_zero_point_impl: Module,
        normalize_stats_impl: Module,
        accumulator_bit_width_impl: Module,
        scaling_stats_input_view_shape_impl: Module,
        tracked_parameter_list: List[Parameter],
        pre_scaling_shape: Optional[Tuple[int, ...]] = None,
        restrict_pre_scaling_impl: Optional[Module] = None,
        pre_scaling_min_val: Optional[float] = None,
    ) -> None:
        super().__init__(
            scaling_impl,
            normalize_stats_impl,
            accumulator_bit_width_impl,
            scaling_stats_input_view_shape_impl,
            tracked_parameter_list,
            pre_scaling_shape,
            restrict_pre_scaling_impl,
            pre_scaling_min_val,
        )
        # Checked by what it is used for (core.zero_point imports core.scaling, so this module
        # can not import PreZeroCenterZeroPoint to test its type).
        if not callable(getattr(pre_zero_point_impl, "get_zero_center", None)):
            raise TypeError(
                f"{type(self).__name__}: A2Q+ requires a pre-clipping zero-centering zero point: "
                f"pre_zero_point_impl must be a PreZeroCenterZeroPoint (a block with "
                f"get_zero_center), got {pre_zero_point_impl!r}"
            )
        self.pre_zero_point = pre_zero_point_impl

    @jit.script_method
    def calc_max_l1_norm(self, input_bit_width: Tensor, input_is_signed: bool) -> Tensor:
        accumulator_bit_width = self.accumulator_bit_width()
        max_accumulator_mag = pow(2.0, accumulator_bit_width) - 2.0  # 2^P - 2
        max_input_mag = pow(2.0, input_bit_width) - 1.0  # 2^N - 1
        upper_bound = max_accumulator_mag / max_input_mag
        # T >= 1 <=> 2^P - 2 >= 2^N - 1 <=> P >= N + 1 (whatever the input's sign).
        _check_accumulator_fits_input(
            "AccumulatorAwareZeroCenterParameterPreScaling",
            upper_bound,
            accumulator_bit_width,
            input_bit_width,
            input_is_signed,
            input_bit_width + 1.0,
        )
        return upper_bound

    @jit.script_method
    def forward(self, weights: Tensor, input_bit_width: Tensor, input_is_signed: bool) -> Tensor:
        # The L1 norm is that of the zero-centered weights, which are what gets rounded.
        z = self.pre_zero_point.get_zero_center(weights)
        return self.inner_forward(weights + z, input_bit_width, input_is_signed)
