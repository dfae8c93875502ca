"""Quantized tensors (Brevitas's brevitas.quant_tensor): `IntQuantTensor` carries a dequantized
value with its scale, zero point, bit width and sign through a model, `FloatQuantTensor` the
same for a minifloat grid (exponent and mantissa widths, bias, inf/NaN codes), and the
Groupwise* types the same with a scale per group of elements (MX); torch functions
on them keep, derive or drop the quantization metadata (see the *torch_handler modules)."""

from brevitas_cpp.quant_tensor.base_quant_tensor import (
    TOLERANCE,
    FloatMixin,
    FloatQuantTensorBase,
    GroupwiseFloatQuantTensorBase,
    GroupwiseIntQuantTensorBase,
    GroupwisIntQuantTensorBase,
    IntMixin,
    IntQuantTensorBase,
    QuantTensor,
    _unpack_quant_tensor,  # noqa: F401 (the layers' helper, as in Brevitas)
)
from brevitas_cpp.quant_tensor.float_quant_tensor import FloatQuantTensor
from brevitas_cpp.quant_tensor.groupwise_quant_tensor import (
    GroupwiseFloatQuantTensor,
    GroupwiseIntQuantTensor,
    GroupwiseQuantTensor,
)
from brevitas_cpp.quant_tensor.int_quant_tensor import IntQuantTensor

__all__ = [
    "GroupwisIntQuantTensorBase",
    "GroupwiseFloatQuantTensorBase",
    "GroupwiseIntQuantTensorBase",
    "FloatMixin",
    "FloatQuantTensor",
    "FloatQuantTensorBase",
    "GroupwiseFloatQuantTensor",
    "GroupwiseIntQuantTensor",
    "GroupwiseQuantTensor",
    "IntMixin",
    "IntQuantTensor",
    "IntQuantTensorBase",
    "QuantTensor",
    "TOLERANCE",
]
