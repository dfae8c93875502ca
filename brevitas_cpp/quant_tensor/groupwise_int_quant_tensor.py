"""Brevitas's module of ``GroupwiseIntQuantTensor`` (here in groupwise_quant_tensor, beside the
minifloat one, with which it shares the grouped views)."""

from brevitas_cpp.quant_tensor.base_quant_tensor import GroupwisIntQuantTensorBase
from brevitas_cpp.quant_tensor.groupwise_quant_tensor import GroupwiseIntQuantTensor

__all__ = ["GroupwisIntQuantTensorBase", "GroupwiseIntQuantTensor"]
