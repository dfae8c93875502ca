"""BatchNorm1d/2dToQuantScaleBias: a batch norm's state_dict folds into the affine
weight = gamma / sqrt(var + eps), bias = beta - mean * weight, which is then quantized."""

import importlib.util
import os

import pytest
import torch
from helpers import rand
from torch import nn

from brevitas_cpp import config
from brevitas_cpp.nn import BatchNorm1dToQuantScaleBias, BatchNorm2dToQuantScaleBias
from brevitas_cpp.quant import Int8WeightPerChannelFloat


def _load_refs():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "layer_refs.py")
    spec = importlib.util.spec_from_file_location("nn_layer_refs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


R = _load_refs()
CASES = {
    1: (BatchNorm1dToQuantScaleBias, nn.BatchNorm1d, (3, 4, 5), (1, -1, 1)),
    2: (BatchNorm2dToQuantScaleBias, nn.BatchNorm2d, (2, 4, 3, 3), (1, -1, 1, 1)),
}


def trained_bn(cls, affine=True, eps=1e-5):
    bn = cls(4, affine=affine, eps=eps).eval()
    with torch.no_grad():
        bn.running_mean.copy_(rand((4,), seed=3))
        bn.running_var.copy_(rand((4,), seed=4).abs() + 0.5)
        bn.num_batches_tracked.fill_(7)
        if affine:
            bn.weight.copy_(rand((4,), seed=5))
            bn.bias.copy_(rand((4,), seed=6))
    return bn


def folded(bn):
    gamma = bn.weight.detach() if bn.affine else torch.ones(4)
    beta = bn.bias.detach() if bn.affine else torch.zeros(4)
    weight = gamma / torch.sqrt(bn.running_var + bn.eps)
    return weight, -bn.running_mean * weight + beta


@pytest.mark.parametrize("dims", [1, 2], ids=["1d", "2d"])
def test_loads_batch_norm_state_dict_strictly(dims):
    quant_cls, bn_cls, shape, rs = CASES[dims]
    bn = trained_bn(bn_cls)
    m = quant_cls(4)
    m.load_state_dict(bn.state_dict())  # strict: weight and bias come from the statistics
    weight, bias = folded(bn)
    assert torch.equal(m.weight.detach(), weight) and torch.equal(m.bias.detach(), bias)
    x = rand(shape, seed=1)
    assert torch.equal(m(x), x * R.ref_weight(weight).view(rs) + bias.view(rs))


@pytest.mark.parametrize("dims", [1, 2], ids=["1d", "2d"])
def test_unquantized_matches_batch_norm(dims):
    quant_cls, bn_cls, shape, rs = CASES[dims]
    bn = trained_bn(bn_cls)
    m = quant_cls(4, weight_quant=None)
    m.load_state_dict(bn.state_dict())
    x = rand(shape, seed=1)
    weight, bias = folded(bn)
    assert torch.equal(m(x), x * weight.view(rs) + bias.view(rs))
    torch.testing.assert_close(m(x).detach(), bn(x).detach(), rtol=1e-5, atol=1e-6)


def test_affine_free_batch_norm_and_custom_eps():
    bn = trained_bn(nn.BatchNorm2d, affine=False, eps=1e-3)
    m = BatchNorm2dToQuantScaleBias(4, eps=1e-3, weight_quant=Int8WeightPerChannelFloat)
    m.load_state_dict(bn.state_dict())
    weight, bias = folded(bn)
    assert torch.equal(m.weight.detach(), weight) and torch.equal(m.bias.detach(), bias)
    x = rand((2, 4, 3, 3), seed=1)
    rs = (1, -1, 1, 1)
    assert torch.equal(m(x), x * R.ref_weight(weight, channel_dim=0).view(rs) + bias.view(rs))


def test_own_state_dict_round_trip():
    m = BatchNorm2dToQuantScaleBias(4)
    m.load_state_dict(trained_bn(nn.BatchNorm2d).state_dict())
    fresh = BatchNorm2dToQuantScaleBias(4)
    fresh.load_state_dict(m.state_dict())
    x = rand((2, 4, 3, 3), seed=1)
    assert torch.equal(fresh(x), m(x))


def test_missing_keys_still_reported_without_statistics():
    m = BatchNorm2dToQuantScaleBias(4)
    result = m.load_state_dict({}, strict=False)
    assert sorted(result.missing_keys) == ([] if config.IGNORE_MISSING_KEYS else ["bias", "weight"])


def test_defaults_and_scripted_quantizers():
    m = BatchNorm2dToQuantScaleBias(4)
    assert m.eps == 1e-5 and m.runtime_shape == (1, -1, 1, 1)
    assert BatchNorm1dToQuantScaleBias(4).runtime_shape == (1, -1, 1)
    assert m.bias is not None and m.weight_quant.is_quant_enabled
    R.assert_scripted_quantizers(m)
