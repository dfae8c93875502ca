"""View-shape helpers of brevitas_cpp.function (Brevitas's function/shape.py), eager and scripted."""

from typing import Tuple

import pytest
import torch

import brevitas_cpp.function as BF
from brevitas_cpp.function import (
    over_batch_over_output_channels,
    over_batch_over_tensor,
    over_output_channels,
    over_output_features,
    over_tensor,
)

# Brevitas's documented values on torch.randn([2, 3, 4, 3]). Brevitas's docstring of
# over_output_features says (24, 3) but its code returns (-1, x.shape[-1]); the view is (24, 3).
DOCUMENTED = {
    "over_tensor": (-1, (72,)),
    "over_output_channels": ((2, -1), (2, 36)),
    "over_batch_over_tensor": ((2, -1), (2, 36)),
    "over_batch_over_output_channels": ((2, 3, -1), (2, 3, 12)),
    "over_output_features": ((-1, 3), (24, 3)),
}
FUNCS = {
    "over_tensor": over_tensor,
    "over_output_channels": over_output_channels,
    "over_batch_over_tensor": over_batch_over_tensor,
    "over_batch_over_output_channels": over_batch_over_output_channels,
    "over_output_features": over_output_features,
}


def _scripted(name):
    return torch.jit.script(FUNCS[name])


@pytest.mark.parametrize("scripted", [False, True], ids=["eager", "scripted"])
@pytest.mark.parametrize("name", list(FUNCS))
def test_documented_values(name, scripted):
    fn = _scripted(name) if scripted else FUNCS[name]
    x = torch.randn(2, 3, 4, 3)
    shape, viewed = DOCUMENTED[name]
    s = fn(x)
    assert s == shape
    assert type(s) is type(shape)
    assert x.view(s).shape == viewed


def expected_shape(name, x):
    """Written out from the helpers' definitions in Brevitas."""
    if name == "over_tensor":
        return -1
    if name in ("over_output_channels", "over_batch_over_tensor"):
        return (x.shape[0], -1)
    if name == "over_batch_over_output_channels":
        return (x.shape[0], x.shape[1], -1)
    return (-1, x.shape[-1])


@pytest.mark.parametrize(
    "shape", [(5, 2), (4, 3, 2), (2, 3, 4, 5), (1, 1, 7), (6, 2, 1, 1, 3)], ids=str
)
@pytest.mark.parametrize("name", list(FUNCS))
def test_other_shapes(name, shape):
    x = torch.randn(shape)
    s = FUNCS[name](x)
    assert s == expected_shape(name, x)
    v = x.view(s)
    assert v.numel() == x.numel()
    if name == "over_output_channels" or name == "over_batch_over_tensor":
        assert v.shape == (shape[0], x.numel() // shape[0])
    elif name == "over_batch_over_output_channels":
        assert v.shape == (shape[0], shape[1], x.numel() // (shape[0] * shape[1]))
    elif name == "over_output_features":
        assert v.shape == (x.numel() // shape[-1], shape[-1])
    else:
        assert v.shape == (x.numel(),)
    # Per-channel statistics along the kept dims, as quantizers use them.
    if name == "over_output_channels":
        torch.testing.assert_close(x.view(s).amax(dim=1), x.flatten(1).amax(dim=1), rtol=0, atol=0)


def test_exported_names():
    for name in FUNCS:
        assert getattr(BF, name) is FUNCS[name]
        assert name in BF.__all__


def test_scripted_in_a_caller():
    # The helpers compose inside a scripted function (as Brevitas's quantizers script them).
    @torch.jit.script
    def per_channel_absmax(x: torch.Tensor) -> torch.Tensor:
        return x.view(BF.over_output_channels(x)).abs().amax(dim=1)

    @torch.jit.script
    def per_batch_channel_mean(x: torch.Tensor) -> torch.Tensor:
        return x.view(BF.over_batch_over_output_channels(x)).mean(dim=2)

    @torch.jit.script
    def flat_and_features(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return x.view(BF.over_tensor(x)), x.reshape(BF.over_output_features(x)).sum(dim=0)

    x = torch.randn(2, 3, 4, 3)
    torch.testing.assert_close(
        per_channel_absmax(x), x.flatten(1).abs().amax(dim=1), rtol=0, atol=0
    )
    torch.testing.assert_close(per_batch_channel_mean(x), x.flatten(2).mean(dim=2), rtol=0, atol=0)
    flat, feat = flat_and_features(x)
    assert flat.shape == (72,)
    torch.testing.assert_close(feat, x.reshape(24, 3).sum(dim=0), rtol=0, atol=0)
    # Batch-by-rest on another shape through the scripted helper directly.
    assert torch.jit.script(BF.over_batch_over_tensor)(torch.randn(5, 2, 2)) == (5, -1)
