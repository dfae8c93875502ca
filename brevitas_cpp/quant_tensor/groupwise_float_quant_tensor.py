"""Brevitas's module of ``GroupwiseFloatQuantTensor`` (here in groupwise_quant_tensor, beside the
integer one, with which it shares the grouped views)."""

from brevitas_cpp.quant_tensor.base_quant_tensor import GroupwiseFloatQuantTensorBase
from brevitas_cpp.quant_tensor.groupwise_quant_tensor import GroupwiseFloatQuantTensor

__all__ = ["GroupwiseFloatQuantTensor", "GroupwiseFloatQuantTensorBase"]
