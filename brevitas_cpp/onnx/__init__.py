"""Brevitas's ``brevitas.onnx``, its older home of the ONNX exports: ``export_onnx_qcdq`` is
brevitas_cpp.export's; the QONNX and debug exports raise on use (``brevitas_cpp._unsupported``).
Ranked above export, which it re-exports."""

from brevitas_cpp._unsupported import unsupported_getattr
from brevitas_cpp.export import export_onnx_qcdq

__all__ = ["export_onnx_qcdq"]

__getattr__ = unsupported_getattr(__name__)
