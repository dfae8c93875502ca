"""Quantization proxies (Brevitas's brevitas.proxy): the modules quant layers hold as
``weight_quant``, ``bias_quant``, ``input_quant``, ``act_quant``, ``output_quant`` and
``trunc_quant``. A proxy builds its quantizer from an injector and the layer(s) it serves and
returns QuantTensors."""

from brevitas_cpp._unsupported import unsupported_getattr
from brevitas_cpp.proxy.decoupled_parameter_quant import (
    DecoupledWeightQuantProxyFromInjector,
    DecoupledWeightQuantWithInputProxyFromInjector,
)
from brevitas_cpp.proxy.float_parameter_quant import (
    WeightFloatQuantProxyFromInjector,
    WeightFloatQuantProxyFromInjectorBase,
)
from brevitas_cpp.proxy.float_runtime_quant import (
    ActFloatQuantProxyFromInjector,
    ActFloatQuantProxyFromInjectorBase,
    DynamicActFloatQuantProxyFromInjector,
)
from brevitas_cpp.proxy.groupwise_float_parameter_quant import (
    GroupwiseWeightFloatQuantProxyFromInjector,
)
from brevitas_cpp.proxy.groupwise_float_runtime_quant import (
    GroupwiseActFloatQuantProxyFromInjector,
)
from brevitas_cpp.proxy.groupwise_int_parameter_quant import GroupwiseWeightQuantProxyFromInjector
from brevitas_cpp.proxy.groupwise_int_runtime_quant import GroupwiseActQuantProxyFromInjector
from brevitas_cpp.proxy.parameter_quant import (
    BiasQuantProxyFromInjector,
    BiasQuantProxyFromInjectorBase,
    BiasQuantProxyProtocol,
    ParameterQuantProxyFromInjector,
    WeightQuantProxyFromInjector,
    WeightQuantProxyFromInjectorBase,
    WeightQuantProxyProtocol,
)
from brevitas_cpp.proxy.quant_proxy import QuantProxyFromInjector, QuantProxyProtocol
from brevitas_cpp.proxy.runtime_quant import (
    AccQuantProxyProtocol,
    ActQuantProxyFromInjector,
    ActQuantProxyFromInjectorBase,
    ActQuantProxyProtocol,
    DynamicActQuantProxyFromInjector,
    FusedActivationQuantProxy,
    TruncQuantProxyFromInjector,
)

__all__ = [
    "AccQuantProxyProtocol",
    "ActFloatQuantProxyFromInjector",
    "ActFloatQuantProxyFromInjectorBase",
    "DynamicActFloatQuantProxyFromInjector",
    "WeightFloatQuantProxyFromInjector",
    "WeightFloatQuantProxyFromInjectorBase",
    "ActQuantProxyFromInjector",
    "ActQuantProxyFromInjectorBase",
    "ActQuantProxyProtocol",
    "BiasQuantProxyFromInjector",
    "BiasQuantProxyFromInjectorBase",
    "BiasQuantProxyProtocol",
    "DecoupledWeightQuantProxyFromInjector",
    "DecoupledWeightQuantWithInputProxyFromInjector",
    "DynamicActQuantProxyFromInjector",
    "FusedActivationQuantProxy",
    "GroupwiseActFloatQuantProxyFromInjector",
    "GroupwiseActQuantProxyFromInjector",
    "GroupwiseWeightFloatQuantProxyFromInjector",
    "GroupwiseWeightQuantProxyFromInjector",
    "ParameterQuantProxyFromInjector",
    "QuantProxyFromInjector",
    "QuantProxyProtocol",
    "TruncQuantProxyFromInjector",
    "WeightQuantProxyFromInjector",
    "WeightQuantProxyFromInjectorBase",
    "WeightQuantProxyProtocol",
]

# Brevitas names brevitas_cpp does not support raise on use (brevitas_cpp._unsupported).
__getattr__ = unsupported_getattr(__name__)
