"""Distiller users' files and quantizers as they hold them: schedules (YAML) read as Distiller's
config.py reads them, its QAT quantizer classes with their constructors, and its learning-rate
schedulers. ``load_schedule(model, "schedule.yaml", optimizer)`` (or Distiller's own
``file_config(model, optimizer, filename)``) prepares the model and returns the scheduler whose
callbacks the training loop calls.
"""

from brevitas_cpp.graph.distiller.lr import MultiStepMultiGammaLR, PolynomialLR
from brevitas_cpp.graph.distiller.policies import DistillerPolicy, LRPolicy, QuantizationPolicy
from brevitas_cpp.graph.distiller.quantizers import (
    DistillerQuantizer,
    DorefaQuantizer,
    LinearQuantMode,
    PACTQuantizer,
    QuantAwareTrainRangeLinearQuantizer,
)
from brevitas_cpp.graph.distiller.schedule import (
    DistillerScheduler,
    PolicyLoss,
    dict_config,
    file_config,
    load_schedule,
)

__all__ = [
    "DistillerPolicy",
    "DistillerQuantizer",
    "DistillerScheduler",
    "DorefaQuantizer",
    "LRPolicy",
    "LinearQuantMode",
    "MultiStepMultiGammaLR",
    "PACTQuantizer",
    "PolicyLoss",
    "PolynomialLR",
    "QuantAwareTrainRangeLinearQuantizer",
    "QuantizationPolicy",
    "dict_config",
    "file_config",
    "load_schedule",
]
