"""``load_nncf_config``: an NNCF config read from a .json file or a mapping, each section checked
against graph.nncf.schema and NNCF's defaults filled in (input_info, target_device, the
top-level scopes, the quantization algorithm with its weights/activations groups and
initializer, the application's own keys); ``example_inputs``: input_info's example inputs as
tensors."""

import difflib
import json
import pathlib
from typing import Any, Dict, List, Mapping, Optional, Tuple

import torch
from torch import Tensor

from brevitas_cpp.graph.nncf.schema import (
    ACTIVATIONS_KEYS,
    ALGORITHM_KEYS,
    BATCHNORM_KEYS,
    GROUP_KEYS,
    HW_BITS,
    HW_DEVICES,
    INITIALIZER_KEYS,
    INPUT_FILLER,
    INPUT_INFO_KEYS,
    INPUT_TYPE,
    NNCF_RANGE_TYPES,
    NUM_BN_ADAPTATION_SAMPLES,
    NUM_INIT_SAMPLES,
    QUANTIZATION_BITS,
    QUANTIZATION_EXPORT_TO_ONNX_STANDARD_OPS,
    QUANTIZATION_LOGARITHM_SCALE,
    QUANTIZATION_OVERFLOW_FIX,
    QUANTIZATION_PRESET,
    QUANTIZE_INPUTS,
    QUANTIZE_OUTPUTS,
    RANGE_INIT_TYPE,
    RANGE_KEYS,
    RANGE_TYPES,
    TARGET_DEVICE,
    TOP_LEVEL_KEYS,
    VALIDATE_SCOPES,
    Source,
    check_keys,
    checked_boolean,
    checked_choice,
    checked_count,
    checked_scope_list,
)
from brevitas_cpp.graph.overrides import check_bit_width

__all__ = ["example_inputs", "load_nncf_config"]


def _read_source(source: Source) -> Tuple[Dict[str, Any], str]:
    if isinstance(source, Mapping):
        return dict(source), "nncf config"
    path = pathlib.Path(source)
    if path.suffix != ".json":
        raise ValueError(f"{path}: an NNCF config is a .json file")
    raw = json.loads(path.read_text())
    if not isinstance(raw, Mapping):
        raise ValueError(f"{path}: the config must be an object, got {type(raw).__name__}")
    return dict(raw), str(path)


def _input_info(value: Any, where: str) -> List[Dict[str, Any]]:
    entries = [] if value is None else [value] if isinstance(value, Mapping) else value
    if not isinstance(entries, list):
        raise ValueError(f"{where}: must be an object or a list of objects, got {value!r}")
    read = []
    for i, entry in enumerate(entries):
        here = f"{where}[{i}]"
        entry = check_keys(entry, INPUT_INFO_KEYS, here)
        size = entry.get("sample_size")
        if not isinstance(size, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in size
        ):
            raise ValueError(f"{here}.sample_size: must be a list of sizes, got {size!r}")
        keyword = entry.get("keyword")
        if keyword is not None and not isinstance(keyword, str):
            raise ValueError(f"{here}.keyword: must be a string, got {keyword!r}")
        # NNCF reads "long" as torch.long and any other type as float: only the two are taken.
        kind = checked_choice(entry.get("type", INPUT_TYPE), ("float", "long"), f"{here}.type")
        filler = checked_choice(
            entry.get("filler", INPUT_FILLER), ("ones", "zeros", "random"), f"{here}.filler"
        )
        if kind == "long" and filler == "random":
            raise ValueError(f"{here}: a random filler makes float inputs only (torch.rand)")
        read.append({"sample_size": size, "type": kind, "filler": filler, "keyword": keyword})
    return read


def _quantization_section(compression: Any, where: str) -> Tuple[Dict[str, Any], str]:
    """The one quantization algorithm of compression, and where it is."""
    sections = [compression] if isinstance(compression, Mapping) else compression
    if not isinstance(sections, list) or not sections:
        raise ValueError(
            f"{where}: compression must be an algorithm's object or a non-empty list of them"
        )
    found = []
    for i, section in enumerate(sections):
        here = f"{where}: compression" + (f"[{i}]" if not isinstance(compression, Mapping) else "")
        if not isinstance(section, Mapping) or "algorithm" not in section:
            raise ValueError(f"{here}: an algorithm's object needs an 'algorithm' key")
        if section["algorithm"] != "quantization":
            raise ValueError(
                f"{here}: algorithm {section['algorithm']!r} is not supported: this reader "
                f"takes NNCF's 'quantization' only"
            )
        found.append((section, here))
    if len(found) > 1:
        raise ValueError(f"{where}: compression lists the quantization algorithm twice")
    return dict(found[0][0]), found[0][1]


def _group(
    section: Any, table: Mapping[str, Optional[str]], where: str, device: str, preset_mode: str
) -> Dict[str, Any]:
    section = check_keys(section, table, where)
    bits = section.get("bits", QUANTIZATION_BITS)
    if isinstance(bits, bool) or not isinstance(bits, int):
        raise ValueError(f"{where}.bits: must be a whole number, got {bits!r}")
    if device in HW_DEVICES and bits not in HW_BITS:
        raise ValueError(
            f"{where}.bits: target_device {device!r} quantizes to 8 or 16 bits (NNCF refuses "
            f"{bits} as incompatible with its hardware config); use target_device 'TRIAL'"
        )
    check_bit_width(bits, f"{where}.bits")
    if checked_boolean(
        section.get("logarithm_scale", QUANTIZATION_LOGARITHM_SCALE), f"{where}.logarithm_scale"
    ):
        raise ValueError(f"{where}.logarithm_scale: true (a learned log scale) is not honoured")
    signed = section.get("signed")
    if signed is not None:
        checked_boolean(signed, f"{where}.signed")
    per_channel = section.get("per_channel")
    return {
        "mode": checked_choice(
            section.get("mode", preset_mode), ("symmetric", "asymmetric"), f"{where}.mode"
        ),
        "bits": bits,
        "per_channel": None
        if per_channel is None
        else checked_boolean(per_channel, f"{where}.per_channel"),
        "signed": signed,
        "ignored_scopes": checked_scope_list(
            section.get("ignored_scopes"), f"{where}.ignored_scopes"
        ),
        "target_scopes": checked_scope_list(section.get("target_scopes"), f"{where}.target_scopes"),
        "validate_scopes": section.get("validate_scopes"),
    }


def _weights(section: Any, where: str, device: str, preset: Optional[str]) -> Dict[str, Any]:
    group = _group(section, GROUP_KEYS, where, device, "symmetric")  # whatever the preset
    if group["per_channel"] is None:
        # The hardware config's first weight choice is per-channel; without one, per-tensor.
        group["per_channel"] = device in HW_DEVICES
    if group["signed"] is False:
        raise ValueError(f"{where}.signed: false (unsigned weights) is not honoured")
    if group["signed"] is not None and group["mode"] == "asymmetric":
        raise ValueError(f"{where}.signed: applies to symmetric quantizers only")
    return group


def _activations(section: Any, where: str, device: str, preset: Optional[str]) -> Dict[str, Any]:
    preset_mode = "asymmetric" if preset == "mixed" else "symmetric"
    group = _group(section, ACTIVATIONS_KEYS, where, device, preset_mode)
    if group["per_channel"]:
        raise ValueError(f"{where}.per_channel: true (per-channel activations) is not honoured")
    group["per_channel"] = False
    if group["signed"] is not None and group["mode"] == "asymmetric":
        raise ValueError(f"{where}.signed: applies to symmetric quantizers only")
    return group


def _initializer(section: Any, where: str) -> Dict[str, Any]:
    section = check_keys(section, INITIALIZER_KEYS, where)
    range_section = section.get("range", {})
    if isinstance(range_section, list):
        raise ValueError(f"{where}.range: per-layer range initialisation (a list) is not honoured")
    range_section = check_keys(range_section, RANGE_KEYS, f"{where}.range")
    kind = checked_choice(
        range_section.get("type", RANGE_INIT_TYPE), NNCF_RANGE_TYPES, f"{where}.range.type"
    )
    if kind not in RANGE_TYPES:
        raise ValueError(
            f"{where}.range.type: {kind!r} has no brevitas_cpp statistic (calibration averages "
            f"each quantizer's statistic over samples); use {' or '.join(RANGE_TYPES)}"
        )
    bn = check_keys(
        section.get("batchnorm_adaptation", {}), BATCHNORM_KEYS, f"{where}.batchnorm_adaptation"
    )
    return {
        "range": {
            "num_init_samples": checked_count(
                range_section.get("num_init_samples", NUM_INIT_SAMPLES),
                f"{where}.range.num_init_samples",
            ),
            "type": kind,
        },
        "batchnorm_adaptation": {
            "num_bn_adaptation_samples": checked_count(
                bn.get("num_bn_adaptation_samples", NUM_BN_ADAPTATION_SAMPLES),
                f"{where}.batchnorm_adaptation.num_bn_adaptation_samples",
            )
        },
    }


def _algorithm(section: Dict[str, Any], where: str, device: str) -> Dict[str, Any]:
    section = check_keys(section, ALGORITHM_KEYS, where)
    preset = section.get("preset")
    if preset is not None:
        checked_choice(preset, ("performance", "mixed"), f"{where}.preset")
    # NNCF applies a preset on a device with a hardware config (the default one there), and on
    # TRIAL only when given (nncf/torch/quantization/algo.py, _parse_group_params).
    if preset is None and device in HW_DEVICES:
        preset = QUANTIZATION_PRESET
    if checked_boolean(
        section.get("quantize_outputs", QUANTIZE_OUTPUTS), f"{where}.quantize_outputs"
    ):
        raise ValueError(
            f"{where}.quantize_outputs: true (quantized model outputs) is not honoured"
        )
    if checked_boolean(
        section.get("export_to_onnx_standard_ops", QUANTIZATION_EXPORT_TO_ONNX_STANDARD_OPS),
        f"{where}.export_to_onnx_standard_ops",
    ):
        raise ValueError(
            f"{where}.export_to_onnx_standard_ops: true is not honoured (export with "
            f"brevitas_cpp.export)"
        )
    validate = checked_boolean(
        section.get("validate_scopes", VALIDATE_SCOPES), f"{where}.validate_scopes"
    )
    groups = {}
    for name, read in (("weights", _weights), ("activations", _activations)):
        group = read(section.get(name, {}), f"{where}.{name}", device, preset)
        if group["validate_scopes"] is None:
            group["validate_scopes"] = validate
        checked_boolean(group["validate_scopes"], f"{where}.{name}.validate_scopes")
        groups[name] = group
    return {
        "preset": preset,
        "quantize_inputs": checked_boolean(
            section.get("quantize_inputs", QUANTIZE_INPUTS), f"{where}.quantize_inputs"
        ),
        "overflow_fix": checked_choice(
            section.get("overflow_fix", QUANTIZATION_OVERFLOW_FIX),
            ("enable", "disable", "first_layer_only"),
            f"{where}.overflow_fix",
        ),
        "ignored_scopes": checked_scope_list(
            section.get("ignored_scopes"), f"{where}.ignored_scopes"
        ),
        "target_scopes": checked_scope_list(section.get("target_scopes"), f"{where}.target_scopes"),
        "validate_scopes": validate,
        **groups,
        "initializer": _initializer(section.get("initializer", {}), f"{where}.initializer"),
    }


def load_nncf_config(source: Source) -> Dict[str, Any]:
    """The NNCF config of a .json file or a mapping, checked and with NNCF's defaults filled in
    (see graph.nncf's docstring): ``input_info`` (a list), ``target_device``, the top-level
    ``ignored_scopes``/``target_scopes`` and ``quantization``, the algorithm's settings."""
    raw, where = _read_source(source)
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: must be an object, got {type(raw).__name__}")
    application = _application_keys(raw, where)
    raw = check_keys({k: v for k, v in raw.items() if k in TOP_LEVEL_KEYS}, TOP_LEVEL_KEYS, where)
    device = raw.get("target_device", TARGET_DEVICE)
    if device in ("NPU", "CPU_SPR"):
        raise ValueError(
            f"{where}: target_device {device!r} is not honoured (its hardware constraints are "
            f"not modelled); use ANY, CPU, GPU or TRIAL"
        )
    checked_choice(device, ("ANY", "CPU", "GPU", "TRIAL"), f"{where}: target_device")
    if "compression" not in raw:
        raise ValueError(f"{where}: no 'compression' section (the quantization algorithm)")
    section, section_where = _quantization_section(raw["compression"], where)
    return {
        "input_info": _input_info(raw.get("input_info"), f"{where}: input_info"),
        "target_device": device,
        "ignored_scopes": checked_scope_list(raw.get("ignored_scopes"), f"{where}: ignored_scopes"),
        "target_scopes": checked_scope_list(raw.get("target_scopes"), f"{where}: target_scopes"),
        "quantization": _algorithm(section, section_where, device),
        "application": application,
    }


def _application_keys(raw: Mapping[str, Any], where: str) -> Dict[str, Any]:
    """The top-level keys outside NNCF's schema. Its root schema admits them (nncf/config/
    schema.py sets no additionalProperties there): NNCF's sample applications keep their own
    settings beside NNCF's ("model", "batch_size", "epochs", "optimizer", ...). They are returned
    unread, for the application; one close to a key NNCF reads is taken for a typo and refused."""
    application = {key: value for key, value in raw.items() if key not in TOP_LEVEL_KEYS}
    for key in application:
        close = difflib.get_close_matches(str(key), list(TOP_LEVEL_KEYS), n=1, cutoff=0.8)
        if close:
            raise ValueError(
                f"{where}: unknown key {key!r}; did you mean NNCF's {close[0]!r}? (keys outside "
                f"NNCF's schema are left to the application)"
            )
    return application


def example_inputs(
    config: Mapping[str, Any], device: Optional[torch.device] = None
) -> Tuple[Tuple[Tensor, ...], Dict[str, Tensor]]:
    """(args, kwargs) for the model's forward from a loaded config's input_info, filled as
    NNCF fills them (ones by default, zeros, or torch.rand); keyword entries go to kwargs."""
    args: List[Tensor] = []
    kwargs: Dict[str, Tensor] = {}
    for entry in config["input_info"]:
        dtype = torch.long if entry["type"] == "long" else torch.float32
        make = {"ones": torch.ones, "zeros": torch.zeros, "random": torch.rand}[entry["filler"]]
        tensor = make(entry["sample_size"], dtype=dtype, device=device)
        if entry["keyword"] is None:
            args.append(tensor)
        else:
            kwargs[entry["keyword"]] = tensor
    return tuple(args), kwargs
