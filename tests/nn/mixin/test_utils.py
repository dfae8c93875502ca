"""Keyword routing helpers: prefix filtering and the names a quantizer can consume."""

from brevitas_cpp.nn.mixin.utils import (
    PROXY_READ_ATTRIBUTES,
    core_block_argument_names,
    filter_kwargs,
    quantizer_vocabulary,
)
from brevitas_cpp.quant import Int8ActPerTensorFloat, Int8WeightPerTensorFloat


def test_filter_kwargs_strips_the_prefix():
    kwargs = {"weight_bit_width": 4, "input_bit_width": 8, "weight_narrow_range": False}
    assert filter_kwargs("weight_", kwargs) == {"bit_width": 4, "narrow_range": False}
    assert filter_kwargs("", kwargs) == kwargs


def test_quantizer_vocabulary():
    names = quantizer_vocabulary(Int8WeightPerTensorFloat)
    # attributes of the quantizer and its solver, arguments of its @value functions, arguments
    # of core block constructors, attributes the proxies read
    for name in (
        "bit_width",
        "narrow_range",
        "scaling_impl_type",
        "scaling_per_output_channel",
        "scaling_min_val",
        "collect_stats_steps",
        "proxy_class",
        "update_state_dict_impl",
    ):
        assert name in names, name
    assert "bitwidth" not in names and "__self__" not in names
    assert PROXY_READ_ATTRIBUTES <= names
    core_names = core_block_argument_names()
    assert {"scaling_init", "stats_reduce_dim", "tracked_parameter_list"} <= core_names
    # .let adds attributes
    assert "my_setting" in quantizer_vocabulary(Int8WeightPerTensorFloat.let(my_setting=1))


def test_vocabulary_of_an_activation_quantizer():
    names = quantizer_vocabulary(Int8ActPerTensorFloat)
    assert {
        "bit_width",
        "collect_stats_steps",
        "scaling_stats_momentum",
        "act_impl",
        "passthrough_act",
        "high_percentile_q",
    } <= names
    assert "bitwidth" not in names
