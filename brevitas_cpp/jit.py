"""The TorchScript switch: with ``BREVITAS_JIT=1`` core blocks are old-style
``torch.jit.ScriptModule``s with compiled methods; otherwise the same classes are plain
``nn.Module``s and the decorators do nothing."""

import pickle
from typing import Any, Callable, TypeVar

import torch

from brevitas_cpp.config import JIT_ENABLED

F = TypeVar("F", bound=Callable[..., Any])


def _passthrough(fn: F) -> F:
    return fn


def _plain_attribute(value: Any, type: Any) -> Any:  # noqa: A002  (torch.jit.Attribute's name)
    return value


if JIT_ENABLED:

    class ScriptModule(torch.jit.ScriptModule):
        """torch.jit.ScriptModule, refusing copy.deepcopy: torch copies an old-style script
        module into a bare RecursiveScriptModule whose parameters are non-leaf clones (they
        would never learn) and which has lost its Python state_dict hooks. Pickling (torch.save
        of a whole model) is refused too, with what to do instead: the compiled module has no
        state pickle can save."""

        def __deepcopy__(self, memo):
            raise TypeError(
                f"copy.deepcopy of {type(self).__name__} is not supported with BREVITAS_JIT=1: "
                "torch would return a TorchScript copy whose learned parameters no longer "
                "receive gradients. Build a new model and load_state_dict() into it, or run "
                "with BREVITAS_JIT=0."
            )

        def __reduce_ex__(self, protocol):
            raise pickle.PicklingError(
                f"pickling {type(self).__name__} (torch.save of a whole model) is not supported "
                "with BREVITAS_JIT=1: its blocks are compiled TorchScript modules. Save "
                "model.state_dict() and load_state_dict() it into a new model, save "
                "torch.jit.script(model), or run with BREVITAS_JIT=0."
            )

    script_method = torch.jit.script_method
    script = torch.jit.script
    ignore = torch.jit.ignore
    Attribute = torch.jit.Attribute
else:
    script_method = _passthrough
    script = _passthrough
    ignore = _passthrough
    ScriptModule = torch.nn.Module
    Attribute = _plain_attribute

__all__ = ["Attribute", "JIT_ENABLED", "ScriptModule", "ignore", "script", "script_method"]


def recording_graph() -> bool:
    """Whether torch.jit.trace or torch.compile is recording a graph now: a Python branch on a
    tensor's value would be fixed into it (or break it). Eager Python only."""
    return torch.jit.is_tracing() or torch.compiler.is_compiling()
