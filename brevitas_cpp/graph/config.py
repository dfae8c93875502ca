"""Quantizer settings from a JSON or YAML file (or a dict): the keys are Quantizer's arguments.

    {"bits_weights": 4, "bits_activations": 8,
     "overrides": {"conv1": {"bits_weights": 8}, "layer4\\\\..*": null},
     "weight_kwargs": {"weight_quant": "Int8WeightPerChannelFloat"},
     "act_kwargs": {"collect_stats_steps": 30},
     "policies": [{"policy": "FreezeBatchNorm", "starting_epoch": 3}]}

A value naming a quantizer (a key ending in ``_quant``) may be the name of a class in
brevitas_cpp.quant. ``policies`` are the scheduler's (brevitas_cpp.graph.scheduler). An unknown key is an error
naming it and the accepted ones.
"""

import json
import pathlib
from typing import Any, Dict, Mapping, Tuple, Union

from brevitas_cpp import quant as quant_module

__all__ = ["load_config", "resolve_quantizers", "CONFIG_KEYS"]

CONFIG_KEYS = (
    "bits_weights",
    "bits_activations",
    "overrides",
    "weight_kwargs",
    "act_kwargs",
    "policies",
    "ignored_scopes",
    "target_scopes",
    "validate_scopes",
)


def resolve_quantizers(keywords: Mapping[str, Any], where: str) -> Dict[str, Any]:
    """keywords with each quantizer given by name (a key ending in _quant) made the class of
    brevitas_cpp.quant it names; an unknown name is an error naming where."""
    resolved = {}
    for key, value in keywords.items():
        if key.endswith("_quant") and isinstance(value, str):
            if not hasattr(quant_module, value):
                raise ValueError(
                    f"{where}: {key}={value!r} is not a quantizer of brevitas_cpp.quant "
                    f"(e.g. Int8WeightPerTensorFloat, Uint8ActPerTensorFloat)"
                )
            value = getattr(quant_module, value)
        resolved[key] = value
    return resolved


def load_config(
    source: Union[str, pathlib.Path, Mapping[str, Any]], extra_keys: Tuple[str, ...] = ()
) -> Dict[str, Any]:
    """Quantizer keyword arguments from a .json/.yaml/.yml file or a mapping, checked;
    extra_keys are accepted too and passed through (quantize_model's insertions)."""
    if isinstance(source, Mapping):
        raw, where = dict(source), "config"
    else:
        path = pathlib.Path(source)
        text = path.read_text()
        where = str(path)
        if path.suffix in (".yaml", ".yml"):
            try:
                import yaml
            except ImportError as exc:
                raise ImportError(
                    f"{where}: reading YAML needs PyYAML (pip install pyyaml)"
                ) from exc
            raw = yaml.safe_load(text)
        elif path.suffix == ".json":
            raw = json.loads(text)
        else:
            raise ValueError(f"{where}: a config file ends in .json, .yaml or .yml")
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: the config must be a mapping, got {type(raw).__name__}")
    accepted = (*CONFIG_KEYS, *extra_keys)
    unknown = sorted(set(raw) - set(accepted))
    if unknown:
        raise ValueError(
            f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; accepted: "
            f"{', '.join(accepted)}"
        )
    config = dict(raw)
    for key in ("weight_kwargs", "act_kwargs"):
        if key in config:
            config[key] = resolve_quantizers(config[key], f"{where}: {key}")
    if "overrides" in config:
        overrides = {}
        for pattern, value in config["overrides"].items():
            if isinstance(value, Mapping):
                value = resolve_quantizers(value, f"{where}: overrides[{pattern!r}]")
            overrides[pattern] = value
        config["overrides"] = overrides
    return config
