"""The torch version as Brevitas exposes it (``brevitas.torch_version``, a
``packaging.version.Version``), so that user code written as
``torch_version >= version.parse("2.1")`` keeps working after switching imports.

A leaf: it imports no package of brevitas_cpp."""

from typing import Callable

import torch

try:  # Brevitas's type; user code compares it against packaging.version.parse(...)
    from packaging.version import Version
except ImportError:  # packaging is not a dependency: fall back to the copy torch vendors
    from torch._vendor.packaging.version import Version  # type: ignore[no-redef]

__all__ = ["Version", "is_dynamo_compiling", "parse_torch_version", "torch_version"]

_CPU_SUFFIX = "+cpu"


def parse_torch_version(raw: str) -> Version:
    """A CPU build's "+cpu" local tag is dropped (Brevitas does the same, so that
    "2.13.0+cpu" == Version("2.13.0")); any other local tag, such as "+cu121", is kept."""
    return Version(raw.removesuffix(_CPU_SUFFIX))


torch_version: Version = parse_torch_version(torch.__version__)

# Brevitas exposes torch._dynamo.is_compiling; torch.compiler.is_compiling is its public name.
is_dynamo_compiling: Callable[[], bool] = torch.compiler.is_compiling
