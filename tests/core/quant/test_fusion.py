"""The operand predicates of the fused ops, eager and scripted, against their definitions:
is_kernel_float is the ops' dispatch list (float32, float64, float16, bfloat16), is_single_value
is numel() == 1; neither makes a dispatcher call under TorchScript."""

import pytest
import torch

from brevitas_cpp.core.quant.plan.operands import int_operands_fit, is_kernel_float, is_single_value
from brevitas_cpp.core.quant.plan.weight import fused_weight_fits

KERNEL_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
OTHER_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2, torch.int32, torch.bool, torch.complex64)
SHAPES = [(), (1,), (1, 1, 1), (2,), (1, 2), (0,), (3, 0)]


@pytest.mark.parametrize("scripted", [False, True])
def test_is_kernel_float_is_the_ops_dtype_list(scripted):
    fn = torch.jit.script(is_kernel_float) if scripted else is_kernel_float
    for dtype in KERNEL_DTYPES:
        assert fn(dtype), dtype
    for dtype in OTHER_DTYPES:
        assert not fn(dtype), dtype


@pytest.mark.parametrize("scripted", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_is_single_value_is_numel_one(scripted, shape):
    fn = torch.jit.script(is_single_value) if scripted else is_single_value
    assert fn(torch.empty(shape)) == (torch.empty(shape).numel() == 1)


def test_float8_operands_take_the_composition():
    # float8 is floating, yet the ops have no float8 kernels.
    x = torch.zeros(4).to(torch.float8_e4m3fn)
    one = torch.ones(()).to(torch.float8_e4m3fn)
    assert not int_operands_fit(x, one, torch.zeros(()).to(torch.float8_e4m3fn), torch.tensor(8.0))
    assert not fused_weight_fits(x, one, -1, 0)
    assert int_operands_fit(torch.zeros(4), torch.ones(()), torch.zeros(()), torch.tensor(8.0))


def test_empty_or_multi_value_operands_take_the_composition():
    w = torch.zeros(4, 3)
    assert fused_weight_fits(w, torch.tensor(8.0), -1, 0)
    assert not fused_weight_fits(torch.zeros(0, 3), torch.tensor(8.0), -1, 0)
    assert not fused_weight_fits(w, torch.tensor([8.0, 8.0]), -1, 0)
    assert not int_operands_fit(w, torch.ones(()), torch.zeros(()), torch.tensor([8.0, 4.0]))
