"""Integer activation proxy with per-group scales computed from each input (Brevitas's
``brevitas.proxy.groupwise_int_runtime_quant``)."""

from typing import Any, Tuple

from torch import Tensor

from brevitas_cpp.proxy.groupwise import _GroupwiseActProxy
from brevitas_cpp.proxy.runtime_quant import ActQuantProxyFromInjector

__all__ = ["GroupwiseActQuantProxyFromInjector"]


class GroupwiseActQuantProxyFromInjector(_GroupwiseActProxy, ActQuantProxyFromInjector):
    """Integer activations with a scale per group along group_dim, computed from each input
    (MX INT8); forward returns a GroupwiseIntQuantTensor."""

    def quantizer_output(self, x: Tensor) -> Tuple[Any, ...]:
        return self.layout_quant_tuple(x)
