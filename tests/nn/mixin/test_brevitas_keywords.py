"""Keywords as Brevitas takes them: a keyword some Brevitas layer or quantizer knows is accepted
and ignored where no quantizer of the layer uses it (programs pass one set of keywords to layers
whose quantizers differ); anything else (a typo) stays an error naming the close matches."""

import pytest
import torch

import brevitas_cpp.nn as qnn
from brevitas_cpp.nn.mixin.utils import is_brevitas_keyword
from brevitas_cpp.quant import Int8AccumulatorAwareWeightQuant, Int8WeightPerTensorFloat

# As a program passes them to every layer it builds: a weight setting only A2Q quantizers read
# (weight_accumulator_bit_width), an input setting, and an activation one (unprefixed bit_width,
# QuantReLU's, which no quantizer of a convolution reads).
COMMON = dict(weight_accumulator_bit_width=16, input_bit_width=8, bit_width=4)


def _conv(**kwargs) -> qnn.QuantConv2d:
    torch.manual_seed(0)
    return qnn.QuantConv2d(3, 4, 3, **kwargs)


def test_keywords_for_other_quantizers_are_ignored():
    x = torch.randn(2, 3, 6, 6)
    conv = _conv(weight_quant=Int8WeightPerTensorFloat, **COMMON)
    plain = _conv(weight_quant=Int8WeightPerTensorFloat, input_bit_width=8)
    assert torch.equal(conv(x), plain(x))
    assert torch.equal(conv.quant_weight().value, plain.quant_weight().value)
    assert conv.state_dict().keys() == plain.state_dict().keys()
    # The same keywords configure the quantizers that read them.
    a2q = _conv(weight_quant=Int8AccumulatorAwareWeightQuant, **COMMON)
    accumulator = a2q.weight_quant.tensor_quant.pre_scaling_impl.accumulator_bit_width
    assert float(accumulator()) == 16.0
    relu = qnn.QuantReLU(**COMMON)
    assert float(relu.act_quant(torch.randn(4)).bit_width) == 4.0


def test_a_typo_is_still_an_error_with_the_close_matches():
    with pytest.raises(
        TypeError,
        match=r"QuantConv2d: unknown keyword argument weight_accumulator_bitwidth=16: "
        r"weight_quant=Int8WeightPerTensorFloat has no attribute .*'accumulator_bitwidth', and no "
        r"Brevitas layer or quantizer knows it\..*Did you mean weight_accumulator_bit_width",
    ):
        _conv(weight_accumulator_bitwidth=16)
    with pytest.raises(
        TypeError, match=r"QuantConv2d: unexpected keyword argument bitwidth=4\..*Did you mean"
    ):
        _conv(bitwidth=4)


def test_attention_ignores_other_layers_keywords():
    torch.manual_seed(0)
    mha = qnn.QuantMultiheadAttention(8, 2, bit_width=4, weight_accumulator_bit_width=16)
    assert isinstance(mha, qnn.QuantMultiheadAttention)
    with pytest.raises(TypeError, match="unexpected keyword argument bitwidth=4"):
        qnn.QuantMultiheadAttention(8, 2, bitwidth=4)
    qnn.QuantScaledDotProductAttention(weight_bit_width=4)
    with pytest.raises(TypeError, match="unexpected keyword argument weight_bitwidth=4"):
        qnn.QuantScaledDotProductAttention(weight_bitwidth=4)


def test_recurrent_layers_ignore_unprefixed_keywords_brevitas_knows():
    """QuantLSTM(..., bit_width=4): Brevitas's RNNs route by prefix and drop the rest."""
    torch.manual_seed(0)
    with_keyword = qnn.QuantLSTM(3, 4, bit_width=4)
    torch.manual_seed(0)
    plain = qnn.QuantLSTM(3, 4)
    x = torch.randn(2, 5, 3)
    assert torch.equal(with_keyword(x)[0], plain(x)[0])
    with pytest.raises(TypeError, match="bit_widht=4.*Did you mean .*_bit_width"):
        qnn.QuantLSTM(3, 4, bit_widht=4)


@pytest.mark.parametrize(
    "name, known",
    [
        ("weight_accumulator_bit_width", True),  # an A2Q quantizer attribute, weight_ prefix
        ("bit_width", True),  # QuantReLU's unprefixed keyword
        ("input_scaling_stats_input_concat_dim", True),  # a core block argument, input_ prefix
        ("in_proj_weight_bit_width", True),  # QuantMultiheadAttention's part prefix
        ("cache_inference_bias", True),  # a layer's constructor argument
        ("weight_bitwidth", False),
        ("bias_quant_bit_width", False),
        ("weigth_bit_width", False),
    ],
)
def test_brevitas_vocabulary(name, known):
    assert is_brevitas_keyword(name) is known
