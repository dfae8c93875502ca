"""Brevitas's brevitas.proxy.parameter_quant: the weight and bias proxies, and the decoupled weight
proxies (A2Q, A2Q+), which Brevitas defines in this one module and which live here in two."""

from brevitas_cpp.proxy.decoupled_parameter_quant import (  # noqa: F401  (public, not in __all__)
    DecoupledWeightQuantProxyFromInjector,
    DecoupledWeightQuantWithInputProxyFromInjector,
)
from brevitas_cpp.proxy.weight_bias_quant import (
    BiasQuantProxyFromInjector,
    BiasQuantProxyFromInjectorBase,
    BiasQuantProxyProtocol,
    ParameterQuantProxyFromInjector,
    WeightQuantProxyFromInjector,
    WeightQuantProxyFromInjectorBase,
    WeightQuantProxyProtocol,
)

# Brevitas's __all__ (the decoupled proxies are public names outside it).
__all__ = [
    "WeightQuantProxyFromInjector",
    "WeightQuantProxyFromInjectorBase",
    "BiasQuantProxyFromInjector",
    "BiasQuantProxyFromInjectorBase",
    "ParameterQuantProxyFromInjector",
    "WeightQuantProxyProtocol",
    "BiasQuantProxyProtocol",
]
