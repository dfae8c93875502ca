"""Minifloat activation proxy with per-group scales computed from each input (Brevitas's
``brevitas.proxy.groupwise_float_runtime_quant``)."""

from typing import Any, Tuple, Union

from torch import Tensor

from brevitas_cpp.proxy.float_runtime_quant import ActFloatQuantProxyFromInjector
from brevitas_cpp.proxy.groupwise import _GroupwiseProxy
from brevitas_cpp.proxy.utils import _CachedIOGroupwiseFloat
from brevitas_cpp.quant_tensor import GroupwiseFloatQuantTensor, GroupwiseQuantTensor, QuantTensor
from brevitas_cpp.quant_tensor.groupwise_quant_tensor import regroup_like

__all__ = ["GroupwiseActFloatQuantProxyFromInjector"]


class GroupwiseActFloatQuantProxyFromInjector(_GroupwiseProxy, ActFloatQuantProxyFromInjector):
    """Minifloat activations with a scale per group along group_dim, computed from each input
    (MX FP8); forward returns a GroupwiseFloatQuantTensor."""

    CACHE_CLASS = _CachedIOGroupwiseFloat

    def create_quant_tensor(
        self, qt_args: Union[Tensor, Tuple[Any, ...]], x: Union[Tensor, QuantTensor]
    ) -> QuantTensor:
        if isinstance(qt_args, tuple):
            value, scale, zero_point, *fmt = qt_args
            return GroupwiseFloatQuantTensor(
                value,
                scale,
                zero_point,
                self.groupwise_size,
                self.groupwise_dim,
                *fmt,
                self.is_signed,
                self.training,
                tuple(x.shape),
            )
        if isinstance(x, GroupwiseQuantTensor):
            return regroup_like(x, qt_args, self.training)
        return super().create_quant_tensor(qt_args, x)
