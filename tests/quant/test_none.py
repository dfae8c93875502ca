"""Quantizers that leave tensors in floating point."""

import pytest

from brevitas_cpp.quant import NoneActQuant, NoneBiasQuant, NoneTruncQuant, NoneWeightQuant
from brevitas_cpp.quant.solver import (
    ActQuantSolver,
    BiasQuantSolver,
    TruncQuantSolver,
    WeightQuantSolver,
)


@pytest.mark.parametrize(
    "quant, solver",
    [
        (NoneWeightQuant, WeightQuantSolver),
        (NoneActQuant, ActQuantSolver),
        (NoneBiasQuant, BiasQuantSolver),
        (NoneTruncQuant, TruncQuantSolver),
    ],
)
def test_none_quantizers_have_no_tensor_quant(quant, solver):
    assert issubclass(quant, solver)
    assert quant.quant_type == "fp"
    assert quant.tensor_quant is None


def test_none_bias_needs_no_input_scale():
    assert NoneBiasQuant.requires_input_scale is False
