"""Minifloat weight proxy with per-group scales (Brevitas's
``brevitas.proxy.groupwise_float_parameter_quant``)."""

from brevitas_cpp.proxy.float_parameter_quant import WeightFloatQuantProxyFromInjector
from brevitas_cpp.proxy.groupwise import _GroupwiseWeightProxy
from brevitas_cpp.proxy.utils import _CachedIOGroupwiseFloat
from brevitas_cpp.quant_tensor import GroupwiseFloatQuantTensor

__all__ = ["GroupwiseWeightFloatQuantProxyFromInjector"]


class GroupwiseWeightFloatQuantProxyFromInjector(
    _GroupwiseWeightProxy, WeightFloatQuantProxyFromInjector
):
    """Minifloat weights with a scale per group of input channels (MX FP8); forward returns a
    GroupwiseFloatQuantTensor."""

    CACHE_CLASS = _CachedIOGroupwiseFloat
    QUANT_TENSOR_CLASS = GroupwiseFloatQuantTensor
