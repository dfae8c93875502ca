"""NNCF's config schema as this reader holds it: NNCF's defaults, the keys of each section
(read, or refused with the reason), the hardware devices' constraints, and the generic checks
of a section's keys and of a value's type, each error naming where in the config it is."""

import pathlib
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

__all__ = [
    "ACTIVATIONS_KEYS",
    "ALGORITHM_KEYS",
    "BATCHNORM_KEYS",
    "GROUP_KEYS",
    "HW_BITS",
    "HW_DEVICES",
    "INITIALIZER_KEYS",
    "INPUT_FILLER",
    "INPUT_INFO_KEYS",
    "INPUT_TYPE",
    "NNCF_RANGE_TYPES",
    "NUM_BN_ADAPTATION_SAMPLES",
    "NUM_INIT_SAMPLES",
    "OVERFLOW_FIX_DEVICES",
    "QUANTIZATION_BITS",
    "QUANTIZATION_EXPORT_TO_ONNX_STANDARD_OPS",
    "QUANTIZATION_LOGARITHM_SCALE",
    "QUANTIZATION_OVERFLOW_FIX",
    "QUANTIZATION_PRESET",
    "QUANTIZE_INPUTS",
    "QUANTIZE_OUTPUTS",
    "RANGE_INIT_TYPE",
    "RANGE_KEYS",
    "RANGE_TYPES",
    "Source",
    "TARGET_DEVICE",
    "TOP_LEVEL_KEYS",
    "VALIDATE_SCOPES",
    "check_keys",
    "checked_boolean",
    "checked_choice",
    "checked_count",
    "checked_scope_list",
]

# NNCF's defaults (nncf/config/schemata/defaults.py).
TARGET_DEVICE = "ANY"
NUM_BN_ADAPTATION_SAMPLES = 2000
NUM_INIT_SAMPLES = 256
QUANTIZATION_PRESET = "performance"
QUANTIZE_INPUTS = True
QUANTIZE_OUTPUTS = False
QUANTIZATION_EXPORT_TO_ONNX_STANDARD_OPS = False
QUANTIZATION_OVERFLOW_FIX = "enable"
QUANTIZATION_BITS = 8
QUANTIZATION_LOGARITHM_SCALE = False
VALIDATE_SCOPES = True
# The range initializer's default type (nncf/config/schemata/algo/quantization.py,
# BASIC_RANGE_INIT_CONFIG_PROPERTIES) and input_info's filler and type
# (nncf/torch/dynamic_graph/io_handling.py, FillerInputElement).
RANGE_INIT_TYPE = "mixed_min_max"
INPUT_FILLER = "ones"
INPUT_TYPE = "float"

# Devices with a hardware config (nncf/common/hardware/config.py: ANY reads CPU's), whose first
# choice for a weight is symmetric, per-channel, and whose quantizers are 8 or 16 bits
# (nncf/common/hardware/configs/cpu.json, gpu.json). TRIAL has none.
HW_DEVICES = ("ANY", "CPU", "GPU")
HW_BITS = (8, 16)
OVERFLOW_FIX_DEVICES = ("ANY", "CPU")  # nncf/torch/quantization/algo.py, half_range
RANGE_TYPES = ("mixed_min_max", "mean_min_max")
NNCF_RANGE_TYPES = RANGE_TYPES + ("min_max", "threesigma", "percentile", "mean_percentile")

# Each section's keys: None if read, else why this reader refuses it (never silently ignored).
TOP_LEVEL_KEYS: Dict[str, Optional[str]] = {
    "input_info": None,
    "target_device": None,
    "compression": None,
    "ignored_scopes": None,
    "target_scopes": None,
    "accuracy_aware_training": "accuracy-aware training is NNCF's training loop",
    "compression_lr_multiplier": "give the quantizers' learning rate with quant_param_group",
    "disable_shape_matching": "deprecated in NNCF; nothing here matches shapes",
    "log_dir": "this reader writes no logs",
}
ALGORITHM_KEYS: Dict[str, Optional[str]] = {
    "algorithm": None,
    "initializer": None,
    "preset": None,
    "quantize_inputs": None,
    "quantize_outputs": None,
    "weights": None,
    "activations": None,
    "overflow_fix": None,
    "export_to_onnx_standard_ops": None,
    "ignored_scopes": None,
    "target_scopes": None,
    "validate_scopes": None,
    "scope_overrides": "per-scope quantizer settings are not mapped (use Quantizer overrides)",
    "params": "the staged quantization scheduler is not mapped (use the Quantizer's policies)",
    "compression_lr_multiplier": "give the quantizers' learning rate with quant_param_group",
}
GROUP_KEYS: Dict[str, Optional[str]] = {
    "mode": None,
    "bits": None,
    "signed": None,
    "per_channel": None,
    "logarithm_scale": None,
    "ignored_scopes": None,
    "target_scopes": None,
    "validate_scopes": None,
}
ACTIVATIONS_KEYS: Dict[str, Optional[str]] = {
    **GROUP_KEYS,
    "unified_scale_ops": "shared quantizers across operations are not mapped",
}
INITIALIZER_KEYS: Dict[str, Optional[str]] = {
    "range": None,
    "batchnorm_adaptation": None,
    "precision": "mixed-precision initialisation (HAWQ, AutoQ, manual) is not implemented",
}
RANGE_KEYS: Dict[str, Optional[str]] = {
    "num_init_samples": None,
    "type": None,
    "params": "only the percentile types read it, and they are refused",
}
BATCHNORM_KEYS: Dict[str, Optional[str]] = {"num_bn_adaptation_samples": None}
INPUT_INFO_KEYS: Dict[str, Optional[str]] = {
    "sample_size": None,
    "type": None,
    "filler": None,
    "keyword": None,
}

Source = Union[str, pathlib.Path, Mapping[str, Any]]


def check_keys(section: Any, table: Mapping[str, Optional[str]], where: str) -> Dict[str, Any]:
    """section as a dict, after refusing its unknown keys and those this reader cannot honour."""
    if not isinstance(section, Mapping):
        raise ValueError(f"{where}: must be an object, got {type(section).__name__}")
    unknown = sorted(set(section) - set(table))
    if unknown:
        accepted = ", ".join(k for k, reason in table.items() if reason is None)
        raise ValueError(
            f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; NNCF keys read here: "
            f"{accepted}"
        )
    for key in section:
        if table[key] is not None:
            raise ValueError(
                f"{where}: {key!r} is an NNCF key this reader cannot honour: {table[key]}"
            )
    return dict(section)


def checked_boolean(value: Any, where: str) -> bool:
    """value, if it is JSON's true or false."""
    if not isinstance(value, bool):
        raise ValueError(f"{where}: must be true or false, got {value!r}")
    return value


def checked_count(value: Any, where: str) -> int:
    """value, if it is a sample count: a whole number >= 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{where}: must be a whole number >= 0, got {value!r}")
    return value


def checked_choice(value: Any, choices: Tuple[str, ...], where: str) -> str:
    """value, if it is one of choices."""
    if value not in choices:
        raise ValueError(f"{where}: must be one of {', '.join(choices)}, got {value!r}")
    return value


def checked_scope_list(value: Any, where: str) -> Optional[List[str]]:
    """A scope list: NNCF takes one string or a list of them."""
    if value is None:
        return None
    entries = [value] if isinstance(value, str) else value
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        raise ValueError(f"{where}: must be a string or a list of strings, got {value!r}")
    return list(entries)
