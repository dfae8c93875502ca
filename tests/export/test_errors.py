"""What export refuses, and that the error names the layer and the quantizer."""

import pytest
import torch
from torch import nn

from brevitas_cpp import nn as qnn
from brevitas_cpp.core.function_wrapper import RoundSte
from brevitas_cpp.core.restrict_val import FloatRestrictValue
from brevitas_cpp.export import ExportError, export_onnx_qcdq, export_torch_qcdq
from brevitas_cpp.inject.enum import BitWidthImplType, FloatToIntImplType

pytest.importorskip("onnx")


class RoundNotFused(RoundSte):
    """Round half to even through the step-by-step composition (the fused op takes only whole
    bit widths), so that a fractional learned bit width runs in eager mode."""


def test_a_learned_fractional_bit_width():
    model = nn.Sequential(
        qnn.QuantLinear(
            4,
            4,
            weight_bit_width_impl_type=BitWidthImplType.PARAMETER,
            weight_restrict_bit_width_impl=FloatRestrictValue(),
            weight_float_to_int_impl=RoundNotFused(),
        )
    )
    with torch.no_grad():
        model[0].weight_quant.tensor_quant.msb_clamp_bit_width_impl.bit_width_offset.add_(0.4)
    assert model[0].quant_weight().bit_width.item() == pytest.approx(8.4)
    with pytest.raises(ExportError, match=r"QuantLinear '0', weight_quant: bit width 8.4 is not"):
        export_onnx_qcdq(model, torch.randn(2, 4))
    # Nothing is left in export mode.
    assert not model[0].weight_quant.export_mode


def test_an_activation_that_does_not_round_half_to_even():
    model = nn.Sequential(
        nn.Linear(4, 4), qnn.QuantReLU(float_to_int_impl_type=FloatToIntImplType.FLOOR)
    )
    with pytest.raises(ExportError, match=r"QuantReLU '1', act_quant: .* rounds with floor"):
        export_torch_qcdq(model, torch.randn(2, 4))


def test_truncation():
    model = nn.Sequential(qnn.QuantIdentity(return_quant_tensor=True), qnn.TruncAvgPool2d(2))
    with pytest.raises(ExportError, match=r"TruncAvgPool2d '1', trunc_quant: .*truncation"):
        export_onnx_qcdq(model, torch.randn(1, 2, 4, 4))
    assert model[1].return_quant_tensor  # restored


def test_a_float64_model():
    model = qnn.QuantLinear(4, 2).double()
    with pytest.raises(ExportError, match=r"QuantLinear '<model>', weight_quant: .*float32"):
        export_onnx_qcdq(model, torch.randn(2, 4, dtype=torch.float64))


def test_an_op_without_onnx_translation_is_named_with_its_module():
    """torch's ONNX exporter has no translation of eigh: its error, naming the module."""

    class Eigenvalues(nn.Module):
        def forward(self, x):
            return torch.linalg.eigh(x @ x.transpose(-1, -2)).eigenvalues

    model = nn.Sequential(qnn.QuantIdentity(), Eigenvalues())
    with pytest.raises(ExportError, match=r"aten.linalg_eigh.default in Eigenvalues '1'"):
        export_onnx_qcdq(model, torch.randn(2, 4, 4))


def test_opset_below_18():
    # torch's ONNX exporter writes opset 18 and converts only upwards.
    with pytest.raises(ValueError, match="opset_version"):
        export_onnx_qcdq(qnn.QuantIdentity(), torch.randn(2, 4), opset_version=17)
