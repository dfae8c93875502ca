"""Quantizers that leave tensors in floating point (quant_type FP); layers use them when a
quantizer argument is None (Brevitas's brevitas.quant.none)."""

from brevitas_cpp._unsupported import unsupported_getattr
from brevitas_cpp.inject.enum import QuantType
from brevitas_cpp.quant.solver.act import ActQuantSolver
from brevitas_cpp.quant.solver.bias import BiasQuantSolver
from brevitas_cpp.quant.solver.trunc import TruncQuantSolver
from brevitas_cpp.quant.solver.weight import WeightQuantSolver

__all__ = ["NoneWeightQuant", "NoneActQuant", "NoneBiasQuant", "NoneTruncQuant"]


class NoneWeightQuant(WeightQuantSolver):
    """No weight quantization (weight_quant=None)."""

    quant_type = QuantType.FP


class NoneActQuant(ActQuantSolver):
    """No activation quantization (act_quant, input_quant or output_quant None)."""

    quant_type = QuantType.FP


class NoneBiasQuant(BiasQuantSolver):
    """No bias quantization (bias_quant=None)."""

    quant_type = QuantType.FP
    requires_input_scale = False


class NoneTruncQuant(TruncQuantSolver):
    """No truncation (trunc_quant=None)."""

    quant_type = QuantType.FP


# Brevitas names brevitas_cpp does not support raise on use (brevitas_cpp._unsupported).
__getattr__ = unsupported_getattr(__name__)
