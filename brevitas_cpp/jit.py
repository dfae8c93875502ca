"""The TorchScript switch: with ``BREVITAS_JIT=1`` core blocks are old-style
``torch.jit.ScriptModule``s with compiled methods; otherwise the same classes are plain
``nn.Module``s and the decorators do nothing."""

from typing import Any, Callable, TypeVar

import torch

from brevitas_cpp.config import JIT_ENABLED

F = TypeVar("F", bound=Callable[..., Any])


def _passthrough(fn: F) -> F:
    return fn


def _plain_attribute(value: Any, type: Any) -> Any:  # noqa: A002  (torch.jit.Attribute's name)
    return value


if JIT_ENABLED:
    script_method = torch.jit.script_method
    script = torch.jit.script
    ignore = torch.jit.ignore
    ScriptModule = torch.jit.ScriptModule
    Attribute = torch.jit.Attribute
else:
    script_method = _passthrough
    script = _passthrough
    ignore = _passthrough
    ScriptModule = torch.nn.Module
    Attribute = _plain_attribute

__all__ = ["Attribute", "JIT_ENABLED", "ScriptModule", "ignore", "script", "script_method"]
