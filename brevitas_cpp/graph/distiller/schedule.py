"""Distiller's schedule files read as written (distiller/config.py's dict_config):

    quantizers:      {name: {class: PACTQuantizer, bits_activations: 4, ..., overrides: {...}}}
    lr_schedulers:   {name: {class: MultiStepLR, milestones: [60, 120], gamma: 0.1}}
    policies:
      - quantizer: {instance_name: name}
        starting_epoch: 0
        ending_epoch: 200
        frequency: 1
      - lr_scheduler: {instance_name: name}
        epochs: [0, 1, 2]        # or starting_epoch / ending_epoch / frequency

As in Distiller: one quantizer at most; it is prepared when the schedule is read, before the
learning-rate schedulers are built (so their optimizer holds PACT's parameter group), and those
start from ``resumed_epoch``. A class's arguments are checked against its constructor.

Stricter than Distiller, where it would silently do nothing: an unknown section or key, a
section brevitas_cpp does not read (pruners, regularizers, extensions), a quantizer or scheduler
no policy uses, a policy naming an undefined instance or given ``args`` its algorithm ignores,
and two policies of one quantizer are errors naming them.
"""

import inspect
import pathlib
from collections import namedtuple
from typing import Any, Dict, List, Mapping, Optional, Tuple, Type, Union

import torch
from torch import Tensor, nn

from brevitas_cpp.graph.distiller.lr import MultiStepMultiGammaLR, PolynomialLR
from brevitas_cpp.graph.distiller.policies import DistillerPolicy, LRPolicy, QuantizationPolicy
from brevitas_cpp.graph.distiller.quantizers import (
    DistillerQuantizer,
    DorefaQuantizer,
    PACTQuantizer,
    QuantAwareTrainRangeLinearQuantizer,
)
from brevitas_cpp.graph.scheduler import CompressionScheduler

__all__ = ["DistillerScheduler", "PolicyLoss", "dict_config", "file_config", "load_schedule"]

PolicyLoss = namedtuple("PolicyLoss", ["overall_loss", "loss_components"])

_SECTIONS = ("quantizers", "lr_schedulers", "policies")
_REFUSED_SECTIONS = ("pruners", "regularizers", "extensions")
_POLICY_EPOCH_KEYS = ("starting_epoch", "ending_epoch", "frequency", "epochs")

QUANTIZER_CLASSES: Dict[str, Type[DistillerQuantizer]] = {
    cls.__name__: cls
    for cls in (QuantAwareTrainRangeLinearQuantizer, PACTQuantizer, DorefaQuantizer)
}
# Distiller quantizers that are not QAT methods this reader builds.
_UNSUPPORTED_QUANTIZERS = (
    "PostTrainLinearQuantizer",
    "WRPNQuantizer",
    "NCFQuantAwareTrainQuantizer",
)


def _lr_scheduler_classes() -> Dict[str, type]:
    """torch's schedulers, under Distiller's of the same name (its config imports them last)."""
    lr_module = torch.optim.lr_scheduler
    classes = {
        name: obj
        for name, obj in vars(lr_module).items()
        if isinstance(obj, type)
        and not name.startswith("_")
        and obj is not lr_module.LRScheduler
        and (issubclass(obj, lr_module.LRScheduler) or obj is lr_module.ReduceLROnPlateau)
    }
    classes.update({cls.__name__: cls for cls in (MultiStepMultiGammaLR, PolynomialLR)})
    return classes


class DistillerScheduler:
    """Distiller's CompressionScheduler callbacks, with its signatures, over a
    graph.CompressionScheduler holding the schedule's policies. ``model`` is the prepared model,
    ``quantizer`` the schedule's quantizer (or None), ``lr_schedulers`` its schedulers by name."""

    def __init__(
        self,
        model: nn.Module,
        quantizer: Optional[DistillerQuantizer] = None,
        lr_schedulers: Optional[Mapping[str, Any]] = None,
    ) -> None:
        self.model = model
        self.quantizer = quantizer
        self.lr_schedulers = dict(lr_schedulers or {})
        self.scheduler = CompressionScheduler(model)

    @property
    def policies(self) -> List[DistillerPolicy]:
        return list(self.scheduler.policies)

    def add_policy(self, policy: DistillerPolicy) -> None:
        self.scheduler.add_policy(policy)

    def on_epoch_begin(self, epoch: int, optimizer: Any = None, **kwargs: Any) -> None:
        self.scheduler.on_epoch_begin(epoch)

    def on_minibatch_begin(
        self,
        epoch: int,
        minibatch_id: int = 0,
        minibatches_per_epoch: Optional[int] = None,
        optimizer: Any = None,
    ) -> None:
        self.scheduler.on_minibatch_begin(epoch, minibatch_id)

    def before_backward_pass(
        self,
        epoch: int,
        minibatch_id: int,
        minibatches_per_epoch: Optional[int],
        loss: Tensor,
        optimizer: Any = None,
        return_loss_components: bool = False,
    ) -> Union[Tensor, PolicyLoss]:
        overall = self.scheduler.before_backward_pass(epoch, minibatch_id, loss)
        return PolicyLoss(overall, []) if return_loss_components else overall

    def before_parameter_optimization(
        self,
        epoch: int,
        minibatch_id: int,
        minibatches_per_epoch: Optional[int],
        optimizer: Any = None,
    ) -> None:
        """Distiller's hook before optimizer.step(); none of these policies acts there."""

    def on_minibatch_end(
        self,
        epoch: int,
        minibatch_id: int = 0,
        minibatches_per_epoch: Optional[int] = None,
        optimizer: Any = None,
    ) -> None:
        self.scheduler.on_minibatch_end(epoch, minibatch_id)

    def on_epoch_end(
        self,
        epoch: int,
        optimizer: Any = None,
        metrics: Optional[Mapping[str, float]] = None,
        **kwargs: Any,
    ) -> None:
        for policy in self.scheduler.policies:
            if isinstance(policy, LRPolicy):
                policy.metrics = metrics
        self.scheduler.on_epoch_end(epoch)

    def state_dict(self) -> Dict[str, Any]:
        return {
            "scheduler": self.scheduler.state_dict(),
            "lr_schedulers": {n: s.state_dict() for n, s in self.lr_schedulers.items()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """The learning-rate schedulers' state, then the policies' for the saved epoch."""
        saved = state.get("lr_schedulers", {})
        if set(saved) != set(self.lr_schedulers):
            raise ValueError(
                f"DistillerScheduler.load_state_dict: the checkpoint's lr_schedulers "
                f"{sorted(saved)} are not this schedule's {sorted(self.lr_schedulers)}"
            )
        for name, lr_state in saved.items():
            self.lr_schedulers[name].load_state_dict(lr_state)
        self.scheduler.load_state_dict(state["scheduler"])


def _checked_definition(
    section: str,
    name: str,
    definition: Any,
    classes: Mapping[str, type],
    extra: Tuple[str, ...],
    unsupported: Tuple[str, ...] = (),
) -> Tuple[type, Dict[str, Any]]:
    """(class, arguments) of a definition, its class known and its arguments checked against
    the constructor (the reader's own ``extra`` ones excluded, as Distiller adds them)."""
    where = f"{section}[{name!r}]"
    if not isinstance(definition, Mapping) or "class" not in definition:
        raise ValueError(
            f"{where}: a definition is a mapping with a 'class' key, got {definition!r}"
        )
    args = dict(definition)
    class_name = args.pop("class")
    if class_name in unsupported:
        raise ValueError(f"{where}: class {class_name!r} is not supported by brevitas_cpp")
    if class_name not in classes:
        raise ValueError(
            f"{where}: class named {class_name!r} does not exist; accepted: {', '.join(classes)}"
        )
    cls = classes[class_name]
    accepted = [
        p.name
        for p in list(inspect.signature(cls.__init__).parameters.values())[1:]
        if p.kind == p.POSITIONAL_OR_KEYWORD and p.name not in extra
    ]
    invalid = [key for key in args if key not in accepted]
    if invalid:
        raise ValueError(
            f"{where}: {class_name} does not accept the argument(s) {invalid}; accepted: "
            f"{', '.join(accepted)}"
        )
    return cls, args


def _build(where: str, cls: type, args: Mapping[str, Any], extra: Mapping[str, Any]) -> Any:
    """cls(**args) with the reader's extra arguments the constructor takes."""
    params = inspect.signature(cls.__init__).parameters
    try:
        return cls(**args, **{key: value for key, value in extra.items() if key in params})
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{where}: {exc}") from exc


def _policy_target(i: int, entry: Any) -> Tuple[str, str, Dict[str, Any]]:
    """(kind, instance name, epoch keywords) of policies[i]."""
    where = f"policies[{i}]"
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where}: a policy is a mapping, got {entry!r}")
    kinds = [key for key in entry if key not in _POLICY_EPOCH_KEYS]
    if len(kinds) != 1 or kinds[0] not in ("quantizer", "lr_scheduler"):
        refused = [k for k in kinds if k in ("pruner", "regularizer", "extension")]
        if refused:
            raise ValueError(
                f"{where}: {refused[0]} policies are not supported by brevitas_cpp (it reads "
                f"Distiller's quantization schedules: quantizer and lr_scheduler policies)"
            )
        raise ValueError(
            f"{where}: a policy has one of 'quantizer' or 'lr_scheduler' and the keys "
            f"{', '.join(_POLICY_EPOCH_KEYS)}; got the key(s) {kinds}"
        )
    kind = kinds[0]
    target = entry[kind]
    if not isinstance(target, Mapping) or "instance_name" not in target:
        raise ValueError(f"{where}: {kind} must be a mapping with an instance_name, got {target!r}")
    extra = sorted(set(target) - {"instance_name"})
    if extra:
        raise ValueError(
            f"{where}: {kind} {target['instance_name']!r}: key(s) {extra} are not read (a "
            f"{kind} policy takes no args in Distiller either); accepted: instance_name"
        )
    epochs = {key: entry[key] for key in _POLICY_EPOCH_KEYS if key in entry}
    return kind, target["instance_name"], epochs


def _check_policies(
    targets: List[Tuple[str, str, Dict[str, Any]]],
    quantizer_defs: Mapping[str, Any],
    lr_defs: Mapping[str, Any],
) -> None:
    """Each policy names a defined instance over valid epochs, a quantizer has one policy at
    most, and every defined instance has one."""
    used: Dict[Tuple[str, str], int] = {}
    for i, (kind, name, epochs) in enumerate(targets):
        defined = quantizer_defs if kind == "quantizer" else lr_defs
        if name not in defined:
            section = "quantizers" if kind == "quantizer" else "lr_schedulers"
            raise ValueError(
                f"policies[{i}]: {kind} {name!r} was not defined in the list of {section} "
                f"(defined: {', '.join(map(repr, defined)) or 'none'})"
            )
        if kind == "quantizer" and (kind, name) in used:
            raise ValueError(
                f"policies[{i}]: quantizer {name!r} already has a policy (policies"
                f"[{used[(kind, name)]}]); a quantizer prepares the model once"
            )
        used.setdefault((kind, name), i)
        try:
            if kind == "quantizer":
                QuantizationPolicy.check_epochs(name, **epochs)
            else:
                DistillerPolicy(name, **epochs)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"policies[{i}]: {exc}") from exc
    for kind, defined in (("quantizer", quantizer_defs), ("lr_scheduler", lr_defs)):
        for name in defined:
            if (kind, name) not in used:
                raise ValueError(f"schedule: {kind} {name!r} is defined but no policy uses it")


def dict_config(
    model: nn.Module,
    optimizer: Optional[torch.optim.Optimizer],
    sched_dict: Mapping[str, Any],
    scheduler: None = None,
    resumed_epoch: Optional[int] = None,
) -> DistillerScheduler:
    """The DistillerScheduler of a schedule already loaded as a mapping (Distiller's
    dict_config; see the module docstring). The model is prepared in place; the scheduler's
    ``model`` is it (or its replacement, if the model itself was a replaced layer)."""
    if scheduler is not None:
        raise ValueError(
            "dict_config: adding to an existing scheduler is not supported; pass scheduler=None"
        )
    if not isinstance(sched_dict, Mapping):
        raise ValueError(f"schedule: expected a mapping, got {type(sched_dict).__name__}")
    for section in sched_dict:
        if section in _REFUSED_SECTIONS:
            raise ValueError(
                f"schedule: section {section!r} is not supported by brevitas_cpp (it reads "
                f"Distiller's quantization schedules: {', '.join(_SECTIONS)})"
            )
        if section not in _SECTIONS:
            raise ValueError(
                f"schedule: unknown section {section!r}; accepted: {', '.join(_SECTIONS)}"
            )
    quantizer_defs = dict(sched_dict.get("quantizers") or {})
    lr_defs = dict(sched_dict.get("lr_schedulers") or {})
    if len(quantizer_defs) > 1:
        raise ValueError(
            f"schedule: multiple quantizers are not supported (as in Distiller), got "
            f"{list(quantizer_defs)}"
        )
    # Everything is checked before the model is touched: an error leaves it as it was.
    quantizer_classes = {
        name: _checked_definition(
            "quantizers",
            name,
            definition,
            QUANTIZER_CLASSES,
            ("model", "optimizer"),
            _UNSUPPORTED_QUANTIZERS,
        )
        for name, definition in quantizer_defs.items()
    }
    lr_classes = {
        name: _checked_definition(
            "lr_schedulers", name, definition, _lr_scheduler_classes(), ("optimizer", "last_epoch")
        )
        for name, definition in lr_defs.items()
    }
    targets = [_policy_target(i, e) for i, e in enumerate(sched_dict.get("policies") or [])]
    _check_policies(targets, quantizer_defs, lr_defs)
    if lr_defs and optimizer is None:
        raise ValueError("schedule: lr_schedulers need the optimizer (dict_config's optimizer)")

    # The quantizer first: the learning-rate schedulers must see its parameter groups.
    quantizer, root = None, model
    for name, (cls, args) in quantizer_classes.items():
        extra = {"model": model, "optimizer": optimizer}
        quantizer = _build(f"quantizers[{name!r}]", cls, args, extra)
        root = quantizer.prepare_model()
    last_epoch = -1 if resumed_epoch is None else resumed_epoch
    lr_schedulers = {
        name: _build(
            f"lr_schedulers[{name!r}]",
            cls,
            args,
            {"optimizer": optimizer, "last_epoch": last_epoch},
        )
        for name, (cls, args) in lr_classes.items()
    }
    result = DistillerScheduler(root, quantizer, lr_schedulers)
    for i, (kind, name, epochs) in enumerate(targets):
        if kind == "quantizer":
            result.add_policy(QuantizationPolicy(name, quantizer, **epochs))
        else:
            result.add_policy(LRPolicy(name, lr_schedulers[name], **epochs))
    return result


def file_config(
    model: nn.Module,
    optimizer: Optional[torch.optim.Optimizer],
    filename: Union[str, pathlib.Path],
    scheduler: None = None,
    resumed_epoch: Optional[int] = None,
) -> DistillerScheduler:
    """dict_config of a YAML schedule file (Distiller's file_config)."""
    try:
        import yaml
    except ImportError as exc:  # pragma: no cover - PyYAML is a dependency of the graph extra
        raise ImportError("reading a Distiller schedule needs PyYAML (pip install pyyaml)") from exc
    path = pathlib.Path(filename)
    try:
        sched_dict = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not a YAML schedule ({exc})") from exc
    try:
        return dict_config(model, optimizer, sched_dict, scheduler, resumed_epoch)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from exc


def load_schedule(
    model: nn.Module,
    source: Union[str, pathlib.Path, Mapping[str, Any]],
    optimizer: Optional[torch.optim.Optimizer] = None,
    resumed_epoch: Optional[int] = None,
) -> DistillerScheduler:
    """A Distiller schedule (a YAML file or a mapping) applied to model: the model prepared in
    place and the DistillerScheduler whose callbacks the training loop calls."""
    if isinstance(source, Mapping):
        return dict_config(model, optimizer, source, resumed_epoch=resumed_epoch)
    return file_config(model, optimizer, source, resumed_epoch=resumed_epoch)
