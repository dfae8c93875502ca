"""Solvers: injector mixins that turn a quantizer's enum settings into core blocks at injection
time (Brevitas's brevitas.quant.solver). They name the proxy each kind of quantizer gets, so
they live above brevitas_cpp.proxy, as in Brevitas.

A ready-made quantizer lists its setting mixins first and one solver last, e.g.
``class Q(NarrowIntQuant, MaxStatsScaling, PerTensorFloatScaling8bit, WeightQuantSolver)``; an
attribute declared by an earlier base or by the quantizer itself overrides the solver's choice.
"""

from brevitas_cpp._unsupported import unsupported_getattr
from brevitas_cpp.quant.solver.act import ActQuantSolver
from brevitas_cpp.quant.solver.bias import BiasQuantSolver
from brevitas_cpp.quant.solver.common import QuantizerSolveError
from brevitas_cpp.quant.solver.trunc import TruncQuantSolver
from brevitas_cpp.quant.solver.weight import WeightQuantSolver

__all__ = [
    "ActQuantSolver",
    "BiasQuantSolver",
    "QuantizerSolveError",
    "TruncQuantSolver",
    "WeightQuantSolver",
]

# Brevitas names brevitas_cpp does not support raise on use (brevitas_cpp._unsupported).
__getattr__ = unsupported_getattr(__name__)
