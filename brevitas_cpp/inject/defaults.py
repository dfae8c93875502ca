"""Brevitas's ``brevitas.inject.defaults``: the ready-made quantizers of ``quant.base`` and
``quant.scaled_int`` under one import. It imports ``brevitas_cpp.quant``, so it ranks above the
rest of ``inject`` (``tests/test_import_direction.py``) and ``inject/__init__`` never imports it."""

from brevitas_cpp._unsupported import unsupported_getattr
from brevitas_cpp.quant import base, scaled_int
from brevitas_cpp.quant.base import *  # noqa: F401,F403
from brevitas_cpp.quant.scaled_int import *  # noqa: F401,F403

__all__ = sorted(set(base.__all__) | set(scaled_int.__all__))

# Brevitas names brevitas_cpp does not support raise on use (brevitas_cpp._unsupported).
__getattr__ = unsupported_getattr(__name__)
