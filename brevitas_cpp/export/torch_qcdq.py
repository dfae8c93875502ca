"""``export_torch_qcdq``: the eval model as a ``torch.export.ExportedProgram`` whose quantizers are
torch's ``quantized_decomposed`` quantize/dequantize ops (Brevitas's torch QCDQ export, on
torch.export instead of TorchScript). The program runs without brevitas_cpp: its ops are aten
ops and ``quantized_decomposed`` ones (registered by importing
``torch.ao.quantization.fx._decomposed``)."""

import os
from typing import Any, Dict, List, Optional, Tuple, Union

import torch
from torch import Tensor, nn
from torch.export import ExportedProgram

from brevitas_cpp.export.errors import ExportError
from brevitas_cpp.export.mode import ExportSession, qcdq_export

__all__ = ["export_torch_qcdq", "library_ops", "node_module", "as_args"]

PathLike = Union[str, "os.PathLike[str]"]
# node.meta key: the qualified name of the proxy whose handler traced a quantize/dequantize node.
QUANTIZER_META = "brevitas_cpp_quantizer"


def as_args(args: Any) -> Tuple[Any, ...]:
    """The positional example inputs as a tuple (one tensor may be given alone)."""
    return tuple(args) if isinstance(args, (tuple, list)) else (args,)


def node_module(node: torch.fx.Node) -> Tuple[str, str]:
    """(qualified name, type name) of the innermost module a graph node ran in ('' at the top).
    A quantizer's nodes are named after its proxy: torch.export records a module called from a
    TorchFunctionMode (brevitas_cpp.graph's inserted quantizers) under its own name only."""
    stack = node.meta.get("nn_module_stack") or {}
    path, type_name = "", ""
    if stack:
        path, module_type = list(stack.values())[-1]
        type_name = module_type if isinstance(module_type, str) else module_type.__qualname__
        type_name = type_name.rsplit(".", 1)[-1]
    quantizer = node.meta.get(QUANTIZER_META)
    if quantizer:
        path = quantizer + ".export_handler"
    return path, type_name


def library_ops(program: ExportedProgram) -> List[str]:
    """The brevitas_cpp custom ops left in a program, each with the module it ran in."""
    found = []
    for node in program.graph.nodes:
        target = node.target
        if node.op == "call_function" and getattr(target, "namespace", None) == "brevitas_cpp":
            path, type_name = node_module(node)
            found.append(f"{target} in {type_name} '{path}'")
    return found


def _batch_dynamic_shapes(args: Tuple[Any, ...]) -> Tuple[Any, ...]:
    # Dim.AUTO: the first dimension is symbolic unless the model fixes it (then it specializes
    # instead of failing).
    return tuple(
        {0: torch.export.Dim.AUTO} if isinstance(a, Tensor) and a.dim() else None for a in args
    )


def _batch_of_two(args: Tuple[Any, ...]) -> Tuple[Any, ...]:
    """A batch of one repeated to two: torch.export specializes a dimension of size 1."""
    return tuple(
        a.repeat(2, *[1] * (a.dim() - 1))
        if isinstance(a, Tensor) and a.dim() and a.shape[0] == 1
        else a
        for a in args
    )


_QUANTIZE_OPS = (
    torch.ops.quantized_decomposed.quantize_per_tensor.default,
    torch.ops.quantized_decomposed.quantize_per_channel.default,
)


def _name_quantize_nodes(program: ExportedProgram, log: List[str]) -> None:
    """node.meta[QUANTIZER_META] = the proxy name of each quantize node (the handlers logged
    them as traced, in graph order; the last trace if torch.export ran the model twice)."""
    nodes = [n for n in program.graph.nodes if n.target in _QUANTIZE_OPS]
    if not nodes or len(log) < len(nodes) or len(log) % len(nodes):
        return
    for node, name in zip(nodes, log[-len(nodes) :]):
        node.meta[QUANTIZER_META] = name
        for user in node.users:  # its dequantize
            user.meta[QUANTIZER_META] = name


def export_program(
    model: nn.Module, session: ExportSession, dynamic_batch: bool
) -> ExportedProgram:
    """torch.export of a model in qcdq_export mode; an ExportError if a library op is left."""
    args, dynamic_shapes = session.args, None
    if dynamic_batch and not session.kwargs:
        args = _batch_of_two(args)
        dynamic_shapes = _batch_dynamic_shapes(args)
    session.quantize_log.clear()
    program = torch.export.export(
        model, args, session.kwargs, dynamic_shapes=dynamic_shapes, strict=False
    )
    # The handlers' metadata (scales for the layers' eager checks) is unused by the graph.
    program.graph_module.graph.eliminate_dead_code()
    program.graph_module.recompile()
    _name_quantize_nodes(program, session.quantize_log)
    left = library_ops(program)
    if left:
        raise ExportError(
            "QCDQ export: these brevitas_cpp ops have no QCDQ form and would need brevitas_cpp "
            "at run time: " + "; ".join(left)
        )
    return program


def export_torch_qcdq(
    model: nn.Module,
    args: Any,
    export_path: Optional[PathLike] = None,
    *,
    kwargs: Optional[Dict[str, Any]] = None,
    dynamic_batch: bool = True,
) -> ExportedProgram:
    """The eval model on example inputs ``args`` (a tensor or a tuple) as an ExportedProgram with
    quantized_decomposed quantize/dequantize ops; weights and biases are stored integers
    (int8/int32 buffers) dequantized in the graph. With dynamic_batch the first dimension of
    each input may vary. Saved with torch.export.save to export_path when given. The model is
    left as it was (mode, flags, quantizers)."""
    with qcdq_export(model, as_args(args), kwargs) as session:
        program = export_program(model, session, dynamic_batch)
    if export_path is not None:
        torch.export.save(program, os.fspath(export_path))
    return program
