"""Quantized tensors (Brevitas's brevitas.quant_tensor): `IntQuantTensor` carries a dequantized
value with its scale, zero point, bit width and sign through a model; torch functions on it keep,
derive or drop the quantization metadata (see torch_handler and int_torch_handler)."""

from brevitas_cpp.quant_tensor.base_quant_tensor import (
    TOLERANCE,
    IntMixin,
    IntQuantTensorBase,
    QuantTensor,
    _unpack_quant_tensor,  # noqa: F401 (the layers' helper, as in Brevitas)
)
from brevitas_cpp.quant_tensor.int_quant_tensor import IntQuantTensor

__all__ = ["IntMixin", "IntQuantTensor", "IntQuantTensorBase", "QuantTensor", "TOLERANCE"]
