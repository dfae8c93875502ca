"""Ternary quantizers: narrow signed 2-bit integers {-s, 0, +s} with a constant scale."""

import pytest
import torch
from helpers import rand, ref_int_quant
from torch import nn

from brevitas_cpp.config import JIT_ENABLED
from brevitas_cpp.core.function_wrapper import InplaceTensorClampSte, TensorClamp
from brevitas_cpp.core.quant import RescalingIntQuant
from brevitas_cpp.core.scaling import ConstScaling
from brevitas_cpp.quant import SignedTernaryActPerTensorConst, SignedTernaryWeightPerTensorConst
from brevitas_cpp.quant.solver import QuantizerSolveError

ZERO = torch.tensor(0.0)
BW = torch.tensor(2.0)


def weight_quant(layer, **kwargs):
    return SignedTernaryWeightPerTensorConst.let(
        module=layer, tracked_parameter_list=[layer.weight], **kwargs
    ).tensor_quant


def test_ternary_weight_blocks_and_values():
    tq = weight_quant(nn.Linear(5, 4))
    assert type(tq) is RescalingIntQuant and type(tq.scaling_impl) is ConstScaling
    assert tq.int_quant.narrow_range is True and tq.int_quant.signed is True
    assert type(tq.int_quant.tensor_clamp_impl) is InplaceTensorClampSte
    if JIT_ENABLED:
        assert isinstance(tq, torch.jit.ScriptModule)
    w = rand((4, 5), seed=1) * 0.2
    y, scale, zero_point, bit_width = tq(w)
    s = torch.tensor(0.1) / torch.tensor(1.0)  # scaling_const over the 2-bit narrow range 1
    assert torch.equal(scale, s) and torch.equal(bit_width, BW) and torch.equal(zero_point, ZERO)
    assert torch.equal(y, torch.clamp(torch.round(w / s), -1.0, 1.0) * s)
    assert set(torch.unique(y / s).tolist()) <= {-1.0, 0.0, 1.0}


def test_ternary_weight_gradient_is_straight_through():
    w = (rand((4, 5), seed=2) * 0.2).requires_grad_()
    g = rand(w.shape, seed=3)
    weight_quant(nn.Linear(5, 4))(w)[0].backward(g)
    s = torch.tensor(0.1)
    # Straight through round and clamp: autograd of (x / s) ... * s is (g * s) / s.
    assert torch.equal(w.grad, (g * s) / s)


def test_ternary_act_values_and_gradient():
    tq = SignedTernaryActPerTensorConst.tensor_quant
    assert type(tq.int_quant.tensor_clamp_impl) is TensorClamp
    x = (rand((6, 7), seed=4) * 1.5).requires_grad_()
    g = rand(x.shape, seed=5)
    y, scale, _, _ = tq(x)
    s = torch.tensor(1.0)
    assert torch.equal(scale, s)
    xr = x.detach().clone().requires_grad_()
    ref = ref_int_quant(xr, s, ZERO, BW, True, True)
    assert torch.equal(y.detach(), ref.detach())
    y.backward(g)
    ref.backward(g)
    assert torch.equal(x.grad, xr.grad)


@pytest.mark.parametrize(
    "quant", [SignedTernaryActPerTensorConst, SignedTernaryWeightPerTensorConst]
)
def test_unsigned_ternary_is_an_error(quant):
    layer = nn.Linear(2, 2)
    message = rf"{quant.__name__}: quant_type=TERNARY is always signed, but the quantizer sets"
    with pytest.raises(QuantizerSolveError, match=message + r" signed=False"):
        quant.let(signed=False, module=layer, tracked_parameter_list=[layer.weight]).tensor_quant
