"""Solvers: injector mixins that turn a quantizer's enum settings into core blocks at injection
time (Brevitas's brevitas.quant.solver; also importable from brevitas_cpp.quant.solver).

A ready-made quantizer lists its setting mixins first and one solver last, e.g.
``class Q(NarrowIntQuant, MaxStatsScaling, PerTensorFloatScaling8bit, WeightQuantSolver)``; an
attribute declared by an earlier base or by the quantizer itself overrides the solver's choice.
"""

from brevitas_cpp.inject.solver.act import ActQuantSolver
from brevitas_cpp.inject.solver.bias import BiasQuantSolver
from brevitas_cpp.inject.solver.common import QuantizerSolveError
from brevitas_cpp.inject.solver.trunc import TruncQuantSolver
from brevitas_cpp.inject.solver.weight import WeightQuantSolver

__all__ = [
    "ActQuantSolver",
    "BiasQuantSolver",
    "QuantizerSolveError",
    "TruncQuantSolver",
    "WeightQuantSolver",
]
