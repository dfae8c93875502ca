"""The brevitas_cpp quantizers NNCF's weights/activations groups map onto: the quantizer classes
and keywords on NNCF's integer grids (narrow range, the statistic its range types average),
the sign of an activation's range, and which 8-bit weight quantizers NNCF's overflow fix gives
half their range (all, or the first convolutions of the traced graph)."""

from typing import Any, Dict, List, Mapping

from torch import nn

from brevitas_cpp.core.stats import NegativeMinOrZero
from brevitas_cpp.graph.nncf.schema import OVERFLOW_FIX_DEVICES
from brevitas_cpp.graph.trace import MODEL_INPUT, TracedGraph
from brevitas_cpp.inject.enum import StatsOp
from brevitas_cpp.quant import (
    Int8ActPerTensorFloat,
    Int8WeightPerChannelFloat,
    Int8WeightPerTensorFloat,
    ShiftedUint8ActPerTensorFloat,
    ShiftedUint8WeightPerChannelFloat,
    ShiftedUint8WeightPerTensorFloat,
    Uint8ActPerTensorFloat,
)

__all__ = [
    "act_keywords",
    "first_convolutions",
    "half_range",
    "signed_range",
    "weight_narrow",
    "weight_quant",
]


def weight_quant(weights: Mapping[str, Any]) -> type:
    """The weight quantizer of the group's mode and granularity."""
    symmetric = weights["mode"] == "symmetric"
    if weights["per_channel"]:
        return Int8WeightPerChannelFloat if symmetric else ShiftedUint8WeightPerChannelFloat
    return Int8WeightPerTensorFloat if symmetric else ShiftedUint8WeightPerTensorFloat


def weight_narrow(weights: Mapping[str, Any], bits: int) -> bool:
    """Narrow range for NNCF's grid (see graph.nncf's docstring): symmetric always; asymmetric at
    8 bits only (NNCF: narrow at 8 bits unless on half their range, i.e. 7)."""
    return weights["mode"] == "symmetric" or bits == 8


def act_keywords(acts: Mapping[str, Any], signed: bool, prefix: str = "") -> Dict[str, Any]:
    """An activation quantizer's keywords, or a weight layer's input quantizer's (prefix
    "input_", with its bit width): the group's mode and sign, with the statistic NNCF's range
    types average (max |x| symmetric, max - min asymmetric)."""
    if acts["mode"] == "asymmetric":
        quant: type = ShiftedUint8ActPerTensorFloat
        stats = {"scaling_stats_op": StatsOp.MIN_MAX, "zero_point_stats_impl": NegativeMinOrZero}
    elif signed:
        quant = Int8ActPerTensorFloat
        stats = {"scaling_stats_op": StatsOp.MAX, "narrow_range": True}  # NNCF's signed step
    else:
        quant = Uint8ActPerTensorFloat
        stats = {"scaling_stats_op": StatsOp.MAX}
    if not prefix:
        return {"act_quant": quant, **stats}
    prefixed = {prefix + key: value for key, value in stats.items()}
    return {f"{prefix}quant": quant, f"{prefix}bit_width": acts["bits"], **prefixed}


def signed_range(module: nn.Module) -> bool:
    """Whether the activation's outputs reach below zero (where NNCF's statistics would make
    its quantizer signed): not for ReLU, ReLU6, Sigmoid and Hardsigmoid, nor a Hardtanh from zero
    up (GELU, SiLU and Hardswish dip below zero)."""
    if isinstance(module, nn.Hardtanh):  # ReLU6 included
        return module.min_val < 0
    return not isinstance(module, (nn.ReLU, nn.Sigmoid, nn.Hardsigmoid))


def half_range(config: Mapping[str, Any]) -> str:
    """Which 8-bit weight quantizers NNCF's overflow fix gives half their range: "all",
    "first" (the first convolutions) or "none" (nncf/torch/quantization/algo.py)."""
    algo = config["quantization"]
    if config["target_device"] not in OVERFLOW_FIX_DEVICES or algo["weights"]["bits"] != 8:
        return "none"
    return {"enable": "all", "first_layer_only": "first", "disable": "none"}[algo["overflow_fix"]]


def first_convolutions(graph: TracedGraph) -> List[str]:
    """The module scopes of the convolutions reachable from an input without passing another
    (NNCF's get_first_nodes_of_type(graph, ["conv2d", "conv3d"]))."""
    found: List[str] = []
    stack = [n for n in graph.nodes if n.op == MODEL_INPUT]
    visited = set()
    while stack:
        node = stack.pop()
        for successor in graph.successors(node):
            if successor.index in visited:
                continue
            visited.add(successor.index)
            if successor.op in ("conv2d", "conv3d"):
                found.append(successor.module_scope)
            else:
                stack.append(successor)
    return found
