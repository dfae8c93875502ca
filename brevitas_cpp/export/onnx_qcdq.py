"""``export_onnx_qcdq``: the eval model as a standard ONNX file in Brevitas's QCDQ form.

The model is exported to a torch QCDQ program first (brevitas_cpp.export.torch_qcdq: the same
graph torch.export gives, with each quantizer as quantize/dequantize ops over its constants),
which torch's ONNX exporter (``torch.onnx.export(..., dynamo=True)``, onnxscript) converts: every
ATen op as torch translates it, the quantizer ops as brevitas_cpp.export.onnx_quant_ops does:

* weights: integer initializers (int8 up to 8 bits, int32 above) -> DequantizeLinear, with
  ``axis`` for per-channel scales;
* activations: QuantizeLinear -> Clip (bit widths below 8, narrow ranges) -> DequantizeLinear;
* biases: integer initializers (int32 for Int32Bias) -> DequantizeLinear;
* binary and ternary activations, and everything unquantized: the standard ops that compute them.

The file passes onnx.checker (full check) and uses the default ONNX domain only. Its opset is 18
or later: torch's exporter implements the ATen ops in opset 18 (per-channel QuantizeLinear needs
13, 16-bit integers 21).
"""

import json
import os
import re
import warnings
from typing import Any, Dict, List, Optional, Union

import torch
from torch import nn
from torch.export import ExportedProgram

from brevitas_cpp.export.errors import ExportError
from brevitas_cpp.export.mode import qcdq_export
from brevitas_cpp.export.onnx_quant_ops import (
    QUANT_TRANSLATIONS,
    QUANTIZE_OPS,
    onnx_dtype,
    require_onnx,
)
from brevitas_cpp.export.torch_qcdq import as_args, export_program, node_module

try:
    import onnx
except ImportError:  # pragma: no cover - the "export" extra is missing
    onnx = None

__all__ = ["export_onnx_qcdq", "program_to_onnx", "QUANTIZERS_KEY", "MIN_OPSET"]

# metadata_props entry listing the integer outputs of the activation quantizers (JSON), which
# brevitas_cpp.export.check compares with PyTorch's integers.
QUANTIZERS_KEY = "brevitas_cpp.quantizers"
# torch's ONNX exporter writes opset 18 and converts only upwards from it.
MIN_OPSET = 18
# The name of the symbolic first dimension of the inputs (dynamic_batch).
BATCH = "batch"

PathLike = Union[str, "os.PathLike[str]"]


def _quantize_nodes(program: ExportedProgram) -> List[torch.fx.Node]:
    return [n for n in program.graph.nodes if n.op == "call_function" and n.target in QUANTIZE_OPS]


def _quantizer_outputs(
    program: ExportedProgram, exported: ExportedProgram, proto: Any
) -> List[Dict[str, Any]]:
    """The ONNX value of each activation quantizer call (QuantizeLinear, or its Clip), with the
    proxy that made it. torch's exporter names a node's ONNX output after the fx node of the
    program it converted (``exported``: ours after its decompositions, which keep the order of
    the quantize ops)."""
    ours, theirs = _quantize_nodes(program), _quantize_nodes(exported)
    written = {name for node in proto.graph.node for name in node.output}
    missing = [n.name for n in theirs if n.name not in written]
    if len(ours) != len(theirs) or missing:  # a translation error, never the model's
        raise ExportError(
            f"ONNX export: the file's quantizer outputs do not match the program's quantize ops "
            f"({len(ours)} in the program, {len(theirs)} converted, missing: {missing})"
        )
    entries = []
    for node, converted in zip(ours, theirs):
        proxy = node_module(node)[0].removesuffix(".export_handler")
        dtype = onnx_dtype(node.args[-1] if isinstance(node.args[-1], torch.dtype) else None)
        entries.append({"value": converted.name, "quantizer": proxy, "elem_type": dtype})
    return entries


def _drop_per_tensor_axes(proto: Any) -> None:
    """The ``axis`` onnxscript writes (its default, 1) on per-tensor QuantizeLinear /
    DequantizeLinear, which ignore it: removed, so that an axis marks a per-channel one."""
    scalars = {t.name for t in proto.graph.initializer if len(t.dims) == 0}
    for node in proto.graph.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear") and node.input[1] in scalars:
            kept = [a for a in node.attribute if a.name != "axis"]
            del node.attribute[:]
            node.attribute.extend(kept)


def _rename_dims(proto: Any, old: str, new: str) -> None:
    for info in [*proto.graph.input, *proto.graph.output, *proto.graph.value_info]:
        for dim in info.type.tensor_type.shape.dim:
            if dim.dim_param == old:
                dim.dim_param = new


def _name_batch(proto: Any, dynamic_batch: bool) -> None:
    """The symbolic first dimension of the inputs (torch.export's s0, s77, ...) as BATCH."""
    if not dynamic_batch:
        return
    names = set()
    for info in proto.graph.input:
        dims = info.type.tensor_type.shape.dim
        if dims and dims[0].dim_param:
            names.add(dims[0].dim_param)
    if len(names) == 1:
        _rename_dims(proto, names.pop(), BATCH)


# onnxscript rewrites left out (see _optimize).
_SKIPPED_REWRITES = ("FuseBatchNorm", "FuseMinMaxToClip", "FuseMaxMinToClip")


# A temporary QuantizeLinear attribute, removed before the file is written (see _optimize).
_CALL_ATTRIBUTE = "brevitas_cpp_call"


def _optimize(model: Any) -> None:
    """onnxscript's optimizer as torch.onnx.export(optimize=True) runs it (constants folded and
    lifted to initializers, shape computations simplified, unused and repeated nodes removed),
    less the rewrites that compute differently from PyTorch (a BatchNorm folded into the layer
    before it moves the values a quantizer rounds) and the Max/Min to Clip fusion (the float
    clip before a 16-bit QuantizeLinear stays as written). The quantizer nodes are never
    folded, nor merged with each other."""
    import onnx_ir as ir
    import onnx_ir.passes.common as common
    from onnxscript import rewriter
    from onnxscript.optimizer import _constant_folding

    rules = [
        rule
        for rule in rewriter._DEFAULT_REWRITE_RULES
        if not str(rule.name).startswith(_SKIPPED_REWRITES)
    ]

    def should_fold(node: Any) -> Optional[bool]:
        return False if node.op_type in ("QuantizeLinear", "DequantizeLinear") else None

    ir.passes.Sequential(
        common.InlinePass(),
        ir.passes.PassManager(
            [
                _constant_folding.FoldConstantsPass(
                    shape_inference=True,
                    input_size_limit=_constant_folding.DEFAULT_CONSTANT_FOLD_INPUT_SIZE_LIMIT,
                    output_size_limit=_constant_folding.DEFAULT_CONSTANT_FOLD_OUTPUT_SIZE_LIMIT,
                    should_fold=should_fold,
                ),
                rewriter.RewritePass(rules),
                common.RemoveUnusedNodesPass(),
                common.RemoveUnusedFunctionsPass(),
                common.RemoveUnusedOpsetsPass(),
            ],
            steps=2,
            early_stop=True,
        ),
        common.RemoveUnusedNodesPass(),
        common.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0),
        common.LiftSubgraphInitializersToMainGraphPass(),
        common.DeduplicateInitializersPass(),
    )(model)
    # Each quantizer call keeps its own QuantizeLinear, which the check compares with PyTorch's
    # call: two calls on one tensor (a self-attention's query, key and value) would otherwise
    # be merged. A distinct attribute for the merge pass only keeps them apart.
    quantize_nodes = [node for node in model.graph if node.op_type == "QuantizeLinear"]
    for call, node in enumerate(quantize_nodes):
        node.attributes[_CALL_ATTRIBUTE] = ir.AttrInt64(_CALL_ATTRIBUTE, call)
    ir.passes.Sequential(
        common.CommonSubexpressionEliminationPass(),
        common.OutputFixPass(),
        common.NameFixPass(),
    )(model)
    for node in quantize_nodes:
        del node.attributes[_CALL_ATTRIBUTE]


def _describe_failure(program: ExportedProgram, error: Exception) -> str:
    """The exporter's error summary, led by the op it failed on and the module that op ran in
    (the exporter names a node of the program after its decompositions: it is found here by
    its name, or by its op less a leading underscore, aten._linalg_eigh for aten.linalg_eigh)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(error))
    summary = text.partition("## Exception summary")[2].strip() or text
    name = re.search(r"translating node %(\w+)", text)
    target = re.search(r"target=torch\.ops\.([\w.]+)", text)
    wanted = {target.group(1), re.sub(r"\._", ".", target.group(1), 1)} if target else set()
    for node in program.graph.nodes:
        if node.op != "call_function":
            continue
        if (name and node.name == name.group(1)) or str(node.target) in wanted:
            path, type_name = node_module(node)
            where = f" in {type_name} '{path}'" if path else ""
            return f"{node.target}{where}: {summary}"
    return summary


def program_to_onnx(program: ExportedProgram, opset_version: int, graph_name: str = "main") -> Any:
    """The ONNX ModelProto of a torch QCDQ program (see the module docstring), not yet checked."""
    require_onnx()
    outputs = [s for s in program.graph_signature.output_specs]
    user_outputs = [
        s for s in outputs if s.kind == torch.export.graph_signature.OutputKind.USER_OUTPUT
    ]
    if len(user_outputs) != len(outputs):
        raise ExportError(
            "ONNX export: the program also updates state (buffers); export the model in eval mode"
        )
    output_names = ["output"] if len(outputs) == 1 else [f"output_{i}" for i in range(len(outputs))]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            onnx_program = torch.onnx.export(
                program,
                (),
                dynamo=True,
                custom_translation_table=dict(QUANT_TRANSLATIONS),
                opset_version=opset_version,
                output_names=output_names,
                optimize=False,
                verbose=False,
            )
    except Exception as error:
        raise ExportError(
            f"ONNX export: torch.onnx.export failed on {_describe_failure(program, error)}"
        ) from error
    _optimize(onnx_program.model)
    proto = onnx_program.model_proto
    proto.graph.name = graph_name
    proto.producer_name = "brevitas_cpp"
    entries = _quantizer_outputs(program, onnx_program.exported_program, proto)
    onnx.helper.set_model_props(proto, {QUANTIZERS_KEY: json.dumps(entries)})
    return proto


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
            f"{onnx.defs.onnx_opset_version()}] (torch's ONNX exporter writes opset 18 and "
            f"later), got {opset_version}"
        )
    with qcdq_export(model, as_args(args), kwargs) as session:
        program = export_program(model, session, dynamic_batch)
    _check_16_bit(program, opset_version)
    proto = program_to_onnx(program, opset_version, graph_name=type(model).__name__)
    _name_batch(proto, dynamic_batch)
    _drop_per_tensor_axes(proto)
    onnx.checker.check_model(proto, full_check=True)
    domains = {n.domain for n in proto.graph.node} - {"", "ai.onnx"}
    if domains:  # a translation error, never the model's
        raise ExportError(f"ONNX export: nodes outside the standard domain: {sorted(domains)}")
    if export_path is not None:
        onnx.save(proto, os.fspath(export_path))
    return proto


def _check_16_bit(program: ExportedProgram, opset_version: int) -> None:
    """QuantizeLinear/DequantizeLinear take 16-bit integers from opset 21."""
    if opset_version >= 21:
        return
    for node in program.graph.nodes:
        if node.op != "call_function" or getattr(node.target, "namespace", None) != (
            "quantized_decomposed"
        ):
            continue
        if any(a in (torch.int16, torch.uint16) for a in node.args):
            path, type_name = node_module(node)
            where = f" in {type_name} '{path}'" if path else ""
            raise ExportError(
                f"ONNX export: {node.target}{where} stores 16-bit integers (9 to 16 bits), "
                f"which QuantizeLinear/DequantizeLinear take from opset 21: pass opset_version=21"
            )
