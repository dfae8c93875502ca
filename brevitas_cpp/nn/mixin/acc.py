"""Mixin that re-quantizes an accumulator (``trunc_quant``: truncation or rounding of low bits,
as TruncAvgPool2d does). Its keywords carry no prefix."""

from typing import Optional, Type, Union

from brevitas_cpp._unsupported import unsupported_getattr
from brevitas_cpp.inject import ExtendedInjector, Injector
from brevitas_cpp.proxy.runtime_quant import AccQuantProxyProtocol
from brevitas_cpp.quant import NoneTruncQuant

from .base import QuantProxyMixin

__all__ = ["AccQuantType", "TruncMixin"]

AccQuantType = Union[AccQuantProxyProtocol, Type[Injector], Type[ExtendedInjector]]


class TruncMixin(QuantProxyMixin):
    """Adds ``trunc_quant``; the layer's keywords that no other quantizer claims go to it."""

    def __init__(self, trunc_quant: Optional[AccQuantType], **kwargs):
        QuantProxyMixin.__init__(
            self,
            quant=trunc_quant,
            proxy_protocol=AccQuantProxyProtocol,
            none_quant_injector=NoneTruncQuant,
            kwargs_prefix="",
            proxy_prefix="trunc_",
            **kwargs,
        )

    @property
    def is_trunc_quant_enabled(self) -> bool:
        return self.trunc_quant.is_quant_enabled


# Brevitas names brevitas_cpp does not support raise on use (brevitas_cpp._unsupported).
__getattr__ = unsupported_getattr(__name__)
