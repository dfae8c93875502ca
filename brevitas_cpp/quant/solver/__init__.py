"""Brevitas's import path for the solvers (``from brevitas.quant.solver import
WeightQuantSolver``); they live in :mod:`brevitas_cpp.inject.solver`."""

from brevitas_cpp.inject.solver import (
    ActQuantSolver,
    BiasQuantSolver,
    QuantizerSolveError,
    TruncQuantSolver,
    WeightQuantSolver,
)
from brevitas_cpp.inject.solver import act, bias, common, parameter, trunc, weight

__all__ = [
    "ActQuantSolver",
    "BiasQuantSolver",
    "QuantizerSolveError",
    "TruncQuantSolver",
    "WeightQuantSolver",
]

# Brevitas's submodule paths too (``from brevitas.quant.solver.weight import ...``).
import sys as _sys

for _name, _module in (("act", act), ("bias", bias), ("common", common), ("parameter", parameter),
                       ("trunc", trunc), ("weight", weight)):
    _sys.modules[f"{__name__}.{_name}"] = _module
del _sys, _name, _module
