"""Translations of the torch program's ops into ONNX nodes (opset 13 and later), one function per
op, looked up by ``TRANSLATIONS[op]``.

The quantizers: ``quantized_decomposed.quantize_per_*`` becomes QuantizeLinear, then a Clip to
[quant_min, quant_max] when that is narrower than the storage type (bit widths below 8, narrow
ranges); ``dequantize_per_*`` becomes DequantizeLinear, its input an integer initializer for
weights and biases. Everything else is the standard op that computes the same; shapes of
reshapes come from the program's recorded shapes (a symbolic batch dimension as -1). An op
without a translation is an ExportError naming it and the module it ran in.
"""

import math
import operator
from typing import Any, Callable, Dict, List, Sequence

import torch
from torch import Tensor

from brevitas_cpp.export.errors import ExportError
from brevitas_cpp.export.onnx_graph import OnnxGraph, onnx_dtype
from brevitas_cpp.export.torch_qcdq import QUANTIZER_META

__all__ = ["TRANSLATIONS", "translate"]

aten = torch.ops.aten
Translation = Callable[[OnnxGraph, torch.fx.Node, Dict[str, Any]], Any]
TRANSLATIONS: Dict[Any, Translation] = {}


def _register(*ops: Any) -> Callable[[Translation], Translation]:
    def wrap(fn: Translation) -> Translation:
        for op in ops:
            TRANSLATIONS[op] = fn
        return fn

    return wrap


def _arguments(node: torch.fx.Node) -> Dict[str, Any]:
    """The op's arguments by schema name, defaults filled in."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return {str(i): a for i, a in enumerate(node.args)}
    out: Dict[str, Any] = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args) and not arg.kwarg_only:
            out[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            out[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            out[arg.name] = arg.default_value
        else:
            out[arg.name] = None
    return out


def translate(g: OnnxGraph, node: torch.fx.Node) -> None:
    """Writes the nodes of one call_function node and records its ONNX value(s)."""
    g.current = node
    translation = TRANSLATIONS.get(node.target)
    if translation is None:
        raise ExportError(
            f"ONNX export: {g.describe()} has no ONNX translation here; the supported ops are "
            f"listed in brevitas_cpp.export.onnx_ops (TRANSLATIONS)"
        )
    g.values[node] = translation(g, node, _arguments(node))


def _rank(node: Any) -> int:
    return OnnxGraph.meta(node).dim()


def _dtype(node: Any) -> torch.dtype:
    return OnnxGraph.meta(node).dtype


def _list(value: Any, n: int) -> List[int]:
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    return [int(v) for v in (values * n if len(values) == 1 else values)]


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _static_shape(g: OnnxGraph, node: torch.fx.Node) -> List[int]:
    """The output shape, a symbolic dimension as -1 (at most one)."""
    shape = [int(s) if isinstance(s, int) else -1 for s in OnnxGraph.meta(node).shape]
    if shape.count(-1) > 1:
        raise ExportError(
            f"ONNX export: {g.describe()} reshapes to a shape with several symbolic dimensions"
        )
    return shape


# ---- quantizers ---------------------------------------------------------------------------------


def _qparams(g: OnnxGraph, a: Dict[str, Any]):
    """(scale float32, zero point in the storage dtype, dtype, axis) of a quantize or dequantize
    op; scale and zero point [] per tensor, [C] per channel; axis None per tensor."""
    dtype = a["dtype"]
    if dtype not in (torch.int8, torch.uint8, torch.int16, torch.uint16, torch.int32):
        raise ExportError(f"ONNX export: {g.describe()}: no QCDQ form for {dtype}")
    if "axis" in a:
        scale = g.constant_value(a["scales"], "the scales").to(torch.float32)
        zero_points = a["zero_points"]
        if zero_points is None:
            zero_point = torch.zeros(scale.shape, dtype=dtype)
        else:
            zero_point = g.constant_value(zero_points, "the zero points").to(dtype)
        return scale, zero_point, dtype, _axis(a["axis"], _rank(a["input"]))
    scale, zero_point = a["scale"], a["zero_point"]
    if isinstance(scale, torch.fx.Node):  # the .tensor overloads
        scale = g.constant_value(scale, "the scale").reshape(())
        zero_point = g.constant_value(zero_point, "the zero point").reshape(())
    return torch.tensor(float(scale)), torch.tensor(int(zero_point)).to(dtype), dtype, None


def _check_storage(g: OnnxGraph, dtype: torch.dtype, quantize: bool) -> None:
    if dtype in (torch.int16, torch.uint16) and g.opset < 21:
        raise ExportError(
            f"ONNX export: {g.describe()} stores {dtype} integers (9 to 16 bits), which "
            f"QuantizeLinear/DequantizeLinear take from opset 21: pass opset_version=21"
        )
    if dtype == torch.int32 and quantize:
        raise ExportError(
            f"ONNX export: {g.describe()} quantizes an activation to more than 16 bits; "
            f"QuantizeLinear has no int32 output (weights and biases may be int32)"
        )


def _float_clip(
    g: OnnxGraph, x: str, a: Dict[str, Any], scale: Tensor, zero_point: Tensor, axis: Any
) -> str:
    """x clipped to [(quant_min - zp) * scale, (quant_max - zp) * scale] (Max, Min: the ends
    may be per channel), which QuantizeLinear maps onto quant_min and quant_max."""
    shape = [1] * _rank(a["input"])
    if axis is not None:
        shape[axis] = -1
    low, high = (
        ((bound - zero_point.to(torch.int64)) * scale).to(torch.float32).reshape(shape)
        for bound in (a["quant_min"], a["quant_max"])
    )
    x = g.add("Max", [x, g.constant(low, "clip_min")])
    return g.add("Min", [x, g.constant(high, "clip_max")])


@_register(
    torch.ops.quantized_decomposed.quantize_per_tensor.default,
    torch.ops.quantized_decomposed.quantize_per_tensor.tensor,
    torch.ops.quantized_decomposed.quantize_per_channel.default,
)
def _quantize(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    scale, zero_point, dtype, axis = _qparams(g, a)
    _check_storage(g, dtype, quantize=True)
    x = g.value(a["input"])
    info = torch.iinfo(dtype)
    narrower = (a["quant_min"], a["quant_max"]) != (info.min, info.max)
    if narrower and dtype in (torch.int16, torch.uint16):
        # onnxruntime has no 16-bit integer Clip: the float input is clipped instead.
        x = _float_clip(g, x, a, scale, zero_point, axis)
    inputs = [x, g.constant(scale, "scale"), g.constant(zero_point, "zero_point")]
    q = g.add("QuantizeLinear", inputs, axis=axis)
    if narrower and dtype in (torch.int8, torch.uint8):
        low = g.scalar(a["quant_min"], dtype, "clip_min")
        high = g.scalar(a["quant_max"], dtype, "clip_max")
        q = g.add("Clip", [q, low, high])
    path = g.module_path()
    proxy = node.meta.get(QUANTIZER_META) or path.removesuffix(".export_handler")
    g.quantizer_outputs.append({"value": q, "quantizer": proxy, "elem_type": onnx_dtype(dtype)})
    return q


@_register(
    torch.ops.quantized_decomposed.dequantize_per_tensor.default,
    torch.ops.quantized_decomposed.dequantize_per_tensor.tensor,
    torch.ops.quantized_decomposed.dequantize_per_channel.default,
)
def _dequantize(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    if a.get("out_dtype") not in (None, torch.float32):
        raise ExportError(f"ONNX export: {g.describe()} dequantizes to {a['out_dtype']}")
    scale, zero_point, dtype, axis = _qparams(g, a)
    _check_storage(g, dtype, quantize=False)
    inputs = [g.value(a["input"]), g.constant(scale, "scale")]
    if dtype != torch.int32:
        inputs.append(g.constant(zero_point, "zero_point"))
    elif bool(torch.any(zero_point != 0)):
        raise ExportError(f"ONNX export: {g.describe()}: int32 integers need zero point 0")
    return g.add("DequantizeLinear", inputs, axis=axis)


# ---- values that pass through ------------------------------------------------------------------


@_register(
    aten.clone.default,
    aten.contiguous.default,
    aten.alias.default,
    aten.detach.default,
    aten.detach_.default,
    aten.lift_fresh_copy.default,
    aten.dropout.default,
    aten.feature_dropout.default,
)
def _identity(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    if a.get("train"):
        raise ExportError(f"ONNX export: {g.describe()} is dropout in training mode")
    return g.value(node.args[0])


@_register(
    aten._assert_tensor_metadata.default,
    aten._assert_scalar.default,
    aten.sym_constrain_range_for_size.default,
    aten.sym_size.int,
)
def _no_value(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> None:
    # Checks and shape reads: the ONNX graph reads shapes from the recorded ones.
    return None


@_register(operator.getitem)
def _getitem(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    source, index = node.args
    values = g.values[source]
    if not isinstance(values, list):
        raise ExportError(f"ONNX export: {g.describe()} indexes a single tensor")
    return values[index]


# ---- elementwise ---------------------------------------------------------------------------------


def _binary(op_type: str, swap: bool = False) -> Translation:
    def translation(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
        dtype = _dtype(node)
        left, right = node.args[0], node.args[1]
        alpha = a.get("alpha", 1)
        if swap:
            left, right = right, left
        names = [g.value(v, dtype) for v in (left, right)]
        if alpha not in (None, 1):
            names[1] = g.add("Mul", [names[1], g.value(alpha, dtype)])
        return g.add(op_type, names)

    return translation


for _ops, _op_type in (
    ((aten.add.Tensor, aten.add_.Tensor, aten.add.Scalar), "Add"),
    ((aten.sub.Tensor, aten.sub_.Tensor, aten.sub.Scalar), "Sub"),
    ((aten.mul.Tensor, aten.mul_.Tensor, aten.mul.Scalar), "Mul"),
    ((aten.div.Tensor, aten.div_.Tensor, aten.div.Scalar), "Div"),
    ((aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor), "Pow"),
    ((aten.maximum.default,), "Max"),
    ((aten.minimum.default,), "Min"),
):
    _register(*_ops)(_binary(_op_type))
_register(aten.rsub.Scalar, aten.rsub.Tensor)(_binary("Sub", swap=True))


def _compare(op_type: str) -> Translation:
    def translation(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
        dtype = _dtype(node.args[0])
        return g.add(op_type, [g.value(node.args[0], dtype), g.value(node.args[1], dtype)])

    return translation


for _ops, _op_type in (
    ((aten.ge.Scalar, aten.ge.Tensor), "GreaterOrEqual"),
    ((aten.gt.Scalar, aten.gt.Tensor), "Greater"),
    ((aten.le.Scalar, aten.le.Tensor), "LessOrEqual"),
    ((aten.lt.Scalar, aten.lt.Tensor), "Less"),
    ((aten.eq.Scalar, aten.eq.Tensor), "Equal"),
):
    _register(*_ops)(_compare(_op_type))


def _unary(op_type: str) -> Translation:
    def translation(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
        return g.add(op_type, [g.value(node.args[0])])

    return translation


for _ops, _op_type in (
    ((aten.relu.default, aten.relu_.default), "Relu"),
    ((aten.sigmoid.default, aten.sigmoid_.default), "Sigmoid"),
    ((aten.tanh.default, aten.tanh_.default), "Tanh"),
    ((aten.abs.default,), "Abs"),
    ((aten.neg.default,), "Neg"),
    ((aten.exp.default,), "Exp"),
    ((aten.log.default,), "Log"),
    ((aten.sqrt.default,), "Sqrt"),
    ((aten.reciprocal.default,), "Reciprocal"),
    ((aten.round.default,), "Round"),
    ((aten.floor.default,), "Floor"),
    ((aten.ceil.default,), "Ceil"),
    ((aten.sign.default,), "Sign"),
    ((aten.erf.default,), "Erf"),
    ((aten.logical_not.default,), "Not"),
):
    _register(*_ops)(_unary(_op_type))


def _clip(g: OnnxGraph, node: torch.fx.Node, x: Any, low: Any, high: Any) -> str:
    dtype = _dtype(node)
    bounds = ["" if v is None else g.value(v, dtype) for v in (low, high)]
    while bounds and bounds[-1] == "":
        bounds.pop()
    return g.add("Clip", [g.value(x), *bounds])


@_register(aten.hardtanh.default, aten.hardtanh_.default)
def _hardtanh(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    return _clip(g, node, a["self"], float(a["min_val"]), float(a["max_val"]))


@_register(aten.relu6.default)
def _relu6(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    return _clip(g, node, a["self"], 0.0, 6.0)


@_register(aten.clamp.default, aten.clamp.Tensor, aten.clamp_.default)
def _clamp(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    return _clip(g, node, a["self"], a["min"], a["max"])


@_register(aten.clamp_min.default)
def _clamp_min(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    return _clip(g, node, a["self"], a["min"], None)


@_register(aten.leaky_relu.default, aten.leaky_relu_.default)
def _leaky_relu(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    return g.add("LeakyRelu", [g.value(a["self"])], alpha=float(a["negative_slope"]))


@_register(aten.elu.default)
def _elu(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    if a["scale"] != 1 or a["input_scale"] != 1:
        raise ExportError(f"ONNX export: {g.describe()}: only alpha is supported for elu")
    return g.add("Elu", [g.value(a["self"])], alpha=float(a["alpha"]))


@_register(aten.hardsigmoid.default)
def _hardsigmoid(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    return g.add("HardSigmoid", [g.value(a["self"])], alpha=1.0 / 6.0, beta=0.5)


@_register(aten.hardswish.default, aten.hardswish_.default)
def _hardswish(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    x = g.value(a["self"])
    return g.add("Mul", [x, g.add("HardSigmoid", [x], alpha=1.0 / 6.0, beta=0.5)])


@_register(aten.silu.default, aten.silu_.default)
def _silu(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    x = g.value(a["self"])
    return g.add("Mul", [x, g.add("Sigmoid", [x])])


@_register(aten.gelu.default)
def _gelu(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    if a["approximate"] != "none":
        raise ExportError(f"ONNX export: {g.describe()}: gelu(approximate='tanh')")
    x = g.value(a["self"])
    erf = g.add("Erf", [g.add("Mul", [x, g.scalar(1 / math.sqrt(2.0), _dtype(node))])])
    half_x = g.add("Mul", [x, g.scalar(0.5, _dtype(node))])
    return g.add("Mul", [half_x, g.add("Add", [erf, g.scalar(1.0, _dtype(node))])])


@_register(aten.where.self, aten.where.ScalarOther, aten.where.ScalarSelf, aten.where.Scalar)
def _where(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    dtype = _dtype(node)
    return g.add(
        "Where", [g.value(a["condition"]), g.value(a["self"], dtype), g.value(a["other"], dtype)]
    )


@_register(aten.to.dtype, aten._to_copy.default, aten.to.dtype_layout)
def _cast(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    source = node.args[0]
    if _dtype(node) == _dtype(source):
        return g.value(source)
    return g.add("Cast", [g.value(source)], to=onnx_dtype(_dtype(node)))


@_register(aten.full.default, aten.scalar_tensor.default, aten.zeros.default, aten.ones.default)
def _full(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    val = OnnxGraph.meta(node)
    if any(not isinstance(s, int) for s in val.shape):
        raise ExportError(f"ONNX export: {g.describe()} makes a tensor of symbolic shape")
    fill = {"full": a.get("fill_value"), "zeros": 0, "ones": 1}.get(
        node.target._overloadpacket.__name__, a.get("s")
    )
    return g.constant(torch.full(tuple(val.shape), fill, dtype=val.dtype), "Constant")


# ---- shapes --------------------------------------------------------------------------------------


@_register(
    aten.view.default,
    aten.reshape.default,
    aten._unsafe_view.default,
    aten.flatten.using_ints,
    aten.unflatten.int,
    aten.unsqueeze.default,
    aten.squeeze.default,
    aten.squeeze.dim,
    aten.squeeze.dims,
)
def _reshape(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    return g.add("Reshape", [g.value(node.args[0]), g.ints(_static_shape(g, node), "shape")])


@_register(aten.permute.default)
def _permute(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    rank = _rank(node)
    return g.add("Transpose", [g.value(a["self"])], perm=[_axis(d, rank) for d in a["dims"]])


@_register(aten.transpose.int, aten.t.default)
def _transpose(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    rank = _rank(node)
    perm = list(range(rank))
    if rank >= 2:
        d0, d1 = (_axis(a["dim0"], rank), _axis(a["dim1"], rank)) if "dim0" in a else (0, 1)
        perm[d0], perm[d1] = perm[d1], perm[d0]
    return g.add("Transpose", [g.value(a["self"])], perm=perm)


@_register(aten.cat.default)
def _cat(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    return g.add("Concat", [g.value(t) for t in a["tensors"]], axis=_axis(a["dim"], _rank(node)))


@_register(aten.slice.Tensor)
def _slice(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    rank = _rank(node)
    start = a["start"] if a["start"] is not None else 0
    end = a["end"] if a["end"] is not None else 2**63 - 1
    return g.add(
        "Slice",
        [
            g.value(a["self"]),
            g.ints([start]),
            g.ints([min(end, 2**63 - 1)]),
            g.ints([_axis(a["dim"], rank)]),
            g.ints([a["step"]]),
        ],
    )


# ---- layers --------------------------------------------------------------------------------------


def _conv_attrs(weight: Any, stride: Any, padding: Any, dilation: Any) -> Dict[str, Any]:
    kernel = list(OnnxGraph.meta(weight).shape[2:])
    n = len(kernel)
    dilations = _list(dilation, n)
    if isinstance(padding, str):
        if padding == "valid":
            begin = end = [0] * n
        else:  # "same" (stride 1): torch pads the extra element at the end
            total = [d * (k - 1) for d, k in zip(dilations, kernel)]
            begin = [t // 2 for t in total]
            end = [t - b for t, b in zip(total, begin)]
    else:
        begin = end = _list(padding, n)
    return {"strides": _list(stride, n), "pads": begin + end, "dilations": dilations}


def _conv_inputs(g: OnnxGraph, a: Dict[str, Any]) -> List[str]:
    inputs = [g.value(a["input"]), g.value(a["weight"])]
    if a.get("bias") is not None:
        inputs.append(g.value(a["bias"]))
    return inputs


@_register(
    aten.conv1d.default,
    aten.conv2d.default,
    aten.conv3d.default,
    aten.conv1d.padding,
    aten.conv2d.padding,
    aten.conv3d.padding,
)
def _conv(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    attrs = _conv_attrs(a["weight"], a["stride"], a["padding"], a["dilation"])
    return g.add("Conv", _conv_inputs(g, a), group=int(a["groups"]), **attrs)


@_register(aten.conv_transpose1d.default, aten.conv_transpose2d.input, aten.conv_transpose3d.input)
def _conv_transpose(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    attrs = _conv_attrs(a["weight"], a["stride"], a["padding"], a["dilation"])
    n = len(attrs["strides"])
    return g.add(
        "ConvTranspose",
        _conv_inputs(g, a),
        group=int(a["groups"]),
        output_padding=_list(a["output_padding"], n),
        **attrs,
    )


@_register(aten.convolution.default)
def _convolution(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    if a["transposed"]:
        return _conv_transpose(g, node, a)
    return _conv(g, node, a)


@_register(aten.linear.default)
def _linear(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    x, weight, bias = g.value(a["input"]), g.value(a["weight"]), a["bias"]
    if _rank(a["input"]) == 2:
        inputs = [x, weight] + ([g.value(bias)] if bias is not None else [])
        return g.add("Gemm", inputs, transB=1)
    y = g.add("MatMul", [x, g.add("Transpose", [weight], perm=[1, 0])])
    return g.add("Add", [y, g.value(bias)]) if bias is not None else y


@_register(aten.matmul.default, aten.mm.default, aten.bmm.default)
def _matmul(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    return g.add("MatMul", [g.value(node.args[0]), g.value(node.args[1])])


@_register(aten.addmm.default)
def _addmm(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    inputs = [g.value(a["mat1"]), g.value(a["mat2"]), g.value(a["self"])]
    return g.add("Gemm", inputs, alpha=float(a["alpha"]), beta=float(a["beta"]))


def _pool_attrs(node: torch.fx.Node, a: Dict[str, Any]) -> Dict[str, Any]:
    n = _rank(node) - 2
    kernel = _list(a["kernel_size"], n)
    stride = _list(a["stride"], n) if a["stride"] else kernel
    padding = _list(a["padding"], n)
    return {"kernel_shape": kernel, "strides": stride, "pads": padding + padding}


@_register(aten.max_pool1d.default, aten.max_pool2d.default, aten.max_pool3d.default)
def _max_pool(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    attrs = _pool_attrs(node, a)
    dilations = _list(a["dilation"], len(attrs["strides"]))
    return g.add(
        "MaxPool",
        [g.value(a["self"])],
        ceil_mode=int(a["ceil_mode"]),
        dilations=dilations,
        **attrs,
    )


@_register(aten.max_pool2d_with_indices.default)
def _max_pool_with_indices(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> List[str]:
    if len(node.users) and any(user.args[1] != 0 for user in node.users):
        raise ExportError(f"ONNX export: {g.describe()}: the pooling indices are used")
    return [_max_pool(g, node, a), ""]


@_register(aten.avg_pool1d.default, aten.avg_pool2d.default, aten.avg_pool3d.default)
def _avg_pool(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    if a.get("divisor_override") is not None:
        raise ExportError(f"ONNX export: {g.describe()}: avg_pool with divisor_override")
    return g.add(
        "AveragePool",
        [g.value(a["self"])],
        ceil_mode=int(a["ceil_mode"]),
        count_include_pad=int(a["count_include_pad"]),
        **_pool_attrs(node, a),
    )


@_register(
    aten.adaptive_avg_pool1d.default,
    aten.adaptive_avg_pool2d.default,
    aten.adaptive_avg_pool3d.default,
    aten._adaptive_avg_pool2d.default,
)
def _adaptive_avg_pool(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    source = a["self"]
    spatial_in = list(OnnxGraph.meta(source).shape[2:])
    spatial_out = list(OnnxGraph.meta(node).shape[2:])
    x = g.value(source)
    if all(int(o) == 1 for o in spatial_out):
        return g.add("GlobalAveragePool", [x])
    if any(int(i) % int(o) for i, o in zip(spatial_in, spatial_out)):
        raise ExportError(
            f"ONNX export: {g.describe()}: adaptive pooling from {spatial_in} to {spatial_out} "
            f"is not a fixed pooling (the sizes do not divide)"
        )
    kernel = [int(i) // int(o) for i, o in zip(spatial_in, spatial_out)]
    return g.add("AveragePool", [x], kernel_shape=kernel, strides=kernel)


@_register(aten.mean.dim, aten.sum.dim_IntList)
def _reduce(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    rank = _rank(a["self"])
    dims = a["dim"] if a["dim"] else list(range(rank))
    axes = [_axis(d, rank) for d in _list(dims, 1)]
    keepdims = int(bool(a["keepdim"]))
    x = g.value(a["self"])
    if node.target == aten.sum.dim_IntList:
        return g.add("ReduceSum", [x, g.ints(axes, "axes")], keepdims=keepdims)
    if g.opset >= 18:
        return g.add("ReduceMean", [x, g.ints(axes, "axes")], keepdims=keepdims)
    return g.add("ReduceMean", [x], axes=axes, keepdims=keepdims)


def _batch_norm_inputs(g: OnnxGraph, a: Dict[str, Any]) -> List[str]:
    channels = int(OnnxGraph.meta(a["input"]).shape[1])
    dtype = _dtype(a["input"])
    weight = a["weight"]
    bias = a["bias"]
    return [
        g.value(a["input"]),
        g.value(weight)
        if weight is not None
        else g.constant(torch.ones(channels, dtype=dtype), "scale"),
        g.value(bias)
        if bias is not None
        else g.constant(torch.zeros(channels, dtype=dtype), "bias"),
        g.value(a["running_mean"]),
        g.value(a["running_var"]),
    ]


@_register(aten.batch_norm.default)
def _batch_norm(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    if a["training"] or a["running_mean"] is None:
        raise ExportError(f"ONNX export: {g.describe()} is a BatchNorm in training mode")
    return g.add("BatchNormalization", _batch_norm_inputs(g, a), epsilon=float(a["eps"]))


@_register(aten._native_batch_norm_legit_no_training.default)
def _batch_norm_no_training(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> List[str]:
    y = g.add("BatchNormalization", _batch_norm_inputs(g, a), epsilon=float(a["eps"]))
    return [y, "", ""]


@_register(aten.layer_norm.default)
def _layer_norm(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    if g.opset < 17:
        raise ExportError(f"ONNX export: {g.describe()}: LayerNormalization needs opset 17")
    shape = list(a["normalized_shape"])
    dtype = _dtype(node)
    weight = a["weight"]
    inputs = [
        g.value(a["input"]),
        g.value(weight)
        if weight is not None
        else g.constant(torch.ones(shape, dtype=dtype), "scale"),
    ]
    if a["bias"] is not None:
        inputs.append(g.value(a["bias"]))
    return g.add("LayerNormalization", inputs, axis=-len(shape), epsilon=float(a["eps"]))


@_register(aten.softmax.int, aten._softmax.default)
def _softmax(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    return g.add("Softmax", [g.value(a["self"])], axis=_axis(a["dim"], _rank(node)))


@_register(aten.embedding.default)
def _embedding(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    return g.add("Gather", [g.value(a["weight"]), g.value(a["indices"])], axis=0)


@_register(aten.upsample_nearest2d.vec, aten.upsample_nearest2d.default)
def _upsample_nearest(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    sizes = _static_shape(g, node)
    if -1 in sizes:
        raise ExportError(f"ONNX export: {g.describe()}: upsampling with a symbolic shape")
    return g.add(
        "Resize",
        [g.value(node.args[0]), "", "", g.ints(sizes, "sizes")],
        mode="nearest",
        coordinate_transformation_mode="asymmetric",
        nearest_mode="floor",
    )


@_register(aten.constant_pad_nd.default)
def _pad(g: OnnxGraph, node: torch.fx.Node, a: Dict[str, Any]) -> str:
    rank = _rank(node)
    pad: Sequence[int] = a["pad"]
    begin, end = [0] * rank, [0] * rank
    for i in range(len(pad) // 2):
        begin[rank - 1 - i], end[rank - 1 - i] = pad[2 * i], pad[2 * i + 1]
    value = g.scalar(float(a["value"]), _dtype(node), "pad_value")
    return g.add("Pad", [g.value(a["self"]), g.ints(begin + end, "pads"), value], mode="constant")
