"""Integer weight proxy with per-group scales (Brevitas's
``brevitas.proxy.groupwise_int_parameter_quant``)."""

from typing import Any, Tuple

from torch import Tensor

from brevitas_cpp.proxy.groupwise import _GroupwiseWeightProxy
from brevitas_cpp.proxy.weight_bias_quant import WeightQuantProxyFromInjector

__all__ = ["GroupwiseWeightQuantProxyFromInjector"]


class GroupwiseWeightQuantProxyFromInjector(_GroupwiseWeightProxy, WeightQuantProxyFromInjector):
    """Integer weights with a scale per group of input channels; forward returns a
    GroupwiseIntQuantTensor."""

    def quantizer_output(self, x: Tensor) -> Tuple[Any, ...]:
        return self.layout_quant_tuple(x)
