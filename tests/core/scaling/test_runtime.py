"""StatsFromParameterScaling, RuntimeStatsScaling, _StatsScaling and _AffineRescaling against
Brevitas's formulas spelled out with plain torch ops."""

from typing import Optional

import pytest
import torch
from core_refs import (
    RESTRICT,
    RESTRICTS,
    TO_DOMAIN,
    AbsMaxOverDim1,
    AbsMaxOverTensor,
    assert_grad_close,
    assert_scripted,
    backward_same,
    ref_momentum_update,
    signed_clamp_min,
)
from torch import Tensor

from brevitas_cpp import config, jit
from brevitas_cpp.core.function_wrapper import OverOutputChannelView, OverTensorView
from brevitas_cpp.core.restrict_val import LogFloatRestrictValue
from brevitas_cpp.core.scaling import RuntimeStatsScaling, StatsFromParameterScaling
from brevitas_cpp.core.scaling.runtime import _AffineRescaling, _StatsScaling

# ---- written-out references ---------------------------------------------------------------------


def ref_stats_to_scale(
    stats: Tensor,
    threshold: Tensor,
    kind: str,
    min_val: Optional[float],
    affine_weight: Optional[Tensor] = None,
    affine_bias: Optional[Tensor] = None,
    unsigned: bool = True,
) -> Tensor:
    """_StatsScaling: clamp, to the restrict domain, affine, restrict + clamp + abs, / threshold."""
    thr = torch.abs(RESTRICT[kind](TO_DOMAIN[kind](threshold)))
    s = signed_clamp_min(stats, min_val) if min_val is not None else stats
    s = TO_DOMAIN[kind](s)
    if affine_weight is not None:
        s = s * affine_weight + (affine_bias if affine_bias is not None else torch.tensor(0.0))
    s = RESTRICT[kind](s)
    if min_val is not None:
        s = signed_clamp_min(s, min_val)
    s = torch.abs(s) if unsigned else s
    out = s / thr
    return torch.abs(out) if unsigned else out


class MinOverTensor(jit.ScriptModule):
    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        return torch.min(x)


def weight(scale: float = 0.3) -> Tensor:
    g = torch.Generator().manual_seed(5)
    return torch.randn(4, 3, 2, generator=g, dtype=torch.float64).to(torch.float32) * scale


def ref_abs_max(x: Tensor, per_channel: bool, channel_dim: int = 0) -> Tensor:
    if per_channel:
        moved = x.movedim(channel_dim, 0)
        shape = [1] * x.dim()
        shape[channel_dim] = x.shape[channel_dim]
        return torch.abs(moved).reshape(moved.shape[0], -1).max(dim=1)[0].view(shape)
    return torch.abs(x).max()


# ---- _AffineRescaling ---------------------------------------------------------------------------


def test_affine_rescaling_numbers_gradients_state_dict():
    block = _AffineRescaling((3, 1), 1.5, -0.25, None, None)
    assert_scripted(block)
    assert sorted(block.state_dict()) == ["affine_bias.value", "affine_weight"]
    x = torch.randn(3, 4, requires_grad=True)
    out = block(x)
    w = torch.full((3, 1), 1.5, requires_grad=True)
    b = torch.full((3, 1), -0.25, requires_grad=True)
    xr = x.detach().clone().requires_grad_()
    expected = xr * w + b
    assert torch.equal(out, expected)
    g = torch.randn(3, 4)
    out.backward(g)
    expected.backward(g)
    assert_grad_close(block.affine_weight.grad, w.grad)
    assert_grad_close(block.affine_bias.value.grad, b.grad)
    assert_grad_close(x.grad, xr.grad)

    fresh = _AffineRescaling((3, 1), 1.0, 0.0, None, None)
    fresh.load_state_dict(block.state_dict())
    assert torch.equal(fresh(x), out)


def test_affine_rescaling_without_bias_and_dtype():
    block = _AffineRescaling((), 2.0, None, torch.float64, None)
    assert list(block.state_dict()) == ["affine_weight"]
    assert [n for n, _ in block.named_parameters()] == ["affine_weight"]
    x = torch.tensor([1.0, -3.0], dtype=torch.float64)
    assert torch.equal(block(x), x * 2.0 + 0.0)
    assert block(x).dtype == torch.float64


def test_affine_rescaling_ignore_missing_keys(monkeypatch):
    block = _AffineRescaling((), 2.0, None, None, None)
    with pytest.raises(RuntimeError, match="Missing key"):
        block.load_state_dict({})
    monkeypatch.setattr(config, "IGNORE_MISSING_KEYS", True)
    assert block.load_state_dict({}).missing_keys == []


def test_affine_rescaling_bad_arguments():
    with pytest.raises(
        ValueError, match=r"_AffineRescaling: affine_bias_init must be finite, got nan"
    ):
        _AffineRescaling((), 1.0, float("nan"), None, None)
    with pytest.raises(
        ValueError,
        match=r"_AffineRescaling: scaling_shape must be a tuple of "
        r"positive ints",
    ):
        _AffineRescaling((2, -1), 1.0, None, None, None)


# ---- _StatsScaling ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind, min_val, unsigned",
    [
        ("float", None, True),
        ("float", 0.5, False),
        ("log", 0.5, True),
        ("log", None, False),
        ("po2", None, True),
        ("po2", 0.5, False),
        ("int", 0.5, True),
        ("int", None, False),
    ],
)
def test_stats_scaling(kind, min_val, unsigned):
    block = _StatsScaling(
        RESTRICTS[kind](), None, min_val, (3,), 2.0, 0.5, None, None, is_scale_unsigned=unsigned
    )
    assert_scripted(block)
    stats = torch.tensor([0.2, 1.7, 9.0], requires_grad=True)
    thr = torch.tensor(3.0)
    out = block(stats, thr)
    sr = stats.detach().clone().requires_grad_()
    w = torch.full((3,), 2.0, requires_grad=True)
    b = torch.full((3,), 0.5, requires_grad=True)
    expected = ref_stats_to_scale(sr, thr, kind, min_val, w, b, unsigned)
    assert torch.equal(out, expected)
    g = torch.randn(3)
    out.backward(g)
    expected.backward(g)
    assert_grad_close(stats.grad, sr.grad)
    assert_grad_close(block.affine_rescaling.affine_weight.grad, w.grad)
    assert_grad_close(block.affine_rescaling.affine_bias.value.grad, b.grad)
    # Without a threshold the divisor is ones(1).
    no_thr = block(stats.detach())
    assert torch.equal(
        no_thr,
        ref_stats_to_scale(
            stats.detach(), torch.ones(1), kind, min_val, w.detach(), b.detach(), unsigned
        ),
    )


def test_stats_scaling_zero_stat_is_clamped_before_log():
    # Without the clamp, log2(0) = -inf would give a zero scale.
    block = _StatsScaling(LogFloatRestrictValue(), None, 1e-3, (), None, None, None, None)
    out = block(torch.tensor(0.0))
    assert torch.equal(out, ref_stats_to_scale(torch.tensor(0.0), torch.ones(1), "log", 1e-3))
    assert bool(torch.isfinite(out).all()) and bool((out >= 1e-3).all())


# ---- StatsFromParameterScaling --------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind, min_val, per_channel",
    [
        ("float", None, False),
        ("float", 0.9, True),
        ("log", 0.9, False),
        ("log", None, True),
        ("po2", None, False),
        ("po2", 0.9, True),
        ("int", 0.9, False),
        ("int", None, True),
    ],
)
def test_stats_from_parameter_scaling(kind, min_val, per_channel):
    wp = torch.nn.Parameter(weight())
    block = StatsFromParameterScaling(
        AbsMaxOverDim1() if per_channel else AbsMaxOverTensor(),
        OverOutputChannelView() if per_channel else OverTensorView(),
        0,
        [wp],
        (4, 1, 1) if per_channel else (),
        restrict_scaling_impl=RESTRICTS[kind](),
        scaling_affine_rescaling_init=0.75,
        scaling_min_val=min_val,
    )
    assert_scripted(block)
    thr = torch.tensor(127.0)
    out = block(wp, thr)
    wr = wp.detach().clone().requires_grad_()
    shape = (4, 1, 1) if per_channel else ()
    aw = torch.full(shape, 0.75, requires_grad=True)
    expected = ref_stats_to_scale(ref_abs_max(wr, per_channel), thr, kind, min_val, aw)
    assert torch.equal(out, expected) and out.shape == expected.shape
    backward_same(out, expected)
    # The scale follows the weight: gradients reach both the weight and the affine factor.
    assert_grad_close(wp.grad, wr.grad)
    assert_grad_close(block.stats_scaling_impl.affine_rescaling.affine_weight.grad, aw.grad)
    # Recomputed on every call.
    with torch.no_grad():
        wp.mul_(2.0)
    assert torch.equal(
        block(wp, thr),
        ref_stats_to_scale(ref_abs_max(wp.detach(), per_channel), thr, kind, min_val, aw.detach()),
    )
    # Only the affine factor is state; the weight belongs to its layer.
    assert list(block.state_dict()) == ["stats_scaling_impl.affine_rescaling.affine_weight"]


def test_stats_from_parameter_scaling_default_threshold_and_gradcheck():
    wp = torch.nn.Parameter(weight().double())
    block = StatsFromParameterScaling(
        AbsMaxOverDim1(),
        OverOutputChannelView(),
        0,
        [wp],
        (4, 1, 1),
        restrict_scaling_impl=LogFloatRestrictValue(),
        dtype=torch.float64,
    )
    out = block(wp)
    assert torch.equal(out, torch.abs(2.0 ** torch.log2(ref_abs_max(wp.detach(), True))) / 1.0)
    # Smooth in the weight (log domain, no clamps): float64 gradcheck.
    assert torch.autograd.gradcheck(lambda w: block(w), (wp.detach().clone().requires_grad_(),))


def test_stats_from_parameter_scaling_bad_arguments():
    wp = torch.nn.Parameter(weight())
    with pytest.raises(
        RuntimeError, match="StatsFromParameterScaling: enabling shifting of the scale"
    ):
        StatsFromParameterScaling(
            AbsMaxOverTensor(), OverTensorView(), 0, [wp], (), scaling_affine_shifting_init=0.1
        )
    with pytest.raises(
        ValueError,
        match="StatsFromParameterScaling: tracked_parameter_list must "
        "be a non-empty list of tensors",
    ):
        StatsFromParameterScaling(AbsMaxOverTensor(), OverTensorView(), 0, wp, ())


# ---- RuntimeStatsScaling --------------------------------------------------------------------------


def batches(n: int):
    g = torch.Generator().manual_seed(9)
    return [torch.randn(5, 4, 3, generator=g) * (i + 1) for i in range(n)]


@pytest.mark.parametrize(
    "kind, momentum, per_channel",
    [
        ("float", 0.1, False),
        ("float", None, True),
        ("log", None, False),
        ("log", 0.1, True),
        ("po2", 0.1, True),
    ],
)
def test_runtime_stats_scaling_train_and_eval(kind, momentum, per_channel):
    # Per channel: channels are dim 1 of the activation, moved first by the view.
    view = OverOutputChannelView(permute_dims=(1, 0, 2)) if per_channel else OverTensorView()
    shape = (1, 4, 1) if per_channel else ()
    block = RuntimeStatsScaling(
        AbsMaxOverDim1() if per_channel else AbsMaxOverTensor(),
        view,
        shape,
        scaling_affine_rescaling_init=1.25,
        restrict_scaling_impl=RESTRICTS[kind](),
        scaling_stats_momentum=momentum,
        scaling_min_val=1e-2,
    )
    assert_scripted(block)
    thr = torch.tensor(7.0)
    running = None
    aw = torch.full(shape, 1.25, requires_grad=True)
    for step, x in enumerate(batches(3)):
        x = x.requires_grad_()
        out = block(x, thr)
        xr = x.detach().clone().requires_grad_()
        stats = ref_abs_max(xr, per_channel, channel_dim=1)
        expected = ref_stats_to_scale(stats, thr, kind, 1e-2, aw)
        assert torch.equal(out, expected), step
        g = torch.randn(out.shape)
        out.backward(g)
        aw.grad = None
        expected.backward(g)
        # Training scales follow the batch: the input gets a gradient through the statistic.
        assert_grad_close(x.grad, xr.grad)
        assert_grad_close(block.stats_scaling_impl.affine_rescaling.affine_weight.grad, aw.grad)
        block.stats_scaling_impl.affine_rescaling.affine_weight.grad = None
        s = stats.detach()
        # The first batch is multiplied into a buffer of ones.
        running = 1.0 * s if running is None else ref_momentum_update(running, s, step, momentum)
    block.eval()
    out = block(torch.randn(5, 4, 3) * 100.0, thr)
    assert torch.equal(out, ref_stats_to_scale(running, thr, kind, 1e-2, aw.detach()))
    # The running statistic is state: it is saved and restores the eval scale.
    saved = block.state_dict()
    assert sorted(saved) == [
        "runtime_stats.running_stats",
        "stats_scaling_impl.affine_rescaling.affine_weight",
    ]
    fresh = RuntimeStatsScaling(
        AbsMaxOverDim1() if per_channel else AbsMaxOverTensor(),
        view,
        shape,
        scaling_affine_rescaling_init=1.0,
        restrict_scaling_impl=RESTRICTS[kind](),
        scaling_stats_momentum=momentum,
        scaling_min_val=1e-2,
    )
    fresh.load_state_dict(saved)
    fresh.eval()
    assert torch.equal(fresh(torch.randn(5, 4, 3), thr), out)


def test_runtime_stats_scaling_eval_before_training_uses_initial_running_value():
    block = RuntimeStatsScaling(AbsMaxOverTensor(), OverTensorView(), ())
    block.eval()
    assert torch.equal(block(torch.randn(3, 4) * 50.0), torch.tensor([1.0]))


def test_runtime_stats_scaling_signed_and_bad_arguments():
    block = RuntimeStatsScaling(MinOverTensor(), OverTensorView(), (), is_scale_unsigned=False)
    x = torch.tensor([[-3.0, 2.0]])
    # The scale keeps its sign; the threshold is always taken as |threshold|.
    assert torch.equal(block(x, torch.tensor(-2.0)), torch.tensor(-1.5))
    unsigned = RuntimeStatsScaling(MinOverTensor(), OverTensorView(), ())
    assert torch.equal(unsigned(x, torch.tensor(-2.0)), torch.tensor(1.5))
    with pytest.raises(
        ValueError,
        match=r"RuntimeStatsScaling: scaling_stats_momentum must be None "
        r"\(cumulative average\) or a float in \[0, 1\], got 1.5",
    ):
        RuntimeStatsScaling(AbsMaxOverTensor(), OverTensorView(), (), scaling_stats_momentum=1.5)
    with pytest.raises(
        TypeError,
        match="RuntimeStatsScaling: scaling_stats_input_view_shape_impl "
        "must be a torch.nn.Module, got None",
    ):
        RuntimeStatsScaling(AbsMaxOverTensor(), None, ())
    with pytest.raises(RuntimeError, match="RuntimeStatsScaling: enabling shifting of the scale"):
        RuntimeStatsScaling(
            AbsMaxOverTensor(), OverTensorView(), (), scaling_affine_shifting_init=0.5
        )
