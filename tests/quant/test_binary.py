"""Binary quantizers: {-s, +s} with a constant scale, inputs clamped to [-s, s] first."""

import pytest
import torch
from helpers import rand, ref_binary_sign, ref_tensor_clamp
from torch import nn

from brevitas_cpp.config import JIT_ENABLED
from brevitas_cpp.core.function_wrapper import InplaceTensorClampSte, TensorClamp
from brevitas_cpp.core.quant import ClampedBinaryQuant
from brevitas_cpp.core.scaling import ConstScaling
from brevitas_cpp.quant import SignedBinaryActPerTensorConst, SignedBinaryWeightPerTensorConst
from brevitas_cpp.quant.solver import QuantizerSolveError


def weight_quant(layer, **kwargs):
    return SignedBinaryWeightPerTensorConst.let(
        module=layer, tracked_parameter_list=[layer.weight], **kwargs
    ).tensor_quant


def test_binary_weight_blocks_and_values():
    layer = nn.Linear(5, 4)
    tq = weight_quant(layer)
    assert type(tq) is ClampedBinaryQuant and type(tq.scaling_impl) is ConstScaling
    assert type(tq.tensor_clamp_impl) is InplaceTensorClampSte
    if JIT_ENABLED:
        assert isinstance(tq, torch.jit.ScriptModule)
    w = rand((4, 5), seed=1) * 0.3
    expected = ref_binary_sign(w) * torch.tensor(0.1)
    latent = w.clone()
    y, scale, zero_point, bit_width = tq(latent)
    # Shape [1]: ConstScaling divides by a default threshold torch.ones(1), as in Brevitas.
    assert torch.equal(y, expected) and torch.equal(scale, torch.tensor([0.1]))
    assert float(zero_point) == 0.0 and float(bit_width) == 1.0
    # The latent weight itself is clamped to [-s, s] (in place, as Brevitas does).
    assert torch.equal(latent, torch.clamp(w, -0.1, 0.1))


def test_binary_weight_scale_from_scaling_const():
    tq = weight_quant(nn.Linear(2, 2), scaling_const=0.5)
    assert torch.equal(tq(rand((2, 2), seed=2))[1], torch.tensor([0.5]))


def test_binary_weight_gradient_is_straight_through():
    w = (rand((4, 5), seed=3) * 0.3).requires_grad_()
    y = weight_quant(nn.Linear(5, 4))(w)[0]
    y.backward(torch.ones_like(y))
    assert torch.equal(w.grad, torch.full_like(w, 0.1))
    # BinaryConnect: the real-valued weight itself is clipped to [-scale, scale].
    assert torch.equal(w.detach(), torch.clamp(rand((4, 5), seed=3) * 0.3, -0.1, 0.1))


def test_binary_act_values_and_masked_gradient():
    tq = SignedBinaryActPerTensorConst.tensor_quant
    assert type(tq) is ClampedBinaryQuant and type(tq.tensor_clamp_impl) is TensorClamp
    x = (rand((6, 7), seed=4) * 1.5).requires_grad_()
    g = rand(x.shape, seed=5)
    y, scale, _, _ = tq(x)
    s = torch.tensor([1.0])  # max(|min_val|, |max_val|)
    assert torch.equal(scale, s)
    xr = x.detach().clone().requires_grad_()
    clamped = ref_tensor_clamp(xr, -s, s)
    ref = (clamped + (ref_binary_sign(clamped) - clamped).detach()) * s
    assert torch.equal(y.detach(), ref.detach())
    y.backward(g)
    ref.backward(g)
    assert torch.equal(x.grad, xr.grad)
    assert bool((x.grad[x.detach().abs() > 1] == 0).all())


@pytest.mark.parametrize("quant", [SignedBinaryActPerTensorConst, SignedBinaryWeightPerTensorConst])
def test_unsigned_binary_is_an_error(quant):
    layer = nn.Linear(2, 2)
    with pytest.raises(
        QuantizerSolveError,
        match=rf"{quant.__name__}: quant_type=BINARY is always "
        r"signed, but the quantizer sets signed=False",
    ):
        quant.let(signed=False, module=layer, tracked_parameter_list=[layer.weight]).tensor_quant
