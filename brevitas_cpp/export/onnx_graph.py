"""An ONNX graph written from a torch QCDQ program (brevitas_cpp.export.torch_qcdq), node by
node, with onnx.helper: no exporter in between, so the file holds exactly the standard ops the
translations of brevitas_cpp.export.onnx_ops write, and the quantizers are QuantizeLinear /
Clip / DequantizeLinear with their constants as initializers.

``OnnxGraph`` keeps the names: each torch graph node's ONNX value, the initializers (the
program's parameters, buffers and constants, written only when a node reads them, under their
qualified names), and node names from the module each node ran in
(``/conv1/weight_quant/export_handler/DequantizeLinear``, as torch's exporter names them).
"""

from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind

from brevitas_cpp.export.errors import ExportError
from brevitas_cpp.export.torch_qcdq import node_module

try:  # the "export" extra; brevitas_cpp.export works without it except for ONNX
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError:  # pragma: no cover - exercised only where onnx is missing
    onnx = None

__all__ = ["OnnxGraph", "onnx_dtype", "require_onnx"]

_ONNX_DTYPES = {
    torch.float32: "FLOAT",
    torch.float64: "DOUBLE",
    torch.float16: "FLOAT16",
    torch.int8: "INT8",
    torch.uint8: "UINT8",
    torch.int16: "INT16",
    torch.uint16: "UINT16",
    torch.int32: "INT32",
    torch.int64: "INT64",
    torch.bool: "BOOL",
}
_CONSTANT_KINDS = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)


def require_onnx() -> None:
    if onnx is None:
        raise ImportError(
            "ONNX export needs the onnx package (and onnxruntime to check the file): "
            "pip install 'brevitas_cpp[export]', or pip install onnx onnxruntime"
        )


def onnx_dtype(dtype: torch.dtype) -> int:
    """The TensorProto element type of a torch dtype."""
    try:
        return getattr(TensorProto, _ONNX_DTYPES[dtype])
    except KeyError:
        raise ExportError(f"ONNX export: no ONNX element type for {dtype}") from None


def _sanitize(path: str) -> str:
    return "/" + path.replace(".", "/") if path else ""


class OnnxGraph:
    """The ONNX graph being written for one program (see the module docstring)."""

    def __init__(self, program: ExportedProgram, opset: int) -> None:
        require_onnx()
        self.program = program
        self.opset = opset
        self.nodes: List[Any] = []
        self.initializers: Dict[str, Any] = {}
        self.values: Dict[torch.fx.Node, Any] = {}
        self.inputs: List[Any] = []
        self.outputs: List[Any] = []
        # Integer outputs of the activation quantizers, for the onnxruntime check.
        self.quantizer_outputs: List[Dict[str, Any]] = []
        self._taken: Dict[str, int] = {}
        self._constants: Dict[str, Tuple[str, Tensor]] = {}
        self._user_inputs: List[str] = []
        self.current: Optional[torch.fx.Node] = None
        state = {**program.state_dict, **program.constants}
        for spec in program.graph_signature.input_specs:
            if spec.kind in _CONSTANT_KINDS:
                self._constants[spec.arg.name] = (spec.target, state[spec.target])
            elif spec.kind == InputKind.USER_INPUT:
                self._user_inputs.append(spec.arg.name)
            else:
                raise ExportError(f"ONNX export: program input {spec.arg.name} of kind {spec.kind}")

    # ---- names --------------------------------------------------------------------------------

    def unique(self, name: str) -> str:
        count = self._taken.get(name, 0)
        self._taken[name] = count + 1
        return name if count == 0 else f"{name}_{count}"

    def module_path(self) -> str:
        return node_module(self.current)[0] if self.current is not None else ""

    # ---- writing ----------------------------------------------------------------------------

    def add(self, op_type: str, inputs: Sequence[str], outputs: int = 1, **attrs: Any) -> Any:
        """One node in the current module's namespace; its output name(s)."""
        name = self.unique(f"{_sanitize(self.module_path())}/{op_type}")
        names = [f"{name}_output_{i}" for i in range(outputs)]
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self.nodes.append(helper.make_node(op_type, list(inputs), names, name=name, **attrs))
        return names[0] if outputs == 1 else names

    def constant(self, value: Union[Tensor, np.ndarray], hint: str) -> str:
        """An initializer holding value (a copy), named after hint."""
        array = value.detach().cpu().numpy() if isinstance(value, Tensor) else np.asarray(value)
        name = self.unique(f"{_sanitize(self.module_path())}/{hint}")
        # np.array, not np.ascontiguousarray: that one makes a 0-d scalar 1-d.
        self.initializers[name] = numpy_helper.from_array(np.array(array, order="C"), name)
        return name

    def scalar(self, value: Any, dtype: torch.dtype, hint: str = "Constant") -> str:
        return self.constant(torch.tensor(value, dtype=dtype), hint)

    def ints(self, values: Sequence[int], hint: str = "Constant") -> str:
        return self.constant(torch.tensor(list(values), dtype=torch.int64), hint)

    # ---- reading the program ----------------------------------------------------------------

    def is_user_input(self, node: torch.fx.Node) -> bool:
        return node.name in self._user_inputs

    def is_constant(self, arg: Any) -> bool:
        return isinstance(arg, torch.fx.Node) and arg.name in self._constants

    def constant_value(self, arg: Any, what: str) -> Tensor:
        """The value of a parameter, buffer or constant the program reads."""
        if not self.is_constant(arg):
            raise ExportError(
                f"ONNX export: {what} of {self.describe()} is computed in the graph; QCDQ needs "
                f"it as a constant"
            )
        return self._constants[arg.name][1]

    def value(self, arg: Any, dtype: Optional[torch.dtype] = None) -> str:
        """The ONNX name of an argument: a graph value, or an initializer (a program constant,
        written when first read, or a Python number as a scalar of dtype)."""
        if isinstance(arg, torch.fx.Node):
            if arg in self.values:
                name = self.values[arg]
                if name is None or isinstance(name, list):
                    raise ExportError(f"ONNX export: {arg.name} is not a single tensor")
                return name
            if arg.name in self._constants:
                target, tensor = self._constants[arg.name]
                if target not in self.initializers:
                    self.initializers[target] = numpy_helper.from_array(
                        np.array(tensor.detach().cpu().numpy(), order="C"), target
                    )
                self.values[arg] = target
                return target
            raise ExportError(f"ONNX export: {arg.name} is used before it is written")
        if isinstance(arg, (bool, int, float)):
            if dtype is None:
                dtype = torch.float32 if isinstance(arg, float) else torch.int64
            return self.scalar(arg, dtype)
        raise ExportError(f"ONNX export: argument {arg!r} of {self.describe()} is not a tensor")

    def describe(self) -> str:
        node = self.current
        if node is None:
            return "the graph"
        path, type_name = node_module(node)
        where = f" in {type_name} '{path}'" if path else ""
        return f"{node.target}{where}"

    @staticmethod
    def meta(node: Any) -> Tensor:
        return node.meta["val"]

    # ---- the model ----------------------------------------------------------------------------

    def _value_info(self, name: str, val: Tensor) -> Any:
        dims: List[Union[int, str]] = []
        for i, size in enumerate(val.shape):
            dims.append(int(size) if isinstance(size, int) else ("batch" if i == 0 else f"d{i}"))
        return helper.make_tensor_value_info(name, onnx_dtype(val.dtype), dims)

    def add_input(self, node: torch.fx.Node) -> None:
        self.values[node] = node.name
        self.inputs.append(self._value_info(node.name, self.meta(node)))

    def add_outputs(self, output_node: torch.fx.Node) -> None:
        results = output_node.args[0]
        specs = self.program.graph_signature.output_specs
        user = [r for r, s in zip(results, specs) if s.kind == OutputKind.USER_OUTPUT]
        if len(user) != len(specs):
            kinds = sorted({str(s.kind) for s in specs if s.kind != OutputKind.USER_OUTPUT})
            raise ExportError(
                f"ONNX export: the program also updates state ({', '.join(kinds)}); export the "
                f"model in eval mode"
            )
        for i, result in enumerate(user):
            name = "output" if len(user) == 1 else f"output_{i}"
            if not isinstance(result, torch.fx.Node):
                raise ExportError(f"ONNX export: output {i} is not a tensor ({result!r})")
            self.current = None
            self.nodes.append(
                helper.make_node("Identity", [self.value(result)], [name], name=f"/{name}")
            )
            self.outputs.append(self._value_info(name, self.meta(result)))

    def model(self, graph_name: str, metadata: Dict[str, str]) -> Any:
        graph = helper.make_graph(
            self.nodes,
            graph_name,
            self.inputs,
            self.outputs,
            initializer=list(self.initializers.values()),
        )
        opset = [helper.make_opsetid("", self.opset)]
        model = helper.make_model(graph, opset_imports=opset, producer_name="brevitas_cpp")
        # The oldest IR version that knows the opset: what older runtimes load.
        model.ir_version = helper.find_min_ir_version_for(opset)
        helper.set_model_props(model, metadata)
        return model
