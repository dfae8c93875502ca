"""brevitas_cpp.nn.utils: batch-norm folding, state_dict renaming, channel view shapes."""

import pytest
import torch
from helpers import rand
from torch import nn

from brevitas_cpp.nn import QuantConv2d, QuantConvTranspose2d
from brevitas_cpp.nn.utils import (
    check_tensors_same_ptr,
    compute_channel_view_shape,
    merge_bn,
    mul_add_from_bn,
    rename_state_dict_by_postfix,
    rename_state_dict_by_prefix,
)
from brevitas_cpp.quant_tensor import IntQuantTensor


def test_compute_channel_view_shape():
    t = torch.zeros(2, 3, 4, 5)
    assert compute_channel_view_shape(t, 1) == (1, -1, 1, 1)
    assert compute_channel_view_shape(t, -1) == (1, 1, 1, -1)
    assert compute_channel_view_shape(torch.zeros(7), 0) == (-1,)


def test_mul_add_from_bn():
    mean, var = rand((4,), seed=1), rand((4,), seed=2).abs()
    w, b = rand((4,), seed=3), rand((4,), seed=4)
    mul, add = mul_add_from_bn(mean, var, 1e-3, w, b)
    expected_mul = w / torch.sqrt(var + 1e-3)
    assert torch.equal(mul, expected_mul)
    assert torch.equal(add, -mean * expected_mul + b)


def test_merge_bn_affine_free():
    conv = QuantConv2d(3, 4, 3, weight_quant=None, bias=False)
    bn = nn.BatchNorm2d(4, affine=False).eval()
    with torch.no_grad():
        bn.running_mean.copy_(rand((4,), seed=1))
        bn.running_var.copy_(rand((4,), seed=2).abs() + 0.1)
    x = rand((1, 3, 5, 5), seed=3)
    expected = bn(conv(x)).detach()
    merge_bn(conv, bn)
    torch.testing.assert_close(conv(x).detach(), expected, rtol=1e-5, atol=1e-6)


def test_merge_bn_errors():
    conv = QuantConv2d(3, 4, 3)
    with pytest.raises(
        ValueError,
        match="QuantConv2d.merge_bn_in: the batch norm BatchNorm2d has no running statistics",
    ):
        conv.merge_bn_in(nn.BatchNorm2d(4, track_running_stats=False))
    with pytest.raises(
        ValueError,
        match="QuantConv2d.merge_bn_in: the batch norm has 5 channels "
        "but the layer has 4 output channels",
    ):
        conv.merge_bn_in(nn.BatchNorm2d(5))
    with pytest.raises(ValueError, match="has 3 channels but the layer has 6 output channels"):
        QuantConvTranspose2d(4, 6, 3, groups=2).merge_bn_in(nn.BatchNorm2d(3))


def test_rename_state_dict():
    state = {"a.act_quant_proxy.x": 1, "a.act_quant_proxy.y": 2, "b.z": 3}
    rename_state_dict_by_prefix("a.act_quant_proxy", "a.act_quant", state)
    assert state == {"a.act_quant.x": 1, "a.act_quant.y": 2, "b.z": 3}
    rename_state_dict_by_postfix(".z", ".w", state)
    assert state == {"a.act_quant.x": 1, "a.act_quant.y": 2, "b.w": 3}


def test_check_tensors_same_ptr():
    t = torch.zeros(3)
    assert check_tensors_same_ptr([t, t.view(3), IntQuantTensor(t, 1.0, 0.0, 8.0, True, False)])
    assert not check_tensors_same_ptr([t, torch.zeros(3)])
    assert not check_tensors_same_ptr([t, 3])
