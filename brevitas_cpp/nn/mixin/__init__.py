"""Mixins the quant layers are assembled from (Brevitas's brevitas.nn.mixin)."""

from .acc import AccQuantType, TruncMixin
from .act import ActQuantType, QuantInputMixin, QuantNonLinearActMixin, QuantOutputMixin
from .base import QuantLayerMixin, QuantProxyMixin
from .parameter import BiasQuantType, QuantBiasMixin, QuantWeightMixin, WeightQuantType

__all__ = [
    "AccQuantType",
    "ActQuantType",
    "BiasQuantType",
    "WeightQuantType",
    "QuantProxyMixin",
    "QuantLayerMixin",
    "QuantInputMixin",
    "QuantOutputMixin",
    "QuantNonLinearActMixin",
    "QuantWeightMixin",
    "QuantBiasMixin",
    "TruncMixin",
]
