"""Upsampling layers (brevitas_cpp.nn.quant_upsample) against plain torch: nearest neighbour keeps
the input's quantization unchanged; other modes interpolate and round back to the input's scale,
round(y / scale) * scale with a straight-through gradient. Also plain-tensor inputs, defaults,
dtypes, gradients, state_dict and bad inputs, in both JIT modes (the layers hold no quantizer)."""

import inspect

import pytest
import torch
import torch.nn.functional as F
from helpers import assert_same, rand
from torch import nn

from brevitas_cpp.nn.quant_upsample import (
    QuantUpsample,
    QuantUpsamplingBilinear2d,
    QuantUpsamplingNearest2d,
)
from brevitas_cpp.quant_tensor import IntQuantTensor

DTYPES = [torch.float32, torch.float64, torch.bfloat16]
DTYPE_IDS = ["f32", "f64", "bf16"]


def ste_round(u):
    return u + (torch.round(u) - u).detach()


def quant_tensor(
    shape=(2, 3, 3, 4),
    scale=0.1,
    dtype=torch.float32,
    seed=0,
    training=True,
    signed=True,
    zero_point=0.0,
):
    """An IntQuantTensor on a known grid (random 8-bit ints times scale)."""
    g = torch.Generator().manual_seed(seed)
    ints = torch.randint(-128, 128, shape, generator=g).to(dtype)
    s = torch.tensor(scale, dtype=torch.float64 if dtype == torch.float64 else torch.float32)
    return IntQuantTensor(
        (ints * s).to(dtype), s, torch.tensor(zero_point), torch.tensor(8.0), signed, training
    )


def assert_same_metadata(out, qx):
    assert isinstance(out, IntQuantTensor)
    assert out.scale is qx.scale and out.zero_point is qx.zero_point
    assert out.bit_width is qx.bit_width
    assert out.signed == qx.signed and out.training == qx.training


# ---- construction -------------------------------------------------------------------------------


def test_defaults_as_brevitas():
    params = inspect.signature(QuantUpsample.__init__).parameters
    assert (
        params["size"].default,
        params["scale_factor"].default,
        params["mode"].default,
        params["align_corners"].default,
        params["return_quant_tensor"].default,
    ) == (None, None, "nearest", None, True)
    for cls in (QuantUpsamplingBilinear2d, QuantUpsamplingNearest2d):
        params = inspect.signature(cls.__init__).parameters
        assert list(params)[1:] == ["size", "scale_factor", "return_quant_tensor"]
        assert params["return_quant_tensor"].default is True
    assert isinstance(QuantUpsample(scale_factor=2), nn.Upsample)
    bilinear = QuantUpsamplingBilinear2d(scale_factor=2)
    assert isinstance(bilinear, nn.UpsamplingBilinear2d)
    assert (bilinear.mode, bilinear.align_corners) == ("bilinear", True)
    assert isinstance(QuantUpsamplingNearest2d(scale_factor=2), nn.UpsamplingNearest2d)
    for m in (QuantUpsample(scale_factor=2), bilinear, QuantUpsamplingNearest2d(size=3)):
        assert m.channelwise_separable is True and m.return_quant_tensor is True
        assert list(m.state_dict()) == []


# ---- nearest: metadata kept ----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(
    "layer, kwargs",
    [
        (QuantUpsamplingNearest2d, dict(scale_factor=2)),
        (QuantUpsamplingNearest2d, dict(size=(5, 7))),
        (QuantUpsample, dict(scale_factor=3)),
        (QuantUpsample, dict(size=(4, 9))),
    ],
    ids=["nearest2d-x2", "nearest2d-size", "upsample-x3", "upsample-size"],
)
def test_nearest_copies_values_and_keeps_metadata(layer, kwargs, dtype):
    qx = quant_tensor(dtype=dtype, seed=1)
    out = layer(**kwargs)(qx)
    assert_same(out.value, F.interpolate(qx.value, mode="nearest", **kwargs))
    assert_same_metadata(out, qx)


def test_nearest_plain_tensor():
    x = rand((1, 2, 3, 3), seed=2)
    out = QuantUpsamplingNearest2d(scale_factor=2, return_quant_tensor=False)(x)
    assert_same(out, F.interpolate(x, scale_factor=2, mode="nearest"))
    out = QuantUpsample(size=(4, 5), return_quant_tensor=False)(x)
    assert_same(out, F.interpolate(x, size=(4, 5), mode="nearest"))


def test_nearest_plain_tensor_cannot_return_a_quant_tensor():
    with pytest.raises(RuntimeError, match="QuantUpsamplingNearest2d: return_quant_tensor=True"):
        QuantUpsamplingNearest2d(scale_factor=2)(rand((1, 1, 2, 2)))


def test_nearest_gradient_is_the_interpolation_gradient():
    qx = quant_tensor(seed=3)
    leaf = qx.value.clone().requires_grad_()
    out = QuantUpsamplingNearest2d(scale_factor=2)(qx.set(value=leaf))
    g = rand(out.value.shape, seed=4)
    (gx,) = torch.autograd.grad(out.value, leaf, g)
    leaf2 = qx.value.clone().requires_grad_()
    (ref,) = torch.autograd.grad(F.interpolate(leaf2, scale_factor=2, mode="nearest"), leaf2, g)
    assert_same(gx, ref)


# ---- interpolating modes: rounded to the input's scale -------------------------------------------


ROUNDED = [
    (QuantUpsamplingBilinear2d, dict(scale_factor=2), dict(mode="bilinear", align_corners=True)),
    (QuantUpsamplingBilinear2d, dict(size=(5, 6)), dict(mode="bilinear", align_corners=True)),
    (QuantUpsample, dict(scale_factor=2, mode="bilinear"), dict(mode="bilinear")),
    (
        QuantUpsample,
        dict(size=(5, 6), mode="bilinear", align_corners=True),
        dict(mode="bilinear", align_corners=True),
    ),
    (QuantUpsample, dict(scale_factor=2, mode="bicubic"), dict(mode="bicubic")),
    # Brevitas rounds every mode but 'nearest', so 'nearest-exact' too (a no-op on the grid).
    (QuantUpsample, dict(scale_factor=2, mode="nearest-exact"), dict(mode="nearest-exact")),
]
ROUNDED_IDS = [
    "bilinear2d-x2",
    "bilinear2d-size",
    "upsample-bilinear",
    "upsample-bilinear-ac",
    "upsample-bicubic",
    "upsample-nearest-exact",
]


def interp_kwargs(layer_kwargs, fn_kwargs):
    kwargs = {k: v for k, v in layer_kwargs.items() if k in ("size", "scale_factor")}
    return {**kwargs, **fn_kwargs}


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("layer, kwargs, fn_kwargs", ROUNDED, ids=ROUNDED_IDS)
def test_interpolation_is_rounded_to_the_input_scale(layer, kwargs, fn_kwargs, dtype):
    qx = quant_tensor(dtype=dtype, seed=5)
    out = layer(**kwargs)(qx)
    y = F.interpolate(qx.value, **interp_kwargs(kwargs, fn_kwargs))
    assert_same(out.value, torch.round(y / qx.scale) * qx.scale)
    assert_same_metadata(out, qx)


def test_worked_example_by_hand():
    # Levels 0 and 1 at scale 0.5, upsampled x2 with align_corners: 0, 1/3, 2/3, 1 levels,
    # rounded to 0, 0, 1, 1 levels.
    qx = IntQuantTensor(
        torch.tensor([[[[0.0, 0.5]]]]),
        torch.tensor(0.5),
        torch.tensor(0.0),
        torch.tensor(8.0),
        False,
        False,
    )
    out = QuantUpsamplingBilinear2d(size=(1, 4))(qx)
    assert torch.equal(out.value, torch.tensor([[[[0.0, 0.0, 0.5, 0.5]]]]))


@pytest.mark.parametrize(
    "layer, kwargs, fn_kwargs", ROUNDED[:3] + ROUNDED[4:5], ids=ROUNDED_IDS[:3] + ROUNDED_IDS[4:5]
)
def test_rounding_is_straight_through(layer, kwargs, fn_kwargs):
    qx = quant_tensor(dtype=torch.float64, seed=6)
    leaf = qx.value.clone().requires_grad_()
    scale = qx.scale.clone().requires_grad_()
    out = layer(**kwargs)(qx.set(value=leaf, scale=scale))
    g = rand(out.value.shape, torch.float64, seed=7)
    gx, gs = torch.autograd.grad(out.value, [leaf, scale], g)
    leaf2, scale2 = qx.value.clone().requires_grad_(), qx.scale.clone().requires_grad_()
    ref = ste_round(F.interpolate(leaf2, **interp_kwargs(kwargs, fn_kwargs)) / scale2) * scale2
    rx, rs = torch.autograd.grad(ref, [leaf2, scale2], g)
    torch.testing.assert_close(gx, rx, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(gs, rs, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize(
    "layer",
    [QuantUpsamplingBilinear2d(scale_factor=2), QuantUpsample(scale_factor=2, mode="bicubic")],
    ids=["bilinear2d", "upsample-bicubic"],
)
def test_interpolating_modes_need_a_quant_tensor(layer):
    name = type(layer).__name__
    with pytest.raises(TypeError, match=rf"{name}: mode='\w+' .* must be a QuantTensor"):
        layer(rand((1, 1, 2, 2)))


def test_output_unpacked_when_asked():
    qx = quant_tensor(seed=8)
    out = QuantUpsamplingBilinear2d(scale_factor=2, return_quant_tensor=False)(qx)
    assert type(out) is torch.Tensor
    assert torch.equal(out, QuantUpsamplingBilinear2d(scale_factor=2)(qx).value)


def test_bad_arguments():
    with pytest.raises(TypeError, match="QuantUpsample: return_quant_tensor must be a bool"):
        QuantUpsample(scale_factor=2, return_quant_tensor=None)
    with pytest.raises(TypeError, match="QuantUpsamplingNearest2d: input must be a Tensor"):
        QuantUpsamplingNearest2d(scale_factor=2)("image")
