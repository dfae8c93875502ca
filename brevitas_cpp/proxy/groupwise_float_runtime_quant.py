"""Minifloat activation proxy with per-group scales computed from each input (Brevitas's
``brevitas.proxy.groupwise_float_runtime_quant``)."""

from brevitas_cpp.proxy.float_runtime_quant import ActFloatQuantProxyFromInjector
from brevitas_cpp.proxy.groupwise import _GroupwiseActProxy
from brevitas_cpp.proxy.utils import _CachedIOGroupwiseFloat
from brevitas_cpp.quant_tensor import GroupwiseFloatQuantTensor

__all__ = ["GroupwiseActFloatQuantProxyFromInjector"]


class GroupwiseActFloatQuantProxyFromInjector(_GroupwiseActProxy, ActFloatQuantProxyFromInjector):
    """Minifloat activations with a scale per group along group_dim, computed from each input
    (MX FP8); forward returns a GroupwiseFloatQuantTensor."""

    CACHE_CLASS = _CachedIOGroupwiseFloat
    QUANT_TENSOR_CLASS = GroupwiseFloatQuantTensor
