"""Ready-made binary quantizers: values {-s, +s} with a constant scale s (Brevitas's
brevitas.quant.binary)."""

from brevitas_cpp.core.function_wrapper import InplaceTensorClampSte, TensorClamp
from brevitas_cpp.quant.base import SignedBinaryClampedConst
from brevitas_cpp.quant.solver.act import ActQuantSolver
from brevitas_cpp.quant.solver.weight import WeightQuantSolver

__all__ = ["SignedBinaryWeightPerTensorConst", "SignedBinaryActPerTensorConst"]


class SignedBinaryWeightPerTensorConst(SignedBinaryClampedConst, WeightQuantSolver):
    """Binary weights, s = scaling_const = 0.1; the weight is clamped to [-s, s] in place
    (straight-through), which keeps latent weights from drifting away."""

    tensor_clamp_impl = InplaceTensorClampSte
    scaling_const = 0.1


class SignedBinaryActPerTensorConst(SignedBinaryClampedConst, ActQuantSolver):
    """Binary activations, s = max(|min_val|, |max_val|) = 1; the gradient is zero outside
    [-s, s]."""

    tensor_clamp_impl = TensorClamp
    min_val = -1.0
    max_val = 1.0
