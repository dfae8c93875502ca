"""QuantProxyMixin and QuantLayerMixin: building proxies from quantizer classes, shared proxies or
None; routing prefixed keywords; accepting, unused, keywords Brevitas knows that no quantizer of
the layer consumes, and rejecting the others (typos, which Brevitas ignores too); the QuantTensor
input/output conventions."""

import pytest
import torch
from torch import nn

from brevitas_cpp.inject import ExtendedInjector
from brevitas_cpp.inject.enum import ScalingImplType
from brevitas_cpp.nn import QuantConv2d, QuantLinear
from brevitas_cpp.nn.mixin import QuantLayerMixin, QuantNonLinearActMixin, TruncMixin
from brevitas_cpp.nn.quant_layer import QuantNonLinearActLayer
from brevitas_cpp.quant import (
    Int8ActPerTensorFloat,
    Int32Bias,
    TruncTo8bit,
    Uint8ActPerTensorFloat,
)
from brevitas_cpp.quant_tensor import IntQuantTensor


class ConstUint8Act(Uint8ActPerTensorFloat):
    scaling_impl_type = ScalingImplType.CONST
    scaling_init = 2.55


class ReLUAct(QuantNonLinearActLayer):
    """A QuantReLU-like layer: unprefixed keywords configure act_quant."""

    def __init__(
        self, act_quant=ConstUint8Act, input_quant=None, return_quant_tensor=False, **kwargs
    ):
        QuantNonLinearActLayer.__init__(
            self,
            act_impl=nn.ReLU,
            passthrough_act=True,
            input_quant=input_quant,
            act_quant=act_quant,
            return_quant_tensor=return_quant_tensor,
            **kwargs,
        )


class Trunc(TruncMixin, QuantLayerMixin, nn.Module):
    """A layer with only a truncation quantizer (its keywords carry no prefix)."""

    def __init__(self, trunc_quant=TruncTo8bit, **kwargs):
        nn.Module.__init__(self)
        QuantLayerMixin.__init__(self, True)
        TruncMixin.__init__(self, trunc_quant=trunc_quant, **kwargs)


# ---- building proxies ----------------------------------------------------------------------------


def test_prefixed_keywords_reach_their_quantizer_only():
    m = QuantLinear(6, 5, input_quant=Int8ActPerTensorFloat, weight_bit_width=4, input_bit_width=6)
    assert float(m.quant_weight().bit_width) == 4.0
    assert float(m.input_quant(torch.randn(2, 6)).bit_width) == 6.0


def test_none_gives_disabled_proxies():
    m = QuantLinear(6, 5, weight_quant=None)
    for proxy in (m.weight_quant, m.bias_quant, m.input_quant, m.output_quant):
        assert not proxy.is_quant_enabled


@pytest.mark.parametrize("bad", ["int8", nn.Linear, 8], ids=["str", "class", "int"])
def test_quantizer_argument_type(bad):
    with pytest.raises(
        TypeError,
        match=r"QuantLinear: input_quant must be a quantizer class .* "
        r"or None; got",
    ):
        QuantLinear(6, 5, input_quant=bad)


def test_quantizer_without_proxy_class():
    class Bare(ExtendedInjector):
        bit_width = 8

    with pytest.raises(TypeError, match="QuantLinear: weight_quant=Bare defines no proxy_class"):
        QuantLinear(6, 5, weight_quant=Bare)


def test_wrong_kind_of_proxy_instance():
    trunc = Trunc()
    with pytest.raises(TypeError, match="weight_quant must be"):
        QuantLinear(6, 5, weight_quant=trunc)  # a layer, not a proxy


# ---- keyword checks ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (
            dict(weight_bitwidth=4),
            r"QuantLinear: unknown keyword argument weight_bitwidth=4: "
            r"weight_quant=Int8WeightPerTensorFloat has no attribute or core-block argument 'bitwidth'.*"
            r"accepted prefixes: 'input_' \(input_quant\), 'output_' \(output_quant\), 'weight_' "
            r"\(weight_quant\), 'bias_' \(bias_quant\)\. Did you mean weight_bit_width",
        ),
        (dict(bias_quant=Int32Bias, bias_bitwdth=16), r"bias_quant=Int32Bias has no attribute"),
        (dict(input_scaling_per_output_chanel=True), r"input_quant=NoneActQuant has no attribute"),
        (
            dict(bitwidth=4),
            r"QuantLinear: unexpected keyword argument bitwidth=4\. .*must start "
            r"with a quantizer prefix; accepted prefixes: 'input_' \(input_quant\), 'output_' "
            r"\(output_quant\), 'weight_' \(weight_quant\), 'bias_' \(bias_quant\)\. Did you "
            r"mean bias_bit_width, input_bit_width, weight_bit_width\?$",
        ),
        (dict(weigth_bit_width=4), r"unexpected keyword .*Did you mean weight_bit_width"),
    ],
)
def test_unknown_keywords_raise(kwargs, match):
    with pytest.raises(TypeError, match=match):
        QuantLinear(6, 5, **kwargs)


def test_keywords_accepted_by_a_disabled_quantizer():
    # As in Brevitas: settings of a quantizer that is off are accepted (and have no effect).
    m = QuantLinear(6, 5, output_bit_width=4, output_scaling_per_output_channel=True)
    assert not m.output_quant.is_quant_enabled


def test_unprefixed_keywords_go_to_the_activation_quantizer():
    m = ReLUAct(bit_width=4, input_quant=Int8ActPerTensorFloat, input_bit_width=6)
    x = torch.randn(3, 5)
    assert float(m.act_quant(x).bit_width) == 4.0
    assert float(m.input_quant(x).bit_width) == 6.0
    with pytest.raises(
        TypeError,
        match=r"ReLUAct: unknown keyword argument input_bitwidth=6: "
        r"input_quant=Int8ActPerTensorFloat has no .*'bitwidth'; act_quant="
        r"ConstUint8Act has no attribute or core-block argument 'input_bitwidth'",
    ):
        ReLUAct(input_quant=Int8ActPerTensorFloat, input_bitwidth=6)
    with pytest.raises(
        TypeError,
        match=r"ReLUAct: unknown keyword argument bitwidth=4: .*accepted "
        r"prefixes: 'input_' \(input_quant\), none \(act_quant\)",
    ):
        ReLUAct(bitwidth=4)


def test_trunc_mixin_takes_unprefixed_keywords():
    t = Trunc(bit_width=6)
    assert t.is_trunc_quant_enabled
    assert not Trunc(trunc_quant=None).is_trunc_quant_enabled
    with pytest.raises(TypeError, match="Trunc: unknown keyword argument bitwidth=6"):
        Trunc(bitwidth=6)


def test_keyword_for_a_shared_proxy_warns_or_raises_and_leaves_it_untouched():
    owner = QuantLinear(6, 5)
    proxy = owner.weight_quant
    # A keyword Brevitas knows is ignored with a warning, as Brevitas does.
    with pytest.warns(
        UserWarning,
        match=r"QuantLinear: keyword argument weight_bit_width=4 is not used: weight_quant is a "
        r"shared proxy instance",
    ):
        shared = QuantLinear(6, 5, weight_quant=proxy, weight_bit_width=4)
    assert proxy.tracked_module_list == [owner, shared]
    assert float(shared.quant_weight().bit_width) == 8.0
    with pytest.raises(
        TypeError,
        match=r"QuantLinear: keyword argument weight_bitwidth=4 can not "
        r"be applied: weight_quant is a shared proxy instance",
    ):
        QuantLinear(6, 5, weight_quant=proxy, weight_bitwidth=4)
    assert proxy.tracked_module_list == [owner, shared]


def test_shared_proxy_tracks_the_layer_once_built():
    owner = QuantLinear(6, 5, input_quant=Int8ActPerTensorFloat)
    other = QuantLinear(6, 5, weight_quant=owner.weight_quant, input_quant=owner.input_quant)
    assert owner.weight_quant.tracked_module_list == [owner, other]
    assert other.input_quant is owner.input_quant
    with pytest.raises(TypeError, match="unknown keyword argument"):
        QuantLinear(6, 5, weight_quant=owner.weight_quant, output_bitwidth=3)
    assert owner.weight_quant.tracked_module_list == [owner, other]


def test_subclass_with_its_own_init_is_checked_once_at_the_end():

    class Square(QuantLinear):
        def __init__(self, features, **kwargs):
            super().__init__(features, features, **kwargs)
            self.features = features

    m = Square(4, weight_bit_width=3)
    assert float(m.quant_weight().bit_width) == 3.0
    assert "_quant_kwargs_book" not in m.__dict__
    with pytest.raises(TypeError, match="Square: unknown keyword argument weight_bitwidth=3"):
        Square(4, weight_bitwidth=3)


def test_mixin_internal_keywords_are_not_user_errors():
    # QuantInputMixin passes input_act_impl / input_passthrough_act itself; sharing the input
    # proxy must not count them as keywords given for it.
    owner = QuantConv2d(3, 4, 3, input_quant=Int8ActPerTensorFloat)
    QuantConv2d(3, 4, 3, input_quant=owner.input_quant, output_quant=owner.input_quant)


# ---- QuantLayerMixin ----------------------------------------------------------------------------


def test_return_quant_tensor_must_be_bool():
    with pytest.raises(
        TypeError, match="QuantLinear: return_quant_tensor must be a bool, got 'no'"
    ):
        QuantLinear(6, 5, return_quant_tensor="no")


def test_unpack_input_and_pack_output():
    m = QuantLinear(6, 5)
    x = torch.randn(2, 6)
    assert m.unpack_input(x) is x
    qt = IntQuantTensor(x, 1.0, 0.0, 8.0, True, False)
    assert m.unpack_input(qt) is qt
    with pytest.raises(
        TypeError, match="QuantLinear: input must be a Tensor or a QuantTensor, got list"
    ):
        m.unpack_input([x])
    assert m.pack_output(qt) is x  # value only when return_quant_tensor is False
    m.return_quant_tensor = True
    assert m.pack_output(qt) is qt
    with pytest.raises(
        RuntimeError, match="QuantLinear: return_quant_tensor=True, but the output is not quantized"
    ):
        m.pack_output(x)
    assert m.export_mode is False and m.accept_quant_tensor is True


def test_nonlinear_act_mixin_alone():

    class Act(QuantNonLinearActMixin, nn.Module):
        def __init__(self, **kwargs):
            nn.Module.__init__(self)
            QuantNonLinearActMixin.__init__(
                self, act_impl=nn.ReLU, passthrough_act=True, act_quant=ConstUint8Act, **kwargs
            )

    a = Act(bit_width=4)
    y = a.act_quant(torch.tensor([-1.0, 0.3, 5.0]))
    scale = torch.tensor(2.55) / 15
    relu = torch.relu(torch.tensor([-1.0, 0.3, 5.0]))
    expected = torch.clamp(torch.round(relu / scale), 0, 15) * scale
    assert torch.equal(y.value, expected)
