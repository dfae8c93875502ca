"""QuantWeightMixin and QuantBiasMixin: quantized weight and bias on their own, sub-tensor
quantization, and quantizers rebuilt when the parameter is replaced."""

import pytest
import torch
from helpers import rand, ref_int_quant
from torch import nn

from brevitas_cpp.nn import QuantConv2d, QuantLinear
from brevitas_cpp.nn.mixin import QuantBiasMixin, QuantWeightMixin
from brevitas_cpp.quant import Int8BiasPerTensorFloatInternalScaling, Int8WeightPerChannelFloat
from brevitas_cpp.quant_tensor import IntQuantTensor

ZERO = torch.tensor(0.0)


def ref_weight(w, max_int=127):
    return ref_int_quant(w, w.abs().max() / max_int, ZERO, torch.tensor(8.0), True, True)


def seeded_linear(**kwargs):
    m = QuantLinear(6, 5, **kwargs)
    with torch.no_grad():
        m.weight.copy_(rand((5, 6), seed=0))
        m.bias.copy_(rand((5,), seed=1))
    return m


def test_quant_weight_is_a_quant_tensor():
    m = seeded_linear()
    qw = m.quant_weight()
    assert isinstance(qw, IntQuantTensor)
    assert torch.equal(qw.value, ref_weight(m.weight.detach()))
    assert torch.equal(qw.scale, m.weight.detach().abs().max() / 127)


def test_quant_weight_disabled_is_the_weight():
    m = seeded_linear(weight_quant=None)
    assert m.quant_weight() is m.weight


def test_quant_weight_of_a_slice():
    # As in Brevitas 0.12, a per-tensor quantizer takes its statistics from the slice it is given.
    m = seeded_linear()
    part = m.quant_weight(subtensor_slice_list=[(1, 3), None])
    assert torch.equal(part.value, ref_weight(m.weight.detach()[1:3]))
    assert torch.equal(m.quant_weight().value, ref_weight(m.weight.detach()))


def test_quant_bias_on_its_own():
    m = seeded_linear(bias_quant=Int8BiasPerTensorFloatInternalScaling)
    qb = m.quant_bias()
    b = m.bias.detach()
    # signed 8-bit, not narrow: scale = max|b| / 128
    expected = ref_int_quant(b, b.abs().max() / 128, ZERO, torch.tensor(8.0), True, False)
    assert torch.equal(qb.value, expected)
    plain = seeded_linear()
    assert plain.quant_bias() is plain.bias  # disabled: the bias itself
    assert QuantLinear(6, 5, bias=False).quant_bias() is None


def test_replacing_the_weight_rebuilds_the_quantizer():
    m = seeded_linear(weight_scaling_impl_type="parameter_from_stats")
    m(rand((2, 6)))  # initialises the learned scale from the first weight
    new = rand((5, 6), seed=7) * 3
    m.weight = nn.Parameter(new)
    assert torch.equal(m.quant_weight().value, ref_weight(new))


def test_adding_a_bias_rebuilds_the_bias_quantizer():
    m = QuantLinear(6, 5, bias=False, bias_quant=Int8BiasPerTensorFloatInternalScaling)
    assert not m.bias_quant.is_quant_enabled or m.bias_quant.tracked_parameter_list == []
    m.bias = nn.Parameter(rand((5,), seed=3))
    b = m.bias.detach()
    assert m.bias_quant.is_quant_enabled
    assert torch.equal(
        m.quant_bias().value,
        ref_int_quant(b, b.abs().max() / 128, ZERO, torch.tensor(8.0), True, False),
    )


def test_output_channel_dim_must_be_defined():

    class NoChannels(QuantWeightMixin, QuantBiasMixin, nn.Module):
        def __init__(self):
            nn.Module.__init__(self)
            self.weight = nn.Parameter(torch.ones(2, 2))
            self.bias = None

    with pytest.raises(NotImplementedError, match="NoChannels does not define output_channel_dim"):
        NoChannels().output_channel_dim


def test_conv_weight_per_channel_dim_0():
    m = QuantConv2d(3, 4, 3, weight_quant=Int8WeightPerChannelFloat)
    assert m.quant_weight().scale.shape == (4, 1, 1, 1)
