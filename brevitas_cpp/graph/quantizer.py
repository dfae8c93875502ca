"""Distiller's Quantizer on brevitas_cpp.nn: walk a float model and replace its modules in place.

``prepare_model()`` visits ``model.named_modules()`` in order; a module whose exact type is in
the replacement factory (and that no override leaves in float) is replaced, under the same name
in its parent, by the factory's quant layer. A module reached under several names is replaced
once, and the one quant layer takes every place. An optimizer given to the constructor gets the
parameters the quant layers add (learned scales: PACT's learned clipping is the default QuantReLU)
as a parameter group of their own.
"""

import logging
import pathlib
import warnings
from collections import OrderedDict
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import torch
from torch import nn

from brevitas_cpp.core._checks import checked_bool
from brevitas_cpp.graph.config import load_config
from brevitas_cpp.graph.controller import QuantizationController
from brevitas_cpp.graph.nncf import nncf_quantizer_arguments
from brevitas_cpp.graph.overrides import (
    KeepInFloat,
    LayerSettings,
    OverrideTable,
    OverrideValue,
    check_bit_width,
)
from brevitas_cpp.graph.replacement import ReplacementFactory, default_replacement_factory
from brevitas_cpp.graph.scheduler import CompressionScheduler
from brevitas_cpp.graph.scopes import ModuleAddresses, ScopeSelection, module_addresses
from brevitas_cpp.graph.trace import module_scopes
from brevitas_cpp.nn.mixin import QuantLayerMixin
from brevitas_cpp.nn.quant_mha import QuantMultiheadAttention

__all__ = ["Quantizer"]

_log = logging.getLogger(__name__)


class Quantizer:
    """Replaces the modules of ``model`` by quant layers (see the module docstring).

    - bits_weights, bits_activations: default bit widths (Distiller's names); None keeps that
      tensor type in float where no override sets it.
    - overrides: ordered {name pattern: bit width | None | dict of bits_* and Brevitas
      keywords}; the pattern equal to a module's name wins, else the first matching its
      whole name (Distiller's resolution, graph.overrides).
    - weight_kwargs, act_kwargs: Brevitas keywords for every replaced weight / activation layer
      (e.g. weight_quant=Int8WeightPerChannelFloat), under an override's own.
    - replacement_factory: {float type: function(module, LayerSettings) -> quant module};
      default_replacement_factory() when None.
    - train_with_fp_copy: the quant layers always keep the float weights and quantize them in
      the forward, so only True is accepted (Distiller's False quantizes the weights in place).
    - optimizer, quant_param_group: the optimizer to give the new parameters to, and the
      options of their group (e.g. {"weight_decay": 0.0}).
    - ignored_scopes, target_scopes: NNCF's selections, read as NNCF reads them (exact
      addresses or ``{re}`` patterns searched in them; see graph.scopes): a module is replaced
      only if it is in a target scope (when any is given) and in no ignored one. An entry that
      selects no module is an error naming the closest addresses, a warning with
      validate_scopes=False (NNCF's key).
    - policies: the scheduler's policies as config entries ({"policy": "QuantizationDelay",
      "starting_epoch": 2}); controller() builds them for the prepared model.
    """

    def __init__(
        self,
        model: nn.Module,
        bits_activations: Optional[int] = 8,
        bits_weights: Optional[int] = 8,
        overrides: Optional[Mapping[str, OverrideValue]] = None,
        weight_kwargs: Optional[Mapping[str, Any]] = None,
        act_kwargs: Optional[Mapping[str, Any]] = None,
        replacement_factory: Optional[ReplacementFactory] = None,
        train_with_fp_copy: bool = True,
        optimizer: Optional[torch.optim.Optimizer] = None,
        quant_param_group: Optional[Mapping[str, Any]] = None,
        policies: Optional[List[Mapping[str, Any]]] = None,
        ignored_scopes: Optional[List[str]] = None,
        target_scopes: Optional[List[str]] = None,
        validate_scopes: bool = True,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"Quantizer: model must be an nn.Module, got {type(model).__name__}")
        if overrides is not None and not isinstance(overrides, (OrderedDict, dict)):
            raise TypeError(
                f"Quantizer: overrides must be an ordered mapping of name patterns (an "
                f"OrderedDict or a dict, whose order is kept), got {type(overrides).__name__}"
            )
        if train_with_fp_copy is not True:
            raise ValueError(
                "Quantizer: train_with_fp_copy=False (weights quantized in place) is not "
                "supported: the quant layers keep the float weights and quantize them in every "
                "forward, which is train_with_fp_copy=True"
            )
        if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(
                f"Quantizer: optimizer must be a torch.optim.Optimizer, got "
                f"{type(optimizer).__name__}"
            )
        self.model = model
        # None keeps that tensor type in float everywhere, as in Distiller (overrides may set it).
        self.bits_activations = _bit_width_or_none(bits_activations, "Quantizer: bits_activations")
        self.bits_weights = _bit_width_or_none(bits_weights, "Quantizer: bits_weights")
        self.overrides = OverrideTable(overrides)
        self.weight_kwargs = dict(weight_kwargs or {})
        self.act_kwargs = dict(act_kwargs or {})
        self.replacement_factory = (
            default_replacement_factory() if replacement_factory is None else replacement_factory
        )
        self.optimizer = optimizer
        self.quant_param_group = dict(quant_param_group or {})
        # Checked now, built for the prepared model by controller().
        self.policies = list(policies or [])
        self.ignored_scopes = ScopeSelection("ignored_scopes", ignored_scopes)
        self.target_scopes = ScopeSelection("target_scopes", target_scopes)
        self.validate_scopes = checked_bool("Quantizer", "validate_scopes", validate_scopes)
        CompressionScheduler.from_config(model, self.policies)
        # name -> (float type, quant type, settings), filled by prepare_model.
        self.replaced: Dict[str, Tuple[type, type, LayerSettings]] = OrderedDict()
        # Names of replaceable modules left in float, and why (kept_float_reasons).
        self.kept_float: List[str] = []
        self.kept_float_reasons: Dict[str, str] = OrderedDict()
        # {type name: [module names]} of the leaf modules no replacement exists for.
        self.unmapped: Dict[str, List[str]] = OrderedDict()
        self.prepared = False

    @classmethod
    def from_config(
        cls, model: nn.Module, source: Union[str, pathlib.Path, Mapping[str, Any]], **kwargs: Any
    ) -> "Quantizer":
        """A Quantizer with the settings of a JSON/YAML file or mapping (load_config); keyword
        arguments (optimizer, replacement_factory, ...) are added to them."""
        return cls(model, **{**load_config(source), **kwargs})

    @classmethod
    def from_nncf_config(
        cls, model: nn.Module, source: Union[str, pathlib.Path, Mapping[str, Any]], **kwargs: Any
    ) -> "Quantizer":
        """A Quantizer with the quantization settings of an NNCF JSON config or mapping
        (graph.nncf); keyword arguments (optimizer, replacement_factory, ...) are added.
        Its ``nncf_initialization`` runs the config's initializer (range initialisation, then
        BatchNorm adaptation) over data once the model is prepared."""
        arguments, initialization = nncf_quantizer_arguments(model, source, kwargs)
        quantizer = cls(model, **arguments)
        quantizer.nncf_initialization = initialization
        return quantizer

    def prepare_model(self) -> nn.Module:
        """Replace the modules in place and return the model (the replacement, if the model
        itself is a replaced module)."""
        if self.prepared:
            raise RuntimeError("Quantizer.prepare_model: the model is already prepared")
        params_before = {id(p) for p in self.model.parameters()}
        new_by_old: Dict[int, nn.Module] = {}
        # Each replacement with the float module's Parameters, for the optimizer's groups.
        origins: List[Tuple[nn.Module, List[nn.Parameter]]] = []
        # Listed first, replaced after: the walk does not see the modules it inserts.
        scopes = module_scopes(self.model)
        addresses = {
            name: module_addresses(name, scopes.get(id(module), ""), module)
            for name, module in self.model.named_modules(remove_duplicate=False)
        }
        places = [
            (name, module)
            for name, module in self.model.named_modules(remove_duplicate=False)
            if type(module) in self.replacement_factory
        ]
        self._check_scopes(addresses)
        # Every replacement is built before any is put in place: an error leaves the model as
        # it was.
        swaps: List[Tuple[str, nn.Module]] = []
        for name, module in places:
            if self.ignored_scopes.selects(addresses[name]):
                self._keep_float(name, "in ignored_scopes")
                continue
            if self.target_scopes and not self.target_scopes.selects(addresses[name]):
                self._keep_float(name, "not in target_scopes")
                continue
            if _inside_replaced(name, self.replaced):
                continue
            quant = new_by_old.get(id(module))
            if quant is None:
                quant = self._replacement(name, module)
                if quant is None:
                    continue
                new_by_old[id(module)] = quant
                origins.append((quant, list(module.parameters())))
            swaps.append((name, quant))
        root = self.model
        for name, quant in swaps:
            if name == "":
                root = quant
            else:
                parent_name, _, child = name.rpartition(".")
                setattr(self.model.get_submodule(parent_name), child, quant)
        self.model = root
        self.unmapped = _unmapped_leaves(root, self.replacement_factory)
        _disable_fused_fast_paths(root)
        self._report_unused_overrides()
        self._update_optimizer(params_before, origins)
        self.prepared = True
        _log.info("%s", self.report())
        return root

    def _keep_float(self, name: str, reason: str) -> None:
        self.kept_float.append(name)
        self.kept_float_reasons[name] = reason

    def _replacement(self, name: str, module: nn.Module) -> Optional[nn.Module]:
        """The quant layer for module (not yet in place), or None to keep it in float."""
        settings = self.overrides.settings_for(
            name, self.bits_weights, self.bits_activations, self.weight_kwargs, self.act_kwargs
        )
        if settings is None:
            self._keep_float(name, f"override {self.overrides.match(name)[0]!r} is null")
            return None
        try:
            quant = self.replacement_factory[type(module)](module, settings)
        except KeepInFloat:  # a null bit width for the one tensor type this layer quantizes
            origin = f"override {settings.pattern!r}" if settings.pattern else "the defaults"
            self._keep_float(name, f"a null bit width ({origin}) for what it quantizes")
            return None
        except (TypeError, ValueError) as exc:
            origin = f" (override {settings.pattern!r})" if settings.pattern is not None else ""
            raise type(exc)(
                f"Quantizer: replacing {name or 'the model'} ({type(module).__name__}){origin}: {exc}"
            ) from exc
        quant.train(module.training)
        self.replaced[name] = (type(module), type(quant), settings)
        return quant

    def _check_scopes(self, addresses: Dict[str, ModuleAddresses]) -> None:
        """Every scope entry selects some module of the model (any module: NNCF validates
        against the whole graph), before anything is replaced."""
        known = [a for module in addresses.values() for a in module.own]
        for selection in (self.ignored_scopes, self.target_scopes):
            for module in addresses.values():
                selection.selects(module)
            selection.check_all_selected(known, self.validate_scopes)

    def _report_unused_overrides(self) -> None:
        for pattern in self.overrides.unmatched():
            warnings.warn(f"Quantizer: override {pattern!r} matches no replaceable module")
        used: Dict[str, set] = {}
        offered: Dict[str, set] = {}
        for _, _, settings in self.replaced.values():
            if settings.pattern is not None:
                used.setdefault(settings.pattern, set()).update(settings.used_keywords)
                offered.setdefault(settings.pattern, set()).update(settings.keywords)
        for pattern, keys in offered.items():
            for key in sorted(keys - used[pattern]):
                warnings.warn(
                    f"Quantizer: override {pattern!r}: keyword {key!r} was given to no module "
                    f"(weight layers take weight_*, bias_*, input_*, output_* keywords; "
                    f"activation layers the unprefixed ones and input_*)"
                )

    def _update_optimizer(
        self, params_before: set, origins: List[Tuple[nn.Module, List[nn.Parameter]]]
    ) -> None:
        """New Parameters into the optimizer: a layer's own (an LSTM's per-gate weights, split
        attention projections: copies of float ones) into the group of the float module's, so
        that they keep its hyperparameters; the quantizers' (learned scales, ...) into a group
        of quant_param_group. (The float originals stay in their group, without gradients.)"""
        if self.optimizer is None:
            return
        groups = self.optimizer.param_groups
        placed = {id(p) for group in groups for p in group["params"]} | params_before
        for quant, float_params in origins:
            floats = {id(p) for p in float_params}
            group = next((g for g in groups if any(id(p) in floats for p in g["params"])), None)
            if group is None:
                continue
            # A quantizer's learned state lives under its tensor_quant (a proxy may also
            # reach the weight it quantizes, so the proxies themselves do not tell).
            own = [
                p
                for name, p in quant.named_parameters()
                if id(p) not in placed and "tensor_quant" not in name.split(".")
            ]
            group["params"].extend(own)
            placed.update(id(p) for p in own)
        new = [p for p in self.model.parameters() if id(p) not in placed]
        if new:
            self.optimizer.add_param_group({"params": new, **self.quant_param_group})

    def controller(self) -> QuantizationController:
        """The controller of the prepared model, with a scheduler of the given policies."""
        if not self.prepared:
            raise RuntimeError("Quantizer.controller: call prepare_model() first")
        return QuantizationController(
            self.model, CompressionScheduler.from_config(self.model, self.policies)
        )

    def statistics(self) -> Dict[str, Any]:
        """What prepare_model did: the replaced modules with their bit widths, those left in
        float and why, the leaf modules of types without a replacement, and the fraction of
        replaceable modules replaced."""
        layers: List[Dict[str, Any]] = [
            {
                "name": name,
                "float": float_type.__name__,
                "quant": quant_type.__name__,
                "bits_weights": settings.bits_weights,
                "bits_activations": settings.bits_activations,
                "override": settings.pattern,
            }
            for name, (float_type, quant_type, settings) in self.replaced.items()
        ]
        total = len(self.replaced) + len(self.kept_float)
        return {
            "replaced": layers,
            "kept_float": list(self.kept_float),
            "kept_float_reasons": dict(self.kept_float_reasons),
            "unmapped": {kind: list(names) for kind, names in self.unmapped.items()},
            "fraction_replaced": len(self.replaced) / total if total else 0.0,
        }

    def report(self) -> str:
        """statistics() as lines for a person: what was replaced, what stayed float and why
        (prepare_model logs it at INFO on the brevitas_cpp.graph.quantizer logger)."""
        lines = [f"Quantizer: replaced {len(self.replaced)} module(s)"]
        for name, (float_type, quant_type, settings) in self.replaced.items():
            bits = f"W{settings.bits_weights} A{settings.bits_activations}"
            lines.append(
                f"  {name or '<model>'}: {float_type.__name__} -> {quant_type.__name__} ({bits})"
            )
        if self.kept_float_reasons:
            lines.append(f"kept in float: {len(self.kept_float_reasons)}")
            lines += [f"  {name}: {why}" for name, why in self.kept_float_reasons.items()]
        if self.unmapped:
            lines.append("no replacement for (left in float):")
            lines += [f"  {kind}: {', '.join(names)}" for kind, names in self.unmapped.items()]
        return "\n".join(lines)


def _disable_fused_fast_paths(model: nn.Module) -> None:
    """A TransformerEncoderLayer (and the TransformerEncoder around it) runs a fused kernel in
    eval mode without gradients that reads linear1/linear2's and self_attn's float weights
    directly, which would silently skip their quant layers; activation_relu_or_gelu = 0 turns
    that path off (the activation itself is still applied by the unfused forward)."""
    for module in model.modules():
        if isinstance(module, nn.TransformerEncoderLayer) and (
            any(isinstance(child, QuantLayerMixin) for child in (module.linear1, module.linear2))
            or isinstance(module.self_attn, QuantMultiheadAttention)
        ):
            module.activation_relu_or_gelu = 0


def _bit_width_or_none(value: Any, what: str) -> Optional[int]:
    return None if value is None else check_bit_width(value, what)


# Leaves that compute nothing a quantizer would change: not reported as left in float. An empty
# container is one too (shufflenet's stride-1 branch is an empty Sequential: the identity).
_NOTHING_TO_QUANTIZE = (
    nn.Identity,
    nn.Flatten,
    nn.Unflatten,
    nn.modules.dropout._DropoutNd,
    nn.Sequential,
    nn.ModuleList,
    nn.ModuleDict,
)


def _unmapped_leaves(model: nn.Module, factory: ReplacementFactory) -> Dict[str, List[str]]:
    """{type name: names} of the model's leaf modules outside brevitas_cpp.nn whose type has no
    replacement (a BatchNorm, a pooling, a LayerNorm, a user's module)."""
    found: Dict[str, List[str]] = OrderedDict()
    quant_layers = {n: m for n, m in model.named_modules() if isinstance(m, QuantLayerMixin)}
    for name, module in model.named_modules():
        if next(module.children(), None) is not None or type(module) in factory:
            continue
        if isinstance(module, _NOTHING_TO_QUANTIZE):
            continue
        if type(module).__module__.startswith("brevitas_cpp") or _inside_replaced(
            name, quant_layers
        ):
            continue
        found.setdefault(type(module).__name__, []).append(name)
    return found


def _inside_replaced(name: str, replaced: Mapping[str, Any]) -> bool:
    """Whether name is a submodule of a module already replaced (its old children are gone)."""
    return any(name.startswith(prefix + ".") for prefix in replaced if prefix)
