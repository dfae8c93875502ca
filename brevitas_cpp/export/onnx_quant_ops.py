"""The ONNX translations of the quantizer ops of a torch QCDQ program, for torch's ONNX exporter
(``torch.onnx.export(..., dynamo=True, custom_translation_table=QUANT_TRANSLATIONS)``): every
other op is translated by torch's exporter (onnxscript's torchlib).

The quantizers (brevitas_cpp.export.handlers writes them as ``quantized_decomposed`` ops):

* ``quantize_per_tensor`` / ``quantize_per_channel``: QuantizeLinear, then a Clip to
  [quant_min, quant_max] when that is narrower than the storage type (bit widths below 8, narrow
  ranges); for 16-bit storage, which onnxruntime can not Clip, the float input is clipped to the
  range's ends (Max, Min) before QuantizeLinear instead;
* ``dequantize_per_tensor`` / ``dequantize_per_channel``: DequantizeLinear (no zero point for
  int32 integers, which ONNX takes at zero point 0 only).

Scales are float32 and zero points are in the storage type; per-tensor ones become scalar
initializers, per-channel ones the program's buffers. The functions are traced by the exporter
(plain Python over onnxscript ops), so the attributes (scale, zero point, range, dtype) are
Python values here.
"""

from typing import Any, Callable, Dict, Optional

import numpy as np
import torch

from brevitas_cpp.export.errors import ExportError

try:  # the "export" extra; brevitas_cpp.export works without it except for ONNX
    import onnx
    import onnx_ir as ir
    from onnx import TensorProto
    from onnxscript import opset18 as op
except ImportError:  # pragma: no cover - exercised only where the extra is missing
    onnx = None

__all__ = ["QUANT_TRANSLATIONS", "QUANTIZE_OPS", "onnx_dtype", "require_onnx"]

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

_qd = torch.ops.quantized_decomposed
# The ops whose output is an activation quantizer's integers (checked against PyTorch's).
QUANTIZE_OPS = (_qd.quantize_per_tensor.default, _qd.quantize_per_channel.default)


def require_onnx() -> None:
    if onnx is None:
        raise ImportError(
            "ONNX export needs the onnx, onnxscript and onnxruntime packages: "
            "pip install 'brevitas_cpp[export]', or pip install onnx onnxscript onnxruntime"
        )


def onnx_dtype(dtype: torch.dtype) -> int:
    """The TensorProto element type of a torch dtype."""
    try:
        return getattr(TensorProto, _ONNX_DTYPES[dtype])
    except KeyError:
        raise ExportError(f"ONNX export: no ONNX element type for {dtype}") from None


def _numpy_dtype(dtype: int) -> Any:
    return ir.DataType(dtype).numpy()


def _const(value: Any, dtype: Any) -> Any:
    return op.Constant(value=ir.tensor(np.array(value, dtype=dtype)))


def _storage(dtype: int, what: str, quantize: bool) -> Any:
    """The numpy dtype of the integers; refuses what QuantizeLinear can not store."""
    if dtype == TensorProto.INT32 and quantize:
        raise ExportError(
            f"ONNX export: {what} quantizes an activation to more than 16 bits; QuantizeLinear "
            f"has no int32 output (weights and biases may be int32)"
        )
    storage = (TensorProto.INT8, TensorProto.UINT8, TensorProto.INT16, TensorProto.UINT16)
    if dtype not in storage and dtype != TensorProto.INT32:
        raise ExportError(f"ONNX export: {what}: no QCDQ form for {ir.DataType(dtype)}")
    return _numpy_dtype(dtype)


def _narrower(np_dtype: Any, quant_min: int, quant_max: int) -> bool:
    info = np.iinfo(np_dtype)
    return (quant_min, quant_max) != (int(info.min), int(info.max))


def _check_out_dtype(out_dtype: Optional[int]) -> None:
    if out_dtype not in (None, -1, TensorProto.FLOAT):
        raise ExportError(f"ONNX export: a dequantize op outputs {ir.DataType(out_dtype)}")


def _clip_integers(q: Any, np_dtype: Any, quant_min: int, quant_max: int) -> Any:
    if _narrower(np_dtype, quant_min, quant_max) and np.dtype(np_dtype).itemsize == 1:
        q = op.Clip(q, _const(quant_min, np_dtype), _const(quant_max, np_dtype))
    return q


def _wide(np_dtype: Any, quant_min: int, quant_max: int) -> bool:
    """16-bit storage with a narrower range: onnxruntime has no 16-bit integer Clip, so the
    float input is clipped to [(quant_min - zp) * scale, (quant_max - zp) * scale] instead,
    which QuantizeLinear maps onto quant_min and quant_max."""
    return _narrower(np_dtype, quant_min, quant_max) and np.dtype(np_dtype).itemsize == 2


def quantize_per_tensor(
    input: Any, scale: float, zero_point: int, quant_min: int, quant_max: int, dtype: int
) -> Any:
    np_dtype = _storage(dtype, "quantize_per_tensor", quantize=True)
    if _wide(np_dtype, quant_min, quant_max):
        s = np.float32(scale)
        low = np.float32(quant_min - zero_point) * s
        high = np.float32(quant_max - zero_point) * s
        input = op.Min(op.Max(input, _const(low, np.float32)), _const(high, np.float32))
    q = op.QuantizeLinear(input, _const(scale, np.float32), _const(zero_point, np_dtype))
    return _clip_integers(q, np_dtype, quant_min, quant_max)


def _rank(input: Any, what: str) -> int:
    if input.shape is None:
        raise ExportError(f"ONNX export: {what} of an input of unknown rank")
    return len(input.shape)


def _channel_axis(input: Any, axis: int, what: str) -> int:
    """axis counted from the front (ONNX's QuantizeLinear/DequantizeLinear take it so)."""
    return axis if axis >= 0 else axis + _rank(input, what)


def quantize_per_channel(
    input: Any,
    scales: Any,
    zero_points: Any,
    axis: int,
    quant_min: int,
    quant_max: int,
    dtype: int,
) -> Any:
    np_dtype = _storage(dtype, "quantize_per_channel", quantize=True)
    axis = _channel_axis(input, axis, "quantize_per_channel")
    scales = op.Cast(scales, to=TensorProto.FLOAT)
    zp = op.Cast(zero_points, to=dtype)
    if _wide(np_dtype, quant_min, quant_max):
        shape = [1] * _rank(input, "quantize_per_channel")
        shape[axis] = -1
        zp_float = op.Cast(zero_points, to=TensorProto.FLOAT)
        ends = [
            op.Reshape(
                op.Mul(op.Sub(_const(bound, np.float32), zp_float), scales),
                _const(shape, np.int64),
            )
            for bound in (quant_min, quant_max)
        ]
        input = op.Min(op.Max(input, ends[0]), ends[1])
    q = op.QuantizeLinear(input, scales, zp, axis=axis)
    return _clip_integers(q, np_dtype, quant_min, quant_max)


def dequantize_per_tensor(
    input: Any,
    scale: float,
    zero_point: int,
    quant_min: int,
    quant_max: int,
    dtype: int,
    out_dtype: Optional[int] = None,
) -> Any:
    _check_out_dtype(out_dtype)
    np_dtype = _storage(dtype, "dequantize_per_tensor", quantize=False)
    if dtype == TensorProto.INT32:
        if zero_point != 0:
            raise ExportError("ONNX export: int32 integers need zero point 0")
        return op.DequantizeLinear(input, _const(scale, np.float32))
    return op.DequantizeLinear(input, _const(scale, np.float32), _const(zero_point, np_dtype))


def dequantize_per_channel(
    input: Any,
    scales: Any,
    zero_points: Any,
    axis: int,
    quant_min: int,
    quant_max: int,
    dtype: int,
    out_dtype: Optional[int] = None,
) -> Any:
    _check_out_dtype(out_dtype)
    _storage(dtype, "dequantize_per_channel", quantize=False)
    axis = _channel_axis(input, axis, "dequantize_per_channel")
    scales = op.Cast(scales, to=TensorProto.FLOAT)
    if dtype == TensorProto.INT32:
        # brevitas_cpp.export.grid keeps int32 (bias) zero points at 0; ONNX takes only that.
        return op.DequantizeLinear(input, scales, axis=axis)
    return op.DequantizeLinear(input, scales, op.Cast(zero_points, to=dtype), axis=axis)


QUANT_TRANSLATIONS: Dict[Any, Callable[..., Any]] = {
    _qd.quantize_per_tensor.default: quantize_per_tensor,
    _qd.quantize_per_channel.default: quantize_per_channel,
    _qd.dequantize_per_tensor.default: dequantize_per_tensor,
    _qd.dequantize_per_channel.default: dequantize_per_channel,
}
