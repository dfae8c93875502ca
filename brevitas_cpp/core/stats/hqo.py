"""Half-quadratic optimization (HQO, after HQQ; Brevitas's ``HalfQuadraticOptimizerScale`` and
``HalfQuadraticOptimizerZeroPoint``): the statistic a scale or zero point is initialised from is
refined by alternating two steps on the quantizer's own output q = Q(x), starting from
``hqo_init_op`` (max|x|, the range, or -min(x, 0)):

- the error x - q is shrunk towards sparsity with the generalised soft threshold of an
  l_p norm (p = ``hqo_lp_norm``), strength 1 / beta: W_e = sign(e) relu(|e| - |e|^(p-1) / beta);
- the scale becomes the (masked) median of (x - W_e) / (q / scale - zero point) times the integer
  range, or the zero point the mean of (x - W_e) - (q / scale + zero point) * scale;

beta grows by ``hqo_kappa`` each iteration, and the search stops at the first iteration whose
mean |x - q| does not improve (at most ``hqo_iters``). Each evaluation calls the quant proxy that
owns the block in local-loss mode, as the MSE search does (mse.py, which also explains how the
block runs under BREVITAS_JIT=1 and torch.jit.script).

Brevitas's quirks are kept, since its numbers are the reference: the zero point's beta is the
block's own attribute and keeps growing from one search to the next (the scale's restarts), and
the zero point's search scores the error against the tensor as its statistic received it (but
quantizes it in the weight's own shape, where Brevitas fails on per-channel convolutions), and
a zero-point candidate that is not finite (e.g. a group that is all padding) ends the search with
the best one so far, as Brevitas's NaN losses do."""

from typing import Any, Optional

import torch
from torch import Tensor, nn

from brevitas_cpp.core._checks import checked_module
from brevitas_cpp.core.function_wrapper import Identity, ScalarSignedClampMinSte
from brevitas_cpp.function.shape import ungroup

from .mse import ProxySearchStats, _checked_proxy, _LocalLossSwitches, _ProxySearch
from .stats_op import _checked_dim

__all__ = [
    "HalfQuadraticOptimizerScale",
    "HalfQuadraticOptimizerZeroPoint",
    "masked_median",
    "shrink_lp_op",
]


def shrink_lp_op(x: Tensor, beta: float, lp_norm: float) -> Tensor:
    """The proximal step of the l_p norm (p <= 1) at strength 1 / beta, elementwise."""
    if lp_norm == 1:
        return torch.sign(x) * torch.nn.functional.relu(torch.abs(x) - 1.0 / beta)
    return torch.sign(x) * torch.nn.functional.relu(
        torch.abs(x) - (1.0 / beta) * torch.pow(torch.abs(x), lp_norm - 1)
    )


def masked_median(
    x: Tensor, mask: Tensor, dim: Optional[int] = None, keepdim: bool = False
) -> Tensor:
    """The median of x (in float32) over the elements where mask holds, along dim or overall
    (torch.nanmedian: the lower of the two middle values)."""
    x_nan = x.float().masked_fill(~mask, float("nan"))
    if dim is None:
        return x_nan.nanmedian()
    return x_nan.nanmedian(dim=dim, keepdim=keepdim)[0]


def _checked_positive(owner: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{owner}: {name} must be a positive number, got {value!r}")
    return float(value)


def _checked_iters(owner: str, name: str, iters: Any) -> int:
    if isinstance(iters, bool) or not isinstance(iters, int) or iters < 1:
        raise ValueError(f"{owner}: {name} must be an int >= 1, got {iters!r}")
    return iters


def _as_tracked_weight(proxy_module: nn.Module, x: Tensor) -> Tensor:
    """x (a view of the weight a weight proxy tracks: flat, [channels, rest], or its groups) in
    that weight's shape, as the quantizer sees it in training; x as it is for activations."""
    params = getattr(proxy_module, "tracked_parameter_list", None)
    if not params:
        return x
    weight = params[0]
    group_dim = getattr(proxy_module, "groupwise_dim", None)
    if group_dim is not None and x.dim() == weight.dim() + 1:
        x = ungroup(x, group_dim, proxy_module.groupwise_size, weight.shape[group_dim])
    return x.reshape(weight.shape) if x.numel() == weight.numel() else x


class _HQOSearch(_ProxySearch):
    """An HQO block's search: the proxy called in local-loss mode as for MSE, its output read
    as (value, scale, zero_point)."""

    def __init__(
        self, proxy_module: nn.Module, init_op: nn.Module, view: nn.Module, iters: int
    ) -> None:
        super().__init__(proxy_module, init_op, view)
        self.iters = iters

    def quantize_fields(self, x: Tensor, candidate: Tensor, switches: _LocalLossSwitches):
        """The proxy's (value, scale, zero_point) on x with candidate as this block's statistic."""
        value, scale, zero_point, _ = self.quantize(x, candidate, switches)
        return value.detach(), scale.detach(), zero_point.detach()


class _HQOScaleSearch(_HQOSearch):
    def __init__(self, block: "HalfQuadraticOptimizerScale", proxy_module: nn.Module) -> None:
        super().__init__(proxy_module, block.hqo_init_op, block.input_view_shape_impl, block.iters)
        self.block = block

    def search(self, x: Tensor) -> Tensor:
        block = self.block
        x = self.input_view_shape_impl(x)
        candidate = self.init(x)
        best_candidate = candidate
        best_loss = torch.tensor(float("inf"), device=x.device, dtype=x.dtype)
        beta = block.beta
        switches = _LocalLossSwitches(self.proxy_module)
        for _ in range(self.iters):
            value, scale, zero_point = self.quantize_fields(x, candidate, switches)
            loss = torch.abs(value - x).mean()
            best_candidate = torch.where(loss < best_loss, candidate, best_candidate)
            if loss >= best_loss:
                break
            best_loss = torch.min(loss, best_loss)
            shrunk_error = shrink_lp_op(x - value, beta, block.lp_norm)
            num = self.input_view_shape_impl(x - shrunk_error)
            den = self.input_view_shape_impl(torch.round(value / scale) - zero_point)
            ratio = num / den
            mask = (num != 0.0) & (den != 0.0)
            candidate = masked_median(ratio, mask, block.stats_reduce_dim, block.keepdim)
            candidate = block.clamp_min_ste(candidate.type_as(self.internal_candidate))
            candidate = candidate * block.int_scaling_impl(block.bit_width_impl())
            # Where the median is undefined (no element to take it over), keep the previous one.
            previous = self.internal_candidate
            candidate = torch.where(torch.isfinite(candidate), candidate, previous)
            beta *= block.kappa
        return best_candidate


class _HQOZeroPointSearch(_HQOSearch):
    def __init__(self, block: "HalfQuadraticOptimizerZeroPoint", proxy_module: nn.Module) -> None:
        super().__init__(
            proxy_module, block.hqo_init_op_zp, block.input_view_shape_impl, block.iters
        )
        self.block = block

    def search(self, x: Tensor) -> Tensor:
        block = self.block
        candidate = self.init(x)
        best_candidate = candidate
        best_loss = torch.tensor(float("inf"), device=x.device, dtype=x.dtype)
        switches = _LocalLossSwitches(self.proxy_module)
        # The weight's own shape for the quantizer: a per-channel scale would not broadcast over
        # the [channels, rest] view a statistic receives (Brevitas 0.12 fails on convolutions).
        weight_shaped = _as_tracked_weight(self.proxy_module, x)
        for i in range(self.iters):
            value, scale, zero_point = self.quantize_fields(weight_shaped, candidate, switches)
            value, scale, zero_point = (
                self.input_view_shape_impl(value),
                self.input_view_shape_impl(scale),
                self.input_view_shape_impl(zero_point),
            )
            ints = value / scale + zero_point
            loss = torch.abs(value - x).mean()
            best_candidate = torch.where(loss < best_loss, candidate, best_candidate)
            if loss >= best_loss:
                break
            best_loss = torch.min(loss, best_loss)
            shrunk_error = shrink_lp_op(x - value, block.beta, block.lp_norm)
            # HQQ's zero point, in units of the scale and of the opposite sign.
            residual = self.input_view_shape_impl((x - shrunk_error) - ints * scale)
            if block.stats_reduce_dim is None:
                candidate = torch.mean(residual)
            else:
                candidate = torch.mean(residual, dim=block.stats_reduce_dim, keepdim=block.keepdim)
            block.beta *= block.kappa
            if not bool(torch.isfinite(candidate).all()):
                # Brevitas goes on with NaN losses, which change nothing but beta, to the last
                # iteration; the quantizer here refuses a NaN zero point, so stop and grow beta.
                for _ in range(self.iters - 1 - i):
                    block.beta *= block.kappa
                break
        return best_candidate


class HalfQuadraticOptimizerScale(ProxySearchStats):
    """A scale statistic refined by half-quadratic optimization (see the module docstring)."""

    def __init__(
        self,
        proxy_module: nn.Module,
        hqo_init_op_scale: nn.Module,
        keepdim: bool,
        inner_stats_input_view_shape_impl: nn.Module,
        scaling_min_val: Optional[float] = None,
        stats_reduce_dim: Optional[int] = None,
        int_scaling_impl: Optional[nn.Module] = None,
        bit_width_impl: Optional[nn.Module] = None,
        hqo_beta_scale: float = 1e5,
        hqo_kappa_scale: float = 1.01,
        hqo_lp_norm_scale: float = 0.7,
        hqo_iters_scale: int = 1000,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        self.hqo_init_op = checked_module(owner, "hqo_init_op_scale", hqo_init_op_scale)
        self.input_view_shape_impl = checked_module(
            owner, "inner_stats_input_view_shape_impl", inner_stats_input_view_shape_impl
        )
        self.int_scaling_impl = checked_module(owner, "int_scaling_impl", int_scaling_impl)
        self.bit_width_impl = checked_module(owner, "bit_width_impl", bit_width_impl)
        self.stats_reduce_dim = _checked_dim(owner, stats_reduce_dim)
        self.keepdim = bool(keepdim)
        self.beta = _checked_positive(owner, "hqo_beta_scale", hqo_beta_scale)
        self.kappa = _checked_positive(owner, "hqo_kappa_scale", hqo_kappa_scale)
        self.lp_norm = _checked_positive(owner, "hqo_lp_norm_scale", hqo_lp_norm_scale)
        self.iters = _checked_iters(owner, "hqo_iters_scale", hqo_iters_scale)
        if scaling_min_val is not None and scaling_min_val != 0:
            self.clamp_min_ste = ScalarSignedClampMinSte(scaling_min_val)
        else:
            self.clamp_min_ste = Identity()
        self._hold_search(_HQOScaleSearch(self, _checked_proxy(owner, proxy_module)))


class HalfQuadraticOptimizerZeroPoint(ProxySearchStats):
    """A zero-point statistic refined by half-quadratic optimization (see the module
    docstring)."""

    def __init__(
        self,
        proxy_module: nn.Module,
        keepdim: bool,
        hqo_init_op_zp: nn.Module,
        inner_stats_input_view_shape_impl: nn.Module,
        stats_reduce_dim: Optional[int] = None,
        hqo_beta_zp: float = 1e0,
        hqo_kappa_zp: float = 1.01,
        hqo_lp_norm_zp: float = 0.5,
        hqo_iters_zp: int = 1000,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        self.hqo_init_op_zp = checked_module(owner, "hqo_init_op_zp", hqo_init_op_zp)
        self.input_view_shape_impl = checked_module(
            owner, "inner_stats_input_view_shape_impl", inner_stats_input_view_shape_impl
        )
        self.stats_reduce_dim = _checked_dim(owner, stats_reduce_dim)
        self.keepdim = bool(keepdim)
        self.beta = _checked_positive(owner, "hqo_beta_zp", hqo_beta_zp)
        self.kappa = _checked_positive(owner, "hqo_kappa_zp", hqo_kappa_zp)
        self.lp_norm = _checked_positive(owner, "hqo_lp_norm_zp", hqo_lp_norm_zp)
        self.iters = _checked_iters(owner, "hqo_iters_zp", hqo_iters_zp)
        self._hold_search(_HQOZeroPointSearch(self, _checked_proxy(owner, proxy_module)))
