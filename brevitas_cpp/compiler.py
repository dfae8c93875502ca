"""Brevitas's ``brevitas.compiler``: ``disable`` keeps a function out of torch.compile's graphs
(``torch._dynamo.disable``, which Brevitas uses from torch 2.1 on; brevitas_cpp needs a newer
torch). A leaf: it imports no package of brevitas_cpp."""

from typing import Any, Callable

import torch

from brevitas_cpp._torch_version import torch_version

__all__ = ["disable", "torch_version"]

disable: Callable[..., Any] = torch._dynamo.disable
