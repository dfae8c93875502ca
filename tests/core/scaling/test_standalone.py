"""ConstScaling, ParameterScaling, ParameterFromStatsFromParameterScaling and the truncation
scales, against Brevitas's formulas spelled out with plain torch ops."""

import math
from typing import Callable, Optional

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
    signed_clamp_min,
)
from helpers import brevitas_format
from torch import Tensor

from brevitas_cpp import config
from brevitas_cpp.core.function_wrapper import Identity, OverOutputChannelView, OverTensorView
from brevitas_cpp.core.restrict_val import LogFloatRestrictValue, PowerOfTwoRestrictValue
from brevitas_cpp.core.scaling import (
    ConstScaling,
    IntScaling,
    ParameterFromStatsFromParameterScaling,
    ParameterScaling,
    PowerOfTwoIntScaling,
    TruncMsbScaling,
    TruncScalingWrapper,
)

# ---- written-out references ---------------------------------------------------------------------


def restrict_clamp(v: Tensor, kind: str, min_val: Optional[float], unsigned: bool = True) -> Tensor:
    v = RESTRICT[kind](v)
    if min_val is not None:
        v = signed_clamp_min(v, min_val)
    return torch.abs(v) if unsigned else v


def restricted_threshold(threshold: Tensor, kind: str) -> Tensor:
    return torch.abs(RESTRICT[kind](TO_DOMAIN[kind](threshold)))


def ref_held_scale(
    value: Tensor, threshold: Tensor, kind: str, min_val: Optional[float], unsigned: bool = True
) -> Tensor:
    """ConstScaling / ParameterScaling: value is in the restrict domain."""
    out = restrict_clamp(value, kind, min_val, unsigned) / restricted_threshold(threshold, kind)
    return torch.abs(out) if unsigned else out


def finite_difference_check(fn: Callable[[], Tensor], param: Tensor, eps: float = 1e-6) -> None:
    """d sum(fn() * g) / d param by autograd equals central differences (float64)."""
    assert param.dtype == torch.float64
    g = torch.randn(fn().shape, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    param.grad = None
    (fn() * g).sum().backward()
    analytic = param.grad.clone()
    numeric = torch.zeros_like(analytic)
    flat = param.data.view(-1)
    for i in range(flat.numel()):
        orig = flat[i].item()
        with torch.no_grad():
            flat[i] = orig + eps
            plus = (fn() * g).sum().item()
            flat[i] = orig - eps
            minus = (fn() * g).sum().item()
            flat[i] = orig
        numeric.view(-1)[i] = (plus - minus) / (2 * eps)
    torch.testing.assert_close(analytic, numeric, rtol=1e-5, atol=1e-8)


THRESHOLDS = [None, torch.tensor(127.0), torch.tensor([[3.0], [2.0], [6.0], [100.0]])]
THRESHOLD_IDS = ["no_threshold", "threshold_127", "threshold_per_channel"]
MIN_VALS = [None, 0.25]
# Every restriction with every threshold, the lower bound on for half of them (scripting each
# block takes time under BREVITAS_JIT=1, so the full product is not run).
KIND_THRESHOLD_MIN_VAL = [
    pytest.param(
        kind, thr, MIN_VALS[(k + t) % 2], id=f"{kind}-{tid}-min_val_{MIN_VALS[(k + t) % 2]}"
    )
    for k, kind in enumerate(["float", "log", "po2", "int"])
    for t, (thr, tid) in enumerate(zip(THRESHOLDS, THRESHOLD_IDS))
]


def ones_threshold(placeholder: Tensor) -> Tensor:
    return torch.ones(1).type_as(placeholder)


# ---- ConstScaling ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind, threshold, min_val", KIND_THRESHOLD_MIN_VAL)
def test_const_scaling_float_init(kind, threshold, min_val):
    init = 0.37
    block = ConstScaling(init, restrict_scaling_impl=RESTRICTS[kind](), scaling_min_val=min_val)
    assert_scripted(block)
    x = torch.randn(4, 3)
    # A float init goes to the restrict domain in double precision, then to float32.
    domain = math.log2(init) if kind in ("log", "po2") else init
    thr = ones_threshold(x) if threshold is None else threshold
    expected = ref_held_scale(torch.tensor(domain), thr, kind, min_val)
    out = block(x) if threshold is None else block(x, threshold)
    assert torch.equal(out, expected) and out.shape == expected.shape
    assert not out.requires_grad
    assert block.state_dict() == {}


@pytest.mark.parametrize("kind", list(RESTRICTS))
@pytest.mark.parametrize("min_val", MIN_VALS)
def test_const_scaling_per_channel_tensor_init(kind, min_val):
    init = torch.tensor([0.2, 0.5, 3.3, 0.1]).view(4, 1)
    block = ConstScaling(init, restrict_scaling_impl=RESTRICTS[kind](), scaling_min_val=min_val)
    thr = torch.tensor(15.0)
    expected = ref_held_scale(TO_DOMAIN[kind](init), thr, kind, min_val)
    out = block(torch.randn(4, 3), thr)
    assert out.shape == (4, 1) and torch.equal(out, expected)
    # The constant is rebuilt from the settings: nothing saved, nothing expected on load.
    fresh = ConstScaling(init, restrict_scaling_impl=RESTRICTS[kind](), scaling_min_val=min_val)
    result = fresh.load_state_dict({}, strict=True)
    assert result.missing_keys == [] and result.unexpected_keys == []


def test_const_scaling_signed_keeps_sign_and_follows_dtype():
    block = ConstScaling(-0.5, is_scale_unsigned=False, dtype=torch.float64)
    out = block(torch.randn(3, dtype=torch.float64))
    assert out.dtype == torch.float64 and torch.equal(
        out, torch.tensor([-0.5], dtype=torch.float64)
    )
    assert torch.equal(ConstScaling(-0.5)(torch.randn(3)), torch.tensor([0.5]))


def test_const_scaling_min_val_bounds_the_scale():
    assert torch.equal(ConstScaling(1.0, scaling_min_val=3.0)(torch.empty(1)), torch.tensor([3.0]))
    po2 = ConstScaling(3.0, restrict_scaling_impl=PowerOfTwoRestrictValue())
    assert torch.equal(po2(torch.empty(1)), torch.tensor([4.0]))


@pytest.mark.parametrize("block_cls", [ConstScaling, ParameterScaling])
def test_bad_scaling_init_is_rejected(block_cls):
    name = block_cls.__name__
    with pytest.raises(ValueError, match=f"{name}: scaling_init must be finite, got nan"):
        block_cls(float("nan"))
    with pytest.raises(ValueError, match=f"{name}: scaling_init must be finite"):
        block_cls(torch.tensor([1.0, float("inf")]))
    with pytest.raises(
        ValueError, match=f"{name}: scaling_init must be positive with LogFloatRestrictValue"
    ):
        block_cls(-1.0, restrict_scaling_impl=LogFloatRestrictValue())
    with pytest.raises(
        ValueError, match=f"{name}: scaling_init must be positive with PowerOfTwoRestrictValue"
    ):
        block_cls(torch.tensor([0.5, 0.0]), restrict_scaling_impl=PowerOfTwoRestrictValue())
    with pytest.raises(
        TypeError, match=f"{name}: scaling_init must be a float or a tensor, got 'a'"
    ):
        block_cls("a")
    with pytest.raises(
        TypeError, match=f"{name}: restrict_scaling_impl must be a restrict-value block"
    ):
        block_cls(1.0, restrict_scaling_impl=Identity())


# ---- ParameterScaling -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind, threshold, min_val", KIND_THRESHOLD_MIN_VAL)
@pytest.mark.parametrize("scaling_shape", [None, (4, 1)], ids=["per_tensor", "per_channel"])
def test_parameter_scaling_numbers_and_gradient(kind, threshold, min_val, scaling_shape):
    init = 0.37
    block = ParameterScaling(
        init,
        scaling_shape=scaling_shape,
        restrict_scaling_impl=RESTRICTS[kind](),
        scaling_min_val=min_val,
    )
    assert_scripted(block)
    expected_value = TO_DOMAIN[kind](torch.tensor(init))
    if scaling_shape is not None:
        expected_value = torch.full(scaling_shape, expected_value.item())
    assert torch.equal(block.value.detach(), expected_value)
    assert [n for n, _ in block.named_parameters()] == ["value"]

    x = torch.randn(4, 3)
    thr = ones_threshold(x) if threshold is None else threshold
    leaf = expected_value.clone().requires_grad_()
    expected = ref_held_scale(leaf, thr, kind, min_val)
    out = block(x) if threshold is None else block(x, threshold)
    assert torch.equal(out, expected.detach()) and out.shape == expected.shape
    backward_same(out, expected)
    assert_grad_close(block.value.grad, leaf.grad)


@pytest.mark.parametrize("kind", ["float", "log"])
def test_parameter_scaling_gradcheck_float64(kind):
    block = ParameterScaling(
        torch.tensor([0.3, 0.7, 1.9]),
        scaling_shape=(3,),
        restrict_scaling_impl=RESTRICTS[kind](),
        dtype=torch.float64,
    )
    thr = torch.tensor([2.0, 5.0, 0.5], dtype=torch.float64)
    x = torch.empty(3, dtype=torch.float64)
    finite_difference_check(lambda: block(x, thr), block.value)


def test_parameter_scaling_tensor_init_shapes():
    per_channel = torch.tensor([0.5, 1.5, 2.5]).view(3, 1)
    block = ParameterScaling(per_channel, scaling_shape=(3, 1))
    assert torch.equal(block.value.detach(), per_channel)
    scalar_broadcast = ParameterScaling(torch.tensor(0.5), scaling_shape=(3, 1))
    assert torch.equal(scalar_broadcast.value.detach(), torch.full((3, 1), 0.5))
    # The init is copied: learning does not write into the caller's tensor.
    with torch.no_grad():
        block.value.mul_(2.0)
    assert torch.equal(per_channel, torch.tensor([0.5, 1.5, 2.5]).view(3, 1))
    with pytest.raises(
        RuntimeError,
        match=r"ParameterScaling: scaling_init has shape \(3,\), which "
        r"is neither a scalar \(\) nor scaling_shape \(3, 1\)",
    ):
        ParameterScaling(torch.ones(3), scaling_shape=(3, 1))
    with pytest.raises(
        ValueError,
        match=r"ParameterScaling: scaling_shape must be a tuple of "
        r"positive ints \(\(\) for a scalar\), got 3",
    ):
        ParameterScaling(1.0, scaling_shape=3)


def test_parameter_scaling_dtype():
    block = ParameterScaling(0.5, scaling_shape=(2,), dtype=torch.float64)
    assert block.value.dtype == torch.float64
    assert block(torch.empty(1, dtype=torch.float64)).dtype == torch.float64


def test_parameter_scaling_state_dict_round_trip():
    block = ParameterScaling(0.5, scaling_shape=(3,), restrict_scaling_impl=LogFloatRestrictValue())
    with torch.no_grad():
        block.value.copy_(torch.tensor([1.0, -1.0, 2.0]))
    saved = block.state_dict()
    assert list(saved) == ["value"]
    fresh = ParameterScaling(0.5, scaling_shape=(3,), restrict_scaling_impl=LogFloatRestrictValue())
    fresh.load_state_dict(saved)
    assert torch.equal(fresh(torch.empty(1)), torch.tensor([2.0, 0.5, 4.0]))
    # Older checkpoints call it learned_value.
    legacy = ParameterScaling(0.5, scaling_shape=(3,))
    legacy.load_state_dict({"learned_value": torch.tensor([7.0, 8.0, 9.0])})
    assert torch.equal(legacy.value.detach(), torch.tensor([7.0, 8.0, 9.0]))
    with pytest.raises(RuntimeError, match="Missing key"):
        ParameterScaling(0.5).load_state_dict({})


def test_parameter_scaling_ignore_missing_keys(monkeypatch):
    monkeypatch.setattr(config, "IGNORE_MISSING_KEYS", True)
    block = ParameterScaling(0.5)
    result = block.load_state_dict({}, strict=True)
    assert result.missing_keys == []
    assert torch.equal(block.value.detach(), torch.tensor(0.5))


def test_parameter_scaling_train_eval_alike():
    block = ParameterScaling(0.5, scaling_shape=(2,))
    train_out = block(torch.randn(3))
    block.eval()
    assert torch.equal(block(torch.randn(3)), train_out.detach())


# ---- ParameterFromStatsFromParameterScaling -------------------------------------------------------


def weight() -> Tensor:
    g = torch.Generator().manual_seed(11)
    return torch.randn(4, 3, 2, generator=g) * 0.3


def stats_block(
    per_channel: bool,
    wp: Tensor,
    kind: str = "float",
    min_val: Optional[float] = None,
    affine: Optional[float] = None,
    shift: Optional[float] = None,
    **kwargs,
) -> ParameterFromStatsFromParameterScaling:
    return ParameterFromStatsFromParameterScaling(
        scaling_stats_impl=AbsMaxOverDim1() if per_channel else AbsMaxOverTensor(),
        scaling_stats_input_view_shape_impl=OverOutputChannelView()
        if per_channel
        else OverTensorView(),
        scaling_stats_input_concat_dim=0,
        tracked_parameter_list=[wp],
        scaling_shape=(4, 1, 1) if per_channel else (),
        restrict_scaling_impl=RESTRICTS[kind](),
        scaling_min_val=min_val,
        scaling_affine_rescaling_init=affine,
        scaling_affine_shifting_init=shift,
        **kwargs,
    )


def ref_weight_stats(w: Tensor, per_channel: bool) -> Tensor:
    if per_channel:
        return torch.abs(w).reshape(4, -1).max(dim=1)[0].view(4, 1, 1)
    return torch.abs(w).max()


def ref_initial_value(
    w: Tensor,
    per_channel: bool,
    kind: str,
    min_val: Optional[float],
    affine: Optional[float],
    shift: Optional[float],
) -> Tensor:
    stats = ref_weight_stats(w, per_channel)
    if min_val is not None:
        stats = signed_clamp_min(stats, min_val)
    stats = TO_DOMAIN[kind](stats)
    if affine is not None:
        stats = stats * affine + (shift if shift is not None else 0.0)
    return stats


NO_AFFINE, RESCALE, RESCALE_SHIFT = (None, None), (1.5, None), (1.5, -0.25)


# Each restriction per tensor and per channel, with and without a lower bound, each affine setting.
@pytest.mark.parametrize(
    "kind, min_val, per_channel, affine",
    [
        ("float", None, False, NO_AFFINE),
        ("float", 0.9, True, RESCALE_SHIFT),
        ("log", 0.9, False, RESCALE),
        ("log", None, True, RESCALE_SHIFT),
        ("po2", None, False, RESCALE_SHIFT),
        ("po2", 0.9, True, NO_AFFINE),
        ("int", 0.9, False, RESCALE_SHIFT),
        ("int", None, True, RESCALE),
    ],
)
def test_parameter_from_stats_initialises_then_learns(kind, min_val, per_channel, affine):
    rescale, shift = affine
    wp = torch.nn.Parameter(weight())
    block = stats_block(per_channel, wp, kind, min_val, rescale, shift)
    assert_scripted(block)
    # Before the first call the value is the placeholder and is not saved.
    assert "value" not in block.state_dict()
    thr = torch.tensor(7.0)
    out = block(wp, thr)

    init = ref_initial_value(wp.detach(), per_channel, kind, min_val, rescale, shift)
    assert torch.equal(block.value.detach(), init)
    leaf = init.clone().requires_grad_()
    expected = torch.abs(restrict_clamp(leaf, kind, min_val) / restricted_threshold(thr, kind))
    assert torch.equal(out, expected.detach())
    backward_same(out, expected)
    assert_grad_close(block.value.grad, leaf.grad)
    # The scale is learned: the weight gets no gradient through it.
    assert wp.grad is None or torch.count_nonzero(wp.grad) == 0

    # Later calls use the learned value, not fresh statistics.
    with torch.no_grad():
        wp.mul_(10.0)
        block.value.add_(0.5)
    leaf2 = (init + 0.5).requires_grad_()
    expected2 = torch.abs(restrict_clamp(leaf2, kind, min_val) / restricted_threshold(thr, kind))
    assert torch.equal(block(wp, thr), expected2.detach())


def test_parameter_from_stats_affine_parameters_get_no_gradient_after_init():
    # The affine rescaling only shapes the initial value; afterwards value alone is learned.
    wp = torch.nn.Parameter(weight())
    block = stats_block(False, wp, affine=1.5, shift=0.1)
    names = sorted(n for n, _ in block.named_parameters())
    assert names == [
        "stats_scaling_impl.affine_rescaling.affine_bias.value",
        "stats_scaling_impl.affine_rescaling.affine_weight",
        "value",
    ]
    block(wp).sum().backward()
    assert block.value.grad is not None


def test_parameter_from_stats_state_dict():
    wp = torch.nn.Parameter(weight())
    block = stats_block(True, wp, "log")
    assert block.state_dict() == {}
    block(wp)
    saved = block.state_dict()
    assert list(saved) == ["value"]
    assert torch.equal(saved["value"], torch.log2(ref_weight_stats(wp.detach(), True)))

    # Loading marks the block initialised: the loaded value is used, no statistics are taken.
    fresh = stats_block(True, torch.nn.Parameter(weight() * 100.0), "log")
    result = fresh.load_state_dict(saved, strict=True)
    assert result.missing_keys == [] and result.unexpected_keys == []
    out = fresh(torch.nn.Parameter(weight() * 100.0))
    assert torch.equal(out, torch.abs(2.0 ** saved["value"]) / 1.0)
    assert torch.equal(fresh.value.detach(), saved["value"])

    # Loading without value (strict=False) leaves it to be initialised from statistics: a
    # checkpoint with the block misses it (as in Brevitas), one without it (a float model's) not.
    lazy = stats_block(True, wp, "log")
    assert lazy.load_state_dict({}, strict=True).missing_keys == []
    result = lazy.load_state_dict(brevitas_format({}), strict=False)
    assert result.missing_keys == ["value"]
    lazy(wp)
    assert torch.equal(lazy.value.detach(), saved["value"])


def test_parameter_from_stats_full_state_dict_switch(monkeypatch):
    wp = torch.nn.Parameter(weight())
    monkeypatch.setattr(config, "_FULL_STATE_DICT", True, raising=False)
    assert list(stats_block(False, wp).state_dict()) == ["value"]


def test_parameter_from_stats_local_loss_mode_does_not_initialise():
    wp = torch.nn.Parameter(weight())
    block = stats_block(False, wp, "log", affine=2.0)
    block.local_loss_mode = True
    thr = torch.tensor(3.0)
    out = block(wp, thr)
    # The full statistics-to-scale path (with affine rescaling in the log domain).
    stats = torch.log2(ref_weight_stats(wp.detach(), False)) * 2.0
    expected = torch.abs(torch.abs(2.0**stats) / torch.abs(2.0 ** torch.log2(thr)))
    assert torch.equal(out, expected)
    assert not block.init_done and "value" not in block.state_dict()
    # value takes part in the graph with a zero gradient (DDP with find_unused_parameters=False).
    out.sum().backward()
    assert torch.equal(block.value.grad, torch.zeros(()))


def test_parameter_from_stats_multiple_tracked_parameters():
    w0, w1 = torch.nn.Parameter(weight()), torch.nn.Parameter(weight() * 3.0)
    block = ParameterFromStatsFromParameterScaling(
        AbsMaxOverTensor(), OverTensorView(), 0, [w0, w1], ()
    )
    # x is ignored when the block holds the parameters itself.
    block(torch.zeros(4, 3, 2))
    assert torch.equal(block.value.detach(), torch.abs(w1.detach()).max())
    # The tracked parameters belong to their layer, not to the scale's state_dict.
    assert list(block.state_dict()) == ["value"]


def test_parameter_from_stats_bad_arguments():
    wp = torch.nn.Parameter(weight())
    name = "ParameterFromStatsFromParameterScaling"
    with pytest.raises(
        RuntimeError,
        match=rf"{name}: enabling shifting of the scale "
        r"\(scaling_affine_shifting_init=0.5\) requires enabling "
        r"affine rescaling first \(scaling_affine_rescaling_init "
        r"is None\)",
    ):
        stats_block(False, wp, shift=0.5)
    with pytest.raises(
        ValueError, match=f"{name}: tracked_parameter_list must be a non-empty list"
    ):
        ParameterFromStatsFromParameterScaling(AbsMaxOverTensor(), OverTensorView(), 0, [], ())
    with pytest.raises(ValueError, match=f"{name}: scaling_shape must be a tuple of positive ints"):
        ParameterFromStatsFromParameterScaling(
            AbsMaxOverTensor(), OverTensorView(), 0, [wp], (4, 0)
        )
    with pytest.raises(TypeError, match=f"{name}: scaling_stats_impl must be a torch.nn.Module"):
        ParameterFromStatsFromParameterScaling("max", OverTensorView(), 0, [wp], ())
    with pytest.raises(ValueError, match="_AffineRescaling: affine_weight_init must be finite"):
        stats_block(False, wp, affine=float("inf"))


# ---- truncation scales ----------------------------------------------------------------------------


def test_trunc_msb_scaling():
    block = TruncMsbScaling()
    assert_scripted(block)
    x = torch.randn(4)
    assert torch.equal(block(x, torch.tensor(8.0), torch.tensor(4.0), True), torch.tensor(16.0))
    assert torch.equal(
        block(x, torch.tensor(4.0), torch.tensor(6.0), torch.tensor(False)), torch.tensor(0.25)
    )
    # Per-channel bit widths broadcast.
    out = block(x, torch.tensor([8.0, 10.0]), torch.tensor(4.0), True)
    assert torch.equal(out, torch.tensor([16.0, 64.0]))


@pytest.mark.parametrize("scaling_init", [0.01, 3.0, 1e4])
def test_trunc_scaling_wrapper(scaling_init):
    block = TruncScalingWrapper(PowerOfTwoIntScaling(), ParameterScaling(scaling_init))
    assert_scripted(block)
    for input_bit_width, output_bit_width in [(16.0, 8.0), (8.0, 8.0), (4.0, 8.0)]:
        for signed in (True, False):
            ib, ob = torch.tensor(input_bit_width), torch.tensor(output_bit_width)
            out = block(torch.randn(5), ib, ob, signed)
            threshold = 2.0 ** (output_bit_width - 1) if signed else 2.0**output_bit_width
            scale = scaling_init / threshold  # exact: threshold is a power of two
            msb = 2.0 ** (input_bit_width - output_bit_width)
            expected = min(max(scale, min(msb, 1.0)), max(msb, 1.0))
            assert torch.equal(out, torch.tensor(expected))
            # The learned scale inside gets the gradient where it is not clamped.
            block.scaling_impl.value.grad = None
            out.sum().backward()
            inside = min(msb, 1.0) < scale < max(msb, 1.0)
            assert (block.scaling_impl.value.grad.item() != 0.0) == inside


def test_trunc_scaling_wrapper_with_int_scaling_threshold():
    block = TruncScalingWrapper(IntScaling(narrow_range=True), ConstScaling(254.0))
    out = block(torch.randn(2), torch.tensor(12.0), torch.tensor(8.0), True)
    assert torch.equal(out, torch.tensor(2.0))  # 254 / 127


def test_trunc_scaling_wrapper_bad_arguments():
    with pytest.raises(
        TypeError, match="TruncScalingWrapper: scaling_impl must be a torch.nn.Module, got 3"
    ):
        TruncScalingWrapper(PowerOfTwoIntScaling(), 3)
