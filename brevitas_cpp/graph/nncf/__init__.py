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
ones; an NNCF key this reader cannot honour (``scope_overrides``, ``precision``, the staged
scheduler's ``params``, ``unified_scale_ops``, ``logarithm_scale: true``, ...) is an error naming
it.

The package's modules, one concern each: ``schema`` (NNCF's defaults, each section's keys, the
generic key and type checks), ``config`` (``load_nncf_config``, its section readers, and
``example_inputs``), ``initialization`` (``NNCFInitialization``), ``scope_groups`` (the scope
lists combined per group), ``quantizers`` (the quantizer classes and keywords a group maps onto,
the overflow fix) and ``arguments`` (``nncf_quantizer_arguments``).
"""

from brevitas_cpp.graph.nncf.arguments import nncf_quantizer_arguments
from brevitas_cpp.graph.nncf.config import example_inputs, load_nncf_config
from brevitas_cpp.graph.nncf.initialization import NNCFInitialization

__all__ = [
    "NNCFInitialization",
    "example_inputs",
    "load_nncf_config",
    "nncf_quantizer_arguments",
]
