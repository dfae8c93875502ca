"""QuantInputMixin and QuantOutputMixin: activation quantizers without an activation function,
which keep a QuantTensor input's quantization when disabled (passthrough)."""

import torch
from helpers import rand, ref_int_quant

from brevitas_cpp.inject.enum import ScalingImplType
from brevitas_cpp.nn import QuantLinear
from brevitas_cpp.quant import Int8ActPerTensorFloat
from brevitas_cpp.quant_tensor import IntQuantTensor


class ConstInt8Act(Int8ActPerTensorFloat):
    scaling_impl_type = ScalingImplType.CONST
    scaling_init = 1.28


def test_input_and_output_quantizers_have_no_activation():
    m = QuantLinear(6, 5, input_quant=ConstInt8Act, output_quant=ConstInt8Act, input_bit_width=4)
    x = rand((3, 6), seed=1) * 3
    qi = m.input_quant(x)
    scale = torch.tensor(1.28) / 8  # 4-bit signed threshold 1.28
    assert torch.equal(
        qi.value, ref_int_quant(x, scale, torch.tensor(0.0), torch.tensor(4.0), True, False)
    )
    assert m.input_quant.is_passthrough_act and m.output_quant.is_passthrough_act


def test_disabled_input_quant_passes_a_quant_tensor_through():
    m = QuantLinear(6, 5)
    qt = IntQuantTensor(rand((3, 6)), 0.5, 0.0, 8.0, True, False)
    out = m.input_quant(qt)
    assert isinstance(out, IntQuantTensor)
    assert torch.equal(out.value, qt.value) and torch.equal(out.scale, qt.scale)
    x = rand((3, 6))
    assert m.input_quant(x) is x
