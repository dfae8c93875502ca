"""Integer weight proxy with per-group scales (Brevitas's
``brevitas.proxy.groupwise_int_parameter_quant``)."""

from typing import Any, Tuple

from torch import Tensor

from brevitas_cpp.proxy.groupwise import _GroupwiseWeightProxy
from brevitas_cpp.proxy.parameter_quant import WeightQuantProxyFromInjector
from brevitas_cpp.quant_tensor import GroupwiseIntQuantTensor

__all__ = ["GroupwiseWeightQuantProxyFromInjector"]


class GroupwiseWeightQuantProxyFromInjector(_GroupwiseWeightProxy, WeightQuantProxyFromInjector):
    """Integer weights with a scale per group of input channels; forward returns a
    GroupwiseIntQuantTensor."""

    def quantizer_output(self, x: Tensor) -> Tuple[Any, ...]:
        return self.layout_quant_tuple(x)

    def create_quant_tensor(self, qt_args: Tuple[Any, ...]) -> GroupwiseIntQuantTensor:
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
            tuple(self.tracked_parameter_list[0].shape),
        )
