"""NNCF's JSON configuration of its quantization algorithm, read into a Quantizer.

``load_nncf_config(source)`` reads a .json file or a mapping written for NNCF 2.x (its schema:
nncf/config/schema.py and nncf/config/schemata/) and returns it checked, with NNCF's defaults
where a key is absent. ``Quantizer.from_nncf_config(model, source)`` builds the Quantizer it
describes (``nncf_quantizer_arguments``); ``quantizer.nncf_initialization.run(model, data)`` then
runs the config's initializer over a data loader: range initialisation, then BatchNorm
adaptation, as NNCF does when the model is created.

What is read, and how it maps onto brevitas_cpp:

- ``compression``: one section, or a list of them, whose ``algorithm`` must be "quantization";
  any other algorithm is refused by name.
- ``weights`` / ``activations``: ``bits``, ``mode``, ``per_channel``, ``signed`` become the quant
  layers' quantizers. Weights: symmetric ``Int8WeightPerTensorFloat`` /
  ``Int8WeightPerChannelFloat``, asymmetric ``ShiftedUint8WeightPerTensorFloat`` /
  ``...PerChannelFloat``, with ``bits`` as the weight bit width. Activations: symmetric
  ``Int8ActPerTensorFloat`` (signed) or ``Uint8ActPerTensorFloat``, asymmetric
  ``ShiftedUint8ActPerTensorFloat``; with ``signed`` unset NNCF takes the sign from the
  statistics, here from the activation's range (ReLU, ReLU6 and Sigmoid unsigned, Tanh and a
  Hardtanh reaching below zero signed). The integer grids are NNCF's (nncf/torch/quantization/
  layers.py): its signed quantizers step by range / (2^(b-1) - 1), which Brevitas's do only with
  narrow range, so every signed quantizer here is narrow (NNCF's one extra level, -2^(b-1),
  lies beyond the range: a weight never reaches it); its unsigned ones step by range / (2^b - 1),
  or / (2^b - 2) for 8-bit asymmetric weights (NNCF's narrow range). The activation
  quantizers are the Quantizer's, on the outputs of the activation modules it replaces (NNCF
  puts its own on the inputs of the operations its hardware config lists): the settings are
  NNCF's, the placement brevitas_cpp's.
- ``preset`` ("performance": symmetric; "mixed": asymmetric activations) where ``mode`` is not
  given; ``target_device`` for what it changes here: on ANY, CPU and GPU the hardware config's
  first choice (per-channel weights where ``per_channel`` is unset, bit widths 8 or 16) and the
  overflow fix; TRIAL has neither. NPU and CPU_SPR are refused.
- ``overflow_fix`` ("enable": every 8-bit weight quantizer on ANY or CPU uses half its range,
  i.e. 7 bits; "first_layer_only": the first convolutions only).
- ``quantize_inputs``: each float model input quantized, as the input quantizer of the weight
  layers that read it (found by tracing the example inputs of ``input_info``); an input read by
  anything else is an error asking for ``quantize_inputs: false``.
- ``ignored_scopes`` / ``target_scopes``, top-level, in the algorithm and in each group,
  combined as NNCF combines them (nncf/common/compression.py, nncf/torch/quantization/algo.py):
  a group ignores its own, the algorithm's and the top-level entries; its own target scopes
  replace the algorithm's; top-level target scopes bound everything. Entries are read as
  graph.scopes reads them and checked against the model's modules and traced operations
  (``validate_scopes``).
- ``initializer.range`` (``num_init_samples``, ``type``) and ``initializer.batchnorm_adaptation``
  (``num_bn_adaptation_samples``): NNCFInitialization. The range types read are NNCF's averages
  of per-sample minima and maxima, "mean_min_max", and "mixed_min_max" (its default), which is
  the same for per-tensor activations; they map onto brevitas_cpp's calibration
  (graph.calibrate), which averages each quantizer's statistic (max |x| symmetric, max - min
  asymmetric) over its calls, run on one sample at a time. Weight ranges are the weights' own
  minimum and maximum in both, as brevitas_cpp's weight quantizers compute them. The other
  types (global extrema, percentiles, three sigma) have no such statistic and are refused.
- ``input_info`` (``sample_size``, ``type``, ``filler``, ``keyword``): the example inputs traced.

At the top level, a key outside NNCF's schema belongs to the application, as NNCF's root schema
admits it (its samples keep "model", "batch_size", "epochs" there): it is returned under
``application``, unread, unless it is close to a key NNCF reads (a typo: an error). Inside the
algorithm, whose schema admits no other key, an unknown key is an error naming the accepted
ones; an NNCF key this
reader cannot honour (``scope_overrides``, ``precision``, the staged scheduler's ``params``,
``unified_scale_ops``, ``logarithm_scale: true``, ...) is an error naming it.
"""

import difflib
import json
import pathlib
import re
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

import torch
from torch import Tensor, nn

from brevitas_cpp.core.stats import NegativeMinOrZero
from brevitas_cpp.graph.calibrate import calibration_mode
from brevitas_cpp.graph.overrides import check_bit_width
from brevitas_cpp.graph.replacement import default_replacement_factory
from brevitas_cpp.graph.scopes import (
    ModuleAddresses,
    ScopeSelection,
    module_addresses,
    operation_name,
)
from brevitas_cpp.graph.trace import (
    MODEL_INPUT,
    TracedGraph,
    evaluating,
    module_scopes,
    tensors_of,
    trace,
)
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
    "NNCFInitialization",
    "example_inputs",
    "load_nncf_config",
    "nncf_quantizer_arguments",
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
_HW_DEVICES = ("ANY", "CPU", "GPU")
_HW_BITS = (8, 16)
_OVERFLOW_FIX_DEVICES = ("ANY", "CPU")  # nncf/torch/quantization/algo.py, half_range
_RANGE_TYPES = ("mixed_min_max", "mean_min_max")
_NNCF_RANGE_TYPES = _RANGE_TYPES + ("min_max", "threesigma", "percentile", "mean_percentile")

# Each section's keys: None if read, else why this reader refuses it (never silently ignored).
_TOP_LEVEL: Dict[str, Optional[str]] = {
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
_ALGORITHM: Dict[str, Optional[str]] = {
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
_GROUP: Dict[str, Optional[str]] = {
    "mode": None,
    "bits": None,
    "signed": None,
    "per_channel": None,
    "logarithm_scale": None,
    "ignored_scopes": None,
    "target_scopes": None,
    "validate_scopes": None,
}
_ACTIVATIONS: Dict[str, Optional[str]] = {
    **_GROUP,
    "unified_scale_ops": "shared quantizers across operations are not mapped",
}
_INITIALIZER: Dict[str, Optional[str]] = {
    "range": None,
    "batchnorm_adaptation": None,
    "precision": "mixed-precision initialisation (HAWQ, AutoQ, manual) is not implemented",
}
_RANGE: Dict[str, Optional[str]] = {
    "num_init_samples": None,
    "type": None,
    "params": "only the percentile types read it, and they are refused",
}
_BATCHNORM: Dict[str, Optional[str]] = {"num_bn_adaptation_samples": None}
_INPUT_INFO: Dict[str, Optional[str]] = {
    "sample_size": None,
    "type": None,
    "filler": None,
    "keyword": None,
}

Source = Union[str, pathlib.Path, Mapping[str, Any]]


def _check_keys(section: Any, table: Mapping[str, Optional[str]], where: str) -> Dict[str, Any]:
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


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{where}: must be true or false, got {value!r}")
    return value


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{where}: must be a whole number >= 0, got {value!r}")
    return value


def _choice(value: Any, choices: Tuple[str, ...], where: str) -> str:
    if value not in choices:
        raise ValueError(f"{where}: must be one of {', '.join(choices)}, got {value!r}")
    return value


def _scopes(value: Any, where: str) -> Optional[List[str]]:
    """A scope list: NNCF takes one string or a list of them."""
    if value is None:
        return None
    entries = [value] if isinstance(value, str) else value
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        raise ValueError(f"{where}: must be a string or a list of strings, got {value!r}")
    return list(entries)


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
        entry = _check_keys(entry, _INPUT_INFO, here)
        size = entry.get("sample_size")
        if not isinstance(size, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in size
        ):
            raise ValueError(f"{here}.sample_size: must be a list of sizes, got {size!r}")
        keyword = entry.get("keyword")
        if keyword is not None and not isinstance(keyword, str):
            raise ValueError(f"{here}.keyword: must be a string, got {keyword!r}")
        # NNCF reads "long" as torch.long and any other type as float: only the two are taken.
        kind = _choice(entry.get("type", INPUT_TYPE), ("float", "long"), f"{here}.type")
        filler = _choice(
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
    section = _check_keys(section, table, where)
    bits = section.get("bits", QUANTIZATION_BITS)
    if isinstance(bits, bool) or not isinstance(bits, int):
        raise ValueError(f"{where}.bits: must be a whole number, got {bits!r}")
    if device in _HW_DEVICES and bits not in _HW_BITS:
        raise ValueError(
            f"{where}.bits: target_device {device!r} quantizes to 8 or 16 bits (NNCF refuses "
            f"{bits} as incompatible with its hardware config); use target_device 'TRIAL'"
        )
    check_bit_width(bits, f"{where}.bits")
    if _bool(
        section.get("logarithm_scale", QUANTIZATION_LOGARITHM_SCALE), f"{where}.logarithm_scale"
    ):
        raise ValueError(f"{where}.logarithm_scale: true (a learned log scale) is not honoured")
    signed = section.get("signed")
    if signed is not None:
        _bool(signed, f"{where}.signed")
    per_channel = section.get("per_channel")
    return {
        "mode": _choice(
            section.get("mode", preset_mode), ("symmetric", "asymmetric"), f"{where}.mode"
        ),
        "bits": bits,
        "per_channel": None if per_channel is None else _bool(per_channel, f"{where}.per_channel"),
        "signed": signed,
        "ignored_scopes": _scopes(section.get("ignored_scopes"), f"{where}.ignored_scopes"),
        "target_scopes": _scopes(section.get("target_scopes"), f"{where}.target_scopes"),
        "validate_scopes": section.get("validate_scopes"),
    }


def _weights(section: Any, where: str, device: str, preset: Optional[str]) -> Dict[str, Any]:
    group = _group(section, _GROUP, where, device, "symmetric")  # whatever the preset
    if group["per_channel"] is None:
        # The hardware config's first weight choice is per-channel; without one, per-tensor.
        group["per_channel"] = device in _HW_DEVICES
    if group["signed"] is False:
        raise ValueError(f"{where}.signed: false (unsigned weights) is not honoured")
    if group["signed"] is not None and group["mode"] == "asymmetric":
        raise ValueError(f"{where}.signed: applies to symmetric quantizers only")
    return group


def _activations(section: Any, where: str, device: str, preset: Optional[str]) -> Dict[str, Any]:
    preset_mode = "asymmetric" if preset == "mixed" else "symmetric"
    group = _group(section, _ACTIVATIONS, where, device, preset_mode)
    if group["per_channel"]:
        raise ValueError(f"{where}.per_channel: true (per-channel activations) is not honoured")
    group["per_channel"] = False
    if group["signed"] is not None and group["mode"] == "asymmetric":
        raise ValueError(f"{where}.signed: applies to symmetric quantizers only")
    return group


def _initializer(section: Any, where: str) -> Dict[str, Any]:
    section = _check_keys(section, _INITIALIZER, where)
    range_section = section.get("range", {})
    if isinstance(range_section, list):
        raise ValueError(f"{where}.range: per-layer range initialisation (a list) is not honoured")
    range_section = _check_keys(range_section, _RANGE, f"{where}.range")
    kind = _choice(
        range_section.get("type", RANGE_INIT_TYPE), _NNCF_RANGE_TYPES, f"{where}.range.type"
    )
    if kind not in _RANGE_TYPES:
        raise ValueError(
            f"{where}.range.type: {kind!r} has no brevitas_cpp statistic (calibration averages "
            f"each quantizer's statistic over samples); use {' or '.join(_RANGE_TYPES)}"
        )
    bn = _check_keys(
        section.get("batchnorm_adaptation", {}), _BATCHNORM, f"{where}.batchnorm_adaptation"
    )
    return {
        "range": {
            "num_init_samples": _count(
                range_section.get("num_init_samples", NUM_INIT_SAMPLES),
                f"{where}.range.num_init_samples",
            ),
            "type": kind,
        },
        "batchnorm_adaptation": {
            "num_bn_adaptation_samples": _count(
                bn.get("num_bn_adaptation_samples", NUM_BN_ADAPTATION_SAMPLES),
                f"{where}.batchnorm_adaptation.num_bn_adaptation_samples",
            )
        },
    }


def _algorithm(section: Dict[str, Any], where: str, device: str) -> Dict[str, Any]:
    section = _check_keys(section, _ALGORITHM, where)
    preset = section.get("preset")
    if preset is not None:
        _choice(preset, ("performance", "mixed"), f"{where}.preset")
    # NNCF applies a preset on a device with a hardware config (the default one there), and on
    # TRIAL only when given (nncf/torch/quantization/algo.py, _parse_group_params).
    if preset is None and device in _HW_DEVICES:
        preset = QUANTIZATION_PRESET
    if _bool(section.get("quantize_outputs", QUANTIZE_OUTPUTS), f"{where}.quantize_outputs"):
        raise ValueError(
            f"{where}.quantize_outputs: true (quantized model outputs) is not honoured"
        )
    if _bool(
        section.get("export_to_onnx_standard_ops", QUANTIZATION_EXPORT_TO_ONNX_STANDARD_OPS),
        f"{where}.export_to_onnx_standard_ops",
    ):
        raise ValueError(
            f"{where}.export_to_onnx_standard_ops: true is not honoured (export with "
            f"brevitas_cpp.export)"
        )
    validate = _bool(section.get("validate_scopes", VALIDATE_SCOPES), f"{where}.validate_scopes")
    groups = {}
    for name, read in (("weights", _weights), ("activations", _activations)):
        group = read(section.get(name, {}), f"{where}.{name}", device, preset)
        if group["validate_scopes"] is None:
            group["validate_scopes"] = validate
        _bool(group["validate_scopes"], f"{where}.{name}.validate_scopes")
        groups[name] = group
    return {
        "preset": preset,
        "quantize_inputs": _bool(
            section.get("quantize_inputs", QUANTIZE_INPUTS), f"{where}.quantize_inputs"
        ),
        "overflow_fix": _choice(
            section.get("overflow_fix", QUANTIZATION_OVERFLOW_FIX),
            ("enable", "disable", "first_layer_only"),
            f"{where}.overflow_fix",
        ),
        "ignored_scopes": _scopes(section.get("ignored_scopes"), f"{where}.ignored_scopes"),
        "target_scopes": _scopes(section.get("target_scopes"), f"{where}.target_scopes"),
        "validate_scopes": validate,
        **groups,
        "initializer": _initializer(section.get("initializer", {}), f"{where}.initializer"),
    }


def load_nncf_config(source: Source) -> Dict[str, Any]:
    """The NNCF config of a .json file or a mapping, checked and with NNCF's defaults filled in
    (see the module docstring): ``input_info`` (a list), ``target_device``, the top-level
    ``ignored_scopes``/``target_scopes`` and ``quantization``, the algorithm's settings."""
    raw, where = _read_source(source)
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: must be an object, got {type(raw).__name__}")
    application = _application_keys(raw, where)
    raw = _check_keys({k: v for k, v in raw.items() if k in _TOP_LEVEL}, _TOP_LEVEL, where)
    device = raw.get("target_device", TARGET_DEVICE)
    if device in ("NPU", "CPU_SPR"):
        raise ValueError(
            f"{where}: target_device {device!r} is not honoured (its hardware constraints are "
            f"not modelled); use ANY, CPU, GPU or TRIAL"
        )
    _choice(device, ("ANY", "CPU", "GPU", "TRIAL"), f"{where}: target_device")
    if "compression" not in raw:
        raise ValueError(f"{where}: no 'compression' section (the quantization algorithm)")
    section, section_where = _quantization_section(raw["compression"], where)
    return {
        "input_info": _input_info(raw.get("input_info"), f"{where}: input_info"),
        "target_device": device,
        "ignored_scopes": _scopes(raw.get("ignored_scopes"), f"{where}: ignored_scopes"),
        "target_scopes": _scopes(raw.get("target_scopes"), f"{where}: target_scopes"),
        "quantization": _algorithm(section, section_where, device),
        "application": application,
    }


def _application_keys(raw: Mapping[str, Any], where: str) -> Dict[str, Any]:
    """The top-level keys outside NNCF's schema. Its root schema admits them (nncf/config/
    schema.py sets no additionalProperties there): NNCF's sample applications keep their own
    settings beside NNCF's ("model", "batch_size", "epochs", "optimizer", ...). They are returned
    unread, for the application; one close to a key NNCF reads is taken for a typo and refused."""
    application = {key: value for key, value in raw.items() if key not in _TOP_LEVEL}
    for key in application:
        close = difflib.get_close_matches(str(key), list(_TOP_LEVEL), n=1, cutoff=0.8)
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


@dataclass(frozen=True)
class NNCFInitialization:
    """An NNCF initializer section, run over data by ``run`` (NNCF's order: ranges, then
    BatchNorm statistics). A sample count of 0 skips that step. A batch is a Tensor, or a
    tuple/list whose first item is the input (as graph.calibrate takes them); NNCF takes whole
    batches until the count is reached (ceil(count / batch size) of them)."""

    num_init_samples: int = NUM_INIT_SAMPLES
    range_type: str = RANGE_INIT_TYPE
    num_bn_adaptation_samples: int = NUM_BN_ADAPTATION_SAMPLES

    def run(self, model: nn.Module, data: Iterable[Any]) -> Dict[str, int]:
        """Initialise the prepared model's quantizer ranges and adapt its BatchNorms; returns
        the number of samples each step used."""
        return {
            "range_init_samples": self.initialize_ranges(model, data),
            "bn_adaptation_samples": self.adapt_batchnorms(model, data),
        }

    def initialize_ranges(self, model: nn.Module, data: Iterable[Any]) -> int:
        """graph.calibrate's calibration, one sample at a time: each activation quantizer's
        statistic averaged over the samples, NNCF's mean of per-sample extrema."""
        seen = 0
        if self.num_init_samples == 0:
            return seen
        with calibration_mode(model):
            for batch in data:
                inputs = _batch_input(batch)
                for sample in inputs.split(1):
                    model(sample)
                seen += inputs.shape[0]
                if seen >= self.num_init_samples:
                    break
        return seen

    def adapt_batchnorms(self, model: nn.Module, data: Iterable[Any]) -> int:
        """NNCF's BatchNorm adaptation (nncf/torch/initialization.py): forwards without
        gradients, the BatchNorms in training mode and the rest in eval, so that only their
        running statistics move; every module's mode is restored after."""
        seen = 0
        if self.num_bn_adaptation_samples == 0:
            return seen
        norms = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)
        with evaluating(model, []):
            for module in model.modules():
                if isinstance(module, norms):
                    module.train()
            for batch in data:
                inputs = _batch_input(batch)
                model(inputs)
                seen += inputs.shape[0]
                if seen >= self.num_bn_adaptation_samples:
                    break
        return seen


def _batch_input(batch: Any) -> Tensor:
    inputs = batch[0] if isinstance(batch, (tuple, list)) else batch
    if not isinstance(inputs, Tensor):
        raise TypeError(
            f"NNCFInitialization: a batch is a Tensor or a (Tensor, ...) tuple, got "
            f"{type(batch).__name__}"
        )
    return inputs


# ---- the Quantizer's arguments --------------------------------------------------------------

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


class _Scopes:
    """The config's scope lists as ScopeSelections, combined per group as NNCF combines them
    (see the module docstring), and checked against the model (validate_scopes)."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        algo = config["quantization"]

        def selection(what: str, entries: Optional[List[str]]) -> Optional[ScopeSelection]:
            return None if entries is None else ScopeSelection(what, entries)

        self.top_ignored = selection("ignored_scopes", config["ignored_scopes"])
        self.top_target = selection("target_scopes", config["target_scopes"])
        self.algo_ignored = selection("compression.ignored_scopes", algo["ignored_scopes"])
        self.algo_target = selection("compression.target_scopes", algo["target_scopes"])
        self.groups: Dict[str, Tuple[Optional[ScopeSelection], Optional[ScopeSelection]]] = {}
        # Each selection with the validate_scopes it is checked under.
        self.checked: List[Tuple[ScopeSelection, bool]] = [
            (s, algo["validate_scopes"])
            for s in (self.top_ignored, self.top_target, self.algo_ignored, self.algo_target)
            if s is not None
        ]
        for group in ("weights", "activations"):
            own = algo[group]
            ignored = selection(f"compression.{group}.ignored_scopes", own["ignored_scopes"])
            target = selection(f"compression.{group}.target_scopes", own["target_scopes"])
            self.groups[group] = (ignored, target)
            self.checked += [(s, own["validate_scopes"]) for s in (ignored, target) if s]

    def quantizes(self, group: str, addresses: ModuleAddresses) -> bool:
        """Whether the group quantizes what these addresses name."""
        own_ignored, own_target = self.groups[group]
        target = own_target if own_target is not None else self.algo_target
        for required in (self.top_target, target):
            if required is not None and not required.selects(addresses):
                return False
        ignored = (own_ignored, self.algo_ignored, self.top_ignored)
        return not any(s.selects(addresses) for s in ignored if s is not None)

    def check(self, addresses: List[ModuleAddresses], known: List[str]) -> None:
        """Every entry selects some module or traced operation (an error naming the closest
        addresses, or a warning where validate_scopes is false)."""
        for selection, validate in self.checked:
            for address in addresses:
                selection.selects(address)
            selection.check_all_selected(known, validate)


def _weight_quant(weights: Mapping[str, Any]) -> type:
    symmetric = weights["mode"] == "symmetric"
    if weights["per_channel"]:
        return Int8WeightPerChannelFloat if symmetric else ShiftedUint8WeightPerChannelFloat
    return Int8WeightPerTensorFloat if symmetric else ShiftedUint8WeightPerTensorFloat


def _weight_narrow(weights: Mapping[str, Any], bits: int) -> bool:
    """Narrow range for NNCF's grid (see the module docstring): symmetric always; asymmetric at
    8 bits only (NNCF: narrow at 8 bits unless on half their range, i.e. 7)."""
    return weights["mode"] == "symmetric" or bits == 8


def _act_keywords(acts: Mapping[str, Any], signed: bool, prefix: str = "") -> Dict[str, Any]:
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


def _signed_range(module: nn.Module) -> bool:
    """Whether the activation's outputs reach below zero (where NNCF's statistics would make
    its quantizer signed): not for ReLU, ReLU6, Sigmoid and Hardsigmoid, nor a Hardtanh from zero
    up (GELU, SiLU and Hardswish dip below zero)."""
    if isinstance(module, nn.Hardtanh):  # ReLU6 included
        return module.min_val < 0
    return not isinstance(module, (nn.ReLU, nn.Sigmoid, nn.Hardsigmoid))


def _half_range(config: Mapping[str, Any]) -> str:
    """Which 8-bit weight quantizers NNCF's overflow fix gives half their range: "all",
    "first" (the first convolutions) or "none" (nncf/torch/quantization/algo.py)."""
    algo = config["quantization"]
    if config["target_device"] not in _OVERFLOW_FIX_DEVICES or algo["weights"]["bits"] != 8:
        return "none"
    return {"enable": "all", "first_layer_only": "first", "disable": "none"}[algo["overflow_fix"]]


def _first_convolutions(graph: TracedGraph) -> List[str]:
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


class _Builder:
    """The Quantizer's arguments for one model and config (see nncf_quantizer_arguments)."""

    def __init__(self, model: nn.Module, config: Dict[str, Any], factory: Mapping) -> None:
        self.model, self.config, self.factory = model, config, factory
        self.algo = config["quantization"]
        self.scopes = _Scopes(config)
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
            elif acts["mode"] == "symmetric" and acts["signed"] is None and _signed_range(module):
                self.overrides[name] = _act_keywords(acts, signed=True)

    def _add(self, name: str, keywords: Dict[str, Any], why: str) -> None:
        if name in self.overrides and self.overrides[name] is None:
            raise ValueError(
                f"Quantizer.from_nncf_config: {why} quantizes {name}, which the weights' "
                f"scopes keep in float"
            )
        self.overrides[name] = {**(self.overrides.get(name) or {}), **keywords}

    def first_layer_half_range(self) -> None:
        weights = self.algo["weights"]
        for scope in _first_convolutions(self._needs_graph("overflow_fix first_layer_only")):
            name = self.name_of_scope.get(scope)
            if name is not None and self.overrides.get(name, {}) is not None:
                half = {"bits_weights": 7, "weight_narrow_range": _weight_narrow(weights, 7)}
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
                self._add(name, _act_keywords(acts, signed, "input_"), "quantize_inputs")

    def arguments(self) -> Dict[str, Any]:
        weights, acts = self.algo["weights"], self.algo["activations"]
        half = _half_range(self.config)
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
                "weight_quant": _weight_quant(weights),
                "weight_narrow_range": _weight_narrow(weights, bits_weights),
            },
            "act_kwargs": _act_keywords(acts, acts["signed"] is True),
            "overrides": {re.escape(name): value for name, value in self.overrides.items()},
        }


def nncf_quantizer_arguments(
    model: nn.Module, source: Source, extra: Optional[Mapping[str, Any]] = None
) -> Tuple[Dict[str, Any], NNCFInitialization]:
    """The Quantizer's keyword arguments for model from an NNCF config (see the module
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
