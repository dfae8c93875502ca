"""``export_onnx_qcdq``: the eval model as a standard ONNX file in Brevitas's QCDQ form.

The model is exported to a torch QCDQ program first (brevitas_cpp.export.torch_qcdq: the same
graph torch.export gives, with each quantizer as quantize/dequantize ops over its constants),
which is then written node by node (brevitas_cpp.export.onnx_ops):

* weights: integer initializers (int8 up to 8 bits, int32 above) -> DequantizeLinear, with
  ``axis`` for per-channel scales;
* activations: QuantizeLinear -> Clip (bit widths below 8, narrow ranges) -> DequantizeLinear;
* biases: integer initializers (int32 for Int32Bias) -> DequantizeLinear;
* binary and ternary activations, and everything unquantized: the standard ops that compute them.

The file passes onnx.checker (full check) and uses the default ONNX domain only.
"""

import json
import os
from typing import Any, Dict, Optional, Union

from torch import nn
from torch.export import ExportedProgram

from brevitas_cpp.export.errors import ExportError
from brevitas_cpp.export.mode import qcdq_export
from brevitas_cpp.export.onnx_graph import OnnxGraph, require_onnx
from brevitas_cpp.export.onnx_ops import translate
from brevitas_cpp.export.torch_qcdq import as_args, export_program

try:
    import onnx
except ImportError:  # pragma: no cover - the "export" extra is missing
    onnx = None

__all__ = ["export_onnx_qcdq", "program_to_onnx", "QUANTIZERS_KEY", "MIN_OPSET"]

# metadata_props entry listing the integer outputs of the activation quantizers (JSON), which
# brevitas_cpp.export.check compares with PyTorch's integers.
QUANTIZERS_KEY = "brevitas_cpp.quantizers"
# Per-channel QuantizeLinear/DequantizeLinear (axis) exist from opset 13.
MIN_OPSET = 13

PathLike = Union[str, "os.PathLike[str]"]


def program_to_onnx(program: ExportedProgram, opset_version: int, graph_name: str = "main") -> Any:
    """The ONNX ModelProto of a torch QCDQ program (see the module docstring)."""
    g = OnnxGraph(program, opset_version)
    for node in program.graph.nodes:
        if node.op == "placeholder":
            if g.is_user_input(node):
                g.add_input(node)
        elif node.op == "call_function":
            translate(g, node)
        elif node.op == "output":
            g.add_outputs(node)
        else:
            raise ExportError(f"ONNX export: graph node {node.name} ({node.op}) is not an op call")
    return g.model(graph_name, {QUANTIZERS_KEY: json.dumps(g.quantizer_outputs)})


def export_onnx_qcdq(
    model: nn.Module,
    args: Any,
    export_path: Optional[PathLike] = None,
    *,
    opset_version: int = MIN_OPSET,
    kwargs: Optional[Dict[str, Any]] = None,
    dynamic_batch: bool = True,
) -> Any:
    """Export the eval model, run on the example inputs ``args`` (a tensor or a tuple), to ONNX
    QCDQ; returns the onnx.ModelProto and writes it to export_path when given. With
    dynamic_batch the first dimension of each input is the symbolic ``batch``. Activations of
    9 to 16 bits need opset_version >= 21. The model is left as it was (mode, flags,
    quantizers). Check the file against PyTorch with brevitas_cpp.export.check_onnx_qcdq."""
    require_onnx()
    if not MIN_OPSET <= opset_version <= onnx.defs.onnx_opset_version():
        raise ValueError(
            f"export_onnx_qcdq: opset_version must be in [{MIN_OPSET}, "
            f"{onnx.defs.onnx_opset_version()}] (per-channel QuantizeLinear needs 13), got "
            f"{opset_version}"
        )
    with qcdq_export(model, as_args(args), kwargs) as session:
        program = export_program(model, session, dynamic_batch)
    proto = program_to_onnx(program, opset_version, graph_name=type(model).__name__)
    onnx.checker.check_model(proto, full_check=True)
    domains = {n.domain for n in proto.graph.node} - {"", "ai.onnx"}
    if domains:  # a translation error, never the model's
        raise ExportError(f"ONNX export: nodes outside the standard domain: {sorted(domains)}")
    if export_path is not None:
        onnx.save(proto, os.fspath(export_path))
    return proto
