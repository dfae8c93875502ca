"""brevitas_cpp: quantization-aware training for PyTorch, arithmetic in C++ custom ops.

Importing the package loads the op library, so every op is available as
``torch.ops.brevitas_cpp.<name>``.
"""

from brevitas_cpp._load import build_info
from brevitas_cpp._torch_version import is_dynamo_compiling, torch_version

__all__ = ["build_info", "function", "is_dynamo_compiling", "torch_version"]
__version__ = "0.1.0"

from brevitas_cpp import function  # noqa: E402
