"""MX and groupwise quantizers against formulas written out here (the numbers against Brevitas
are test_golden_groupwise.py): the shared scale of each group, the grouped QuantTensors, the
layers under TorchScript and torch.compile, and the errors of impossible settings."""

import math

import pytest
import torch
import torch.nn.functional as F

import brevitas_cpp.nn as qnn
from brevitas_cpp.quant import Int8ActPerTensorFloat, Int8Bias, ShiftedUint8WeightGroupQuantFloat
from brevitas_cpp.quant.experimental.mx_quant_ocp import (
    MXFloat8e4m3Act,
    MXFloat8e4m3Weight,
    MXInt8Act,
    MXInt8Weight,
    ShiftedMXUInt8Weight,
    ShiftedMXUInt8WeightMSE,
)
from brevitas_cpp.quant_tensor import GroupwiseFloatQuantTensor, GroupwiseIntQuantTensor

E4M3_VALUES = None  # filled lazily: every finite OCP E4M3 magnitude


def groups(t: torch.Tensor, dim: int, size: int = 32) -> torch.Tensor:
    """t padded with zeros along dim to whole groups and split into (groups, size), written out."""
    dim = dim % t.dim()
    n = t.shape[dim]
    pad = (-n) % size
    if pad:
        shape = list(t.shape)
        shape[dim] = pad
        t = torch.cat([t, t.new_zeros(shape)], dim)
    shape = list(t.shape)
    shape[dim : dim + 1] = [shape[dim] // size, size]
    return t.reshape(shape)


def e4m3_grid() -> torch.Tensor:
    """Every non-negative OCP E4M3 value: subnormals m/8 * 2^-6, normals (1 + m/8) * 2^(e-7),
    the top code S.1111.111 being NaN (largest value 448)."""
    values = [m / 8 * 2.0**-6 for m in range(8)]
    values += [(1 + m / 8) * 2.0 ** (e - 7) for e in range(1, 16) for m in range(8)]
    return torch.tensor(sorted(values)[:-1], dtype=torch.float64)


def nearest_on(grid: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """x (float64) rounded to the nearest grid value, ties to the even mantissa (the smaller
    index's parity decides), saturating."""
    ax = x.abs().clamp(max=grid[-1].item())
    idx = torch.searchsorted(grid, ax)
    idx = idx.clamp(1, len(grid) - 1)
    lo, hi = grid[idx - 1], grid[idx]
    pick_hi = (hi - ax < ax - lo) | ((hi - ax == ax - lo) & (idx % 2 == 0))
    return torch.where(pick_hi, hi, lo) * x.sign()


def test_mx_int8_weight_scale_and_values_per_group() -> None:
    torch.manual_seed(0)
    layer = qnn.QuantLinear(40, 3, bias=False, weight_quant=MXInt8Weight)
    with torch.no_grad():
        layer.weight.mul_(torch.tensor([1.0] * 32 + [64.0] * 8))  # the padded group is larger
    w = layer.weight.detach()
    qt = layer.quant_weight()
    assert isinstance(qt, GroupwiseIntQuantTensor)
    amax = groups(w, 1).abs().amax(-1, keepdim=True)
    # Brevitas 0.12's MX INT8 scale: the group's binade over 2^7 (the OCP spec's INT8 element
    # has 6 fraction bits, 2^(floor(log2 amax) - 6)): the top binade saturates at 127.
    scale = 2.0 ** (torch.floor(torch.log2(amax)) - 7)
    assert torch.equal(qt.scale_, scale)
    ints = torch.clamp(torch.round(groups(w, 1) / scale), -128, 127)
    assert torch.equal(qt.value_, ints * scale)
    # In the weight's own shape: merged, the padding dropped, the scale expanded over the group.
    assert torch.equal(qt.value, (ints * scale).reshape(3, 64)[:, :40])
    assert torch.equal(qt.scale, scale.expand(3, 2, 32).reshape(3, 64)[:, :40])
    assert qt.dequant_shape == (3, 40) and qt.group_size == 32 and qt.group_dim == 1
    assert torch.equal(qt.int(), ints.reshape(3, 64)[:, :40].to(torch.int8))
    assert qt.is_valid
    # The layer computes with the ungrouped weight.
    x = torch.randn(4, 40)
    assert torch.equal(layer(x), F.linear(x, qt.value, layer.bias))


def test_mx_fp8_weight_scale_is_the_ocp_shared_exponent() -> None:
    torch.manual_seed(1)
    conv = qnn.QuantConv2d(64, 4, 3, bias=False, weight_quant=MXFloat8e4m3Weight)
    w = conv.weight.detach()
    qt = conv.quant_weight()
    assert isinstance(qt, GroupwiseFloatQuantTensor)
    g = groups(w, 1)  # (4, 2, 32, 3, 3)
    amax = g.abs().amax(2, keepdim=True)
    # OCP MX: the shared exponent floor(log2 amax) - emax(E4M3) = 8.
    scale = 2.0 ** (torch.floor(torch.log2(amax)) - 8)
    assert torch.equal(qt.scale_, scale)
    want = nearest_on(e4m3_grid(), (g / scale).double()).to(torch.float32) * scale
    assert torch.equal(qt.value_, want)
    assert qt.is_valid


def test_a_zero_group_stays_zero_with_a_finite_scale() -> None:
    layer = qnn.QuantLinear(64, 2, bias=False, weight_quant=MXInt8Weight)
    with torch.no_grad():
        layer.weight[:, 32:] = 0.0
    qt = layer.quant_weight()
    assert torch.isfinite(qt.scale_).all() and (qt.scale_ > 0).all()
    assert torch.equal(qt.value[:, 32:], torch.zeros(2, 32))


@pytest.mark.parametrize("act", [MXInt8Act, MXFloat8e4m3Act])
def test_mx_activation_scale_per_group_from_each_input(act) -> None:
    torch.manual_seed(2)
    layer = qnn.QuantLinear(40, 3, weight_quant=MXInt8Weight, input_quant=act)
    seen = []
    layer.input_quant.register_forward_hook(lambda m, i, o: seen.append(o))
    x = torch.randn(2, 5, 40) * torch.tensor([2.0**-5] * 32 + [2.0**3] * 8)
    for mode in ("train", "eval"):
        getattr(layer, mode)()
        out = layer(x)
        qt = seen.pop()
        amax = groups(x, -1).abs().amax(-1, keepdim=True)
        emax = 7 if act is MXInt8Act else 8
        assert torch.equal(qt.scale_, 2.0 ** (torch.floor(torch.log2(amax)) - emax)), mode
        assert qt.dequant_shape == (2, 5, 40) and qt.group_dim == -1
        w = layer.quant_weight().value
        assert torch.equal(out, F.linear(qt.value, w, layer.bias)), mode


def test_conv_activation_groups_run_along_channels() -> None:
    conv = qnn.QuantConv2d(40, 4, 3, weight_quant=MXInt8Weight, input_quant=MXInt8Act)
    x = torch.randn(2, 40, 5, 5)
    qt = conv.input_quant(x)
    assert qt.group_dim == 1 and qt.value_.shape == (2, 2, 32, 5, 5)
    amax = groups(x, 1).abs().amax(2, keepdim=True)
    assert torch.equal(qt.scale_, 2.0 ** (torch.floor(torch.log2(amax)) - 7))


def test_shifted_weights_have_a_zero_point_per_group() -> None:
    torch.manual_seed(3)
    layer = qnn.QuantLinear(64, 3, bias=False, weight_quant=ShiftedMXUInt8Weight)
    w = groups(layer.weight.detach(), 1)
    qt = layer.quant_weight()
    lo, hi = w.amin(-1, keepdim=True), w.amax(-1, keepdim=True)
    scale = 2.0 ** torch.floor(torch.log2((hi - lo.clamp(max=0.0)))) / 2.0**8
    assert torch.equal(qt.scale_, scale)
    zero_point = torch.round(-lo.clamp(max=0.0) / scale)
    assert torch.equal(qt.zero_point_, zero_point)
    ints = torch.clamp(torch.round(w / scale) + zero_point, 0, 255)
    assert torch.equal(qt.value_, (ints - zero_point) * scale)


def test_shifted_mse_weights_search_each_group_scale() -> None:
    """Brevitas 0.12 fails on this quantizer; here the zero point is the group's -min as without
    MSE, the scale a power of two, and each group's error no larger than min-max scaling's."""
    torch.manual_seed(4)
    plain = qnn.QuantLinear(64, 3, bias=False, weight_quant=ShiftedMXUInt8Weight)
    mse = qnn.QuantLinear(64, 3, bias=False, weight_quant=ShiftedMXUInt8WeightMSE)
    with torch.no_grad():
        mse.weight.copy_(plain.weight)
    w = groups(plain.weight.detach(), 1)
    q_plain, q_mse = plain.quant_weight(), mse.quant_weight()
    assert torch.equal(torch.log2(q_mse.scale_), torch.round(torch.log2(q_mse.scale_)))
    err_plain = ((q_plain.value_ - w) ** 2).sum(-1)
    err_mse = ((q_mse.value_ - w) ** 2).sum(-1)
    assert (err_mse <= err_plain).all()
    x = torch.randn(2, 64)
    assert torch.equal(mse(x), F.linear(x, q_mse.value))


def test_groupwise_quant_tensor_gives_plain_tensors_for_new_grids() -> None:
    layer = qnn.QuantLinear(40, 3, bias=False, weight_quant=MXInt8Weight)
    qt = layer.quant_weight()
    value = qt.value
    for result, want in (
        (qt + 1.0, value + 1.0),
        (qt * 2.0, value * 2.0),
        (-qt, -value),
        (torch.relu(qt), torch.relu(value)),
        (qt.transpose(0, 1), value.t()),
        (qt.reshape(-1), value.reshape(-1)),
    ):
        assert type(result) is torch.Tensor
        assert torch.equal(result, want)
    moved = qt.to(torch.float64)
    assert isinstance(moved, GroupwiseIntQuantTensor) and moved.value_.dtype == torch.float64
    assert moved.group_size == 32 and moved.dequant_shape == (3, 40)
    assert moved.signed_t.dtype == torch.bool
    detached = qt.detach()
    assert not detached.value_.requires_grad and torch.equal(detached.value, value)


def test_inference_cache_keeps_grouped_and_ungrouped_metadata() -> None:
    layer = qnn.QuantLinear(40, 3, bias=False, weight_quant=MXInt8Weight)
    layer.weight_quant.cache_inference_quant_weight = True
    layer.eval()
    qt = layer.quant_weight()
    layer(torch.randn(1, 40))
    cached = layer.weight_quant._cached_weight
    assert torch.equal(cached.scale_, qt.scale_) and torch.equal(cached.scale, qt.scale)
    assert cached.group_size == 32 and cached.group_dim == 1
    assert torch.equal(layer.weight_quant.scale(), qt.scale)


@pytest.mark.parametrize(
    "wq, aq",
    [
        (MXInt8Weight, MXInt8Act),
        (MXFloat8e4m3Weight, MXFloat8e4m3Act),
        (ShiftedMXUInt8Weight, None),
    ],
)
def test_script_and_compile_match_eager(wq, aq) -> None:
    torch.manual_seed(5)
    model = torch.nn.Sequential(
        qnn.QuantConv2d(40, 8, 3, weight_quant=wq, input_quant=aq),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        qnn.QuantLinear(72, 5, weight_quant=wq, input_quant=aq),
    )
    x = torch.randn(2, 40, 5, 5, requires_grad=True)
    ref = model(x)
    ref.sum().backward()
    ref_grad = x.grad.clone()
    x.grad = None
    scripted = torch.jit.script(model)
    out = scripted(x)
    out.sum().backward()
    assert torch.equal(out, ref) and torch.equal(x.grad, ref_grad)
    compiled = torch.compile(model, backend="eager")
    assert torch.equal(compiled(x), ref)


def test_group_size_is_checked() -> None:
    for bad in (0, -32, 3.5, "32", True):
        with pytest.raises(ValueError, match="group_size must be a positive int"):
            qnn.QuantLinear(40, 3, weight_quant=MXInt8Weight.let(group_size=bad))


def test_a_group_quantizer_without_group_size_says_so() -> None:
    with pytest.raises(ValueError, match="group_size"):
        qnn.QuantLinear(40, 3, weight_quant=ShiftedUint8WeightGroupQuantFloat)
    layer = qnn.QuantLinear(40, 3, weight_quant=ShiftedUint8WeightGroupQuantFloat.let(group_size=8))
    assert layer.quant_weight().value_.shape == (3, 5, 8)


def test_activation_group_dim_outside_a_layer_must_be_given() -> None:
    with pytest.raises(ValueError, match="group_dim"):
        qnn.QuantIdentity(act_quant=MXInt8Act)
    ident = qnn.QuantIdentity(act_quant=MXInt8Act.let(group_dim=-1), return_quant_tensor=True)
    assert isinstance(ident(torch.randn(3, 40)), GroupwiseIntQuantTensor)


def test_shared_group_quantizer_is_refused() -> None:
    first = qnn.QuantLinear(40, 3, weight_quant=MXInt8Weight)
    with pytest.raises(ValueError, match="per-group scales can not be shared"):
        qnn.QuantLinear(40, 3, weight_quant=first.weight_quant)


def test_no_accumulator_scale_from_group_scales() -> None:
    layer = qnn.QuantLinear(40, 3, weight_quant=MXInt8Weight, return_quant_tensor=True)
    with pytest.raises(RuntimeError, match="weight_quant: per-group scales"):
        layer(torch.randn(2, 40))
    biased = qnn.QuantLinear(
        40, 3, weight_quant=MXInt8Weight, input_quant=Int8ActPerTensorFloat, bias_quant=Int8Bias
    )
    with pytest.raises(RuntimeError, match="requires_input_scale=True"):
        biased(torch.randn(2, 40))


def test_padding_helpers_round_trip() -> None:
    x = torch.randn(3, 40, 2)
    qt = GroupwiseIntQuantTensor(
        groups(x, 1), torch.ones(3, 2, 1, 2), 0.0, 32, 1, 8.0, True, False, x.shape
    )
    assert torch.equal(qt.value, x)
    assert math.prod(qt.value_.shape) == 3 * 64 * 2


def test_export_refuses_group_scales_by_name() -> None:
    from brevitas_cpp.export import ExportError, export_int_weights

    model = torch.nn.Sequential(qnn.QuantLinear(40, 3, weight_quant=MXInt8Weight)).eval()
    with pytest.raises(ExportError, match=r"QuantLinear '0', weight_quant: per-group \(MX"):
        export_int_weights(model)


def test_automatic_quantization_takes_mx_quantizers() -> None:
    from brevitas_cpp.graph import Quantizer

    torch.manual_seed(6)
    float_model = torch.nn.Sequential(
        torch.nn.Linear(40, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)
    )
    x = torch.randn(2, 40)
    model = Quantizer(
        float_model,
        bits_weights=8,
        bits_activations=8,
        weight_kwargs={"weight_quant": MXInt8Weight},
    ).prepare_model()
    layer = model[0]
    assert isinstance(layer.quant_weight(), GroupwiseIntQuantTensor)
    w = groups(layer.weight.detach(), 1)
    scale = 2.0 ** (torch.floor(torch.log2(w.abs().amax(-1, keepdim=True))) - 7)
    assert torch.equal(layer.quant_weight().scale_, scale)
    assert model(x).shape == (2, 3)
