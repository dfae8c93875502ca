"""Automatic quantization of float models (Brevitas's brevitas.graph; Distiller's Quantizer).

``Quantizer(model, ...).prepare_model()`` replaces the float modules of a model by their
brevitas_cpp.nn counterparts in place, keeping module names and the float weights (the same
Parameter objects), with bit widths and Brevitas keywords per module from ordered name patterns
(an exact name, else the first matching pattern, as Distiller resolves them).
``Quantizer.from_config`` reads the same settings from a JSON or YAML file,
``Quantizer.from_nncf_config`` an NNCF config (graph.nncf), and graph.distiller
Distiller's schedules and QAT quantizers as their users hold them. ``trace(model, *inputs)``
records the operations of one forward with NNCF's scope addresses, and ``QuantizerInsertion``
puts activation quantizers at any traced call. This package sits above nn, quant and proxy and
nothing imports it.
"""

from brevitas_cpp._unsupported import unsupported_getattr
from brevitas_cpp.graph.calibrate import bias_correction_mode, calibrate, calibration_mode
from brevitas_cpp.graph.config import load_config
from brevitas_cpp.graph.controller import QuantizationController
from brevitas_cpp.graph.fold import merge_bn
from brevitas_cpp.graph.functional import quantize_functional_activations
from brevitas_cpp.graph.insertion import InsertedQuantizers, QuantizerInsertion
from brevitas_cpp.graph.nncf import NNCFInitialization, load_nncf_config
from brevitas_cpp.graph.overrides import LayerSettings, OverrideTable
from brevitas_cpp.graph.quantize import quantize_model
from brevitas_cpp.graph.quantizer import Quantizer
from brevitas_cpp.graph.replacement import ReplacementFactory, default_replacement_factory
from brevitas_cpp.graph.scheduler import (
    BitWidthRamp,
    CompressionScheduler,
    FreezeBatchNorm,
    FreezeBitWidths,
    FreezeScales,
    Policy,
    QuantizationDelay,
)
from brevitas_cpp.graph.trace import Node, TracedGraph, no_trace, trace

__all__ = [
    "bias_correction_mode",
    "calibrate",
    "calibration_mode",
    "BitWidthRamp",
    "CompressionScheduler",
    "FreezeBatchNorm",
    "FreezeBitWidths",
    "FreezeScales",
    "Policy",
    "QuantizationController",
    "QuantizationDelay",
    "InsertedQuantizers",
    "LayerSettings",
    "NNCFInitialization",
    "Node",
    "OverrideTable",
    "Quantizer",
    "QuantizerInsertion",
    "ReplacementFactory",
    "TracedGraph",
    "default_replacement_factory",
    "load_config",
    "load_nncf_config",
    "merge_bn",
    "no_trace",
    "quantize_functional_activations",
    "quantize_model",
    "trace",
]

# Brevitas names brevitas_cpp does not support raise on use (brevitas_cpp._unsupported).
__getattr__ = unsupported_getattr(__name__)
