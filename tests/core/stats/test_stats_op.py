"""Statistics ops against hand-worked numbers and plain-torch references (percentiles through a
full sort, so the reference never calls kthvalue)."""

import functools
import math

import pytest
import torch
from helpers import rand

from brevitas_cpp import config
from brevitas_cpp.core.stats import (
    AbsAve,
    AbsMax,
    AbsMaxAve,
    AbsMaxL2,
    AbsMinMax,
    AbsPercentile,
    MeanSigmaStd,
    NegativeMinOrZero,
    NegativePercentileOrZero,
    PercentileInterval,
)
from brevitas_cpp.core.stats.stats_op import SignedScaleStats, UnsignedScaleStat, _MeanSigmaStdImpl

# Two rows, one with negatives and one without, so "or zero" shows in per-row results.
X = torch.tensor([[-3.0, 1.0, 2.0, 0.5], [0.5, 0.25, 4.0, 1.0]])


def _sorted_pick(x: torch.Tensor, k: int, dim: int) -> torch.Tensor:
    """The k-th smallest (1-based) along dim via a full sort (independent of kthvalue)."""
    return torch.sort(x, dim=dim)[0].select(dim, k - 1)


def _high_k(q: float, n: int) -> int:
    # Rounded half up; written as Brevitas orders it (.01 * q first) so k agrees at the edges.
    return int(math.floor(0.01 * q * n + 0.5))


def _low_k(q: float, n: int) -> int:
    return int(math.ceil(0.01 * q * n))


# ---- hand-worked numbers -------------------------------------------------------------------------


def test_abs_max_numbers():
    assert torch.equal(AbsMax()(X), torch.tensor(4.0))
    assert torch.equal(AbsMax(1)(X), torch.tensor([3.0, 4.0]))
    assert torch.equal(AbsMax(1, keepdim=True)(X), torch.tensor([[3.0], [4.0]]))
    assert torch.equal(AbsMax(0)(X), torch.tensor([3.0, 1.0, 4.0, 1.0]))


def test_abs_min_max_numbers():
    # max - min(min, 0): row 0 spans [-3, 2] -> 5; row 1 has no negatives -> 4 - 0.
    assert torch.equal(AbsMinMax()(X), torch.tensor(7.0))
    assert torch.equal(AbsMinMax(1)(X), torch.tensor([5.0, 4.0]))
    assert torch.equal(AbsMinMax(1, keepdim=True)(X), torch.tensor([[5.0], [4.0]]))


def test_negative_min_or_zero_numbers():
    assert torch.equal(NegativeMinOrZero()(X), torch.tensor(-3.0))
    assert torch.equal(NegativeMinOrZero(1)(X), torch.tensor([-3.0, 0.0]))
    assert torch.equal(NegativeMinOrZero(1, keepdim=True)(X), torch.tensor([[-3.0], [0.0]]))
    assert torch.equal(NegativeMinOrZero()(X.abs()), torch.tensor(0.0))


def test_percentile_k_rounding_by_hand():
    # Values 1..10 shuffled: the k-th smallest is k.
    x = torch.tensor([7.0, 3.0, 10.0, 1.0, 5.0, 9.0, 2.0, 8.0, 6.0, 4.0])
    # high: floor(0.373 * 10 + 0.5) = 4; floor(0.35 * 10 + 0.5) = 4 (3.5 + 0.5 -> 4); 100% -> 10.
    assert torch.equal(AbsPercentile(37.3, None)(x), torch.tensor(4.0))
    assert torch.equal(AbsPercentile(100.0, None)(x), torch.tensor(10.0))
    assert torch.equal(AbsPercentile(34.9, None)(x), torch.tensor(3.0))
    # low: ceil(0.125 * 10) = 2; ceil(0.1 * 10) = 1.
    assert torch.equal(NegativePercentileOrZero(12.5)(-x), torch.tensor(-9.0))
    assert torch.equal(NegativePercentileOrZero(12.5)(x), torch.tensor(0.0))
    # interval: high k = 10 (10), low k = 1 of x - 5.5 -> -4.5: |4.5 - (-4.5)| = 9.
    assert torch.equal(PercentileInterval(10.0, 100.0)(x - 5.5), torch.tensor(9.0))


def test_abs_ave_max_ave_l2_numbers():
    assert torch.equal(AbsAve()(X), torch.tensor(12.25 / 8))
    assert torch.equal(AbsAve(1)(X), torch.tensor([6.5 / 4, 5.75 / 4]))
    assert torch.equal(AbsMaxAve(1)(X), torch.tensor(3.5))
    # sqrt(3^2 + 4^2) / sqrt(2) = 5 / sqrt(2)
    assert torch.equal(AbsMaxL2(1)(X), torch.tensor(5.0) / math.sqrt(2))


def test_mean_sigma_std_numbers():
    x = torch.tensor([[1.0, -3.0], [2.0, 2.0]])
    # |x| row 0: mean 2, unbiased var 2; row 1: mean 2, var 0.
    out = MeanSigmaStd(2.0, 1, std_dev_epsilon=0.0)(x)
    assert torch.equal(out, torch.tensor([2.0 + 2.0 * math.sqrt(2.0), 2.0]))
    # whole tensor: |x| = [1, 3, 2, 2], mean 2, var 2/3
    assert torch.allclose(
        MeanSigmaStd(1.0, std_dev_epsilon=0.0)(x),
        torch.tensor(2.0 + math.sqrt(2.0 / 3.0)),
        rtol=0,
        atol=1e-6,
    )


# ---- bit-exact against plain-torch references ----------------------------------------------------


@functools.lru_cache(maxsize=None)
def _built(cls, *args, **kwargs):
    """One instance per configuration: under BREVITAS_JIT=1 each construction compiles."""
    return cls(*args, **kwargs)


DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
DIMS = [None, 1, 0]


def _ref_abs_max(x, dim, keepdim):
    return x.abs().max() if dim is None else x.abs().amax(dim=dim, keepdim=keepdim)


def _min_zero(t):
    # min(t, 0) against a float32 zero, with torch's promotion rules: a whole-tensor (0-d) low
    # half-precision statistic becomes float32, a per-channel one keeps its dtype.
    return torch.minimum(t, torch.tensor(0.0))


def _ref_abs_min_max(x, dim, keepdim):
    hi = x.max() if dim is None else x.amax(dim=dim, keepdim=keepdim)
    lo = x.min() if dim is None else x.amin(dim=dim, keepdim=keepdim)
    return (hi - _min_zero(lo)).abs()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("keepdim", [False, True])
def test_max_min_ops_match_reference(dtype, dim, keepdim):
    x = rand((6, 37), dtype, seed=3, spread=2.0)
    assert torch.equal(_built(AbsMax, dim, keepdim)(x), _ref_abs_max(x, dim, keepdim))
    assert torch.equal(_built(AbsMinMax, dim, keepdim)(x), _ref_abs_min_max(x, dim, keepdim))
    neg = _built(NegativeMinOrZero, dim, keepdim=keepdim)(x)
    lo = x.min() if dim is None else x.amin(dim=dim, keepdim=keepdim)
    assert torch.equal(neg, _min_zero(lo))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("high_q,low_q", [(99.999, 0.001), (99.0, 1.0), (50.0, 50.0), (37.3, 12.5)])
def test_percentiles_match_sort_reference(dtype, dim, keepdim, high_q, low_q):
    x = rand((5, 203), dtype, seed=4)
    if dim is None:
        flat, n, d = x.reshape(-1), x.numel(), 0
    else:
        flat, n, d = x, x.shape[dim], dim

    def shape(t):
        return t.unsqueeze(d) if (keepdim and dim is not None) else t

    high = shape(_sorted_pick(flat.abs(), _high_k(high_q, n), d))
    assert torch.equal(_built(AbsPercentile, high_q, dim, keepdim=keepdim)(x), high)
    low = shape(_sorted_pick(flat, _low_k(low_q, n), d))
    neg = _built(NegativePercentileOrZero, low_q, dim, keepdim=keepdim)(x)
    assert torch.equal(neg, _min_zero(low))
    top = shape(_sorted_pick(flat, _high_k(high_q, n), d))
    interval = _built(PercentileInterval, low_q, high_q, dim, keepdim)(x)
    assert torch.equal(interval, (top - _min_zero(low)).abs())


@pytest.mark.parametrize("q", [99.999, 99.0, 50.0, 0.5])
def test_percentile_gradient_reaches_the_one_element_holding_it(q):
    """The percentile's gradient is that of selecting one element: 1 (times the sign, through
    |x|) where |x| equals the picked value and 0 elsewhere, with distinct values; with ties at
    that value, still a single element of them (as kthvalue's)."""
    x = rand((3, 4000), torch.float64, seed=7).requires_grad_()
    out = _built(AbsPercentile, q, 1)(x)
    (grad,) = torch.autograd.grad(out.sum(), x)
    pick = _sorted_pick(x.detach().abs(), _high_k(q, 4000), 1)
    expected = (x.detach().abs() == pick.unsqueeze(1)).double() * torch.sign(x.detach())
    assert torch.equal(grad, expected)
    tied = torch.cat([torch.full((1, 3000), 2.0), torch.rand(1, 1000)], 1).requires_grad_()
    (grad,) = torch.autograd.grad(_built(AbsPercentile, q, 1)(tied).sum(), tied)
    assert int((grad != 0).sum()) == 1 and float(grad.sum()) == 1.0


def _tied_rows() -> torch.Tensor:
    """Four rows of 3000: every extreme tied (a grid), a maximum held thrice, no tie, all zero
    (a dead ReLU channel)."""
    x = torch.randn(4, 3000, generator=torch.Generator().manual_seed(21), dtype=torch.float64)
    x[0] = torch.round(x[0] * 2.0) / 2.0
    x[1, [5, 900, 2999]] = 9.0
    x[3] = 0.0
    return x


@pytest.mark.parametrize("high_q,low_q", [(99.999, 0.001), (99.0, 1.0)])
def test_tied_percentile_along_a_dim_is_kthvalues_element(high_q, low_q):
    """Per channel ([channels, rest], dim 1) and per group ([channels, groups, group], dim -1), a
    tied percentile sends its gradient to the element torch.kthvalue selects (Brevitas's call),
    in tied rows next to rows that are not; values as kthvalue's, scripted too."""
    x = _tied_rows()
    for t, dim in ((x, 1), (x.view(4, 2, 1500), -1)):
        n = t.shape[dim]
        g = torch.randn(t.shape[:-1], generator=torch.Generator().manual_seed(22)).double()
        for op, ref in [
            (
                _built(AbsPercentile, high_q, dim),
                lambda v: torch.kthvalue(v.abs(), _high_k(high_q, n), dim)[0],
            ),
            (
                _built(NegativePercentileOrZero, low_q, dim),
                lambda v: torch.clamp(torch.kthvalue(v, _low_k(low_q, n), dim)[0], max=0.0),
            ),
        ]:
            got_x, want_x = t.clone().requires_grad_(), t.clone().requires_grad_()
            got, want = op(got_x), ref(want_x)
            assert torch.equal(got, want), (type(op).__name__, dim)
            (got * g).sum().backward()
            (want * g).sum().backward()
            assert torch.equal(got_x.grad, want_x.grad), (type(op).__name__, dim)


def test_per_channel_percentile_keeps_a_nan():
    """NaN in, NaN out per channel too (README): a NaN ranks above every number, so the row's
    high percentile is NaN, whatever ties the row also has; other rows keep kthvalue's value."""
    x = _tied_rows()
    x[1, 7] = float("nan")
    got = _built(AbsPercentile, 99.0, 1)(x)
    want = torch.kthvalue(x.abs(), _high_k(99.0, 3000), 1)[0]
    assert got[1].isnan() and not want[1].isnan()
    assert torch.equal(got[[0, 2, 3]], want[[0, 2, 3]])


def test_traced_percentiles_take_no_branch_on_values():
    """torch.jit.trace records no branch on the tie test (a trace would fix it): traces made on
    untied values, per channel and per tensor, still give kthvalue's values on tied ones."""
    untied = torch.randn(4, 3000, generator=torch.Generator().manual_seed(23), dtype=torch.float64)
    x = _tied_rows()
    for dim, want in [
        (1, torch.kthvalue(x.abs(), _high_k(99.0, 3000), 1)[0]),
        (None, torch.kthvalue(x.abs().view(-1), _high_k(99.0, x.numel()))[0]),
    ]:
        traced = torch.jit.trace(AbsPercentile(99.0, dim), (untied,), check_trace=False)
        assert torch.equal(traced(x), want), dim


def _per_tensor_cases():
    """Flat inputs for the per-tensor selection (blocks of 64 values and a tail): the answer in
    a block, in the tail, among many ties and among zeros (a ReLU's output)."""
    gen = torch.Generator().manual_seed(11)
    for n in (64, 65, 127, 128, 6400, 6463, 70001):
        yield f"randn{n}", torch.randn(n, generator=gen, dtype=torch.float64)
    tail = torch.randn(6463, generator=gen, dtype=torch.float64)
    tail[-3:] = torch.tensor([40.0, -50.0, 60.0])  # the extremes sit after the last whole block
    yield "tail", tail
    yield "ties", torch.randint(-3, 4, (9000,), generator=gen).double()
    relu = torch.randn(20000, generator=gen, dtype=torch.float64).clamp(min=0)
    relu[torch.randperm(20000, generator=gen)[:5]] = 7.0  # five equal maxima
    yield "relu", relu
    yield "zeros", torch.zeros(5000, dtype=torch.float64)


@pytest.mark.parametrize("case", list(_per_tensor_cases()), ids=lambda c: c[0])
@pytest.mark.parametrize("high_q,low_q", [(99.999, 0.001), (99.0, 1.0), (98.5, 1.6), (99.9, 0.1)])
def test_per_tensor_percentiles_near_the_ends_match_a_full_sort(case, high_q, low_q):
    """Near either end the per-tensor percentiles select through blocks of 64 (stats_op's
    _kth_index_1d); the value is the full sort's, for float32 and float64, scripted too."""
    _, flat = case
    n = flat.numel()
    for dtype in (torch.float64, torch.float32):
        values = flat.to(dtype)  # exact: the float64 cases hold float32 values or are rounded
        x = values.view(1, n)
        high = _sorted_pick(values.abs(), _high_k(high_q, n), 0)
        low = _min_zero(_sorted_pick(values, _low_k(low_q, n), 0))
        top = _sorted_pick(values, _high_k(high_q, n), 0)
        for module, expected in [
            (AbsPercentile(high_q, None), high),
            (NegativePercentileOrZero(low_q), low),
            (PercentileInterval(low_q, high_q), (top - low).abs()),
        ]:
            got = module(x)
            assert torch.equal(got, expected), (type(module).__name__, dtype)
            assert torch.equal(torch.jit.script(module)(x), got)


def test_per_tensor_low_percentile_sees_past_a_nan():
    """A NaN ranks above every number (as for topk and kthvalue): the minimum of a block that
    also holds a NaN is still found."""
    x = torch.randn(6400, generator=torch.Generator().manual_seed(12))
    x[5], x[7] = -100.0, float("nan")
    low = NegativePercentileOrZero(0.001)(x.view(1, -1))  # k = 1: the minimum
    assert low.item() == -100.0
    assert torch.kthvalue(x, 1).values.item() == -100.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_per_tensor_abs_percentile_by_magnitude_and_nan(dtype):
    """Negative extremes count by magnitude, as kthvalue of |x| has them, in the blocks and in
    the tail; a NaN anywhere gives NaN (the README's NaN policy: it ranks first among the
    blocks, then the pick among the top t propagates it, where kthvalue would skip it)."""
    x = torch.randn(6400, generator=torch.Generator().manual_seed(14)).to(dtype)
    x[70], x[700], x[6399] = -90.0, 80.0, -85.0
    n = x.numel()
    for q in (99.999, 99.95):
        k = _high_k(q, n)
        assert torch.equal(AbsPercentile(q, None)(x.view(1, -1)), torch.kthvalue(x.abs(), k).values)
        x_nan = x.clone()
        x_nan[5] = float("nan")
        assert AbsPercentile(q, None)(x_nan.view(1, -1)).isnan()


def test_one_dimensional_input_keeps_its_reduced_dim():
    x = torch.randn(6400, generator=torch.Generator().manual_seed(13))
    for module in (
        NegativePercentileOrZero(0.1, stats_reduce_dim=0, keepdim=True),
        AbsPercentile(99.9, 0, keepdim=True),
    ):
        assert module(x).shape == (1,)
    assert AbsPercentile(99.9, 0)(x).shape == ()


@pytest.mark.parametrize("q", [99.999, 99.0])
def test_per_tensor_percentile_gradient_reaches_one_element(q):
    """Per tensor, the selected element alone gets the gradient, times its sign (through |x|),
    as selecting it from |x| by hand does; with tied maxima, exactly one of them."""
    x = rand((8, 4000), torch.float64, seed=9).requires_grad_()
    (grad,) = torch.autograd.grad(AbsPercentile(q, None)(x), x)
    flat = x.detach().reshape(-1)
    pick = _sorted_pick(flat.abs(), _high_k(q, flat.numel()), 0)
    expected = ((flat.abs() == pick).double() * torch.sign(flat)).view_as(x)
    assert torch.equal(grad, expected)
    tied = torch.rand(3, 5000, dtype=torch.float64)
    tied[0, :7] = 2.0
    tied[2, -5:] = -2.0
    tied.requires_grad_()
    (grad,) = torch.autograd.grad(AbsPercentile(99.999, None)(tied), tied)
    assert int((grad != 0).sum()) == 1 and float(grad.abs().sum()) == 1.0
    assert float(tied.detach().reshape(-1)[grad.reshape(-1) != 0].abs()) == 2.0


def test_percentile_half_keeps_dtype():
    x = rand((4, 50), torch.float16, seed=5)
    out = AbsPercentile(90.0, 1)(x)
    assert out.dtype == torch.float16
    assert torch.equal(out, _sorted_pick(x.float().abs(), _high_k(90.0, 50), 1).half())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("dim", DIMS)
def test_averages_match_reference(dtype, dim):
    x = rand((6, 37), dtype, seed=6, spread=3.0)
    a = x.abs()
    ref_ave = a.mean() if dim is None else a.mean(dim=dim)
    assert torch.equal(AbsAve(dim)(x), ref_ave)
    if dim is not None:
        m = a.amax(dim=dim)
        assert torch.equal(AbsMaxAve(dim)(x), m.mean())
        assert torch.equal(AbsMaxL2(dim)(x), torch.norm(m, p=2) / math.sqrt(m.numel()))
    eps = 1e-8
    if dim is None:
        ref = a.mean() + 3.0 * torch.sqrt(a.var() + eps)
    else:
        ref = a.mean(dim=dim).view(-1) + 3.0 * torch.sqrt(a.var(dim=dim) + eps).view(-1)
    out = MeanSigmaStd(3.0, dim, dtype=dtype)(x)
    assert torch.equal(out, ref)
    assert torch.equal(_MeanSigmaStdImpl(dim)(x, torch.tensor(3.0, dtype=dtype)), ref)


# ---- gradients -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dim", [None, 1])
def test_gradcheck_smooth_ops(dim):
    x = rand((3, 7), torch.float64, seed=7).requires_grad_()
    assert torch.autograd.gradcheck(AbsAve(dim), (x,))
    assert torch.autograd.gradcheck(MeanSigmaStd(1.5, dim, dtype=torch.float64), (x,))
    if dim is not None:
        assert torch.autograd.gradcheck(AbsMaxL2(dim), (x,))
        assert torch.autograd.gradcheck(AbsMaxAve(dim), (x,))


@pytest.mark.parametrize("dim", [None, 1])
def test_selection_gradients_reach_selected_elements(dim):
    x = rand((4, 25), seed=8)
    g = torch.ones(()) if dim is None else torch.arange(1.0, 5.0)
    cases = [
        (AbsMax(dim), lambda t: _ref_abs_max(t, dim, False)),
        (AbsMinMax(dim), lambda t: _ref_abs_min_max(t, dim, False)),
        (
            AbsPercentile(80.0, dim),
            lambda t: _sorted_pick(
                t.abs().reshape(-1) if dim is None else t.abs(),
                _high_k(80.0, t.numel() if dim is None else t.shape[1]),
                0 if dim is None else 1,
            ),
        ),
    ]
    for op, ref in cases:
        a = x.clone().requires_grad_()
        b = x.clone().requires_grad_()
        op(a).backward(g)
        ref(b).backward(g)
        assert torch.equal(a.grad, b.grad), type(op).__name__


# ---- state, dtype/device, flags, scripting -------------------------------------------------------


def test_ops_have_no_state_and_follow_dtype():
    ops = [
        NegativeMinOrZero(),
        AbsMinMax(),
        NegativePercentileOrZero(1.0),
        PercentileInterval(1.0, 99.0),
        MeanSigmaStd(2.0),
        AbsMax(),
        AbsAve(),
        AbsPercentile(99.0, None),
    ]
    for op in ops:
        assert op.state_dict() == {}
        assert list(op.parameters()) == []
    assert NegativeMinOrZero(dtype=torch.float64).zero().dtype == torch.float64
    assert MeanSigmaStd(2.0).double().sigma().dtype == torch.float64
    # NegativeMinOrZero keeps a (float64) zero bound: float64 inputs give float64 results.
    assert NegativeMinOrZero(1, dtype=torch.float64)(X.double()).dtype == torch.float64


def test_scale_sign_flags():
    assert AbsMax.is_scale_unsigned() is True
    assert issubclass(PercentileInterval, UnsignedScaleStat)
    assert SignedScaleStats.is_scale_unsigned() is False


def test_blocks_follow_jit_switch():
    ops = [
        NegativeMinOrZero(),
        AbsPercentile(99.0, 1),
        NegativePercentileOrZero(1.0),
        PercentileInterval(1.0, 99.0),
        AbsMax(),
        AbsMinMax(),
        AbsMaxAve(1),
        AbsMaxL2(1),
        AbsAve(),
        MeanSigmaStd(1.0),
        _MeanSigmaStdImpl(),
    ]
    for op in ops:
        assert isinstance(op, torch.jit.ScriptModule) == config.JIT_ENABLED


# ---- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build,match",
    [
        (lambda: AbsMax(1.5), r"AbsMax: stats_reduce_dim must be an int or None, got 1.5"),
        (lambda: AbsMax(True), r"AbsMax: stats_reduce_dim must be an int or None, got True"),
        (lambda: AbsMinMax(1, keepdim=1), r"AbsMinMax: keepdim must be a bool, got 1"),
        (lambda: AbsMaxAve(None), r"AbsMaxAve: stats_reduce_dim must be an int, got None"),
        (lambda: AbsMaxL2("1"), r"AbsMaxL2: stats_reduce_dim must be an int, got '1'"),
        (
            lambda: AbsPercentile(101.0, None),
            r"AbsPercentile: high_percentile_q .* \(0, 100\], got 101.0",
        ),
        (lambda: AbsPercentile(0.0, None), r"AbsPercentile: high_percentile_q .* got 0.0"),
        (
            lambda: NegativePercentileOrZero(-1.0),
            r"NegativePercentileOrZero: low_percentile_q .* got -1.0",
        ),
        (
            lambda: PercentileInterval(1.0, float("nan")),
            r"PercentileInterval: high_percentile_q must be finite|"
            r"PercentileInterval: high_percentile_q must be a finite",
        ),
        (
            lambda: MeanSigmaStd(float("inf")),
            r"MeanSigmaStd: sigma must be a finite number, got inf",
        ),
        (
            lambda: MeanSigmaStd(1.0, std_dev_epsilon=-1.0),
            r"_MeanSigmaStdImpl: std_dev_epsilon must be >= 0",
        ),
    ],
)
def test_bad_arguments(build, match):
    with pytest.raises((TypeError, ValueError), match=match):
        build()


def test_deprecated_percentile_q():
    with pytest.raises(
        RuntimeError, match=r"AbsPercentile: percentile_q is deprecated.*high_percentile_q"
    ):
        AbsPercentile(99.0, None, percentile_q=99.0)
