"""Bit-width blocks: constant, stateful constant, learned, and MSB-clamped bit-widths."""

from brevitas_cpp.inject.enum import BitWidthImplType

from .const import BitWidthConst, BitWidthStatefulConst, MsbClampBitWidth
from .parameter import BitWidthParameter, RemoveBitwidthParameter

__all__ = [
    "BitWidthConst",
    "BitWidthImplType",
    "BitWidthParameter",
    "BitWidthStatefulConst",
    "MsbClampBitWidth",
    "RemoveBitwidthParameter",
]
