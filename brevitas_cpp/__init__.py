"""brevitas_cpp: quantization-aware training for PyTorch, arithmetic in C++ custom ops.

Importing the package loads the op library, so every op is available as
``torch.ops.brevitas_cpp.<name>``, and lets every module path of Brevitas 0.12.1 import
(``_unsupported``: the names brevitas_cpp does not support raise on use, saying what to use).
"""

import os

from brevitas_cpp._load import build_info
from brevitas_cpp._torch_version import is_dynamo_compiling, torch_version
from brevitas_cpp._unsupported import install_stub_finder

__all__ = [
    "NATIVE_STE_BACKEND_LOADED",
    "build_info",
    "compiler",
    "function",
    "is_dynamo_compiling",
    "pkg_dir",
    "torch_version",
]
__version__ = "0.1.0"

pkg_dir: str = os.path.dirname(os.path.abspath(__file__))
# Brevitas's flag for its optional C++ STE ops (built with BREVITAS_JIT or
# BREVITAS_NATIVE_STE_BACKEND); every op here is C++, always loaded (_load raises otherwise).
NATIVE_STE_BACKEND_LOADED: bool = True

install_stub_finder()

# compiler: the step counters are symbolic ints under torch.compile from here on.
from brevitas_cpp import compiler, function  # noqa: E402
