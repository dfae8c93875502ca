"""Brevitas's ``brevitas.export.inference``: ``quant_inference_mode`` (manager.py).
``InferenceManager`` and the handlers raise on use (``brevitas_cpp._unsupported``)."""

from brevitas_cpp._unsupported import unsupported_getattr
from brevitas_cpp.export.inference.manager import quant_inference_mode

__all__ = ["quant_inference_mode"]

__getattr__ = unsupported_getattr(__name__)
