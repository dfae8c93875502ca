"""``nncf_quantizer_arguments``: the Quantizer's keyword arguments for a model from an NNCF
config, and its initializer: the modules each group's scopes keep in float, the activations'
signs, the overflow fix's half-range weights and the model inputs' quantizers (on the weight
layers reading them, found by tracing input_info's example inputs)."""

import re
from typing import Any, Dict, List, Mapping, Optional, Tuple

from torch import Tensor, nn

from brevitas_cpp.graph.nncf.config import example_inputs, load_nncf_config
from brevitas_cpp.graph.nncf.initialization import NNCFInitialization
from brevitas_cpp.graph.nncf.quantizers import (
    act_keywords,
    first_convolutions,
    half_range,
    signed_range,
    weight_narrow,
    weight_quant,
)
from brevitas_cpp.graph.nncf.schema import Source
from brevitas_cpp.graph.nncf.scope_groups import ScopeGroups
from brevitas_cpp.graph.replacement import default_replacement_factory
from brevitas_cpp.graph.scopes import ModuleAddresses, module_addresses, operation_name
from brevitas_cpp.graph.trace import MODEL_INPUT, TracedGraph, module_scopes, tensors_of, trace

__all__ = ["nncf_quantizer_arguments"]

_WEIGHT_LAYERS = (nn.modules.conv._ConvNd, nn.Linear, nn.Embedding)
_SEVERAL_QUANTIZERS = (nn.RNNBase, nn.MultiheadAttention)
_FROM_CONFIG = (
    "bits_weights",
    "bits_activations",
    "overrides",
    "weight_kwargs",
    "act_kwargs",
    "ignored_scopes",
    "target_scopes",
    "validate_scopes",
)


class _Builder:
    """The Quantizer's arguments for one model and config (see nncf_quantizer_arguments)."""

    def __init__(self, model: nn.Module, config: Dict[str, Any], factory: Mapping) -> None:
        self.model, self.config, self.factory = model, config, factory
        self.algo = config["quantization"]
        self.scopes = ScopeGroups(config)
        scopes = module_scopes(model)
        self.named = [
            (name, module, module_addresses(name, scopes.get(id(module), ""), module))
            for name, module in model.named_modules(remove_duplicate=False)
        ]
        self.name_of_scope = {scopes[id(m)]: name for name, m in model.named_modules()}
        self.graph, self.inputs = self._trace()
        self.overrides: Dict[str, Any] = {}

    def _trace(self) -> Tuple[Optional[TracedGraph], List[Tensor]]:
        if not self.config["input_info"]:
            return None, []
        weight = next(self.model.parameters(), None)
        args, kwargs = example_inputs(self.config, None if weight is None else weight.device)
        return trace(self.model, *args, **kwargs), tensors_of((args, kwargs))

    def _needs_graph(self, why: str) -> TracedGraph:
        if self.graph is None:
            raise ValueError(
                f"Quantizer.from_nncf_config: {why} needs the model traced: give input_info"
            )
        return self.graph

    def check_scopes(self) -> None:
        addresses = [a for _, _, a in self.named]
        known = [x for a in addresses for x in a.own]
        if self.graph is not None:
            traced = [ModuleAddresses((n.scope,), ()) for n in self.graph.nodes]
            addresses += traced
            known += [n.scope for n in self.graph.nodes]
        self.scopes.check(addresses, known)

    def module_overrides(self) -> None:
        """None for the modules a group's scopes keep in float, and the activations' signs."""
        acts = self.algo["activations"]
        for name, module, addresses in self.named:
            if type(module) not in self.factory:
                continue
            weights = self.scopes.quantizes("weights", addresses)
            activations = self.scopes.quantizes("activations", addresses)
            if isinstance(module, _SEVERAL_QUANTIZERS):
                if weights or activations:
                    raise ValueError(
                        f"Quantizer.from_nncf_config: {name} ({type(module).__name__}) holds "
                        f"several quantizers NNCF sets by the operations inside it, which are "
                        f"not mapped; keep it in float with an ignored_scopes entry"
                    )
                self.overrides[name] = None
            elif isinstance(module, _WEIGHT_LAYERS):
                if not weights:
                    self.overrides[name] = None
            elif not activations:
                self.overrides[name] = None
            elif acts["mode"] == "symmetric" and acts["signed"] is None and signed_range(module):
                self.overrides[name] = act_keywords(acts, signed=True)

    def _add(self, name: str, keywords: Dict[str, Any], why: str) -> None:
        if name in self.overrides and self.overrides[name] is None:
            raise ValueError(
                f"Quantizer.from_nncf_config: {why} quantizes {name}, which the weights' "
                f"scopes keep in float"
            )
        self.overrides[name] = {**(self.overrides.get(name) or {}), **keywords}

    def first_layer_half_range(self) -> None:
        weights = self.algo["weights"]
        for scope in first_convolutions(self._needs_graph("overflow_fix first_layer_only")):
            name = self.name_of_scope.get(scope)
            if name is not None and self.overrides.get(name, {}) is not None:
                half = {"bits_weights": 7, "weight_narrow_range": weight_narrow(weights, 7)}
                self._add(name, half, "overflow_fix")

    def input_quantizers(self) -> None:
        """Each float model input quantized as the input of the weight layers reading it."""
        graph = self._needs_graph("quantize_inputs (NNCF's default: true)")
        acts = self.algo["activations"]
        signed = acts["signed"] is not False  # unset: inputs normalised around zero
        for node, tensor in zip([n for n in graph.nodes if n.op == MODEL_INPUT], self.inputs):
            address = ModuleAddresses((node.scope,), ())
            if not tensor.is_floating_point() or not self.scopes.quantizes("activations", address):
                continue
            for reader in graph.successors(node):
                name = self.name_of_scope.get(reader.module_scope)
                module = None if name is None else self.model.get_submodule(name)
                if (
                    module is None
                    or not isinstance(module, _WEIGHT_LAYERS)
                    or type(module) not in self.factory
                    or reader.op != operation_name(module)
                ):
                    raise ValueError(
                        f"Quantizer.from_nncf_config: quantize_inputs: {node.scope} is read by "
                        f"{reader.scope}, not by a replaced weight layer (the model inputs are "
                        f"quantized as those layers' inputs); set quantize_inputs to false"
                    )
                self._add(name, act_keywords(acts, signed, "input_"), "quantize_inputs")

    def arguments(self) -> Dict[str, Any]:
        weights, acts = self.algo["weights"], self.algo["activations"]
        half = half_range(self.config)
        self.check_scopes()
        self.module_overrides()
        if half == "first":
            self.first_layer_half_range()
        if self.algo["quantize_inputs"]:
            self.input_quantizers()
        bits_weights = 7 if half == "all" else weights["bits"]
        return {
            "bits_weights": bits_weights,
            "bits_activations": acts["bits"],
            "weight_kwargs": {
                "weight_quant": weight_quant(weights),
                "weight_narrow_range": weight_narrow(weights, bits_weights),
            },
            "act_kwargs": act_keywords(acts, acts["signed"] is True),
            "overrides": {re.escape(name): value for name, value in self.overrides.items()},
        }


def nncf_quantizer_arguments(
    model: nn.Module, source: Source, extra: Optional[Mapping[str, Any]] = None
) -> Tuple[Dict[str, Any], NNCFInitialization]:
    """The Quantizer's keyword arguments for model from an NNCF config (see graph.nncf's
    docstring), with extra (optimizer, replacement_factory, policies, ...) added, and the
    config's initializer. The model is traced on input_info's example inputs, if given."""
    extra = dict(extra or {})
    clash = sorted(set(extra) & set(_FROM_CONFIG))
    if clash:
        raise ValueError(
            f"Quantizer.from_nncf_config: {', '.join(clash)} come(s) from the NNCF config"
        )
    config = load_nncf_config(source)
    factory = extra.get("replacement_factory") or default_replacement_factory()
    arguments = _Builder(model, config, factory).arguments()
    init = config["quantization"]["initializer"]
    initialization = NNCFInitialization(
        num_init_samples=init["range"]["num_init_samples"],
        range_type=init["range"]["type"],
        num_bn_adaptation_samples=init["batchnorm_adaptation"]["num_bn_adaptation_samples"],
    )
    return {**arguments, **extra}, initialization
