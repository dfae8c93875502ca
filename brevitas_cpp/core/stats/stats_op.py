"""Statistics ops: reduce a (viewed) tensor to the quantity a scale or zero point is derived
from (absolute maximum, min-max range, percentiles, mean + sigma * std, ...).

Each op reduces over the whole tensor when ``stats_reduce_dim`` is None and over that one
dimension otherwise (the stats views lay tensors out as [channels, rest], so per-channel
statistics reduce dim 1). Percentiles use the k-th smallest value with k rounded as Brevitas
does, so the selected element, and hence the result, is bit-identical."""

import math
import numbers
from typing import Optional, Tuple

import torch
from torch import Tensor

from brevitas_cpp import jit
from brevitas_cpp._unsupported import unsupported_getattr
from brevitas_cpp.core._checks import checked_bool
from brevitas_cpp.core.utils import StatelessBuffer

DEFAULT_STD_DEV_EPSILON = 1e-8

__all__ = [
    "AbsAve",
    "AbsMax",
    "AbsMaxAve",
    "AbsMaxL2",
    "AbsMinMax",
    "AbsPercentile",
    "DEFAULT_STD_DEV_EPSILON",
    "L1Norm",
    "L2Norm",
    "MeanSigmaStd",
    "NegativeMinOrZero",
    "NegativePercentileOrZero",
    "PercentileInterval",
    "SignedScaleStats",
    "UnsignedScaleStat",
    "_MeanSigmaStdImpl",
]


class UnsignedScaleStat:
    """Marks ops whose statistic is never negative, so the scale derived from it is unsigned."""

    @classmethod
    def is_scale_unsigned(cls) -> bool:
        return True


class SignedScaleStats:
    """Marks ops whose statistic may be negative (signed scales)."""

    @classmethod
    def is_scale_unsigned(cls) -> bool:
        return False


# ---- argument checks (construction time) --------------------------------------------------------


def _checked_dim(owner: str, stats_reduce_dim, optional: bool = True) -> Optional[int]:
    if stats_reduce_dim is None and optional:
        return None
    if isinstance(stats_reduce_dim, bool) or not isinstance(stats_reduce_dim, int):
        accepted = "an int or None" if optional else "an int"
        raise TypeError(f"{owner}: stats_reduce_dim must be {accepted}, got {stats_reduce_dim!r}")
    return stats_reduce_dim


def _checked_real(owner: str, arg: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"{owner}: {arg} must be a finite number, got {value!r}")
    return float(value)


def _checked_percentile(owner: str, arg: str, value) -> float:
    q = _checked_real(owner, arg, value)
    if not 0.0 < q <= 100.0:
        raise ValueError(f"{owner}: {arg} is a percentage and must be in (0, 100], got {value!r}")
    return q


def _zero(dtype: Optional[torch.dtype], device: Optional[torch.device]) -> StatelessBuffer:
    # The upper bound of negative statistics, in the dtype/device the quantizer asked for.
    return StatelessBuffer(torch.tensor(0.0, dtype=dtype, device=device))


# ---- helpers used inside forward ----------------------------------------------------------------


def _selectable(x: Tensor) -> Tensor:
    """x in a dtype every selection kernel takes: torch has lacked kthvalue kernels for float16
    on CPU and bfloat16 on CUDA; selection is exact, so the detour through float32 picks the
    same value."""
    if (x.dtype == torch.float16 and x.device.type == "cpu") or (
        x.dtype == torch.bfloat16 and x.device.type == "cuda"
    ):
        return x.to(torch.float32)
    return x


def _select_block() -> int:
    """Values per block of the block selection (_kth_index_1d); a function, as TorchScript takes
    no global constants."""
    return 64


def _selects_by_blocks(n: int, k: int) -> bool:
    """Whether the k-th smallest of n values lies within n / 64 of either end (the 99.999th
    percentile of the activation statistics), where _kth_index_1d finds it."""
    block = _select_block()
    return k >= 1 and k <= n and ((n - k + 1) * block <= n or k * block <= n)


def _reads_values_on_host() -> bool:
    """Whether a branch may depend on tensor values: not while torch.compile or torch.jit.trace
    records a graph (which would fix the branch taken or break on it)."""
    if not torch.jit.is_scripting():  # (a branch TorchScript does not compile)
        return not jit.recording_graph()
    return True


def _same(a: Tensor, b: Tensor) -> Tensor:
    """a == b elementwise with NaN equal to NaN: the values a selection ranks as one."""
    return torch.logical_or(a == b, torch.logical_and(a.isnan(), b.isnan()))


def _end_pick(ends: Tensor, t: int, dim: int, largest: bool) -> Tuple[Tensor, Tensor]:
    """Where along dim (kept) the k-th value lies in ends, the t + 1 most extreme values of x
    sorted from the extreme, and whether other elements of x equal it (then one of its sorted
    neighbours does), so that torch.kthvalue must choose among them. It is the t-th, or a NaN
    ranked first among the t largest (NaN in, NaN out: see the README), which is never tied."""
    kth = ends.narrow(dim, t - 1, 1)
    pos = torch.full_like(kth, t - 1, dtype=torch.long)
    tied = _same(ends.narrow(dim, t, 1), kth)
    if t > 1:
        tied = torch.logical_or(tied, _same(ends.narrow(dim, t - 2, 1), kth))
        if largest:
            nan = ends.narrow(dim, 0, 1).isnan()
            pos = torch.where(nan, torch.zeros_like(pos), pos)
            tied = torch.logical_and(tied, torch.logical_not(nan))
    return pos, tied


def _kth_index_1d(x: Tensor, k: int) -> Tensor:
    """The index (a 1-element long tensor) of a k-th smallest value of the 1-D x, for k near
    either end (_selects_by_blocks); x carries no gradient.

    The t values at the near end (t = n - k + 1 largest, or k smallest) all lie in the t blocks
    of 64 whose extremes are the t most extreme: a block holding one of them and not chosen
    would leave t chosen extremes at least as far out, which are then the t values themselves.
    So one pass of block extremes, then a top-(t + 1) of n / 64 block extremes and of
    (t + 1) * 64 candidates, replace a top-t over all of x (whose CPU kernel copies x into
    (value, index) pairs: 10x slower for the 524k values of a CIFAR activation). One more than t
    shows a tie (_end_pick). Among equal values the index is torch.kthvalue's on the CPU (a tie costs
    its selection), the kernels' elsewhere and in compiled or traced graphs."""
    n = int(x.size(0))  # a Python int under torch.jit.trace too (topk takes no tensors)
    block = _select_block()
    top = n - k + 1
    largest = top * block <= n
    t = top if largest else k
    blocks = n // block
    body = x.narrow(0, 0, blocks * block).view(blocks, block)
    if largest:
        # A NaN ranks above everything for topk, as amax propagates it: consistent.
        extremes = torch.amax(body, dim=1)
    else:
        # For the smallest a NaN ranks last, but amin would make its block's extreme NaN and
        # hide the block's real minimum: NaNs count as +inf there.
        inf = float("inf")
        extremes = torch.amin(torch.nan_to_num(body, nan=inf, posinf=inf, neginf=-inf), dim=1)
    chosen = torch.topk(extremes, min(t + 1, blocks), largest=largest, sorted=False)[1]
    lanes = torch.arange(block, device=x.device, dtype=chosen.dtype)
    where = (chosen.unsqueeze(1) * block + lanes).view(-1)
    if blocks * block < n:  # the tail outside whole blocks is always a candidate
        tail = torch.arange(blocks * block, n, device=x.device, dtype=chosen.dtype)
        where = torch.cat([where, tail])
    candidates = x.index_select(0, where)
    ends, at = torch.topk(candidates, t + 1, largest=largest, sorted=True)
    pos, tied = _end_pick(ends, t, 0, largest)
    if x.device.type == "cpu" and _reads_values_on_host():
        # Among equal values the element is torch.kthvalue's (Brevitas's, which gets the
        # gradient): ties take it (on a GPU the test would be a host sync).
        if bool(tied):
            return torch.kthvalue(x, k)[1].view(1)
    return where.index_select(0, at.index_select(0, pos))


def _kth_near_end(x: Tensor, k: int, dim: int) -> Tensor:
    """The k-th smallest value along dim (kept) on the CPU, for k near either end
    (_selects_by_blocks): the t-th of a sorted top-(t + 1) (t = n - k + 1 largest, or k
    smallest), where torch.kthvalue copies and partitions all of x (4-5x slower per channel).
    Its gradient reaches the element torch.kthvalue selects (Brevitas's): the rows where the
    value is tied (_end_pick) are selected again by torch.kthvalue, the others hold it once. In
    compiled or traced graphs (no branch on values) a tie keeps topk's element."""
    n = int(x.size(dim))  # (as in _kth_index_1d)
    top = n - k + 1
    largest = top * _select_block() <= n
    t = top if largest else k
    ends = torch.topk(x, t + 1, dim=dim, largest=largest, sorted=True)[0]
    pos, tied = _end_pick(ends, t, dim, largest)
    kth = ends.gather(dim, pos)
    if not _reads_values_on_host():
        return kth
    rows = tied.reshape(-1).nonzero().view(-1)
    if rows.numel() == 0:
        return kth
    if rows.numel() == kth.numel():  # every row tied (quantized inputs): no copy of the rows
        return torch.kthvalue(x, k, dim=dim, keepdim=True)[0]
    # Rows laid out along dim 0 in the order of kth's elements, dim last.
    by_row = x.movedim(dim, -1).reshape(-1, n)
    picked = torch.kthvalue(by_row.index_select(0, rows), k, dim=1)[0]
    kth_rows = kth.movedim(dim, -1)
    merged = kth_rows.reshape(-1).index_copy(0, rows, picked)
    return merged.view(kth_rows.shape).movedim(-1, dim)


def _kthvalue(x: Tensor, k: int, dim: int, keepdim: bool) -> Tensor:
    """The k-th smallest value (1-based) along dim, its gradient to the one element
    torch.kthvalue selects (Brevitas's) on the CPU. Along a dim of a tensor with rows, other
    devices call torch.kthvalue, as Brevitas does (CUDA's kernel may take any of equal
    elements; it selects rows in parallel); one long row keeps the block selection there."""
    dtype = x.dtype
    x = _selectable(x)
    n = x.size(dim)
    if not _selects_by_blocks(n, k):
        return torch.kthvalue(x, k, dim=dim, keepdim=keepdim)[0].to(dtype)
    if x.dim() == 1:
        # The gradient reaches x through one gathered element, as kthvalue's would.
        value = x.index_select(0, _kth_index_1d(x.detach(), k))
        return (value if keepdim else value.squeeze(0)).to(dtype)
    if x.device.type != "cpu":
        return torch.kthvalue(x, k, dim=dim, keepdim=keepdim)[0].to(dtype)
    value = _kth_near_end(x, k, dim)
    return (value if keepdim else value.squeeze(dim)).to(dtype)


def _high_k(q: float, n: int) -> int:
    # k is 1-based: round q% of n half up.
    return int(math.floor(0.01 * q * n + 0.5))


def _low_k(q: float, n: int) -> int:
    return int(math.ceil(0.01 * q * n))


def _percentile(x: Tensor, q: float, high: bool, dim: Optional[int], keepdim: bool) -> Tensor:
    """The q-th percentile of x, over everything (dim None) or along dim: the k-th smallest
    value, k rounded half up for a high percentile (_high_k) and up for a low one (_low_k)."""
    if dim is None:
        n = x.numel()
        k = _high_k(q, n) if high else _low_k(q, n)
        return _kthvalue(x.view(-1), k, -1, False)
    n = x.size(dim)
    k = _high_k(q, n) if high else _low_k(q, n)
    return _kthvalue(x, k, dim, keepdim)


def _max(x: Tensor, dim: Optional[int], keepdim: bool) -> Tensor:
    """max(x) over everything (dim None) or along dim."""
    if dim is None:
        return torch.max(x)
    return torch.max(x, dim=dim, keepdim=keepdim)[0]


def _min(x: Tensor, dim: Optional[int], keepdim: bool) -> Tensor:
    """min(x) over everything (dim None) or along dim."""
    if dim is None:
        return torch.min(x)
    return torch.min(x, dim=dim, keepdim=keepdim)[0]


# ---- ops ----------------------------------------------------------------------------------------


class NegativeMinOrZero(jit.ScriptModule):
    """min(min(x), 0): the most negative value, or 0 when x has none."""

    __constants__ = ["stats_reduce_dim", "keepdim"]

    def __init__(
        self,
        stats_reduce_dim: Optional[int] = None,
        dtype: Optional[torch.dtype] = None,
        device: Optional[torch.device] = None,
        keepdim: bool = False,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        self.stats_reduce_dim = _checked_dim(owner, stats_reduce_dim)
        self.zero = _zero(dtype, device)
        self.keepdim = checked_bool(owner, "keepdim", keepdim)

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        min_val = _min(x, self.stats_reduce_dim, self.keepdim)
        return torch.clamp(min_val, max=self.zero())


class AbsPercentile(jit.ScriptModule, UnsignedScaleStat):
    """The high_percentile_q-th percentile of |x| (k = floor(q% * n + 0.5)-th smallest)."""

    __constants__ = ["q", "stats_reduce_dim", "keepdim"]

    def __init__(
        self,
        high_percentile_q: float,
        stats_reduce_dim: Optional[int],
        percentile_q=None,
        keepdim: bool = False,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        if percentile_q is not None:
            raise RuntimeError(
                f"{owner}: percentile_q is deprecated, pass high_percentile_q instead "
                f"(got percentile_q={percentile_q!r})"
            )
        self.q = _checked_percentile(owner, "high_percentile_q", high_percentile_q)
        self.stats_reduce_dim = _checked_dim(owner, stats_reduce_dim)
        self.keepdim = checked_bool(owner, "keepdim", keepdim)

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        if self.stats_reduce_dim is None:
            flat = x.reshape(-1)
            k = _high_k(self.q, flat.numel())
            if _selects_by_blocks(flat.numel(), k):
                # Selected on a detached |x|; only the chosen element is differentiated, so the
                # backward is one scatter, not |x|'s sign over the whole tensor (same gradient).
                where = _kth_index_1d(_selectable(flat.detach().abs()), k)
                return flat.index_select(0, where).abs().squeeze(0)
        return _percentile(x.abs(), self.q, True, self.stats_reduce_dim, self.keepdim)


class NegativePercentileOrZero(jit.ScriptModule):
    """min(low_percentile_q-th percentile of x, 0) (k = ceil(q% * n)-th smallest)."""

    __constants__ = ["stats_reduce_dim", "q", "keepdim"]

    def __init__(
        self,
        low_percentile_q: float,
        stats_reduce_dim: Optional[int] = None,
        dtype: Optional[torch.dtype] = None,
        device: Optional[torch.device] = None,
        keepdim: bool = False,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        self.stats_reduce_dim = _checked_dim(owner, stats_reduce_dim)
        self.q = _checked_percentile(owner, "low_percentile_q", low_percentile_q)
        self.zero = _zero(dtype, device)
        self.keepdim = checked_bool(owner, "keepdim", keepdim)

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        result = _percentile(x, self.q, False, self.stats_reduce_dim, self.keepdim)
        return torch.clamp(result, max=self.zero())


class PercentileInterval(jit.ScriptModule, UnsignedScaleStat):
    """|high percentile - min(low percentile, 0)|: the range a zero-point quantizer must cover
    (the low end is kept <= 0 to agree with the zero-point statistics)."""

    __constants__ = ["stats_reduce_dim", "low_q", "high_q", "keepdim"]

    def __init__(
        self,
        low_percentile_q: float,
        high_percentile_q: float,
        stats_reduce_dim: Optional[int] = None,
        keepdim: bool = False,
        dtype: Optional[torch.dtype] = None,
        device: Optional[torch.device] = None,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        self.stats_reduce_dim = _checked_dim(owner, stats_reduce_dim)
        self.low_q = _checked_percentile(owner, "low_percentile_q", low_percentile_q)
        self.high_q = _checked_percentile(owner, "high_percentile_q", high_percentile_q)
        self.keepdim = checked_bool(owner, "keepdim", keepdim)
        self.zero = _zero(dtype, device)

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        low_result = _percentile(x, self.low_q, False, self.stats_reduce_dim, self.keepdim)
        high_result = _percentile(x, self.high_q, True, self.stats_reduce_dim, self.keepdim)
        low_result = torch.clamp(low_result, max=self.zero())
        return torch.abs(high_result - low_result)


class AbsMax(jit.ScriptModule, UnsignedScaleStat):
    """max(|x|)."""

    __constants__ = ["stats_reduce_dim", "keepdim"]

    def __init__(self, stats_reduce_dim: Optional[int] = None, keepdim: bool = False) -> None:
        super().__init__()
        owner = type(self).__name__
        self.stats_reduce_dim = _checked_dim(owner, stats_reduce_dim)
        self.keepdim = checked_bool(owner, "keepdim", keepdim)

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        return _max(torch.abs(x), self.stats_reduce_dim, self.keepdim)


class AbsMinMax(jit.ScriptModule, UnsignedScaleStat):
    """|max(x) - min(min(x), 0)|: the full range when the lower end is kept <= 0."""

    __constants__ = ["stats_reduce_dim", "keepdim"]

    def __init__(
        self,
        stats_reduce_dim: Optional[int] = None,
        keepdim: bool = False,
        dtype: Optional[torch.dtype] = None,
        device: Optional[torch.device] = None,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        self.stats_reduce_dim = _checked_dim(owner, stats_reduce_dim)
        self.keepdim = checked_bool(owner, "keepdim", keepdim)
        self.zero = _zero(dtype, device)

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        max_val = _max(x, self.stats_reduce_dim, self.keepdim)
        min_val = _min(x, self.stats_reduce_dim, self.keepdim)
        min_val = torch.clamp(min_val, max=self.zero())
        return torch.abs(max_val - min_val)


class AbsMaxAve(jit.ScriptModule, UnsignedScaleStat):
    """mean over channels of max(|x|) along stats_reduce_dim: a scalar."""

    __constants__ = ["stats_reduce_dim"]

    def __init__(self, stats_reduce_dim: int) -> None:
        super().__init__()
        self.stats_reduce_dim = _checked_dim(type(self).__name__, stats_reduce_dim, optional=False)

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        return torch.mean(torch.max(torch.abs(x), dim=self.stats_reduce_dim)[0])


class AbsMaxL2(jit.ScriptModule, UnsignedScaleStat):
    """Root mean square over channels of max(|x|) along stats_reduce_dim: ||m||_2 / sqrt(len(m))."""

    __constants__ = ["stats_reduce_dim"]

    def __init__(self, stats_reduce_dim: int) -> None:
        super().__init__()
        self.stats_reduce_dim = _checked_dim(type(self).__name__, stats_reduce_dim, optional=False)

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        per_channel_max = torch.max(torch.abs(x), dim=self.stats_reduce_dim)[0]
        out = torch.norm(per_channel_max, p=2)
        return out / math.sqrt(per_channel_max.view(-1).shape[0])


class AbsAve(jit.ScriptModule, UnsignedScaleStat):
    """mean(|x|)."""

    __constants__ = ["stats_reduce_dim"]

    def __init__(self, stats_reduce_dim: Optional[int] = None) -> None:
        super().__init__()
        self.stats_reduce_dim = _checked_dim(type(self).__name__, stats_reduce_dim)

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        if self.stats_reduce_dim is None:
            return torch.mean(torch.abs(x))
        else:
            return torch.mean(torch.abs(x), dim=self.stats_reduce_dim)


class _MeanSigmaStdImpl(jit.ScriptModule):
    """mean(|x|) + sigma * sqrt(var(|x|) + epsilon), var unbiased; per-channel results are
    flattened to 1-d."""

    __constants__ = ["stats_reduce_dim", "epsilon"]

    def __init__(
        self,
        stats_reduce_dim: Optional[int] = None,
        std_dev_epsilon: float = DEFAULT_STD_DEV_EPSILON,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        self.stats_reduce_dim = _checked_dim(owner, stats_reduce_dim)
        epsilon = _checked_real(owner, "std_dev_epsilon", std_dev_epsilon)
        if epsilon < 0.0:
            raise ValueError(f"{owner}: std_dev_epsilon must be >= 0, got {std_dev_epsilon!r}")
        self.epsilon = epsilon

    @jit.script_method
    def forward(self, x: Tensor, sigma: Tensor) -> Tensor:
        abs_val = torch.abs(x)
        if self.stats_reduce_dim is None:
            mean_val = torch.mean(abs_val)
            std_val = torch.sqrt(torch.var(abs_val) + self.epsilon)
        else:
            mean_val = torch.mean(abs_val, dim=self.stats_reduce_dim).view(-1)
            std_val = torch.sqrt(torch.var(abs_val, dim=self.stats_reduce_dim) + self.epsilon)
            std_val = std_val.view(-1)
        return mean_val + sigma * std_val


class MeanSigmaStd(jit.ScriptModule, UnsignedScaleStat):
    """mean(|x|) + sigma * std(|x|) with a constant sigma (see _MeanSigmaStdImpl)."""

    def __init__(
        self,
        sigma: float,
        stats_reduce_dim: Optional[int] = None,
        std_dev_epsilon: float = DEFAULT_STD_DEV_EPSILON,
        dtype: Optional[torch.dtype] = None,
        device: Optional[torch.device] = None,
    ) -> None:
        super().__init__()
        sigma = _checked_real(type(self).__name__, "sigma", sigma)
        self.impl = _MeanSigmaStdImpl(stats_reduce_dim, std_dev_epsilon)
        self.sigma = StatelessBuffer(torch.tensor(sigma, dtype=dtype, device=device))

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        return self.impl(x, self.sigma())


class _PerChannelNorm(jit.ScriptModule):
    """The L-p norm of x along stats_reduce_dim, dim kept: the per-channel denominator of
    weight normalization. Per-tensor (stats_reduce_dim None) is refused, as in Brevitas, since
    the norm would have to be the largest per-channel one."""

    __constants__ = ["stats_reduce_dim"]
    P_NORM = 2

    def __init__(self, stats_reduce_dim: Optional[int] = None) -> None:
        super().__init__()
        owner = type(self).__name__
        dim = _checked_dim(owner, stats_reduce_dim)
        if dim is None:
            # Brevitas fails at the first call; failing here names the setting.
            raise NotImplementedError(
                f"{owner}: per-tensor L{self.P_NORM} normalization is not supported; "
                f"stats_reduce_dim must be the dim to reduce (per-channel scaling), got None"
            )
        self.stats_reduce_dim = dim


class L1Norm(_PerChannelNorm):
    """sum(|x|) along stats_reduce_dim (kept), for A2Q's weight normalization."""

    P_NORM = 1

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        return x.norm(p=1, dim=self.stats_reduce_dim, keepdim=True)


class L2Norm(_PerChannelNorm):
    """sqrt(sum(x^2)) along stats_reduce_dim (kept), for weight normalization."""

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        return x.norm(p=2, dim=self.stats_reduce_dim, keepdim=True)


# Brevitas names brevitas_cpp does not support raise on use (brevitas_cpp._unsupported).
__getattr__ = unsupported_getattr(__name__)
