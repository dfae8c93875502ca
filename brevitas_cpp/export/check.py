"""Agreement of an exported ONNX QCDQ file with the PyTorch eval model, run by onnxruntime.

``check_onnx_qcdq(model, path, *inputs)`` runs both on the same inputs and compares

* the outputs, element by element (bit for bit, and the largest difference);
* the integers of every activation quantizer call: onnxruntime's QuantizeLinear (+ Clip)
  outputs, which the file lists in its metadata, against the integers PyTorch's quantizers
  produced. QuantizeLinear rounds half to even like brevitas_cpp's ROUND; where the float
  values before a quantizer differ in their last bits (onnxruntime's convolution sums in another
  order), a value next to a rounding boundary lands one integer away, and the mismatch is
  counted here, with its size in quantization steps.
"""

import json
import os
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor, nn

from brevitas_cpp.export.mode import unpack_quant_tensors
from brevitas_cpp.export.onnx_qcdq import QUANTIZERS_KEY
from brevitas_cpp.export.onnx_quant_ops import require_onnx
from brevitas_cpp.export.record import quant_fields, recording

try:
    import onnx
    from onnx import helper
except ImportError:  # pragma: no cover - the "export" extra is missing
    onnx = None

__all__ = ["OnnxAgreement", "QuantizerAgreement", "check_onnx_qcdq", "OPTIMIZATION_LEVELS"]

OPTIMIZATION_LEVELS = ("disable", "basic", "extended", "all")


@dataclass(frozen=True)
class QuantizerAgreement:
    """One call of one activation quantizer: how many of its integers differ, by how much."""

    quantizer: str  # the proxy's qualified name, e.g. "conv1.input_quant"
    call: int  # which call of it (a shared quantizer runs several times)
    elements: int
    mismatches: int
    max_int_diff: int


@dataclass(frozen=True)
class OnnxAgreement:
    """See the module docstring; str() is a one-line report."""

    path: str
    elements: int  # output elements compared
    exact: int  # of which bit-equal
    max_abs_diff: float
    quantizers: Tuple[QuantizerAgreement, ...]

    @property
    def mismatches(self) -> int:
        return self.elements - self.exact

    @property
    def int_elements(self) -> int:
        return sum(q.elements for q in self.quantizers)

    @property
    def int_mismatches(self) -> int:
        return sum(q.mismatches for q in self.quantizers)

    @property
    def max_int_diff(self) -> int:
        return max((q.max_int_diff for q in self.quantizers), default=0)

    @property
    def bit_exact(self) -> bool:
        return self.mismatches == 0 and self.int_mismatches == 0

    def as_dict(self) -> Dict[str, Any]:
        out = asdict(self)
        out.update(
            mismatches=self.mismatches,
            int_elements=self.int_elements,
            int_mismatches=self.int_mismatches,
            max_int_diff=self.max_int_diff,
            bit_exact=self.bit_exact,
        )
        return out

    def __str__(self) -> str:
        return (
            f"onnxruntime vs PyTorch ({os.path.basename(self.path) or 'model'}): outputs "
            f"{self.exact}/{self.elements} bit-exact (max |diff| {self.max_abs_diff:.3g}); "
            f"activation integers {self.int_elements - self.int_mismatches}/{self.int_elements} "
            f"equal, the others off by at most {self.max_int_diff} step(s)"
        )


def _session(proto: Any, optimization: str) -> Any:
    import onnxruntime as ort  # the "export" extra; imported here so that onnx alone suffices

    if optimization not in OPTIMIZATION_LEVELS:
        raise ValueError(
            f"check_onnx_qcdq: optimization must be one of {OPTIMIZATION_LEVELS}, got "
            f"{optimization!r}"
        )
    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(
        ort.GraphOptimizationLevel,
        {
            "disable": "ORT_DISABLE_ALL",
            "basic": "ORT_ENABLE_BASIC",
            "extended": "ORT_ENABLE_EXTENDED",
            "all": "ORT_ENABLE_ALL",
        }[optimization],
    )
    return ort.InferenceSession(
        proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def _with_quantizer_outputs(proto: Any) -> Tuple[Any, List[Dict[str, Any]]]:
    """A copy of the model that also outputs the activation quantizers' integers."""
    props = {p.key: p.value for p in proto.metadata_props}
    entries = json.loads(props.get(QUANTIZERS_KEY, "[]"))
    diagnostic = onnx.ModelProto()
    diagnostic.CopyFrom(proto)
    for entry in entries:
        diagnostic.graph.output.append(
            helper.make_tensor_value_info(entry["value"], entry["elem_type"], None)
        )
    return diagnostic, entries


def _numpy(t: Tensor) -> np.ndarray:
    return t.detach().cpu().contiguous().numpy()


def _flat_tensors(value: Any) -> List[Tensor]:
    return [t for t in torch.utils._pytree.tree_flatten(value)[0] if isinstance(t, Tensor)]


def _torch_run(model: nn.Module, inputs: Sequence[Any]) -> Tuple[List[Tensor], Dict[str, Any]]:
    """The eval model's outputs and its recorded proxies by name; modes restored after."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        with torch.no_grad(), recording(model) as records:
            outputs = _flat_tensors(unpack_quant_tensors(model(*inputs)))
    finally:
        for module, training in modes:
            module.training = training
    return outputs, {r.name: r for r in records.values()}


def check_onnx_qcdq(
    model: nn.Module,
    onnx_model: Union[str, "os.PathLike[str]", Any],
    *inputs: Any,
    optimization: str = "disable",
) -> OnnxAgreement:
    """Run the ONNX file (a path or a ModelProto) with onnxruntime and the PyTorch model in eval
    mode on inputs, and compare (see the module docstring). optimization is onnxruntime's graph
    optimization level. "disable" (the default) runs the graph as written, the model's own
    arithmetic. From "basic" on, onnxruntime rewrites QDQ graphs for integer execution: it
    quantizes a float bias next to quantized operands to int32 at input scale x weight scale,
    and "all" fuses Q/DQ pairs into integer kernels whose requantization rounds in fixed point;
    what a deployment computes, a step away from PyTorch more often."""
    require_onnx()
    path = os.fspath(onnx_model) if isinstance(onnx_model, (str, os.PathLike)) else ""
    proto = onnx.load(path) if path else onnx_model
    diagnostic, entries = _with_quantizer_outputs(proto)
    session = _session(diagnostic, optimization)
    plain_inputs = _flat_tensors(unpack_quant_tensors(list(inputs)))
    feeds = {spec.name: _numpy(t) for spec, t in zip(session.get_inputs(), plain_inputs)}
    results = session.run(None, feeds)
    n_outputs = len(proto.graph.output)
    reference, records = _torch_run(model, inputs)
    if len(reference) != n_outputs:
        raise ValueError(
            f"check_onnx_qcdq: the model returns {len(reference)} tensors, the ONNX file "
            f"{n_outputs}"
        )
    elements = exact = 0
    max_abs_diff = 0.0
    for ref, got in zip(reference, results[:n_outputs]):
        ref_np = _numpy(ref)
        elements += ref_np.size
        exact += int(np.sum(ref_np == got))
        if ref_np.size:
            diff = np.abs(ref_np.astype(np.float64) - got.astype(np.float64))
            max_abs_diff = max(max_abs_diff, float(np.max(diff)))
    quantizers = []
    calls: Dict[str, int] = {}
    for entry, got in zip(entries, results[n_outputs:]):
        name = entry["quantizer"]
        call = calls.get(name, 0)
        calls[name] = call + 1
        record = records.get(name)
        if record is None or call >= len(record.calls):
            raise ValueError(
                f"check_onnx_qcdq: the file quantizes with {name!r} (call {call}), which this "
                f"model did not run on these inputs; is it the model the file was exported from?"
            )
        value, scale, zero_point, _ = quant_fields(record.calls[call].output)
        expected = _numpy(torch.round(value / scale + zero_point).to(torch.int64))
        diff = np.abs(expected - got.astype(np.int64))
        quantizers.append(
            QuantizerAgreement(
                quantizer=name,
                call=call,
                elements=int(diff.size),
                mismatches=int(np.count_nonzero(diff)),
                max_int_diff=int(diff.max()) if diff.size else 0,
            )
        )
    return OnnxAgreement(path, elements, exact, max_abs_diff, tuple(quantizers))
