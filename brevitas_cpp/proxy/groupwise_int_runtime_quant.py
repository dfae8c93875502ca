"""Integer activation proxy with per-group scales computed from each input (Brevitas's
``brevitas.proxy.groupwise_int_runtime_quant``)."""

from typing import Any, Tuple, Union

from torch import Tensor

from brevitas_cpp.proxy.groupwise import _GroupwiseProxy
from brevitas_cpp.proxy.runtime_quant import ActQuantProxyFromInjector
from brevitas_cpp.quant_tensor import GroupwiseIntQuantTensor, GroupwiseQuantTensor, QuantTensor
from brevitas_cpp.quant_tensor.groupwise_quant_tensor import regroup_like

__all__ = ["GroupwiseActQuantProxyFromInjector"]


class GroupwiseActQuantProxyFromInjector(_GroupwiseProxy, ActQuantProxyFromInjector):
    """Integer activations with a scale per group along group_dim, computed from each input
    (MX INT8); forward returns a GroupwiseIntQuantTensor."""

    def quantizer_output(self, x: Tensor) -> Tuple[Any, ...]:
        return self.layout_quant_tuple(x)

    def create_quant_tensor(
        self, qt_args: Union[Tensor, Tuple[Any, ...]], x: Union[Tensor, QuantTensor]
    ) -> QuantTensor:
        if isinstance(qt_args, tuple):
            value, scale, zero_point, bit_width = qt_args
            return GroupwiseIntQuantTensor(
                value,
                scale,
                zero_point,
                self.groupwise_size,
                self.groupwise_dim,
                bit_width,
                self.is_signed,
                self.training,
                tuple(x.shape),
            )
        # A passthrough activation keeps the input's quantization.
        if isinstance(x, GroupwiseQuantTensor):
            return regroup_like(x, qt_args, self.training)
        return super().create_quant_tensor(qt_args, x)
