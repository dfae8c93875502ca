"""Ready-made quantizers (Brevitas's brevitas.quant): injector classes passed to quant layers,
e.g. ``weight_quant=Int8WeightPerChannelFloat``. Compose new ones by inheritance or ``.let()``.
Besides Brevitas's names, ``int8_ema`` holds seed 003's max-abs / EMA-threshold quantizers and
``distiller`` Distiller's PACT, DoReFa and range-linear QAT quantizers."""

from brevitas_cpp._unsupported import unsupported_getattr
from brevitas_cpp.quant import (
    binary,
    distiller,
    fixed_point,
    int8_ema,
    none,
    scaled_int,
    shifted_scaled_int,
    ternary,
)
from brevitas_cpp.quant.binary import *  # noqa: F401,F403
from brevitas_cpp.quant.distiller import *  # noqa: F401,F403
from brevitas_cpp.quant.fixed_point import *  # noqa: F401,F403
from brevitas_cpp.quant.int8_ema import *  # noqa: F401,F403
from brevitas_cpp.quant.none import *  # noqa: F401,F403
from brevitas_cpp.quant.scaled_int import *  # noqa: F401,F403
from brevitas_cpp.quant.shifted_scaled_int import *  # noqa: F401,F403
from brevitas_cpp.quant.ternary import *  # noqa: F401,F403

__all__ = (
    binary.__all__
    + distiller.__all__
    + fixed_point.__all__
    + int8_ema.__all__
    + none.__all__
    + scaled_int.__all__
    + shifted_scaled_int.__all__
    + ternary.__all__
)

# Brevitas names brevitas_cpp does not support raise on use (brevitas_cpp._unsupported).
__getattr__ = unsupported_getattr(__name__)
