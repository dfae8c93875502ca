"""Ready-made ternary quantizers: values {-s, 0, +s}, i.e. narrow signed 2-bit integers with a
constant scale s (Brevitas's brevitas.quant.ternary)."""

from brevitas_cpp.core.function_wrapper import InplaceTensorClampSte, TensorClamp
from brevitas_cpp.core.quant import IntQuant as IntQuantBlock
from brevitas_cpp.inject.enum import QuantType
from brevitas_cpp.inject.injector import value
from brevitas_cpp.quant.base import NarrowIntQuant, PerTensorConstScaling2bit
from brevitas_cpp.quant.solver.act import ActQuantSolver
from brevitas_cpp.quant.solver.common import require_signed, to_enum
from brevitas_cpp.quant.solver.weight import WeightQuantSolver

__all__ = ["SignedTernaryWeightPerTensorConst", "SignedTernaryActPerTensorConst"]


def _signed_ternary_int_quant(quant_type, signed, __self__):
    # The solver's choice (an IntQuant block for INT), refusing an unsigned variant: unsigned
    # narrow 2-bit would be {0, s, 2s}, not ternary.
    require_signed(QuantType.TERNARY, signed, __self__)
    if to_enum(QuantType, quant_type, "quant_type", __self__) == QuantType.INT:
        return IntQuantBlock
    return None


class SignedTernaryWeightPerTensorConst(
    NarrowIntQuant, PerTensorConstScaling2bit, WeightQuantSolver
):
    """Ternary weights, s = scaling_const = 0.1; integers clamped to [-1, 1] by Brevitas's in-place
    straight-through clamp."""

    int_quant = value(_signed_ternary_int_quant)
    tensor_clamp_impl = InplaceTensorClampSte
    scaling_const = 0.1


class SignedTernaryActPerTensorConst(NarrowIntQuant, PerTensorConstScaling2bit, ActQuantSolver):
    """Ternary activations, s = max(|min_val|, |max_val|) = 1."""

    int_quant = value(_signed_ternary_int_quant)
    tensor_clamp_impl = TensorClamp
    min_val = -1.0
    max_val = 1.0
