"""Function-wrapper blocks: each equals its written-out formula, has the documented gradient,
and is a TorchScript module under BREVITAS_JIT=1."""

import pytest
import torch

from brevitas_cpp import config
from brevitas_cpp.core import function_wrapper as fw

X = torch.tensor([-2.5, -1.5, -0.5, -0.0, 0.0, 0.4, 0.5, 1.5, 2.5, 3.7])

ROUNDERS = {
    fw.RoundSte: torch.round,
    fw.FloorSte: torch.floor,
    fw.CeilSte: torch.ceil,
    fw.RoundToZeroSte: lambda x: torch.sign(x) * torch.floor(torch.abs(x)),
    # Half to even, except that a negative exact half rounds up (toward +inf).
    fw.DPURoundSte: lambda x: torch.where(
        (x < 0) & (x - torch.floor(x) == 0.5), torch.ceil(x), torch.round(x)
    ),
}


def _grad(module, x, *args):
    x = x.clone().requires_grad_(True)
    module(x, *args).backward(torch.arange(1.0, x.numel() + 1).reshape(x.shape))
    return x.grad


@pytest.mark.parametrize("cls", list(ROUNDERS), ids=lambda c: c.__name__)
def test_rounders_match_formula_with_identity_gradient(cls):
    block = cls()
    assert torch.equal(block(X), ROUNDERS[cls](X))
    assert torch.equal(_grad(block, X), torch.arange(1.0, X.numel() + 1))


def test_tensor_clamp_ste_passes_gradient_through_and_tensor_clamp_masks_it():
    lo, hi = torch.tensor(-1.0), torch.tensor(2.0)
    expected = torch.where(X > hi, hi, torch.where(X < lo, lo, X))
    assert torch.equal(fw.TensorClampSte()(X, lo, hi), expected)
    assert torch.equal(fw.TensorClamp()(X, lo, hi), expected)
    g = torch.arange(1.0, X.numel() + 1)
    assert torch.equal(_grad(fw.TensorClampSte(), X, lo, hi), g)
    inside = ((X >= lo) & (X <= hi)).float()
    assert torch.equal(_grad(fw.TensorClamp(), X, lo, hi), g * inside)


def test_inplace_tensor_clamp_ste_clips_its_input_and_passes_the_gradient():
    x = torch.nn.Parameter(X.clone())  # a weight, as in BinaryConnect
    out = fw.InplaceTensorClampSte()(x, torch.tensor(-1.0), torch.tensor(1.0))
    assert torch.equal(x.detach(), torch.clamp(X, -1.0, 1.0))
    assert torch.equal(out, torch.clamp(X, -1.0, 1.0))
    g = torch.arange(1.0, X.numel() + 1)
    out.backward(g)
    assert torch.equal(x.grad, g)


def test_scalar_clamps():
    assert torch.equal(fw.ScalarClamp(-1.0, 1.0)(X), torch.clamp(X, -1.0, 1.0))
    assert torch.equal(fw.ClampMin(0.1)(X), torch.clamp_min(X, 0.1))
    block = fw.ScalarClampMinSte(0.1)
    assert torch.equal(block(X), torch.clamp_min(X, 0.1))
    assert torch.equal(_grad(block, X), torch.arange(1.0, X.numel() + 1))
    with pytest.raises(ValueError, match="ScalarClamp: min_val"):
        fw.ScalarClamp(1.0, -1.0)


def test_scalar_signed_clamp_min_keeps_sign_and_magnitude_floor():
    block = fw.ScalarSignedClampMinSte(-0.6)  # the sign of min_val is irrelevant
    sign = torch.where(X >= 0, 1.0, -1.0)
    assert torch.equal(block(X), sign * torch.clamp_min(torch.abs(X), 0.6))
    with pytest.raises(ValueError, match="ScalarSignedClampMinSte: min_val must be non-zero"):
        fw.ScalarSignedClampMinSte(0.0)


def test_misc_blocks():
    pos = torch.tensor([0.25, 1.0, 3.0])
    assert torch.equal(fw.Identity()(X), X)
    assert torch.equal(fw.Abs()(X), torch.abs(X))
    assert torch.equal(fw.PowerOfTwo()(X), torch.pow(2.0, X))
    assert torch.equal(fw.LogTwo()(pos), torch.log2(pos))
    y = pos.clone()
    assert fw.InplaceLogTwo()(y) is y and torch.equal(y, torch.log2(pos))


@pytest.mark.parametrize(
    "view, expected_shape",
    [
        (fw.OverTensorView(), (2 * 3 * 4 * 5,)),
        (fw.OverOutputChannelView(), (2, 60)),
        (fw.OverOutputChannelView(permute_dims=(1, 0, 2, 3)), (3, 40)),
        (fw.OverBatchOverTensorView(), (2, 60)),
        (fw.OverBatchOverOutputChannelView(), (2, 3, 20)),
        (fw.OverOutputFeaturesView(), (24, 5)),
    ],
    ids=["tensor", "channel", "channel_permuted", "batch", "batch_channel", "features"],
)
def test_views(view, expected_shape):
    x = torch.arange(120.0).reshape(2, 3, 4, 5)
    y = view(x)
    assert tuple(y.shape) == expected_shape
    if isinstance(view, fw.OverOutputChannelView) and expected_shape[0] == 3:
        assert torch.equal(y, x.permute(1, 0, 2, 3).reshape(3, -1))
    else:
        assert torch.equal(y.flatten(), x.flatten())


def test_stats_input_view_shape_impl_names():
    impl = fw.StatsInputViewShapeImpl
    assert impl.OVER_TENSOR is fw.OverTensorView
    assert impl.OVER_OUTPUT_CHANNELS is fw.OverOutputChannelView
    assert impl.OVER_BATCH_OVER_TENSOR is fw.OverBatchOverTensorView
    assert impl.OVER_BATCH_OVER_OUTPUT_CHANNELS is fw.OverBatchOverOutputChannelView
    assert impl.OVER_OUTPUT_FEATURES is fw.OverOutputFeaturesView


BLOCKS = [
    fw.RoundSte(),
    fw.FloorSte(),
    fw.CeilSte(),
    fw.RoundToZeroSte(),
    fw.DPURoundSte(),
    fw.TensorClamp(),
    fw.TensorClampSte(),
    fw.ScalarClamp(0.0, 1.0),
    fw.ClampMin(0.0),
    fw.ScalarClampMinSte(0.0),
    fw.ScalarSignedClampMinSte(1.0),
    fw.Identity(),
    fw.Abs(),
    fw.PowerOfTwo(),
    fw.LogTwo(),
    fw.PermuteDims((1, 0)),
    fw.OverTensorView(),
    fw.OverOutputChannelView(),
    fw.OverBatchOverTensorView(),
    fw.OverBatchOverOutputChannelView(),
    fw.OverOutputFeaturesView(),
]


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: type(b).__name__)
def test_block_kind_follows_jit_switch(block):
    assert isinstance(block, torch.jit.ScriptModule) == config.JIT_ENABLED
    assert isinstance(block, torch.nn.Module)
