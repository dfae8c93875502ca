"""Export of quantized models (Brevitas's brevitas.export): ONNX QCDQ files checked by
onnxruntime, torch QCDQ programs (torch.export), and the integer view of the weights. Sits above
nn and graph; nothing imports it. ONNX needs the optional ``onnx`` and ``onnxruntime``
packages (``pip install 'brevitas_cpp[export]'``)."""

from brevitas_cpp._unsupported import unsupported_getattr
from brevitas_cpp.export.check import OnnxAgreement, QuantizerAgreement, check_onnx_qcdq
from brevitas_cpp.export.errors import ExportError
from brevitas_cpp.export.int_weights import export_int_weights
from brevitas_cpp.export.onnx_qcdq import export_onnx_qcdq
from brevitas_cpp.export.torch_qcdq import export_torch_qcdq

__all__ = [
    "ExportError",
    "OnnxAgreement",
    "QuantizerAgreement",
    "check_onnx_qcdq",
    "export_int_weights",
    "export_onnx_qcdq",
    "export_torch_qcdq",
]

# Brevitas's QONNX, debug and manager names raise on use (brevitas_cpp._unsupported).
__getattr__ = unsupported_getattr(__name__)
