"""The layer bases: QuantNonLinearActLayer (act_quant(act_impl(input_quant(x)))),
QuantInputOutputLayer (tied input/output quantizers) and QuantWeightBiasInputOutputLayer (the
forward of every weight layer), with small layers defined here."""

import pytest
import torch
from helpers import rand, ref_int_quant
from torch import nn

from brevitas_cpp.inject.enum import ScalingImplType
from brevitas_cpp.nn import QuantLinear
from brevitas_cpp.nn.quant_layer import (
    QuantInputOutputLayer,
    QuantNonLinearActLayer,
    QuantWBIOL,
    QuantWeightBiasInputOutputLayer,
    act_quant_dtype_device,
)
from brevitas_cpp.quant import (
    Int8ActPerTensorFloat,
    Int32Bias,
    ShiftedUint8WeightPerTensorFloat,
    Uint8ActPerTensorFloat,
)
from brevitas_cpp.quant_tensor import IntQuantTensor

ZERO = torch.tensor(0.0)


class ConstUint8Act(Uint8ActPerTensorFloat):
    scaling_impl_type = ScalingImplType.CONST
    scaling_init = 2.55


class ConstInt8Act(Int8ActPerTensorFloat):
    scaling_impl_type = ScalingImplType.CONST
    scaling_init = 1.28


class ReLUAct(QuantNonLinearActLayer):
    def __init__(
        self, act_quant=ConstUint8Act, input_quant=None, return_quant_tensor=False, **kwargs
    ):
        QuantNonLinearActLayer.__init__(
            self, nn.ReLU, True, input_quant, act_quant, return_quant_tensor, **kwargs
        )


class Passthrough(QuantInputOutputLayer, nn.Module):
    """input_quant -> identity -> output_quant."""

    def __init__(
        self,
        input_quant=None,
        output_quant=None,
        tie_input_output_quant=False,
        return_quant_tensor=False,
        **kwargs,
    ):
        nn.Module.__init__(self)
        QuantInputOutputLayer.__init__(
            self, input_quant, output_quant, tie_input_output_quant, return_quant_tensor, **kwargs
        )

    def forward(self, x):
        return self.pack_output(self.output_quant(self.input_quant(self.unpack_input(x))))


# ---- QuantNonLinearActLayer -------------------------------------------------------------------


def test_nonlinear_act_layer_quantizes_the_activation():
    m = ReLUAct(return_quant_tensor=True)
    x = rand((3, 7), seed=1) * 2
    y = m(x)
    scale = torch.tensor(2.55) / 255
    assert torch.equal(
        y.value, ref_int_quant(torch.relu(x), scale, ZERO, torch.tensor(8.0), False, False)
    )
    assert torch.equal(y.scale, scale) and not y.signed
    assert type(ReLUAct()(x)) is torch.Tensor
    assert m.channelwise_separable


def test_nonlinear_act_layer_input_quant_then_activation():
    m = ReLUAct(act_quant=None, input_quant=ConstInt8Act, return_quant_tensor=True)
    x = rand((3, 7), seed=1)
    y = m(x)
    xq = ref_int_quant(x, torch.tensor(1.28) / 128, ZERO, torch.tensor(8.0), True, False)
    # ReLU is a passthrough activation: the input's quantization is kept.
    assert torch.equal(y.value, torch.relu(xq))
    assert torch.equal(y.scale, torch.tensor(1.28) / 128)


def test_nonlinear_act_layer_without_quantization_is_the_activation():
    m = ReLUAct(act_quant=None)
    x = rand((3, 7), seed=1)
    assert torch.equal(m(x), torch.relu(x))
    with pytest.raises(RuntimeError, match="ReLUAct: return_quant_tensor=True"):
        ReLUAct(act_quant=None, return_quant_tensor=True)(x)


def test_nonlinear_act_layer_loads_old_proxy_name():
    m = ReLUAct(act_quant=Uint8ActPerTensorFloat)
    for _ in range(2):
        m(rand((4, 5), seed=2))
    state = {k.replace("act_quant.", "act_quant_proxy.", 1): v for k, v in m.state_dict().items()}
    assert any(k.startswith("act_quant_proxy.") for k in state)
    fresh = ReLUAct(act_quant=Uint8ActPerTensorFloat)
    fresh.load_state_dict(state)
    for key, value in m.state_dict().items():
        assert torch.equal(fresh.state_dict()[key], value)


# ---- QuantInputOutputLayer ----------------------------------------------------------------------


def test_tied_input_output_quant():
    m = Passthrough(input_quant=ConstInt8Act, tie_input_output_quant=True)
    assert m.output_quant is m.input_quant
    m = Passthrough(output_quant=ConstInt8Act, tie_input_output_quant=True)
    assert m.input_quant is m.output_quant
    with pytest.raises(
        ValueError, match="Passthrough: tie_input_output_quant=True needs exactly one"
    ):
        Passthrough(
            input_quant=ConstInt8Act, output_quant=ConstInt8Act, tie_input_output_quant=True
        )


def test_input_output_layer_forward():
    m = Passthrough(input_quant=ConstInt8Act, output_quant=ConstUint8Act, return_quant_tensor=True)
    x = rand((3, 7), seed=1)
    xq = ref_int_quant(x, torch.tensor(1.28) / 128, ZERO, torch.tensor(8.0), True, False)
    y = m(x)
    assert torch.equal(
        y.value, ref_int_quant(xq, torch.tensor(2.55) / 255, ZERO, torch.tensor(8.0), False, False)
    )


# ---- QuantWeightBiasInputOutputLayer -------------------------------------------------------------


def test_alias():
    assert QuantWBIOL is QuantWeightBiasInputOutputLayer


def test_weight_layer_must_define_its_op():

    class Incomplete(QuantWBIOL, nn.Linear):
        def __init__(self):
            nn.Linear.__init__(self, 3, 2)
            QuantWBIOL.__init__(self, None, None, None, None, False)

        @property
        def output_channel_dim(self):
            return 0

    m = Incomplete()
    with pytest.raises(NotImplementedError, match="Incomplete does not define inner_forward_impl"):
        m.forward_impl(torch.randn(1, 3))
    with pytest.raises(NotImplementedError, match="Incomplete does not define per_elem_ops"):
        m.per_elem_ops


def test_quant_load_model_mode_adds_a_missing_bias():
    src = QuantLinear(6, 5)
    m = QuantLinear(6, 5, bias=False)
    with pytest.raises(RuntimeError, match="Unexpected key"):
        m.load_state_dict(src.state_dict())
    m._quant_load_model_mode = True
    m.load_state_dict(src.state_dict())
    assert torch.equal(m.bias, src.bias)


def test_quant_tensor_and_tensor_inputs_agree():
    m = QuantLinear(6, 5, input_quant=ConstInt8Act)
    x = rand((3, 6), seed=1)
    xq = ref_int_quant(x, torch.tensor(1.28) / 128, ZERO, torch.tensor(8.0), True, False)
    qt = IntQuantTensor(xq, torch.tensor(1.28) / 128, 0.0, 8.0, True, False)
    # Requantizing an input already on the grid leaves it unchanged.
    assert torch.equal(m(qt), m(x))


def test_act_quant_dtype_device_defaults():
    layer = nn.Module()
    half = act_quant_dtype_device(layer, {"input_dtype": torch.float32}, torch.float16, "cpu")
    assert half == {
        "input_dtype": torch.float32,
        "input_device": "cpu",
        "output_device": "cpu",
        "output_dtype": torch.float16,
    }
    # Wider dtypes keep Brevitas's float32 activation scales.
    assert act_quant_dtype_device(nn.Module(), {}, torch.float64, None) == {}


def _int_quant_tensor(shape) -> IntQuantTensor:
    value = torch.randint(-128, 128, shape) * 0.125
    return IntQuantTensor(value, torch.tensor(0.125), ZERO, torch.tensor(8.0), True, False)


def test_return_quant_tensor_without_quantized_output_is_refused_in_forward() -> None:
    """Brevitas's moment and phrase (issue 32): return_quant_tensor=True with nothing to
    quantize the output builds, and forward raises "QuantLayer is not correctly configured"
    before the bias is quantized (whose Int32Bias would fail on the unquantized input too)."""
    torch.manual_seed(0)
    layer = QuantLinear(8, 4, bias=True, bias_quant=Int32Bias, return_quant_tensor=True)
    for error in (RuntimeError, AssertionError):  # Brevitas raises either, depending on the case
        with pytest.raises(error, match="^QuantLayer is not correctly configured: QuantLinear: "):
            layer(torch.randn(2, 8))
    # A quantized input (the weight is quantized by default) gives the output a QuantTensor.
    out = layer(_int_quant_tensor((2, 8)))
    assert isinstance(out, IntQuantTensor)
    expected_scale = (0.125 * layer.quant_weight().scale).reshape(1, 1)
    torch.testing.assert_close(out.scale, expected_scale, rtol=1e-6, atol=0)


def test_output_the_handler_can_not_describe_is_refused_as_brevitas_asserts() -> None:
    """A weight zero point other than 0 gives the linear accumulator no quantized form: Brevitas
    warns, then its pack_output asserts "QuantLayer is not correctly configured, check if
    warnings were raised"; ours leads with the same words and is an AssertionError too."""
    layer = QuantLinear(
        8, 4, bias=False, weight_quant=ShiftedUint8WeightPerTensorFloat, return_quant_tensor=True
    )
    with pytest.raises(AssertionError) as info:
        layer(_int_quant_tensor((2, 8)))
    assert isinstance(info.value, RuntimeError)
    assert str(info.value).startswith(
        "QuantLayer is not correctly configured, check if warnings were raised: QuantLinear: "
    )
